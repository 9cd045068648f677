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


@pytest.mark.parametrize("kind", ["rbf", "poly", "sigmoid"])
def test_kernel_blocks_of_dense_rows_are_sklearn_s(X, rng, kind):
    """The blocks between dense rows skip scikit-learn's input checks but keep its formulas:
    the same values in float64; float32 rows are computed in float64 (scikit-learn's own kernel
    of float32 rows is float32), so a float32 model predicts as its float64 copy does."""
    params = {"gamma": 0.3, **({"degree": 3, "coef0": 1.0} if kind == "poly" else {}),
              **({"coef0": 0.5} if kind == "sigmoid" else {})}
    spec = resolve_kernel(kind, X, **params)
    Z = rng.normal(size=(11, 5))
    coef = rng.normal(size=11)
    np.testing.assert_allclose(kernel_matrix(spec, X, Z), pairwise_kernels(X, Z, metric=kind, **params),
                               rtol=1e-14, atol=1e-15)
    X32, Z32 = X.astype(np.float32), Z.astype(np.float32)
    np.testing.assert_array_equal(kernel_decision(spec, X32, Z32, coef),
                                  kernel_decision(spec, X32.astype(np.float64), Z32.astype(np.float64), coef))
    np.testing.assert_allclose(kernel_matrix(spec, X32, Z32), pairwise_kernels(X32, Z32, metric=kind, **params),
                               rtol=1e-5, atol=1e-5)


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


def test_row_cache_keeps_64_bit_csr_indices(X):
    # scipy switches to int64 indices when nnz or the shape exceed int32; they must not be narrowed
    spec = resolve_kernel("rbf", X, gamma=0.3)
    Xs = sp.csr_matrix(X)
    Xs.indices, Xs.indptr = Xs.indices.astype(np.int64), Xs.indptr.astype(np.int64)
    cache = KernelRowCache(spec, Xs)
    assert cache.state.rows.indices.dtype == np.int64 and cache.state.rows.indptr.dtype == np.int64
    K = kernel_matrix(spec, X)
    for i in (0, 7, 36):
        np.testing.assert_allclose(cache.row(i), K[i], rtol=1e-12, atol=1e-14)


def test_row_cache_lru_eviction_order(X):
    spec = resolve_kernel("linear")
    cache = KernelRowCache(spec, X, max_bytes=2 * 8 * X.shape[0])
    cache_row(cache.state, 0)
    cache_row(cache.state, 1)
    cache_row(cache.state, 0)  # 1 is now least recently used
    cache_row(cache.state, 2)  # evicts 1
    slot_of = cache.state[1]
    assert slot_of[0] >= 0 and slot_of[2] >= 0 and slot_of[1] == -1


@pytest.mark.parametrize("n_slots", [2, 7, 30])
def test_row_cache_is_exactly_lru(X, n_slots):
    """The recency list against an independent LRU (an OrderedDict) over a random request
    stream with a hot subset: the same rows cached and the same misses at every step."""
    from collections import OrderedDict

    spec = resolve_kernel("rbf", X, gamma=0.5)
    K = kernel_matrix(spec, X)
    m = X.shape[0]
    cache = KernelRowCache(spec, X, max_bytes=8 * m * n_slots)
    assert cache.n_slots == n_slots
    rng = np.random.default_rng(n_slots)
    model, misses = OrderedDict(), 0
    for t in range(3000):
        i = int(rng.integers(m)) if t % 3 else int(rng.integers(min(m, n_slots + 2)))
        np.testing.assert_allclose(cache_row(cache.state, i), K[i], rtol=1e-12)
        if i in model:
            model.move_to_end(i)
        else:
            misses += 1
            model[i] = None
            if len(model) > n_slots:
                model.popitem(last=False)
        assert set(np.flatnonzero(cache.state.slot_of >= 0)) == set(model)
    assert cache.misses == misses and cache.hits == 3000 - misses


def test_row_cache_fill_after_lazy_rows(X):
    """fill() on a cache whose slots hold rows out of place: every row ends in its own slot,
    no stale slot mapping, and the rows are still right when read back in any order."""
    spec = resolve_kernel("rbf", X, gamma=0.5)
    K = kernel_matrix(spec, X)
    m = X.shape[0]
    cache = KernelRowCache(spec, X)
    for i in (5, 3, 0, 9, 1):
        cache_row(cache.state, i)
    G = cache.fill()
    np.testing.assert_array_equal(cache.state.slot_of, np.arange(m))
    np.testing.assert_allclose(G, K, rtol=1e-12)
    for i in np.random.default_rng(0).permutation(m):
        np.testing.assert_allclose(cache_row(cache.state, i), K[i], rtol=1e-12)
    assert cache.misses == m + 5


