"""Products with all rows of X in float64 without a float64 copy of X: X v, X^T v and the
weighted Gram matrix (X - 1 c^T)^T diag(s) (X - 1 c^T); and products with a symmetric
matrix that read one triangle of it (:func:`sym_dot`).

NumPy evaluates ``X @ v`` or ``X.T @ v`` for float32 X and float64 v by casting the whole of X to float64
first, a temporary twice the size of X (8 GB for a million rows of 1000 Nyström features).
Here dense X is read in blocks of rows, each cast (and centred) on its own, so the extra memory
is one block (:data:`BLOCK_BYTES`) and the flops are those of the one large product; X v and
X^T v of C-ordered float32 rows are one compiled pass that casts each value as it reads it. Sparse X
goes through SciPy's sparse products (never densified); centring it subtracts the rank-one term
instead.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from numba import njit
from scipy.linalg import blas

from ..kernels import TILE_ADD, _chunk_rows, row_tile1, row_tile8
from ._rows import nonneg

__all__ = ["BLOCK_BYTES", "KERNEL_ROWS_MAX_WORK", "RowSpace", "column_spreads", "float64_blocks", "gram_dot",
           "gram_work", "lower_to_full", "row_gram", "row_space", "spd_solve", "sym_dot", "sym_rows", "weighted_gram",
           "wide", "x_dot", "xt_dot"]

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


def gram_work(X) -> int:
    """Multiply-adds of the m rows of the linear Gram matrix X X^T: m nnz(X) for CSR X, m^2 d
    for dense X (the price a dual solver on kernel rows pays for a linear problem)."""
    m, d = X.shape
    return m * (X.nnz if sp.issparse(X) else m * d)


#: A linear problem counts as :func:`wide` while the rows of X X^T cost at most this many
#: multiply-adds.
KERNEL_ROWS_MAX_WORK = 10**8


def wide(X, max_work=KERNEL_ROWS_MAX_WORK) -> bool:
    """Whether a linear problem is better solved on the rows of X X^T (its dual over m
    variables, the model w = X^T a): at most as many rows as features, and those rows cost
    at most ``max_work`` (:func:`gram_work`)."""
    return X.shape[0] <= X.shape[1] and gram_work(X) <= max_work


_F32_FM = {"reassoc", "contract"}  # each row's sum vectorises (float64 lanes)


@njit(cache=True, fastmath=_F32_FM)
def _f32_dot(X, VT, outT):
    """outT[c, i] = sum_j X[i, j] VT[c, j] in float64, X float32 C-ordered (n, d)."""
    n, d = X.shape
    for i in range(n):
        x = X[i]
        for c in range(VT.shape[0]):
            v = VT[c]
            acc = 0.0
            for j in range(d):
                acc += np.float64(x[j]) * v[j]
            outT[c, i] = acc


@njit(cache=True, fastmath=_F32_FM)
def _f32_tdot(X, TT, outT):
    """outT[c, j] = sum_i X[i, j] TT[c, i] in float64, X float32 C-ordered (n, d)."""
    n, d = X.shape
    outT[:] = 0.0
    for i in range(n):
        x = X[i]
        for c in range(TT.shape[0]):
            t = TT[c, i]
            if t == 0.0:
                continue
            o = outT[c]
            for j in range(d):
                o[j] += np.float64(x[j]) * t


def _compiled_f32(X) -> bool:
    """Dense C-ordered float32 rows: products by one compiled pass over X (each value cast to
    float64 as it is read: no block copies, 2.5x faster than cast blocks and BLAS)."""
    return X.dtype == np.float32 and X.flags.c_contiguous


def _f32_product(kernel, X, v, n_out):
    """``kernel`` (:func:`_f32_dot` or :func:`_f32_tdot`) on the columns of v (1-D or 2-D), laid
    out as the rows it reads; the result has v's number of dimensions."""
    VT = np.ascontiguousarray(v.reshape(v.shape[0], -1).T)
    outT = np.empty((VT.shape[0], n_out))
    kernel(X, VT, outT)
    return outT[0] if v.ndim == 1 else np.ascontiguousarray(outT.T)


