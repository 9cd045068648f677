"""Training rows as the numba solvers read them, and the one random generator they draw from.

:class:`Rows` is the m x d design matrix X, dense (a C-contiguous array) or CSR (``data``,
``indices``, ``indptr``; indices need not be sorted, nothing is densified), of float32 or
float64 values, optionally extended by a constant column of value ``bias``: xh_i = [x_i, bias].
Values are read in their own type and every sum is float64. A weight vector of a design with
the bias column has length d + 1, its last entry the weight of that column; without it, length d.
The solvers receive this named tuple across the numba boundary and read a row with

* :func:`row_dot` ``<w, xh_i>`` and :func:`row_dot_sq` ``(<w, x_i>, ||x_i||^2)`` in one pass,
* :func:`row_axpy` ``w += c xh_i`` and :func:`row_axpy2` ``w += a xh_i, v += b xh_i`` in one pass,
* :func:`rows_dot` ``Xh w`` and :func:`rows_tdot` ``Xh^T r`` over all rows (both as the
  products of :class:`XhProducts`), :func:`row_sq_norm` ``||xh_i||^2``; :func:`row_sq_norms`
  gives all of them from NumPy/SciPy.

Each costs O(nnz(x_i)) (O(d) for dense rows). The row functions are inlined into the caller's
loop (as a call each costs about as much as a sparse row), so they take the caller's fast-math
flags: a caller that allows reassociation gets vectorised dense sums, one that does not gets the
sums in feature order. They read the arrays as ``rows.data[t]``, never binding them to local
names: a bound array is reference-counted at every call, which made a sparse row 40 % slower.
CSR positions and column indices go through :func:`nonneg` (unsigned: no wraparound test of
negative indices), and the bias column is written before a row's loop, not after it (both
measured; see there and :func:`row_axpy`). Compiled CSR loops elsewhere use :func:`nonneg` too.

Randomness: xorshift64 (Marsaglia 2003) on a uint64 array of length 1 that compiled code advances
in place; :func:`seed_from` derives its non-zero state from a scikit-learn ``random_state`` (int,
RandomState or None, through ``check_random_state``), so equal ``random_state`` gives equal runs.
:func:`rng_below`, :func:`rng_shuffle` and :func:`permutation` draw indices from it. The dual
coordinate descent (:mod:`~margindist.solvers.dcd`), ODM's SVRG and the mini-batch order of
M3SVM's Adam draw from it; the pass orders of LDM's averaged SGD and of margin pursuit's SGD,
drawn in Python, still come from NumPy generators seeded from the same ``random_state`` (their
tests were fitted to those streams).
"""

from __future__ import annotations

import functools
import numbers
from collections import namedtuple

import numpy as np
import scipy.sparse as sp
from numba import njit, uintp

__all__ = [
    "Rows",
    "XhProducts",
    "make_rows",
    "nonneg",
    "permutation",
    "rng_below",
    "rng_next",
    "rng_shuffle",
    "row_axpy",
    "row_axpy2",
    "row_dot",
    "row_dot_sq",
    "row_sq_norm",
    "row_sq_norms",
    "rows_dot",
    "rows_tdot",
    "seed_from",
]

#: The rows of X (or of [X, bias]) for compiled code. ``dense``: the (m, d) C-contiguous array,
#: or an empty (0, 0) array of the data type for CSR rows; ``data``, ``indices``, ``indptr``:
#: the CSR arrays (empty placeholders of the right types for dense rows); ``sparse``: which of
#: the two holds X; ``n_features``: d; ``bias``: the value of the constant column;
#: ``has_bias``: whether the column is there (weights of length d + 1).
Rows = namedtuple("Rows", ["dense", "data", "indices", "indptr", "sparse", "n_features", "bias", "has_bias"])


