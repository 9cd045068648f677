"""Kernel LDM by block coordinate descent (solvers/ldm_bcd.py) against the factorised dual."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import MinMaxScaler

from margindist.datasets import load_dataset
from margindist.kernels import KernelRowCache, resolve_kernel
from margindist.models.ldm import LDM
from margindist.solvers.ldm import ldm_dcd_kernel, ldm_primal_objective
from margindist.solvers.ldm_bcd import _gamma_block, _KernelRows, ldm_bcd_kernel, ldm_bcd_linear

#: (lambda1, lambda2, C): the paper's grid ends, lambda1 = 0 (no variance block), a strong variance term
PARAMS = [(2**-2, 2**-2, 1.0), (2**-8, 2**-5, 10.0), (2**-5, 0.0, 50.0), (0.0, 2**-3, 1.0), (4.0, 2**-5, 1.0)]

pytestmark = pytest.mark.usefixtures("single_blas_thread")


def _data(rng, m=70, d=3):
    X = rng.normal(size=(m, d))
    y = np.where(X[:, 0] + 0.6 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


def _cache(X, gamma=0.5, max_bytes=2**30):
    cache = KernelRowCache(resolve_kernel("rbf", gamma=gamma), X, max_bytes=max_bytes)
    if cache.n_slots == X.shape[0]:
        cache.fill()
    return cache


@pytest.mark.parametrize("lambda1,lambda2,C", PARAMS)
def test_same_model_and_dual_value_as_the_factorised_path(rng, lambda1, lambda2, C):
    """The augmented dual's optimum is the paper's dual optimum: the same dual value, no
    duality gap against the primal, the same coefficients (weighted samples)."""
    X, y = _data(rng)
    m = X.shape[0]
    s = rng.uniform(0.5, 2.0, size=m)
    cache = _cache(X)
    G = cache.matrix() + 1.0
    ref = ldm_dcd_kernel(G.copy(), y, s, lambda1, lambda2, C, tol=1e-10, max_iter=100000, random_state=0)
    res = ldm_bcd_kernel(cache, y, s, lambda1, lambda2, C, tol=1e-9, max_iter=100000, random_state=0,
                         max_rounds=10000)
    assert res.converged
    z = y * (G @ res.alpha)
    primal = ldm_primal_objective(res.alpha @ G @ res.alpha, z, s, lambda1, lambda2, C)
    scale = max(1.0, abs(primal))
    assert primal - res.dual == pytest.approx(0.0, abs=1e-6 * scale)
    assert res.dual == pytest.approx(ref.dual, abs=1e-7 * scale)
    np.testing.assert_allclose(G @ res.alpha, G @ ref.alpha, atol=1e-4 * np.abs(G @ ref.alpha).max())


@pytest.mark.parametrize("lambda1,lambda2,C", PARAMS)
@pytest.mark.parametrize("layout", ["dense", "csr", "csr32"])
def test_linear_rows_give_the_factorised_linear_model(rng, lambda1, lambda2, C, layout):
    """On the rows of X (dense, CSR, float32 CSR), the augmented dual reaches the factorised
    linear dual's model and dual value, with no duality gap against the primal."""
    from margindist.solvers.ldm import ldm_dcd_linear

    X, y = _data(rng, m=80, d=6)
    X[rng.random(X.shape) < 0.4] = 0.0
    s = rng.uniform(0.5, 2.0, size=y.size)
    w_ref, b_ref, _, _, _ = ldm_dcd_linear(X, y, s, lambda1, lambda2, C, bias=1.0, tol=1e-10, max_iter=100000,
                                            random_state=0)
    Xs = {"dense": X, "csr": sp.csr_matrix(X), "csr32": sp.csr_matrix(X.astype(np.float32))}[layout]
    res = ldm_bcd_linear(Xs, y, s, lambda1, lambda2, C, bias=1.0, tol=1e-9, max_iter=100000, random_state=0,
                         max_rounds=10000)
    assert res.converged
    Xd = X.astype(np.float32).astype(np.float64) if layout == "csr32" else X
    b = float(res.alpha.sum())
    np.testing.assert_allclose(res.coef, Xd.T @ res.alpha, atol=1e-9)
    z = y * (Xd @ res.coef + b)
    primal = ldm_primal_objective(res.coef @ res.coef + b * b, z, s, lambda1, lambda2, C)
    scale = max(1.0, abs(primal))
    assert primal - res.dual == pytest.approx(0.0, abs=1e-6 * scale)
    tol = 1e-4 if layout == "csr32" else 1e-6
    np.testing.assert_allclose(res.coef, w_ref, atol=tol * max(1.0, np.abs(w_ref).max()))
    assert b == pytest.approx(b_ref, abs=tol * max(1.0, abs(b_ref)))


