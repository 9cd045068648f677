"""KMOMD: the SMO against a generic QP, closed forms, the hard-margin SVM and its own back ends."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from sklearn.datasets import make_blobs, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import linear_kernel, polynomial_kernel, rbf_kernel
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC

from margindist.datasets import load_dataset
from margindist.kernels import KernelRowCache, KernelSpec, kernel_matrix, resolve_kernel
from margindist.models.kmomd import KMOMD
from margindist.solvers.kmomd import (
    _NEWTON_MAX_CG,
    _kernel_block_product,
    _neg_dual,
    _scaled_columns,
    _waterfill,
    _woodbury_preconditioner,
    kmomd_kernel,
    kmomd_linear,
    kmomd_objective,
)
from margindist.solvers.kmomd_newton import _levels, kmomd_newton

TIGHT = 1e-12


def _data(m=40, d=3, seed=0, sep=0.5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, d))
    y = np.where(X[:, 0] + sep * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


def _qp(G, y, w, lam):
    """The KM-OMD objective on the two simplices, by SLSQP (a generic solver)."""
    Q = y[:, None] * G * y[None, :]
    pos = y > 0

    def f(g):
        return (1 - lam) * g @ Q @ g + lam * np.sum(g * g / w)

    def jac(g):
        return 2 * (1 - lam) * Q @ g + 2 * lam * g / w

    cons = [
        {"type": "eq", "fun": lambda g: g[pos].sum() - 1, "jac": lambda g: pos.astype(float)},
        {"type": "eq", "fun": lambda g: g[~pos].sum() - 1, "jac": lambda g: (~pos).astype(float)},
    ]
    g0 = np.where(pos, 1.0 / pos.sum(), 1.0 / (~pos).sum())
    res = minimize(f, g0, jac=jac, bounds=[(0, None)] * y.size, constraints=cons, method="SLSQP",
                   options={"ftol": 1e-15, "maxiter": 2000})
    assert res.success, res.message
    return res.x, res.fun


def _feasible(gamma, y):
    assert np.all(gamma >= 0)
    np.testing.assert_allclose([gamma[y > 0].sum(), gamma[y < 0].sum()], [1.0, 1.0], rtol=0, atol=1e-12)


# ------------------------------------------------------------------ solver vs generic QP


#: many small fits: one BLAS thread (see conftest.single_blas_thread)
pytestmark = pytest.mark.usefixtures("single_blas_thread")


@pytest.mark.parametrize("lam", [0.0, 0.02, 0.3, 0.9])
@pytest.mark.parametrize("weighted", [False, True])
def test_smo_matches_generic_qp(lam, weighted):
    X, y = _data(m=40, seed=1, sep=1.0)
    w = np.random.default_rng(2).uniform(0.3, 3.0, size=y.size) if weighted else np.ones(y.size)
    spec = resolve_kernel("rbf", X, gamma=0.5)
    res = kmomd_kernel(spec, X, y, w, lam, tol=TIGHT)
    G = kernel_matrix(spec, X)
    g_qp, f_qp = _qp(G, y, w, lam)
    assert res.converged
    _feasible(res.gamma, y)
    assert res.objective <= f_qp + 1e-12
    np.testing.assert_allclose(res.objective, f_qp, rtol=1e-9)
    np.testing.assert_allclose(res.objective, kmomd_objective(spec, X, y, res.gamma, lam, w), rtol=1e-12)
    if lam > 0:  # strictly convex: the minimiser is unique
        np.testing.assert_allclose(res.gamma, g_qp, atol=1e-6)
    # the scores and the threshold are those of the returned gamma
    np.testing.assert_allclose(res.scores, G @ (y * res.gamma), atol=1e-12)
    assert res.theta == pytest.approx(0.5 * res.gamma @ res.scores)


@pytest.mark.parametrize("cached", [False, True])
def test_update_and_selection_of_the_violating_pair(cached):
    """The fused gradient update and working-set selection (the extrema by chunks, the first
    row attaining each searched in its chunk) against NumPy: the updated G, min G and the first
    row that attains it, max G over the rows with mass and its first row, and among the cached
    rows the same two; integer data with many ties (the same extremum in several chunks),
    ranges of every length up to and across several chunks."""
    from margindist.solvers.kmomd import _SELECT_CHUNK, _update_select

    rng = np.random.default_rng(3)
    for t in range(600):
        m = int(rng.integers(1, 40 if t % 2 else 3 * _SELECT_CHUNK + 40))
        lo = int(rng.integers(0, m))
        hi = int(rng.integers(lo + 1, m + 1))
        G = rng.integers(-3, 3, size=m).astype(np.float64)
        gamma = np.where(rng.random(m) < 0.5, rng.random(m), 0.0)
        Ka, Kb = (rng.integers(0, 3, size=m).astype(np.float32) for _ in range(2))
        slot_of = np.where(rng.random(m) < 0.4, 1, -1) if cached else np.zeros(0, dtype=np.int64)
        want = G.copy()
        want[lo:hi] += 0.5 * (Ka[lo:hi].astype(np.float64) - Kb[lo:hi])
        got = _update_select(G, gamma, lo, hi, Ka, Kb, 0.5, slot_of)
        np.testing.assert_array_equal(G, want)

        def first(rows, best):
            rows = lo + np.flatnonzero(rows)
            if rows.size == 0:
                return -1, -np.inf
            j = rows[int(best(want[rows]))]
            return int(j), want[j]

        mass, all_rows = gamma[lo:hi] > 0, np.ones(hi - lo, dtype=bool)
        r, gmin = first(all_rows, np.argmin)
        q, gmax = first(mass, np.argmax)
        assert got[:4] == (gmin, gmax, r, q)
        if cached:
            c = slot_of[lo:hi] >= 0
            assert got[4:] == (first(c, np.argmin)[0], first(c & mass, np.argmax)[0])
        else:
            assert got[4:] == (-1, -1)


def test_kkt_conditions_at_tight_tol():
    X, y = _data(m=60, seed=3)
    lam = 0.05
    spec = resolve_kernel("rbf", X, gamma=1.0)
    res = kmomd_kernel(spec, X, y, None, lam, tol=TIGHT)
    G = kernel_matrix(spec, X)
    grad = 2 * (1 - lam) * y * (G @ (y * res.gamma)) + 2 * lam * res.gamma
    for c in (1.0, -1.0):
        cls = y == c
        sup = cls & (res.gamma > 0)
        mu = grad[sup].mean()
        np.testing.assert_allclose(grad[sup], mu, atol=1e-11)  # equal on the support
        assert np.all(grad[cls & (res.gamma == 0)] >= mu - 1e-11)  # not below it elsewhere


# ------------------------------------------------------------------ monotone, feasible


def test_objective_monotone_and_gamma_feasible_at_every_step():
    X, y = _data(m=50, seed=4)
    lam = 0.05
    spec = resolve_kernel("rbf", X, gamma=0.7)
    full = kmomd_kernel(spec, X, y, None, lam, tol=TIGHT, history_every=1, newton=False)  # the SMO's steps
    assert full.n_iter > 50
    hist = full.history
    assert hist.size == full.n_iter + 1
    assert np.all(np.diff(hist) <= 1e-15 * hist[0])
    # independent: the state after k updates, objective recomputed from scratch
    objs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for k in range(1, 80, 3):
            r = kmomd_kernel(spec, X, y, None, lam, tol=TIGHT, max_iter=k, newton=False)
            assert r.n_iter == k and r.status == "max_iter"
            _feasible(r.gamma, y)
            objs.append(kmomd_objective(spec, X, y, r.gamma, lam))
            np.testing.assert_allclose(objs[-1], hist[k], rtol=1e-10)
    assert np.all(np.diff(objs) <= 1e-14)


def test_estimator_history_and_objective():
    X, y = _data(m=80, seed=5)
    est = KMOMD(lam=0.05, tol=1e-10).fit(X, y)
    h = est.objective_history_[0]
    assert h.size >= 2 and np.all(np.diff(h) <= 0)
    assert est.objective_[0] <= h[-1] + 1e-15
    gamma = np.abs(est.dual_coef_[0])
    yy = np.where(y[est.support_] > 0, 1.0, -1.0)
    _feasible(gamma, yy)
    spec = resolve_kernel("rbf", X)
    Xs = X[est.support_]
    np.testing.assert_allclose(est.objective_[0], kmomd_objective(spec, Xs, yy, gamma, 0.05), rtol=1e-10)


# ------------------------------------------------------------------ lam = 1 and lam -> 0


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_lam_one_is_the_centroid_classifier(kernel):
    X, y = _data(m=45, seed=6)
    w = np.random.default_rng(0).uniform(0.5, 2.0, size=y.size)
    est = KMOMD(lam=1.0, kernel=kernel, gamma=0.3).fit(X, y, sample_weight=w)
    assert est.n_iter_ == 0
    pos = y > 0
    Xt = np.random.default_rng(1).normal(size=(30, 3))
    if kernel == "linear":
        mu_p = np.average(X[pos], axis=0, weights=w[pos])
        mu_n = np.average(X[~pos], axis=0, weights=w[~pos])
        expected = 0.5 * (((Xt - mu_n) ** 2).sum(1) - ((Xt - mu_p) ** 2).sum(1))
        np.testing.assert_allclose(est.coef_[0], mu_p - mu_n, rtol=1e-12)
    else:
        # kernel means: f(x) = 1/2 (||phi(x) - m_-||^2 - ||phi(x) - m_+||^2)
        Kt = rbf_kernel(Xt, X, gamma=0.3)
        K = rbf_kernel(X, X, gamma=0.3)
        ap, an = np.where(pos, w, 0) / w[pos].sum(), np.where(~pos, w, 0) / w[~pos].sum()
        expected = Kt @ (ap - an) - 0.5 * (ap @ K @ ap - an @ K @ an)
        gamma = np.zeros(y.size)
        gamma[est.support_] = np.abs(est.dual_coef_[0])
        np.testing.assert_allclose(gamma, ap + an, rtol=1e-12)
    np.testing.assert_allclose(est.decision_function(Xt), expected, rtol=1e-10, atol=1e-12)


def test_lam_one_sparse_linear_centroid():
    X, y = _data(m=30, seed=7)
    dense = KMOMD(lam=1.0, kernel="linear").fit(X, y)
    csr = KMOMD(lam=1.0, kernel="linear", solver="primal").fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(dense.decision_function(X), csr.decision_function(sp.csr_matrix(X)), rtol=1e-12)


def _separable(m=40, seed=8):
    X, y = make_blobs(n_samples=m, centers=[[-2, -1], [2, 1]], cluster_std=0.8, random_state=seed)
    y = np.where(y == 1, 1, -1)
    assert SVC(kernel="linear", C=1e8).fit(X, y).score(X, y) == 1.0
    return X, y


@pytest.mark.parametrize("solver", ["primal", "dual"])
def test_lam_zero_is_the_hard_margin_svm(solver):
    X, y = _separable()
    svm = SVC(kernel="linear", C=1e8, tol=1e-10).fit(X, y)
    est = KMOMD(lam=0.0, kernel="linear", solver=solver, tol=1e-12).fit(X, y)
    w = est.coef_[0]
    cos = w @ svm.coef_[0] / np.linalg.norm(w) / np.linalg.norm(svm.coef_[0])
    assert cos > 1 - 1e-8
    # the SVM's canonical hyperplane is 2 v / ||v||^2 and the KM-OMD threshold is the bisector
    scale = 2.0 / (w @ w)
    np.testing.assert_allclose(scale * est.decision_function(X), svm.decision_function(X), rtol=1e-5, atol=1e-5)
    # and a small lam approaches it
    small = KMOMD(lam=1e-6, kernel="linear", solver=solver, tol=1e-10).fit(X, y).coef_[0]
    assert small @ svm.coef_[0] / np.linalg.norm(small) / np.linalg.norm(svm.coef_[0]) > 1 - 1e-6


def test_lam_zero_rbf_hard_margin_and_duplicates():
    X, y = _separable(seed=9)
    svm = SVC(kernel="rbf", gamma=0.5, C=1e8, tol=1e-10).fit(X, y)
    est = KMOMD(lam=0.0, gamma=0.5, tol=1e-12).fit(X, y)
    d_svm, d_ours = svm.decision_function(X), est.decision_function(X)
    scale = 2.0 / est.weight_norm_[0] ** 2
    np.testing.assert_allclose(scale * d_ours, d_svm, rtol=1e-4, atol=1e-4)
    # duplicated points: zero curvature along their pair, no division by zero
    Xd, yd = np.vstack([X, X[:10]]), np.concatenate([y, y[:10]])
    dup = KMOMD(lam=0.0, gamma=0.5, tol=1e-12).fit(Xd, yd)
    assert np.all(np.isfinite(dup.dual_coef_))
    np.testing.assert_allclose(dup.decision_function(X), d_ours, rtol=1e-7, atol=1e-9)


def test_lam_zero_intersecting_hulls_warns():
    X, y = _data(m=40, seed=10, sep=3.0)
    with pytest.warns(UserWarning, match="hulls of the two classes intersect"):
        est = KMOMD(lam=0.0, kernel="linear").fit(X, y)
    assert est.weight_norm_[0] < 1e-5


def test_bisector_threshold():
    """Corrected threshold: f(x) = 1/2 (||x - v_-||^2 - ||x - v_+||^2) with the hull points v_+-."""
    X, y = _data(m=50, seed=11)
    res = kmomd_linear(X, y, None, 0.2, tol=TIGHT)
    vp = (res.gamma * (y > 0)) @ X
    vn = (res.gamma * (y < 0)) @ X
    np.testing.assert_allclose(res.coef, vp - vn, atol=1e-12)
    Xt = np.random.default_rng(0).normal(size=(20, 3))
    f = Xt @ res.coef - res.theta
    np.testing.assert_allclose(f, 0.5 * (((Xt - vn) ** 2).sum(1) - ((Xt - vp) ** 2).sum(1)), atol=1e-12)


# ------------------------------------------------------------------ back ends agree


def test_linear_primal_equals_kernel_path():
    X, y = _data(m=70, d=5, seed=12)
    kw = dict(lam=0.1, kernel="linear", tol=1e-12)
    primal = KMOMD(solver="primal", **kw).fit(X, y)
    lbfgs = KMOMD(solver="lbfgs", **kw).fit(X, y)
    np.testing.assert_allclose(lbfgs.coef_, primal.coef_, rtol=1e-8, atol=1e-12)
    dual = KMOMD(solver="dual", **kw).fit(X, y)
    call = KMOMD(lam=0.1, kernel=linear_kernel, tol=1e-12).fit(X, y)
    np.testing.assert_allclose(primal.coef_, dual.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(primal.intercept_, dual.intercept_, rtol=1e-9)
    np.testing.assert_allclose(primal.decision_function(X), call.decision_function(X), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(primal.objective_, dual.objective_, rtol=1e-12)


@pytest.mark.parametrize("kernel, func", [("rbf", rbf_kernel), ("poly", polynomial_kernel)])
def test_precomputed_equals_kernel(kernel, func):
    X, y = _data(m=60, seed=13)
    Xt = np.random.default_rng(3).normal(size=(15, 3))
    kw = dict(gamma=0.4, degree=2, coef0=1.0) if kernel == "poly" else dict(gamma=0.4)
    est = KMOMD(lam=0.1, kernel=kernel, tol=1e-12, **kw).fit(X, y)
    pre = KMOMD(lam=0.1, kernel="precomputed", tol=1e-12).fit(func(X, X, **kw), y)
    np.testing.assert_allclose(pre.decision_function(func(Xt, X, **kw)), est.decision_function(Xt), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_array_equal(np.sort(pre.support_), np.sort(est.support_))


def test_tiny_cache_gives_the_same_solution():
    X, y = _data(m=120, seed=14)
    # the SMO alone (the Newton phase runs only with every row cached)
    big = kmomd_kernel(resolve_kernel("rbf", X), X, y, None, 0.05, tol=TIGHT, newton=False)
    # 2 rows; maximal violating pairs only: the same path
    small = kmomd_kernel(resolve_kernel("rbf", X), X, y, None, 0.05, tol=TIGHT, max_bytes=1, cached_pair=0.0,
                         newton=False)
    assert small.n_iter == big.n_iter
    np.testing.assert_allclose(small.gamma, big.gamma, atol=1e-13)
    cached = kmomd_kernel(resolve_kernel("rbf", X), X, y, None, 0.05, tol=TIGHT, max_bytes=1)
    assert cached.converged
    np.testing.assert_allclose(cached.gamma, big.gamma, atol=1e-9)


@pytest.mark.parametrize("lam", [0.0, 0.02, 0.3])
def test_cached_pairs_reach_the_qp_optimum_with_fewer_kernel_rows(lam):
    """With a cache of a fifth of the rows, pairs of cached rows (``cached_pair``) reach the
    generic QP's optimum with the same certificate, computing fewer kernel rows than the
    maximal violating pairs (the SMO alone: no Newton phase, whose rows would count too)."""
    X, y = _data(m=150, seed=16, sep=0.5)
    spec = resolve_kernel("rbf", X, gamma=0.5)
    g_qp, f_qp = _qp(kernel_matrix(spec, X), y, np.ones(y.size), lam)
    misses = {}
    for cp in (0.0, 0.7):
        held = []
        res = kmomd_kernel(spec, X, y, None, lam, tol=TIGHT, max_bytes=8 * 150 * 30, cached_pair=cp,
                           newton=False, shared=lambda key, make: held.append(make()) or held[-1])
        assert held[0].n_slots == 30 and res.converged
        assert res.violation <= TIGHT * 2 * res.objective
        _feasible(res.gamma, y)
        np.testing.assert_allclose(res.objective, f_qp, rtol=1e-9)
        if lam > 0:
            np.testing.assert_allclose(res.gamma, g_qp, atol=1e-6)
        misses[cp] = held[0].misses
    assert misses[0.7] < 0.8 * misses[0.0], misses
    with pytest.raises(ValueError, match="cached_pair"):
        kmomd_kernel(spec, X, y, None, lam, cached_pair=1.0)


def test_uniform_and_vertex_starts_reach_the_same_optimum():
    X, y = _data(m=60, seed=15)
    spec = resolve_kernel("rbf", X, gamma=0.5)
    a = kmomd_kernel(spec, X, y, None, 0.3, tol=TIGHT, init="vertex")
    b = kmomd_kernel(spec, X, y, None, 0.3, tol=TIGHT, init="uniform")
    np.testing.assert_allclose(a.gamma, b.gamma, atol=1e-9)
    np.testing.assert_allclose(a.objective, b.objective, rtol=1e-12)


def test_interleaved_and_class_ordered_rows_agree():
    X, y = _data(m=50, seed=16)
    order = np.argsort(-y, kind="stable")
    spec = resolve_kernel("rbf", X, gamma=0.5)
    a = kmomd_kernel(spec, X, y, None, 0.2, tol=TIGHT)
    b = kmomd_kernel(spec, X[order], y[order], None, 0.2, tol=TIGHT)
    np.testing.assert_allclose(a.gamma[order], b.gamma, atol=1e-14)
    np.testing.assert_allclose(a.scores[order], b.scores, atol=1e-14)


def test_linear_lbfgs_path():
    X, y = make_classification(n_samples=150, n_features=8, random_state=3)
    y = np.where(y == 1, 1.0, -1.0)
    w = np.random.default_rng(0).uniform(0.5, 2.0, size=y.size)
    for lam in (0.05, 0.3):
        ref = kmomd_linear(X, y, w, lam, tol=TIGHT)  # SMO only
        fast = kmomd_linear(X, y, w, lam, tol=1e-10, init="lbfgs")
        assert fast.lbfgs_iter > 0 and fast.n_iter < ref.n_iter / 10
        np.testing.assert_allclose(fast.objective, ref.objective, rtol=1e-9)
        np.testing.assert_allclose(fast.coef, ref.coef, rtol=1e-5, atol=1e-8)
        sparse = kmomd_linear(sp.csr_matrix(X), y, w, lam, tol=1e-10, init="lbfgs")
        np.testing.assert_allclose(sparse.coef, fast.coef, rtol=1e-7, atol=1e-10)
    est = KMOMD(lam=0.3, kernel="linear", solver="lbfgs").fit(X, y, sample_weight=w)
    np.testing.assert_allclose(est.coef_[0], kmomd_linear(X, y, w, 0.3, tol=TIGHT).coef, rtol=1e-3)
    with pytest.raises(ValueError, match="needs lam > 0"):
        KMOMD(lam=0.0, kernel="linear", solver="lbfgs").fit(X, y)


def test_waterfill_is_the_simplex_minimiser():
    rng = np.random.default_rng(4)
    t, w, lam = rng.normal(size=12), rng.uniform(0.5, 2, size=12), 0.3
    g = _waterfill(t, w, lam)
    assert np.all(g >= 0) and g.sum() == pytest.approx(1.0)
    res = minimize(lambda x: t @ x + lam * np.sum(x * x / w), np.full(12, 1 / 12), bounds=[(0, None)] * 12,
                   constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}], method="SLSQP",
                   options={"ftol": 1e-15})
    np.testing.assert_allclose(g, res.x, atol=1e-7)


def test_waterfill_and_linear_fit_at_huge_feature_scale():
    # |t| ~ 1e150: the water level must still put weight on the smallest t (no empty active set)
    t = np.array([3e150, 1e150, 2e150])
    g = _waterfill(t, np.ones(3), 0.1)
    np.testing.assert_allclose(g, [0.0, 1.0, 0.0])
    X, y = _data(m=50, seed=31)
    lam = 0.3
    for s in (10.0, 1e3):
        # on s X the objective is s^2 times that on X with lam' / (1 - lam') = lam / ((1 - lam) s^2)
        r = lam / ((1 - lam) * s * s)
        big = KMOMD(kernel="linear", lam=lam, tol=1e-10).fit(X * s, y)
        ref = KMOMD(kernel="linear", lam=r / (1 + r), tol=1e-10).fit(X, y)
        np.testing.assert_allclose(big.decision_function(X * s), ref.decision_function(X) * s * s,
                                   rtol=1e-5, atol=1e-8 * s * s)
    with warnings.catch_warnings():  # at this scale the problem is the (infeasible) hard margin one
        warnings.simplefilter("ignore", ConvergenceWarning)
        big = KMOMD(kernel="linear", lam=lam).fit(X * 1e100, y)
    assert np.isfinite(big.coef_).all() and np.isfinite(big.decision_function(X * 1e100)).all()


def test_linear_dual_gradient_and_strong_duality():
    X, y = _data(m=40, d=4, seed=26)
    order = np.argsort(-y, kind="stable")
    X, y = X[order], y[order]
    w, lam, m_pos = np.ones(y.size), 0.2, int((y > 0).sum())
    z = np.random.default_rng(7).normal(size=4)
    val, grad, _ = _neg_dual(z, X, y, w, lam, m_pos)
    h = 1e-6
    fd = [(_neg_dual(z + h * e, X, y, w, lam, m_pos)[0] - _neg_dual(z - h * e, X, y, w, lam, m_pos)[0]) / (2 * h)
          for e in np.eye(4)]
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)
    res = kmomd_linear(X, y, w, lam, tol=TIGHT)
    # weak duality everywhere, equality at z = v(gamma*)
    assert -val <= res.objective + 1e-12
    np.testing.assert_allclose(-_neg_dual(res.coef, X, y, w, lam, m_pos)[0], res.objective, rtol=1e-10)


def test_warm_start_along_a_lam_path():
    X, y = load_dataset("banana")
    X = MinMaxScaler().fit_transform(X)[:300]
    y = y[:300]
    n = {}
    for tol in (1e-3, 1e-10):
        warm = KMOMD(warm_start=True, tol=tol)
        n[tol] = [0, 0]
        for lam in (0.5, 0.1, 0.02):
            cold = KMOMD(lam=lam, tol=tol).fit(X, y)
            warm.set_params(lam=lam).fit(X, y)
            n[tol][0] += cold.n_iter_
            n[tol][1] += warm.n_iter_
            if tol == 1e-10:  # same optimum
                np.testing.assert_allclose(warm.decision_function(X), cold.decision_function(X), rtol=1e-7,
                                           atol=1e-9)
    assert n[1e-3][1] < 0.8 * n[1e-3][0]
    # other data: the stored start does not fit and is ignored
    warm.fit(X[:200], y[:200])
    np.testing.assert_allclose(warm.decision_function(X), KMOMD(lam=0.02, tol=1e-10).fit(X[:200], y[:200])
                               .decision_function(X), rtol=1e-7, atol=1e-9)


def test_solver_start_from_any_distribution():
    X, y = _data(m=50, seed=27)
    spec = resolve_kernel("rbf", X, gamma=0.5)
    ref = kmomd_kernel(spec, X, y, None, 0.1, tol=TIGHT)
    start = np.random.default_rng(0).random(y.size)  # not normalised: made feasible per class
    res = kmomd_kernel(spec, X, y, None, 0.1, tol=TIGHT, init=start)
    np.testing.assert_allclose(res.gamma, ref.gamma, atol=1e-9)
    lin = kmomd_linear(X, y, None, 0.1, tol=TIGHT, init=start)
    np.testing.assert_allclose(lin.objective, kmomd_linear(X, y, None, 0.1, tol=TIGHT).objective, rtol=1e-12)
    with pytest.raises(ValueError, match="distribution of length"):
        kmomd_kernel(spec, X, y, None, 0.1, init=np.ones(3))


# ------------------------------------------------------------------ weights


def test_class_weight_equals_scaled_sample_weight():
    X, y = _data(m=40, seed=18)
    a = KMOMD(lam=0.2, class_weight={1.0: 3.0}, tol=1e-12).fit(X, y)
    b = KMOMD(lam=0.2, tol=1e-12).fit(X, y, sample_weight=np.where(y > 0, 3.0, 1.0))
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-12)


def test_weights_enter_as_penalty_prior():
    """Weighted objective = lam sum gamma_i^2 / w_i: the SMO agrees with SLSQP on it."""
    X, y = _data(m=30, seed=19)
    w = np.random.default_rng(1).uniform(0.2, 5.0, size=y.size)
    res = kmomd_linear(X, y, w, 0.4, tol=TIGHT)
    g, f = _qp(X @ X.T, y, w, 0.4)
    np.testing.assert_allclose(res.objective, f, rtol=1e-9)
    np.testing.assert_allclose(res.gamma, g, atol=1e-6)


# ------------------------------------------------------------------ estimator behaviour


def test_multiclass_ovr_and_ovo():
    X, y = load_dataset("iris")
    X = MinMaxScaler().fit_transform(X)
    for mc in ("ovr", "ovo"):
        est = KMOMD(lam=0.1, multi_class=mc).fit(X, y)
        assert est.decision_function(X).shape == (150, 3)
        assert est.score(X, y) > 0.9
    # ovr column k is the binary problem "k vs rest"
    ovr = KMOMD(lam=0.1, multi_class="ovr", tol=1e-10).fit(X, y)
    k = 1
    yb = np.where(y == ovr.classes_[k], 1, 0)
    binary = KMOMD(lam=0.1, tol=1e-10).fit(X, yb)
    np.testing.assert_allclose(ovr.decision_function(X)[:, k], binary.decision_function(X), rtol=1e-8, atol=1e-10)


def test_string_labels_and_predict_consistency():
    X, y = _data(m=50, seed=20)
    labels = np.where(y > 0, "yes", "no")
    est = KMOMD(lam=0.1).fit(X, labels)
    d = est.decision_function(X)
    np.testing.assert_array_equal(est.predict(X), np.where(d > 0, "yes", "no"))


def test_convergence_warning_names_the_remedy():
    X, y = _data(m=60, seed=22)
    with pytest.warns(ConvergenceWarning, match="Raise max_iter"):
        est = KMOMD(lam=0.1, max_iter=3).fit(X, y)
    assert est.n_iter_ == 3


def test_bad_parameters():
    X, y = _data(m=20, seed=23)
    with pytest.raises(ValueError, match="lam"):
        KMOMD(lam=1.5).fit(X, y)
    with pytest.raises(ValueError, match="lam"):
        KMOMD(lam=-0.1).fit(X, y)
    with pytest.raises(ValueError, match="solver='primal' needs kernel='linear'"):
        KMOMD(solver="primal", kernel="rbf").fit(X, y)
    with pytest.raises(ValueError, match="solver='lbfgs' needs kernel='linear'"):
        KMOMD(solver="lbfgs", kernel="rbf").fit(X, y)
    with pytest.raises(ValueError, match="tol"):
        KMOMD(tol=0).fit(X, y)


def test_sigmoid_kernel_runs_and_matches_precomputed():
    X, y = _data(m=40, seed=24)
    spec = KernelSpec("sigmoid", gamma=0.1, coef0=0.0)
    a = kmomd_kernel(spec, X, y, None, 0.3, tol=1e-10)
    b = kmomd_kernel(KernelSpec("precomputed"), kernel_matrix(spec, X), y, None, 0.3, tol=1e-10)
    _feasible(a.gamma, y)
    np.testing.assert_allclose(a.gamma, b.gamma, atol=1e-12)


def test_clone_and_grid_search_with_paper_names():
    from sklearn.model_selection import GridSearchCV

    X, y = _data(m=60, seed=25)
    gs = GridSearchCV(KMOMD(), {"lam": [0.01, 0.5], "gamma": [0.1, 1.0]}, cv=3).fit(X, y)
    scores = gs.cv_results_["mean_test_score"]
    assert scores.shape == (4,) and np.isfinite(scores).all()
    refit = KMOMD(**gs.best_params_).fit(X, y)  # the refitted best model is that of its parameters
    np.testing.assert_allclose(gs.best_estimator_.decision_function(X), refit.decision_function(X))


def test_real_data_accuracy_close_to_svc():
    X, y = load_dataset("banana")
    X = MinMaxScaler().fit_transform(X)
    rng = np.random.default_rng(0)
    idx = rng.permutation(y.size)
    tr, te = idx[:400], idx[400:2400]
    ours = KMOMD(lam=0.1).fit(X[tr], y[tr]).score(X[te], y[te])
    svc = SVC().fit(X[tr], y[tr]).score(X[te], y[te])
    assert ours > 0.85 and ours > svc - 0.03


# ------------------------------------------------------------------ active-set Newton phase, float32 rows


@pytest.fixture(params=["direct", "pcg"])
def newton_solves(request, monkeypatch):
    """The Newton phase's systems solved directly (small m, the default here) or by PCG."""
    if request.param == "pcg":
        monkeypatch.setattr("margindist.solvers.kmomd._NEWTON_DIRECT_MAX", 0)
    return request.param


