import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from margindist.datasets import (
    BUNDLED_DIR,
    DatasetFormatError,
    DatasetNotFoundError,
    list_datasets,
    load_dataset,
)

BUNDLED = ["australian", "german", "wdbc", "pima", "titanic", "sonar", "heart", "ionosphere",
           "haberman", "banana", "magic"]


def _manifest(data_dir):
    return json.loads((Path(data_dir) / "manifest.json").read_text())


@pytest.mark.slow  # reads every CSV of the shared collection
def test_every_shared_csv_matches_its_manifest(data_dir):
    manifest = _manifest(data_dir)
    assert len(manifest) >= 25
    for name, meta in manifest.items():
        b = load_dataset(name, data_dir=data_dir, return_bunch=True)
        assert b.data.shape == (meta["n"], meta["d"]), name
        assert sorted(str(c) for c in b.classes) == sorted(meta["classes"]), name
        counts = dict(zip(*np.unique(b.target, return_counts=True)))
        assert {str(k): int(v) for k, v in counts.items()} == dict(zip(meta["classes"], meta["counts"])), name
        assert np.all(np.isfinite(b.data))


@pytest.mark.parametrize("name", BUNDLED)
def test_paper_datasets_are_bundled(name, monkeypatch):
    monkeypatch.delenv("MARGINDIST_DATA", raising=False)
    b = load_dataset(name, return_bunch=True)
    assert b.source == "bundled"
    meta = json.loads((BUNDLED_DIR / "manifest.json").read_text())[name]
    assert b.data.shape == (meta["n"], meta["d"])
    assert b.classes.size == 2


def test_never_bundled():
    present = {p.name for p in BUNDLED_DIR.iterdir()}
    for name in ("glass", "dermatology", "cornell"):
        assert not any(f.startswith(name + ".") for f in present)


def test_bundled_equals_shared(data_dir):
    X1, y1 = load_dataset("australian", data_dir=data_dir)
    X2, y2 = load_dataset(BUNDLED_DIR / "australian.csv.gz")
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)


def test_sklearn_builtins(monkeypatch):
    monkeypatch.delenv("MARGINDIST_DATA", raising=False)
    b = load_dataset("digits", return_bunch=True)
    assert b.source == "sklearn" and b.data.shape == (1797, 64)
    X, y = load_dataset("breast_cancer")
    assert X.shape == (569, 30)


def test_string_labels(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("a,b,label\n1,2,cat\n3,4,dog\n5,6,cat\n")
    X, y = load_dataset(p)
    assert X.shape == (3, 2) and y.dtype.kind == "U" and list(y) == ["cat", "dog", "cat"]


def test_data_dir_and_env(tmp_path, monkeypatch):
    (tmp_path / "tiny.csv").write_text("f0,label\n1.5,1\n2.5,-1\n")
    monkeypatch.setenv("MARGINDIST_DATA", str(tmp_path))
    X, y = load_dataset("tiny")
    assert y.dtype.kind == "i" and list(y) == [1, -1]
    names = {d["name"]: d for d in list_datasets()}
    assert names["tiny"]["source"] == "data_dir"
    assert names["australian"]["source"] == "bundled"
    assert names["digits"]["source"] == "sklearn"


@pytest.mark.parametrize(
    "content, line, what",
    [
        ("f0,f1,label\n1,2,0\n3,x,1\n", 3, "'x' is not a number"),
        ("f0,f1,label\n1,2,0\n3,1\n4,5,1\n", 3, "expected 2 feature values"),
        ("f0,f1,label\n1,2,0\n\n3,4,\n", 4, "no label"),
        ("f0,f1,label\n1,nan,0\n", 2, "not finite"),
    ],
)
def test_malformed_csv_names_file_and_line(tmp_path, content, line, what):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(DatasetFormatError) as info:
        load_dataset(p)
    msg = str(info.value)
    assert str(p) in msg and f"line {line}" in msg and what in msg


def test_gzip_csv(tmp_path):
    p = tmp_path / "z.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("f0,label\n1,a\n2,b\n")
    X, y = load_dataset(p)
    assert X.shape == (2, 1)


def test_svmlight(tmp_path):
    p = tmp_path / "d.svm"
    p.write_text("1 1:0.5 3:1.0\n-1 2:2.0\n")
    X, y = load_dataset(p)
    assert sp.issparse(X) and X.shape == (2, 3) and list(y) == [1, -1]
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5 x:1\n")
    with pytest.raises(DatasetFormatError, match="bad.svm"):
        load_dataset(bad)


KEEL = """@relation toy
@attribute A1 real [0.0, 10.0]
@attribute Color {red, green, blue}
@attribute Flag {no, yes}
@attribute Class {positive, negative}
@inputs A1, Color, Flag
@outputs Class
@data
1.5, red, no, positive
2.0, blue, yes, negative
3.0, green, no, positive
"""


def test_keel_dat(tmp_path):
    p = tmp_path / "toy.dat"
    p.write_text(KEEL)
    b = load_dataset(p, return_bunch=True)
    np.testing.assert_array_equal(b.data, [[1.5, 1, 0, 0, 0], [2.0, 0, 0, 1, 1], [3.0, 0, 1, 0, 0]])
    assert b.feature_names == ["A1", "Color=red", "Color=green", "Color=blue", "Flag"]
    assert list(b.target) == ["positive", "negative", "positive"]
    bad = tmp_path / "bad.dat"
    bad.write_text(KEEL.replace("2.0, blue", "?, blue"))
    with pytest.raises(DatasetFormatError, match=r"bad\.dat: line 10: attribute 'A1': missing value"):
        load_dataset(bad)


def test_arff(tmp_path):
    p = tmp_path / "toy.arff"
    p.write_text("% comment\n@RELATION t\n@ATTRIBUTE x NUMERIC\n@ATTRIBUTE y NUMERIC\n"
                 "@ATTRIBUTE class {a,b}\n@DATA\n1,2,a\n3,4,b\n")
    X, y = load_dataset(p)
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    assert list(y) == ["a", "b"]
    bad = tmp_path / "bad.arff"
    bad.write_text("@RELATION t\n@ATTRIBUTE x NUMERIC\n@ATTRIBUTE class {a,b}\n@DATA\n1,a\n2,c\n")
    with pytest.raises(DatasetFormatError, match=r"bad\.arff: line 6: .*'c' is not one of"):
        load_dataset(bad)


def test_unknown_name_offline_says_where_to_put_the_file(monkeypatch, tmp_path):
    monkeypatch.setenv("MARGINDIST_DATA", str(tmp_path))
    with pytest.raises(DatasetNotFoundError, match="no_such_dataset.csv") as info:
        load_dataset("no_such_dataset", allow_download=False)
    assert "MARGINDIST_DATA" in str(info.value)
    with pytest.raises(DatasetNotFoundError, match="No such dataset file"):
        load_dataset(tmp_path / "missing.csv")


# ---------------------------------------------------------------- names: suggestions, no network for typos

def _no_network(monkeypatch):
    """Make every OpenML access fail the test."""
    import sklearn.datasets

    def fail(*args, **kwargs):
        raise AssertionError("OpenML must not be contacted for a near-miss of a local name")

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fail)


