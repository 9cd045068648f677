"""LDM: the stable kernel dual, the factored linear dual, averaged SGD and the estimator."""

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import LinearSVC

from margindist.datasets import load_dataset
from margindist.kernels import KernelSpec
from margindist.models.ldm import LDM
from margindist.solvers import ldm as ldm_solvers
from margindist.solvers._gram import KERNEL_ROWS_MAX_WORK, wide
from margindist.solvers._rows import make_rows
from margindist.solvers.ldm import (
    ASGDState,
    LDMKernelBase,
    LDMLinearFactor,
    _asgd_pass,
    ldm_asgd,
    ldm_dcd_kernel,
    ldm_dcd_linear,
    ldm_primal_objective,
    ldm_sgd_objective,
    smoothed_hinge_start,
)

PARAMS = [(2**-2, 2**-2, 1.0), (2**-8, 2**-5, 10.0), (2**-5, 0.0, 50.0), (0.0, 2**-3, 1.0)]


def _data(rng, m=60, d=3):
    X = rng.normal(size=(m, d))
    y = np.where(X[:, 0] + 0.6 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


def _scaled(name):
    X, y = load_dataset(name)
    return MinMaxScaler().fit_transform(X), y


def _gram_rbf(X, gamma=0.5):
    return np.exp(-gamma * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))


#: many small fits: one BLAS thread (see conftest.single_blas_thread)
pytestmark = pytest.mark.usefixtures("single_blas_thread")


def test_stable_H_equals_reference_pinv_form(rng):
    """H = Y G A^{-1} Y equals the paper's / reference code's Y G pinv(Q) G Y, Q = G + c(m G G - G y y^T G)."""
    X, y = _data(rng)
    m = X.shape[0]
    for G in (np.c_[X, np.ones(m)] @ np.c_[X, np.ones(m)].T,  # rank 4: singular
              _gram_rbf(X) + 1.0):
        for lambda1 in (1e-9, 2**-8, 2**-2, 4.0):  # 1e-9: the solve branch, else the inverse
            c = 4 * lambda1 / m**2
            Q = G + c * (m * G @ G - np.outer(G @ y, G @ y))
            H_ref = (y[:, None] * (G @ np.linalg.pinv(Q, rcond=1e-13) @ G)) * y[None, :]
            H = LDMKernelBase(G, np.ones(m), lambda1).system(y).H
            np.testing.assert_allclose(H, H_ref, atol=1e-9 * np.abs(H_ref).max())
            np.testing.assert_array_equal(H, H.T)


def test_alpha_solves_the_stationarity_condition(rng):
    X, y = _data(rng)
    m = X.shape[0]
    s = rng.uniform(0.5, 2.0, size=m)
    G = _gram_rbf(X) + 1.0
    lambda1, lambda2 = 0.3, 0.2
    sys = LDMKernelBase(G, s, lambda1).system(y)
    beta = rng.uniform(0, 1, size=m)
    alpha = sys.alpha(beta, lambda2)
    S = s.sum()
    c = 4 * lambda1 / S**2
    A = np.eye(m) + c * (y[:, None] * (S * np.diag(s) - np.outer(s, s)) * y[None, :]) @ G
    np.testing.assert_allclose(A @ alpha, y * (beta + lambda2 / S * s), atol=1e-10)
    np.testing.assert_allclose(sys.H, (y[:, None] * (G @ np.linalg.solve(A, np.diag(y)))), atol=1e-10)


@pytest.mark.parametrize("lambda1,lambda2,C", PARAMS)
def test_kernel_dual_matches_qp_and_duality_gap(rng, lambda1, lambda2, C):
    X, y = _data(rng, m=50)
    m = X.shape[0]
    s = np.ones(m)
    G = _gram_rbf(X) + 1.0
    alpha, beta, _, dual = ldm_dcd_kernel(G, y, s, lambda1, lambda2, C, tol=1e-10, max_iter=100000,
                                          random_state=0)
    z = y * (G @ alpha)
    primal = ldm_primal_objective(alpha @ G @ alpha, z, s, lambda1, lambda2, C)
    assert primal - dual == pytest.approx(0.0, abs=1e-7 * max(1.0, abs(primal)))
    H = LDMKernelBase(G, s, lambda1).system(y).H
    shift = lambda2 / m * s

    def f(b):
        return 0.5 * b @ H @ b + (H @ shift - 1) @ b

    ref = so.minimize(f, np.zeros(m), jac=lambda b: H @ b + H @ shift - 1, bounds=[(0, C)] * m,
                      method="L-BFGS-B", options=dict(ftol=1e-15, gtol=1e-12, maxiter=50000))
    assert f(beta) == pytest.approx(ref.fun, rel=1e-6)


