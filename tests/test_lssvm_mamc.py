"""LSSVM and MAMC against independent computations (KKT system, closed forms)."""

import warnings

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.preprocessing import MinMaxScaler

from margindist.datasets import load_dataset
from margindist.models.lssvm import LSSVM
from margindist.models.mamc import MAMC

#: many small fits: one BLAS thread (see conftest.single_blas_thread)
pytestmark = pytest.mark.usefixtures("single_blas_thread")


@pytest.fixture(scope="module")
def heart():
    X, y = load_dataset("heart")
    return MinMaxScaler().fit_transform(X), y


def kkt_solve(K, y_pm, C, s):
    """Direct dense solve of [[0, y^T], [y, Omega + D]] [b; a] = [0; 1]."""
    m = len(y_pm)
    A = np.zeros((m + 1, m + 1))
    A[0, 1:] = y_pm
    A[1:, 0] = y_pm
    A[1:, 1:] = np.outer(y_pm, y_pm) * K + np.diag(1.0 / (C * s))
    sol = np.linalg.solve(A, np.r_[0.0, np.ones(m)])
    return sol[1:], sol[0]


@pytest.mark.parametrize("kernel, params", [("rbf", {"gamma": 0.3}), ("poly", {"gamma": 0.5, "degree": 2, "coef0": 1.0})])
@pytest.mark.parametrize("weighted", [False, True])
def test_lssvm_kernel_equals_kkt_solve(heart, kernel, params, weighted, rng):
    X, y = heart
    s = rng.uniform(0.5, 2.0, size=len(y)) if weighted else np.ones(len(y))
    y_pm = np.where(y == np.unique(y)[1], 1.0, -1.0)
    est = LSSVM(C=3.0, kernel=kernel, **params).fit(X, y, sample_weight=s)
    a, b = kkt_solve(pairwise_kernels(X, metric=kernel, **params), y_pm, 3.0, s)
    Xt = X[:40] + 0.01
    expected = pairwise_kernels(Xt, X, metric=kernel, **params) @ (a * y_pm) + b
    np.testing.assert_allclose(est.decision_function(Xt), expected, rtol=1e-8, atol=1e-8)
    assert est.intercept_[0] == pytest.approx(b, rel=1e-8, abs=1e-10)


