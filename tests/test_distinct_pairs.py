"""Repeated (x, y) pairs on the exact kernel path: ODM, KM-OMD and LDM (its block coordinate
descent), whose sample weight k is k copies of a sample, solve the problem on the distinct
pairs with their weights summed
(``BaseMarginClassifier._distinct_pairs``). The models must be those of the full problem."""

import logging

import numpy as np
import pytest
from sklearn.model_selection import StratifiedKFold

from margindist._base import DISTINCT_MAX_FRACTION, FitData
from margindist.models.kmomd import KMOMD
from margindist.models.ldm import LDM
from margindist.models.odm import ODM
from margindist.search import cv_search
from margindist.solvers.odm import odm_dcd_kernel

pytestmark = pytest.mark.usefixtures("single_blas_thread")

#: Each method that merges, at a tight tolerance, so that two solves of one problem agree closely.
METHODS = {
    "ODM": lambda **kw: ODM(kernel="rbf", gamma=0.7, lam=3.0, tol=1e-9, random_state=0, **kw),
    "ODM, mu = 0": lambda **kw: ODM(kernel="rbf", gamma=0.7, lam=50.0, mu=0.0, theta=0.4, tol=1e-9,
                                    random_state=0, **kw),
    "KMOMD": lambda **kw: KMOMD(kernel="rbf", gamma=0.7, lam=0.01, tol=1e-9, **kw),
    "LDM": lambda **kw: LDM(kernel="rbf", gamma=0.7, C=2.0, tol=1e-9, random_state=0, **kw),
}


def _repeated(rng, n_distinct=12, m=150, d=3, n_classes=2):
    """m samples drawn from n_distinct feature rows with noisy labels: repeated (x, y) pairs,
    some rows under two labels."""
    base = rng.normal(size=(n_distinct, d))
    X = base[rng.integers(n_distinct, size=m)]
    score = X[:, 0] + 0.8 * rng.normal(size=m)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1]))
    return X, y


def _unmerged(est):
    """The estimator with the merge switched off: the full problem on every sample."""
    est._weights_are_copies = False
    return est


@pytest.mark.parametrize("name", list(METHODS))
def test_distinct_pairs_give_the_full_problems_model(rng, name):
    """The merged fit against the same estimator on every sample (sample weights, two
    classes): the same decision function, and the copies of a pair share its coefficient in
    proportion to their weights."""
    X, y = _repeated(rng)
    s = rng.uniform(0.5, 2.0, size=y.shape[0])
    merged = METHODS[name]().fit(X, y, sample_weight=s)
    full = _unmerged(METHODS[name]()).fit(X, y, sample_weight=s)
    f_full = full.decision_function(X)
    np.testing.assert_allclose(merged.decision_function(X), f_full, atol=2e-6 * np.abs(f_full).max())
    coef = np.zeros(y.shape[0])
    coef[merged.support_] = merged.dual_coef_[0]
    _, inverse = np.unique(np.c_[X, y], axis=0, return_inverse=True)
    inverse = inverse.ravel()
    group = np.flatnonzero(inverse == inverse[np.argmax(np.abs(coef))])
    assert group.size > 1
    np.testing.assert_allclose(coef[group] / s[group], coef[group[0]] / s[group[0]], rtol=1e-12)


def test_odm_on_distinct_pairs_matches_the_dual_on_every_sample(rng):
    """An independent computation: ODM's DCD on the full Gram matrix of every sample."""
    X, y = _repeated(rng)
    s = rng.uniform(0.5, 2.0, size=y.shape[0])
    est = METHODS["ODM"]().fit(X, y, sample_weight=s)
    K = np.exp(-0.7 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    ypm = np.where(y == est.classes_[1], 1.0, -1.0)
    coef, b, *_ = odm_dcd_kernel(None, ypm, s, 3.0, est.mu, est.theta, gram=K, tol=1e-11, random_state=0,
                                 newton=False, max_iter=100000)
    f = K @ coef + b
    np.testing.assert_allclose(est.decision_function(X), f, atol=1e-7 * np.abs(f).max())


def test_merged_only_when_pairs_repeat_and_warm_starts_stay_with_their_rows(rng, caplog):
    """Merged when the distinct pairs are at most DISTINCT_MAX_FRACTION of the rows; a warm start
    from a merged fit serves the next one (one epoch) and a fit on other rows starts afresh."""
    X, y = _repeated(rng)
    with caplog.at_level(logging.INFO, logger="margindist"):
        est = METHODS["ODM"](warm_start=True, verbose=1).fit(X, y)
    assert "distinct (x, y) pairs of 150 rows" in caplog.text
    est.fit(X, y)
    assert est.n_iter_ == 1
    X2 = X + 1e-3 * rng.normal(size=X.shape)  # every pair distinct
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="margindist"):
        est.fit(X2, y)
    assert "distinct (x, y)" not in caplog.text and est.n_iter_ > 1
    np.testing.assert_allclose(est.decision_function(X2), METHODS["ODM"]().fit(X2, y).decision_function(X2),
                               atol=1e-6)
    # the base rule (KM-OMD's): just over DISTINCT_MAX_FRACTION distinct keeps every row, just
    # under it merges
    edge = int(DISTINCT_MAX_FRACTION * 150)
    for n_keep, merged in ((edge + 5, False), (edge - 5, True)):
        X3, y3 = np.r_[X2[:n_keep], X2[: 150 - n_keep]], np.r_[y[:n_keep], y[: 150 - n_keep]]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="margindist"):
            METHODS["KMOMD"](verbose=1).fit(X3, y3)
        assert ("distinct (x, y)" in caplog.text) == merged