def test_kernel_greedy_phase_ends_where_random_epochs_end(rng, monkeypatch):
    """At a large C the random epochs creep; the greedy steps that take over after
    _GREEDY_AFTER epochs reach the random epochs' point (same dual value) in fewer iterations."""
    from margindist.solvers import ldm

    X, y = _data(rng, m=120)
    s = np.ones(120)
    G = _gram_rbf(X) + 1.0
    after = ldm._GREEDY_AFTER
    hybrid = ldm_dcd_kernel(G, y, s, 2.0**-8, 2.0**-8, 100.0, tol=1e-6, max_iter=100000, random_state=0)
    monkeypatch.setattr(ldm, "_GREEDY_AFTER", 10**9)
    plain = ldm_dcd_kernel(G, y, s, 2.0**-8, 2.0**-8, 100.0, tol=1e-6, max_iter=100000, random_state=0)
    assert hybrid.converged and plain.converged
    assert plain.n_iter > after  # the handover really happened
    assert hybrid.n_iter < plain.n_iter
    assert hybrid.dual == pytest.approx(plain.dual, rel=1e-8)
    np.testing.assert_allclose(hybrid.alpha, plain.alpha, atol=1e-4 * np.abs(plain.alpha).max())


@pytest.mark.parametrize("lambda1,lambda2,C", PARAMS)
def test_linear_dual_matches_kernel_dual(rng, lambda1, lambda2, C):
    X, y = _data(rng)
    m = X.shape[0]
    s = rng.uniform(0.5, 2.0, size=m)
    Xh = np.c_[X, np.ones(m)]
    alpha, _, _, dual_k = ldm_dcd_kernel(Xh @ Xh.T, y, s, lambda1, lambda2, C, tol=1e-11, max_iter=100000,
                                         random_state=0)
    w, b, _, _, dual_l = ldm_dcd_linear(X, y, s, lambda1, lambda2, C, tol=1e-11, max_iter=100000,
                                        random_state=1)
    np.testing.assert_allclose(np.r_[w, b], Xh.T @ alpha, atol=1e-7)
    assert dual_l == pytest.approx(dual_k, rel=1e-9)
    z = y * (X @ w + b)
    primal = ldm_primal_objective(w @ w + b * b, z, s, lambda1, lambda2, C)
    assert primal - dual_l == pytest.approx(0.0, abs=1e-7 * max(1.0, abs(primal)))


@pytest.mark.parametrize("direct", [False, True])
def test_sherman_morrison_factor_equals_direct_solve(rng, monkeypatch, direct):
    if direct:  # force the fallback: a direct Cholesky factorisation of Q_lin
        monkeypatch.setattr(ldm_solvers, "_SM_MIN_DENOM", 2.0)
    X, y = _data(rng, m=80, d=5)
    s = rng.uniform(0.5, 2.0, size=80)
    fac = LDMLinearFactor(X, s, 0.7, 1.0)
    Z, Linv, LTinv, g = fac.transform(y)
    Xh = np.c_[X, np.ones(80)]
    S = s.sum()
    c = 4 * 0.7 / S**2
    Qlin = np.eye(6) + c * (S * Xh.T @ (s[:, None] * Xh) - np.outer(g, g))
    np.testing.assert_allclose(Z @ Z.T, Xh @ np.linalg.solve(Qlin, Xh.T), atol=1e-10)
    v = rng.normal(size=6)
    np.testing.assert_allclose(LTinv(Linv(v)), np.linalg.solve(Qlin, v), atol=1e-10)
    np.testing.assert_allclose(Linv(v) @ Linv(v), v @ np.linalg.solve(Qlin, v), rtol=1e-10)


