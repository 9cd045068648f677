"""Dual coordinate descent for box-constrained QPs with a per-sample structure (ODM, LDM).

The problem over ``n_var = m`` or ``2 m`` variables ``a = [alpha; beta]`` (``beta`` absent when
``n_var = m``), with ``gamma = alpha - beta`` (one entry per sample):

    min_a  1/2 gamma^T Q gamma + o^T gamma + sum_k ( D_k / 2 a_k^2 + p_k a_k ),
    s.t.   0 <= a_k <= U_k   (U_k may be +inf)

Variable k < m is ``alpha_i`` (i = k, it enters gamma_i with sign +1); variable k >= m is
``beta_i`` (i = k - m, sign -1). This covers

* ODM: two variables per sample, D_alpha, D_beta > 0, linear terms theta - 1 and theta + 1,
  boxes [0, inf);
* LDM: one variable per sample, D = 0, p = -1, box [0, C s_i], with an offset o = H shift.

Two data paths, both maintaining the gradient information incrementally:

* **linear**: Q = Y Xh Xh^T Y with Xh = [X, B] (B the constant feature of a regularised
  intercept, 0 for none); the solver keeps w = w0 + Xh^T Y gamma, so u_i = (Q gamma + o)_i
  = y_i <w, xh_i> costs O(nnz(x_i)) and an update of gamma_i costs O(nnz(x_i)) (dense rows or
  CSR, float32 data read as is, w accumulated in float64). The offset o is w0's contribution.
* **kernel**: Q_ij = y_i y_j (K_ij + B^2) with K_ij = k(x_i, x_j); the solver keeps
  u = Q gamma + o as u_i = y_i (kv_i + B^2 sb) + o_i with kv = K Y gamma and the scalar
  sb = sum_i y_i gamma_i, so a change of gamma_i costs one axpy of kernel row i (no labels in the
  inner loop; the row is read only when gamma_i really changes). Rows come from
  :class:`margindist.kernels.KernelRowCache` (an LRU cache under a byte budget: no m x m matrix
  beyond the budget; float32 or float64 storage, float64 sums; all rows up front with
  ``fill()`` when they fit), or from a dense K when the caller has one (wrapped as a full cache;
  a general symmetric Q is K = Q with y = 1, B = 0). Each epoch streams the rows of the
  variables that move, so the cost is memory-bound: float32 rows halve it.

The coordinate step is the exact minimiser over one variable, projected on its box:
``a_k <- clip(a_k - g_k / (Q_ii + D_k), 0, U_k)`` with g_k = s_k u_i + D_k a_k + p_k. Each
epoch visits the active variables in a random order (a seeded xorshift generator, so results
are reproducible and thread-safe). Shrinking and the stopping rule are LIBLINEAR's (Hsieh et
al. 2008): a variable at a bound whose gradient points out of the box by more than the
previous epoch's projected-gradient extremes leaves the active set; the run stops when the
spread max PG - min PG of the projected gradient over the active set is at most ``tol``, and
if variables were shrunk, all of them are checked once more before stopping.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit
from sklearn.exceptions import ConvergenceWarning

from ..kernels import KernelRowCache, cache_row

__all__ = ["DCDResult", "dcd_linear", "dcd_kernel", "csr_parts", "seed_from"]


@dataclass
class DCDResult:
    """Result of a DCD run.

    a : the variables [alpha; beta] (length n_var); w : the primal vector of the linear path
    (length d + 1, last entry the bias weight) or None; u : Q gamma + o of the kernel path or
    None; n_iter : epochs; converged : whether the stopping rule was met.
    """

    a: np.ndarray
    w: np.ndarray | None
    u: np.ndarray | None
    n_iter: int
    converged: bool

    def gamma(self, m: int) -> np.ndarray:
        g = self.a[:m].copy()
        if self.a.shape[0] > m:
            g -= self.a[m:]
        return g


# ----------------------------------------------------------------------------- helpers


@njit(cache=True)
def _xorshift(state):
    x = state[0]
    x ^= x << np.uint64(13)
    x ^= x >> np.uint64(7)
    x ^= x << np.uint64(17)
    state[0] = x
    return x


@njit(cache=True)
def _shuffle(index, n, state):
    for s in range(n - 1):
        j = s + np.int64(_xorshift(state) % np.uint64(n - s))
        tmp = index[s]
        index[s] = index[j]
        index[j] = tmp


def seed_from(random_state) -> np.ndarray:
    """A non-zero xorshift64 state (uint64 array of length 1) from an int / RandomState / None."""
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    seed = int(rs.randint(1, 2**31 - 1)) * 2654435761 + 1
    return np.array([seed % (2**64 - 1) or 1], dtype=np.uint64)


def csr_parts(X):
    """(dense 2-D array or empty, data, indices, indptr, is_sparse) for the numba kernels.

    Dense X is made C-contiguous (no copy if it already is); CSR X keeps its value and index
    dtypes (no copy; indices need not be sorted); nothing is densified. Empty placeholders have
    the dtype of X so that numba compiles one variant per data type.
    """
    if sp.issparse(X):
        Xc = X.tocsr()
        dt = Xc.dtype if Xc.dtype in (np.float32, np.float64) else np.float64
        it = Xc.indices.dtype if Xc.indices.dtype in (np.int32, np.int64) else np.int64
        return (np.zeros((0, 0), dtype=dt), np.asarray(Xc.data, dtype=dt), np.asarray(Xc.indices, dtype=it),
                np.asarray(Xc.indptr, dtype=it), True)
    Xd = np.ascontiguousarray(X)
    if Xd.dtype not in (np.float32, np.float64):
        Xd = Xd.astype(np.float64)
    return (Xd, np.zeros(0, dtype=Xd.dtype), np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int32), False)


def row_sq_norms(X) -> np.ndarray:
    """||x_i||^2 in float64 without densifying."""
    if sp.issparse(X):
        Xc = X.tocsr()
        return np.asarray(Xc.multiply(Xc).sum(axis=1), dtype=np.float64).ravel()
    Xf = np.asarray(X)
    return np.einsum("ij,ij->i", Xf, Xf, dtype=np.float64)


@njit(cache=True)
def _begin_epoch(stats, index, active, rng):
    """Reset the projected-gradient extremes and shuffle the active variables."""
    stats[0] = -np.inf
    stats[1] = np.inf
    _shuffle(index, active, rng)


@njit(cache=True)
def _shrink(index, s, active):
    """Move the sample at position s out of the active set; returns the new active count."""
    active -= 1
    i = index[s]
    index[s] = index[active]
    index[active] = i
    return active


@njit(cache=True)
def _end_epoch(stats, pg_old, active, m, tol):
    """LIBLINEAR's stopping rule and shrinking thresholds after an epoch.

    Stops (returns converged=True) when the spread max PG - min PG over the active set is at most
    tol and nothing is shrunk; if variables were shrunk, all come back for one more check. Otherwise
    the epoch's extremes become the shrinking thresholds ``pg_old`` (infinite when not of the
    right sign). Returns (converged, active).
    """
    if stats[0] - stats[1] <= tol:
        if active == m:
            return True, active
        pg_old[0] = np.inf
        pg_old[1] = -np.inf
        return False, m
    pg_old[0] = stats[0] if stats[0] > 0.0 else np.inf
    pg_old[1] = stats[1] if stats[1] < 0.0 else -np.inf
    return False, active


# ----------------------------------------------------------------------------- linear path


@njit(cache=True)
def _row_dot(Xd, data, indices, indptr, sparse, i, w, bias):
    acc = 0.0
    d = w.shape[0] - 1
    if sparse:
        for t in range(indptr[i], indptr[i + 1]):
            acc += w[indices[t]] * data[t]
    else:
        for f in range(d):
            acc += w[f] * Xd[i, f]
    return acc + w[d] * bias


@njit(cache=True)
def _row_axpy(Xd, data, indices, indptr, sparse, i, coef, w, bias):
    d = w.shape[0] - 1
    if sparse:
        for t in range(indptr[i], indptr[i + 1]):
            w[indices[t]] += coef * data[t]
    else:
        for f in range(d):
            w[f] += coef * Xd[i, f]
    w[d] += coef * bias


@njit(cache=True)
def _coordinate_steps(i, m, n_sides, ui, qdi, D, p, U, a, shrinking, pg_max_old, pg_min_old, stats):
    """Exact projected steps on the variables of sample i (alpha_i, then beta_i).

    ui: the current (Q gamma + o)_i. Updates a in place and stats = [pg_max_new, pg_min_new].
    Returns (change of gamma_i, whether every variable of i may be shrunk).
    """
    dg = 0.0
    shrink = shrinking
    for side in range(n_sides):
        k = i + side * m
        sg = 1.0 - 2.0 * side
        ak = a[k]
        g = sg * ui + D[k] * ak + p[k]
        pg = 0.0
        if ak <= 0.0:
            if shrinking and g > pg_max_old:
                continue
            shrink = False
            if g < 0.0:
                pg = g
        elif ak >= U[k]:
            if shrinking and g < pg_min_old:
                continue
            shrink = False
            if g > 0.0:
                pg = g
        else:
            shrink = False
            pg = g
        if pg > stats[0]:
            stats[0] = pg
        if pg < stats[1]:
            stats[1] = pg
        if abs(pg) > 1e-12:
            denom = qdi + D[k]
            if denom > 0.0:
                new = min(max(ak - g / denom, 0.0), U[k])
            else:
                new = U[k] if g < 0.0 else 0.0
            delta = new - ak
            if delta != 0.0:
                a[k] = new
                dg += sg * delta
                ui += sg * delta * qdi
    return dg, shrink


@njit(cache=True)
def _linear_w(Xd, data, indices, indptr, sparse, bias, y, gamma, w):
    for i in range(y.shape[0]):
        if gamma[i] != 0.0:
            _row_axpy(Xd, data, indices, indptr, sparse, i, gamma[i] * y[i], w, bias)


#: Placeholder cache for the linear path of :func:`_dcd_core`.
_NO_CACHE = KernelRowCache.from_gram(np.zeros((1, 1)))


def _as_arrays(n_var, D, p, U):
    D = np.ascontiguousarray(np.broadcast_to(np.asarray(D, dtype=np.float64), (n_var,)))
    p = np.ascontiguousarray(np.broadcast_to(np.asarray(p, dtype=np.float64), (n_var,)))
    U = np.ascontiguousarray(np.broadcast_to(np.asarray(U, dtype=np.float64), (n_var,)))
    if np.any(D < 0) or np.any(U < 0) or np.any(np.isnan(D)) or np.any(np.isnan(U)):
        raise ValueError("DCD needs D >= 0 and upper bounds U >= 0.")
    return D, p, U


def _initial_a(a0, n_var, U):
    if a0 is None:
        return np.zeros(n_var)
    a = np.array(a0, dtype=np.float64).ravel()
    if a.shape[0] != n_var:
        raise ValueError(f"a0 has length {a.shape[0]}, expected {n_var}.")
    return np.clip(a, 0.0, U)


def _warn(n_iter, tol, what):
    warnings.warn(
        f"{what}: dual coordinate descent did not reach tol={tol:g} in max_iter={n_iter} epochs. "
        "Increase max_iter, loosen tol, or scale the features (e.g. to [0, 1]).",
        ConvergenceWarning,
        stacklevel=3,
    )


def dcd_linear(X, y, D, p, U, *, n_var, bias=1.0, w0=None, a0=None, tol=1e-3, max_iter=1000,
               shrinking=True, random_state=None, warn_label="DCD") -> DCDResult:
    """DCD with the linear data path (see the module docstring).

    Parameters
    ----------
    X : ndarray (float32/float64) or CSR matrix of shape (m, d)
    y : ndarray of shape (m,), values in {-1, +1}
    D, p, U : scalars or arrays of length ``n_var`` (m or 2 m)
    n_var : int
        m (one variable per sample) or 2 m (alpha and beta).
    bias : float
        B, the value of the constant feature (0 for none).
    w0 : ndarray of shape (d + 1,), optional
        Offset of w (its contribution is the linear term o_i = y_i <w0, xh_i>).
    a0 : ndarray of shape (n_var,), optional
        Warm start (clipped to the box).

    Returns
    -------
    DCDResult with w of length d + 1 (last entry: the weight of the constant feature).
    """
    m, d = X.shape
    y = np.ascontiguousarray(y, dtype=np.float64)
    if n_var not in (m, 2 * m):
        raise ValueError(f"n_var must be m or 2 m; got {n_var} for m = {m}.")
    D, p, U = _as_arrays(n_var, D, p, U)
    Xd, data, indices, indptr, sparse = csr_parts(X)
    qd = row_sq_norms(X) + bias * bias
    a = _initial_a(a0, n_var, U)
    w = np.zeros(d + 1) if w0 is None else np.array(w0, dtype=np.float64).ravel()
    if w.shape[0] != d + 1:
        raise ValueError(f"w0 has length {w.shape[0]}, expected {d + 1}.")
    gamma = a[:m] - a[m:] if n_var == 2 * m else a.copy()
    if np.any(gamma != 0):
        _linear_w(Xd, data, indices, indptr, sparse, float(bias), y, gamma, w)
    e = np.zeros(0)
    it, conv = _dcd_core(False, Xd, data, indices, indptr, sparse, w, _NO_CACHE.state, e, e, e, y, float(bias), qd,
                         D, p, U, a, float(tol), int(max_iter), bool(shrinking), seed_from(random_state), 1)
    if not conv:
        _warn(it, tol, warn_label)
    return DCDResult(a=a, w=w, u=None, n_iter=int(it), converged=bool(conv))


# ----------------------------------------------------------------------------- kernel path


#: Kernel path: changes of up to this many coordinates are applied to kv in one pass over their rows.
_GROUP = 8


@njit(cache=True)
def _add_row(cache, i, c, kv):
    """kv += c * K[i, :] with the row from the cache (float32 or float64 storage, float64 sums)."""
    row = cache_row(cache, i)
    for j in range(kv.shape[0]):
        kv[j] += c * row[j]


@njit(cache=True)
def _flush(slots, ps, pc, n, kv):
    """kv += sum_t pc[t] * slots[ps[t]] for the n pending rows, in one pass when n = 8 (the pass is
    memory-bound: eight rows per pass read and write kv once instead of eight times)."""
    if n == 8:
        r0, r1, r2, r3 = slots[ps[0]], slots[ps[1]], slots[ps[2]], slots[ps[3]]
        r4, r5, r6, r7 = slots[ps[4]], slots[ps[5]], slots[ps[6]], slots[ps[7]]
        c0, c1, c2, c3, c4, c5, c6, c7 = pc[0], pc[1], pc[2], pc[3], pc[4], pc[5], pc[6], pc[7]
        for j in range(kv.shape[0]):
            kv[j] += (c0 * r0[j] + c1 * r1[j] + c2 * r2[j] + c3 * r3[j]) + (
                c4 * r4[j] + c5 * r5[j] + c6 * r6[j] + c7 * r7[j])
    else:
        for t in range(n):
            row = slots[ps[t]]
            c = pc[t]
            for j in range(kv.shape[0]):
                kv[j] += c * row[j]


@njit(cache=True)
def _dcd_core(kernel, Xd, data, indices, indptr, sparse, w, cache, kv, sb, o, y, bias, qd, D, p, U, a, tol,
              max_iter, shrinking, rng, group):
    """The epochs of both data paths (see the module docstring).

    kernel=False: u_i = y_i <w, xh_i> from X (dense or CSR) and w, updated by an axpy of x_i.
    kernel=True: u_i = y_i (kv_i + bias^2 sb) + o_i with kv = K Y gamma and sb = sum_i y_i gamma_i.
    A change of gamma_i needs kernel row i; the changes of up to ``group`` coordinates are kept
    pending and added to kv in one pass over their rows, while the coordinates visited in between
    see them through the entries K[i_t, i] of the pending rows (the same steps as one at a time).
    The arrays of the other path are unused placeholders. Returns (epochs, converged)."""
    m = y.shape[0]
    n_sides = a.shape[0] // m
    bias2 = bias * bias
    index = np.arange(m)
    active = m
    pg_old = np.array([np.inf, -np.inf])
    stats = np.empty(2)
    slots, slot_of = cache[0], cache[1]
    group = min(group, slots.shape[0] - 1)  # pending rows must stay cached while the next is fetched
    ps = np.zeros(max(group, 1), dtype=np.int64)
    pc = np.zeros(max(group, 1))
    npend = 0
    it = 0
    converged = False
    while it < max_iter and not converged:
        _begin_epoch(stats, index, active, rng)
        s = 0
        while s < active:
            i = index[s]
            if kernel:
                ki = kv[i]
                for t in range(npend):
                    ki += pc[t] * slots[ps[t], i]
                ui = y[i] * (ki + bias2 * sb[0]) + o[i]
            else:
                ui = y[i] * _row_dot(Xd, data, indices, indptr, sparse, i, w, bias)
            dg, shrink = _coordinate_steps(i, m, n_sides, ui, qd[i], D, p, U, a, shrinking, pg_old[0],
                                           pg_old[1], stats)
            if dg != 0.0:
                c = dg * y[i]
                if kernel:
                    sb[0] += c
                    if group <= 1:
                        _add_row(cache, i, c, kv)
                    else:
                        cache_row(cache, i)
                        ps[npend] = slot_of[i]
                        pc[npend] = c
                        npend += 1
                        if npend == group:
                            _flush(slots, ps, pc, npend, kv)
                            npend = 0
                else:
                    _row_axpy(Xd, data, indices, indptr, sparse, i, c, w, bias)
            if shrink:
                active = _shrink(index, s, active)
            else:
                s += 1
        if npend > 0:
            _flush(slots, ps, pc, npend, kv)
            npend = 0
        it += 1
        converged, active = _end_epoch(stats, pg_old, active, m, tol)
    return it, converged


@njit(cache=True)
def _kernel_kv(cache, y, gamma, kv, sb):
    for i in range(gamma.shape[0]):
        if gamma[i] != 0.0:
            c = gamma[i] * y[i]
            sb[0] += c
            _add_row(cache, i, c, kv)


def dcd_kernel(y, D, p, U, *, n_var, cache: KernelRowCache | None = None, gram=None, bias=1.0, u0=None,
               a0=None, tol=1e-3, max_iter=1000, shrinking=True, random_state=None,
               warn_label="DCD") -> DCDResult:
    """DCD with the kernel data path (see the module docstring).

    Q_ij = y_i y_j (K_ij + bias^2) with K read from exactly one of ``cache`` (a
    :class:`~margindist.kernels.KernelRowCache` over the training rows: columns fetched on
    demand under its byte budget, stored in float64 or float32, or all of them after
    :meth:`~margindist.kernels.KernelRowCache.fill`) or ``gram`` (a dense m x m matrix, float64
    or float32, used in place). A general symmetric matrix Q is passed as ``gram=Q`` with y = 1
    and bias = 0. Sums are float64 whatever the storage.

    u0 : ndarray of shape (m,), optional
        The offset o (u = Q gamma + o).
    Returns DCDResult with u = Q gamma + o.
    """
    y = np.ascontiguousarray(y, dtype=np.float64)
    m = y.shape[0]
    if n_var not in (m, 2 * m):
        raise ValueError(f"n_var must be m or 2 m; got {n_var} for m = {m}.")
    if (cache is None) == (gram is None):
        raise ValueError("Give exactly one of cache and gram.")
    D, p, U = _as_arrays(n_var, D, p, U)
    bias2 = float(bias) ** 2
    if gram is not None:
        if np.shape(gram) != (m, m):
            raise ValueError(f"gram must be {m} x {m}; got {np.shape(gram)}.")
        cache = KernelRowCache.from_gram(gram)
    elif cache.state[1].shape[0] != m:
        raise ValueError(f"The cache holds {cache.state[1].shape[0]} rows; y has {m}.")
    qd = np.asarray(cache.diag, dtype=np.float64) + bias2
    a = _initial_a(a0, n_var, U)
    o = np.zeros(m) if u0 is None else np.array(u0, dtype=np.float64).ravel()
    kv = np.zeros(m)
    sb = np.zeros(1)
    gamma = a[:m] - a[m:] if n_var == 2 * m else a.copy()
    if np.any(gamma != 0):
        _kernel_kv(cache.state, y, gamma, kv, sb)
    Xd, data, indices, indptr, _ = csr_parts(np.zeros((0, 0)))
    it, conv = _dcd_core(True, Xd, data, indices, indptr, False, np.zeros(1), cache.state, kv, sb, o, y,
                         float(bias), qd, D, p, U, a, float(tol), int(max_iter), bool(shrinking),
                         seed_from(random_state), _GROUP)
    if not conv:
        _warn(it, tol, warn_label)
    u = y * (kv + bias2 * sb[0]) + o
    return DCDResult(a=a, w=None, u=u, n_iter=int(it), converged=bool(conv))
