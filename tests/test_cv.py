"""The ``*CV`` estimators: the same choice as ``GridSearchCV`` over the same grid and folds, its
``cv_results_`` layout, warm paths equal to cold fits, the paper grid as default, and bad grids
rejected before anything is fitted."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.datasets import make_classification
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.preprocessing import MinMaxScaler
from sklearn.utils._param_validation import InvalidParameterError

import margindist
from margindist import (
    KMOMDCV,
    LDMCV,
    LSSVMCV,
    M3SVMCV,
    ODMCV,
    MarginPursuit,
    MarginPursuitCV,
    MSVMAvCV,
)
from margindist.search import Scaled

# estimator, small grid, extra parameters (deterministic solvers, so a warm-started point
# reaches its cold fit's model to the solver's tolerance)
CASES = {
    "ODMCV": (ODMCV, {"lam": [0.25, 4.0, 64.0], "mu": [0.2, 0.6]}, {}),
    "ODMCV-rbf": (ODMCV, {"lam": [1.0, 16.0], "gamma": [0.5, 2.0]}, {"kernel": "rbf"}),
    # a wide kernel at large lam: the DCD hands over to the kernel Newton method along the path
    "ODMCV-rbf-wide": (ODMCV, {"lam": [64.0, 1024.0]}, {"kernel": "rbf", "gamma": 1e-3, "mu": 0.8, "theta": 0.8}),
    # LDM's dual coordinate descent stops at a loose tol by default: warm and cold fits of one
    # point then differ by about tol, enough to flip a held-out prediction near the boundary
    "LDMCV": (LDMCV, {"C": [0.25, 1.0, 8.0], "lambda1": [1e-4, 1e-2]}, {"kernel": "rbf", "gamma": 1.0, "tol": 1e-6}),
    "MSVMAvCV": (MSVMAvCV, {"alpha": [1.0, 8.0], "beta": [0.5, 4.0]}, {}),
    "KMOMDCV": (KMOMDCV, {"lam": [0.05, 0.3, 0.9]}, {"kernel": "rbf", "gamma": 1.0}),
    "M3SVMCV": (M3SVMCV, {"lam": [1e-3, 1e-2, 1e-1], "p": [1, 2, 4]}, {}),
    "MarginPursuitCV": (MarginPursuitCV, {"lam": [1e-4, 1e-2]}, {"random_state": 0}),
    "LSSVMCV": (LSSVMCV, {"C": [0.25, 1.0, 16.0]}, {}),
}


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=160, n_features=6, n_informative=4, n_redundant=0,
                               flip_y=0.08, random_state=3)
    return MinMaxScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def folds(data):
    X, y = data
    return list(StratifiedKFold(4, shuffle=True, random_state=0).split(X, y))


def _base(cv_est):
    return cv_est._base()


def _seeded(cls, params):
    """Fix ``random_state`` where the method has one (its refits then agree exactly)."""
    import inspect

    return {"random_state": 0, **params} if "random_state" in inspect.signature(cls).parameters else params


@pytest.mark.parametrize("case", list(CASES))
def test_cv_matches_gridsearchcv(case, data, folds):
    cls, grid, params = CASES[case]
    params = _seeded(cls, params)
    X, y = data
    ours = cls(grid, cv=folds, **params).fit(X, y)
    ref = GridSearchCV(_base(ours), grid, cv=folds).fit(X, y)
    assert ours.best_params_ == ref.best_params_
    assert abs(ours.best_score_ - ref.best_score_) <= 1e-9
    assert ours.best_index_ == ref.best_index_
    assert [p for p in ours.cv_results_["params"]] == ref.cv_results_["params"]
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], atol=1e-9)
    np.testing.assert_array_equal(ours.cv_results_["rank_test_score"], ref.cv_results_["rank_test_score"])
    expected_keys = {k for k in ref.cv_results_ if "train" not in k}
    assert set(ours.cv_results_) == expected_keys
    np.testing.assert_array_equal(ours.predict(X), ref.best_estimator_.predict(X))
    np.testing.assert_allclose(ours.decision_function(X), ref.best_estimator_.decision_function(X),
                               rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ours.margins(X, y), ref.best_estimator_.margins(X, y), rtol=1e-7, atol=1e-9)


def test_cv_results_frame_and_refitted_attributes(data, folds):
    X, y = data
    est = ODMCV({"lam": [1.0, 8.0]}, cv=folds).fit(X, y)
    np.testing.assert_array_equal(est.coef_, est.best_estimator_.coef_)
    assert est.n_splits_ == len(folds) and est.refit_time_ >= 0
    assert list(est.classes_) == [0, 1]
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(est.cv_results_)
    assert len(frame) == 2 and "mean_test_score" in frame


def test_scoring_weights_and_parallel_folds_match_gridsearchcv(data, folds):
    X, y = data
    w = np.random.default_rng(0).integers(1, 4, size=y.size).astype(float)
    grid = {"lam": [0.5, 4.0, 32.0]}
    ours = ODMCV(grid, cv=folds, scoring="balanced_accuracy", n_jobs=2).fit(X, y, sample_weight=w)
    ref = GridSearchCV(ODM_default(), grid, cv=folds, scoring="balanced_accuracy").fit(X, y, sample_weight=w)
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], atol=1e-9)
    assert ours.best_params_ == ref.best_params_
    serial = ODMCV(grid, cv=folds, scoring="balanced_accuracy").fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(serial.cv_results_["mean_test_score"], ours.cv_results_["mean_test_score"])


def ODM_default():
    return margindist.ODM()


def test_precomputed_gram_matrix_is_cut_in_rows_and_columns(data, folds):
    X, y = data
    K = rbf_kernel(X, gamma=1.0)
    grid = {"lam": [0.5, 8.0]}
    # seeded: the DCD's visiting order would otherwise come from the global generator, and two
    # orders stop at tol on different points (a held-out prediction near the boundary can flip)
    ours = ODMCV(grid, cv=folds, kernel="precomputed", random_state=0).fit(K, y)
    ref = GridSearchCV(margindist.ODM(kernel="precomputed", random_state=0), grid, cv=folds).fit(K, y)
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], atol=1e-9)
    direct = ODMCV(grid, cv=folds, kernel="rbf", gamma=1.0, random_state=0).fit(X, y)
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], direct.cv_results_["mean_test_score"], atol=1e-9)


def test_sparse_input_gives_the_dense_search(data, folds):
    X, y = data
    grid = {"lam": [0.5, 8.0]}
    dense = ODMCV(grid, cv=folds).fit(X, y)
    sparse = ODMCV(grid, cv=folds).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(dense.cv_results_["mean_test_score"], sparse.cv_results_["mean_test_score"], atol=1e-9)


@pytest.mark.parametrize("case", ["ODMCV", "LDMCV", "KMOMDCV", "M3SVMCV", "MarginPursuitCV"])
def test_warm_path_equals_cold_fits(case, data):
    """Walking the path with warm starts reaches each point's cold-fit model (to the solver's
    tolerance): the decision values agree closely."""
    cls, grid, params = CASES[case]
    X, y = data
    est = cls(grid, **params)
    base = _base(est)
    assert est._exact_warm_start(base, X)
    path = est._path_parameter
    warm = clone(base).set_params(warm_start=True)
    for value in sorted(grid[path]):
        warm.set_params(**{path: value}).fit(X, y)
        cold = clone(base).set_params(**{path: value}).fit(X, y)
        np.testing.assert_allclose(warm.decision_function(X), cold.decision_function(X), rtol=1e-3, atol=2e-3)


def test_margin_pursuit_warm_starts_only_where_they_reach_the_cold_fit():
    """Newton sets each lam's scale as a cold fit does, so it warm-starts with the default
    rescaling; GD's rescaling happens along its own path from w = 0 and SGD stops early by a
    noisy rule, so neither warm-starts (GD does with a fixed scale)."""
    X = np.zeros((4, 2))
    ok = MarginPursuitCV._exact_warm_start
    assert ok(MarginPursuit(), X) and ok(MarginPursuit(solver="newton", rescale=False), X)
    assert ok(MarginPursuit(solver="gd", rescale=False), X)
    assert not ok(MarginPursuit(solver="gd"), X) and not ok(MarginPursuit(solver="sgd"), X)
    assert not ok(MarginPursuit(tol=None), X)


def test_default_grid_is_the_paper_grid():
    from margindist.experiments.presets import paper_grid

    X, y = make_classification(n_samples=40, n_features=4, n_informative=3, n_redundant=0, random_state=0)
    est = MSVMAvCV(cv=2).fit(X, y)
    grid = paper_grid("msvmav", "linear")
    assert len(est.cv_results_["params"]) == np.prod([len(v) for v in grid.values()])
    assert set(est.best_params_) == set(grid)


def test_scaled_grid_entries_are_resolved_on_the_training_data(data, folds):
    X, y = data
    est = ODMCV({"gamma": Scaled((0.5, 2.0)), "lam": [1.0]}, cv=folds, kernel="rbf").fit(X, y)
    gammas = sorted({p["gamma"] for p in est.cv_results_["params"]})
    np.testing.assert_allclose(gammas, [0.5 / X.shape[1], 2.0 / X.shape[1]])


def test_margin_pursuit_without_paper_grid_uses_its_documented_grid():
    X, y = make_classification(n_samples=60, n_features=4, random_state=1)
    est = MarginPursuitCV(cv=2, random_state=0).fit(X, y)
    assert [p["lam"] for p in est.cv_results_["params"]] == MarginPursuitCV._fallback_grid["lam"]


class _NoFit(margindist.ODM):
    def fit(self, X, y, sample_weight=None):  # pragma: no cover - must never run
        raise AssertionError("a bad grid reached a fit")


@pytest.mark.parametrize("grid, error, match", [
    ({}, ValueError, "param_grid is empty"),
    ({"lamda": [1.0]}, ValueError, "no parameter 'lamda'.*lam"),
    ({"lam": []}, ValueError, r"param_grid\['lam'\] is empty"),
    ({"lam": 1.0}, TypeError, "must be a list"),
    ({"lam": [1.0, -1.0]}, InvalidParameterError, "lam"),
    ({"kernel": ["rbf", "gaussian"]}, InvalidParameterError, "kernel"),
    ([("lam", [1.0])], InvalidParameterError, "param_grid"),
])
def test_bad_grids_raise_before_any_fit(grid, error, match, data, monkeypatch):
    X, y = data
    monkeypatch.setattr(ODMCV, "_estimator", _NoFit)
    with pytest.raises(error, match=match):
        ODMCV(grid).fit(X, y)


def test_signature_lists_every_parameter_explicitly():
    import inspect

    for cls in (ODMCV, LDMCV, MSVMAvCV, KMOMDCV, M3SVMCV, MarginPursuitCV, LSSVMCV):
        names = list(inspect.signature(cls).parameters)
        assert names[:5] == ["param_grid", "cv", "scoring", "refit", "n_jobs"]
        base = set(inspect.signature(cls._estimator).parameters)
        assert set(names[5:]) == base - {"n_jobs"}
        with pytest.raises(TypeError):
            cls(not_a_parameter=1)


def test_refit_false_keeps_the_search_only(data, folds):
    X, y = data
    est = ODMCV({"lam": [1.0, 4.0]}, cv=folds, refit=False).fit(X, y)
    assert est.best_params_ and not hasattr(est, "best_estimator_")
    assert not hasattr(est, "predict")


@pytest.mark.parametrize("cls, module, name, grid, params", [
    (ODMCV, "margindist._base", "KernelRowCache", {"lam": [0.5, 2.0, 8.0]}, {"kernel": "rbf", "gamma": 1.0}),
    (KMOMDCV, "margindist.solvers.kmomd", "KernelRowCache", {"lam": [0.1, 0.3, 0.6]},
     {"kernel": "rbf", "gamma": 1.0}),
    (LSSVMCV, "margindist.models.lssvm", "kernel_matrix", {"C": [0.5, 2.0, 8.0]}, {"kernel": "rbf", "gamma": 1.0}),
    (LDMCV, "margindist.models.ldm", "LDMKernelBase", {"C": [0.5, 2.0, 8.0]},
     {"kernel": "rbf", "gamma": 1.0, "solver": "dcd"}),
    (LDMCV, "margindist._base", "KernelRowCache", {"C": [0.5, 2.0, 8.0]},
     {"kernel": "rbf", "gamma": 1.0, "solver": "bcd"}),
])
def test_grid_points_of_a_fold_share_their_kernel_set_up(cls, module, name, grid, params, data, monkeypatch):
    """The kernel rows / matrix / factorisation are made once per fold, not once per grid point
    (the refit on all the data makes its own)."""
    import importlib

    mod = importlib.import_module(module)
    made = []
    original = getattr(mod, name)

    def counting(*args, **kwargs):
        made.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(mod, name, counting)
    X, y = data
    folds = list(StratifiedKFold(2, shuffle=True, random_state=0).split(X, y))
    cls(grid, cv=folds, refit=False, **params).fit(X, y)
    assert len(made) == len(folds)


@pytest.mark.parametrize("cls, grid, params", [
    (ODMCV, {"lam": [0.5, 2.0, 8.0]}, {"kernel": "rbf", "gamma": 1.0}),
    (LDMCV, {"C": [0.5, 2.0, 8.0]}, {"kernel": "rbf", "gamma": 1.0, "solver": "bcd"}),
    (LDMCV, {"C": [0.5, 2.0]}, {}),  # wide CSR rows: the linear kernel's rows
    (KMOMDCV, {"lam": [0.1, 0.3, 0.6]}, {"kernel": "rbf", "gamma": 1.0}),  # rows in class order
])
def test_one_vs_one_pairs_keep_their_kernel_rows_for_the_grid_points_of_a_fold(cls, grid, params, monkeypatch):
    """In a search, each one-vs-one pair makes its kernel rows once per fold (not once per grid
    point), and the points score as separate fits of each do (float64 rows at this tol)."""
    import margindist._base as base
    import margindist.solvers.kmomd as kmomd_solvers

    made = []

    class Counting(base.KernelRowCache):
        def __init__(self, *args, **kwargs):
            made.append(args[1].shape[0])
            super().__init__(*args, **kwargs)

    rng = np.random.default_rng(0)
    if params:
        X, y = make_classification(n_samples=150, n_features=5, n_informative=4, n_redundant=0, n_classes=3,
                                   random_state=0)
        X = MinMaxScaler().fit_transform(X)
    else:
        X = sp.random(60, 200, density=0.05, random_state=np.random.RandomState(0), format="csr") * 3.0
        y = np.argmax(X @ rng.normal(size=(200, 3)), axis=1)
    kw = dict(params, multi_class="ovo", tol=1e-8, max_iter=100000, random_state=0)
    folds = list(StratifiedKFold(2, shuffle=True, random_state=0).split(X, y))
    monkeypatch.setattr(base, "KernelRowCache", Counting)
    monkeypatch.setattr(kmomd_solvers, "KernelRowCache", Counting)
    search = cls(grid, cv=folds, refit=False, **kw).fit(X, y)
    pair_sizes = sorted(np.isin(y[f], [k, l]).sum() for f, _ in folds for k, l in ((0, 1), (0, 2), (1, 2)))
    assert sorted(made) == pair_sizes  # one matrix per pair and fold, whatever the grid
    ref = GridSearchCV(cls._estimator(**kw), grid, cv=folds).fit(X, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"])


def test_one_vs_one_pairs_on_their_distinct_rows_and_on_all_rows_in_one_search():
    """KMOMD solves on the distinct (x, y) pairs at lam > 0 and on all rows at lam = 0: a search
    that mixes both, with the pairs keeping their kernel rows, scores as separate fits do."""
    X, y = make_classification(n_samples=60, n_features=4, n_informative=3, n_redundant=0, n_classes=3,
                               random_state=1)
    X, y = np.vstack([X] * 3), np.r_[y, y, y]  # each pair three times
    X = MinMaxScaler().fit_transform(X)
    folds = list(StratifiedKFold(2, shuffle=True, random_state=0).split(X, y))
    kw = dict(kernel="rbf", gamma=1.0, multi_class="ovo", tol=1e-8)
    grid = {"lam": [0.0, 0.3, 0.6]}
    search = KMOMDCV(grid, cv=folds, refit=False, **kw).fit(X, y)
    ref = GridSearchCV(margindist.KMOMD(**kw), grid, cv=folds).fit(X, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"])


class _Interrupted(ClassifierMixin, BaseEstimator):
    """An estimator whose fit is hit by Ctrl-C inside compiled code: the interpreter raises a
    SystemError caused by the KeyboardInterrupt (what a numba dispatcher call gives)."""

    def __init__(self, lam=1.0):
        self.lam = lam

    def fit(self, X, y):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(...) returned a result with an exception set") from exc


def test_an_interrupt_inside_compiled_code_stops_the_search(data, folds):
    """The wrapped interrupt ends the search (it is not a failed grid point); a real failure
    of a grid point is still recorded and the search goes on."""
    from margindist.search import cv_search

    X, y = data
    with pytest.raises(KeyboardInterrupt):
        cv_search(lambda p: _Interrupted(**p), {"lam": [1.0, 2.0]}, X, y, folds, warm_start=False)

    def build(p):
        return margindist.ODM(**p)

    res = cv_search(build, {"lam": [1.0, -1.0]}, X, y, folds, warm_start=False)
    assert res.n_failed == len(folds) and res.best_params == {"lam": 1.0}


def test_reraise_interrupt_follows_causes_and_contexts():
    from margindist.search import reraise_interrupt

    def chained(how):
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as ki:
                if how == "cause":
                    raise SystemError("wrapped") from ki
                raise RuntimeError("while handling")  # __context__ only
        except Exception as exc:  # noqa: BLE001
            return exc

    for how in ("cause", "context"):
        with pytest.raises(KeyboardInterrupt):
            reraise_interrupt(chained(how))
    reraise_interrupt(ValueError("a plain failure"))  # nothing raised