def x_dot(X, v, *, max_bytes=BLOCK_BYTES) -> np.ndarray:
    """X v in float64: shape (n,) for v of shape (d,), (n, q) for v of shape (d, q)."""
    v = np.asarray(v, dtype=np.float64)
    if sp.issparse(X) or X.dtype == np.float64:
        return np.asarray(X @ v, dtype=np.float64)
    if _compiled_f32(X):
        return _f32_product(_f32_dot, X, v, X.shape[0])
    out = np.empty((X.shape[0],) + v.shape[1:])
    for start, stop, B in float64_blocks(X, max_bytes):
        out[start:stop] = B @ v
    return out


def xt_dot(X, v, *, max_bytes=BLOCK_BYTES) -> np.ndarray:
    """X^T v in float64: shape (d,) for v of shape (n,), (d, q) for v of shape (n, q)."""
    v = np.asarray(v, dtype=np.float64)
    if sp.issparse(X) or X.dtype == np.float64:
        return np.asarray(X.T @ v, dtype=np.float64)
    if _compiled_f32(X):
        return _f32_product(_f32_tdot, X, v, X.shape[1])
    out = np.zeros((X.shape[1],) + v.shape[1:])
    for start, stop, B in float64_blocks(X, max_bytes):
        out += B.T @ v[start:stop]
    return out


def sym_dot(G, v) -> np.ndarray:
    """G v for a symmetric matrix G (C or Fortran order, float64 or float32), v of shape (m,) or
    (m, q), in float64, reading one triangle of G: C's lower one (the upper triangle of the
    Fortran view). The caller vouches that G is symmetric (any other matrix: ``G @ v``).

    A product with an m x m matrix is bound by reading it. One column of a float64 G is one BLAS
    ``dsymv`` (5 ms at m = 5000 on one core, against 9 ms for ``G @ v``). Several columns go
    through :func:`sym_rows`, which reads the triangle once for two columns (5000 x 5000, two
    columns: 4.0 ms, against 10 ms for two ``dsymv`` and 31 ms for ``G @ V``).
    """
    C = G if G.flags.c_contiguous else G.T  # G.T: the same symmetric matrix, C-ordered
    v = np.asarray(v, dtype=np.float64)
    if not C.flags.c_contiguous or C.dtype not in (np.float32, np.float64):
        return np.asarray(G @ v, dtype=np.float64)
    if v.ndim == 1 and C.dtype == np.float64:
        return blas.dsymv(1.0, C.T, v)
    V = np.ascontiguousarray(np.atleast_2d(v.T))
    out = np.empty_like(V)
    sym_rows(C, V, out)
    return out[0] if v.ndim == 1 else out.T


_FM = {"reassoc", "contract"}  # the sums over columns vectorise
_NO_MASK = np.zeros(0)


@njit(cache=True, fastmath=_FM, inline="always")
def _lower_row(K, v0, v1, o0, o1, i, lo):
    """Row i of K's lower triangle from column lo on: K[i, a] (lo <= a < i) applied to both
    sides of the symmetric product of (v0, v1) (:func:`~margindist.kernels.row_tile1`), then
    the diagonal."""
    r, x0, x1 = K[i], v0[i], v1[i]
    s0, s1 = row_tile1(r, lo, i, v0, v1, x0, x1, o0, o1, _NO_MASK, TILE_ADD)
    k = np.float64(r[i])
    o0[i] += s0 + k * x0
    o1[i] += s1 + k * x1


@njit(cache=True, fastmath=_FM)
def _lower_pair(K, v0, v1, o0, o1):
    """(o0, o1) = (K v0, K v1) for a symmetric C-ordered K (float64 or float32) read on its
    lower triangle, in float64: rows eight at a time (:func:`~margindist.kernels.row_tile8`
    over the columns left of the eight, then their 8 x 8 diagonal block row by row), the rows
    left over one by one."""
    n = v0.shape[0]
    o0[:] = 0.0
    o1[:] = 0.0
    b = 0
    while b + 8 <= n:
        R = (K[b], K[b + 1], K[b + 2], K[b + 3], K[b + 4], K[b + 5], K[b + 6], K[b + 7])
        X = (v0[b], v0[b + 1], v0[b + 2], v0[b + 3], v0[b + 4], v0[b + 5], v0[b + 6], v0[b + 7])
        Z = (v1[b], v1[b + 1], v1[b + 2], v1[b + 3], v1[b + 4], v1[b + 5], v1[b + 6], v1[b + 7])
        P, Q = row_tile8(R, 0, b, v0, v1, X, Z, o0, o1, _NO_MASK, TILE_ADD)
        for u in range(8):  # nothing was added at b.. yet
            o0[b + u] = P[u]
            o1[b + u] = Q[u]
        for i in range(b, b + 8):  # the 8 x 8 diagonal block
            _lower_row(K, v0, v1, o0, o1, i, b)
        b += 8
    for i in range(b, n):
        _lower_row(K, v0, v1, o0, o1, i, 0)


