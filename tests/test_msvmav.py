"""MSVMAv (Qian et al., IJCAI 2022): solver correctness against independent computations."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from _data import scaled as _scaled
from _msvmav_oracles import kernel_factor_loop
from _numdiff import central_diff
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import rbf_kernel, sigmoid_kernel

from margindist._defaults import msvmav_alpha_beta
from margindist.metrics import msvmav_bound_term, semivariance
from margindist.models.msvmav import MSVMAv
from margindist.solvers.msvmav import (
    Design,
    FactorCache,
    msvmav_iterate,
    msvmav_kernel,
    msvmav_linear,
    still_improving,
)
from margindist.solvers.msvmav import _cg
from margindist.solvers.msvmav._cg import CGSystem
from margindist.solvers.msvmav.linear import row_basis

UPDATES = ["sherman-morrison", "batched", "cg"]




def _pm(y):
    return np.where(y == np.unique(y)[1], 1.0, -1.0)


@pytest.fixture
def exact_cg(monkeypatch):
    """Every conjugate-gradient solve to its ``cg_tol`` (no tolerance from the step length:
    the tests of the exact algorithm)."""
    monkeypatch.setattr(_cg, "CG_FORCING", 0.0)


@pytest.fixture(scope="module")
def wdbc():
    X, y = _scaled("wdbc")
    return X, _pm(y)


@pytest.fixture(scope="module")
def australian():
    X, y = _scaled("australian")
    return X, _pm(y)


def _direct_run(Z, s, alpha, beta, T):
    """The paper's Algorithm 1 (unit-weight form generalised to weights) by dense solves."""
    S = s.sum()
    u = Z.T @ s
    w = u / np.linalg.norm(u)
    out = []
    for _ in range(T):
        m = Z @ w
        theta = s @ m / S
        A = m < theta
        H = np.eye(Z.shape[1]) + (Z[A].T * s[A]) @ Z[A] / (S * beta)
        w_half = np.linalg.solve(H, theta / (S * beta) * (Z[A].T @ s[A]) + w)
        w = w_half + u / (2 * alpha * S)
        w /= np.linalg.norm(w)
        if u @ w < 0:
            w = -w
        out.append(w)
    return out


# --------------------------------------------------------------------------------------
# Sherman-Morrison: the paper's Eq. 8 sign and the incremental inverse along a run
# --------------------------------------------------------------------------------------


def test_printed_eq8_sign_is_wrong_and_corrected_sign_is_exact(rng):
    d, nb = 6, 3.0
    B = rng.standard_normal((d, d))
    H = np.eye(d) + B @ B.T / nb
    M = np.linalg.inv(H)
    x = rng.standard_normal(d)
    H_add = H + np.outer(x, x) / nb
    corrected = M - M @ np.outer(x, x) @ M / (x @ M @ x + nb)
    printed = M + M @ np.outer(x, x) @ M / (x @ M @ x + nb)
    assert np.allclose(corrected @ H_add, np.eye(d), atol=1e-12)
    assert not np.allclose(printed @ H_add, np.eye(d), atol=1e-2)
    # removal (Eq. 7, correct as printed) undoes the addition
    back = corrected - corrected @ np.outer(x, x) @ corrected / (x @ corrected @ x - nb)
    assert np.allclose(back, M, atol=1e-12)


@pytest.mark.parametrize("update", UPDATES)
def test_incremental_state_matches_direct_inverse_along_run(wdbc, update, exact_cg):
    X, y = wdbc
    s = np.random.default_rng(1).uniform(0.5, 2.0, size=y.size)
    Z = y[:, None] * np.hstack([X, np.ones((X.shape[0], 1))])
    seen = {"sm": 0, "checked": 0}

    def check(info):
        A = info["active"]
        H = np.eye(Z.shape[1]) + (Z[A].T * s[A]) @ Z[A] / info["nb"]
        Hinv = np.linalg.inv(H)
        rhs = info["theta"] / info["nb"] * (Z[A].T @ s[A]) + info["w_prev"]
        w_direct = Hinv @ rhs
        assert np.linalg.norm(info["w_half"] - w_direct) <= 1e-8 * np.linalg.norm(w_direct)
        if info["G"] is not None:
            G = (Z[A].T * s[A]) @ Z[A]
            assert np.abs(info["G"] - G).max() <= 1e-8 * np.abs(G).max()
        if info["M"] is not None:
            seen["sm"] += 1
            assert np.abs(info["M"] - Hinv).max() <= 1e-8 * np.abs(Hinv).max()
        seen["checked"] += 1

    kw = {"cg_tol": 1e-13} if update == "cg" else {}
    # no forced refresh: the corrected rank-one updates alone stay on the inverse
    res = msvmav_linear(X, y, s, 16.0, 1 / 16, max_iter=100, tol=0.0, update=update,
                              callback=check, **kw)
    assert seen["checked"] == 100
    if update == "sherman-morrison":
        assert seen["sm"] == 100
        assert res.n_refresh == 0  # the probe check never had to recompute M


def test_sherman_morrison_kernel_path_matches_direct_inverse():
    """Eigenbasis + Woodbury: Q M Q^T == (I + K + sum_A K_i K_i^T / (n beta))^{-1} along a run."""
    from margindist.kernels import resolve_kernel

    X, y = _scaled("australian", n=150)
    y = _pm(y)
    n = y.size
    K = rbf_kernel(X, gamma=0.5)
    calls = []

    def check(info):
        A = info["active"]
        KA = K[:, A]
        Hinv = np.linalg.inv(np.eye(n) + K + KA @ KA.T / info["nb"])
        if info["M"] is not None:
            Q = info["basis"]
            M_a = Q @ info["M"] @ Q.T
            assert np.abs(M_a - Hinv).max() <= 1e-8 * np.abs(Hinv).max()
            calls.append(info["k"])

    spec = resolve_kernel("rbf", X, gamma=0.5)
    msvmav_kernel(spec, X, y, np.ones(n), 16.0, 1 / 16, update="sherman-morrison",
                  max_iter=40, tol=0.0, callback=check)
    assert len(calls) == 40


# --------------------------------------------------------------------------------------
# each closed-form step satisfies its stationarity condition (numerical gradients)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("update", ["auto", "sherman-morrison", "cg"])
def test_linear_steps_are_stationary(australian, update, exact_cg):
    X, y = australian
    s = np.random.default_rng(2).uniform(0.5, 2.0, size=y.size)
    alpha, beta = 4.0, 0.25
    Z = y[:, None] * np.hstack([X, np.ones((X.shape[0], 1))])
    S = s.sum()
    u = Z.T @ s
    checked = []

    def check(info):
        A, theta, w_prev, w_half = info["active"], info["theta"], info["w_prev"], info["w_half"]

        def J_sv(w):  # semi-variance step objective (Eq. 6, weighted)
            return (s[A] @ (theta - Z[A] @ w) ** 2) / S + beta * np.sum((w - w_prev) ** 2)

        grad = central_diff(J_sv, w_half, 1e-5)
        scale = np.linalg.norm(central_diff(J_sv, w_prev, 1e-5)) + 1e-12
        assert np.linalg.norm(grad) <= 1e-7 * scale

        w_full = w_half + u / (2 * alpha * S)  # average-margin step (Eq. 10), before normalising

        def J_am(w):
            return -(u @ w) / S + alpha * np.sum((w - w_half) ** 2)

        assert np.linalg.norm(central_diff(J_am, w_full, 1e-5)) <= 1e-8
        w = info["w"]
        assert np.isclose(np.linalg.norm(w), 1.0)
        assert abs(abs(w @ w_full) - np.linalg.norm(w_full)) <= 1e-10 * np.linalg.norm(w_full)
        assert u @ w >= 0  # sign flip keeps the average margin positive
        checked.append(info["k"])

    msvmav_linear(X, y, s, alpha, beta, max_iter=8, tol=0.0, update=update, callback=check)
    assert checked == list(range(1, 9))