@pytest.mark.parametrize("delta", [1e-1, 1e-2, 1e-3])
def test_smoothed_hinge_start_meets_the_dcd_stopping_rule(rng, delta):
    """At the smoothed primal's minimiser, beta = U h'(t) is feasible and the DCD's projected
    gradient spreads over less than delta (LIBLINEAR's stopping rule at tol = delta)."""
    X, y = _data(rng, m=150, d=4)
    s = rng.uniform(0.5, 2.0, size=150)
    Z, Linv, _, g = LDMLinearFactor(X, s, 2**-4, 1.0).transform(y)
    wt0 = Linv(g * (2**-3 / s.sum()))
    U = 50.0 * s
    beta, n_it = smoothed_hinge_start(Z, y, U, wt0, delta, max_iter=500)
    assert 0 < n_it and np.all((beta >= 0) & (beta <= U))
    grad = y * (Z @ (wt0 + Z.T @ (y * beta))) - 1.0
    pg = np.where(beta <= 0, np.minimum(grad, 0), np.where(beta >= U, np.maximum(grad, 0), grad))
    assert np.ptp(pg) < delta


def _hinge_gap(X, y, s, lambda1, lambda2, C, res):
    """Primal minus dual of the transformed problem at the DCD's beta and its model: the dual is
    e^T beta - 1/2 ||wt||^2, the primal 1/2 ||v||^2 - wt0^T v + sum_i C s_i (1 - y_i <z_i, v>)_+ at
    v = wt (weak duality: >= 0, and 0 only at the optimum)."""
    Z, Linv, _, g = LDMLinearFactor(X, s, lambda1, 1.0).transform(y)
    wt0 = Linv(g * (lambda2 / s.sum()))
    v = wt0 + Z.T @ (y * res.beta)
    primal = 0.5 * v @ v - wt0 @ v + C * s @ np.maximum(1.0 - y * (Z @ v), 0.0)
    dual = res.beta.sum() - 0.5 * v @ v
    assert dual == pytest.approx(res.dual, rel=1e-12)
    return primal - dual, primal


def test_newton_start_on_an_ill_conditioned_dual():
    """australian at C = 100: the plain DCD creeps (its cap of epochs), the Newton-started one
    converges in a few epochs to a certified optimum (duality gap of the hinge problem) and a
    better dual value than the plain run and than a generic bounded optimiser."""
    X, y = _scaled("australian")
    y = np.where(y == np.unique(y)[1], 1.0, -1.0)
    X, y, s = X[:300], y[:300], np.ones(300)
    args = (X, y, s, 2**-8, 2**-8, 100.0)
    with pytest.warns(ConvergenceWarning):
        plain = ldm_dcd_linear(*args, tol=1e-5, max_iter=300, newton_start=False, random_state=0)
    fast = ldm_dcd_linear(*args, tol=1e-5, max_iter=300, random_state=0)
    assert fast.converged and fast.n_iter <= 20
    gap, primal = _hinge_gap(*args, fast)
    assert 0 <= gap <= 1e-6 * primal
    assert fast.dual >= plain.dual
    Z, Linv, _, g = LDMLinearFactor(X, s, 2**-8, 1.0).transform(y)
    wt0, Yz = Linv(g * (2**-8 / 300)), Z * y[:, None]

    def neg_dual(b):
        wt = wt0 + Yz.T @ b
        return 0.5 * wt @ wt - b.sum(), Yz @ wt - 1.0

    ref = so.minimize(neg_dual, np.zeros(300), jac=True, bounds=[(0, 100.0)] * 300, method="L-BFGS-B",
                      options=dict(ftol=1e-15, gtol=1e-10, maxiter=100000))
    assert fast.dual >= -ref.fun - 1e-9 * abs(ref.fun)


def test_hinge_special_case_is_linearsvc():
    """lambda1 = lambda2 = 0: the L1-loss SVM with a regularised bias, LIBLINEAR's dual."""
    X, y = _scaled("heart")
    ref = LinearSVC(loss="hinge", C=0.5, tol=1e-8, max_iter=1000000).fit(X, y)
    est = LDM(lambda1=0.0, lambda2=0.0, C=0.5, tol=1e-8, max_iter=1000000).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=2e-5)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, atol=2e-5)


