"""Splits, preprocessing, dataset specs, data-dependent grids and the CV search."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import pdist
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import GridSearchCV
from sklearn.svm import LinearSVC

from margindist.experiments.protocols import (
    DatasetSpec,
    Protocol,
    derive_seed,
    load_data,
    parse_dataset,
    preprocess,
)
from margindist.search import Scaled, cv_search, grid_points, pow2


@pytest.fixture
def y_unbalanced():
    return np.array([0] * 70 + [1] * 30)


def test_derive_seed_is_a_pure_function():
    assert derive_seed(0, "split", "heart", 3) == derive_seed(0, "split", "heart", 3)
    assert derive_seed(0, "split", "heart", 3) != derive_seed(0, "split", "heart", 4)
    assert derive_seed(0, "split", "heart", 3) != derive_seed(1, "split", "heart", 3)
    assert 0 <= derive_seed("x") < 2**32


def test_random_split_stratified_disjoint_and_order_free(y_unbalanced):
    p = Protocol("random", 0.8, n_repeats=10, seed=7)
    y = y_unbalanced
    later = p.split(y, 5, "d", 3)
    splits = [p.split(y, i, "d", 3) for i in range(10)]
    np.testing.assert_array_equal(later[0], splits[5][0])  # split 5 alone == split 5 after 0..4
    for tr, te in splits:
        assert tr.size == 80 and te.size == 20
        assert np.intersect1d(tr, te).size == 0
        assert np.sum(y[tr] == 1) == 24 and np.sum(y[te] == 1) == 6  # stratified
    assert len({tuple(tr) for tr, _ in splits}) == 10
    other = Protocol("random", 0.8, n_repeats=10, seed=8).split(y, 5, "d", 3)
    assert not np.array_equal(other[0], later[0])
    # the split depends on the dataset name as well, not on anything global
    assert not np.array_equal(p.split(y, 5, "e", 3)[0], later[0])
    with pytest.raises(ValueError, match="out of range"):
        p.split(y, 10, "d", 3)


def test_half_and_fixed_sizes(y_unbalanced):
    tr, te = Protocol("random", 0.5).split(y_unbalanced, 0, "d", 3)
    assert tr.size == 50 and te.size == 50
    p = Protocol("fixed", 40, 30, n_repeats=3)
    tr, te = p.split(y_unbalanced, 1, "d", 3)
    assert tr.size == 40 and te.size == 30 and np.intersect1d(tr, te).size == 0
    spec = DatasetSpec("d", train_size=20, test_size=60)  # per-dataset sizes win
    tr, te = p.split(y_unbalanced, 1, spec, 3)
    assert tr.size == 20 and te.size == 60
    with pytest.raises(ValueError, match="examples"):
        Protocol("fixed", 90, 30).split(y_unbalanced, 0, "d", 3)


def test_kfold_runs_partition_the_data(y_unbalanced):
    p = Protocol("kfold", n_repeats=2, n_folds=5, seed=1)
    assert p.n_splits == 10
    for run in range(2):
        tests = [p.split(y_unbalanced, run * 5 + f, "d", 3)[1] for f in range(5)]
        np.testing.assert_array_equal(np.sort(np.concatenate(tests)), np.arange(100))
    assert not np.array_equal(p.split(y_unbalanced, 0, "d", 3)[1], p.split(y_unbalanced, 5, "d", 3)[1])


def test_balanced_with_cap(y_unbalanced):
    p = Protocol("random", 0.5, balanced=True, max_train="4d")
    tr, te = p.split(y_unbalanced, 0, "d", 3)  # cap 12 -> 6 per class
    assert tr.size == 12 and np.sum(y_unbalanced[tr] == 1) == 6
    assert np.sum(y_unbalanced[te] == 0) == np.sum(y_unbalanced[te] == 1) == 24
    assert np.intersect1d(tr, te).size == 0


def test_max_train_cap_is_stratified(y_unbalanced):
    tr, te = Protocol("random", 0.8, max_train=40).split(y_unbalanced, 0, "d", 3)
    assert tr.size == 40 and np.sum(y_unbalanced[tr] == 1) == 12 and te.size == 20


def test_preprocess_uses_training_statistics_only(rng):
    Xtr = rng.normal(size=(30, 4)) * [1, 10, 100, 0.1] + 5
    Xte = rng.normal(size=(10, 4)) * [1, 10, 100, 0.1] + 5
    A, B = preprocess(Xtr, Xte, "minmax", False)
    lo, hi = Xtr.min(0), Xtr.max(0)
    np.testing.assert_allclose(A, (Xtr - lo) / (hi - lo))
    np.testing.assert_allclose(B, (Xte - lo) / (hi - lo))
    assert A.min() == 0 and A.max() == 1
    A, B = preprocess(Xtr, Xte, "standard", True)
    np.testing.assert_allclose(A[:, :4], (Xtr - Xtr.mean(0)) / Xtr.std(0))
    np.testing.assert_allclose(B[:, :4], (Xte - Xtr.mean(0)) / Xtr.std(0))
    assert np.all(A[:, 4] == 1) and np.all(B[:, 4] == 1)
    S, T = preprocess(sp.csr_matrix(np.abs(Xtr)), sp.csr_matrix(np.abs(Xte)), "minmax", True)
    assert sp.issparse(S) and sp.issparse(T) and S.shape == (30, 5)
    np.testing.assert_allclose(S.toarray()[:, :4], np.abs(Xtr) / np.abs(Xtr).max(0))


def test_parse_and_binarise_dataset():
    spec = parse_dataset("digits:5")
    assert spec.loader_name == "digits" and spec.positive == ("5",) and spec.name == "digits:5"
    assert parse_dataset("heart") == DatasetSpec("heart")
    with pytest.raises(ValueError):
        parse_dataset("digits:")
    X, y = load_data(spec)
    assert set(np.unique(y)) == {-1, 1} and np.sum(y == 1) == 182
    with pytest.raises(ValueError, match="not in"):
        load_data(DatasetSpec("d11", source="digits", positive=("11",)))
    # the identity of a spec ignores display-only fields
    assert DatasetSpec("a", label="A").to_dict() == DatasetSpec("a").to_dict()


def test_class_pair_dataset():
    """A one-vs-one task: keep two classes, binarise them."""
    from margindist.datasets import load_dataset

    Xall, yall = load_dataset("letter")
    X, y = load_data(DatasetSpec("letter-HK", source="letter", classes=("H", "K"), positive=("H",)))
    assert X.shape[0] == np.sum(np.isin(yall, ["H", "K"])) and X.shape[1] == Xall.shape[1]
    assert np.sum(y == 1) == np.sum(yall == "H") and np.sum(y == -1) == np.sum(yall == "K")
    np.testing.assert_array_equal(X[y == 1], Xall[yall == "H"])
    assert DatasetSpec("x", classes=("H", "K")).to_dict() != DatasetSpec("x").to_dict()
    with pytest.raises(ValueError, match="not in"):
        load_data(DatasetSpec("bad", source="letter", classes=("H", "?")))


def test_scaled_grids(rng):
    X = rng.normal(size=(50, 3))
    assert Scaled((1.0, 4.0), "per_feature").resolve(X, 8, 0) == [1 / 8, 0.5]
    s = pdist(X).mean()
    got = Scaled((0.5, 2.0), "rbf_width").resolve(X, 3, 0)
    np.testing.assert_allclose(got, [1 / (2 * (0.5 * s) ** 2), 1 / (2 * (2 * s) ** 2)], rtol=1e-12)
    assert pow2(-2, 2, 2) == (0.25, 1.0, 4.0)


def test_grid_order_last_parameter_fastest():
    pts = grid_points({"a": [1, 2], "b": [10, 20, 30]})
    assert pts[:3] == [(0, 0), (0, 1), (0, 2)] and len(pts) == 6


def _folds(y, k=3, seed=0):
    from sklearn.model_selection import StratifiedKFold

    return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def test_cv_search_matches_gridsearchcv(rng):
    from margindist.datasets import load_dataset

    X, y = load_dataset("heart")
    X, _ = preprocess(X, X[:1], "minmax", False)
    folds = _folds(y, 4)
    Cs = [0.01, 0.1, 1.0, 10.0]
    res = cv_search(lambda p: LinearSVC(random_state=0, **p), {"C": Cs}, X, y, folds)
    gs = GridSearchCV(LinearSVC(random_state=0), {"C": Cs}, cv=folds).fit(X, y)
    np.testing.assert_allclose(res.scores.mean(1), gs.cv_results_["mean_test_score"], rtol=0, atol=1e-15)
    assert res.best_params == gs.best_params_
    assert res.best_index == (Cs.index(gs.best_params_["C"]),)


class _Spy(ClassifierMixin, BaseEstimator):
    """Counts fresh instances and warm refits; fails for c < 0."""

    built = 0

    def __init__(self, c=1.0, warm_start=False):
        self.c = c
        self.warm_start = warm_start
        type(self).built += 1

    def fit(self, X, y):
        if self.c < 0:
            raise ValueError("negative c")
        self.warm_fits_ = getattr(self, "warm_fits_", -1) + 1 if self.warm_start else 0
        self.classes_ = np.unique(y)
        self.thr_ = np.median(X[:, 0]) + self.c * 0.0
        return self

    def predict(self, X):
        return self.classes_[(X[:, 0] > self.thr_).astype(int)]


def test_cv_search_warm_starts_along_the_last_parameter(rng):
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    folds = _folds(y, 3)
    grid = {"c": [0.1, 1.0, 10.0, 100.0]}
    exact = lambda est, X: True
    _Spy.built = 0
    cv_search(lambda p: _Spy(**p), grid, X, y, folds, warm_start=True, exact_warm_start=exact)
    assert _Spy.built == 3  # one estimator per fold, refitted along the path
    _Spy.built = 0
    cv_search(lambda p: _Spy(**p), grid, X, y, folds, warm_start=False, exact_warm_start=exact)
    assert _Spy.built == 12
    _Spy.built = 0
    # a change of an outer parameter starts a fresh chain
    cv_search(lambda p: _Spy(**p), {"warm_start": [False, True], **grid}, X, y, folds, warm_start=True,
              exact_warm_start=exact)
    assert _Spy.built == 6
    # no warm starts where a warm refit is not the cold model (path-dependent solvers)
    for not_exact in (None, lambda est, X: False):
        _Spy.built = 0
        cv_search(lambda p: _Spy(**p), grid, X, y, folds, warm_start=True, exact_warm_start=not_exact)
        assert _Spy.built == 12
    # a grid point that fails is skipped, the others still compete; a chain restarts after it
    res = cv_search(lambda p: _Spy(**p), {"c": [-1.0, 1.0, 2.0]}, X, y, folds, exact_warm_start=exact)
    assert res.n_failed == 3 and np.isnan(res.scores[0]).all()
    assert res.best_params == {"c": 1.0}
    with pytest.raises(RuntimeError, match="every grid point failed"):
        cv_search(lambda p: _Spy(**p), {"c": [-1.0, -2.0]}, X, y, folds)


def test_registry_warm_starts_only_exact_solvers():
    """Warm starts in a grid search only where a warm refit reaches the cold fit's model."""
    from margindist.experiments.registry import get_method

    X = np.random.default_rng(0).normal(size=(50, 3))

    def exact(name, X=X, **params):
        info = get_method(name)
        est = info.build("linear", params, 0)
        return info.exact_warm_start is not None and bool(info.exact_warm_start(est, X))

    assert exact("odm") and exact("kmomd") and exact("m3svm") and exact("ldm", solver="dcd")
    assert not exact("ldm", solver="asgd") and not exact("odm", solver="svrg")
    # LDM's "auto": the exact DCD on small dense data, averaged SGD on sparse data
    assert exact("ldm", solver="auto") and not exact("ldm", X=sp.csr_matrix(X), solver="auto")
    assert not exact("margin_pursuit") and not exact("margin_pursuit", solver="gd", tol=None)
    assert not exact("margin_pursuit", solver="gd", tol=1e-6)  # the data-driven rescaling is path-dependent
    assert exact("margin_pursuit", solver="gd", tol=1e-6, rescale=False)
    assert exact("margin_pursuit", solver="newton", tol=1e-6, rescale=False)
    assert not exact("msvmav") and not exact("pegasos") and not exact("svm")
