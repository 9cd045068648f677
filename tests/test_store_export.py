"""A run's result store as a text file and back: `margindist store export` / `store import`."""

import gzip
import json

import pytest

from margindist.cli import main
from margindist.experiments.store import ResultStore, read_export, write_export

ARGS = ["bench", "--datasets", "heart", "--methods", "mamc", "lssvm", "--repeats", "3", "--quiet"]


def _record(key, score=0.5, **kw):
    rec = {"key": key, "config": "c", "dataset": "d", "method": "m", "split": 0, "phase": "eval",
           "status": "ok", "score": score, "params": {"C": 1.0}, "info": {"n_train": 10}}
    rec.update(kw)
    return rec


def _store(path, *records):
    with ResultStore(path / "results.sqlite") as store:
        for r in records:
            store.put(r)


def _scores(path):
    with ResultStore(path / "results.sqlite") as store:
        return {r["key"]: r["score"] for r in store.all_records()}


def test_an_imported_run_resumes_without_recomputing(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(ARGS + ["--out", str(a)]) == 0
    report_a = (a / "report.md").read_text()
    capsys.readouterr()
    assert main(["store", "export", str(a), str(tmp_path / "run.jsonl.gz")]) == 0
    assert main(["store", "import", str(tmp_path / "run.jsonl.gz"), "--out", str(b)]) == 0
    assert "imported 6 records of bench 'bench'" in capsys.readouterr().err
    with ResultStore(a / "results.sqlite") as sa, ResultStore(b / "results.sqlite") as sb:
        assert sa.all_records() == sb.all_records()  # every field, the JSON ones decoded alike
    assert json.loads((b / "experiment.json").read_text()) == json.loads((a / "experiment.json").read_text())
    assert main(ARGS + ["--out", str(b)]) == 0
    out = capsys.readouterr().out
    assert "(0 computed now)" in out
    assert (b / "report.md").read_text().split("\n## ")[1:] == report_a.split("\n## ")[1:]


def test_the_same_records_give_the_same_bytes(tmp_path):
    recs = [_record("k2", 0.25), _record("k1", 0.75)]
    write_export(tmp_path / "x.jsonl.gz", recs, identity=None)
    write_export(tmp_path / "y.jsonl.gz", recs[::-1], identity=None)  # written in key order
    assert (tmp_path / "x.jsonl.gz").read_bytes() == (tmp_path / "y.jsonl.gz").read_bytes()
    write_export(tmp_path / "z.jsonl", recs, identity=None)  # plain text for another name
    lines = (tmp_path / "z.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["n_records"] == 2 and [json.loads(x)["key"] for x in lines[1:]] == ["k1", "k2"]
    header, back = read_export(tmp_path / "x.jsonl.gz")
    assert header["format"] == "margindist-results" and [r["key"] for r in back] == ["k1", "k2"]
    assert back[0]["params"] == {"C": 1.0} and back[0]["info"] == {"n_train": 10}


def test_stored_records_are_kept_unless_replace(tmp_path):
    _store(tmp_path / "src", _record("k1", 0.9), _record("k2", 0.8))
    assert main(["store", "export", str(tmp_path / "src"), str(tmp_path / "f.jsonl"), "--quiet"]) == 0
    _store(tmp_path / "dst", _record("k1", 0.5))
    assert main(["store", "import", str(tmp_path / "f.jsonl"), "--out", str(tmp_path / "dst"), "--quiet"]) == 0
    assert _scores(tmp_path / "dst") == {"k1": 0.5, "k2": 0.8}
    assert main(["store", "import", str(tmp_path / "f.jsonl"), "--out", str(tmp_path / "dst"), "--replace",
                 "--quiet"]) == 0
    assert _scores(tmp_path / "dst") == {"k1": 0.9, "k2": 0.8}


def test_merge_counts_what_it_wrote(tmp_path):
    with ResultStore(tmp_path / "results.sqlite") as store:
        store.put(_record("k1"))
        assert store.merge([_record("k1", 0.1), _record("k2")]) == (1, 1)
        assert store.merge([_record("k1", 0.1), _record("k3")], replace=True) == (2, 0)
        assert store.get("k1")["score"] == 0.1 and store.count() == 3


def test_export_reads_a_store_that_a_run_holds(tmp_path):
    _store(tmp_path, _record("k1"))
    with ResultStore(tmp_path / "results.sqlite", exclusive=True) as running:
        running.put(_record("k2"))
        assert main(["store", "export", str(tmp_path), str(tmp_path / "now.jsonl"), "--quiet"]) == 0
    assert [r["key"] for r in read_export(tmp_path / "now.jsonl")[1]] == ["k1", "k2"]


def _write_lines(path, header, *records):
    path.write_text("\n".join(json.dumps(x) for x in [header, *records]) + "\n")


GOOD_HEADER = {"format": "margindist-results", "version": 1, "identity": None, "n_records": 1}


@pytest.mark.parametrize("content, message", [
    (None, "not JSON"),
    ((dict(GOOD_HEADER, format="other"), _record("k1")), "not a margindist result export"),
    ((dict(GOOD_HEADER, version=7), _record("k1")), "export version 7"),
    ((dict(GOOD_HEADER, n_records=3), _record("k1")), "truncated: its header announces 3 records"),
    ((GOOD_HEADER, {k: v for k, v in _record("k1").items() if k != "key"}), "line 2: the record has no key"),
    ((GOOD_HEADER, _record("k1", score="high")), "line 2: field 'score' is str"),
    ((GOOD_HEADER, _record("k1", split=True)), "line 2: field 'split' is bool"),
    ((GOOD_HEADER, [1, 2]), "line 2: a JSON object was expected"),
])
def test_a_bad_file_is_refused_and_the_store_untouched(tmp_path, capsys, content, message):
    f = tmp_path / "bad.jsonl"
    if content is None:
        f.write_text("this is not an export\n")
    else:
        _write_lines(f, *content)
    assert main(["store", "import", str(f), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert message in err and str(f) in err
    assert not (tmp_path / "run").exists()


def test_a_damaged_gzip_file_is_refused(tmp_path, capsys):
    write_export(tmp_path / "x.jsonl.gz", [_record("k1")])
    data = (tmp_path / "x.jsonl.gz").read_bytes()
    (tmp_path / "x.jsonl.gz").write_bytes(data[: len(data) // 2])
    assert main(["store", "import", str(tmp_path / "x.jsonl.gz"), "--out", str(tmp_path / "run")]) == 1
    assert "is damaged" in capsys.readouterr().err
    assert gzip.decompress(data)  # the intact file was a valid gzip stream


def test_another_experiments_directory_is_refused_without_force(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(ARGS + ["--out", str(a)]) == 0
    assert main(["bench", "--datasets", "sonar", "--methods", "mamc", "--repeats", "2", "--name", "other",
                 "--quiet", "--out", str(b)]) == 0
    assert main(["store", "export", str(a), str(tmp_path / "a.jsonl"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["store", "import", str(tmp_path / "a.jsonl"), "--out", str(b)]) == 2
    assert "holds a different experiment" in capsys.readouterr().err
    n_before = len(_scores(b))
    assert main(["store", "import", str(tmp_path / "a.jsonl"), "--out", str(b), "--force", "--quiet"]) == 0
    assert len(_scores(b)) == n_before + 6


def test_usage_errors(tmp_path, capsys):
    assert main(["store", "export", str(tmp_path), str(tmp_path / "x.jsonl")]) == 2
    assert "holds no result store" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("mine")
    _write_lines(tmp_path / "f.jsonl", GOOD_HEADER, _record("k1"))
    assert main(["store", "import", str(tmp_path / "f.jsonl"), "--out", str(tmp_path)]) == 2
    assert "is not empty and holds no margindist results" in capsys.readouterr().err
    assert main(["store"]) == 2


def test_failed_records_and_numpy_values_travel_too(tmp_path):
    import numpy as np

    failed = _record("k3", score=None, status="failed", fit_time=None,
                     info={"error": "ValueError: boom", "traceback": "Traceback ...\n  line 1\n"})
    ok = _record("k4", score=np.float64(0.75), params={"C": np.float64(2.0), "p": np.int64(3)})
    _store(tmp_path / "src", failed, ok)
    assert main(["store", "export", str(tmp_path / "src"), str(tmp_path / "f.jsonl.gz"), "--quiet"]) == 0
    assert main(["store", "import", str(tmp_path / "f.jsonl.gz"), "--out", str(tmp_path / "dst"), "--quiet"]) == 0
    with ResultStore(tmp_path / "src" / "results.sqlite") as a, ResultStore(tmp_path / "dst" / "results.sqlite") as b:
        assert a.all_records() == b.all_records()
        assert b.get("k3")["info"]["traceback"].endswith("line 1\n") and b.get("k3")["score"] is None
        assert b.get("k4")["params"] == {"C": 2.0, "p": 3}


def test_import_is_refused_while_a_run_holds_the_store(tmp_path, capsys):
    _store(tmp_path / "src", _record("k1"))
    assert main(["store", "export", str(tmp_path / "src"), str(tmp_path / "f.jsonl"), "--quiet"]) == 0
    _store(tmp_path / "dst", _record("k0"))
    with ResultStore(tmp_path / "dst" / "results.sqlite", exclusive=True):
        assert main(["store", "import", str(tmp_path / "f.jsonl"), "--out", str(tmp_path / "dst")]) == 1
        assert "Another margindist run is using the result store" in capsys.readouterr().err
    assert _scores(tmp_path / "dst") == {"k0": 0.5}