def test_linear_path_equals_kernel_path_and_auto_keeps_csr_sparse():
    X, y = _scaled("sonar")
    kw = dict(lambda1=2**-3, lambda2=2**-4, C=10.0, tol=1e-9, max_iter=100000)
    lin = LDM(**kw).fit(X, y)
    pre = LDM(kernel="precomputed", **kw).fit(X @ X.T, y)
    np.testing.assert_allclose(pre.decision_function(X @ X.T), lin.decision_function(X), atol=1e-6)
    # "auto" keeps sparse input sparse: the ASGD path (the DCD path builds a dense transform)
    Xs = X.copy()
    Xs[Xs < 0.4] = 0.0
    assert LDM()._resolve_solver(sp.csr_matrix(Xs), LDM()._kernel_spec(Xs)) == "asgd"
    assert LDM()._resolve_solver(Xs, LDM()._kernel_spec(Xs)) == "dcd"


def _wide_sparse(rng, m=40, d=150, density=0.05):
    X = sp.random(m, d, density=density, random_state=np.random.RandomState(0), format="csr") * 3.0
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("solver", ["auto", "bcd", "dcd"])
def test_wide_linear_problems_on_kernel_rows_reach_the_factorised_linear_optimum(rng, solver):
    """m <= d: "auto" (for CSR X while the m rows of X X^T are cheap), "bcd" and "dcd" solve
    on the m x m linear Gram matrix and return the linear model w = X^T a: the optimum of the
    (d + 1) x (d + 1) factorised linear dual, called directly on the dense rows."""
    X, y = _wide_sparse(rng)
    s = rng.uniform(0.5, 2.0, size=X.shape[0])
    kw = dict(lambda1=2**-3, lambda2=2**-4, C=2.0)
    est = LDM(solver=solver, tol=1e-9, max_iter=100000, random_state=0, **kw)
    assert est._resolve_solver(X, est._kernel_spec(X)) in ("bcd", "dcd")
    assert est._on_kernel_rows(X, est._kernel_spec(X), est._resolve_solver(X, est._kernel_spec(X)))
    est.fit(X, y, sample_weight=s)
    w, b, *_ = ldm_dcd_linear(X.toarray(), y, s, tol=1e-11, max_iter=100000, random_state=0, **kw)
    np.testing.assert_allclose(est.coef_[0], w, atol=1e-6 * np.abs(w).max())
    assert est.intercept_[0] == pytest.approx(b, abs=1e-6 * np.abs(w).max())
    z_est, z_ref = y * est.decision_function(X), y * (X @ w + b)
    f_ref = ldm_primal_objective(w @ w + b * b, z_ref, s, **kw)
    f_est = ldm_primal_objective(est.coef_[0] @ est.coef_[0] + est.intercept_[0] ** 2, z_est, s, **kw)
    assert f_est == pytest.approx(f_ref, rel=1e-8)
    assert not hasattr(est, "dual_coef_") and est.coef_.shape == (1, X.shape[1])
    dense = LDM(solver=solver, tol=1e-9, max_iter=100000, random_state=0, **kw).fit(X.toarray(), y, sample_weight=s)
    np.testing.assert_allclose(dense.coef_, est.coef_, atol=1e-6 * np.abs(w).max())