def make_rows(X, bias=None) -> Rows:
    """The :class:`Rows` of X (dense array or sparse matrix), with a constant column of value
    ``bias`` unless ``bias`` is None.

    Dense X is made C-contiguous (no copy if it already is); CSR X keeps its value and index
    dtypes (no copy; other sparse formats are converted to CSR). Values other than float32 and
    float64 are read as float64. The placeholders of the unused representation have the dtypes of
    the used one, so that numba compiles one variant per data type.
    """
    d = int(X.shape[1])
    has_bias = bias is not None
    b = float(bias) if has_bias else 0.0
    if sp.issparse(X):
        Xc = X.tocsr()
        dt = Xc.dtype if Xc.dtype in (np.float32, np.float64) else np.float64
        it = Xc.indices.dtype if Xc.indices.dtype in (np.int32, np.int64) else np.int64
        return Rows(np.zeros((0, 0), dtype=dt), np.asarray(Xc.data, dtype=dt), np.asarray(Xc.indices, dtype=it),
                    np.asarray(Xc.indptr, dtype=it), True, d, b, has_bias)
    Xd = np.ascontiguousarray(X)
    if Xd.dtype not in (np.float32, np.float64):
        Xd = Xd.astype(np.float64)
    return Rows(Xd, np.zeros(0, dtype=Xd.dtype), np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int32), False,
                d, b, has_bias)


def row_sq_norms(X, bias=None) -> np.ndarray:
    """||xh_i||^2 for every row in float64 (``bias``: the constant column, None for none), without
    densifying sparse X."""
    if sp.issparse(X):
        Xc = X.tocsr()
        v = np.asarray(Xc.data, dtype=np.float64)
        sq = np.asarray(sp.csr_matrix((v * v, Xc.indices, Xc.indptr), shape=Xc.shape).sum(axis=1)).ravel()
    else:
        Xf = np.asarray(X)
        sq = np.einsum("ij,ij->i", Xf, Xf, dtype=np.float64)
    if bias is not None:
        sq += float(bias) * float(bias)
    return sq


# ----------------------------------------------------------------------------- row access


@njit(cache=True, inline="always")
def nonneg(i):
    """An index known to be non-negative (a CSR position or column index), as an unsigned
    integer. Indexing with a signed integer makes numba add the array length to negative
    values (Python's wraparound), a compare and an add at every access; with this cast the
    loops of the sparse rows ran at SciPy's speed (200k x 50k rows, 10M non-zeros: X v 16.7 ->
    12.7 ms, X^T u 17.4 -> 14.1 ms, a fused X^T D X v 36.8 -> 22.6 ms)."""
    return uintp(i)


@njit(cache=True, inline="always")
def row_dot(rows, i, w):
    """<w, xh_i> (float64); w has length d, or d + 1 with the bias column."""
    acc = 0.0
    if rows.sparse:
        for t in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
            acc += w[nonneg(rows.indices[t])] * rows.data[t]
    else:
        for f in range(rows.n_features):
            acc += w[f] * rows.dense[i, f]
    return acc + (w[rows.n_features] * rows.bias if rows.has_bias else 0.0)


@njit(cache=True, inline="always")
def row_dot_sq(rows, i, w):
    """(<w, x_i>, ||x_i||^2) in one pass over row i, the bias column left out of both."""
    acc = 0.0
    xsq = 0.0
    if rows.sparse:
        for t in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
            x = np.float64(rows.data[t])
            acc += w[nonneg(rows.indices[t])] * x
            xsq += x * x
    else:
        for f in range(rows.n_features):
            x = np.float64(rows.dense[i, f])
            acc += w[f] * x
            xsq += x * x
    return acc, xsq


@njit(cache=True, inline="always")
def row_axpy(rows, i, c, w):
    """w += c xh_i."""
    if rows.has_bias:  # before the row's loop: written after it, it made the sparse loop 50 % slower
        w[rows.n_features] += c * rows.bias
    if rows.sparse:
        for t in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
            w[nonneg(rows.indices[t])] += c * rows.data[t]
    else:
        for f in range(rows.n_features):
            w[f] += c * rows.dense[i, f]


@njit(cache=True, inline="always")
def row_axpy2(rows, i, a, w, b, v):
    """w += a xh_i and v += b xh_i in one pass over row i (each value read once)."""
    if rows.has_bias:  # first, as in row_axpy
        w[rows.n_features] += a * rows.bias
        v[rows.n_features] += b * rows.bias
    if rows.sparse:
        for t in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
            j = nonneg(rows.indices[t])
            x = rows.data[t]
            w[j] += a * x
            v[j] += b * x
    else:
        for f in range(rows.n_features):
            x = rows.dense[i, f]
            w[f] += a * x
            v[f] += b * x


@njit(cache=True)
def rows_dot(rows, w, out):
    """out = Xh w: <w, xh_i> for every row i (out of length m)."""
    for i in range(out.shape[0]):
        out[i] = row_dot(rows, i, w)