@pytest.mark.parametrize("lam", [0.005, 0.05, 0.5])
def test_newton_phase_reaches_the_qp_optimum(lam, newton_solves):
    X, y = _data(m=90, seed=30, sep=0.7)
    w = np.random.default_rng(31).uniform(0.3, 3.0, size=y.size)
    spec = resolve_kernel("rbf", X, gamma=0.8)
    smo = kmomd_kernel(spec, X, y, w, lam, tol=TIGHT, newton=False)
    nt = kmomd_kernel(spec, X, y, w, lam, tol=TIGHT, newton=True, history_every=1)
    g_qp, f_qp = _qp(kernel_matrix(spec, X), y, w, lam)
    assert nt.converged and nt.newton_iter >= 1
    _feasible(nt.gamma, y)
    np.testing.assert_allclose(nt.objective, f_qp, rtol=1e-9)
    assert nt.objective <= f_qp + 1e-12
    np.testing.assert_allclose(nt.gamma, smo.gamma, atol=1e-9)
    np.testing.assert_allclose(nt.gamma, g_qp, atol=1e-6)
    np.testing.assert_allclose(nt.objective, kmomd_objective(spec, X, y, nt.gamma, lam, w), rtol=1e-12)
    # the SMO's 2 m updates, the Newton point, then the SMO's check: never an increase
    assert np.all(np.diff(nt.history) <= 1e-15 * nt.history[0])
    assert nt.n_iter < smo.n_iter


