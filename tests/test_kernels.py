import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.svm import SVC

from margindist.kernels import (
    KernelRowCache,
    cache_row,
    kernel_decision,
    kernel_diag,
    kernel_matrix,
    resolve_kernel,
    rkhs_norm_sq,
)


@pytest.fixture
def X(rng):
    return rng.normal(size=(37, 5))


@pytest.mark.parametrize("kind", ["linear", "rbf", "poly", "sigmoid"])
def test_kernel_matrix_matches_sklearn(X, kind):
    spec = resolve_kernel(kind, X, gamma=0.3, degree=2, coef0=0.5)
    params = {} if kind == "linear" else {"gamma": 0.3}
    if kind == "poly":
        params.update(degree=2, coef0=0.5)
    if kind == "sigmoid":
        params.update(coef0=0.5)
    expected = pairwise_kernels(X, metric=kind, **params)
    # a tiny budget forces many chunks
    np.testing.assert_allclose(kernel_matrix(spec, X, max_bytes=8 * 37 * 3), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kernel_diag(spec, X), np.diag(expected), rtol=1e-12)


def test_kernel_decision_is_chunked_product(X, rng):
    spec = resolve_kernel("rbf", X, gamma=0.7)
    Z = rng.normal(size=(11, 5))
    coef = rng.normal(size=(11, 3))
    full = pairwise_kernels(X, Z, metric="rbf", gamma=0.7) @ coef
    np.testing.assert_allclose(kernel_decision(spec, X, Z, coef, max_bytes=8 * 11 * 2), full, rtol=1e-12)


def test_gamma_scale_matches_sklearn_svc(X):
    svc = SVC(gamma="scale").fit(X, (X[:, 0] > 0).astype(int))
    assert resolve_kernel("rbf", X).gamma == pytest.approx(svc._gamma, rel=1e-12)
    # sparse: same value
    assert resolve_kernel("rbf", sp.csr_matrix(X)).gamma == pytest.approx(svc._gamma, rel=1e-12)
    assert resolve_kernel("rbf", X, gamma="auto").gamma == pytest.approx(1 / 5)


def test_gamma_scale_weights_act_as_repeats(X):
    w = np.arange(1, X.shape[0] + 1) % 3
    repeated = np.repeat(X, w, axis=0)
    assert resolve_kernel("rbf", X, sample_weight=w).gamma == pytest.approx(
        resolve_kernel("rbf", repeated).gamma, rel=1e-12
    )


def test_resolve_kernel_errors(X):
    with pytest.raises(ValueError, match="Unknown kernel"):
        resolve_kernel("gauss", X)
    with pytest.raises(ValueError, match="gamma"):
        resolve_kernel("rbf", X, gamma=-1.0)
    with pytest.raises(ValueError, match="gamma"):
        resolve_kernel("rbf", X, gamma="wide")


def test_rkhs_norm(X, rng):
    spec = resolve_kernel("rbf", X, gamma=0.2)
    a = rng.normal(size=X.shape[0])
    K = pairwise_kernels(X, metric="rbf", gamma=0.2)
    assert float(rkhs_norm_sq(spec, X, a)) == pytest.approx(a @ K @ a, rel=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kind", ["linear", "rbf", "poly", "sigmoid"])
def test_row_cache_matches_gram(X, kind, sparse):
    spec = resolve_kernel(kind, X, gamma=0.3, degree=3, coef0=0.2)
    K = kernel_matrix(spec, X)
    Xin = sp.csr_matrix(X) if sparse else X
    # budget of 4 rows: forces evictions
    cache = KernelRowCache(spec, Xin, max_bytes=4 * 8 * X.shape[0])
    assert cache.n_slots == 4
    order = [0, 1, 2, 0, 3, 4, 5, 1, 0, 36, 2, 2]
    for i in order:
        np.testing.assert_allclose(cache.row(i), K[i], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(cache.diag, np.diag(K), rtol=1e-12)
    assert cache.hits + cache.misses == len(order)
    assert cache.hits >= 2  # the repeated 0 right after 2 and the final 2


def test_row_cache_lru_eviction_order(X):
    spec = resolve_kernel("linear")
    cache = KernelRowCache(spec, X, max_bytes=2 * 8 * X.shape[0])
    cache_row(cache.state, 0)
    cache_row(cache.state, 1)
    cache_row(cache.state, 0)  # 1 is now least recently used
    cache_row(cache.state, 2)  # evicts 1
    slot_of = cache.state[1]
    assert slot_of[0] >= 0 and slot_of[2] >= 0 and slot_of[1] == -1


def test_row_cache_precomputed_and_callable(X):
    K = pairwise_kernels(X, metric="rbf", gamma=0.5)
    pre = KernelRowCache(resolve_kernel("precomputed"), K)
    np.testing.assert_allclose(pre.row(3), K[3])

    def k(A, B):
        return pairwise_kernels(A, B, metric="rbf", gamma=0.5)

    cal = KernelRowCache(resolve_kernel(k), X)
    np.testing.assert_allclose(cal.row(5), K[5], rtol=1e-12)
    with pytest.raises(ValueError, match="callable kernel"):
        KernelRowCache(resolve_kernel(k), X, max_bytes=100)