def test_lssvm_linear_primal_equals_kernel_kkt(heart, rng):
    X, y = heart
    s = rng.uniform(0.5, 2.0, size=len(y))
    y_pm = np.where(y == np.unique(y)[1], 1.0, -1.0)
    a, b = kkt_solve(X @ X.T, y_pm, 0.7, s)
    est = LSSVM(C=0.7).fit(X, y, sample_weight=s)
    np.testing.assert_allclose(est.coef_[0], X.T @ (a * y_pm), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(est.decision_function(X), X @ X.T @ (a * y_pm) + b, rtol=1e-8, atol=1e-8)
    # the same problem is weighted ridge regression with alpha = 1/C (scikit-learn)
    ridge = Ridge(alpha=1 / 0.7, solver="cholesky").fit(X, y_pm, sample_weight=s)
    np.testing.assert_allclose(est.coef_[0], ridge.coef_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
def test_lssvm_wide_linear_problems_on_the_gram_rows_equal_the_primal(rng, sparse):
    """m <= d: "auto" solves the kernel system on X X^T and returns w = X^T a, the primal
    ridge solution (called here by the explicit primal solvers), with weights and for three
    classes (one-vs-one)."""
    import scipy.sparse as sp

    from margindist.solvers._gram import wide

    X = rng.normal(size=(45, 200)) * (rng.random((45, 200)) < 0.2)
    y = np.arange(45) % 3
    s = rng.uniform(0.5, 2.0, size=45)
    Xin = sp.csr_matrix(X) if sparse else X
    assert wide(Xin) and not wide(np.vstack([X] * 5))
    auto = LSSVM(C=2.0).fit(Xin, y, sample_weight=s)
    primal = LSSVM(C=2.0, solver="cg", tol=1e-13).fit(Xin, y, sample_weight=s)
    np.testing.assert_allclose(auto.coef_, primal.coef_, atol=1e-8 * np.abs(primal.coef_).max())
    np.testing.assert_allclose(auto.intercept_, primal.intercept_, atol=1e-8)
    assert auto.coef_.shape == (3, 200) and not hasattr(auto, "dual_coef_")


def test_lssvm_cg_equals_cholesky(heart):
    X, y = heart
    for kernel in ("linear", "rbf"):
        direct = LSSVM(C=2.0, kernel=kernel, solver="cholesky").fit(X, y)
        cg = LSSVM(C=2.0, kernel=kernel, solver="cg", tol=1e-12).fit(X, y)
        np.testing.assert_allclose(cg.decision_function(X), direct.decision_function(X), rtol=1e-6, atol=1e-8)
        assert cg.n_iter_ > 1
    # kernel CG with the Gram matrix recomputed in blocks (budget below the m x m matrix)
    blocks = LSSVM(C=2.0, kernel="rbf", solver="cg", tol=1e-12, cache_size=0.01).fit(X, y)
    np.testing.assert_allclose(blocks.decision_function(X), direct.decision_function(X), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(blocks.weight_norm_, direct.weight_norm_, rtol=1e-8)
    # a callable kernel beyond the budget: evaluated in blocks, not as a whole Gram matrix
    gamma = blocks._kernel_fit_.gamma

    def rbf(A, B):
        return pairwise_kernels(A, B, metric="rbf", gamma=gamma)

    called = LSSVM(C=2.0, kernel=rbf, solver="cg", tol=1e-12, cache_size=0.01).fit(X, y)
    np.testing.assert_allclose(called.decision_function(X), direct.decision_function(X), rtol=1e-6, atol=1e-8)


def test_lssvm_kernel_cg_is_preconditioned_and_weighted(heart, rng):
    """The kernel CG (Nyström-preconditioned, both right-hand sides at once) reaches the KKT
    solution with sample weights, a precomputed kernel and a polynomial one, in a few tens of
    iterations where plain CG needs hundreds at this tolerance."""
    X, y = heart
    s = rng.uniform(0.3, 3.0, size=len(y))
    y_pm = np.where(y == np.unique(y)[1], 1.0, -1.0)
    for kernel, params in (("rbf", {"gamma": 0.5}), ("poly", {"degree": 2, "gamma": 0.5, "coef0": 1.0})):
        K = pairwise_kernels(X, metric=kernel, **params)
        a, b = kkt_solve(K, y_pm, 8.0, s)
        for est, data in ((LSSVM(C=8.0, kernel=kernel, solver="cg", tol=1e-12, **params), X),
                          (LSSVM(C=8.0, kernel="precomputed", solver="cg", tol=1e-12), K)):
            est.fit(data, y, sample_weight=s)
            np.testing.assert_allclose(est.decision_function(data), K @ (a * y_pm) + b, rtol=1e-7, atol=1e-8)
            assert est.n_iter_ <= 60, (kernel, est.n_iter_)


def test_nystroem_preconditioner_and_block_pcg():
    """With every row a landmark the preconditioners (uniform landmarks; pivoted partial
    Cholesky, from a Gram matrix or from kernel rows) are the exact inverse of K + D; with fewer
    pivots, the residual diagonal joins D; block PCG solves each column of a two-column system
    to its tolerance, and stops at max_iter."""
    from margindist.kernels import KernelRowCache, resolve_kernel
    from margindist.solvers.lssvm import block_pcg, nystroem_preconditioner, pivoted_preconditioner

    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 3))
    spec = resolve_kernel("rbf", X, gamma=0.3)
    K = pairwise_kernels(X, metric="rbf", gamma=0.3)
    d = rng.uniform(0.1, 2.0, size=40)
    R = rng.normal(size=(40, 2))
    exact = np.linalg.solve(K + np.diag(d), R)
    np.testing.assert_allclose(nystroem_preconditioner(spec, X, d)(R), exact, rtol=1e-8, atol=1e-10)
    for rows in (KernelRowCache.from_gram(K), KernelRowCache(spec, X, max_bytes=10 * 40 * 8)):
        prec = pivoted_preconditioner(rows, d, 40, dtype=np.float64, stop=0.0, stop_trace=0.0)
        np.testing.assert_allclose(prec(R), exact, rtol=1e-8, atol=1e-10)
    # six pivots: the inverse of F^T F + diag(K - F^T F) + D, F the greedy pivoted Cholesky of K;
    # a float32 factor (the default) to float32's precision
    prec = pivoted_preconditioner(KernelRowCache.from_gram(K), d, 6, dtype=np.float64, stop=0.0, stop_trace=0.0)
    prec32 = pivoted_preconditioner(KernelRowCache.from_gram(K), d, 6, stop=0.0, stop_trace=0.0)
    res, F = np.diag(K).copy(), np.zeros((0, 40))
    for _ in range(6):  # greedy pivoting in NumPy
        j = int(np.argmax(res))
        F = np.vstack([F, (K[j] - F.T @ F[:, j]) / np.sqrt(res[j])])
        res = np.maximum(np.diag(K) - np.sum(F * F, axis=0), 0.0)
        res[j] = 0.0
    approx = F.T @ F + np.diag(np.diag(K) - np.sum(F * F, axis=0)) + np.diag(d)
    np.testing.assert_allclose(prec(R), np.linalg.solve(approx, R), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(prec32(R), np.linalg.solve(approx, R), rtol=1e-5, atol=1e-6)
    # the default: at least n_landmarks(m) pivots, then until the residual's trace is at most
    # PIVOT_TRACE times min(d), at most n_pivots(m)[1]
    from margindist.solvers import lssvm

    assert lssvm.n_pivots(14000) == (473, 933) and lssvm.n_pivots(2000) == (178, 178)
    assert lssvm.n_pivots(40) == (40, 40) and lssvm.n_pivots(10**6) == (500, 1000)
    X9 = np.random.default_rng(5).normal(size=(5000, 6))
    K9 = pairwise_kernels(X9, metric="rbf", gamma=0.3)
    calls = []
    real = lssvm.pivoted_cholesky

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    lssvm.pivoted_cholesky = spy
    try:
        for dv in (14.0, 1.0):  # the trace stops it / the most pivots stop it
            pivoted_preconditioner(KernelRowCache.from_gram(K9), np.full(5000, dv))
    finally:
        lssvm.pivoted_cholesky = real
    (r1, e1), (r2, e2) = calls
    low, high = lssvm.n_pivots(5000)
    assert low < r1 < high and e1.sum() <= lssvm.PIVOT_TRACE * 14.0
    assert r2 == high and e2.sum() > lssvm.PIVOT_TRACE * 1.0
    B = np.column_stack([np.ones(40), 1e3 * rng.normal(size=40)])  # columns of very different size
    Z, it, ok = block_pcg(lambda V: K @ V + d[:, None] * V, B, lambda V: V / d[:, None], 1e-10)
    assert ok and it > 1
    np.testing.assert_allclose(Z, np.linalg.solve(K + np.diag(d), B), rtol=1e-8, atol=1e-8)
    _, it, ok = block_pcg(lambda V: K @ V + d[:, None] * V, B, lambda V: V, 1e-14, max_iter=2)
    assert not ok and it == 2


def test_kernel_cg_without_the_gram_matrix_reads_the_norm_off_the_system(heart):
    """Conjugate gradients over a budget below the m x m matrix (kernel rows in blocks): the
    squared RKHS norm c^T K c comes from K c = [1, y] - D Z of the solved system, and equals the
    norm from the kernel matrix."""
    from margindist.kernels import kernel_matrix, resolve_kernel
    from margindist.solvers import lssvm as ls

    X, y = heart
    y = np.where(y == np.unique(y)[1], 1.0, -1.0)
    spec = resolve_kernel("rbf", X, gamma=0.1)
    s = np.random.default_rng(0).uniform(0.5, 2.0, size=y.size)
    res = ls.lssvm_kernel(spec, X, y, s, 4.0, solver="cg", tol=1e-12, max_bytes=16 * 8 * y.size)
    K = kernel_matrix(spec, X)
    assert res.converged and res.norm_sq is not None
    np.testing.assert_allclose(res.norm_sq, res.coef @ K @ res.coef, rtol=1e-9)
    assert res.norm_sq == pytest.approx(ls.lssvm_kernel(spec, X, y, s, 4.0, solver="cholesky").norm_sq, rel=1e-9)


def test_cholesky_keeps_the_callers_matrices_and_falls_back_when_indefinite(heart):
    """The Cholesky path factorises a kernel matrix it made in that matrix's own memory (one
    m x m array), never a matrix it was given (a precomputed kernel, a grid search's shared
    Gram matrix); an indefinite kernel falls back to the symmetric indefinite solve of a
    freshly made matrix. Every route solves the KKT system of the module docstring."""
    from margindist.kernels import kernel_matrix, resolve_kernel
    from margindist.solvers import lssvm as ls

    X, y = heart
    y = np.where(y == np.unique(y)[1], 1.0, -1.0)
    s = np.random.default_rng(1).uniform(0.5, 2.0, size=y.size)
    m = y.size

    def kkt(K, C):
        A = np.zeros((m + 1, m + 1))
        A[0, 1:] = A[1:, 0] = y
        A[1:, 1:] = np.outer(y, y) * K + np.diag(1.0 / (C * s))
        sol = np.linalg.solve(A, np.concatenate([[0.0], np.ones(m)]))
        return sol[1:] * y, sol[0]

    for spec, C, indefinite in ((resolve_kernel("rbf", X, gamma=0.1), 4.0, False),
                                (resolve_kernel("sigmoid", X, gamma=0.5, coef0=-1.0), 1e6, True)):
        K = kernel_matrix(spec, X)
        assert (np.linalg.eigvalsh(K)[0] < -1e-3) == indefinite
        coef, b = kkt(K, C)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            own = ls.lssvm_kernel(spec, X, y, s, C, solver="cholesky")
        assert any("not positive semi-definite" in str(w.message) for w in caught) == indefinite
        np.testing.assert_allclose(own.coef, coef, rtol=1e-6, atol=1e-8 * np.abs(coef).max())
        assert own.b == pytest.approx(b, rel=1e-6, abs=1e-8)
        assert own.norm_sq == pytest.approx(max(coef @ K @ coef, 0.0), rel=1e-6, abs=1e-8)
        for given in ({"gram": K}, {"spec": resolve_kernel("precomputed"), "X": K}):
            K0 = K.copy()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                res = ls.lssvm_kernel(given.get("spec", spec), given.get("X", X), y, s, C, solver="cholesky",
                                      gram=given.get("gram"))
            np.testing.assert_array_equal(K, K0)
            np.testing.assert_allclose(res.coef, coef, rtol=1e-6, atol=1e-8 * np.abs(coef).max())


def test_cg_on_an_indefinite_system_stops_at_negative_curvature(heart):
    """Conjugate gradients on K + D with an indefinite kernel (sigmoid) wandered for thousands
    of iterations; they now stop at the first direction of non-positive curvature. With the
    Gram matrix at hand the symmetric indefinite solve takes over (and warns, as the Cholesky
    route does); without it, a ValueError names the kernel."""
    from margindist.kernels import resolve_kernel
    from margindist.solvers import lssvm as ls

    X, y = heart
    y = np.where(y == np.unique(y)[1], 1.0, -1.0)
    s = np.ones(y.size)
    spec = resolve_kernel("sigmoid", X, gamma=0.5, coef0=-1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ref = ls.lssvm_kernel(spec, X, y, s, 1e6, solver="cholesky")
    for solver in ("cg", "auto"):
        with pytest.warns(UserWarning, match="not positive semi-definite"):
            res = ls.lssvm_kernel(spec, X, y, s, 1e6, solver=solver)
        assert res.converged and res.n_iter < 10
        np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-6, atol=1e-8 * np.abs(ref.coef).max())
    with pytest.raises(ValueError, match="not positive definite.*kernel='sigmoid'"):
        ls.lssvm_kernel(spec, X, y, s, 1e6, solver="cg", max_bytes=8 * 1000)  # the Gram matrix does not fit
    with pytest.raises(ls.IndefiniteSystem):
        ls.block_pcg(lambda V: -V, np.ones((5, 1)), lambda R: R, 1e-10)


def test_auto_kernel_solver_gives_way_to_cholesky_when_cg_would_be_slow():
    """solver="auto": at a small C conjugate gradients finish; at a large C their rate predicts
    more iterations than the budget after a few, and the Cholesky solve takes over. Both give
    the Cholesky model."""
    from margindist.kernels import resolve_kernel
    from margindist.solvers import lssvm as ls

    rng = np.random.default_rng(6)
    m = 600
    X = rng.normal(size=(m, 4))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=m) > 0, 1.0, -1.0)
    spec = resolve_kernel("rbf", X, gamma=0.5)
    s = np.ones(m)
    budget = max(m / ls.AUTO_CG_RATIO, 2 * ls._GIVE_UP_AFTER)
    for C, gives_way in ((0.01, False), (1e4, True)):
        ref = ls.lssvm_kernel(spec, X, y, s, C, solver="cholesky")
        cg = ls.lssvm_kernel(spec, X, y, s, C, solver="cg")
        auto = ls.lssvm_kernel(spec, X, y, s, C, solver="auto")
        assert (cg.n_iter > budget) == gives_way
        assert auto.converged and (auto.n_iter < cg.n_iter) == gives_way
        np.testing.assert_allclose(auto.coef, ref.coef, rtol=1e-6, atol=1e-8 * np.abs(ref.coef).max())
        assert auto.b == pytest.approx(ref.b, rel=1e-6, abs=1e-9)


