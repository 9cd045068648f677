"""margindist.solvers._gram: blocked products with all rows of X against plain float64 NumPy,
for dense float64 / float32 and CSR input, across block boundaries, and their memory bound;
products with a symmetric matrix through one triangle."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from margindist.solvers._gram import column_spreads, gram_dot, row_gram, sym_dot, weighted_gram, x_dot, xt_dot


def _data(dtype, sparse, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(103, 7)) * rng.uniform(0.1, 10, size=7) + 5.0
    X[rng.random(X.shape) < 0.4] = 0.0
    X = X.astype(dtype)
    return (sp.csr_matrix(X) if sparse else X), X.astype(np.float64), rng.uniform(0.2, 3.0, size=103)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("max_bytes", [8 * 7 * 10, 2**20])  # blocks of 10 rows / one block
def test_products_equal_float64_numpy(dtype, sparse, max_bytes):
    X, Xf, s = _data(dtype, sparse)
    v, r = np.arange(7.0) - 3.0, np.linspace(-1, 1, 103)
    c = Xf.T @ s / s.sum()
    np.testing.assert_allclose(x_dot(X, v, max_bytes=max_bytes), Xf @ v, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(xt_dot(X, r, max_bytes=max_bytes), Xf.T @ r, rtol=1e-12, atol=1e-10)
    G = weighted_gram(X, s, max_bytes=max_bytes)
    np.testing.assert_allclose(G, Xf.T @ (Xf * s[:, None]), rtol=1e-12)
    Gc = weighted_gram(X, s, center=c, max_bytes=max_bytes)
    Xc = Xf - c
    np.testing.assert_allclose(Gc, Xc.T @ (Xc * s[:, None]), rtol=1e-9, atol=1e-9 * np.abs(G).max())
    for out in (G, Gc):
        assert out.dtype == np.float64 and out.shape == (7, 7)
    # the diagonal alone, without the d x d product
    np.testing.assert_allclose(column_spreads(X, s, max_bytes=max_bytes), s @ Xf**2, rtol=1e-12)
    np.testing.assert_allclose(column_spreads(X, s, c, max_bytes=max_bytes), (s @ Xc**2), rtol=1e-9)
    # the row side: X X^T, dense rows by blocks of columns (here of 103 x 1 at the small budget)
    K = row_gram(X, max_bytes=max_bytes // 7 if max_bytes < 2**20 else max_bytes)
    np.testing.assert_allclose(K, Xf @ Xf.T, rtol=1e-12, atol=1e-10)
    assert K.dtype == np.float64 and K.shape == (103, 103)
    # X^T diag(s) X V: for CSR one compiled pass over the rows (int64 indices and a CSR array too)
    V = np.random.default_rng(1).normal(size=(7, 3))
    inputs = [X] + ([sp.csr_array(X), sp.csr_matrix((X.data, X.indices.astype(np.int64), X.indptr.astype(np.int64)),
                                                    shape=X.shape)] if sparse else [])
    for Xi in inputs:
        out = gram_dot(Xi, s, V)
        assert out.dtype == np.float64 and out.shape == (7, 3)
        np.testing.assert_allclose(out, Xf.T @ (s[:, None] * (Xf @ V)), rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("order", ["C", "F"])  # C: the compiled pass; F: cast blocks and BLAS
def test_float32_products_of_several_vectors(order):
    rng = np.random.default_rng(3)
    X = np.array(rng.normal(size=(301, 37)), dtype=np.float32, order=order)
    Xf = X.astype(np.float64)
    V, T = rng.normal(size=(37, 3)), rng.normal(size=(301, 2))
    T[::3] = 0.0  # rows that add nothing
    for a, b in ((x_dot(X, V), Xf @ V), (x_dot(X, V[:, 0]), Xf @ V[:, 0]),
                 (xt_dot(X, T), Xf.T @ T), (xt_dot(X, T[:, 1]), Xf.T @ T[:, 1])):
        assert a.dtype == np.float64 and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13 * np.abs(b).max())


def test_centring_leaves_float64_input_unchanged():
    X, _, s = _data(np.float64, False)
    before = X.copy()
    weighted_gram(X, s, center=X.mean(axis=0), max_bytes=8 * 7 * 10)
    np.testing.assert_array_equal(X, before)


def test_float32_rows_are_never_copied_whole_to_float64():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20000, 100)).astype(np.float32)  # 8 MB; a float64 copy: 16 MB
    s = np.ones(20000)
    block = 2**20
    for fn in (lambda: xt_dot(X, s, max_bytes=block), lambda: x_dot(X, np.ones(100), max_bytes=block),
               lambda: weighted_gram(X, s, center=np.zeros(100), max_bytes=block)):
        tracemalloc.start()
        fn()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 4 * block + 20000 * 8 + 2**16, peak


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("n", [7, 57])
def test_sym_dot_reads_one_triangle(order, n):
    """G v for a symmetric G of either memory order, one column or several (a BLAS symv, or
    pairs of columns in eight-row tiles and the rows left over); the other triangle is never
    read (garbage there changes nothing); a float32 matrix gives G v in float64."""
    rng = np.random.default_rng(1)
    A = rng.normal(size=(n, n))
    G = np.array(A + A.T, order=order)
    v, V = rng.normal(size=n), rng.normal(size=(n, 3))
    np.testing.assert_allclose(sym_dot(G, v), G @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sym_dot(G, V), G @ V, rtol=1e-12, atol=1e-12)
    noise = rng.normal(size=G.shape)
    # dsymv reads the upper triangle of the Fortran view: G's lower one for a C-ordered G
    half = np.tril(G) + np.triu(noise, 1) if order == "C" else np.triu(G) + np.tril(noise, -1)
    # (the upper triangle of a C-ordered G's transpose for a Fortran-ordered G)
    np.testing.assert_allclose(sym_dot(np.array(half, order=order), V), G @ V, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sym_dot(np.array(half, order=order), v), G @ v, rtol=1e-12, atol=1e-12)
    G32 = G.astype(np.float32)
    np.testing.assert_allclose(sym_dot(G32, v), G32.astype(np.float64) @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sym_dot(np.array(half, order=order, dtype=np.float32), V),
                               G32.astype(np.float64) @ V, rtol=1e-12, atol=1e-12)