@pytest.mark.parametrize("prox,update", [("paper", "batched"), ("rkhs", "batched"), ("paper", "auto")])
def test_kernel_semivariance_step_is_stationary(prox, update):
    from margindist.kernels import resolve_kernel

    X, y = _scaled("wdbc", n=80)
    y = _pm(y)
    s = np.random.default_rng(3).uniform(0.5, 2.0, size=y.size)
    S = s.sum()
    beta, alpha = 0.5, 2.0
    K = rbf_kernel(X, gamma=0.3)
    R = (np.diag(1.0 / s) + K) if prox == "paper" else K
    spec = resolve_kernel("rbf", X, gamma=0.3)
    checked = []

    def check(info):
        A, theta, a_prev, a_half = info["active"], info["theta"], info["a_prev"], info["a_half"]

        def J(a):
            r = theta - y[A] * (K[A] @ a)
            da = a - a_prev
            return (s[A] @ r**2) / S + beta * da @ R @ da

        # the analytic gradient, checked against finite differences at a random point
        def grad(a):
            r = theta - y[A] * (K[A] @ a)
            return -2.0 / S * K[A].T @ (s[A] * y[A] * r) + 2 * beta * R @ (a - a_prev)

        probe = a_prev + 0.1 * np.random.default_rng(0).standard_normal(a_prev.size)
        assert np.allclose(grad(probe), central_diff(J, probe, 1e-5), rtol=1e-6, atol=1e-8)
        g_half = grad(a_half)
        assert np.linalg.norm(g_half) <= 1e-8 * np.linalg.norm(grad(a_prev))
        # average-margin step: argmin -(1/S) sum s y K a + alpha (a - a')^T K (a - a')
        a_full = a_half + s * y / (2 * alpha * S)
        g_am = -(K @ (s * y)) / S + 2 * alpha * K @ (a_full - a_half)
        assert np.linalg.norm(g_am) <= 1e-10 * np.linalg.norm(K @ (s * y)) / S
        # the iterate is a_full normalised in the RKHS norm (up to the sign flip)
        a = info["a"]
        assert np.isclose(a @ K @ a, 1.0)
        f_full = K @ a_full
        assert np.allclose(np.abs(K @ a), np.abs(f_full) / np.sqrt(a_full @ K @ a_full), atol=1e-9)
        assert (s * y) @ (K @ a) > 0
        checked.append(info["k"])

    res = msvmav_kernel(spec, X, y, s, alpha, beta, kernel_prox=prox, max_iter=5, tol=0.0,
                        update=update, callback=check, factor_loop=kernel_factor_loop)
    assert checked == [1, 2, 3, 4, 5]
    assert res.family == ("capacitance" if update == "auto" else "direct")


# --------------------------------------------------------------------------------------
# agreement between paths and with direct implementations
# --------------------------------------------------------------------------------------


def test_linear_path_matches_direct_algorithm(australian, exact_cg):
    X, y = australian
    s = np.ones(y.size)
    Z = y[:, None] * np.hstack([X, np.ones((X.shape[0], 1))])
    w_ref = _direct_run(Z, s, 16.0, 1 / 16, 100)[-1]
    for update in ["auto"] + UPDATES:
        res = msvmav_linear(X, y, s, 16.0, 1 / 16, max_iter=100, tol=0.0, update=update)
        coef, b = res.w, res.b
        assert np.allclose(np.append(coef, b), w_ref, atol=1e-8), update


def test_row_basis_spans_the_rows():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(12, 30))
    X[5] = X[2]  # a repeated row: a rank-deficient span
    for fit_intercept in (True, False):
        space = row_basis(X, fit_intercept)
        Q, C = space.Q, space.Xr
        Xt = np.hstack([X, np.ones((12, 1))]) if fit_intercept else X
        assert Q.shape == (Xt.shape[1], 12) and C.shape == (12, 12)
        assert np.allclose(Q.T @ Q, np.eye(12), atol=1e-12)
        assert np.allclose(C @ Q.T, Xt, atol=1e-12)
    assert row_basis(X[:, :11], True) is None  # 12 rows, 12 coordinates: nothing to gain


def test_sparse_row_basis_spans_the_rows_as_the_dense_one():
    """CSR rows: the span from the Gram matrix's eigendecomposition has the QR's properties
    (orthonormal Q, Xr Q^T = X~) and the same Gram matrix of coordinates; it is not taken on
    more rows than ROW_BASIS_MAX_SPARSE_ROWS, nor where its dense factor would be large."""
    from margindist.solvers.msvmav.linear import ROW_BASIS_MAX_SPARSE_ROWS

    X = sp.random(12, 300, density=0.05, random_state=np.random.default_rng(3)).toarray()
    X[5] = X[2]  # a repeated row: a rank-deficient span
    X = sp.csr_matrix(X)
    for fit_intercept in (True, False):
        space = row_basis(X, fit_intercept)
        dense = row_basis(X.toarray(), fit_intercept)
        Xt = np.hstack([X.toarray(), np.ones((12, 1))]) if fit_intercept else X.toarray()
        r = space.Q.shape[1]
        assert r == np.linalg.matrix_rank(Xt) and space.Xr.shape == (12, r)
        assert np.allclose(space.Q.T @ space.Q, np.eye(r), atol=1e-10)
        assert np.allclose(space.Xr @ space.Q.T, Xt, atol=1e-10)
        assert np.allclose(space.Xr @ space.Xr.T, dense.Xr @ dense.Xr.T, atol=1e-10)
    wide = sp.random(ROW_BASIS_MAX_SPARSE_ROWS + 1, 5000, density=0.001, format="csr", random_state=1)
    assert row_basis(wide, True) is None
    assert row_basis(wide[:20], True) is not None
    assert row_basis(sp.random(20, 10**6, density=1e-5, format="csr", random_state=1), True) is None  # 160 MB dense


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_few_sparse_rows_run_in_their_span(fit_intercept):
    """Few CSR rows against many features: the "auto" update runs on the dense coordinates of
    the rows' span and gives the iterates of the d x d systems ("batched")."""
    rng = np.random.default_rng(10)
    X = sp.random(60, 600, density=0.05, random_state=rng, format="csr")
    y = np.where(np.asarray(X[:, :60].sum(axis=1)).ravel() + rng.normal(scale=0.05, size=60) > 0.15, 1.0, -1.0)
    s = rng.uniform(0.5, 2.0, size=60)
    kw = dict(fit_intercept=fit_intercept, max_iter=150, tol=0.0)  # the last iterate: the best flips on ties
    a = msvmav_linear(X, y, s, 2.0, 0.25, update="auto", **kw)
    b = msvmav_linear(X, y, s, 2.0, 0.25, update="batched", **kw)
    assert a.family == "compiled" and b.family == "direct"
    assert a.n_iter == b.n_iter
    for f in ("n_active", "n_changes"):
        assert np.array_equal(a.history[f], b.history[f])
    assert np.allclose(a.history["bound"], b.history["bound"], rtol=1e-9)
    assert np.allclose(a.w, b.w, atol=1e-9) and np.isclose(a.b, b.b, atol=1e-9)