@pytest.mark.parametrize("a2", [1.8, 0.4])
def test_woodbury_preconditioner_is_the_inverse_of_p(a2):
    """R -> P^-1 R for P = diag(Dp) + a2 Y A^T A Y, against the dense inverse (a2 != 1, signed y)."""
    from scipy.linalg import cho_factor

    rng = np.random.default_rng(40)
    n, r = 30, 6
    A = rng.standard_normal((r, n))
    Dp = rng.uniform(0.2, 2.0, n)
    yI = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    M = np.eye(r) + a2 * ((A / Dp) @ A.T)
    As = A / np.sqrt(Dp)
    np.testing.assert_allclose(M, np.eye(r) + a2 * (As @ As.T), rtol=1e-12)
    # the Newton phase gathers As from its float32 factor, row by row
    F32, idx = rng.standard_normal((r, 50)).astype(np.float32), rng.permutation(50)[:n]
    np.testing.assert_array_equal(_scaled_columns(F32, idx, np.sqrt(Dp)),
                                  F32[:, idx].astype(np.float64) / np.sqrt(Dp))
    prec = _woodbury_preconditioner(Dp, yI / np.sqrt(Dp), As, cho_factor(M), a2)
    P = np.diag(Dp) + a2 * (yI[:, None] * (A.T @ A) * yI[None, :])
    R = rng.standard_normal((2, n))
    np.testing.assert_allclose(prec(R), np.linalg.solve(P, R.T).T, rtol=1e-10, atol=1e-12)