def test_row_cache_matrix_only_when_every_row_is_cached(X):
    spec = resolve_kernel("rbf", X, gamma=0.5)
    K = kernel_matrix(spec, X)
    m = X.shape[0]
    lazy = KernelRowCache(spec, X)
    assert lazy.matrix() is None
    for i in range(m - 1, -1, -1):  # rows cached out of order: slots permuted
        cache_row(lazy.state, i)
    np.testing.assert_allclose(lazy.matrix(), K, rtol=1e-12)
    filled = KernelRowCache(spec, X)
    filled.fill()
    assert filled.matrix() is filled.state.slots
    assert KernelRowCache(spec, X, max_bytes=8 * m * (m // 2)).matrix() is None


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


def test_vectorised_exp_is_accurate():
    from margindist.kernels import _exp_nonpositive

    rng = np.random.default_rng(3)
    x = np.concatenate([-rng.random(5000) * 50, -rng.random(2000) * 700, [0.0, -1e-300, -0.34657, -0.34658,
                                                                           -707.9, -708.0, -709.0, -1e4]])
    v = x.copy()
    _exp_nonpositive(v)
    ref = np.exp(x)
    normal = x >= -708.0
    np.testing.assert_allclose(v[normal], ref[normal], rtol=4e-16, atol=0)
    assert np.all(v[~normal] == 0.0)


def test_float32_exp_is_accurate():
    from margindist._rbf32 import exp_nonpositive32

    rng = np.random.default_rng(4)
    x = np.concatenate([-rng.random(5000) * 20, -rng.random(2000) * 87, [0.0, -1e-30, -0.3466, -86.9, -87.0,
                                                                        -87.5, -1e4]]).astype(np.float32)
    v = x.copy()
    exp_nonpositive32(v)
    assert v.dtype == np.float32
    ref = np.exp(x.astype(np.float64))
    normal = x >= -87.0
    np.testing.assert_allclose(v[normal], ref[normal], rtol=2.5e-7, atol=0)  # about 2 ulp of float32
    assert np.all(v[~normal] == 0.0)


@pytest.mark.parametrize("offset", [0.0, 1e4])
@pytest.mark.parametrize("gamma", [0.05, 3.0, 300.0])
def test_float32_rbf_rows_error_is_bounded_anywhere(rng, offset, gamma):
    """Dense RBF rows stored in float32 are computed in float32 from the centred rows by
    differences: within a few 1e-7 of the float64 kernel whatever the offset of the data and
    gamma, exactly symmetric, 1 on the diagonal; the products of a partial cache (the compiled
    triangle for the rows it does not hold) use the very values a full cache stores."""
    X = offset + rng.random((400, 6)) * np.array([1.0, 1.0, 0.1, 2.0, 1.0, 0.01])
    X[1] = X[0] + 1e-4  # a near-duplicate pair
    spec = resolve_kernel("rbf", X, gamma=gamma)
    K = np.exp(-gamma * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))  # by differences: exact at any offset
    full = KernelRowCache(spec, X, max_bytes=4 * 400 * 400, dtype=np.float32)
    G = full.fill()
    np.testing.assert_allclose(G, K, rtol=0, atol=3e-7)
    assert np.array_equal(G, G.T) and np.all(np.diag(G) == 1.0)
    part = KernelRowCache(spec, X, max_bytes=4 * 400 * 30, dtype=np.float32)
    part.prefill(rng.permutation(400))
    V = rng.normal(size=(400, 2))
    np.testing.assert_allclose(part.dot(V), G.astype(np.float64) @ V, rtol=1e-12, atol=1e-12 * np.abs(V).sum())


@pytest.mark.parametrize("scale, gamma", [(1e25, 1e-50), (1e-25, 1e50), (1.0, 1e-45)])
def test_float32_rbf_rows_stay_float64_outside_float32_range(rng, scale, gamma):
    """Rows of norm 1e25 with gamma 1e-50 (the scale rule on such data), and the reverse, would
    overflow or underflow float32: those caches compute in float64 and round, as before."""
    X = scale * rng.random((50, 3))
    spec = resolve_kernel("rbf", X, gamma=gamma)
    c = KernelRowCache(spec, X, max_bytes=4 * 50 * 50, dtype=np.float32)
    assert c.state.X32.size == 0
    K = np.exp(-gamma * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(c.fill(), K, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kind", ["linear", "rbf", "poly", "sigmoid", "precomputed"])
def test_float32_rows_and_fill(X, kind, sparse):
    spec = resolve_kernel(kind, X, gamma=0.3, degree=3, coef0=0.2)
    K = pairwise_kernels(X, metric="rbf", gamma=0.3) if kind == "precomputed" else kernel_matrix(spec, X)
    Xin = K if kind == "precomputed" else (sp.csr_matrix(X) if sparse else X)
    m = X.shape[0]
    c32 = KernelRowCache(spec, Xin, max_bytes=3 * 4 * m, dtype=np.float32)
    assert c32.n_slots == 3 and c32.dtype == np.float32  # float32 rows: twice as many per byte
    for i in (0, 5, 0, 36, 7):
        row = c32.row(i)
        assert row.dtype == np.float32
        if kind == "rbf" and not sparse:  # dense RBF rows in float32 arithmetic (._rbf32)
            np.testing.assert_allclose(row, K[i], rtol=0, atol=2e-7)
        else:
            np.testing.assert_array_equal(row, K[i].astype(np.float32))  # rounded once from float64
    np.testing.assert_allclose(c32.diag, np.diag(K), rtol=1e-12)  # the diagonal stays float64
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-6)):
        full = KernelRowCache(spec, Xin, max_bytes=8 * m * m, dtype=dtype)
        G = full.fill(block_bytes=8 * m * 5)  # several blocks
        assert full.is_full and full.misses == m and G.dtype == dtype
        if kind == "precomputed":
            np.testing.assert_array_equal(G, K.astype(dtype))  # the given matrix
        else:
            assert np.array_equal(G, G.T)  # exactly symmetric
        np.testing.assert_allclose(G, K, rtol=rtol, atol=rtol * np.abs(K).max())
        lazy = KernelRowCache(spec, Xin, max_bytes=8 * m * m, dtype=dtype)
        for i in (0, 17, m - 1):  # the rows a lazy cache computes, to the bit
            np.testing.assert_array_equal(lazy.row(i), G[i])
        for i in (3, 30):  # reads after fill are hits on the same storage
            np.testing.assert_array_equal(cache_row(full.state, i), G[i])
        assert full.misses == m
    with pytest.raises(ValueError, match="room for all"):
        KernelRowCache(spec, Xin, max_bytes=8 * m).fill()


def test_row_cache_rows_are_symmetric_bitwise(X):
    """Row i at j and row j at i are the same float (the solvers rely on a symmetric K)."""
    for kind in ("rbf", "linear", "poly"):
        c = KernelRowCache(resolve_kernel(kind, X, gamma=0.7), X)
        R = np.array([c.row(i) for i in range(X.shape[0])])
        assert np.array_equal(R, R.T)


def test_from_gram_wraps_without_copy(X):
    G = pairwise_kernels(X, metric="rbf", gamma=0.4)
    c = KernelRowCache.from_gram(G)
    assert c.state[0] is G and c.n_slots == X.shape[0]
    np.testing.assert_array_equal(cache_row(c.state, 4), G[4])
    assert c.misses == 0 and c.hits == 1
    np.testing.assert_array_equal(c.diag, np.diag(G))
    G32 = G.astype(np.float32)
    assert KernelRowCache.from_gram(G32).state[0] is G32
    with pytest.raises(ValueError, match="square"):
        KernelRowCache.from_gram(G[:, :3])


def test_cache_dtype_rule():
    from margindist.kernels import cache_dtype

    assert cache_dtype(1e-3) is np.float32 and cache_dtype(1e-5) is np.float32
    assert cache_dtype(1e-6) is np.float64 and cache_dtype(1e-12) is np.float64
    with pytest.raises(ValueError, match="dtype"):
        KernelRowCache(resolve_kernel("linear"), np.eye(3), dtype=np.int32)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kind", ["linear", "rbf", "poly", "sigmoid", "precomputed"])
def test_row_cache_dot_is_the_gram_product(X, rng, kind, sparse, dtype):
    """K @ v from a cache that holds a few rows (read, rounded to its dtype, and by columns for
    the other rows) and computes the others once per symmetric pair (the compiled triangle for
    dense rows; square blocks of a few rows, off-diagonal pairs included, for CSR), and from a
    full cache."""
    spec = resolve_kernel(kind if kind != "precomputed" else "rbf", X, gamma=0.3, degree=3, coef0=0.2)
    K = kernel_matrix(spec, X)
    Xin = K if kind == "precomputed" else (sp.csr_matrix(X) if sparse else X)
    spec = resolve_kernel("precomputed") if kind == "precomputed" else spec
    v = rng.normal(size=X.shape[0])
    cache = KernelRowCache(spec, Xin, max_bytes=5 * 8 * X.shape[0], dtype=dtype)
    for i in (3, 0, 11):
        cache.row(i)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(cache.dot(v, block_bytes=16 * 8 * X.shape[0]), K @ v, rtol=tol,
                               atol=tol * np.abs(K).max() * np.abs(v).sum())
    V = rng.normal(size=(X.shape[0], 3))  # several columns in one pass over the rows
    np.testing.assert_allclose(cache.dot(V, block_bytes=16 * 8 * X.shape[0]), K @ V, rtol=tol,
                               atol=tol * np.abs(K).max() * np.abs(V).sum())
    full = KernelRowCache(spec, Xin, max_bytes=2**20, dtype=dtype)
    full.fill()
    np.testing.assert_allclose(full.dot(v), K @ v, rtol=tol, atol=tol * np.abs(K).max() * np.abs(v).sum())
    assert cache.misses == 3 and full.is_full  # dot caches nothing
    pre = KernelRowCache(spec, Xin, max_bytes=7 * dtype().itemsize * X.shape[0], dtype=dtype)
    assert pre.prefill() == 7 and pre.misses == 7 and not pre.is_full
    np.testing.assert_array_equal(np.array([pre.row(i) for i in range(7)]), full.matrix()[:7])
    np.testing.assert_allclose(pre.dot(V), K @ V, rtol=tol, atol=tol * np.abs(K).max() * np.abs(V).sum())
    chosen = KernelRowCache(spec, Xin, max_bytes=7 * dtype().itemsize * X.shape[0], dtype=dtype)
    rows = np.random.default_rng(2).permutation(X.shape[0])
    assert chosen.prefill(rows) == 7 and np.array_equal(np.flatnonzero(chosen.state.slot_of >= 0), np.sort(rows[:7]))
    np.testing.assert_allclose(chosen.dot(V), K @ V, rtol=tol, atol=tol * np.abs(K).max() * np.abs(V).sum())
    assert pre.misses == 7  # the products read the prefilled rows and cache nothing more
    # the principal block on a subset I of the rows, some of them cached: K_II v_I at I, 0 elsewhere
    I = np.sort(np.random.default_rng(3).choice(X.shape[0], size=X.shape[0] // 2, replace=False))
    I = np.union1d(I, [3, 5])  # row 3 cached (as are 0 and 11, outside or not), row 5 not
    want = np.zeros_like(V)
    want[I] = K[np.ix_(I, I)] @ V[I]
    for c in (cache, pre):
        np.testing.assert_allclose(c.dot(V, rows=I, block_bytes=16 * 8 * X.shape[0]), want, rtol=tol,
                                   atol=tol * np.abs(K).max() * np.abs(V).sum())
    assert cache.misses == 3 and pre.misses == 7
    # 19 cached rows: two tiles of eight read together (their columns added to the other rows)
    # and three rows one at a time; one, two and three columns
    tiles = KernelRowCache(spec, Xin, max_bytes=19 * dtype().itemsize * X.shape[0], dtype=dtype)
    assert tiles.prefill(rows) == 19
    for W in (v, V[:, :2], V):
        np.testing.assert_allclose(tiles.dot(W), K @ W, rtol=tol, atol=tol * np.abs(K).max() * np.abs(W).sum())


def _keys_and_back(x):
    from numba import njit

    from margindist._bits import from_order_key, order_key

    @njit
    def run(x):
        k = np.empty(x.shape[0], dtype=np.int64)
        back = np.empty_like(x)
        for i in range(x.shape[0]):
            k[i] = order_key(x[i])
            back[i] = from_order_key(k[i])
        return k, back

    return run(x)


def test_order_keys_follow_the_order_of_the_floats():
    """KM-OMD's pair selection takes its minima and maxima over integer keys of the gradients:
    the keys are in the order of the floats (-0.0 just below +0.0, the infinities at the ends,
    subnormals in place), and a key gives back its float, sign of zero included."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    tiny = np.nextafter(0.0, 1.0)
    fixed = np.array([-np.inf, -1e308, -1.0, -tiny, -0.0, 0.0, tiny, 1.0, 1e308, np.inf])

    @hypothesis.settings(max_examples=50, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(st.floats(allow_nan=False), min_size=1, max_size=40))
    def check(values):
        x = np.concatenate([np.array(values, dtype=np.float64), fixed])
        k, back = _keys_and_back(x)
        np.testing.assert_array_equal(back, x)
        assert np.array_equal(np.signbit(back), np.signbit(x))
        # the order of the keys is the order of (x, sign bit): -0.0 before +0.0
        want = np.lexsort((~np.signbit(x), x))
        assert np.array_equal(np.sort(k), k[want])

    check()
