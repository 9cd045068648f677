"""Kernel specification, memory-bounded Gram blocks and an LRU kernel-row cache.

Every kernel method in margindist resolves its kernel parameters once per fit with
:func:`resolve_kernel` (so ``gamma="scale"`` means the same thing everywhere and matches
scikit-learn's definition), evaluates Gram blocks with :func:`kernel_matrix` /
:func:`kernel_decision` (row chunks under a byte budget, never an n x m matrix above it),
and, when a solver needs kernel columns on demand, uses :class:`KernelRowCache`, an LRU
cache of kernel rows with a byte budget whose state is a tuple of arrays that numba-compiled
solvers read through :func:`cache_row`.

Supported kernels: ``"linear"`` ``<x, z>``, ``"rbf"`` ``exp(-gamma ||x - z||^2)``,
``"poly"`` ``(gamma <x, z> + coef0)^degree``, ``"sigmoid"`` ``tanh(gamma <x, z> + coef0)``,
``"precomputed"`` (X is a Gram matrix) and any callable ``k(X, Z) -> (n, m) array``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.sparse as sp
from numba import njit
from sklearn.metrics.pairwise import pairwise_kernels

KERNELS = ("linear", "rbf", "poly", "sigmoid", "precomputed")
_KIND_CODE = {"linear": 0, "rbf": 1, "poly": 2, "sigmoid": 3, "precomputed": 4}

#: Default byte budget for a Gram block (chunked evaluation) and for the row cache.
DEFAULT_BLOCK_BYTES = 64 * 2**20
DEFAULT_CACHE_BYTES = 200 * 2**20


@dataclass(frozen=True)
class KernelSpec:
    """A fully resolved kernel: no ``"scale"``/``"auto"`` left, ready to evaluate.

    Attributes
    ----------
    kind : str
        One of ``"linear"``, ``"rbf"``, ``"poly"``, ``"sigmoid"``, ``"precomputed"``,
        ``"callable"``.
    gamma, coef0 : float
    degree : int
    func : callable or None
        The user's kernel function when ``kind == "callable"``.
    params : dict
        Extra keyword arguments passed to ``func``.
    """

    kind: str
    gamma: float = 1.0
    degree: int = 3
    coef0: float = 0.0
    func: Callable | None = None
    params: dict = field(default_factory=dict)

    @property
    def is_linear(self) -> bool:
        return self.kind == "linear"

    def __call__(self, X, Z=None):
        """Evaluate the kernel between the rows of X and Z (one block, no chunking)."""
        return _kernel_block(self, X, X if Z is None else Z)


def _scale_gamma(X, sample_weight=None) -> float:
    """scikit-learn's ``gamma="scale"``: 1 / (n_features * Var(X)), 1.0 if Var(X) == 0.

    Var(X) is the variance of all entries of X; with sample weights, the weighted variance
    (row i counted s_i times), so that integer weights act as repeated rows.
    """
    n, d = X.shape
    s = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if sp.issparse(X):
        X = X.tocsr()
        row_sum = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
        row_sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        Xf = np.asarray(X, dtype=np.float64)
        row_sum, row_sq = Xf.sum(axis=1), np.einsum("ij,ij->i", Xf, Xf)
    total = s.sum() * d
    with np.errstate(over="ignore", invalid="ignore"):
        mean = (s @ row_sum) / total
        var = (s @ row_sq) / total - mean**2
    if not np.isfinite(var):
        raise ValueError(
            "gamma='scale': the variance of X overflows in float64 (features too large); "
            "scale the features or give gamma as a number."
        )
    return 1.0 / (d * var) if var > 1e-300 else 1.0


def resolve_kernel(kernel="rbf", X=None, *, gamma="scale", degree=3, coef0=0.0, kernel_params=None,
                   sample_weight=None):
    """Resolve kernel parameters against the training data.

    Parameters
    ----------
    kernel : str or callable
        A name in :data:`KERNELS` or a callable ``k(X, Z) -> ndarray``.
    X : array-like or sparse matrix of shape (n_samples, n_features)
        Training data, needed for ``gamma="scale"`` / ``"auto"``.
    gamma : {"scale", "auto"} or float
        ``"scale"`` = 1 / (n_features * X.var()) as in scikit-learn's SVC (the weighted
        variance when ``sample_weight`` is given); ``"auto"`` = 1 / n_features.
    degree, coef0 : polynomial / sigmoid parameters.
    kernel_params : dict, optional
        Extra keyword arguments for a callable kernel.
    sample_weight : array-like of shape (n_samples,), optional
        Weights for ``gamma="scale"``.

    Returns
    -------
    KernelSpec
    """
    if callable(kernel):
        return KernelSpec("callable", func=kernel, params=dict(kernel_params or {}))
    if kernel not in KERNELS:
        raise ValueError(f"Unknown kernel {kernel!r}; expected one of {KERNELS} or a callable.")
    if kernel in ("linear", "precomputed"):
        return KernelSpec(kernel)
    if isinstance(gamma, str):
        if X is None:
            raise ValueError(f"gamma={gamma!r} needs the training data to be resolved.")
        if gamma == "scale":
            g = _scale_gamma(X, sample_weight)
        elif gamma == "auto":
            g = 1.0 / X.shape[1]
        else:
            raise ValueError(f"gamma must be 'scale', 'auto' or a positive float; got {gamma!r}.")
    elif isinstance(gamma, numbers.Real) and gamma > 0:
        g = float(gamma)
    else:
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive float; got {gamma!r}.")
    return KernelSpec(kernel, gamma=float(g), degree=int(degree), coef0=float(coef0))


def _kernel_block(spec: KernelSpec, X, Z) -> np.ndarray:
    if spec.kind == "precomputed":
        raise ValueError("A precomputed kernel has no block to evaluate: pass the Gram matrix.")
    if spec.kind == "callable":
        K = spec.func(X, Z, **spec.params)
    elif spec.kind == "linear":
        K = X @ Z.T
    elif spec.kind == "rbf":
        K = pairwise_kernels(X, Z, metric="rbf", gamma=spec.gamma)
    elif spec.kind == "poly":
        K = pairwise_kernels(X, Z, metric="poly", gamma=spec.gamma, degree=spec.degree, coef0=spec.coef0)
    else:  # sigmoid
        K = pairwise_kernels(X, Z, metric="sigmoid", gamma=spec.gamma, coef0=spec.coef0)
    if sp.issparse(K):
        K = K.toarray()
    return np.asarray(K, dtype=np.float64)


def _chunk_rows(n_rows: int, n_cols: int, max_bytes: int) -> int:
    return int(max(1, min(n_rows, max_bytes // max(1, 8 * n_cols))))


def kernel_matrix(spec: KernelSpec, X, Z=None, *, max_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """Gram matrix K(X, Z) evaluated in row chunks of at most ``max_bytes`` each.

    The result itself is (n_X, n_Z) float64; use :func:`kernel_decision` when only
    ``K(X, Z) @ coef`` is needed, which never holds more than one chunk.
    """
    Z = X if Z is None else Z
    n, m = X.shape[0], Z.shape[0]
    out = np.empty((n, m), dtype=np.float64)
    step = _chunk_rows(n, m, max_bytes)
    for start in range(0, n, step):
        out[start : start + step] = _kernel_block(spec, X[start : start + step], Z)
    return out


def kernel_decision(spec: KernelSpec, X, Z, coef, *, max_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """``K(X, Z) @ coef`` for coef of shape (n_Z,) or (n_Z, k), one bounded chunk at a time."""
    coef = np.asarray(coef, dtype=np.float64)
    n, m = X.shape[0], Z.shape[0]
    out = np.empty((n,) + coef.shape[1:], dtype=np.float64)
    step = _chunk_rows(n, m, max_bytes)
    for start in range(0, n, step):
        out[start : start + step] = _kernel_block(spec, X[start : start + step], Z) @ coef
    return out


def kernel_diag(spec: KernelSpec, X) -> np.ndarray:
    """Diagonal k(x_i, x_i) without forming the Gram matrix."""
    if spec.kind == "precomputed":
        return np.asarray(np.diag(np.asarray(X)), dtype=np.float64).copy()
    if spec.kind == "callable":
        return np.array([_kernel_block(spec, X[i : i + 1], X[i : i + 1])[0, 0] for i in range(X.shape[0])])
    sq = _row_sq_norms(X)
    if spec.kind == "linear":
        return sq
    if spec.kind == "rbf":
        return np.ones(X.shape[0])
    if spec.kind == "poly":
        return (spec.gamma * sq + spec.coef0) ** spec.degree
    return np.tanh(spec.gamma * sq + spec.coef0)


def _row_sq_norms(X) -> np.ndarray:
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


def rkhs_norm_sq(spec: KernelSpec, Z, coef, *, max_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """Squared RKHS norms ``c_p^T K(Z, Z) c_p``: shape (k,) for coef (n_Z, k), a scalar for (n_Z,)."""
    coef = np.asarray(coef, dtype=np.float64)
    if spec.kind == "precomputed":
        Kc = np.asarray(Z, dtype=np.float64) @ coef
    else:
        Kc = kernel_decision(spec, Z, Z, coef, max_bytes=max_bytes)
    return np.maximum(np.sum(coef * Kc, axis=0), 0.0)


# --------------------------------------------------------------------------------------
# LRU kernel-row cache shared by the numba solvers (ODM/LDM kernel DCD, KM-OMD SMO, ...)
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _dot_rows_dense(Xd, i, out):
    m, d = Xd.shape
    for j in range(m):
        s = 0.0
        for f in range(d):
            s += Xd[i, f] * Xd[j, f]
        out[j] = s


@njit(cache=True)
def _dot_rows_csr(data, indices, indptr, i, out, scratch):
    m = indptr.shape[0] - 1
    for k in range(indptr[i], indptr[i + 1]):
        scratch[indices[k]] = data[k]
    for j in range(m):
        s = 0.0
        for k in range(indptr[j], indptr[j + 1]):
            s += data[k] * scratch[indices[k]]
        out[j] = s
    for k in range(indptr[i], indptr[i + 1]):
        scratch[indices[k]] = 0.0


@njit(cache=True)
def compute_kernel_row(cache, i, out):
    """Fill ``out`` (length m) with k(x_i, x_j) for all training rows j (no caching)."""
    kind = cache[5]
    params = cache[6]
    Xd = cache[7]
    if kind == 4:  # precomputed: X is the (symmetric) Gram matrix
        for j in range(out.shape[0]):
            out[j] = Xd[i, j]
        return
    if Xd.shape[0] > 0:
        _dot_rows_dense(Xd, i, out)
    else:
        _dot_rows_csr(cache[8], cache[9], cache[10], i, out, cache[12])
    gamma, coef0, degree = params[0], params[1], params[2]
    if kind == 1:
        sqn = cache[11]
        for j in range(out.shape[0]):
            out[j] = np.exp(-gamma * max(sqn[i] + sqn[j] - 2.0 * out[j], 0.0))
    elif kind == 2:
        for j in range(out.shape[0]):
            out[j] = (gamma * out[j] + coef0) ** degree
    elif kind == 3:
        for j in range(out.shape[0]):
            out[j] = np.tanh(gamma * out[j] + coef0)


@njit(cache=True)
def cache_row(cache, i):
    """Kernel row i (a view into the cache; valid until the next miss evicts its slot).

    ``cache`` is :attr:`KernelRowCache.state`. Least-recently-used rows are evicted when the
    byte budget is full. Row i equals column i: all supported kernels are symmetric.
    """
    slots, slot_of, row_of, stamp, counters = cache[0], cache[1], cache[2], cache[3], cache[4]
    counters[0] += 1  # clock
    s = slot_of[i]
    if s >= 0:
        counters[1] += 1  # hits
        stamp[s] = counters[0]
        return slots[s]
    counters[2] += 1  # misses
    n_slots = slots.shape[0]
    if counters[3] < n_slots:  # a free slot
        s = counters[3]
        counters[3] += 1
    else:
        s = 0
        oldest = stamp[0]
        for t in range(1, n_slots):
            if stamp[t] < oldest:
                oldest = stamp[t]
                s = t
        slot_of[row_of[s]] = -1
    row_of[s] = i
    slot_of[i] = s
    stamp[s] = counters[0]
    compute_kernel_row(cache, i, slots[s])
    return slots[s]


class KernelRowCache:
    """LRU cache of kernel rows k(x_i, .) over the training set, bounded in bytes.

    Parameters
    ----------
    spec : KernelSpec
        Resolved kernel. Callable kernels are evaluated once into a Gram matrix, which must
        fit in ``max_bytes`` (otherwise a ValueError says what to do).
    X : ndarray or CSR matrix of shape (m, d), or (m, m) Gram matrix for ``"precomputed"``.
    max_bytes : int
        Byte budget for cached rows (at least two rows are always kept).

    Attributes
    ----------
    state : tuple
        The arrays that numba solvers receive; read rows with :func:`cache_row`.
    diag : ndarray of shape (m,)
        k(x_i, x_i).
    n_slots : int
        Number of rows the budget holds.
    """

    def __init__(self, spec: KernelSpec, X, *, max_bytes: int = DEFAULT_CACHE_BYTES):
        m = X.shape[0]
        kind = spec.kind
        if kind == "callable":
            if 8 * m * m > max_bytes:
                raise ValueError(
                    f"A callable kernel is evaluated into a full {m}x{m} Gram matrix "
                    f"({8 * m * m / 2**20:.0f} MiB), over the cache budget ({max_bytes / 2**20:.0f} MiB). "
                    "Raise cache_size, or use a built-in kernel name, which is computed row by row."
                )
            X = kernel_matrix(spec, X, max_bytes=max_bytes)
            kind = "precomputed"
        empty_f = np.zeros(0, dtype=np.float64)
        empty_i = np.zeros(0, dtype=np.int32)
        if kind == "precomputed":
            Xd = np.ascontiguousarray(X, dtype=np.float64)
            data, indices, indptr, sqn, scratch = empty_f, empty_i, empty_i, empty_f, empty_f
        elif sp.issparse(X):
            Xc = sp.csr_matrix(X, dtype=np.float64)
            Xc.sort_indices()
            Xd = np.zeros((0, 0), dtype=np.float64)
            data, indices, indptr = Xc.data, Xc.indices.astype(np.int32), Xc.indptr.astype(np.int32)
            sqn = _row_sq_norms(Xc)
            scratch = np.zeros(Xc.shape[1], dtype=np.float64)
        else:
            Xd = np.ascontiguousarray(X, dtype=np.float64)
            data, indices, indptr, scratch = empty_f, empty_i, empty_i, empty_f
            sqn = _row_sq_norms(Xd)
        n_slots = int(max(2, min(m, max_bytes // max(1, 8 * m))))
        params = np.array([spec.gamma, spec.coef0, float(spec.degree)], dtype=np.float64)
        self.state = (
            np.empty((n_slots, m), dtype=np.float64),  # 0 slots
            np.full(m, -1, dtype=np.int64),  # 1 slot_of
            np.full(n_slots, -1, dtype=np.int64),  # 2 row_of
            np.zeros(n_slots, dtype=np.int64),  # 3 stamp
            np.zeros(4, dtype=np.int64),  # 4 counters: clock, hits, misses, used slots
            _KIND_CODE[kind],  # 5
            params,  # 6
            Xd,  # 7
            data,  # 8
            indices,  # 9
            indptr,  # 10
            sqn,  # 11
            scratch,  # 12
        )
        self.n_slots = n_slots
        self.spec = spec
        if kind == "precomputed":
            self.diag = np.diag(Xd).copy()
        elif kind == "rbf":
            self.diag = np.ones(m)
        else:
            self.diag = kernel_diag(spec, X)

    def row(self, i: int) -> np.ndarray:
        """A copy of kernel row i."""
        return cache_row(self.state, int(i)).copy()

    @property
    def hits(self) -> int:
        return int(self.state[4][1])

    @property
    def misses(self) -> int:
        return int(self.state[4][2])