def test_newton_phase_alone_satisfies_kkt(newton_solves):
    """The active-set iterations end on the exact optimum: the SMO after them only checks."""
    X, y = _data(m=120, seed=32, sep=0.5)
    lam = 0.02
    spec = resolve_kernel("rbf", X, gamma=1.0)
    res = kmomd_kernel(spec, X, y, None, lam, tol=1e-6, newton=True)
    assert res.converged and res.n_iter == 2 * y.size  # no pair update after the Newton point
    if newton_solves == "direct":
        assert res.cg_iter == 0 and res.newton_iter >= 1
    else:  # preconditioned CG: about 24 products a solve here (90 with an indefinite preconditioner)
        assert 0 < res.cg_iter <= 40 * res.newton_iter < _NEWTON_MAX_CG
    G = kernel_matrix(spec, X)
    grad = 2 * (1 - lam) * y * (G @ (y * res.gamma)) + 2 * lam * res.gamma
    for c in (1.0, -1.0):
        cls = y == c
        sup = cls & (res.gamma > 0)
        assert np.ptp(grad[sup]) <= 1e-6 * 2 * res.objective
        assert np.all(grad[cls & (res.gamma == 0)] >= grad[sup].max() - 1e-6 * 2 * res.objective)


def test_newton_phase_with_rows_beyond_the_cache():
    """A cache of 10 of the 80 rows: the phase's products and gradients go through
    KernelRowCache.dot on the support (cached rows and the triangle of the others) and reach the
    QP optimum, as the SMO alone and the dense oracle."""
    X, y = _data(m=80, seed=33)
    spec = resolve_kernel("rbf", X, gamma=0.5)
    small = kmomd_kernel(spec, X, y, None, 0.05, tol=TIGHT, newton=True, max_bytes=8 * 80 * 10)  # 10 rows
    big = kmomd_kernel(spec, X, y, None, 0.05, tol=TIGHT, newton=False)
    assert small.newton_iter >= 1 and small.cg_iter >= 1 and small.converged
    assert np.count_nonzero(small.gamma > 0) > 10  # a support larger than the cache
    np.testing.assert_allclose(small.gamma, big.gamma, atol=1e-9)
    g_qp, f_qp = _qp(kernel_matrix(spec, X), y, np.ones(y.size), 0.05)
    np.testing.assert_allclose(small.objective, f_qp, rtol=1e-9)
    with pytest.raises(ValueError, match="newton"):
        kmomd_kernel(spec, X, y, None, 0.05, newton="yes")