def test_mamc_linear_closed_form(heart):
    X, y = heart
    pos = y == np.unique(y)[1]
    w = X[pos].mean(axis=0) - X[~pos].mean(axis=0)
    w /= np.linalg.norm(w)
    b = -0.5 * ((X[pos] @ w).mean() + (X[~pos] @ w).mean())
    est = MAMC().fit(X, y)
    np.testing.assert_allclose(est.coef_[0], w, rtol=1e-12)
    assert est.intercept_[0] == pytest.approx(b, rel=1e-12)
    assert est.weight_norm_[0] == pytest.approx(1.0)
    # the paper's form: w proportional to sum_i y_i x_i, no bias
    y_pm = np.where(pos, 1.0, -1.0)
    zero = MAMC(bias="zero").fit(X, y)
    np.testing.assert_allclose(zero.coef_[0], (X.T @ y_pm) / np.linalg.norm(X.T @ y_pm), rtol=1e-12)
    assert zero.intercept_[0] == 0.0
    # it maximises the average margin over unit vectors: any other unit direction does worse
    avg = np.mean(y_pm * (X @ zero.coef_[0]))
    for v in np.random.default_rng(1).normal(size=(50, X.shape[1])):
        assert np.mean(y_pm * (X @ (v / np.linalg.norm(v)))) <= avg + 1e-12