@pytest.mark.parametrize("solver", ["auto", "fixed-point", "anderson"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_wide_rows_run_in_their_span(solver, fit_intercept):
    """Fewer rows than coordinates: the "auto" update runs in the rows' span (n coordinates)
    and gives the iterates of the d x d systems ("batched"), the same run to rounding."""
    rng = np.random.default_rng(9)
    X = rng.uniform(size=(40, 300)).astype(np.float32)
    y = np.where(X[:, :5].sum(axis=1) + rng.normal(scale=0.3, size=40) > 2.5, 1.0, -1.0)
    s = rng.uniform(0.5, 2.0, size=40)
    kw = dict(fit_intercept=fit_intercept, solver=solver, max_iter=150, return_best=True)
    a = msvmav_linear(X, y, s, 2.0, 0.25, update="auto", **kw)
    b = msvmav_linear(X, y, s, 2.0, 0.25, update="batched", **kw)
    assert a.family == "compiled" and b.family == "direct"  # 40 coordinates against 300 or 301
    assert a.n_iter == b.n_iter and a.best_iter == b.best_iter
    for f in ("n_active", "n_changes"):
        assert np.array_equal(a.history[f], b.history[f])
    assert np.allclose(a.history["bound"], b.history["bound"], rtol=1e-9)
    assert a.w.shape == (300,)
    assert np.allclose(a.w, b.w, atol=1e-9) and np.isclose(a.b, b.b, atol=1e-9)


def test_compiled_loop_matches_numpy_loop(wdbc):
    X, y = wdbc
    s = np.random.default_rng(4).uniform(0.5, 2.0, size=y.size)
    a = msvmav_linear(X, y, s, 2.0, 0.5, max_iter=60, tol=0.0, update="auto")
    b = msvmav_linear(X, y, s, 2.0, 0.5, max_iter=60, tol=0.0, update="batched")
    assert a.family == "compiled" and b.family == "direct"
    assert np.allclose(a.w, b.w, atol=1e-10) and np.isclose(a.b, b.b, atol=1e-10)
    for f in ("theta", "semivariance", "bound"):
        assert np.allclose(a.history[f], b.history[f], rtol=1e-9)
    assert np.allclose(a.history["step"][1:], b.history["step"][1:], rtol=1e-6, atol=1e-12)
    for f in ("n_active", "n_changes"):
        assert np.array_equal(a.history[f], b.history[f])
    # the compiled loop reads the rows in C order; Fortran-ordered input is copied, same run
    c = msvmav_linear(np.asfortranarray(X), y, s, 2.0, 0.5, max_iter=60, tol=0.0, update="auto")
    assert c.family == "compiled" and np.allclose(c.w, a.w, rtol=0, atol=1e-13)
    assert np.array_equal(c.history["n_changes"], a.history["n_changes"])


def test_kernel_paper_update_matches_printed_formula(exact_cg):
    """The eigenbasis / Woodbury implementation against the a-coordinate formula (direct dense computation)."""
    X, y = _scaled("australian", n=120)
    y = _pm(y)
    n = y.size
    gamma, alpha, beta = 0.7, 4.0, 0.25
    K = rbf_kernel(X, gamma=gamma)
    a = y / np.sqrt(y @ K @ y)
    I = np.eye(n)
    for _ in range(30):
        m = y * (K @ a)
        theta = m.mean()
        A = m < theta
        KA = K[:, A]
        a_half = np.linalg.solve(I + K + KA @ KA.T / (n * beta),
                                 (I + K) @ a + theta / (n * beta) * KA @ y[A])
        a = a_half + y / (2 * alpha * n)
        a /= np.sqrt(a @ K @ a)
        if y @ K @ a < 0:
            a = -a
    f_ref = K @ a
    for update in ["auto"] + UPDATES:
        clf = MSVMAv(alpha=alpha, beta=beta, kernel="rbf", gamma=gamma, fit_intercept=False,
                     max_iter=30, tol=0.0, update=update)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(X, y)
        f = clf.decision_function(X)
        assert np.allclose(f, f_ref, atol=1e-8 * np.abs(f_ref).max()), update


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_kernel_path_with_linear_kernel_equals_linear_path(fit_intercept):
    X, y = _scaled("australian", n=200, seed=5)
    kw = dict(alpha=8.0, beta=0.5, max_iter=100, tol=0.0, fit_intercept=fit_intercept)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        lin = MSVMAv(**kw).fit(X, y)
        ker = MSVMAv(dual=True, kernel_prox="rkhs", **kw).fit(X, y)
        paper = MSVMAv(dual=True, **kw).fit(X, y)
    assert hasattr(lin, "coef_") and hasattr(ker, "dual_coef_")
    f_lin, f_ker = lin.decision_function(X), ker.decision_function(X)
    assert np.allclose(f_ker, f_lin, atol=1e-8 * np.abs(f_lin).max())
    # the printed (I + K) proximal metric adds a ridge on the coefficients: not the same model
    assert not np.allclose(paper.decision_function(X), f_lin, atol=1e-4 * np.abs(f_lin).max())


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_sparse_input_is_not_densified(monkeypatch):
    X = sp.random(600, 3000, density=0.01, format="csr", random_state=0)  # too many rows for row_basis: CG
    y = np.where(np.asarray(X.sum(axis=1)).ravel() > np.median(np.asarray(X.sum(axis=1))), 1, 0)

    def refuse(*a, **k):
        raise AssertionError("sparse X was densified")

    monkeypatch.setattr(sp.csr_matrix, "toarray", refuse)
    monkeypatch.setattr(sp.csr_matrix, "todense", refuse)
    clf = MSVMAv(alpha=1.0, beta=1.0, max_iter=20).fit(X, y)  # d > 2048: "auto" picks CG
    assert set(clf.history_["update"][1:]) == {"cg"}
    assert clf.score(X, y) > 0.7


# --------------------------------------------------------------------------------------
# weights, sign, history, options
# --------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_zero_weight_equals_removed_rows():
    X, y = _scaled("pima", n=200)
    sw = np.ones(y.size)
    sw[:30] = 0
    a = MSVMAv(alpha=2.0, beta=0.5, tol=0.0, max_iter=30).fit(X, y, sample_weight=sw)
    b = MSVMAv(alpha=2.0, beta=0.5, tol=0.0, max_iter=30).fit(X[30:], y[30:])
    assert np.allclose(a.coef_, b.coef_, atol=1e-10)


@pytest.mark.parametrize("params", [(2.0**-10, 2.0**-10), (2.0**10, 2.0**-10), (2.0**-10, 2.0**10),
                                    (16.0, 1 / 16), (1.0, 1.0)])
def test_average_margin_stays_positive(params):
    X, y = _scaled("pima")
    alpha, beta = params
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = MSVMAv(alpha=alpha, beta=beta, tol=0.0, max_iter=100, return_best=False).fit(X, y)
    assert np.all(clf.history_["theta"] > 0)
    m = clf.margins(X, y)
    norm = np.sqrt(np.sum(clf.coef_**2) + clf.intercept_[0] ** 2)
    # the history's margins are those of the unit vector [w, b]
    m_hist = m * clf.weight_norm_[0] / norm
    assert np.isclose(m_hist.mean(), clf.history_["theta"][-1], rtol=1e-9)


def test_history_matches_margins_of_returned_model():
    X, y = _scaled("australian")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        last = MSVMAv(alpha=16, beta=1 / 16, max_iter=60, tol=0.0, solver="fixed-point").fit(X, y)
        best = MSVMAv(alpha=16, beta=1 / 16, max_iter=60, tol=0.0, solver="fixed-point", return_best=True).fit(X, y)
    h = last.history_
    assert set(h) == {"theta", "semivariance", "bound", "n_active", "n_changes", "step", "update"}
    assert np.isnan(h["step"][0]) and np.all(h["step"][1:] >= 0)
    assert all(len(v) == last.n_iter_ + 1 for v in h.values())
    yy = _pm(y)

    def unit_margins(clf):
        w = np.append(clf.coef_[0], clf.intercept_[0])
        return yy * (X @ clf.coef_[0] + clf.intercept_[0]) / np.linalg.norm(w)

    m = unit_margins(last)
    assert np.isclose(h["theta"][-1], m.mean(), rtol=1e-10)
    assert np.isclose(h["semivariance"][-1], semivariance(m), rtol=1e-8)
    assert np.isclose(h["bound"][-1], msvmav_bound_term(m), rtol=1e-8)
    assert h["n_active"][-1] == np.count_nonzero(m < m.mean())
    # return_best: the returned iterate has the smallest SV/theta^2 of the run
    mb = unit_margins(best)
    assert best.best_iter_ == int(np.argmin(h["bound"]))
    assert np.isclose(msvmav_bound_term(mb), h["bound"].min(), rtol=1e-8)
    assert msvmav_bound_term(mb) <= msvmav_bound_term(m) + 1e-12


def test_warns_while_active_set_still_changes():
    X, y = _scaled("magic", n=3000)
    with pytest.warns(ConvergenceWarning, match="active set") as record:
        clf = MSVMAv(alpha=16, beta=1 / 16, max_iter=5).fit(X, y)
    assert clf.history_["n_changes"][-1] > 0
    # the remedy offered is one the user has not already taken
    assert not any("return_best=True" in str(w.message) for w in record)
    with pytest.warns(ConvergenceWarning, match="or use return_best=True"):
        MSVMAv(alpha=16, beta=1 / 16, max_iter=5, return_best=False).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = MSVMAv(alpha=1 / 16, beta=16, max_iter=100).fit(X, y)  # settles quickly
    assert clf.n_iter_ < 100


def test_tol_zero_runs_all_iterations_and_tol_stops_early():
    X, y = _scaled("wdbc")
    a = MSVMAv(alpha=1.0, beta=1.0, tol=0.0, max_iter=100, return_best=False).fit(X, y)
    b = MSVMAv(alpha=1.0, beta=1.0, tol=1e-6, max_iter=100, return_best=False).fit(X, y)
    assert a.n_iter_ == 100 and b.n_iter_ < 100
    assert np.abs(a.coef_ - b.coef_).max() < 1e-4


@pytest.mark.parametrize("bad", [{"alpha": 0.0}, {"alpha": -1.0}, {"beta": 0.0}, {"beta": -2.0}])
def test_bad_parameters_raise(bad):
    X, y = _scaled("wdbc", n=50)
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        MSVMAv(**bad).fit(X, y)


def test_inconsistent_options_raise():
    X, y = _scaled("wdbc", n=50)
    with pytest.raises(ValueError, match="dual=False needs kernel=.linear. or the Nystrom path"):
        MSVMAv(kernel="rbf", dual=False).fit(X, y)
    K = rbf_kernel(X)
    with pytest.raises(ValueError, match="kernel_approximation"):
        MSVMAv(kernel="precomputed", kernel_approximation=10).fit(K, y)


@pytest.mark.parametrize("strategy", ["ovr", "ovo"])
def test_multiclass(strategy):
    X, y = _scaled("iris")
    clf = MSVMAv(alpha=16, beta=1 / 16, multi_class=strategy).fit(X, y)
    K = np.unique(y).size
    P = K if strategy == "ovr" else K * (K - 1) // 2
    assert clf.coef_.shape == (P, X.shape[1])
    assert clf.decision_function(X).shape == (X.shape[0], K)
    assert isinstance(clf.history_, list) and len(clf.history_) == P
    assert clf.score(X, y) > 0.8
    rbf = MSVMAv(alpha=16, beta=1 / 16, kernel="rbf", multi_class=strategy).fit(X, y)
    assert rbf.score(X, y) > 0.85


def test_float32_rbf_accuracy():
    """float32 = float64 and the dtype kept: tests/test_estimator_table.py; here the accuracy."""
    X, y = _scaled("australian")
    rbf = MSVMAv(kernel="rbf").fit(X.astype(np.float32), y)
    assert rbf.score(X.astype(np.float32), y) > 0.8


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_nystroem_full_rank_equals_exact_rkhs_kernel_path():
    X, y = _scaled("wdbc", n=120)
    kw = dict(alpha=2.0, beta=0.5, kernel="rbf", gamma=0.2, tol=0.0, max_iter=40)
    exact = MSVMAv(dual=True, kernel_prox="rkhs", **kw).fit(X, y)
    ny = MSVMAv(kernel_approximation=X.shape[0], random_state=0, **kw).fit(X, y)
    f, g = exact.decision_function(X), ny.decision_function(X)
    assert np.allclose(f, g, atol=1e-5 * np.abs(f).max())


def test_nystroem_landmarks_and_accuracy():
    """Same and other seeds: tests/test_estimator_table.py; here the landmark count and accuracy."""
    X, y = _scaled("magic", n=3000)
    kw = dict(alpha=16, beta=1 / 16, kernel="rbf", kernel_approximation=100, return_best=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = MSVMAv(random_state=0, **kw).fit(X, y)
    assert a.support_.size <= 100
    assert a.score(X, y) > 0.75


def test_precomputed_kernel_equals_named_kernel():
    X, y = _scaled("australian", n=150)
    K = rbf_kernel(X, gamma=0.4)
    a = MSVMAv(kernel="rbf", gamma=0.4, tol=0.0, max_iter=30).fit(X, y)
    b = MSVMAv(kernel="precomputed", tol=0.0, max_iter=30).fit(K, y)
    assert np.allclose(a.decision_function(X), b.decision_function(K), atol=1e-9)


def test_design_products_against_dense(rng):
    B = rng.standard_normal((30, 7))
    r = rng.choice([-1.0, 1.0], 30)
    Zi = r[:, None] * np.hstack([B, np.ones((30, 1))])
    for Bm in (B, sp.csr_matrix(B)):
        D = Design(Bm, r, intercept=True)
        w, t = rng.standard_normal(8), rng.standard_normal(30)
        assert np.allclose(D.matvec(w), Zi @ w) and np.allclose(D.rmatvec(t), Zi.T @ t)
        R = D.rows(np.array([3, 5, 11]))
        assert np.allclose(R.toarray() if sp.issparse(R) else R, Zi[[3, 5, 11]])
    c = rng.random(7)
    D = Design(B, r, col_scale=c)
    assert np.allclose(D.matvec(w[:7]), (r[:, None] * B * c) @ w[:7])


def test_degenerate_start_is_handled():
    # u = sum_i s_i y_i x_i = 0: balanced identical class means
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    y = np.array([0, 0, 1, 1])
    clf = MSVMAv().fit(X, y)
    assert np.all(np.isfinite(clf.coef_))


def test_core_iterate_generic_metric_runs():
    # P and N not the identity (kernel-style coordinates) with the direct schemes agreeing
    rng = np.random.default_rng(8)
    B = rng.standard_normal((60, 10))
    r = np.sign(B[:, 0] + 0.3 * rng.standard_normal(60))
    P, N = 1.0 + rng.random(10), rng.random(10) + 0.1
    out = [msvmav_iterate(Design(B, r), np.ones(60), 2.0, 0.5, prox=P, norm_weights=N, step=r @ B,
                          max_iter=30, tol=0.0, update=u).w for u in UPDATES]
    assert np.allclose(out[0], out[1], atol=1e-9) and np.allclose(out[0], out[2], atol=1e-7)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_eigendecomposition_cache_reuse_gives_identical_models():
    X, y = _scaled("australian", n=200, seed=9)
    cache = FactorCache()
    kw = dict(kernel="rbf", gamma=0.3, tol=0.0, max_iter=30)
    a = MSVMAv(alpha=2.0, beta=0.5, cache_size=0, **kw).fit(X, y)
    assert len(cache) == 0
    MSVMAv(alpha=8.0, beta=0.5, factor_cache=cache, **kw).fit(X, y)  # fills the cache
    assert len(cache) == 1
    b = MSVMAv(alpha=2.0, beta=0.5, factor_cache=cache, **kw).fit(X.copy(), y)  # same content: a cache hit
    assert len(cache) == 1
    assert np.array_equal(a.dual_coef_, b.dual_coef_)
    MSVMAv(alpha=2.0, beta=0.5, factor_cache=cache, **kw).fit(X, y, sample_weight=np.full(y.size, 2.0))  # new key
    assert len(cache) == 2


def test_factor_cache_is_shared_by_clones_and_pickles_empty():
    import pickle

    from sklearn.base import clone

    X, y = _scaled("wdbc", n=80, seed=17)
    cache = FactorCache()
    est = MSVMAv(kernel="rbf", gamma=0.3, max_iter=10, factor_cache=cache)
    assert clone(est).factor_cache is cache  # a grid search's clones share the instance
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert len(cache) == 1 and getattr(est, "_fit_cache", None) is None
    copy = pickle.loads(pickle.dumps(est))
    assert len(copy.factor_cache) == 0 and copy.factor_cache.max_bytes == cache.max_bytes
    assert np.allclose(copy.decision_function(X), est.decision_function(X))


# --------------------------------------------------------------------------------------
# conjugate-gradient state: row copy with stale / extra rows, maintained products, start
# --------------------------------------------------------------------------------------


def _cg_problem(sparse, intercept=True, n=300, p=40, seed=11):
    rng = np.random.default_rng(seed)
    B = rng.random((n, p)) * (rng.random((n, p)) < 0.3)
    r = rng.choice([-1.0, 1.0], n)
    s = rng.uniform(0.5, 2.0, n)
    D = Design(sp.csr_matrix(B) if sparse else B, r, intercept=intercept)
    Z = r[:, None] * (np.hstack([B, np.ones((n, 1))]) if intercept else B)
    return D, Z, s, rng


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("intercept", [False, True])
def test_cg_system_follows_active_set_exactly(sparse, intercept):
    """Products through the stale copy + extra rows, g, diag(G), the mean direction and the
    window's maintained H-products all equal direct computations while A wanders, across
    rebuilds of the copy."""
    D, Z, s, rng = _cg_problem(sparse, intercept)
    n, d = Z.shape
    P = 1.0 + rng.random(d)
    nb = 7.0
    cgs = CGSystem(D, s, P, nb)
    A = rng.random(n) < 0.5
    prev = np.zeros(n, dtype=bool)
    rebuilds = 0
    for step in range(40):
        diff = np.flatnonzero(A != prev)
        old_pos = cgs.pos.copy()
        cgs.move(A, diff[A[diff]], diff[~A[diff]])
        rebuilds += step > 0 and not np.array_equal(old_pos, cgs.pos)
        H = np.diag(P) + (Z[A].T * s[A]) @ Z[A] / nb
        v = rng.standard_normal(d)
        assert np.allclose(cgs.matvec(v), H @ v, rtol=0, atol=1e-12 * np.abs(H @ v).max())
        assert np.allclose(cgs.g, Z[A].T @ s[A], atol=1e-10)
        assert np.allclose(cgs.diagG, (Z[A] ** 2).T @ s[A], atol=1e-10)
        assert np.allclose(cgs.t, Z[A].T @ (s[A] * D.r[A]), atol=1e-10)
        for j in range(cgs.k):  # the window's products follow H
            assert np.allclose(cgs.HW[:, j], H @ cgs.W[:, j], atol=1e-10 * np.abs(H).max())
        b = rng.standard_normal(d)
        x, r0 = cgs._start(b)
        assert np.allclose(r0, b - H @ x, atol=1e-10 * np.linalg.norm(b))
        if cgs.k:  # Galerkin: no worse in the energy norm than the newest solution, scaled
            x_star = np.linalg.solve(H, b)
            w0 = cgs.W[:, 0] * (cgs.W[:, 0] @ b) / (cgs.W[:, 0] @ H @ cgs.W[:, 0])

            def energy(v):
                return (v - x_star) @ H @ (v - x_star)

            assert energy(x) <= energy(w0) * (1 + 1e-8) + 1e-20
        x, _, done = cgs.solve(b, 1e-12, 1000)
        assert done and np.linalg.norm(H @ x - b) <= 1e-11 * np.linalg.norm(b)
        prev = A
        A = A.copy()
        flip = rng.choice(n, 3 if step % 10 else 40, replace=False)  # mostly small changes
        A[flip] = ~A[flip]
    assert rebuilds > 0  # the copy was rebuilt at least once along the way


@pytest.mark.parametrize("intercept", [False, True])
def test_cg_preconditioner_is_inverse_of_diagonal_plus_mean(intercept):
    D, Z, s, rng = _cg_problem(True, intercept)
    n, d = Z.shape
    P, nb = np.ones(d), 3.0
    cgs = CGSystem(D, s, P, nb)
    A = rng.random(n) < 0.6
    cgs.move(A, np.flatnonzero(A), np.empty(0, dtype=np.int64))
    t = Z[A].T @ (s[A] * D.r[A])
    tau = s[A] @ D.r[A] ** 2
    diag_cov = (Z[A] ** 2).T @ s[A] - t * t / tau
    assert np.all(diag_cov >= -1e-12)
    M = np.diag(P + diag_cov / nb) + np.outer(t, t) / (tau * nb)
    v = rng.standard_normal(d)
    assert np.allclose(cgs._preconditioner()(v), np.linalg.solve(M, v), rtol=1e-10, atol=1e-12)
    if intercept:  # the bias row of M is H's
        H = np.diag(P) + (Z[A].T * s[A]) @ Z[A] / nb
        assert np.allclose(M[-1], H[-1], rtol=1e-12)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_sparse_cg_steps_match_direct_solves(exact_cg):
    """Sparse X through the CG scheme (weights, intercept): every semi-variance step equals the
    dense direct solve, and the model equals the dense direct scheme's."""
    rng = np.random.default_rng(12)
    X = sp.random(500, 300, density=0.05, format="csr", random_state=3)
    y = np.where(X @ rng.standard_normal(300) + 0.1 * rng.standard_normal(500) > 0, 1.0, -1.0)
    s = rng.uniform(0.5, 2.0, 500)
    Z = y[:, None] * np.hstack([X.toarray(), np.ones((500, 1))])
    errs = []

    def check(info):
        A = info["active"]
        H = np.eye(Z.shape[1]) + (Z[A].T * s[A]) @ Z[A] / info["nb"]
        w_direct = np.linalg.solve(H, info["theta"] / info["nb"] * (Z[A].T @ s[A]) + info["w_prev"])
        errs.append(np.linalg.norm(info["w_half"] - w_direct) / np.linalg.norm(w_direct))

    r1 = msvmav_linear(X, y, s, 8.0, 0.125, max_iter=60, tol=0.0, update="cg", callback=check)
    c1, b1 = r1.w, r1.b
    assert len(errs) == 60 and max(errs) <= 1e-8
    r2 = msvmav_linear(X.toarray(), y, s, 8.0, 0.125, max_iter=60, tol=0.0, update="batched")
    c2, b2 = r2.w, r2.b
    assert np.allclose(np.append(c1, b1), np.append(c2, b2), atol=1e-8)


def test_cg_solves_each_step_to_a_fraction_of_the_last_move():
    """With the forcing rule (the default for the paper's iteration), each CG solve's error is
    at most CG_FORCING times the run's last step length (its residual's bound; H >= I),
    checked against the dense direct solve of every step; the solves need fewer products than
    solves to cg_tol, and the run settles at the same point to a small fraction of its path.
    Anderson's evaluations are solved to cg_tol whatever cg_forcing."""
    rng = np.random.default_rng(12)
    X = sp.random(2000, 300, density=0.05, format="csr", random_state=3)
    y = np.where(X @ rng.standard_normal(300) + 0.3 * rng.standard_normal(2000) > 0, 1.0, -1.0)
    s = rng.uniform(0.5, 2.0, 2000)
    Z = y[:, None] * np.hstack([X.toarray(), np.ones((2000, 1))])
    ratios, last = [], {}

    def check(info):
        A = info["active"]
        H = np.eye(Z.shape[1]) + (Z[A].T * s[A]) @ Z[A] / info["nb"]
        rhs = info["theta"] / info["nb"] * (Z[A].T @ s[A]) + info["w_prev"]
        err = np.linalg.norm(info["w_half"] - np.linalg.solve(H, rhs))
        ratios.append(err / max(_cg.CG_TOL * np.linalg.norm(rhs), _cg.CG_FORCING * last.get("step", 0.0)))
        last["step"] = np.linalg.norm(info["w"] - info["w_prev"])

    kw = dict(max_iter=400, tol=1e-7, update="cg", return_best=True)
    forced = msvmav_linear(X, y, s, 64.0, 0.01, callback=check, **kw)
    exact = msvmav_linear(X, y, s, 64.0, 0.01, cg_forcing=0.0, **kw)
    assert forced.converged and exact.converged and max(ratios) <= 1.0
    assert forced.n_products < 0.75 * exact.n_products  # 220 against 374
    path = np.abs(np.diff(exact.history["bound"])).sum()
    assert abs(forced.history["bound"][forced.best_iter] - exact.history["bound"][exact.best_iter]) <= 1e-3 * path
    assert np.linalg.norm(forced.w - exact.w) <= 1e-4 * np.linalg.norm(exact.w)
    kw["solver"] = "anderson"
    a, b = (msvmav_linear(X, y, s, 64.0, 0.01, cg_forcing=f, **kw) for f in (None, 0.0))
    assert a.n_products == b.n_products and np.array_equal(a.w, b.w)



# --------------------------------------------------------------------------------------
# kernel path in the coefficients: capacitance inverse, compiled loop, eigenbasis route
# --------------------------------------------------------------------------------------


def _kernel_problem(n=150, seed=13, weights=True):
    from margindist.kernels import resolve_kernel

    X, y = _scaled("australian", n=n, seed=seed)
    y = _pm(y)
    s = np.random.default_rng(seed).uniform(0.5, 2.0, y.size) if weights else np.ones(y.size)
    return X, y, s, resolve_kernel("rbf", X, gamma=0.5)


@pytest.mark.parametrize("beta", [2.0**-8, 0.25, 16.0])
def test_capacitance_inverse_matches_direct_inverse_along_run(beta):
    """The explicit inverse of C = nb D_A^-1 + Y_A (K R^-1 K)_AA Y_A, followed through the
    changes of A by bordering / Schur-complement updates, equals the direct inverse."""
    X, y, s, spec = _kernel_problem()
    K = rbf_kernel(X, gamma=0.5)
    R = np.diag(1.0 / s) + K
    T = K @ np.linalg.solve(R, K)
    schemes = []

    def check(info):
        act = info["act"]
        assert set(act) == set(np.flatnonzero(info["active"]))
        C = info["nb"] * np.diag(1.0 / s[act]) + np.outer(y[act], y[act]) * T[np.ix_(act, act)]
        Cinv = np.linalg.inv(C)
        assert np.abs(info["C_inv"] - Cinv).max() <= 1e-8 * np.abs(Cinv).max()
        schemes.append(info["scheme"])

    res = msvmav_kernel(spec, X, y, s, 4.0, beta, max_iter=60, tol=0.0, callback=check,
                        factor_loop=kernel_factor_loop)
    assert len(schemes) == 60 and "capacitance" in schemes  # incremental updates happened
    assert res.n_refresh == 0  # the probe check never had to refactorise


def test_capacitance_probe_residual_detects_a_drifted_inverse():
    """The probe check of the compiled loop, ||p - C Ci p|| with C q from two products with K
    and R^{-1} (one triangle each), equals the same residual from C assembled entry by entry
    (as the refactorisation gathers it): round-off for the exact inverse, the drift for a
    perturbed one."""
    from margindist.solvers.msvmav._loops import _cap_residual, _gather
    from margindist.solvers.msvmav.kernel import weighted_gram_factor

    X, y, s, spec = _kernel_problem(n=120, seed=21)
    K, Rinv = weighted_gram_factor(spec, X, s, True)
    Rl = np.tril(Rinv) + np.tril(Rinv, -1).T  # valid on its lower triangle
    act = np.random.default_rng(0).permutation(120)[:70]  # A in the order the indices entered
    nb, ys = 0.05 * s.sum(), y / s
    C = _gather(K, Rinv, y, ys, s, nb, act, act, True)
    np.testing.assert_allclose(C, nb * np.diag(1 / s[act]) + np.outer(y[act], y[act]) * (K @ np.linalg.solve(
        np.linalg.inv(Rl), K))[np.ix_(act, act)], rtol=1e-8, atol=1e-10 * np.abs(C).max())
    p = np.cos(np.arange(1, 71) * 2.399963229728653)
    p /= np.linalg.norm(p)
    for drift in (0.0, 1e-7):
        Ci = np.linalg.inv(C) * (1.0 + drift * np.random.default_rng(1).normal(size=C.shape))
        expected = np.linalg.norm(p - C @ (Ci @ p))
        got = _cap_residual(Ci.ravel().copy(), 70, act, K, Rinv, y, ys, s, nb)
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-13)
    assert got > 1e-9 and expected > 1e-9  # the drift is seen (REFRESH_TOL is 1e-10)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_compiled_kernel_loop_matches_numpy_loop_and_eigenbasis(fit_intercept):
    """The compiled capacitance loop, its NumPy twin (used with a callback) and the eigenbasis
    Woodbury route give the same iterates; forced refactorisations change nothing."""
    X, y, s, spec = _kernel_problem(n=200, seed=14)
    kw = dict(max_iter=80, tol=0.0, fit_intercept=fit_intercept)
    res = msvmav_kernel(spec, X, y, s, 16.0, 2.0**-6, **kw)
    res2 = msvmav_kernel(spec, X, y, s, 16.0, 2.0**-6, callback=lambda info: None,
                         factor_loop=kernel_factor_loop, **kw)
    res3 = msvmav_kernel(spec, X, y, s, 16.0, 2.0**-6, update="batched", **kw)
    res4 = msvmav_kernel(spec, X, y, s, 16.0, 2.0**-6, refresh_every=1, **kw)
    (a, b), a2, (a3, b3), a4 = (res.w, res.b), res2.w, (res3.w, res3.b), res4.w
    assert res.family == res2.family == res4.family == "capacitance"
    assert res3.family == "direct"
    assert "capacitance" in set(res.history["update"])  # not only refactorisations
    upd, moved = res4.history["update"][1:], res4.history["n_changes"][:-1] > 0
    assert res4.n_refresh > 0 and set(upd[moved]) == {"capacitance-refactor"}
    scale = np.abs(a3).max()
    for other in (a2, a3, a4):
        assert np.allclose(a, other, atol=1e-9 * scale)
    assert np.isclose(b, b3, atol=1e-9 * scale)
    for f in ("theta", "semivariance", "bound"):
        assert np.allclose(res.history[f], res3.history[f], rtol=1e-9)
        assert np.allclose(res.history[f], res2.history[f], rtol=1e-9)
    for f in ("n_active", "n_changes"):
        assert np.array_equal(res.history[f], res3.history[f])
    assert np.allclose(res.history["step"][1:], res2.history["step"][1:], rtol=1e-6, atol=1e-9)
    assert np.array_equal(res.history["update"], res2.history["update"])
    K = rbf_kernel(X, gamma=0.5) + fit_intercept
    assert np.isclose(a @ K @ a, 1.0)  # ||f||_H = 1


def test_kernel_factor_route_only_for_psd_kernels():
    from margindist.kernels import resolve_kernel

    X, y, s, spec = _kernel_problem(n=80, seed=15)
    kw = dict(max_iter=10, tol=0.0)
    assert msvmav_kernel(spec, X, y, s, 2.0, 0.5, **kw).family == "capacitance"
    sig = resolve_kernel("sigmoid", X, gamma=0.5, coef0=-1.0)  # indefinite: the eigenbasis clips it
    assert msvmav_kernel(sig, X, y, s, 2.0, 0.5, **kw).family == "direct"
    pre = resolve_kernel("precomputed", rbf_kernel(X, gamma=0.5))
    assert msvmav_kernel(pre, rbf_kernel(X, gamma=0.5), y, s, 2.0, 0.5, **kw).family == "direct"
    assert msvmav_kernel(spec, X, y, s, 2.0, 0.5, kernel_prox="rkhs", **kw).family == "direct"


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_an_indefinite_kernel_model_has_its_clipped_margins_with_the_kernel_itself(fit_intercept):
    """The eigenbasis route runs with the positive part K+ of a sigmoid kernel's Gram matrix;
    the returned coefficients lie in its span, so the model evaluated with the kernel itself
    (K a, as predict does) has the margins the iteration recorded: its average margin is the
    history's theta at the returned iterate, and K a = K+ a, K+ from an independent
    eigendecomposition."""
    from margindist.kernels import resolve_kernel

    X, y, s, _ = _kernel_problem(n=120, seed=17)
    spec = resolve_kernel("sigmoid", X, gamma=0.5, coef0=-0.5)
    K = sigmoid_kernel(X, gamma=0.5, coef0=-0.5) + float(fit_intercept)
    rs = np.sqrt(s)
    lam, Q = np.linalg.eigh(rs[:, None] * K * rs[None, :])
    assert lam.min() < -1e-3 * lam.max()  # indefinite, noticeably
    K_plus = (Q * np.maximum(lam, 0.0)) @ Q.T / rs[:, None] / rs[None, :]
    res = msvmav_kernel(spec, X, y, s, 2.0, 0.5, max_iter=40, tol=0.0, fit_intercept=fit_intercept,
                        return_best=True)
    a = res.w
    np.testing.assert_allclose(K @ a, K_plus @ a, atol=1e-10 * np.abs(K_plus @ a).max())
    margins = y * (K @ a) / np.sqrt(a @ K_plus @ a)
    assert s @ margins / s.sum() == pytest.approx(res.history["theta"][res.best_iter], rel=1e-8)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_weight_norm_of_kernel_model_is_its_rkhs_norm(fit_intercept):
    X, y = _scaled("wdbc", n=150, seed=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = MSVMAv(alpha=4.0, beta=0.25, kernel="rbf", gamma=0.3, fit_intercept=fit_intercept).fit(X, y)
    a = clf.dual_coef_[0]
    K = rbf_kernel(clf.support_vectors_, gamma=0.3)
    assert np.isclose(clf.weight_norm_[0], np.sqrt(a @ K @ a), rtol=1e-10)


# ----------------------------------------------------------------------------- screened margins


def _dense_problem(n=3000, d=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > np.median(X @ rng.standard_normal(d)), 1.0,
                 -1.0)
    return X, y, rng.uniform(0.5, 2.0, n)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_compiled_loop_screening_gives_the_full_pass_active_sets(fit_intercept):
    """The compiled loop recomputes only the margins near theta after a full pass: its active
    sets are those of the NumPy loop (every margin every iteration), so are its iterates, and
    its SV (quadratic form of the Gram sum plus the changed rows) equals the direct sum."""
    X, y, s = _dense_problem()
    a = msvmav_linear(X, y, s, 4.0, 0.05, max_iter=250, tol=0.0, update="auto", fit_intercept=fit_intercept)
    b = msvmav_linear(X, y, s, 4.0, 0.05, max_iter=250, tol=0.0, update="batched", fit_intercept=fit_intercept)
    assert a.family == "compiled" and b.family == "direct"
    assert a.n_products < a.n_iter / 2  # most iterations screened, not a full pass
    for f in ("n_active", "n_changes"):
        assert np.array_equal(a.history[f], b.history[f])
    assert a.history["n_changes"][1:].sum() > 250  # the active set did move
    assert np.allclose(a.w, b.w, rtol=0, atol=1e-10) and np.isclose(a.b, b.b, atol=1e-10)
    for f in ("theta", "semivariance", "bound"):
        np.testing.assert_allclose(a.history[f], b.history[f], rtol=1e-9)
    # the best iterate by SV/theta^2 (ties at round-off, between settled iterates, may pick
    # another index with the same bound)
    assert a.history["bound"][a.best_iter] == pytest.approx(b.history["bound"].min(), rel=1e-9)


def test_compiled_loop_screened_history_is_that_of_exact_margins():
    """|A| and SV recorded for the last (screened) iterate equal those of its exact margins."""
    X, y, s = _dense_problem(seed=1)
    res = msvmav_linear(X, y, s, 4.0, 0.05, max_iter=120, tol=0.0, update="auto", return_best=False)
    assert res.n_products < 60
    w = np.append(res.w, res.b)
    m = y * (np.column_stack([X, np.ones(len(y))]) @ w)
    theta = res.history["theta"][-1]
    A = m < theta
    assert res.history["n_active"][-1] == A.sum()
    sv = s[A] @ (theta - m[A]) ** 2 / s.sum()
    assert res.history["semivariance"][-1] == pytest.approx(sv, rel=1e-9)


def _screen_problem(sparse, n=2500, p=300, seed=3):
    """Rows that a linear rule labels with noise: dense with more features than the compiled
    loop takes (the direct family), or CSR (the CG family)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, p)) * (rng.random((n, p)) < 0.1)
    y = np.where(X @ rng.standard_normal(p) + 0.05 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return (sp.csr_matrix(X) if sparse else X), y, rng.uniform(0.5, 2.0, n)


def _screened_and_full(monkeypatch, X, y, s, **kw):
    """The same run with the NumPy loop's margin screening on every problem size, and off;
    also returns how many full passes the screened run made."""
    from margindist.solvers.msvmav import _screen, linear

    passes = []
    full_pass = _screen.MarginScreen.full_pass

    def counted(self, w, v):
        passes.append(1)
        return full_pass(self, w, v)

    monkeypatch.setattr(_screen.MarginScreen, "full_pass", counted)
    monkeypatch.setattr(linear, "SCREEN_MIN_WORK", 0)
    a = msvmav_linear(X, y, s, 4.0, 0.05, **kw)
    monkeypatch.setattr(linear, "SCREEN_MIN_WORK", 2**62)
    b = msvmav_linear(X, y, s, 4.0, 0.05, **kw)
    return a, b, len(passes)


@pytest.mark.parametrize("sparse", [False, True])
def test_numpy_loop_screening_gives_the_full_pass_active_sets(monkeypatch, sparse):
    """The NumPy loop (direct family on dense rows with many features, CG on CSR) recomputes only
    the margins near theta between full passes: the same active sets, hence iterates, as with
    every margin every iteration, and the same SV (the quadratic form over A_k from the step's
    solve, plus the rows that changed side) to round-off."""
    X, y, s = _screen_problem(sparse)
    a, b, passes = _screened_and_full(monkeypatch, X, y, s, max_iter=150, tol=0.0, update="cg" if sparse else "auto")
    assert a.family == b.family == ("cg" if sparse else "direct")
    assert passes < a.n_iter / 2  # most iterations screened
    for f in ("n_active", "n_changes"):
        assert np.array_equal(a.history[f], b.history[f])
    assert a.history["n_changes"][1:].sum() > 150  # the active set did move
    for f in ("theta", "semivariance", "bound"):
        np.testing.assert_allclose(a.history[f], b.history[f], rtol=1e-9)
    np.testing.assert_allclose(a.w, b.w, rtol=0, atol=1e-12)
    # the best iterate by SV/theta^2 (ties at round-off between settled iterates may pick another
    # index with the same bound)
    assert a.history["bound"][a.best_iter] == pytest.approx(b.history["bound"].min(), rel=1e-9)


@pytest.mark.parametrize("rule", ["cancel", "fraction"])
def test_numpy_loop_screening_falls_back_to_full_passes(monkeypatch, rule):
    """A quadratic form that lost its digits, or too many rows near theta, take a full pass:
    with either rule always firing, every iteration is a full pass and the run is the
    unscreened one."""
    from margindist.solvers.msvmav import _screen

    monkeypatch.setattr(_screen, "CANCEL" if rule == "cancel" else "FULL_FRACTION", 2.0 if rule == "cancel" else -1.0)
    X, y, s = _screen_problem(True, n=800, p=120)
    a, b, passes = _screened_and_full(monkeypatch, X, y, s, max_iter=40, tol=0.0)
    assert passes == a.n_iter + 1
    for f in ("n_active", "n_changes", "semivariance"):
        assert np.array_equal(a.history[f], b.history[f])
    np.testing.assert_array_equal(a.w, b.w)


@pytest.mark.parametrize("kind", ["dense", "float32", "csr", "col_scale"])
def test_design_row_norms_and_products_at_rows(rng, kind):
    n, p = 40, 7
    B = rng.random((n, p)) * (rng.random((n, p)) < 0.5)
    r = rng.choice([-2.0, 1.0], n)
    c = rng.uniform(0.5, 2.0, p) if kind == "col_scale" else None
    Bin = {"float32": B.astype(np.float32), "csr": sp.csr_matrix(B)}.get(kind, B)
    D = Design(Bin, r, col_scale=c, intercept=c is None)
    Bf = np.asarray(Bin, dtype=np.float64) if kind != "csr" else B
    Z = r[:, None] * (Bf * c if c is not None else np.hstack([Bf, np.ones((n, 1))]))
    np.testing.assert_allclose(D.sq_row_norms(), np.einsum("ij,ij->i", Z, Z), rtol=1e-12)
    assert D.work() == (sp.csr_matrix(B).nnz if kind == "csr" else n * p)
    w = rng.standard_normal(D.d)
    idx = np.array([5, 0, 31, 5, 12])
    np.testing.assert_allclose(D.matvec_at(idx, w), (Z @ w)[idx], rtol=1e-12)
    assert D.matvec_at(idx[:0], w).shape == (0,)
    t = rng.standard_normal(idx.size)
    np.testing.assert_allclose(D.rmatvec_at(idx, t), Z[idx].T @ t, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(D.rmatvec_at(idx[:0], t[:0]), np.zeros(D.d))


# --------------------------------------------------------------------------------------
# solver="anderson": the same fixed point as the paper's iteration, in fewer evaluations
# --------------------------------------------------------------------------------------


def _paper_step(Z, s, alpha, beta, w):
    """One step of the paper's Algorithm 1 from w (dense solves; :func:`_direct_run`'s body)."""
    S = s.sum()
    u = Z.T @ s
    m = Z @ w
    theta = s @ m / S
    A = m < theta
    H = np.eye(Z.shape[1]) + (Z[A].T * s[A]) @ Z[A] / (S * beta)
    w = np.linalg.solve(H, theta / (S * beta) * (Z[A].T @ s[A]) + w) + u / (2 * alpha * S)
    w /= np.linalg.norm(w)
    return -w if u @ w < 0 else w


@pytest.mark.parametrize("update", ["auto", "batched", "cg"])
def test_anderson_reaches_the_papers_fixed_point(wdbc, update):
    """Where the paper's iteration converges, the accelerated run reaches the same w in a
    fraction of the evaluations, and one dense paper step from it returns it (a fixed point)."""
    X, y = wdbc
    s = np.ones(y.size)
    alpha, beta = msvmav_alpha_beta("scale", "scale", X, y, s)
    kw = dict(max_iter=20000, tol=1e-10, update=update)
    plain = msvmav_linear(X, y, s, alpha, beta, **kw)
    fast = msvmav_linear(X, y, s, alpha, beta, solver="anderson", stall=0, **kw)
    assert plain.converged and fast.converged
    assert fast.n_iter * 3 < plain.n_iter
    w_p, w_a = np.r_[plain.w, plain.b], np.r_[fast.w, fast.b]
    assert np.linalg.norm(w_a - w_p) < 1e-6
    Z = y[:, None] * np.c_[X, np.ones(y.size)]
    assert np.linalg.norm(_paper_step(Z, s, alpha, beta, w_a) - w_a) < 1e-8


def test_anderson_compiled_loop_matches_numpy_loop(wdbc):
    """The compiled dense loop and the NumPy loop take the same accelerated steps."""
    X, y = wdbc
    s = np.linspace(0.5, 2.0, y.size)
    kw = dict(max_iter=60, tol=0.0, solver="anderson", stall=0, return_best=False)
    a = msvmav_linear(X, y, s, 64.0, 0.05, update="auto", **kw)
    b = msvmav_linear(X, y, s, 64.0, 0.05, update="batched", **kw)
    assert a.family == "compiled" and b.family == "direct"
    assert np.allclose(a.w, b.w, atol=1e-8) and np.isclose(a.b, b.b, atol=1e-8)
    assert np.allclose(a.history["bound"], b.history["bound"], rtol=1e-7)
    assert np.allclose(a.history["step"][1:], b.history["step"][1:], rtol=1e-6, atol=1e-12)


def test_anderson_kernel_loop_reaches_the_papers_fixed_point():
    """Kernel path (compiled capacitance loop): the accelerated run converges to the fixed
    point of the paper's kernel iteration run to convergence."""
    X, y, s, spec = _kernel_problem(n=150, seed=15)
    alpha, beta = msvmav_alpha_beta("scale", "scale", X, y, s, True, spec)
    kw = dict(max_iter=20000, tol=1e-10, fit_intercept=True, return_best=False)
    plain = msvmav_kernel(spec, X, y, s, alpha, beta, **kw)
    fast = msvmav_kernel(spec, X, y, s, alpha, beta, solver="anderson", stall=0, **kw)
    assert plain.family == fast.family == "capacitance"
    assert plain.converged and fast.converged and fast.n_iter * 3 < plain.n_iter
    K = rbf_kernel(X, gamma=0.5) + 1.0
    d = fast.w - plain.w
    assert d @ K @ d < 1e-12  # the same function, in the RKHS norm


def test_anderson_stops_when_its_best_point_is_stall_evaluations_old():
    X, y, s, spec = _kernel_problem(n=150, seed=15)
    alpha, beta = msvmav_alpha_beta("scale", "scale", X, y, s, True, spec)
    kw = dict(max_iter=20000, tol=1e-10, fit_intercept=True, return_best=True, solver="anderson")
    res = msvmav_kernel(spec, X, y, s, alpha, beta, stall=20, **kw)
    assert not res.converged and res.n_iter == res.best_iter + 20
    assert res.history["bound"][res.best_iter] == res.history["bound"].min()
    X, y = _scaled("wdbc")
    y, s = _pm(y), np.ones(y.size)
    alpha, beta = msvmav_alpha_beta("scale", "scale", X, y, s)
    for update in ("auto", "batched"):  # the compiled and the NumPy loop
        res = msvmav_linear(X, y, s, alpha, beta, max_iter=20000, tol=0.0, update=update, solver="anderson",
                            stall=30)
        assert res.n_iter == res.best_iter + 30


def test_anderson_estimator_option(wdbc):
    X, y = wdbc
    a = MSVMAv(solver="anderson").fit(X, y)
    b = MSVMAv().fit(X, y)
    assert a.n_iter_ < b.n_iter_
    assert abs(a.score(X, y) - b.score(X, y)) < 0.01
    with pytest.raises(ValueError, match="solver"):
        MSVMAv(solver="newton").fit(X, y)


# ----------------------------------------------------------------------------- solver="auto"
def _unit_bound(clf, X, y):
    w = np.append(clf.coef_[0], clf.intercept_[0])
    return msvmav_bound_term(_pm(y) * (X @ clf.coef_[0] + clf.intercept_[0]) / np.linalg.norm(w))


def test_auto_finishes_a_creeping_run_from_its_best_iterate():
    """Where the paper's iteration ends at max_iter with SV/theta^2 still falling, "auto"
    continues with Anderson acceleration from its best iterate: one history over both runs, a
    returned model whose SV/theta^2 is the history's minimum and below the paper run's best."""
    X, y = _scaled("australian")
    kw = dict(alpha=16, beta=1 / 16, max_iter=60, tol=0.0)
    with pytest.warns(ConvergenceWarning):  # the paper's iteration creeps: SV/theta^2 still falling
        fixed = MSVMAv(solver="fixed-point", **kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # the accelerated finish settles
        auto = MSVMAv(**kw).fit(X, y)
    h = auto.history_
    assert auto.n_iter_ > 60 and all(len(v) == auto.n_iter_ + 1 for v in h.values())
    np.testing.assert_array_equal(h["bound"][:61], fixed.history_["bound"])  # the paper's run first
    assert np.isclose(_unit_bound(auto, X, y), h["bound"].min(), rtol=1e-8)
    assert h["bound"][auto.best_iter_] == h["bound"].min()
    assert _unit_bound(auto, X, y) < _unit_bound(fixed, X, y) * (1 - 1e-4)


def test_auto_judges_the_paper_iteration_after_its_first_hundred_iterations():
    """With the default max_iter, a run that creeps at AUTO_CHECK iterations is finished by the
    accelerated one from there: the paper's first AUTO_CHECK iterates, then a few tens of
    evaluations to within 0.1 % of the SV/theta^2 the paper's run reaches in 1000 (and below
    its best of the first AUTO_CHECK)."""
    from margindist.solvers.msvmav.linear import AUTO_CHECK

    X, y = _scaled("australian")
    kw = dict(alpha=16, beta=1 / 16, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        head = MSVMAv(solver="fixed-point", max_iter=AUTO_CHECK, **kw).fit(X, y)
        full = MSVMAv(solver="fixed-point", **kw).fit(X, y)
    assert full.n_iter_ == 1000 and still_improving(head.history_["bound"])
    auto = MSVMAv(**kw).fit(X, y)
    np.testing.assert_array_equal(auto.history_["bound"][:AUTO_CHECK + 1], head.history_["bound"])
    assert AUTO_CHECK < auto.n_iter_ < 300
    assert _unit_bound(auto, X, y) < _unit_bound(head, X, y) * (1 - 1e-3)
    assert _unit_bound(auto, X, y) < _unit_bound(full, X, y) * (1 + 1e-3)


_CREEP = dict(max_iter=60, tol=0.0, alpha=16, beta=1 / 16)  # the paper's iteration creeps on australian


@pytest.mark.parametrize("data, params", [
    ("wdbc", dict()),  # the paper's iteration wanders: not creeping
    ("australian", dict(return_best=False, **_CREEP)),
    ("australian", dict(kernel="rbf", gamma=0.5, **_CREEP)),
    ("australian", dict(kernel="rbf", kernel_approximation=40, random_state=0, **_CREEP)),
])
def test_auto_is_the_paper_iteration_elsewhere(data, params):
    """A run that wanders (the defaults on wdbc), and creeping runs with return_best=False or
    of kernel models (exact or on Nystroem features): "auto" is "fixed-point", the same model."""
    X, y = _scaled(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        auto = MSVMAv(**params).fit(X, y)
        fixed = MSVMAv(solver="fixed-point", **params).fit(X, y)
    assert still_improving(fixed.history_["bound"]) == (data == "australian")  # creeping or not
    np.testing.assert_array_equal(auto.decision_function(X), fixed.decision_function(X))
    assert auto.n_iter_ == fixed.n_iter_


def test_auto_runs_each_paper_iterate_once(monkeypatch):
    """A run judged at AUTO_CHECK that wanders goes on from there to max_iter (the model of
    test_auto_is_the_paper_iteration_elsewhere); one that creeps stops there. No iterate is
    computed twice."""
    from margindist.solvers.msvmav import linear

    runs = []
    iterate = linear.msvmav_iterate

    def counted(*args, **kw):
        res = iterate(*args, **kw)
        runs.append((kw.get("solver"), res.n_iter))
        return res

    monkeypatch.setattr(linear, "msvmav_iterate", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        wanders = MSVMAv().fit(*_scaled("wdbc"))
        assert runs == [("fixed-point", wanders.n_iter_)] and wanders.n_iter_ > linear.AUTO_CHECK
        runs.clear()
        creeps = MSVMAv(alpha=16, beta=1 / 16, tol=0.0).fit(*_scaled("australian"))
    assert [r[0] for r in runs] == ["fixed-point", "anderson"] and runs[0][1] == linear.AUTO_CHECK
    assert creeps.n_iter_ == runs[0][1] + runs[1][1]


def test_raw_features_on_a_large_scale_warn_and_standardised_do_not():
    # australian's raw columns (one reaches 1e5; rows of root-mean-square norm ~6000): the
    # constant-1 intercept feature is far too small beside them and the model underfits; the
    # warning names the scale, and the same rows standardised fit as well as LinearSVC
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    from margindist.datasets import load_dataset
    from margindist.exceptions import FeatureScaleWarning

    X, y = load_dataset("australian")
    with pytest.warns(FeatureScaleWarning, match="root-mean-square norm"):
        raw = MSVMAv().fit(X, y)
    Xs = StandardScaler().fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureScaleWarning)
        std = MSVMAv().fit(Xs, y)
    peer = LinearSVC().fit(Xs, y).score(Xs, y)
    assert std.score(Xs, y) >= peer - 0.01 > raw.score(X, y)


def test_float32_design_sums_in_float64_without_a_float64_copy():
    """A dense float32 X stays float32 in the linear solver (the 1M x 1000 Nystroem features of a
    kernel model would take 8 GB as float64); its products sum in float64 (a compiled pass that
    casts each value), so they and the whole iteration equal those of the float64 copy of the
    same values to rounding (d = 200: the
    direct path with its round-off check, not the compiled loop, which copies its small B)."""
    from margindist.solvers.msvmav._common import as_float
    from margindist.solvers._gram import BLOCK_BYTES
    from margindist.solvers.msvmav._design import Design

    rng = np.random.default_rng(0)
    X32 = rng.random((3 * (BLOCK_BYTES // (8 * 200)) + 17, 200)).astype(np.float32)  # four blocks
    X = X32.astype(np.float64)
    n = X.shape[0]
    y = np.where(X[:, :5].sum(axis=1) + 0.3 * rng.normal(size=n) > 2.5, 1.0, -1.0)
    assert as_float(X32) is X32
    assert as_float(sp.csr_matrix(X32)).dtype == np.float64  # CSR: one float64 copy of the data
    d32, d64 = Design(X32, y, intercept=True), Design(X, y, intercept=True)
    w = rng.normal(size=(201, 2))
    # float64 sums in another order (the compiled pass over C-ordered float32 rows): rounding
    # relative to the scale of the terms
    ref = d64.matvec(w)
    np.testing.assert_allclose(d32.matvec(w), ref, rtol=1e-12, atol=1e-14 * np.abs(ref).max())
    t = rng.normal(size=n)
    ref = d64.rmatvec(t)
    np.testing.assert_allclose(d32.rmatvec(t), ref, rtol=1e-12, atol=1e-14 * np.abs(ref).max())
    ref = d64.sq_rmatvec(t)  # sums of 7880 terms in other blocks: rounding relative to their scale
    np.testing.assert_allclose(d32.sq_rmatvec(t), ref, rtol=1e-12, atol=1e-14 * np.abs(ref).max())
    s = np.ones(n)
    a, b = msvmav_alpha_beta("scale", "scale", X, y, s)
    r64 = msvmav_linear(X, y, s, a, b, max_iter=60)
    r32 = msvmav_linear(X32, y, s, a, b, max_iter=60)
    assert r32.n_refresh == r64.n_refresh
    np.testing.assert_allclose(r32.w, r64.w, rtol=1e-9, atol=1e-12)


def test_long_runs_log_their_progress(caplog, monkeypatch):
    """verbose=1: a progress line every PROGRESS_SECONDS (here every iteration), none at verbose=0
    (200 landmarks: the NumPy loop of large problems; the compiled loop of d <= 128 is silent)."""
    import margindist.solvers.msvmav._history as history

    monkeypatch.setattr(history, "PROGRESS_SECONDS", 0.0)
    X, y = _scaled("australian")

    def progress():
        out = [r.getMessage() for r in caplog.records if "MSVMAv iteration" in r.getMessage()]
        caplog.clear()
        return out

    MSVMAv(kernel="rbf", kernel_approximation=200, max_iter=5, random_state=0, verbose=1).fit(X, y)
    lines = progress()
    assert len(lines) == 5 and lines[0].startswith("MSVMAv iteration 1 of at most 5: SV/theta^2=")
    MSVMAv(kernel="rbf", kernel_approximation=200, max_iter=5, random_state=0).fit(X, y)
    assert progress() == []


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_kernel_path_merges_repeated_rows_into_weights(fit_intercept):
    """Repeated (x, y) pairs run as one row with their summed weight: the same iterates and
    history (|A| and the changes counted in samples) as the loop on every row, each copy
    getting its weight's share of the coefficient; a row repeated with the other label stays
    apart."""
    from margindist.solvers._repeats import repeated_rows
    from margindist.solvers.msvmav.kernel import _kernel_compiled

    X, y, s, spec = _kernel_problem(n=60, seed=23)
    rng = np.random.default_rng(5)
    rep = rng.integers(0, 60, size=90)
    Xd, yd = np.vstack([X, X[rep]]), np.concatenate([y, y[rep]])
    Xd[-1], yd[-1] = X[0], -y[0]  # the same x with the other label: a distinct pair
    sd = rng.uniform(0.5, 2.0, size=Xd.shape[0])
    first, inverse, su = repeated_rows(spec, Xd, yd, sd)
    assert first.size == 61 and np.array_equal(Xd[first][inverse], Xd) and np.array_equal(yd[first][inverse], yd)
    assert np.isclose(su.sum(), sd.sum())
    kw = dict(max_iter=60, tol=0.0, fit_intercept=fit_intercept)
    merged = msvmav_kernel(spec, Xd, yd, sd, 16.0, 2.0**-6, **kw)
    every = msvmav_kernel(spec, Xd, yd, sd, 16.0, 2.0**-6, factor_loop=_kernel_compiled, **kw)
    scale = np.abs(every.w).max()
    np.testing.assert_allclose(merged.w, every.w, atol=1e-9 * scale)
    assert merged.b == pytest.approx(every.b, abs=1e-9 * scale)
    for key in ("n_active", "n_changes"):
        np.testing.assert_array_equal(merged.history[key], every.history[key])
    np.testing.assert_allclose(merged.history["bound"], every.history["bound"], rtol=1e-9)
    assert repeated_rows(spec, X, y, s) is None  # nothing repeated: the rows as they are