def test_wide_rule_and_its_limits(rng):
    """"auto" goes to kernel rows for m <= d within the work cap only: tall CSR data and wide
    data whose Gram rows cost more keep averaged SGD; wide dense data within the cap leave
    the (d + 1) x (d + 1) factorisation. The multi-class model (one-vs-one, CSR) is the same
    as on the dense rows."""
    est = LDM()
    X, y = _wide_sparse(rng)
    assert est._resolve_solver(X, est._kernel_spec(X)) in ("bcd", "dcd")
    tall = sp.vstack([X] * 4).tocsr()
    assert est._resolve_solver(tall, est._kernel_spec(tall)) == "asgd"
    assert wide(X.toarray())
    assert wide(rng.normal(size=(20, 1000)))
    assert not wide(rng.normal(size=(600, 1000)))  # 3.6e8 multiply-adds
    assert est._resolve_solver(rng.normal(size=(600, 1000)), est._kernel_spec(X)) == "dcd"
    assert not est._on_kernel_rows(rng.normal(size=(600, 500)), est._kernel_spec(X), "dcd")
    big = sp.random(2000, 5000, density=0.02, random_state=np.random.RandomState(1), format="csr")
    assert big.shape[0] * big.nnz > KERNEL_ROWS_MAX_WORK
    assert est._resolve_solver(big, est._kernel_spec(big)) == "asgd"
    y3 = np.arange(X.shape[0]) % 3
    kw = dict(C=2.0, tol=1e-8, max_iter=100000, random_state=0)
    sparse_fit, dense_fit = LDM(**kw).fit(X, y3), LDM(**kw).fit(X.toarray(), y3)
    np.testing.assert_allclose(sparse_fit.decision_function(X), dense_fit.decision_function(X.toarray()),
                               atol=1e-6)
    assert sparse_fit.coef_.shape == (3, X.shape[1]) and sparse_fit.score(X, y3) > 0.9


def test_bcd_with_nystroem_features_takes_the_linear_choice(rng):
    """kernel_approximation with solver="bcd" (a kernel solver) solves the linear problem on the
    Nyström features as "auto" does, never on the rows of their m x m Gram matrix."""
    X, y = _data(rng, m=300, d=4)
    est = LDM(kernel="rbf", kernel_approximation=40, solver="bcd", random_state=0)
    Z = rng.normal(size=(300, 40))
    assert est._resolve_solver(Z, KernelSpec("linear")) == "dcd"
    ref = LDM(kernel="rbf", kernel_approximation=40, random_state=0).fit(X, y)
    np.testing.assert_allclose(est.fit(X, y).decision_function(X), ref.decision_function(X))


def test_wide_linear_warm_start_and_partial_fit_continue_from_the_solution(rng):
    X, y = _wide_sparse(rng)
    est = LDM(C=2.0, tol=1e-6, warm_start=True, random_state=0).fit(X, y)
    coef = est.coef_.copy()
    est.fit(X, y)
    assert est.n_iter_ <= 2
    np.testing.assert_allclose(est.coef_, coef, atol=1e-5)
    est.partial_fit(X, y)  # averaged SGD from the kernel-row solution
    assert np.isfinite(est.coef_).all() and est.score(X, y) > 0.8


def test_multiclass_shared_setup_equals_separate_fits():
    X, y = _scaled("iris")
    for kernel in ("linear", "rbf"):
        kw = dict(kernel=kernel, gamma=1.0, C=10.0, tol=1e-8, max_iter=100000, random_state=0, multi_class="ovr")
        shared = LDM(**kw).fit(X, y)  # one factorisation shared by the 3 sub-problems
        separate = np.column_stack([LDM(**kw).fit(X, y == k).decision_function(X) for k in np.unique(y)])
        np.testing.assert_allclose(shared.decision_function(X), separate, atol=1e-6)
        assert shared.score(X, y) > 0.9
    ovo = LDM(multi_class="ovo", C=10.0).fit(X, y)
    assert ovo.score(X, y) > 0.9


def test_warm_start_and_convergence_warning():
    X, y = _scaled("wdbc")
    est = LDM(C=10.0, tol=1e-4, warm_start=True, random_state=0).fit(X, y)
    coef = est.coef_.copy()
    est.fit(X, y)
    assert est.n_iter_ == 1
    np.testing.assert_allclose(est.coef_, coef, atol=1e-6)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        LDM(max_iter=2, tol=1e-10).fit(X, y)


def test_indefinite_kernel_warns(rng):
    X, y = _data(rng, m=30)
    G = X @ X.T - 50.0 * np.eye(30)
    with pytest.warns(UserWarning, match="not positive semi-definite"):
        LDMKernelBase(G, np.ones(30), 1.0)


# ----------------------------------------------------------------------------- averaged SGD


