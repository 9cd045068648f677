"""The result store on bad ground: a damaged database, an unusable directory, two runs at once."""

import sqlite3
import subprocess
import sys
import textwrap

import pytest

from margindist.cli import main
from margindist.experiments.store import ResultStore, StoreError

ARGS = ["bench", "--datasets", "heart", "--methods", "mamc", "--repeats", "2", "--quiet"]


def _record(key="k1", score=0.5):
    return {"key": key, "config": "c", "dataset": "d", "method": "m", "split": 0, "phase": "eval",
            "status": "ok", "score": score}


def test_damaged_database_names_the_file_and_the_remedy(tmp_path):
    db = tmp_path / "results.sqlite"
    db.write_bytes(b"this is not a database, just some bytes " * 50)
    with pytest.raises(StoreError, match="--force") as info:
        ResultStore(db)
    assert str(db) in str(info.value)
    assert db.read_bytes().startswith(b"this is not")  # untouched without recover


def test_recover_moves_the_damaged_database_aside(tmp_path):
    db = tmp_path / "results.sqlite"
    db.write_bytes(b"garbage" * 100)
    with ResultStore(db, recover=True) as store:
        assert store.recovered_from is not None and store.recovered_from.read_bytes().startswith(b"garbage")
        store.put(_record())
        assert store.count() == 1
    with ResultStore(db) as store:  # a healthy store now
        assert store.get("k1")["score"] == 0.5


def test_truncated_database_is_reported_as_damaged(tmp_path):
    db = tmp_path / "results.sqlite"
    with ResultStore(db) as store:
        for i in range(300):
            store.put(_record(f"k{i}", i / 300))
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2] + b"\x00" * 100 + data[len(data) // 2 + 100:])
    with pytest.raises(StoreError, match="damaged"):
        ResultStore(db)


def test_unusable_locations_name_the_path(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="--out") as info:
        ResultStore(blocker / "sub" / "results.sqlite")
    assert str(blocker) in str(info.value)
    (tmp_path / "results.sqlite").mkdir()  # the database path is a directory
    with pytest.raises(StoreError, match="Cannot open or create"):
        ResultStore(tmp_path / "results.sqlite")


def test_second_exclusive_opening_is_refused_while_the_first_holds_it(tmp_path):
    db = tmp_path / "results.sqlite"
    first = ResultStore(db, exclusive=True)
    try:
        with pytest.raises(StoreError, match="Another margindist run"):
            ResultStore(db, exclusive=True)
        with ResultStore(db) as reader:  # reading is always allowed
            assert reader.count() == 0
    finally:
        first.close()
    with ResultStore(db, exclusive=True):  # released on close
        pass


def test_lock_is_released_when_the_holder_is_killed(tmp_path):
    db = tmp_path / "results.sqlite"
    code = textwrap.dedent(f"""
        import os, signal
        from margindist.experiments.store import ResultStore
        s = ResultStore({str(db)!r}, exclusive=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    subprocess.run([sys.executable, "-c", code], check=False)
    with ResultStore(db, exclusive=True):
        pass


def test_cli_reports_a_damaged_store_and_force_recovers(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.sqlite").write_bytes(b"not sqlite" * 100)
    assert main([*ARGS, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "results.sqlite" in err and "--force" in err and "Traceback" not in err
    assert main([*ARGS, "--out", str(out), "--force"]) == 0
    assert list(out.glob("results.sqlite.damaged-*"))


def test_cli_refuses_a_second_run_on_the_same_out(tmp_path, capsys):
    out = tmp_path / "run"
    holder = ResultStore(out / "results.sqlite", exclusive=True)
    try:
        assert main([*ARGS, "--out", str(out)]) == 1
        assert "Another margindist run" in capsys.readouterr().err
    finally:
        holder.close()


def test_records_of_an_older_store_load_as_typed_records(tmp_path):
    from margindist.experiments.records import TaskRecord

    db = tmp_path / "results.sqlite"
    # a store written before typed records: rows from plain dicts, some without version / params / info
    with ResultStore(db) as store:
        store.put(_record("old", 0.75))
        store.put({**_record("full", 0.5), "fit_time": 0.1, "params": {"C": 2.0}, "info": {"choice": [1]},
                   "version": "0.0.1"})
    with ResultStore(db) as store:
        rows = store.get_many(["old", "full"])
    old, full = TaskRecord.from_dict(rows["old"]), TaskRecord.from_dict(rows["full"])
    assert old.ok and old.score == 0.75 and old.params == {} and old.info == {} and old.version is None
    assert full.params == {"C": 2.0} and full.choice == [1] and full["fit_time"] == 0.1
    assert full.get("version") == "0.0.1" and full.get("nonsense", 3) == 3
    # typed records are stored in the same format and read back unchanged
    with ResultStore(db) as store:
        store.put(full)
        assert TaskRecord.from_dict(store.get("full")) == full
        assert store.get("full") == full.to_dict()