def test_gamma_block_solves_its_linear_system(rng):
    """The CG step on gamma zeroes the gamma gradient D gamma - (z - zbar) at the margins it returns,
    and those margins are the kernel margins of the new coefficients."""
    X, y = _data(rng)
    m = X.shape[0]
    s = rng.uniform(0.5, 2.0, size=m)
    S = s.sum()
    cache = _cache(X)
    margins = _KernelRows(cache, y, 1.0)
    beta, gamma = rng.uniform(0, 1, size=m), rng.normal(size=m)
    lambda1, lambda2 = 0.3, 0.2

    def z_of(g):
        return margins(beta - g + s / S * (g.sum() + lambda2))

    Dg = S / (4 * lambda1 * s)
    v = margins(s)
    pdiag = cache.diag + 1.0 - 2 * v / S + s @ v / S**2
    gamma2, z2, n_cg = _gamma_block(margins, z_of(gamma), gamma, s, S, Dg, pdiag, 1e-10)
    assert 0 < n_cg < 50
    np.testing.assert_allclose(z2, z_of(gamma2), atol=1e-9)
    grad = Dg * gamma2 - (z2 - s @ z2 / S)
    assert np.abs(grad).max() <= 1e-10


def test_partial_cache_and_precomputed_kernel_give_the_full_cache_model(rng):
    """Fewer cached rows than samples: the beta block runs block sweeps and the gamma block
    computes kernel products in blocks; a precomputed Gram matrix goes through its rows."""
    X, y = _data(rng, m=90)
    s = np.ones(90)
    args = (y, s, 2**-3, 2**-5, 5.0)
    full = ldm_bcd_kernel(_cache(X), *args, tol=1e-8, max_iter=100000, random_state=0)
    small = _cache(X, max_bytes=8 * 90 * 30)
    assert small.n_slots < 90
    part = ldm_bcd_kernel(small, *args, tol=1e-8, max_iter=100000, random_state=0)
    K = _cache(X).matrix().copy()
    pre = KernelRowCache(resolve_kernel("precomputed"), K, max_bytes=8 * 90 * 30)
    prec = ldm_bcd_kernel(pre, *args, tol=1e-8, max_iter=100000, random_state=0)
    for res in (part, prec):
        assert res.converged
        assert res.dual == pytest.approx(full.dual, rel=1e-8)
        np.testing.assert_allclose(K @ res.alpha, K @ full.alpha, atol=1e-4)


def test_round_limit_warns(rng):
    X, y = _data(rng)
    with pytest.warns(ConvergenceWarning, match="block coordinate descent"):
        res = ldm_bcd_kernel(_cache(X), y, np.ones(70), 1.0, 0.1, 10.0, tol=1e-12, max_rounds=2)
    assert not res.converged


def _scaled(name):
    X, y = load_dataset(name)
    return MinMaxScaler().fit_transform(X), y


def test_estimator_bcd_and_dcd_agree_and_auto_is_bcd_on_scaled_data():
    X, y = _scaled("australian")
    kw = {"kernel": "rbf", "tol": 1e-6, "random_state": 0}
    bcd = LDM(solver="bcd", **kw).fit(X, y)
    dcd = LDM(solver="dcd", **kw).fit(X, y)
    np.testing.assert_allclose(bcd.decision_function(X), dcd.decision_function(X), atol=1e-3)
    np.testing.assert_allclose(bcd.weight_norm_, dcd.weight_norm_, rtol=1e-3)  # the solver's own norm
    assert LDM(kernel="rbf")._resolve_solver(X, resolve_kernel("rbf", X)) == "bcd"