def test_newton_phase_stops_at_a_point_that_meets_the_stopping_rule(monkeypatch):
    """PCG solves: at tol = 1e-2 the phase ends as soon as its iterate has no negative weight and
    meets the SMO's rule (an iteration earlier than at tol = 1e-3 here), and the SMO after it only
    checks; the rule holds at the exact gradient."""
    monkeypatch.setattr("margindist.solvers.kmomd._NEWTON_DIRECT_MAX", 0)
    X, y = _data(m=150, seed=34, sep=0.5)
    spec = resolve_kernel("rbf", X, gamma=1.0)
    loose = kmomd_kernel(spec, X, y, None, 0.02, tol=1e-2, newton=True)
    tight = kmomd_kernel(spec, X, y, None, 0.02, tol=1e-3, newton=True)
    assert loose.converged and tight.converged and loose.n_iter == tight.n_iter == 2 * y.size
    assert loose.newton_iter < tight.newton_iter
    G = 2 * 0.98 * y * (kernel_matrix(spec, X) @ (y * loose.gamma)) + 2 * 0.02 * loose.gamma
    viol = max(G[(y == c) & (loose.gamma > 0)].max() - G[y == c].min() for c in (1.0, -1.0))
    assert viol <= 1e-2 * 2 * loose.objective


def test_support_products_hold_rows_of_the_support_in_the_cache():
    """With a support I larger than the cache, the products V K_II first fill the cache with rows
    of I (the rows of I already cached stay, the others replace rows outside I), so that each
    product reads them instead of computing their values; the product is K_II's."""
    X, _ = _data(m=60, seed=34)
    spec = resolve_kernel("rbf", X, gamma=0.5)
    cache = KernelRowCache(spec, X, max_bytes=8 * 60 * 12)  # 12 rows
    cache.prefill(np.arange(40, 52))  # rows outside the support, then two of its rows
    cache.prefill([0, 2])
    idx = np.arange(0, 40, 2)  # 20 rows
    misses = cache.misses
    kmul = _kernel_block_product(cache, idx, 0, [None])
    held = np.flatnonzero(cache.state.slot_of >= 0)
    assert held.size == 12 and np.isin(held, idx).all() and {0, 2} <= set(held)
    assert cache.misses - misses == 10  # rows 0 and 2 were not computed again
    V = np.random.default_rng(35).standard_normal((2, idx.size))
    K = kernel_matrix(spec, X)
    np.testing.assert_allclose(kmul(V), V @ K[np.ix_(idx, idx)], rtol=1e-12, atol=1e-12)


class _ScriptedSMO:
    """An SMO whose violation after each run follows a script (objective 1: the stopping
    threshold is 2 tol = 2e-3)."""

    def __init__(self, violations):
        self.script = list(violations)
        self.it, self.obj, self.status = 0, 1.0, "max_iter"
        self.violation = self.script.pop(0)

    def run(self, max_iter):
        self.it = max_iter
        self.violation = self.script.pop(0)
        if self.violation <= 2e-3:
            self.status = "converged"


@pytest.mark.parametrize("script, newton, runs", [
    ([2.0, 0.6, 0.18, 0.054, 0.016, 0.0048, 1e-3], False, 6),  # 3.3x per m: converges on its own
    ([2.0, 1.8], True, 1),  # 10 % per m: dozens of m to go, the Newton phase at once
    ([2.0, 2.2], True, 1),  # no progress
    ([2.0, 0.2, 0.19], True, 2),  # fast, then slow
    ([2.0, 1.333], True, 1),  # 1.5x per m: 16 m to go, over the budget of 16
])
def test_smo_goes_on_before_the_partial_cache_newton_phase_only_while_fast(script, newton, runs):
    """With a partial cache the SMO continues by m updates while its violation, at the rate of the
    last m updates, would reach the stopping rule within the budget; else the Newton phase runs."""
    from margindist.solvers.kmomd import _NEWTON_PARTIAL_BUDGET, _smo_while_fast

    smo = _ScriptedSMO(script)
    m = 100
    assert _smo_while_fast(smo, m, 10**9, 1e-3) is newton
    assert smo.it == runs * m <= _NEWTON_PARTIAL_BUDGET * m


@pytest.mark.parametrize("newton", [False, True])
def test_float32_rows_solve_the_rounded_problem(newton):
    X, y = _data(m=70, seed=34, sep=0.8)
    lam = 0.05
    spec = resolve_kernel("rbf", X, gamma=0.6)
    K32 = KernelRowCache(spec, X, max_bytes=4 * 70 * 70, dtype=np.float32).fill().astype(np.float64)
    r32 = kmomd_kernel(spec, X, y, None, lam, tol=1e-10, dtype=np.float32, newton=newton)
    exact32 = kmomd_kernel(KernelSpec("precomputed"), K32, y, None, lam, tol=1e-10)
    r64 = kmomd_kernel(spec, X, y, None, lam, tol=1e-10)
    np.testing.assert_allclose(r32.gamma, exact32.gamma, atol=1e-8)  # the optimum for K rounded to float32
    np.testing.assert_allclose(r32.gamma, r64.gamma, atol=1e-5)
    np.testing.assert_allclose(r32.objective, r64.objective, rtol=1e-6)