def test_mamc_kernel_parzen_window(heart):
    X, y = heart
    pos = y == np.unique(y)[1]
    K = pairwise_kernels(X, metric="rbf", gamma=0.4)
    c = np.where(pos, 1.0 / pos.sum(), -1.0 / (~pos).sum())
    norm = np.sqrt(c @ K @ c)
    f0 = K @ c / norm
    b = -0.5 * (f0[pos].mean() + f0[~pos].mean())
    est = MAMC(kernel="rbf", gamma=0.4).fit(X, y)
    np.testing.assert_allclose(est.decision_function(X), f0 + b, rtol=1e-10)
    assert est.weight_norm_[0] == pytest.approx(1.0)
    # with a linear kernel the kernel path gives the linear model
    lin = MAMC().fit(X, y)
    kern = MAMC(kernel=lambda A, B: A @ B.T).fit(X, y)
    np.testing.assert_allclose(kern.decision_function(X), lin.decision_function(X), rtol=1e-10, atol=1e-12)


def test_lssvm_margins_are_pulled_to_one(heart):
    """A large C drives every functional margin towards 1 (the LS-SVM constraint)."""
    X, y = heart
    est = LSSVM(C=1e6, kernel="rbf", gamma=5.0).fit(X, y)
    raw = est.margins(X, y) * est.weight_norm_[0]
    np.testing.assert_allclose(raw, 1.0, atol=1e-3)


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_lssvm_kernel_solves_repeated_rows_as_weights(solver):
    """Repeated (x, y) pairs are solved as one row with their summed weight: the same
    coefficients (each copy its weight's share), intercept and norm as the system on every row
    (a precomputed kernel, which is never merged); a shared kernel matrix is read on the
    distinct rows."""
    from margindist.kernels import KernelSpec, kernel_matrix, resolve_kernel
    from margindist.solvers.lssvm import lssvm_kernel

    rng = np.random.default_rng(11)
    X = rng.normal(size=(30, 3))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=30) > 0, 1.0, -1.0)
    rep = rng.integers(0, 30, size=40)
    Xd, yd = np.vstack([X, X[rep]]), np.concatenate([y, y[rep]])
    s = rng.uniform(0.5, 2.0, size=70)
    spec = resolve_kernel("rbf", Xd, gamma=0.5)
    K = kernel_matrix(spec, Xd)
    ref = lssvm_kernel(KernelSpec("precomputed"), K, yd, s, 2.0, solver="cholesky")
    for kw in ({}, {"gram": K}):
        res = lssvm_kernel(spec, Xd, yd, s, 2.0, solver=solver, **kw)
        np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-7, atol=1e-9)
        assert res.b == pytest.approx(ref.b, rel=1e-7, abs=1e-9)
        assert res.norm_sq == pytest.approx(float(ref.coef @ K @ ref.coef), rel=1e-7)