def test_auto_is_bcd_inside_a_grid_search_too(monkeypatch):
    """Block coordinate descent with pair steps outruns the factorised path even where a grid
    search shares its set-up: auto picks it for the grid points of a search as for a fit alone."""
    X, _ = _scaled("australian")
    spec = resolve_kernel("rbf", X)
    est = LDM(kernel="rbf")
    assert est._resolve_solver(X, spec) == "bcd"  # alone
    monkeypatch.setattr(LDM, "_shares_set_up", lambda self, X=None: True)
    assert est._resolve_solver(X, spec) == "bcd"


def test_auto_factorises_when_the_variance_term_dominates():
    """Unscaled features and a linear-type kernel: k(x, x) ~ 1e9, so the variance term
    outweighs the regulariser by far and block coordinate descent would creep: auto picks the
    factorised path on a data set of this size."""
    X, y = load_dataset("australian")
    spec = resolve_kernel("poly", X, degree=1, gamma=1.0)
    assert LDM(kernel="poly", degree=1, gamma=1.0)._resolve_solver(X, spec) == "dcd"
    # so does the rule on the linear kernel's rows of a wide problem
    wide = np.repeat(X[:10], 2, axis=1)
    assert LDM()._resolve_solver(wide, resolve_kernel("linear", wide)) == "dcd"


def test_estimator_multiclass_weights_sparse_float32_and_warm_start():
    X, y = _scaled("vehicle")
    X, y = X[:300], y[:300]
    w = np.random.default_rng(0).uniform(0.5, 2.0, size=300)
    kw = {"kernel": "rbf", "tol": 1e-5, "random_state": 0, "solver": "bcd"}
    for mc in ("ovr", "ovo"):
        dense = LDM(multi_class=mc, **kw).fit(X, y, sample_weight=w)
        sparse = LDM(multi_class=mc, **kw).fit(sp.csr_matrix(X), y, sample_weight=w)
        single = LDM(multi_class=mc, **kw).fit(X.astype(np.float32), y, sample_weight=w)
        ref = LDM(multi_class=mc, **{**kw, "solver": "dcd"}).fit(X, y, sample_weight=w)
        for est in (sparse, single, ref):
            np.testing.assert_allclose(est.decision_function(X), dense.decision_function(X), atol=2e-3)
    est = LDM(warm_start=True, C=1.0, **kw).fit(X, y)
    cold = LDM(C=4.0, **kw).fit(X, y)
    est.set_params(C=4.0).fit(X, y)
    np.testing.assert_allclose(est.decision_function(X), cold.decision_function(X), atol=2e-3)
    assert np.sum(est.n_iter_) < np.sum(cold.n_iter_)


def test_estimator_bcd_on_the_rows_of_tall_linear_data(rng):
    """LDM(solver="bcd") on tall linear data runs on the rows of X (not on X X^T), sparse or
    dense, and gives the factorised dual's model (weighted, three classes one-vs-one)."""
    X = rng.normal(size=(400, 12))
    X[rng.random(X.shape) < 0.5] = 0.0
    y = np.digitize(X[:, 0] + X[:, 1] + 0.5 * rng.normal(size=400), [-0.5, 0.5])
    s = rng.uniform(0.5, 2.0, size=400)
    kw = {"tol": 1e-7, "random_state": 0, "max_iter": 100000}
    assert not LDM._on_kernel_rows(X, resolve_kernel("linear"), "bcd")
    ref = LDM(solver="dcd", **kw).fit(X, y, sample_weight=s)
    for Xf in (X, sp.csr_matrix(X)):
        bcd = LDM(solver="bcd", **kw).fit(Xf, y, sample_weight=s)
        np.testing.assert_allclose(bcd.coef_, ref.coef_, atol=1e-5)
        np.testing.assert_allclose(bcd.intercept_, ref.intercept_, atol=1e-5)
        assert bcd.n_iter_.max() > 0