def test_estimator_newton_path_matches_smo_and_uses_float32_rows():
    X, y = load_dataset("banana")
    X = MinMaxScaler().fit_transform(X)[:1500]
    y = y[:1500]
    est = KMOMD(lam=0.02, tol=1e-3).fit(X, y)  # m >= 1000: the Newton phase runs
    ref = KMOMD(lam=0.02, tol=1e-8).fit(X, y)  # float64 rows, tight
    d, d_ref = est.decision_function(X), ref.decision_function(X)
    np.testing.assert_allclose(d, d_ref, atol=1e-3 * np.abs(d_ref).max())
    assert est.objective_[0] <= ref.objective_[0] * (1 + 2e-3)
    h = est.objective_history_[0]
    assert np.all(np.diff(h) <= 0)


def test_weight_norm_from_the_scores_equals_the_kernel_norm():
    X, y = _data(m=60, seed=35)
    est = KMOMD(lam=0.1, gamma=0.5, tol=1e-10).fit(X, y)
    K = rbf_kernel(est.support_vectors_, gamma=0.5)
    c = est.dual_coef_[0]
    assert est.weight_norm_[0] == pytest.approx(np.sqrt(c @ K @ c), rel=1e-10)


# ------------------------------------------------------------------ linear kernel: Newton on the dual in z


def _phi(z, X, y, w, lam):
    """phi(z) = -D(z) through the compiled water-filling, and gamma(z)."""
    t = 2 * (1 - lam) * y * (X @ z)
    mu, g = np.full(2, np.nan), np.empty(y.size)
    inner = _levels(t, t, 0.0, y > 0, w, lam, mu, g)[0]
    return (1 - lam) * z @ z - inner, g


def test_levels_are_the_sorted_waterfill():
    rng = np.random.default_rng(40)
    y = np.where(rng.random(200) < 0.4, 1.0, -1.0)
    w = rng.uniform(0.3, 3.0, size=y.size)
    for scale in (1e-6, 1.0, 1e3, 1e150):
        t, dt = rng.normal(size=y.size) * scale, rng.normal(size=y.size) * scale
        for alpha, mu in ((0.0, np.full(2, np.nan)), (0.7, np.array([-1e300, 1e300])), (0.3, np.zeros(2))):
            g = np.empty(y.size)
            inner, gdt, _, n_act = _levels(t, dt, alpha, y > 0, w, 0.2, mu, g)
            ta = t + alpha * dt
            ref = np.zeros(y.size)
            for cls in (y > 0, y < 0):
                ref[cls] = _waterfill(ta[cls], w[cls], 0.2)
            np.testing.assert_allclose(g, ref, rtol=1e-9, atol=1e-12)
            assert n_act == np.count_nonzero(g > 0)
            # inner = sum_c min over the simplex, attained at gamma
            np.testing.assert_allclose(inner, ta @ g + 0.2 * np.sum(g * g / w), rtol=1e-9)
            np.testing.assert_allclose(gdt, g @ dt, rtol=1e-9, atol=1e-300)