def test_asgd_average_is_the_average_of_the_iterates(rng):
    """Bottou's lazy representation reproduces the plain running average from step t0 on."""
    X, y = _data(rng, m=40, d=4)
    X[rng.random(X.shape) < 0.5] = 0
    rows = make_rows(sp.csr_matrix(X), 1.0)
    m = X.shape[0]
    st = ASGDState(5)
    sfac = np.ones(m)
    Xh = np.c_[X, np.ones(m)]
    mu = Xh.T @ y / m
    xmu = Xh @ mu
    lam3, l1, l2, eta0, t0 = 0.05, 0.01, 0.01, 0.3, 17.0
    iterates = []
    for t in range(150):
        order = np.array([t % m])
        _asgd_pass(rows, y, sfac, xmu, mu, order, lam3, l1, l2, eta0, 0.0, t0, st.wa, st.scal,
                   True)
        iterates.append(st.weights().copy())
        # step t (0-based) averages the iterates after steps t0 - 1 ... t
        first = int(max(0, t0 - 1))
        expected = np.mean(iterates[first:], axis=0) if t >= first else iterates[-1]
        np.testing.assert_allclose(st.average(), expected, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_asgd_maintained_mean_margin_equals_recomputation(rng, sparse):
    """w . mu, maintained in O(1) per step under the lazy scaling, equals w_true . mu computed
    directly after every step (through several renormalisations of the scaling)."""
    m, d = 60, 7
    X = rng.normal(size=(m, d))
    X[rng.random(X.shape) < 0.4] = 0
    y = np.where(rng.random(m) < 0.5, 1.0, -1.0)
    rows = make_rows(sp.csr_matrix(X) if sparse else X, 0.7)
    s = rng.uniform(0.5, 2.0, size=m)
    sfac = m * s / s.sum()
    Xh = np.c_[X, np.full(m, 0.7)]
    mu = Xh.T @ (y * s) / s.sum()
    xmu = Xh @ mu
    st = ASGDState(d + 1)
    lam3, eta = 0.05, 0.3  # the scaling grows by 1 / (1 - eta lam3) a step: renormalised every ~770 steps
    n_renorm, prev_wdiv = 0, 1.0
    for t in range(2500):
        order = rng.integers(0, m, size=1)
        code = _asgd_pass(rows, y, sfac, xmu, mu, order, lam3, 0.02, 0.01, 1.0, eta, 40.0, st.wa, st.scal, True)
        assert code == 0
        n_renorm += st.scal[0] < prev_wdiv
        prev_wdiv = st.scal[0]
        w = st.weights()
        direct = w @ mu
        scale = max(abs(direct), 1e-3 * np.linalg.norm(w) * np.linalg.norm(mu))
        assert abs(st.scal[5] / st.scal[0] - direct) <= 1e-10 * scale
    assert n_renorm >= 2


def test_asgd_step_is_the_expectation_of_the_two_sample_step(rng):
    """One step with the exact mean margin w . mu equals the average over j (weights s_j / S) of
    the paper's two-sample step: the gradient is the exact j-expectation, hence unbiased."""
    m, d = 30, 4
    X = rng.normal(size=(m, d))
    y = np.where(rng.random(m) < 0.5, 1.0, -1.0)
    s = rng.uniform(0.5, 2.0, size=m)
    S = s.sum()
    bias, lam3, l1, l2, eta = 1.0, 0.01, 0.3, 0.2, 0.05
    Xh = np.c_[X, np.full(m, bias)]
    mu = Xh.T @ (y * s) / S
    w0 = rng.normal(size=d + 1)
    for i in range(m):
        st = ASGDState(d + 1)
        st.w[:] = w0
        st.scal[5] = w0 @ mu
        _asgd_pass(make_rows(X, bias), y, m * s / S, Xh @ mu, mu, np.array([i]), lam3, l1, l2, 1.0, eta, 0.0, st.wa, st.scal, False)
        zi = y[i] * (Xh[i] @ w0)
        steps = []
        for j in range(m):  # the paper's two-sample ghat with the second sample j
            g = (4 * l1 * (Xh[i] @ w0) - 4 * l1 * y[i] * y[j] * (Xh[j] @ w0) - l2 * y[i] - y[i] * (zi <= 1))
            steps.append(w0 - eta * (lam3 * w0 + (m * s[i] / S) * g * Xh[i]))
        np.testing.assert_allclose(st.weights(), np.average(steps, axis=0, weights=s), rtol=1e-12, atol=1e-14)


def test_asgd_reaches_dcd_accuracy(rng):
    m, d = 30000, 20
    w_true = rng.normal(size=d)
    X = rng.random((m + 10000, d))
    f = (X - 0.5) @ w_true
    y = np.where(f + 0.3 * f.std() * rng.normal(size=m + 10000) > 0, 1, 0)
    Xtr, ytr, Xte, yte = X[:m], y[:m], X[m:], y[m:]
    dcd = LDM(solver="dcd", random_state=0).fit(Xtr, ytr)
    asgd = LDM(solver="asgd", random_state=0).fit(Xtr, ytr)
    assert abs(asgd.score(Xte, yte) - dcd.score(Xte, yte)) <= 0.005
    # and the objective F / (C m) is close to the optimum
    yy = np.where(ytr == 1, 1.0, -1.0)
    s = np.ones(m)
    obj = [ldm_sgd_objective(np.r_[e.coef_[0], e.intercept_], Xtr, yy, s, 2**-5, 2**-5, 1.0, m, 1.0)
           for e in (dcd, asgd)]
    assert obj[1] <= obj[0] * 1.05
    st = asgd._asgd_states[0]
    assert st.eta0 > 0 and st.t == 5 * m


def test_asgd_sparse_equals_dense_and_weights(rng):
    X, y = _data(rng, m=500, d=6)
    X[rng.random(X.shape) < 0.5] = 0
    a = ldm_asgd(X, y, np.ones(500), 0.1, 0.1, 1.0, random_state=0)
    b = ldm_asgd(sp.csr_matrix(X), y, np.ones(500), 0.1, 0.1, 1.0, random_state=0)
    np.testing.assert_allclose(a[0], b[0], atol=1e-10)
    sw = np.ones(500)
    sw[:100] = 3.0
    w, b_, st, ep = ldm_asgd(X, y, sw, 0.1, 0.1, 1.0, random_state=0)
    assert np.all(np.isfinite(w)) and st.weight_seen == sw.sum() and ep == 5


def test_asgd_in_place_order_without_copy(rng, monkeypatch):
    """Above the copy budget the rows are visited in place (a fresh permutation each pass): the
    same estimator (dense == CSR; both paths within 1 % of the optimal objective)."""
    X, y = _data(rng, m=3000, d=6)
    X[rng.random(X.shape) < 0.5] = 0
    s = np.ones(3000)
    copied = ldm_asgd(X, y, s, 0.1, 0.1, 1.0, random_state=0)
    monkeypatch.setattr(ldm_solvers, "ASGD_COPY_MAX_BYTES", 0)
    a = ldm_asgd(X, y, s, 0.1, 0.1, 1.0, random_state=0)
    b = ldm_asgd(sp.csr_matrix(X), y, s, 0.1, 0.1, 1.0, random_state=0)
    np.testing.assert_allclose(a[0], b[0], atol=1e-10)
    assert not np.allclose(a[0], copied[0], atol=1e-6)  # a different visiting order
    w, b_, *_ = ldm_dcd_linear(X, y, s, 0.1, 0.1, 1.0, tol=1e-8, max_iter=100000)
    opt = ldm_sgd_objective(np.r_[w, b_], X, y, s, 0.1, 0.1, 1.0, 3000, 1.0)
    for r in (copied, a):
        assert opt <= ldm_sgd_objective(np.r_[r[0], r[1]], X, y, s, 0.1, 0.1, 1.0, 3000, 1.0) <= 1.01 * opt


def test_asgd_divergence_raises(rng):
    X, y = _data(rng, m=200)
    st = ASGDState(X.shape[1] + 1)
    st.eta0, st.t0 = 1e30, 400.0
    with pytest.raises(FloatingPointError, match="diverged"):
        ldm_asgd(X * 1e3, y, np.ones(200), 0.1, 0.1, 100.0, state=st, random_state=0)


def test_partial_fit_streaming():
    X, y = _scaled("magic")
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    tr, te = idx[:12000], idx[12000:]
    classes = np.unique(y)
    est = LDM(random_state=0)
    for batch in np.array_split(tr, 12):
        est.partial_fit(X[batch], y[batch], classes=classes)
    full = LDM(solver="asgd", max_iter=1, random_state=0).fit(X[tr], y[tr])
    assert est.score(X[te], y[te]) >= full.score(X[te], y[te]) - 0.02
    assert est._asgd_states[0].weight_seen == len(tr)
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:10, :3], y[:10])
    with pytest.raises(ValueError, match="classes must be passed"):
        LDM().partial_fit(X[:10], y[:10])
    assert not hasattr(LDM(kernel="rbf"), "partial_fit")


