"""Products with all rows of X in float64 without a float64 copy of X: X v, X^T v and the
weighted Gram matrix (X - 1 c^T)^T diag(s) (X - 1 c^T); and products with a symmetric
matrix that read one triangle of it (:func:`sym_dot`).

NumPy evaluates ``X @ v`` or ``X.T @ v`` for float32 X and float64 v by casting the whole of X to float64
first, a temporary twice the size of X (8 GB for a million rows of 1000 Nyström features).
Here dense X is read in blocks of rows, each cast (and centred) on its own, so the extra memory
is one block (:data:`BLOCK_BYTES`) and the flops are those of the one large product. Sparse X
goes through SciPy's sparse products (never densified); centring it subtracts the rank-one term
instead.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.linalg import blas

from ..kernels import _chunk_rows

__all__ = ["BLOCK_BYTES", "float64_blocks", "lower_to_full", "sym_dot", "weighted_gram", "x_dot", "xt_dot"]

#: Bytes of one float64 block of rows: small enough to stay in cache between its conversion and
#: its product (50 000 x 1000 float32 rows, one thread: X v in 19 ms by blocks of 4 MiB, 79 ms
#: by blocks of 32 MiB).
BLOCK_BYTES = 4 * 2**20


def float64_blocks(X, max_bytes=BLOCK_BYTES):
    """(start, stop, float64 rows X[start:stop]) over dense X, blocks of at most ``max_bytes``."""
    step = _chunk_rows(X.shape[0], X.shape[1], int(max_bytes))
    for start in range(0, X.shape[0], step):
        stop = min(start + step, X.shape[0])
        yield start, stop, np.asarray(X[start:stop], dtype=np.float64)


def x_dot(X, v, *, max_bytes=BLOCK_BYTES) -> np.ndarray:
    """X v in float64: shape (n,) for v of shape (d,), (n, q) for v of shape (d, q)."""
    v = np.asarray(v, dtype=np.float64)
    if sp.issparse(X) or X.dtype == np.float64:
        return np.asarray(X @ v, dtype=np.float64)
    out = np.empty((X.shape[0],) + v.shape[1:])
    for start, stop, B in float64_blocks(X, max_bytes):
        out[start:stop] = B @ v
    return out


def xt_dot(X, v, *, max_bytes=BLOCK_BYTES) -> np.ndarray:
    """X^T v in float64: shape (d,) for v of shape (n,), (d, q) for v of shape (n, q)."""
    v = np.asarray(v, dtype=np.float64)
    if sp.issparse(X) or X.dtype == np.float64:
        return np.asarray(X.T @ v, dtype=np.float64)
    out = np.zeros((X.shape[1],) + v.shape[1:])
    for start, stop, B in float64_blocks(X, max_bytes):
        out += B.T @ v[start:stop]
    return out


def sym_dot(G, v) -> np.ndarray:
    """G v for a symmetric float64 matrix G (C or Fortran order), v of shape (m,) or (m, q):
    one BLAS ``dsymv`` per column, which reads the upper triangle of G's Fortran view only.

    A product with an m x m matrix is bound by reading it. On one core at m = 5000 a column took
    5 ms this way, 9 ms by ``G @ v`` (the whole matrix), and two columns 30 ms by ``G @ V``
    (a matrix product at two columns). G's other triangle is never read: the caller vouches that
    G is symmetric (any other matrix: ``G @ v``).
    """
    F = G.T if G.flags.c_contiguous else G
    v = np.asarray(v, dtype=np.float64)
    if G.dtype != np.float64 or not F.flags.f_contiguous:
        return np.asarray(G @ v, dtype=np.float64)
    if v.ndim == 1:
        return blas.dsymv(1.0, F, v)
    out = np.empty(v.shape)
    for j in range(v.shape[1]):
        out[:, j] = blas.dsymv(1.0, F, v[:, j])
    return out


def weighted_gram(X, s, center=None, *, max_bytes=BLOCK_BYTES) -> np.ndarray:
    """(X - 1 c^T)^T diag(s) (X - 1 c^T) as a float64 (d, d) array; c = ``center`` (None: 0).

    Dense rows are centred before the product (no cancellation between X^T S X and
    S c c^T, which at large feature scales leaves a matrix that is not numerically positive
    definite); sparse X keeps its sparsity and subtracts the rank-one term.
    """
    s = np.asarray(s, dtype=np.float64)
    d = X.shape[1]
    if sp.issparse(X):
        Xr = X.tocsr()
        G = np.asarray((Xr.T @ Xr.multiply(s[:, None]).tocsr()).toarray(), dtype=np.float64)
        if center is not None:
            c = np.asarray(center, dtype=np.float64)
            xs = xt_dot(Xr, s)
            G -= np.outer(xs, c) + np.outer(c, xs) - s.sum() * np.outer(c, c)
        return G
    G = np.zeros((d, d))
    for start, stop, B in float64_blocks(X, max_bytes):
        if center is not None:
            B = B - center  # a new block: B may be a view of float64 X
        G += B.T @ (B * s[start:stop, None])
    return G


@njit(cache=True)
def lower_to_full(A, tile=64):
    """Copy the lower triangle of the square C-ordered A onto its upper triangle, in place, in
    ``tile`` x ``tile`` blocks so that the rows read and the rows written stay in cache (5000 x
    5000: 21 ms against 32 ms for the plain column-by-column copy, whose writes miss the cache)."""
    n = A.shape[0]
    for i0 in range(0, n, tile):
        i1 = min(i0 + tile, n)
        for j0 in range(i0, n, tile):
            j1 = min(j0 + tile, n)
            for i in range(i0, i1):
                for j in range(max(j0, i + 1), j1):
                    A[i, j] = A[j, i]