@pytest.mark.parametrize("name", ["ODM", "KMOMD", "LDM"])
def test_search_shares_the_distinct_rows_set_up_without_mixing_sub_problems(rng, name):
    """A grid search over one-vs-rest sub-problems whose distinct pairs differ: the set-up made
    from one sub-problem's distinct rows must never serve another's. The fold scores of the
    search equal those of plain fits."""
    X, y = _repeated(rng, n_distinct=15, m=180, n_classes=3)
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    grid = {"gamma": [0.3, 0.7]}

    def build(params):
        return METHODS[name](multi_class="ovr").set_params(**params)

    res = cv_search(build, grid, X, y, folds, warm_start=False)
    for k, g in enumerate(grid["gamma"]):
        plain = [np.mean(build({"gamma": g}).fit(X[tr], y[tr]).predict(X[va]) == y[va]) for tr, va in folds]
        np.testing.assert_allclose(res.scores[k], plain, atol=1e-12)


def test_fit_shared_keeps_set_up_with_the_rows_it_was_made_from(rng):
    """A value held under a kind and key is reused only for the very rows it was made from."""
    X = rng.normal(size=(10, 2))
    est = ODM()
    est._shared_data = FitData(X=X, y_index=np.zeros(10, dtype=int), sample_weight=np.ones(10),
                               classes=np.arange(2), key=(), shared={})
    calls = []

    def make(tag):
        return lambda: calls.append(tag) or tag

    assert est._fit_shared("rows", 1, make("a"), X) == "a"
    assert est._fit_shared("rows", 1, make("b"), X) == "a"  # the same rows and key: reused
    assert est._fit_shared("rows", 1, make("c"), X.copy()) == "c"  # other rows: not shared, made
    assert est._fit_shared("rows", 2, make("d"), X) == "d"  # another key: made again
    # the distinct rows of two sub-problems, one after the other, under the same kind and key
    Xa, Xb = X[:6].copy(), X[4:].copy()
    shared = est._shared_data.shared
    shared["distinct pairs"] = ((), (Xa, None, None, None), X)
    assert est._fit_shared("rows", 2, make("e"), Xa) == "e"
    assert est._fit_shared("rows", 2, make("f"), Xa) == "e"  # shared between grid points
    shared["distinct pairs"] = ((), (Xb, None, None, None), X)
    assert est._fit_shared("rows", 2, make("g"), Xb) == "g"  # never Xa's set-up
    assert calls == ["a", "c", "d", "e", "g"]


def test_ldm_keeps_every_row_for_its_factorised_dual(rng, caplog):
    """LDM's factorised dual (``solver="dcd"``) keeps every row: its coordinate descent can stall
    on the summed weights; the block coordinate descent takes the distinct pairs."""
    X, y = _repeated(rng)
    for solver, merged in (("dcd", False), ("bcd", True)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="margindist"):
            METHODS["LDM"](solver=solver, verbose=1).fit(X, y)
        assert ("distinct (x, y) pairs" in caplog.text) == merged


def test_repeated_rows_against_a_plain_row_set(rng):
    """``repeated_rows`` against Python's set of row tuples, including rows that differ but have
    the same projection (the quick check's collisions must fall through to the exact test) and
    equal rows under different labels (different pairs)."""
    from margindist.kernels import resolve_kernel
    from margindist.solvers._repeats import repeated_rows

    spec = resolve_kernel("rbf", gamma=1.0)
    X = rng.normal(size=(40, 3))
    c = np.cos(np.arange(4) * 2.399963229728653)  # the projection of (x, y)
    X[1] = X[0] + 0.5 * np.array([c[1], -c[0], 0.0])  # another row with the same projection
    y = np.where(rng.random(40) < 0.5, 1.0, -1.0)
    y[1] = y[0]
    proj = np.c_[X, y] @ c
    assert proj[0] == proj[1] and len(np.unique(proj)) == 39  # the quick check cannot tell them apart
    assert repeated_rows(spec, X, y, np.ones(40)) is None  # all distinct
    X2, y2 = np.r_[X, X[:6]], np.r_[y, y[:3], -y[3:6]]
    s2 = rng.uniform(0.5, 2.0, size=46)
    first, inverse, su = repeated_rows(spec, X2, y2, s2)
    pairs = {tuple(r) for r in np.c_[X2, y2]}
    assert first.size == len(pairs) == 43
    np.testing.assert_array_equal(np.c_[X2, y2][first][inverse], np.c_[X2, y2])
    np.testing.assert_allclose(su.sum(), s2.sum())


def test_kmomd_keeps_every_row_at_lam_zero(rng, caplog):
    """At lam = 0 (the distance of the class hulls) KM-OMD's optimum need not be unique (hulls
    that overlap): it keeps every row; for lam > 0 it takes the distinct pairs."""
    X, y = _repeated(rng)
    for lam, merged in ((0.0, False), (0.2, True)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="margindist"):
            KMOMD(kernel="rbf", lam=lam, verbose=1).fit(X, y)
        assert ("distinct (x, y) pairs" in caplog.text) == merged


def test_odm_takes_distinct_pairs_from_fewer_repeats_than_the_others(rng, caplog):
    """Half the rows distinct: KM-OMD and LDM take the distinct pairs (at most three quarters),
    ODM keeps every row (at most 0.4: its DCD is slower on unequal weights)."""
    X, y = _repeated(rng, n_distinct=75, m=150)
    X = X[:75] + 1e-3 * rng.normal(size=(75, 3))  # 75 distinct rows, each twice
    X, y = np.r_[X, X], np.r_[y[:75], y[:75]]
    for name, merged in (("ODM", False), ("KMOMD", True), ("LDM", True)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="margindist"):
            METHODS[name](verbose=1).fit(X, y)
        assert ("distinct (x, y) pairs" in caplog.text) == merged, name