@njit(cache=True)
def sym_rows(K, V, out):
    """out = V K for a symmetric C-ordered K (n, n) read on its lower triangle (the upper one
    is never read) and V (k, n), in float64: the rows of V by pairs (:func:`_lower_pair`)."""
    k = V.shape[0]
    for j in range(0, k - 1, 2):
        _lower_pair(K, V[j], V[j + 1], out[j], out[j + 1])
    if k % 2:
        spare = np.empty(V.shape[1])
        _lower_pair(K, V[k - 1], V[k - 1], out[k - 1], spare)


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


def row_gram(X, *, max_bytes=BLOCK_BYTES) -> np.ndarray:
    """X X^T in float64 (n x n), for few rows: CSR through SciPy, dense rows by blocks of
    columns cast one at a time (no float64 copy of float32 X)."""
    if sp.issparse(X):
        Xf = sp.csr_matrix(X, dtype=np.float64)
        return np.asarray((Xf @ Xf.T).toarray())
    n, d = X.shape
    step = max(1, int(max_bytes) // (8 * max(n, 1)))
    G = np.zeros((n, n))
    for j in range(0, d, step):
        B = np.asarray(X[:, j : j + step], dtype=np.float64)
        G += B @ B.T
    return G


@njit(cache=True)
def _csr_weighted_squares(indptr, indices, data, s, out):
    """out[j] += sum_i s_i x_ij^2 over the stored entries of CSR rows (float64 sums)."""
    for i in range(indptr.shape[0] - 1):
        si = s[i]
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            v = np.float64(data[jj])
            out[nonneg(indices[jj])] += si * v * v


@njit(cache=True)
def _csr_gram_dot(indptr, indices, data, s, V, out):
    """out (d, q) = X^T diag(s) X V for CSR X in one pass over the rows: each row's scores
    x_i V, then, while the row is in cache, its term s_i x_i (x_i V)^T (float64 sums)."""
    q = V.shape[1]
    a = np.empty(q)
    out[:, :] = 0.0
    for i in range(indptr.shape[0] - 1):
        a[:] = 0.0
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            x = np.float64(data[jj])
            j = nonneg(indices[jj])
            for k in range(q):
                a[k] += x * V[j, k]
        for k in range(q):
            a[k] *= s[i]
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            x = np.float64(data[jj])
            j = nonneg(indices[jj])
            for k in range(q):
                out[j, k] += x * a[k]


def gram_dot(X, s, V) -> np.ndarray:
    """X^T diag(s) X V in float64 for V of shape (d, q): for CSR X one compiled pass over the
    rows, its values read as they are (SciPy's two products read X twice and cast float32
    values to float64 at each: 2M x 200k rows with 40M float32 values, q = 16, 2.3 s against
    4.4 s; the same sums, in the same order), else :func:`xt_dot` of :func:`x_dot`."""
    V = np.asarray(V, dtype=np.float64)
    if sp.issparse(X) and X.format == "csr":
        out = np.empty((X.shape[1], V.shape[1]))
        _csr_gram_dot(X.indptr, X.indices, X.data, np.asarray(s, dtype=np.float64), np.ascontiguousarray(V), out)
        return out
    return xt_dot(X, np.asarray(s, dtype=np.float64)[:, None] * x_dot(X, V))


def column_spreads(X, s, center=None, *, max_bytes=BLOCK_BYTES) -> np.ndarray:
    """sum_i s_i (x_ij - c_j)^2 for every column j as a float64 (d,) array: the diagonal of
    :func:`weighted_gram` without the rest of it. Dense rows are centred block by block;
    sparse X keeps its sparsity (the centre enters through the column sums; clipped at 0)."""
    s = np.asarray(s, dtype=np.float64)
    if sp.issparse(X):
        Xr = X.tocsr()
        if not Xr.has_canonical_format:
            Xr = Xr.copy()
            Xr.sum_duplicates()
        sq = np.zeros(Xr.shape[1])
        _csr_weighted_squares(Xr.indptr, Xr.indices, Xr.data, s, sq)
        if center is not None:
            c = np.asarray(center, dtype=np.float64)
            sq += s.sum() * c * c - 2.0 * c * xt_dot(Xr, s)
        return np.maximum(sq, 0.0)
    out = np.zeros(X.shape[1])
    for start, stop, B in float64_blocks(X, max_bytes):
        if center is not None:
            B = B - center
        out += s[start:stop] @ (B * B)
    return out


def spd_solve(H, r):
    """H^{-1} r for a Newton system H that is positive definite in exact arithmetic, without
    scipy's LinAlgWarning for an ill-conditioned one (features on very different scales, which
    FeatureScaleWarning reports once; the caller's line search or stopping rule judges the
    step), and by least squares where H is not positive definite in floating point."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sla.LinAlgWarning)
            return sla.solve(H, r, assume_a="pos", check_finite=False)
    except (np.linalg.LinAlgError, ValueError):
        return np.linalg.lstsq(H, r, rcond=None)[0]


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


@dataclass(frozen=True)
class RowSpace:
    """Wide data in coordinates of the span of its rows: X = Xr Q^T with Q (d, r) orthonormal.

    A model whose weights provably stay in that span solves the same problem on the n x r
    rows Xr (r <= n), at O(n r) instead of O(n d) per product with the data: M3SVM's
    deterministic drivers (:mod:`margindist.solvers.m3svm`; the minimiser of its objective has
    its rows there, and its steps combine gradients that lie there) and MSVMAv's linear
    iteration (:func:`margindist.solvers.msvmav.linear.row_basis`). Norms and inner products
    with the rows are those of the coordinates.
    """

    Xr: np.ndarray
    Q: np.ndarray

    def to_space(self, W):
        """C = W Q: the coordinates of W's projection (None stays None)."""
        return None if W is None else np.asarray(W, dtype=np.float64) @ self.Q

    def from_space(self, C):
        """W = C Q^T, of shape (K, d)."""
        return C @ self.Q.T


def row_space(X, bias=None) -> RowSpace:
    """The :class:`RowSpace` of X (n, d), with the constant column ``bias`` appended when
    given (then d + 1 coordinates): from a thin QR factorisation X^T = Q R for dense X, from
    the eigendecomposition of the Gram matrix for sparse X (:func:`_sparse_row_space`)."""
    if sp.issparse(X):
        return _sparse_row_space(X, bias)
    p = X.shape[1]
    Xt = np.empty((p + (bias is not None), X.shape[0]), order="F")
    Xt[:p] = X.T
    if bias is not None:
        Xt[p] = bias
    Q, R = sla.qr(Xt, mode="economic", overwrite_a=True, check_finite=False)
    return RowSpace(Xr=np.ascontiguousarray(R.T), Q=Q)


def _sparse_row_space(X, bias):
    """:func:`row_space` of CSR X without densifying it: the Gram matrix G = X~ X~^T
    (:func:`row_gram`, plus bias^2) = U diag(lam) U^T gives Xr = U diag(sqrt(lam)) and
    Q = X~^T U diag(1 / sqrt(lam)), directions below the numerical rank (lam <= n eps max lam)
    dropped. The eigendecomposition squares X's condition, so a direction whose singular value
    is a fraction f of the largest has its coordinates to about eps / f^2 relative: small, for
    the directions that carry the margins."""
    G = row_gram(X)
    if bias is not None:
        G += float(bias) ** 2
    lam, U = sla.eigh(G, overwrite_a=True, check_finite=False)
    keep = lam > lam.max(initial=0.0) * X.shape[0] * np.finfo(np.float64).eps
    U, root = U[:, keep], np.sqrt(lam[keep])
    C = U / root
    Q = xt_dot(X, C)
    if bias is not None:
        Q = np.vstack([Q, float(bias) * C.sum(axis=0)])
    return RowSpace(Xr=np.ascontiguousarray(U * root), Q=Q)