def test_partial_fit_mean_margin_is_over_all_samples_seen(rng):
    """Streaming: the mean direction mu (zbar = w . mu) is the weighted mean of y x over every
    sample seen so far, the same as fit's after one pass over all batches; a state continued
    from a DCD fit carries that fit's samples."""
    X, y = _data(rng, m=300, d=5)
    sw = rng.uniform(0.5, 2.0, size=300)
    est = LDM(random_state=0)
    for batch in np.array_split(np.arange(300), 4):
        est.partial_fit(X[batch], y[batch], classes=[-1.0, 1.0], sample_weight=sw[batch])
    Xh = np.c_[X, np.ones(300)]
    expected = Xh.T @ (y * sw) / sw.sum()
    np.testing.assert_allclose(est._asgd_states[0].mean_direction(), expected, rtol=1e-12, atol=1e-14)
    fitted = LDM(solver="asgd", max_iter=1, random_state=0).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(fitted._asgd_states[0].mean_direction(), expected, rtol=1e-12, atol=1e-14)
    dcd = LDM(solver="dcd").fit(X, y, sample_weight=sw)
    st = dcd._asgd_states[0]
    np.testing.assert_allclose(st.mean_direction(), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(st.weights(), np.r_[dcd.coef_[0], dcd.intercept_])
    dcd.partial_fit(X[:50], y[:50], sample_weight=sw[:50])
    both = Xh.T @ (y * sw) + Xh[:50].T @ (y[:50] * sw[:50])
    np.testing.assert_allclose(st.mean_direction(), both / (sw.sum() + sw[:50].sum()), rtol=1e-12, atol=1e-14)


def test_partial_fit_multiclass_and_after_fit():
    X, y = _scaled("iris")
    est = LDM(C=10.0, random_state=0, multi_class="ovr")
    for _ in range(20):
        est.partial_fit(X, y, classes=np.unique(y))
    assert est.coef_.shape == (3, 4) and est.score(X, y) > 0.8
    fitted = LDM(C=10.0, random_state=0, multi_class="ovr").fit(X, y)
    before = fitted.score(X, y)
    fitted.partial_fit(X, y)  # continues from the DCD solution
    assert fitted.score(X, y) >= before - 0.1
    ovo = LDM(multi_class="ovo", C=10.0, random_state=0)
    for batch in np.array_split(np.arange(y.size), 4) * 5:  # iris is sorted: some batches miss a pair
        ovo.partial_fit(X[batch], y[batch], classes=np.unique(y))
    assert len(ovo.problems_) == np.unique(y).size * (np.unique(y).size - 1) // 2
    assert ovo.score(X, y) > 0.8


def test_asgd_rejects_kernels_and_bad_params():
    X, y = _scaled("heart")
    with pytest.raises(ValueError, match="linear model only"):
        LDM(kernel="rbf", solver="asgd").fit(X, y)
    with pytest.raises(ValueError, match="lambda1"):
        LDM(lambda1=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="C"):
        LDM(C=0.0).fit(X, y)


def test_paper_defaults_and_accuracy_sanity():
    X, y = _scaled("australian")
    est = LDM().fit(X[::2], y[::2])
    assert est.lambda1 == 2**-5 and est.lambda2 == 2**-5 and est.C == 1.0
    assert est.score(X[1::2], y[1::2]) > 0.8
    rbf = LDM(kernel="rbf").fit(X[::2], y[::2])
    assert rbf.score(X[1::2], y[1::2]) > 0.8
    assert rbf.dual_coef_.shape == (1, len(y[::2]))  # every point has a coefficient
    np.testing.assert_allclose(rbf.intercept_, rbf.dual_coef_.sum())
    assert np.all(rbf.weight_norm_ > 0)