def _fake_openml(monkeypatch, calls):
    import sklearn.datasets
    from sklearn.utils import Bunch

    def fake(name, **kwargs):
        calls.append(name)
        if name.startswith("missing"):
            raise ValueError(f"No active dataset {name} found.")
        return Bunch(data=np.array([[1.0, 2.0], [3.0, 4.0]]), target=np.array(["a", "b"]), feature_names=["u", "v"])

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake)


@pytest.mark.parametrize(("typo", "meant"), [("australain", "australian"), ("Australian", "australian"),
                                             ("ionosphre", "ionosphere"), ("breast-cancer", "breast_cancer")])
def test_near_miss_suggests_without_network(typo, meant, monkeypatch):
    _no_network(monkeypatch)
    with pytest.raises(DatasetNotFoundError, match=f"did you mean '{meant}'") as info:
        load_dataset(typo)
    assert f"openml:{typo}" in str(info.value)
    with pytest.raises(DatasetNotFoundError, match=f"did you mean '{meant}'"):
        load_dataset(typo, allow_download=False)


def test_near_miss_of_a_data_dir_name(tmp_path, monkeypatch):
    _no_network(monkeypatch)
    (tmp_path / "my_survey.csv").write_text("f0,label\n1.5,1\n2.5,-1\n")
    with pytest.raises(DatasetNotFoundError, match="did you mean 'my_survey'"):
        load_dataset("my_survy", data_dir=tmp_path)


def test_far_names_still_go_to_openml(monkeypatch):
    calls = []
    _fake_openml(monkeypatch, calls)
    b = load_dataset("credit-g", return_bunch=True)
    assert calls == ["credit-g"] and b.source == "openml" and b.data.shape == (2, 2)
    # similar to the bundled "heart" but below the typo cut-off: a real OpenML name
    load_dataset("heart-c")
    assert calls[-1] == "heart-c"
    # not found on OpenML either: the error keeps looser suggestions
    with pytest.raises(DatasetNotFoundError, match="OpenML failed"):
        load_dataset("missing_set_xyz")
    assert calls[-1] == "missing_set_xyz"
    with pytest.raises(DatasetNotFoundError, match="did you mean 'german'"):
        load_dataset("germna", allow_download=False)


def test_openml_prefix_skips_the_typo_check(monkeypatch):
    calls = []
    _fake_openml(monkeypatch, calls)
    b = load_dataset("openml:australain", return_bunch=True)
    assert calls == ["australain"] and b.name == "australain" and b.source == "openml"
    with pytest.raises(DatasetNotFoundError, match="needs a dataset name"):
        load_dataset("openml:")