def test_newton_dual_gradient_and_hessian_by_finite_differences():
    """grad phi = 2 (1 - lam) (z - v(gamma(z))) and, where the active set is locally constant, the
    generalised Hessian 2 (1 - lam) (I + a C) of the docstring."""
    X, y = _data(m=60, d=4, seed=41)
    w = np.random.default_rng(42).uniform(0.5, 2.0, size=y.size)
    lam, b = 0.2, 1.6
    z = kmomd_linear(X, y, w, lam, tol=TIGHT).coef * 0.8  # near the optimum: many active rows
    g = _phi(z, X, y, w, lam)[1]
    v = X.T @ (y * g)
    h = 1e-6
    fd = [(_phi(z + h * e, X, y, w, lam)[0] - _phi(z - h * e, X, y, w, lam)[0]) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(b * (z - v), fd, rtol=1e-6, atol=1e-9)
    A = g > 0
    assert 5 < A.sum() < y.size
    C = (X[A] * w[A, None]).T @ X[A]
    for cls in (A & (y > 0), A & (y < 0)):
        s_c = w[cls] @ X[cls]
        C -= np.outer(s_c, s_c) / w[cls].sum()
    H = b * (np.eye(4) + (1 - lam) / lam * C)

    def grad(zz):
        return b * (zz - X.T @ (y * _phi(zz, X, y, w, lam)[1]))

    fd_H = np.array([(grad(z + h * e) - grad(z - h * e)) / (2 * h) for e in np.eye(4)])
    np.testing.assert_allclose(fd_H, H, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("lam", [0.01, 0.1, 0.6])
@pytest.mark.parametrize("direct", [True, False])
def test_newton_reaches_the_qp_and_smo_optimum(lam, direct):
    X, y = _data(m=80, d=5, seed=43, sep=0.8)
    w = np.random.default_rng(44).uniform(0.3, 3.0, size=y.size)
    res = kmomd_newton(X, y, w, lam, tol=1e-10, direct=direct)
    assert res.converged and res.n_iter == 0 and res.newton_iter >= 1  # the SMO did not take over
    assert direct or res.cg_iter > 0
    _feasible(res.gamma, y)
    g_qp, f_qp = _qp(X @ X.T, y, w, lam)
    smo = kmomd_linear(X, y, w, lam, tol=TIGHT)
    np.testing.assert_allclose(res.objective, f_qp, rtol=1e-9)
    np.testing.assert_allclose(res.objective, smo.objective, rtol=1e-9)
    np.testing.assert_allclose(res.gamma, smo.gamma, atol=1e-7)
    np.testing.assert_allclose(res.gamma, g_qp, atol=1e-6)
    np.testing.assert_allclose(res.coef, X.T @ (y * res.gamma), atol=1e-12)
    np.testing.assert_allclose(res.scores, X @ res.coef, atol=1e-12)
    assert res.theta == pytest.approx(0.5 * res.gamma @ res.scores)
    np.testing.assert_allclose(res.objective, kmomd_objective(X @ X.T, None, y, res.gamma, lam, w), rtol=1e-12)


class _NoDensify(sp.csr_matrix):
    """CSR rows that refuse to be densified."""

    def toarray(self, *args, **kwargs):
        raise AssertionError("densified")

    todense = toarray


@pytest.mark.parametrize("direct", [True, False])
def test_newton_dense_csr_float32_and_weights_as_copies(direct):
    X, y = make_classification(n_samples=120, n_features=6, random_state=45)
    y = np.where(y == 1, 1.0, -1.0)
    w = np.random.default_rng(46).integers(1, 4, size=y.size).astype(float)
    ref = kmomd_newton(X, y, w, 0.1, tol=1e-10, direct=direct)
    csr = kmomd_newton(_NoDensify(X), y, w, 0.1, tol=1e-10, direct=direct)
    np.testing.assert_allclose(csr.coef, ref.coef, rtol=1e-9, atol=1e-12)
    # float32 rows: the optimum for X rounded to float32 (values read as they are, sums in float64)
    X32 = X.astype(np.float32)
    for Xf in (X32, sp.csr_matrix(X32)):
        r32 = kmomd_newton(Xf, y, w, 0.1, tol=1e-10, direct=direct)
        exact = kmomd_linear(X32.astype(np.float64), y, w, 0.1, tol=TIGHT)
        np.testing.assert_allclose(r32.coef, exact.coef, rtol=1e-7, atol=1e-10)
    # an integer weight is that many copies of the row
    rep = np.repeat(np.arange(y.size), w.astype(int))
    copies = kmomd_newton(X[rep], y[rep], None, 0.1, tol=1e-10, direct=direct)
    np.testing.assert_allclose(copies.coef, ref.coef, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(copies.objective, ref.objective, rtol=1e-9)


def test_newton_certifies_the_smo_stopping_rule():
    """At the default tol the result meets the SMO's rule, recomputed from scratch, and its
    relative gap is within 2 tol."""
    X, y = make_classification(n_samples=3000, n_features=30, flip_y=0.1, random_state=47)
    y = np.where(y == 1, 1.0, -1.0)
    lam, tol = 0.02, 1e-3
    for direct in (True, False):
        res = kmomd_newton(X, y, None, lam, tol=tol, direct=direct)
        assert res.converged and res.n_iter == 0
        G = 2 * (1 - lam) * y * (X @ (X.T @ (y * res.gamma))) + 2 * lam * res.gamma
        viol = max(G[c & (res.gamma > 0)].max() - G[c].min() for c in (y > 0, y < 0))
        assert viol <= tol * 2 * res.objective
        assert res.violation == pytest.approx(viol, rel=1e-6, abs=1e-6 * tol * res.objective)
        best = kmomd_newton(X, y, None, lam, tol=1e-12).objective
        assert best <= res.objective <= best * (1 + 2 * tol)


def test_newton_hands_over_to_the_smo():
    X, y = _data(m=70, d=4, seed=48)
    res = kmomd_newton(X, y, None, 0.05, tol=1e-10, max_iter=1)
    assert res.converged and res.newton_iter == 1 and res.n_iter > 0  # the SMO completed the rule
    np.testing.assert_allclose(res.objective, kmomd_linear(X, y, None, 0.05, tol=TIGHT).objective, rtol=1e-9)
    with pytest.raises(ValueError, match="lam > 0"):
        kmomd_newton(X, y, None, 0.0)
    centroid = kmomd_newton(X, y, None, 1.0)
    np.testing.assert_allclose(centroid.coef, X[y > 0].mean(0) - X[y < 0].mean(0), atol=1e-12)


def test_estimator_auto_picks_newton_and_keeps_the_old_solvers():
    X, y = make_classification(n_samples=400, n_features=10, random_state=49)
    w = np.random.default_rng(50).uniform(0.5, 2.0, size=y.size)
    auto = KMOMD(kernel="linear", lam=0.05, tol=1e-10).fit(X, y, sample_weight=w)
    newton = KMOMD(kernel="linear", lam=0.05, tol=1e-10, solver="newton").fit(X, y, sample_weight=w)
    lbfgs = KMOMD(kernel="linear", lam=0.05, tol=1e-10, solver="lbfgs").fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(auto.coef_, newton.coef_)
    assert auto.n_iter_ < 30  # Newton iterations, no pair updates
    np.testing.assert_allclose(newton.coef_, lbfgs.coef_, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(newton.intercept_, lbfgs.intercept_, rtol=1e-7)
    # a warm start from the previous lam reaches the same optimum
    warm = KMOMD(kernel="linear", lam=0.2, tol=1e-10, warm_start=True).fit(X, y)
    warm.set_params(lam=0.05).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(warm.coef_, newton.coef_, rtol=1e-7, atol=1e-12)
    with pytest.raises(ValueError, match="solver='newton' needs kernel='linear'"):
        KMOMD(solver="newton", kernel="rbf").fit(X, y)
    with pytest.raises(ValueError, match="solver='newton' needs lam > 0"):
        KMOMD(solver="newton", kernel="linear", lam=0.0).fit(X, y)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pivoted_cholesky_is_exact_on_its_pivots(dtype):
    """The Newton phase's partial Cholesky K ~ F^T F: exact on the pivot rows and columns, its
    residual diagonal d = diag(K) - sum_t F[t]^2 (0 on the pivots), pivots only among the
    candidates, each the candidate with the largest residual diagonal at its step; a float32
    factor (the Newton phase's) to float32's precision, with the same pivots."""
    from margindist.kernels import KernelRowCache, kernel_matrix, resolve_kernel
    from margindist.solvers._pivoted import pivoted_cholesky

    rng = np.random.default_rng(4)
    X = rng.normal(size=(80, 3))
    spec = resolve_kernel("rbf", X, gamma=0.3)
    K = kernel_matrix(spec, X)
    cache = KernelRowCache(spec, X, max_bytes=80 * 8 * 80)
    cand = rng.random(80) < 0.6
    F, piv = np.zeros((12, 80), dtype=dtype), np.zeros(12, dtype=np.int64)
    rank, d = pivoted_cholesky(cache.state, np.diag(K).copy(), cand, 12, 1e-12, F, piv)
    assert rank == 12 and cand[piv].all() and len(set(piv)) == 12
    P, Fr = piv[:rank], F[:rank].astype(np.float64)
    atol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(Fr[:, P].T @ Fr[:, P], K[np.ix_(P, P)], atol=atol)
    np.testing.assert_allclose(Fr.T @ Fr[:, P], K[:, P], atol=atol)
    np.testing.assert_allclose(d, np.diag(K) - (Fr ** 2).sum(axis=0), atol=atol)
    for k in range(rank):  # greedy: the largest residual diagonal among the candidates
        res = np.diag(K) - (Fr[:k] ** 2).sum(axis=0)
        assert res[P[k]] == pytest.approx(res[cand].max(), abs=atol)
    if dtype == np.float32:  # the same pivots as the float64 factor
        F64, piv64 = np.zeros((12, 80)), np.zeros(12, dtype=np.int64)
        pivoted_cholesky(cache.state, np.diag(K).copy(), cand, 12, 1e-12, F64, piv64)
        np.testing.assert_array_equal(piv, piv64)


def _greedy_cholesky(K, cand, r_max, stop, stop_trace, min_rank):
    """One pivot at a time in NumPy: the largest residual diagonal among the candidates (the
    first such row), stopping as :func:`~margindist.solvers._pivoted.pivoted_cholesky` does."""
    d, F, piv = np.diag(K).copy(), np.zeros((0, K.shape[0])), []
    while len(piv) < r_max:
        j = int(np.flatnonzero(cand)[np.argmax(d[cand])])
        if d[j] <= stop or len(piv) >= min_rank and d.sum() <= stop_trace:
            break
        F = np.vstack([F, (K[j] - F.T @ F[:, j]) / np.sqrt(d[j])])
        d = np.maximum(d - F[-1] ** 2, 0.0)
        d[j] = 0.0
        piv.append(j)
    return np.array(piv), F, d


@pytest.mark.parametrize("case", ["all", "candidates", "trace"])
def test_blocked_pivoted_cholesky_takes_the_greedy_pivots(case):
    """The blocked factor (pivots in blocks of PIVOT_BLOCK from the residual rows of twice as
    many candidates) against one pivot at a time in NumPy: the same pivots, factor and residual
    diagonal over several blocks, including blocks cut short because the next pivot was not a
    candidate (here the first 2 * PIVOT_BLOCK rows, the first candidates, are near copies of
    one point), with a candidate subset, and with the stop on the residual's trace (after the
    fewest pivots asked for)."""
    from margindist.kernels import KernelRowCache, kernel_matrix, resolve_kernel
    from margindist.solvers._pivoted import PIVOT_BLOCK, pivoted_cholesky

    rng = np.random.default_rng(7)
    m = 300
    X = rng.normal(size=(m, 4))
    X[: 2 * PIVOT_BLOCK] = X[0] + 1e-3 * rng.normal(size=(2 * PIVOT_BLOCK, 4))
    spec = resolve_kernel("rbf", X, gamma=0.5)
    K = kernel_matrix(spec, X)
    cand = rng.random(m) < 0.7 if case == "candidates" else np.ones(m, dtype=bool)
    stop_trace = 0.5 * np.trace(K) / 4 if case == "trace" else 0.0
    r_max, min_rank = 4 * PIVOT_BLOCK + 5, 10
    ref_piv, ref_F, ref_d = _greedy_cholesky(K, cand, r_max, 1e-12, stop_trace, min_rank)
    F, piv = np.zeros((r_max, m)), np.zeros(r_max, dtype=np.int64)
    cache = KernelRowCache(spec, X, max_bytes=50 * 8 * m)  # rows evicted and recomputed
    rank, d = pivoted_cholesky(cache.state, np.diag(K).copy(), cand, r_max, 1e-12, F, piv, stop_trace, min_rank)
    assert rank == ref_piv.size and (rank == r_max) == (case != "trace") and rank > min_rank
    np.testing.assert_array_equal(piv[:rank], ref_piv)
    np.testing.assert_allclose(F[:rank], ref_F, atol=1e-9)
    np.testing.assert_allclose(d, ref_d, atol=1e-9)


@pytest.mark.parametrize("slots", [3, 10, 60])
def test_rows_combination_with_evictions(slots):
    """C K[rows] from the row cache, one combination (eight rows at a time when the cache holds
    eight; rows evicted and recomputed between the groups) or two (row by row), equals the
    product with the kernel matrix."""
    from margindist.kernels import KernelRowCache, kernel_matrix, resolve_kernel
    from margindist.solvers.kmomd import _rows_combination

    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 4))
    spec = resolve_kernel("rbf", X, gamma=0.4)
    K = kernel_matrix(spec, X)
    rows = rng.permutation(60)[:29]
    for k in (1, 2):
        cache = KernelRowCache(spec, X, max_bytes=slots * 8 * 60)
        C = rng.normal(size=(k, 29))
        out = np.zeros((k, 60))
        _rows_combination(cache.state, rows, C, out)
        np.testing.assert_allclose(out, C @ K[rows], rtol=1e-12, atol=1e-12)


def test_second_order_choice_of_the_second_row():
    """LIBSVM's second-order choice of q given r (a partial cache's SMO) against NumPy: the
    first row of largest (G_q - G_r)^2 / H_rq among the rows with mass and G_q > G_r, or the
    first cached row of the largest cached score when that is at least frac^2 of the largest;
    -1 when no row qualifies. Integer data with many ties, ranges across several chunks."""
    from margindist.solvers.kmomd import _SELECT_CHUNK, _TAU, _second_order_q

    rng = np.random.default_rng(12)
    a2, frac = 1.8, 0.7
    for t in range(400):
        m = int(rng.integers(2, 40 if t % 2 else 3 * _SELECT_CHUNK + 40))
        lo = int(rng.integers(0, m - 1))
        hi = int(rng.integers(lo + 1, m + 1))
        r = int(rng.integers(lo, hi))
        G = rng.integers(-3, 4, size=m).astype(np.float64)
        gamma = np.where(rng.random(m) < 0.6, rng.random(m), 0.0)
        hq = rng.choice([1.0, 2.0, 3.0], size=m)
        Kr = rng.choice([0.0, 0.25, 0.5], size=m).astype(np.float32)
        slot_of = np.where(rng.random(m) < 0.3, 1, -1)
        got = _second_order_q(G, gamma, hq, Kr, r, lo, hi, a2, slot_of, frac)

        q = np.arange(lo, hi)
        d = G[q] - G[r]
        h = np.maximum(hq[r] + hq[q] - 2.0 * a2 * Kr[q].astype(np.float64), _TAU)
        score = np.where((gamma[q] > 0) & (d > 0), d * d / h, 0.0)
        top = score.max()
        if top <= 0:
            assert got == -1
            continue
        held = slot_of[q] >= 0
        top_c = score[held].max(initial=0.0)
        if top_c > 0 and top_c >= frac * frac * top:
            want = q[np.flatnonzero(held & (score == top_c))[0]]
        else:
            want = q[np.flatnonzero(score == top)[0]]
        assert got == want, (t, got, want)


@pytest.mark.parametrize("n_slots", [3, 4, 40])
@pytest.mark.parametrize("lower", [False, True])
def test_gather_block_is_the_principal_block(n_slots, lower):
    """The principal block of K on idx from the cached rows (four rows a pass when the cache
    holds four, one at a time otherwise): K[idx][:, idx], or its lower triangle with the upper
    one left as it was; every size around the groups of four, a cache smaller than idx."""
    from margindist.kernels import KernelRowCache, KernelSpec
    from margindist.solvers.kmomd import _gather_block

    rng = np.random.default_rng(8)
    m = 40
    A = rng.normal(size=(m, m))
    G = A + A.T
    cache = KernelRowCache(KernelSpec("precomputed"), G, max_bytes=8 * m * n_slots)
    assert cache.n_slots == n_slots
    for n in [1, 2, 3, 4, 5, 7, 8, 9, 13, 30]:
        idx = np.sort(rng.choice(m, n, replace=False))
        out = np.full((n, n), np.nan)
        _gather_block(cache.state, idx, out, lower)
        want = G[np.ix_(idx, idx)]
        if lower:
            np.testing.assert_array_equal(np.tril(out), np.tril(want))
            assert np.isnan(out[np.triu_indices(n, 1)]).all()
        else:
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [5, 8, 37])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_block_product_reads_the_lower_triangle_only(dtype, n, k):
    """The Newton phase's V K_II (:func:`~margindist.solvers._gram.sym_rows`) reads the gathered
    block on its lower triangle (the upper one is never gathered): NaN there changes nothing,
    and the product is V K_II in float64, in eight-row tiles and the rows left over, for any
    number of rows of V."""
    from margindist.solvers._gram import sym_rows

    rng = np.random.default_rng(7)
    A = rng.normal(size=(n, n))
    K = (A + A.T).astype(dtype)
    Kb = K.copy()
    Kb[np.triu_indices(n, 1)] = np.nan
    V = rng.normal(size=(k, n))
    out = np.empty_like(V)
    sym_rows(Kb, V, out)
    np.testing.assert_allclose(out, V @ K.astype(np.float64), rtol=1e-12, atol=1e-12)


def test_auto_takes_the_smo_on_linear_problems_with_no_more_rows_than_features():
    """m <= d rows are separable: "auto" runs the SMO on kernel rows there (for CSR X while its
    kernel rows cost at most DUAL_MAX_SPARSE_WORK), the Newton solver in the weight vector
    elsewhere; both reach the same optimum."""
    from margindist.models.kmomd import DUAL_MAX_SPARSE_WORK

    rng = np.random.default_rng(5)

    def solver(X, **kw):
        est = KMOMD(kernel="linear", **kw)
        return est._resolve_solver(X, est._kernel_spec(X))

    wide, tall = rng.random((40, 80)), rng.random((200, 10))
    assert solver(wide) == "dual" and solver(tall) == "newton"
    assert solver(wide, lam=1.0) == "newton" and solver(wide, lam=0.0) == "dual"
    assert solver(tall, lam=0.0) == "primal"
    per_row = int(1.1 * DUAL_MAX_SPARSE_WORK / 2000**2) + 1  # 2000 kernel rows above the budget
    many = sp.csr_matrix((rng.random(2000 * per_row), rng.integers(0, 100_000, 2000 * per_row),
                          np.arange(0, 2000 * per_row + 1, per_row)), shape=(2000, 100_000))
    assert solver(sp.csr_matrix(wide)) == "dual" and solver(many) == "newton"
    y = (wide[:, :5].sum(axis=1) > 2.5).astype(int)
    auto = KMOMD(kernel="linear", tol=1e-10).fit(wide, y)
    newton = KMOMD(kernel="linear", solver="newton", tol=1e-10).fit(wide, y)
    np.testing.assert_allclose(auto.objective_, newton.objective_, rtol=1e-8)
    D = newton.decision_function(wide)
    np.testing.assert_allclose(auto.decision_function(wide), D, atol=1e-6 * np.abs(D).max())


@pytest.mark.parametrize("cache_size", [200, 1])
def test_indefinite_kernel_stops_at_a_kkt_point(cache_size):
    """The sigmoid kernel is not positive semi-definite and L(gamma) can be negative: the stopping
    rule on |L| still ends the pair steps (before, tol * 2 L < 0 kept them going to max_iter)."""
    X, y = make_classification(600, 20, n_informative=10, flip_y=0.02, random_state=11)
    X = (X - X.mean(0)) / X.std(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = KMOMD(kernel="sigmoid", cache_size=cache_size, max_iter=200_000).fit(X, y)
    assert est.n_iter_ < 200_000 and est.objective_[0] < 0.0
    spec, yy = resolve_kernel("sigmoid", X), np.where(y == 1, 1.0, -1.0)
    g = kmomd_kernel(spec, X, yy, lam=0.1, newton=False)
    assert g.converged
    # the KKT point, checked from the Gram matrix: the gradient's within-class spread over the
    # support against tol * 2 |L|, L evaluated from scratch
    K = kernel_matrix(spec, X)
    G = 2 * 0.9 * yy * (K @ (yy * g.gamma)) + 2 * 0.1 * g.gamma
    L = kmomd_objective(spec, X, yy, g.gamma, 0.1)
    spread = max(G[(yy == c) & (g.gamma > 0)].max() - G[yy == c].min() for c in (1.0, -1.0))
    assert L < 0.0 and spread <= 1e-3 * 2.0 * abs(L) * 1.0001