@njit(cache=True)
def rows_dot_at(rows, idx, w, out):
    """out[t] = <w, xh_{idx[t]}> for the rows idx (no copy of them)."""
    for t in range(idx.shape[0]):
        out[t] = row_dot(rows, idx[t], w)


@njit(cache=True)
def rows_axpy_at(rows, idx, c, out):
    """out += sum_t c[t] xh_{idx[t]} (no copy of the rows)."""
    for t in range(idx.shape[0]):
        row_axpy(rows, idx[t], c[t], out)


@njit(cache=True)
def rows_tdot(rows, r, out):
    """out = Xh^T r (out of length d + 1, or d without the bias column)."""
    out[:] = 0.0
    for i in range(r.shape[0]):
        if r[i] != 0.0:
            row_axpy(rows, i, r[i], out)


class XhProducts:
    """Products with Xh = [X, B] in float64 without densifying or copying X: ``xv`` (Xh v, one
    pass) and ``xtr`` (Xh^T r, one pass); ``rows`` the compiled rows."""

    def __init__(self, X, bias):
        self.rows = make_rows(X, bias)
        self.bias = float(bias)
        self.m, self.d = X.shape

    def xv(self, v):
        out = np.empty(self.m)
        rows_dot(self.rows, np.ascontiguousarray(v, dtype=np.float64), out)
        return out

    def xtr(self, r):
        out = np.empty(self.d + 1)
        rows_tdot(self.rows, np.ascontiguousarray(r, dtype=np.float64), out)
        return out


@njit(cache=True)
def rows_sq_norm(rows, out):
    """out_i = ||xh_i||^2 for every row (no copy of sparse or float32 X). :func:`row_sq_norms`
    keeps SciPy's sums for its many callers: this loop's order differs from them in the last bit."""
    for i in range(out.shape[0]):
        out[i] = row_sq_norm(rows, i)


@njit(cache=True)
def row_sq_norm(rows, i):
    """||xh_i||^2 (float64)."""
    acc = 0.0
    if rows.sparse:
        for t in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
            x = np.float64(rows.data[t])
            acc += x * x
    else:
        for f in range(rows.n_features):
            x = np.float64(rows.dense[i, f])
            acc += x * x
    if rows.has_bias:
        acc += rows.bias * rows.bias
    return acc


# ----------------------------------------------------------------------------- random numbers


def seed_from(random_state) -> np.ndarray:
    """The generator state (a non-zero uint64 array of length 1) from an int / RandomState / None.

    One integer is drawn from ``check_random_state(random_state)`` and spread over 64 bits; None
    draws it from NumPy's global generator (scikit-learn's convention: ``np.random.seed`` makes it
    reproducible).
    """
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        seed = _int_seed(int(random_state))  # kept: a grid search seeds every fit alike
    else:
        seed = _draw_seed(random_state)
    return np.array([seed], dtype=np.uint64)


def _draw_seed(random_state) -> int:
    from sklearn.utils import check_random_state

    seed = int(check_random_state(random_state).randint(1, 2**31 - 1)) * 2654435761 + 1
    return seed % (2**64 - 1) or 1


@functools.lru_cache(maxsize=1024)
def _int_seed(random_state: int) -> int:
    """:func:`_draw_seed` of an int, kept (seeding a RandomState costs ~0.1 ms)."""
    return _draw_seed(random_state)


@njit(cache=True)
def rng_next(state):
    """The next xorshift64 number (uint64); advances ``state`` in place."""
    x = state[0]
    x ^= x << np.uint64(13)
    x ^= x >> np.uint64(7)
    x ^= x << np.uint64(17)
    state[0] = x
    return x


@njit(cache=True)
def rng_below(state, n):
    """An index in [0, n) (int64)."""
    return np.int64(rng_next(state) % np.uint64(n))


@njit(cache=True)
def rng_shuffle(index, n, state):
    """Shuffle index[:n] in place (Fisher-Yates, front to back)."""
    for s in range(n - 1):
        j = s + rng_below(state, n - s)
        tmp = index[s]
        index[s] = index[j]
        index[j] = tmp


@njit(cache=True)
def _permutation(n, state):
    index = np.arange(n)
    rng_shuffle(index, n, state)
    return index


def permutation(state, n) -> np.ndarray:
    """A random permutation of range(n) (int64) drawn from the generator ``state``."""
    return _permutation(int(n), state)
