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
  variables that move, so the cost is memory-bound: float32 rows halve it. When the cache holds
  fewer rows than there are samples, epochs become block sweeps (:func:`_kernel_block_epochs`:
  a few epochs on each block of cached rows, whose changes reach kv outside the block once, at
  its end), which compute about a third of the kernel rows. A caller may ask for sweeps of
  pulled blocks instead (``block_sweeps``, ODM; :func:`_kernel_pull_sweeps`): a small block's
  products with Y gamma and its square K[block, block] come from one pass over its rows
  (cached, or computed), and its inner epochs work in that local matrix. A sweep reads each
  row once, as an epoch does, but takes the place of about three epochs on a dense dual;
  variables are shrunk as in the epochs, and when the shrunk ones come back the stopping
  rule is first checked at the point itself. A row computed there (float32 RBF rows) leaves
  out the columns where Y gamma is zero and those of the cached rows, whose part of the
  products is kept as one vector.

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
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
from numba import njit
from sklearn.exceptions import ConvergenceWarning

from .._bits import KEY_INF, KEY_NEG_INF, bits_of_float64, float64_from_bits, from_order_key, order_key
from ..kernels import KernelRowCache, cache_row, compute_kernel_row, rbf32_columns, rbf32_row_at, replace_row
from ._result import SolverResult
from ._rows import make_rows, rng_shuffle, row_axpy, row_dot, row_sq_norms, rows_tdot, seed_from

__all__ = ["BoxQP", "DCDOptions", "DCDResult", "KernelPath", "dcd_kernel", "dcd_linear"]


@dataclass(kw_only=True)
class DCDResult(SolverResult):
    """Result of a DCD run (``n_iter``: epochs; ``converged``: whether the stopping rule was met).

    a : the variables [alpha; beta] (length n_var); w : the primal vector of the linear path
    (length d + 1, last entry the bias weight) or None; u : Q gamma + o of the kernel path or
    None.
    """

    a: np.ndarray
    w: np.ndarray | None = None
    u: np.ndarray | None = None

    def gamma(self, m: int) -> np.ndarray:
        g = self.a[:m].copy()
        if self.a.shape[0] > m:
            g -= self.a[m:]
        return g


# ----------------------------------------------------------------------------- helpers


#: The per-variable terms of the box QP (see the module docstring) for the compiled epochs:
#: y (m,), qd = Q_ii (m,), D, p, U (n_var,).
BoxQP = namedtuple("BoxQP", ["y", "qd", "D", "p", "U"])

#: How the epochs run: tolerance, epoch limit, shrinking on/off, and (kernel path) how many
#: coordinate changes are applied to kv in one pass over their rows.
DCDOptions = namedtuple("DCDOptions", ["tol", "max_iter", "shrinking", "group"])

#: The state of the kernel path: the cache (:attr:`KernelRowCache.state`), kv = K Y gamma (m,),
#: sb = [sum_i y_i gamma_i], the offset o (m,) and B^2.
KernelPath = namedtuple("KernelPath", ["cache", "kv", "sb", "o", "bias2"])


@njit(cache=True)
def _begin_epoch(stats, index, active, rng):
    """Reset the projected-gradient extremes and shuffle the active variables."""
    stats[0] = -np.inf
    stats[1] = np.inf
    rng_shuffle(index, active, rng)


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
        stats[0] = max(stats[0], pg)
        stats[1] = min(stats[1], pg)
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
        "Increase max_iter or loosen tol (features on very different scales, and a kernel of large gamma "
        "or degree, slow it down).",
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
    rows = make_rows(X, float(bias))
    qd = row_sq_norms(X, float(bias))
    a = _initial_a(a0, n_var, U)
    w = np.zeros(d + 1) if w0 is None else np.array(w0, dtype=np.float64).ravel()
    if w.shape[0] != d + 1:
        raise ValueError(f"w0 has length {w.shape[0]}, expected {d + 1}.")
    gamma = a[:m] - a[m:] if n_var == 2 * m else a.copy()
    if np.any(gamma != 0):  # w += Xh^T Y gamma
        wg = np.empty(d + 1)
        rows_tdot(rows, y * gamma, wg)
        w += wg
    it, conv = _linear_epochs(rows, w, BoxQP(y, qd, D, p, U), DCDOptions(float(tol), int(max_iter), bool(shrinking), 1),
                              a, seed_from(random_state))
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


@njit(cache=True, inline="always")
def _flush8(r0, r1, r2, r3, r4, r5, r6, r7, pc, kv):
    """kv += sum_q pc[q] r_q over eight rows in one pass."""
    c0, c1, c2, c3, c4, c5, c6, c7 = pc[0], pc[1], pc[2], pc[3], pc[4], pc[5], pc[6], pc[7]
    for j in range(kv.shape[0]):
        kv[j] += (c0 * r0[j] + c1 * r1[j] + c2 * r2[j] + c3 * r3[j]) + (
            c4 * r4[j] + c5 * r5[j] + c6 * r6[j] + c7 * r7[j])


@njit(cache=True)
def _flush(slots, ps, pc, n, kv):
    """kv += sum_t pc[t] * slots[ps[t]] for the n pending rows, in one pass when n = 8 (the pass is
    memory-bound: eight rows per pass read and write kv once instead of eight times)."""
    if n == 8:
        _flush8(slots[ps[0]], slots[ps[1]], slots[ps[2]], slots[ps[3]], slots[ps[4]], slots[ps[5]],
                slots[ps[6]], slots[ps[7]], pc, kv)
    else:
        for t in range(n):
            row = slots[ps[t]]
            c = pc[t]
            for j in range(kv.shape[0]):
                kv[j] += c * row[j]


@njit(cache=True)
def _linear_epochs(rows, w, qp, opts, a, rng):
    """The epochs of the linear path: u_i = y_i <w, xh_i> from the rows (dense or CSR, with the
    bias column) and w, which a change of gamma_i updates by an axpy of xh_i. Updates a and w in
    place; returns (epochs, converged)."""
    y = qp.y
    m = y.shape[0]
    n_sides = a.shape[0] // m
    index = np.arange(m)
    active = m
    pg_old = np.array([np.inf, -np.inf])
    stats = np.empty(2)
    it = 0
    converged = False
    while it < opts.max_iter and not converged:
        _begin_epoch(stats, index, active, rng)
        s = 0
        while s < active:
            i = index[s]
            ui = y[i] * row_dot(rows, i, w)
            dg, shrink = _coordinate_steps(i, m, n_sides, ui, qp.qd[i], qp.D, qp.p, qp.U, a, opts.shrinking,
                                           pg_old[0], pg_old[1], stats)
            if dg != 0.0:
                row_axpy(rows, i, dg * y[i], w)
            if shrink:
                active = _shrink(index, s, active)
            else:
                s += 1
        it += 1
        converged, active = _end_epoch(stats, pg_old, active, m, opts.tol)
    return it, converged


@njit(cache=True)
def _pending_rows(group, n_slots, reserved):
    """(group, slots, coefficients) of the pending rows: at most ``group`` of them, leaving room
    in the cache for ``reserved`` more rows (the row being fetched; a block), since pending rows
    must stay cached."""
    group = min(group, n_slots - reserved)
    return group, np.zeros(max(group, 1), dtype=np.int64), np.zeros(max(group, 1))


@njit(cache=True, inline="always")
def _step_at(i, ki, kp, qp, a, ps, pc, npend, shrinking, pg_hi, pg_lo, stats):
    """The exact steps on the variables of sample i (:func:`_coordinate_steps`), with u_i from
    ``ki`` (kv_i without the pending rows) and the ``npend`` pending rows (slots ``ps``,
    coefficients ``pc``) seen through their entry i. Returns (change of y_i gamma_i, whether the
    variables of i may be shrunk); sb follows the change."""
    y, slots = qp.y, kp.cache.slots
    for t in range(npend):
        ki += pc[t] * slots[ps[t], i]
    ui = y[i] * (ki + kp.bias2 * kp.sb[0]) + kp.o[i]
    dg, shrink = _coordinate_steps(i, y.shape[0], a.shape[0] // y.shape[0], ui, qp.qd[i], qp.D, qp.p, qp.U, a,
                                   shrinking, pg_hi, pg_lo, stats)
    c = dg * y[i]
    kp.sb[0] += c
    return c, shrink


@njit(cache=True, inline="always")
def _pend(cache, i, c, ps, pc, npend):
    """Row i (fetched into the cache) joins the pending rows with coefficient c."""
    cache_row(cache, i)
    ps[npend] = cache.slot_of[i]
    pc[npend] = c
    return npend + 1


@njit(cache=True, inline="always")
def _visit(i, kp, qp, a, ps, pc, npend, group, shrinking, pg_hi, pg_lo, stats):
    """:func:`_step_at` on sample i with u_i from kv. A change of gamma_i joins the pending
    rows, which are added to kv in one pass once ``group`` are pending (or goes straight into
    kv when group <= 1). Returns (pending count, whether the variables of i may be shrunk)."""
    cache = kp.cache
    c, shrink = _step_at(i, kp.kv[i], kp, qp, a, ps, pc, npend, shrinking, pg_hi, pg_lo, stats)
    if c != 0.0:
        if group <= 1:
            _add_row(cache, i, c, kp.kv)
        else:
            npend = _pend(cache, i, c, ps, pc, npend)
            if npend == group:
                _flush(cache.slots, ps, pc, npend, kp.kv)
                npend = 0
    return npend, shrink


@njit(cache=True)
def _kernel_epochs(kp, qp, opts, a, rng):
    """The epochs of the kernel path: u_i = y_i (kv_i + B^2 sb) + o_i with kv = K Y gamma and
    sb = sum_i y_i gamma_i (``kp``, a :data:`KernelPath`, updated in place with a).

    A change of gamma_i needs kernel row i; the changes of up to ``opts.group`` coordinates are
    kept pending and added to kv in one pass over their rows, while the coordinates visited in
    between see them through the entries K[i_t, i] of the pending rows (the same steps as one at
    a time). Returns (epochs, converged)."""
    m = qp.y.shape[0]
    index = np.arange(m)
    active = m
    pg_old = np.array([np.inf, -np.inf])
    stats = np.empty(2)
    group, ps, pc = _pending_rows(opts.group, kp.cache.slots.shape[0], 1)
    npend = 0
    it = 0
    converged = False
    while it < opts.max_iter and not converged:
        _begin_epoch(stats, index, active, rng)
        s = 0
        while s < active:
            npend, shrink = _visit(index[s], kp, qp, a, ps, pc, npend, group, opts.shrinking, pg_old[0], pg_old[1],
                                   stats)
            if shrink:
                active = _shrink(index, s, active)
            else:
                s += 1
        if npend > 0:
            _flush(kp.cache.slots, ps, pc, npend, kp.kv)
            npend = 0
        it += 1
        converged, active = _end_epoch(stats, pg_old, active, m, opts.tol)
    return it, converged


#: Block sweeps (:func:`_kernel_block_epochs`): epochs over one block of cached rows, at most.
_BLOCK_INNER = 5
#: Block sweeps cut the samples into runs of this many consecutive indices (at most; an eighth of
#: a block for small blocks): a block is a random set of runs, so a change updates the block's
#: entries of kv through contiguous pieces of its row.
_RUN = 256


@njit(cache=True)
def _flush_runs(slots, ps, pc, n, kvB, starts, nruns, run, m):
    """kvB += sum_q pc[q] * slots[ps[q], J] on the block's columns J: the runs starting at
    ``starts[:nruns]``, laid end to end in kvB (eight rows a pass when n = 8)."""
    pos = 0
    for r in range(nruns):
        lo = starts[r]
        hi = min(lo + run, m)
        kb = kvB[pos : pos + hi - lo]
        if n == 8:
            _flush8(slots[ps[0], lo:hi], slots[ps[1], lo:hi], slots[ps[2], lo:hi], slots[ps[3], lo:hi],
                    slots[ps[4], lo:hi], slots[ps[5], lo:hi], slots[ps[6], lo:hi], slots[ps[7], lo:hi], pc, kb)
        else:
            for q in range(n):
                row = slots[ps[q], lo:hi]
                c = pc[q]
                for j in range(hi - lo):
                    kb[j] += c * row[j]
        pos += hi - lo


@njit(cache=True)
def _apply_block(cache, idx, dB, nB, ps, pc, kv):
    """kv += sum_t dB[t] K[idx[t], :] over the block's changed rows (all still cached), eight
    rows a pass."""
    n = 0
    for t in range(nB):
        if dB[t] != 0.0:
            ps[n] = cache.slot_of[idx[t]]
            pc[n] = dB[t]
            n += 1
            if n == ps.shape[0]:
                _flush(cache.slots, ps, pc, n, kv)
                n = 0
    if n > 0:
        _flush(cache.slots, ps, pc, n, kv)


@njit(cache=True, inline="always")
def _end_inner(stats, inner_stats, inner, tol):
    """The end of an inner epoch over a block: the first one's projected-gradient extremes join
    the sweep's ``stats``; True once the block's spread is at most tol (no more epochs)."""
    if inner == 0:
        stats[0] = max(stats[0], inner_stats[0])
        stats[1] = min(stats[1], inner_stats[1])
    return inner_stats[0] - inner_stats[1] <= tol


@njit(cache=True)
def _block_epochs(kp, qp, opts, a, rng, starts, nruns, run, idx, local, kvB, dB, ps, pc, group, stats):
    """Up to :data:`_BLOCK_INNER` epochs over one block (the runs ``starts[:nruns]``, samples
    ``idx``), in a random order each, stopping once the block's projected-gradient spread is at
    most tol. u_i comes from kvB, the block's entries of kv, which the changes update on the
    block's columns only; ``dB`` collects each sample's net change, added to the whole of kv at
    the block's end. Adds the first epoch's extremes to ``stats``."""
    cache = kp.cache
    m = qp.y.shape[0]
    inner_stats = np.empty(2)
    nB = 0
    for r in range(nruns):
        for i in range(starts[r], min(starts[r] + run, m)):
            idx[nB] = i
            kvB[nB] = kp.kv[i]
            dB[nB] = 0.0
            local[nB] = nB
            nB += 1
    npend = 0
    for inner in range(_BLOCK_INNER):
        rng_shuffle(local, nB, rng)
        inner_stats[0] = -np.inf
        inner_stats[1] = np.inf
        for s in range(nB):
            t = local[s]
            i = idx[t]
            c, _ = _step_at(i, kvB[t], kp, qp, a, ps, pc, npend, False, np.inf, -np.inf, inner_stats)
            if c != 0.0:
                dB[t] += c
                npend = _pend(cache, i, c, ps, pc, npend)
                if npend >= group:
                    _flush_runs(cache.slots, ps, pc, npend, kvB, starts, nruns, run, m)
                    npend = 0
        if npend > 0:
            _flush_runs(cache.slots, ps, pc, npend, kvB, starts, nruns, run, m)
            npend = 0
        if _end_inner(stats, inner_stats, inner, opts.tol):
            break
    _apply_block(cache, idx, dB, nB, ps, pc, kp.kv)


@njit(cache=True)
def _kernel_block_epochs(kp, qp, opts, a, rng, block):
    """The kernel path when the cache holds fewer rows than there are samples.

    Random-order epochs then miss the cache on nearly every row (a least-recently-used cache
    over a cyclic pass keeps the rows that come last). Here each sweep cuts the samples into
    blocks of at most ``block`` rows, fewer than the cache holds, each a random set of runs of
    :data:`_RUN` consecutive indices: a block's rows are fetched once and up to
    :data:`_BLOCK_INNER` epochs run over the block while they stay cached
    (:func:`_block_epochs`). Within a block a change updates kv on the block's columns only
    (block / m of a row, in contiguous runs), and each changed row is added to the whole of kv
    once, at the block's end. The same exact coordinate steps, so the same problem and
    optimum; about a third of the kernel rows of the plain epochs on ODM's problems. The
    stopping rule is LIBLINEAR's on the first epoch of every block (each variable's projected
    gradient where the sweep meets it). No shrinking. Returns (sweeps, converged)."""
    m = qp.y.shape[0]
    run = max(1, min(_RUN, block // 8))
    n_runs = (m + run - 1) // run
    run_order = np.arange(n_runs)
    per_block = block // run
    stats = np.empty(2)
    size = per_block * run
    group, ps, pc = _pending_rows(opts.group, kp.cache.slots.shape[0], size + 1)
    group = max(group, 1)
    starts = np.empty(per_block, dtype=np.int64)
    idx = np.empty(size, dtype=np.int64)
    local = np.empty(size, dtype=np.int64)
    kvB = np.empty(size)
    dB = np.empty(size)
    it = 0
    converged = False
    while it < opts.max_iter and not converged:
        rng_shuffle(run_order, n_runs, rng)
        stats[0] = -np.inf
        stats[1] = np.inf
        for r0 in range(0, n_runs, per_block):
            nruns = min(per_block, n_runs - r0)
            for r in range(nruns):
                starts[r] = run_order[r0 + r] * run
            _block_epochs(kp, qp, opts, a, rng, starts, nruns, run, idx, local, kvB, dB, ps, pc, group, stats)
        it += 1
        converged = stats[0] - stats[1] <= opts.tol
    return it, converged


#: Pulled blocks (:func:`_kernel_pull_sweeps`) hold at most this many rows: their square
#: K[block, block] is kept in a local matrix (1 MiB in float32).
_LOCAL_MAX = 512


@njit(cache=True, fastmath={"reassoc", "contract"})  # not inlined: the caller's flags would apply
def _dot8(r0, r1, r2, r3, r4, r5, r6, r7, v):
    """The products of eight rows with v in one pass (v is read once for the eight)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    for j in range(v.shape[0]):
        x = v[j]
        a0 += r0[j] * x
        a1 += r1[j] * x
        a2 += r2[j] * x
        a3 += r3[j] * x
        a4 += r4[j] * x
        a5 += r5[j] * x
        a6 += r6[j] * x
        a7 += r7[j] * x
    return a0, a1, a2, a3, a4, a5, a6, a7


@njit(cache=True, inline="always")
def _held_row(cache, i, scratch, k):
    """Kernel row i: its cache slot; else, while the cache has free slots, a new one; else
    computed into ``scratch[k]`` (nothing is evicted: the rows a pulled sweep caches stay)."""
    s = cache.slot_of[i]
    if s >= 0:
        return cache.slots[s]
    if cache.counters[3] < cache.slots.shape[0]:
        return cache_row(cache, i)
    compute_kernel_row(cache, i, scratch[k])
    return scratch[k]


@njit(cache=True, inline="always")
def _products8(cache, idx, ts, g0, n, v, out, scratch):
    """out[t] = <K[idx[t]], v> for the n <= 8 positions t = ts[g0 + k], whole rows, in one pass
    over v; returns the eight rows (the last one repeated when n < 8)."""
    r0 = _held_row(cache, idx[ts[g0]], scratch, 0)
    r1 = _held_row(cache, idx[ts[g0 + 1]], scratch, 1) if n > 1 else r0
    r2 = _held_row(cache, idx[ts[g0 + 2]], scratch, 2) if n > 2 else r1
    r3 = _held_row(cache, idx[ts[g0 + 3]], scratch, 3) if n > 3 else r2
    r4 = _held_row(cache, idx[ts[g0 + 4]], scratch, 4) if n > 4 else r3
    r5 = _held_row(cache, idx[ts[g0 + 5]], scratch, 5) if n > 5 else r4
    r6 = _held_row(cache, idx[ts[g0 + 6]], scratch, 6) if n > 6 else r5
    r7 = _held_row(cache, idx[ts[g0 + 7]], scratch, 7) if n > 7 else r6
    p = _dot8(r0, r1, r2, r3, r4, r5, r6, r7, v)
    for k in range(n):
        out[ts[g0 + k]] = p[k]
    return (r0, r1, r2, r3, r4, r5, r6, r7)


@njit(cache=True, inline="always")
def _compact8(cache, idx, ts, g0, n, sw, nJ, out, scratch):
    """The same for rows outside the cache, computed into ``scratch`` at the ``nJ`` columns of
    ``sw`` only (:func:`_support_columns`): the products are ``sw.vC`` plus those with the rest
    of Y gamma there. Returns the eight compact rows."""
    for k in range(n):
        rbf32_row_at(cache, idx[ts[g0 + k]], sw.XJ, nJ, scratch[k])
    r0 = scratch[0, :nJ]
    r1 = scratch[1, :nJ] if n > 1 else r0
    r2 = scratch[2, :nJ] if n > 2 else r1
    r3 = scratch[3, :nJ] if n > 3 else r2
    r4 = scratch[4, :nJ] if n > 4 else r3
    r5 = scratch[5, :nJ] if n > 5 else r4
    r6 = scratch[6, :nJ] if n > 6 else r5
    r7 = scratch[7, :nJ] if n > 7 else r6
    p = _dot8(r0, r1, r2, r3, r4, r5, r6, r7, sw.ygJ[:nJ])
    for k in range(n):
        t = ts[g0 + k]
        out[t] = p[k] + sw.vC[idx[t]]
    return (r0, r1, r2, r3, r4, r5, r6, r7)


@njit(cache=True, inline="always")
def _block_entries(rows, ts, g0, n, at, nB, KB):
    """KB[t, u] = rows[k][at[u]] for u < nB, the n rows of the group at t = ts[g0 + k]."""
    for k in range(n):
        row = rows[k]
        out = KB[ts[g0 + k]]
        for u in range(nB):
            out[u] = row[at[u]]


@njit(cache=True)
def _spare_slots(cache, index, lo, hi, sw):
    """The cached rows of the samples just shrunk (index[lo:hi]) become spare: until the
    shrunk samples return, their slots may take rows that would be computed in every sweep."""
    if sw.XJ.shape[0] == 0:
        return
    for t in range(lo, hi):
        s = cache.slot_of[index[t]]
        if s >= 0:
            sw.spare[sw.nspare[0]] = s
            sw.nspare[0] += 1


@njit(cache=True)
def _reuse_slot(cache, i, sw):
    """Row i, computed whole, into a spare slot (:func:`_spare_slots`); the shrunk sample whose
    row it held leaves the cache, and its part of vC leaves vC (none once it is at zero)."""
    sw.nspare[0] -= 1
    s = sw.spare[sw.nspare[0]]
    j = cache.row_of[s]
    if sw.held[j] != 0.0:
        row = cache.slots[s]
        c = -sw.held[j]
        for q in range(sw.vC.shape[0]):
            sw.vC[q] += c * row[q]
        sw.held[j] = 0.0
    replace_row(cache, s, i)


@njit(cache=True)
def _split_block(cache, idx, nB, sw):
    """The positions of the block's rows that are read whole (``sw.tfull``: cached, or cached
    now while the cache has free slots, as :func:`_held_row` does, or in the slot of a shrunk
    sample's row, :func:`_reuse_slot`; every row where ``sw`` has no room for compact rows)
    and of those computed at some columns only (``sw.tcomp``), in the block's order. Returns
    their numbers."""
    free = cache.slots.shape[0] - cache.counters[3]
    compact = sw.XJ.shape[0] > 0
    nf = nc = 0
    for t in range(nB):
        cached = cache.slot_of[idx[t]] >= 0
        if cached or free > 0 or not compact or sw.nspare[0] > 0:
            if not cached and free <= 0 and compact:
                _reuse_slot(cache, idx[t], sw)
            free -= 0 if cached else 1
            sw.tfull[nf] = t
            nf += 1
        else:
            sw.tcomp[nc] = t
            nc += 1
    return nf, nc


@njit(cache=True)
def _support_columns(cache, yg, idx, nB, sw):
    """The columns a row computed for the block needs: those where Y gamma is not held in
    ``sw.vC`` (r = yg - sw.held not zero: the others add nothing to the product beyond vC),
    and the block's own (for K[block, block]), in ``sw.cols``; r there in ``sw.ygJ``, their
    centred features in ``sw.XJ`` and each block row's column in ``sw.posB``. Returns their
    number."""
    n = 0
    for j in range(yg.shape[0]):
        r = yg[j] - sw.held[j]
        if r != 0.0:
            sw.cols[n] = j
            sw.pos_of[j] = n
            sw.ygJ[n] = r
            n += 1
    for u in range(nB):
        j = idx[u]
        if yg[j] != sw.held[j]:
            sw.posB[u] = sw.pos_of[j]
        else:
            sw.cols[n] = j
            sw.posB[u] = n
            sw.ygJ[n] = 0.0
            n += 1
    rbf32_columns(cache, sw.cols, n, sw.XJ)
    return n


@njit(cache=True)
def _pull(cache, idx, nB, yg, kvB, KB, scratch, sw, entries=True):
    """kvB = K[idx, :] yg (exact) and, with ``entries``, KB = K[idx, idx], eight rows at a time:
    their products, then their entries on the block while the rows are still in the
    processor's cache. Where the cache computes RBF rows in float32 (``sw.XJ`` not empty),
    rows outside it (that it has no free slot for) are computed at some columns only
    (:func:`_support_columns`): not where Y gamma is zero (at 14 000 rows of magic a quarter
    of ODM's duals are), nor at the cached rows, whose part of the product sw.vC =
    sum_{j cached} held_j K[j, :] holds (kept current by :func:`_hold_cached`)."""
    nf, nc = _split_block(cache, idx, nB, sw)
    for g0 in range(0, nf, 8):
        n = min(8, nf - g0)
        rows = _products8(cache, idx, sw.tfull, g0, n, yg, kvB, scratch)
        if entries:
            _block_entries(rows, sw.tfull, g0, n, idx, nB, KB)
    if nc == 0:
        return
    nJ = _support_columns(cache, yg, idx, nB, sw)
    for g0 in range(0, nc, 8):
        n = min(8, nc - g0)
        rows = _compact8(cache, idx, sw.tcomp, g0, n, sw, nJ, kvB, scratch)
        if entries:
            _block_entries(rows, sw.tcomp, g0, n, sw.posB, nB, KB)


@njit(cache=True)
def _hold_cached(cache, idx, nB, yg, sw):
    """After the block's epochs: its cached rows' changes of Y gamma into sw.vC (sw.held
    becomes yg there), eight rows a pass."""
    if sw.XJ.shape[0] == 0:
        return
    n = 0
    for u in range(nB):
        j = idx[u]
        s = cache.slot_of[j]
        if s >= 0 and yg[j] != sw.held[j]:
            sw.ps[n] = s
            sw.pc[n] = yg[j] - sw.held[j]
            sw.held[j] = yg[j]
            n += 1
            if n == 8:
                _flush(cache.slots, sw.ps, sw.pc, n, sw.vC)
                n = 0
    if n > 0:
        _flush(cache.slots, sw.ps, sw.pc, n, sw.vC)


@njit(cache=True)
def _all_products(cache, yg, kv, scratch, sw):
    """kv = K yg over every row, in blocks of the size of ``sw``'s."""
    m = kv.shape[0]
    size = sw.tfull.shape[0]
    for s0 in range(0, m, size):
        nB = min(size, m - s0)
        _pull(cache, np.arange(s0, s0 + nB), nB, yg, kv[s0:s0 + nB], scratch[:0], scratch, sw, False)


#: Rows computed at some columns only (:func:`_pull`): the positions of the block's rows read
#: whole and computed (``tfull``, ``tcomp``), the columns computed ``cols``, each column's
#: place among them ``pos_of`` (m,), Y gamma there less its held part ``ygJ``, each block
#: row's column ``posB``, the columns' centred float32 features ``XJ`` (d, m + 1; (0, 0): no
#: compact rows); vC (m,) = sum_j held_j K[j, :] over the cached rows j, ``held`` (m,) the Y
#: gamma held there (0 elsewhere), eight pending cached rows (``ps``, ``pc``) to add to vC,
#: and the slots of shrunk samples' rows (``spare``, ``nspare[0]`` of them; :func:`_spare_slots`).
SupportWork = namedtuple("SupportWork", ["tfull", "tcomp", "cols", "pos_of", "ygJ", "posB", "XJ", "vC", "held",
                                         "ps", "pc", "spare", "nspare"])

#: Compact rows need a float32 copy of the features (d x (m + 1)): at most this many bytes.
_SUPPORT_BYTES = 32 << 20


def _support_work(cache, block: int) -> SupportWork:
    """The :data:`SupportWork` of sweeps of pulled blocks of ``block`` rows over ``cache``'s samples."""
    m = cache.slot_of.shape[0]
    block = max(1, min(block, _LOCAL_MAX, m))
    d = cache.X32.shape[0]
    # compact rows where some rows are computed (the cache cannot hold them all) and the copy fits
    room = 0 < d and cache.slots.shape[0] < m and 4 * d * (m + 1) <= _SUPPORT_BYTES
    XJ = np.empty((d, m + 1) if room else (0, 0), dtype=np.float32)
    return SupportWork(np.empty(block, dtype=np.int64), np.empty(block, dtype=np.int64), np.empty(m, dtype=np.int64),
                       np.empty(m, dtype=np.int64), np.empty(m), np.empty(block, dtype=np.int64), XJ, np.zeros(m),
                       np.zeros(m), np.zeros(8, dtype=np.int64), np.zeros(8),
                       np.empty(cache.slots.shape[0], dtype=np.int64), np.zeros(1, dtype=np.int64))


#: The work arrays of :func:`_kernel_pull_sweeps`: the block's samples ``idx``, their visiting
#: order ``local``, kvB = K[idx, :] Y gamma, the local matrix KB = K[idx, idx], which samples
#: may be shrunk ``shr``, yg = Y gamma (m,), eight scratch rows for rows outside the cache, and
#: the pending local rows (``pl``, ``pc``).
PullWork = namedtuple("PullWork", ["idx", "local", "kvB", "KB", "shr", "yg", "scratch", "pl", "pc"])


@njit(cache=True)
def _pulled_epochs(kp, qp, opts, a, rng, pw, nB, pg_old, stats):
    """Up to :data:`_BLOCK_INNER` epochs over a pulled block in its local matrix, in a random
    order each, stopping once the block's projected-gradient spread is at most tol; the first
    one marks the samples to shrink as the plain epochs do (``pw.shr``; a sample that moves
    later is not shrunk) and adds its extremes to ``stats``.
    Changes go into yg and, eight at a time, into kvB."""
    inner_stats = np.empty(2)
    npend = 0
    for inner in range(_BLOCK_INNER):
        rng_shuffle(pw.local, nB, rng)
        inner_stats[0] = -np.inf
        inner_stats[1] = np.inf
        for s in range(nB):
            t = pw.local[s]
            i = pw.idx[t]
            ki = pw.kvB[t]
            for q in range(npend):
                ki += pw.pc[q] * pw.KB[pw.pl[q], t]
            c, shrink = _step_at(i, ki, kp, qp, a, pw.pl, pw.pc, 0, opts.shrinking and inner == 0, pg_old[0],
                                 pg_old[1], inner_stats)
            if inner == 0:
                pw.shr[t] = shrink
            if c != 0.0:
                pw.shr[t] = False  # moved in a later epoch: not at its bound, not shrunk
                pw.yg[i] += c
                pw.pl[npend] = t
                pw.pc[npend] = c
                npend += 1
                if npend == pw.pl.shape[0]:
                    _flush(pw.KB, pw.pl, pw.pc, npend, pw.kvB[:nB])
                    npend = 0
        if npend > 0:
            _flush(pw.KB, pw.pl, pw.pc, npend, pw.kvB[:nB])
            npend = 0
        if _end_inner(stats, inner_stats, inner, opts.tol):
            break


@njit(cache=True)
def _shrink_block(index, s0, nB, shr, active):
    """Reorder the block index[s0:s0 + nB]: its kept samples first, the shrunk ones swapped to
    the end of the active range. Returns (kept, active)."""
    k = 0
    for t in range(nB):
        if not shr[t]:
            i = index[s0 + t]
            index[s0 + t] = index[s0 + k]
            index[s0 + k] = i
            shr[t] = shr[k]
            shr[k] = False
            k += 1
    for j in range(nB - k):
        p, q = s0 + k + j, active - 1 - j
        if q > p:
            i = index[p]
            index[p] = index[q]
            index[q] = i
    return k, active - (nB - k)


@njit(cache=True)
def _kkt_spread(kp, qp, a):
    """max PG - min PG over every variable at the current point (with kp.kv = K Y gamma): the
    stopping rule's spread, each projected gradient as :func:`_coordinate_steps` takes it, but
    all at one point and without a step."""
    m = qp.y.shape[0]
    hi, lo = -np.inf, np.inf
    for i in range(m):
        ui = qp.y[i] * (kp.kv[i] + kp.bias2 * kp.sb[0]) + kp.o[i]
        for side in range(a.shape[0] // m):
            k = i + side * m
            ak = a[k]
            g = (1.0 - 2.0 * side) * ui + qp.D[k] * ak + qp.p[k]
            pg = _projected_gradient(g, ak, qp.U[k])
            hi = max(hi, pg)
            lo = min(lo, pg)
    return hi - lo


@njit(cache=True)
def _kernel_pull_sweeps(kp, qp, opts, a, rng, block, sw):
    """The kernel path as sweeps of pulled blocks (``dcd_kernel(block_sweeps=...)``).

    Each sweep shuffles the active samples and cuts them into blocks of ``block`` rows (at
    most :data:`_LOCAL_MAX`). A block is pulled: one pass over its rows, eight at a time
    (cached, or computed when they are not: nothing is evicted but the rows of shrunk
    samples, whose slots take rows that would be computed in every sweep), gives its exact
    products kvB = K[block, :] Y gamma and its square K[block, block] (:func:`_pull`). Up to
    :data:`_BLOCK_INNER` epochs then run on the block in that local matrix
    (:func:`_pulled_epochs`), and the changes go into Y gamma, from which the next blocks
    pull. A sweep reads each row once: whole from the cache, and, for a row that must be
    computed (float32 RBF rows), only at the columns that add to its product beyond the
    cached rows' part, which is kept, and the block's own (``sw``, a :data:`SupportWork`;
    :func:`_pull`); kv itself is recomputed once at the end. The
    same exact coordinate steps, so the same problem and optimum. Shrinking and the stopping
    rule are LIBLINEAR's, on the first epoch of every block (each variable's projected
    gradient where the sweep meets it): a shrunk sample leaves the sweeps, so its row is no
    longer read, until the active samples meet the tolerance and all come back for a check.
    That check is first made at the point itself (kv over every row, which the result needs
    anyway, and every projected gradient there: :func:`_kkt_spread`); only when it fails
    does a sweep of all samples follow. Returns (sweeps, converged)."""
    m = qp.y.shape[0]
    block = max(1, min(block, _LOCAL_MAX, m))
    dt = kp.cache.slots.dtype
    yg = np.empty(m)
    for i in range(m):
        yg[i] = qp.y[i] * (a[i] - a[i + m] if a.shape[0] > m else a[i])
    pw = PullWork(np.empty(block, dtype=np.int64), np.arange(block), np.empty(block), np.empty((block, block), dtype=dt),
                  np.zeros(block, dtype=np.bool_), yg, np.empty((8, m), dtype=dt), np.zeros(8, dtype=np.int64),
                  np.zeros(8))
    index = np.arange(m)
    active = m
    pg_old = np.array([np.inf, -np.inf])
    stats = np.empty(2)
    it = 0
    converged = False
    while it < opts.max_iter and not converged:
        _begin_epoch(stats, index, active, rng)
        s0 = 0
        while s0 < active:
            nB = min(block, active - s0)
            for t in range(nB):
                pw.idx[t] = index[s0 + t]
                pw.local[t] = t
            _pull(kp.cache, pw.idx, nB, yg, pw.kvB, pw.KB, pw.scratch, sw)
            _pulled_epochs(kp, qp, opts, a, rng, pw, nB, pg_old, stats)
            _hold_cached(kp.cache, pw.idx, nB, yg, sw)
            kept, still = _shrink_block(index, s0, nB, pw.shr, active)
            _spare_slots(kp.cache, index, still, active, sw)
            active = still
            s0 += kept
        it += 1
        some_shrunk = active < m
        converged, active = _end_epoch(stats, pg_old, active, m, opts.tol)
        if active == m:  # every sample back (or none shrunk yet): no row is spare
            sw.nspare[0] = 0
            if some_shrunk and not converged:  # back for the final check: first at the point itself
                _all_products(kp.cache, yg, kp.kv, pw.scratch, sw)
                if _kkt_spread(kp, qp, a) <= opts.tol:
                    return it, True
    _all_products(kp.cache, yg, kp.kv, pw.scratch, sw)
    return it, converged


@njit(cache=True, inline="always")
def _projected_gradient(g, ak, uk):
    """The gradient g of a variable a_k in [0, uk] projected on its box (the stopping rule's PG)."""
    return min(g, 0.0) if ak <= 0.0 else (max(g, 0.0) if ak >= uk else g)


@njit(cache=True, inline="always")
def _step_gain(g, ak, uk, h, best):
    """(projected gradient, decrease of the exact projected step) of a variable a_k in [0, uk]
    with gradient g and curvature h; the decrease is 0 when even the unclipped step's, pg^2 / (2 h),
    cannot beat ``best`` (the clipped step is then not worked out)."""
    pg = _projected_gradient(g, ak, uk)
    if pg == 0.0 or (h > 0.0 and pg * pg <= 2.0 * h * best):
        return pg, 0.0
    step = (uk if g < 0.0 else 0.0) - ak if h <= 0.0 else min(max(ak - g / h, 0.0), uk) - ak
    return pg, -(g * step + 0.5 * h * step * step)


@njit(cache=True)
def _greedy_pick(kp, qp, a):
    """The variable whose exact projected step lowers the objective most, and the spread
    max(PG, 0) - min(PG, 0) of the projected gradient over all variables (LIBSVM's working-set rule
    with second-order information, for one variable and box constraints only). The decrease
    of the unclipped step, pg^2 / (2 h), bounds the clipped one: only a variable that could beat
    the best so far has its clipped step worked out."""
    y, kv, o = qp.y, kp.kv, kp.o
    m = y.shape[0]
    base = kp.bias2 * kp.sb[0]
    best, pick = 0.0, -1
    hi, lo = 0.0, 0.0  # the spread of {PG} and 0: all PG equal and non-zero is no optimum
    for side in range(a.shape[0] // m):
        sg = 1.0 - 2.0 * side
        for i in range(m):
            k = i + side * m
            g = sg * (y[i] * (kv[i] + base) + o[i]) + qp.D[k] * a[k] + qp.p[k]
            pg, gain = _step_gain(g, a[k], qp.U[k], qp.qd[i] + qp.D[k], best)
            hi = max(hi, pg)
            lo = min(lo, pg)
            if gain > best:
                best, pick = gain, k
    return pick, hi - lo


@njit(cache=True)
def _kernel_greedy(kp, qp, opts, a):
    """Greedy coordinate descent on the kernel path with every kernel row at hand: each step
    takes the sample of the variable of :func:`_greedy_pick` (a scan of the gradient, O(n_var)),
    steps on its variables (:func:`_visit`) and adds its row to kv (O(m)). Where the random-order epochs creep (many free variables, a large box,
    an ill-conditioned Q: LDM at C = 100 took 16 000 epochs on 276 rows) it reaches the same
    stopping rule in a small multiple of n_var steps. ``opts.max_iter`` counts n_var steps;
    returns (steps / n_var rounded up, converged)."""
    n_var = a.shape[0]
    max_steps = opts.max_iter * n_var
    ps, pc = np.zeros(1, dtype=np.int64), np.zeros(1)
    stats = np.empty(2)
    steps = 0
    while steps < max_steps:
        k, spread = _greedy_pick(kp, qp, a)
        if spread <= opts.tol or k < 0:
            return -(-steps // n_var), True
        # the exact steps on sample k mod m (both its variables when two-sided), row added at once
        _visit(k % qp.y.shape[0], kp, qp, a, ps, pc, 0, 1, False, np.inf, -np.inf, stats)
        steps += 1
    return opts.max_iter, False


#: Curvature floor of a pair step (LIBSVM's tau).
_PAIR_TAU = 1e-12
#: With a partial cache a pair step takes cached rows when they violate by at least this fraction
#: of the maximal pair (as KM-OMD's SMO: ``kmomd_kernel(cached_pair=...)``).
_PAIR_CACHED = 0.7
#: Positions per chunk of the pair scans: each chunk's extremum is kept, so the first position
#: that attains the extremum is searched for in one chunk only.
_PAIR_CHUNK = 256

#: The active variables of :func:`_kernel_pairs` in compact arrays, in increasing order of index
#: (LIBSVM moves them to the front; here they are copied): the variable at each position
#: (``idx``) and the position of each variable (``pos``, -1 when shrunk); at each position the
#: gradient ``G``, the label ``y``, ``hd`` = Q_kk + D_k, the variable's state ``st`` (the bits
#: :data:`_UP`, :data:`_LOW`, :data:`_OFF_LO`, :data:`_OFF_HI`: one int64 for the four masks of
#: the scans, which then vectorise) and the 0 / 1 mask of the cached kernel rows (``held``); the
#: chunks' extrema (``keys``, 2 x chunks); and the store of compact rows (kernel rows gathered at
#: the positions, in the cache's dtype): the flat buffer ``crows`` cut into slots of n values,
#: each variable's slot (``cslot``, -1 for none), each slot's variable (``cowner``) and layout
#: (``cgen``), and ``meta`` = [the layout's number, the next slot to fill, the slot length n,
#: the number of slots]. The layout changes whenever the active positions do; slots of an
#: older one are stale. The arrays of positions and variables have room for all m.
_Active = namedtuple("_Active", ["idx", "pos", "G", "y", "hd", "st", "held", "keys", "crows", "cslot", "cowner",
                                 "cgen", "meta"])
#: The bits of ``_Active.st``: the variable may move by +y, by -y; it is off its lower bound
#: (a positive projected gradient counts), off its upper bound (a negative one counts).
_UP, _LOW, _OFF_LO, _OFF_HI = 1, 2, 4, 8
#: Bytes of the store of compact rows (LDM at C = 100 on 14 000 rows of magic: some 390 distinct
#: rows per 1000 steps, each read five times; 3100 active positions make 1350 float32 slots).
_COMPACT_BYTES = 16 << 20


def _new_active(m: int, dtype) -> _Active:
    """The work arrays of :func:`_kernel_pairs` for m variables, compact rows of ``dtype``."""
    ints = [np.zeros(m, dtype=np.int64) for _ in range(4)]
    floats = [np.zeros(m) for _ in range(3)]
    keys = np.zeros((2, max(1, -(-m // _PAIR_CHUNK))), dtype=np.int64)
    crows = np.empty(max(_COMPACT_BYTES // np.dtype(dtype).itemsize, 2 * m), dtype=dtype)
    return _Active(ints[0], ints[1], floats[0], floats[1], floats[2], ints[2], ints[3], keys, crows,
                   np.full(m, -1, dtype=np.int64), np.full(m, -1, dtype=np.int64), np.full(m, -1, dtype=np.int64),
                   np.zeros(4, dtype=np.int64))


@njit(cache=True)
def _gradient_of(kp, qp, a, G, to_gradient):
    """Between kv and the gradient G of the one-variable-per-sample problem (n_var = m),
    g_k = y_k (kv_k + B^2 sb) + o_k + D_k a_k + p_k (y_k = +-1): G from kv
    (``to_gradient``), else kv from G."""
    base = kp.bias2 * kp.sb[0]
    for k in range(a.shape[0]):
        rest = kp.o[k] + qp.D[k] * a[k] + qp.p[k]
        if to_gradient:
            G[k] = qp.y[k] * (kp.kv[k] + base) + rest
        else:
            kp.kv[k] = qp.y[k] * (G[k] - rest) - base


@njit(cache=True, inline="always")
def _set_state(act, qp, a, p):
    """The state ``st`` at position p from its variable's value."""
    k = act.idx[p]
    off_lo, off_hi = a[k] > 0.0, a[k] < qp.U[k]
    plus, minus = (off_hi, off_lo) if qp.y[k] > 0.0 else (off_lo, off_hi)
    act.st[p] = (_UP if plus else 0) | (_LOW if minus else 0) | (_OFF_LO if off_lo else 0) | (
        _OFF_HI if off_hi else 0)


@njit(cache=True)
def _load(act, qp, a, G, variables):
    """The variables ``variables`` (increasing) at the first positions, the gradient from G (of
    every variable); returns their number."""
    act.pos[:] = -1
    for p in range(variables.shape[0]):
        k = variables[p]
        act.idx[p], act.pos[k] = k, p
        act.G[p], act.y[p], act.hd[p] = G[k], qp.y[k], qp.qd[k] + qp.D[k]
        act.held[p] = 0
        _set_state(act, qp, a, p)
    _new_layout(act, variables.shape[0])
    return variables.shape[0]


@njit(cache=True)
def _new_layout(act, n):
    """The active positions changed (n of them): the compact rows gathered so far are stale."""
    act.meta[0] += 1
    act.meta[1] = 0
    act.meta[2] = n
    act.meta[3] = min(act.crows.shape[0] // max(n, 1), act.cslot.shape[0])


@njit(cache=True)
def _refresh_held(act, n, slot_of):
    """The mask ``held`` from the cache (after a row entered it and another may have left)."""
    for p in range(n):
        act.held[p] = 1 if slot_of[act.idx[p]] >= 0 else 0


@njit(cache=True)
def _gather(row, act, n, out):
    """out[p] = row[idx[p]] at the n active positions: a kernel row in the compact order (3100
    of 14 000 float32 values: 1.4 us when the row is in the processor's cache, 4.6 us from
    memory)."""
    idx = act.idx
    for p in range(n):
        out[p] = row[idx[p]]
    return out


@njit(cache=True, inline="always")
def _compact_row(cache, act, n, k, keep):
    """Kernel row k at the n active positions, from the store of compact rows when it holds the
    row in the current layout, else gathered from the row cache into the next slot (first in,
    first out; never the slot ``keep``, a row still in use). The scans then read n contiguous
    values from the store instead of the cache lines of the whole row."""
    gen, slen, n_slots = act.meta[0], act.meta[2], act.meta[3]
    s = act.cslot[k]
    if s >= 0 and act.cgen[s] == gen:
        return act.crows[s * slen:(s + 1) * slen]
    row = cache_row(cache, k)
    s = act.meta[1]
    if s == keep:
        s = (s + 1) % n_slots
    act.meta[1] = (s + 1) % n_slots
    old = act.cowner[s]
    if old >= 0 and act.cslot[old] == s:
        act.cslot[old] = -1
    act.cowner[s], act.cslot[k], act.cgen[s] = k, s, gen
    return _gather(row, act, n, act.crows[s * slen:(s + 1) * slen])


@njit(cache=True)
def _pair_scan(act, n, qp, a):
    """One pass over the gradient at the n active positions: the spread of the projected
    gradient (the stopping rule; a variable at both bounds, U_k = 0, counts as 0), the best
    single-variable step (position, decrease), and LIBSVM's first pair variable: the position i
    maximising -y_t g_t over the variables that may move by +y_t (below their bound for
    y_t = +1, above 0 for y_t = -1), with that value ``up`` and the smallest -y_t g_t ``low``
    over those that may move by -y_t. Besides the single step, the same as :func:`_violations`,
    which is vectorised; this scalar loop serves the single steps."""
    y = act.y
    best, pick = 0.0, -1
    hi, lo = 0.0, 0.0
    up, i_up, low = -np.inf, -1, np.inf
    for p in range(n):
        k = act.idx[p]
        g = act.G[p]
        at_lo, at_hi = a[k] <= 0.0, a[k] >= qp.U[k]
        pg, gain = _step_gain(g, a[k], qp.U[k], act.hd[p], best)
        if gain > best:
            best, pick = gain, p
        if at_lo and at_hi:
            pg = 0.0
        hi = max(hi, pg)
        lo = min(lo, pg)
        v = -y[p] * g
        if act.st[p] & _UP and v > up:
            up, i_up = v, p
        if act.st[p] & _LOW:
            low = min(low, v)
    return hi - lo, pick, best, i_up, up, low


@njit(cache=True, inline="always")
def _violations(act, n):
    """(spread, i, up, low) of :func:`_pair_scan` without single steps, in one vectorised pass
    by chunks of :data:`_PAIR_CHUNK` positions: the extrema are taken over the integer order keys
    of g and -y g (:func:`~margindist._bits.order_key`; float min / max reductions stay scalar),
    the first position attaining ``up`` is then found in its chunk. PG > 0 needs a variable off
    its lower bound, PG < 0 one off its upper bound."""
    ck = act.keys[0]
    kup, klow, khi, klo = KEY_NEG_INF, KEY_INF, KEY_NEG_INF, KEY_INF
    for c in range(-(-n // _PAIR_CHUNK)):
        s = c * _PAIR_CHUNK
        e = min(s + _PAIR_CHUNK, n)
        G, y, st = act.G[s:e], act.y[s:e], act.st[s:e]
        cu, cl, ch, cw = KEY_NEG_INF, KEY_INF, KEY_NEG_INF, KEY_INF
        for p in range(e - s):
            kg = order_key(G[p])
            kv = ~kg if y[p] > 0.0 else kg  # the key of -y g
            b = st[p]
            cu = max(cu, kv if b & _UP else KEY_NEG_INF)
            cl = min(cl, kv if b & _LOW else KEY_INF)
            ch = max(ch, kg if b & _OFF_LO else KEY_NEG_INF)
            cw = min(cw, kg if b & _OFF_HI else KEY_INF)
        ck[c] = cu
        kup, klow, khi, klo = max(kup, cu), min(klow, cl), max(khi, ch), min(klo, cw)
    spread = max(from_order_key(khi), 0.0) - min(from_order_key(klo), 0.0)
    return spread, _first_up(act, n, kup), from_order_key(kup), from_order_key(klow)


@njit(cache=True, inline="always")
def _first_up(act, n, key):
    """The first position that may move by +y whose -y g has the order key ``key`` (-1: none),
    in the first chunk of :func:`_violations` whose maximum is ``key``."""
    if key == KEY_NEG_INF:
        return -1
    for c in range(-(-n // _PAIR_CHUNK)):
        if act.keys[0, c] == key:
            for p in range(c * _PAIR_CHUNK, min((c + 1) * _PAIR_CHUNK, n)):
                kg = order_key(act.G[p])
                if act.st[p] & _UP and (~kg if act.y[p] > 0.0 else kg) == key:
                    return p
    return -1


@njit(cache=True, inline="always")
def _partner_score(act, p, ri, kii, bias2, up):
    """(b, c) of the pair (i, p): b = up + y_p G_p, c the curvature along the pair."""
    b = up + act.y[p] * act.G[p]
    return b, max(kii + act.hd[p] - 2.0 * (np.float64(ri[p]) + bias2), _PAIR_TAU)


@njit(cache=True, inline="always")
def _partner_keys(act, n, ri, kii, bias2, up):
    """The scores b^2 / c of :func:`_pair_partner` (0 where p is no candidate) as the integer
    keys of non-negative floats (their bits), vectorised: the chunks' maxima over all candidates
    and over those whose row is cached (``keys``) and the two overall maxima."""
    k0, k1 = act.keys[0], act.keys[1]
    best, best_c = 0, 0
    for c in range(-(-n // _PAIR_CHUNK)):
        s = c * _PAIR_CHUNK
        e = min(s + _PAIR_CHUNK, n)
        G, y, hd, st, held, r = act.G[s:e], act.y[s:e], act.hd[s:e], act.st[s:e], act.held[s:e], ri[s:e]
        cb, cc = 0, 0
        for p in range(e - s):
            b = up + y[p] * G[p]
            h = max(kii + hd[p] - 2.0 * (np.float64(r[p]) + bias2), _PAIR_TAU)
            key = bits_of_float64(b * b / h) if st[p] & _LOW and b > 0.0 else 0
            cb = max(cb, key)
            cc = max(cc, key if held[p] != 0 else 0)
        k0[c], k1[c] = cb, cc
        best, best_c = max(best, cb), max(best_c, cc)
    return best, best_c


@njit(cache=True, inline="always")
def _partner_at(act, n, ri, kii, bias2, up, key, cached):
    """The first position whose score has the key ``key`` (a cached one if ``cached``)."""
    for c in range(-(-n // _PAIR_CHUNK)):
        if act.keys[1 if cached else 0, c] == key:
            for p in range(c * _PAIR_CHUNK, min((c + 1) * _PAIR_CHUNK, n)):
                b, h = _partner_score(act, p, ri, kii, bias2, up)
                if act.st[p] & _LOW and b > 0.0 and bits_of_float64(b * b / h) == key and (
                        not cached or act.held[p] != 0):
                    return p
    return -1


@njit(cache=True, inline="always")
def _pair_partner(act, n, qp, a, i, up, ri, bias2, frac):
    """LIBSVM's second-order choice of j for the pair (i, j) (positions): among the variables
    that may move by -y_j with -y_j G_j < ``up``, the one of largest b^2 / c, b = up + y_j G_j,
    c the curvature along the pair (``ri``: kernel row i at the positions). An uncached j gives
    way to the best cached one (mask ``held``, all 0 with a full cache) when that scores at least
    ``frac``^2 as much (a step that computes no kernel row). Returns (j, t, decrease) for the
    step a_i += y_i t, a_j -= y_j t, t the exact minimiser clipped to the box (j = -1: none)."""
    ki = act.idx[i]
    kii = act.hd[i]
    best, best_c = _partner_keys(act, n, ri, kii, bias2, up)
    if best == 0:
        return -1, 0.0, 0.0
    j = _partner_at(act, n, ri, kii, bias2, up, best, False)
    if best_c > 0 and act.held[j] == 0 and float64_from_bits(best_c) >= frac * frac * float64_from_bits(best):
        j = _partner_at(act, n, ri, kii, bias2, up, best_c, True)
    kj = act.idx[j]
    b, c = _partner_score(act, j, ri, kii, bias2, up)
    t = min(b / c, qp.U[ki] - a[ki] if qp.y[ki] > 0.0 else a[ki], a[kj] if qp.y[kj] > 0.0 else qp.U[kj] - a[kj])
    return j, t, b * t - 0.5 * c * t * t


@njit(cache=True, inline="always")
def _pair_step(act, n, qp, a, i, j, t, ri, rj):
    """The pair step a_i += y_i t, a_j -= y_j t (positions i, j; sum_k y_k a_k does not change):
    G changes by t Y (K_i - K_j) (``ri``, ``rj``: the rows at the positions) and the D terms
    of i and j."""
    ki, kj = act.idx[i], act.idx[j]
    a[ki] += qp.y[ki] * t
    a[kj] -= qp.y[kj] * t
    G, y = act.G, act.y
    for p in range(n):
        G[p] += t * y[p] * (np.float64(ri[p]) - np.float64(rj[p]))
    G[i] += qp.D[ki] * qp.y[ki] * t
    G[j] -= qp.D[kj] * qp.y[kj] * t
    _set_state(act, qp, a, i)
    _set_state(act, qp, a, j)


@njit(cache=True, inline="always")
def _single_step(act, n, qp, a, p, rk, bias2, sb):
    """The exact projected step on the variable at position p (as :func:`_coordinate_steps`):
    sum_i y_i a_i changes by c = y_k delta (``sb``), G by c Y (K_k + B^2) (``rk``: row k at the
    positions) and D_k delta."""
    k = act.idx[p]
    h = act.hd[p]
    g = act.G[p]
    new = min(max(a[k] - g / h, 0.0), qp.U[k]) if h > 0.0 else (qp.U[k] if g < 0.0 else 0.0)
    delta = new - a[k]
    a[k] = new
    c = delta * qp.y[k]
    sb[0] += c
    G, y = act.G, act.y
    for q in range(n):
        G[q] += y[q] * c * (np.float64(rk[q]) + bias2)
    G[p] += qp.D[k] * delta
    _set_state(act, qp, a, p)


#: Pair steps between two shrinking passes of :func:`_kernel_pairs` (at most; m if fewer).
_SHRINK_EVERY = 1000


@njit(cache=True)
def _shrink_pairs(act, qp, a, n, up, low, i, k):
    """LIBSVM's shrinking for :func:`_kernel_pairs`: a variable at a bound leaves the active
    positions when no pair step would move it (it may move one way only, and its -y g is beyond
    the extreme ``up`` or ``low`` of the other side of the scan just made); the others close up
    in their order. The positions i and k (the step's first pair variable and single-step
    choice, -1 for none) stay. A single step might still move a shrunk variable; single steps
    matter only once the pairs are within tol, and the final check on every variable brings it
    back if it is needed. (Keeping such variables in the scans, LDM at C = 100 on 14 000 rows of
    magic scanned 6800 variables a step on average instead of 2800, in 91 000 steps instead of
    105 000: 6.2 s against 4.5 s, the same dual value. Shrinking after the step instead, with
    the scan's extremes one step old, took 70 % more steps there: 12 epochs against 7.) Returns
    the new count and the new positions of i and k."""
    w, i_new, k_new = 0, -1, -1
    for p in range(n):
        kv = act.idx[p]
        v = -act.y[p] * act.G[p]
        at_lo, at_hi = a[kv] <= 0.0, a[kv] >= qp.U[kv]
        moves_up = (qp.y[kv] > 0.0) == at_lo  # may move by +y only (else by -y only)
        if p != i and p != k and (at_lo != at_hi) and ((moves_up and v < low) or (not moves_up and v > up)):
            act.pos[kv] = -1
            continue
        i_new, k_new = (w if p == i else i_new), (w if p == k else k_new)
        act.idx[w], act.pos[kv], act.G[w], act.y[w], act.hd[w] = kv, w, act.G[p], act.y[p], act.hd[p]
        act.st[w], act.held[w] = act.st[p], act.held[p]
        w += 1
    if w < n:
        _new_layout(act, w)
    return w, i_new, k_new


@njit(cache=True)
def _unshrink(kp, qp, a, a_sync, Gf, act):
    """Every variable back at the positions, with its gradient (LIBSVM's gradient
    reconstruction): Gf, the gradient at ``a_sync`` (the last time all variables were active),
    is brought to a through the kernel rows of the variables that moved since, read from the
    cache or computed without entering it (the rows of the steps stay cached); a_sync becomes
    a. Returns m."""
    cache = kp.cache
    m = Gf.shape[0]
    kvd = np.zeros(m)  # K Y (a - a_sync)
    sbd = 0.0
    scratch = np.empty_like(cache.slots[0])
    for j in range(m):
        c = (a[j] - a_sync[j]) * qp.y[j]
        if c != 0.0:
            sbd += c
            s = cache.slot_of[j]
            row = cache.slots[s] if s >= 0 else scratch
            if s < 0:
                compute_kernel_row(cache, j, scratch)
            for q in range(m):
                kvd[q] += c * row[q]
    for k in range(m):
        Gf[k] += qp.y[k] * (kvd[k] + kp.bias2 * sbd) + qp.D[k] * (a[k] - a_sync[k])
    a_sync[:] = a
    return _load(act, qp, a, Gf, np.arange(m))


@njit(cache=True, inline="always")
def _pair_or_single(kp, qp, a, act, n, i, j, t, k, whole):
    """The pair step (i, j, t) (j >= 0) or the single step on k (positions), with the kernel rows
    read in place when every variable is active (``whole``: positions are indices), else as
    compact rows (:func:`_compact_row`)."""
    cache = kp.cache
    if j >= 0:
        ki, kj = act.idx[i], act.idx[j]
        if whole:
            _pair_step(act, n, qp, a, i, j, t, cache_row(cache, ki), cache_row(cache, kj))
        else:
            ri = _compact_row(cache, act, n, ki, -1)
            _pair_step(act, n, qp, a, i, j, t, ri, _compact_row(cache, act, n, kj, act.cslot[ki]))
    elif whole:
        _single_step(act, n, qp, a, k, cache_row(cache, act.idx[k]), kp.bias2, kp.sb)
    else:
        _single_step(act, n, qp, a, k, _compact_row(cache, act, n, act.idx[k], -1), kp.bias2, kp.sb)


@njit(cache=True, inline="always")
def _partner_of(kp, qp, a, act, n, i, up, partial, misses):
    """The partner of i (:func:`_pair_partner`) from row i, in place when every variable is
    active, else as a compact row; with a partial cache the mask ``held`` is refreshed first when
    a row has entered the cache since ``misses[0]`` (the cache's miss count)."""
    cache = kp.cache
    whole = n == qp.y.shape[0]
    ri = cache_row(cache, act.idx[i]) if whole else _compact_row(cache, act, n, act.idx[i], -1)
    if partial and cache.counters[2] != misses[0]:
        misses[0] = cache.counters[2]
        _refresh_held(act, n, cache.slot_of)
    return _pair_partner(act, n, qp, a, i, up, ri, kp.bias2, _PAIR_CACHED)


@njit(cache=True)
def _kernel_pairs(kp, qp, opts, a, act):
    """Pair steps, as LIBSVM's SMO, and single-variable steps on kernel rows.

    The direction a_i += y_i t, a_j -= y_j t keeps sum_i y_i a_i, so its curvature
    K_ii + K_jj - 2 K_ij (+ D_i + D_j) misses the stiff direction y of Q = Y (K + B^2) Y: the
    regularised intercept's B^2 y y^T and the near-constant part of an RBF kernel, along which
    single-variable steps zigzag at large C (an SVM dual at C = 100 on 5000 rows of magic: 1.7
    million greedy single steps; LIBSVM, whose equality constraint removes that direction, 51 000
    pair steps). While the pairs of LIBSVM's second-order working-set selection
    (:func:`_violations`, :func:`_pair_partner`) violate by more than ``tol``, each step is a
    pair step (or the best single step when that decreases the objective more); once they are
    within ``tol``, the best single step moves sum_i y_i a_i. The stopping rule is the
    single-variable one (the optimality conditions of the box QP), so the optimum and its
    certificate are those of :func:`_kernel_greedy` (the same SVM dual: 76 000 pair and 14 single
    steps). With a partial cache rows are computed on demand (the partner preferring cached
    rows): LDM on 14 000 rows of magic with a quarter of them cached, C = 10 and 100, 7.7 s and
    27 s against 17.8 s and about 170 s for the block sweeps.

    As LIBSVM, the steps keep the gradient G itself (kv is rebuilt from it at the end), and
    with ``opts.shrinking``, every :data:`_SHRINK_EVERY` steps the variables that no pair step
    would move leave the scans (:func:`_shrink_pairs`, LIBSVM's rule). The active variables sit
    in the compact arrays of :class:`_Active` (``act``), where the scans are contiguous,
    vectorised passes and the steps update the gradient of the active variables only, from
    their rows' entries at the active positions (compact rows, gathered once per layout of the
    positions and kept in a small store: :func:`_compact_row`); shrunk variables get their
    gradient back when they return for the final check (:func:`_unshrink`), so the run ends
    only when the stopping rule holds on all of them. LDM at C = 100 on 14 000 rows of magic
    (some 97 000 steps over 3100 active variables on average): 13.5 us a step with the rows
    gathered at every step, against 35-55 us with every variable's gradient updated and the
    scans through an index of the active ones (4.4-4.9 s -> 2.0-2.3 s a fit); the store of
    compact rows then took the fit from 1.87-2.02 s to 1.55-1.57 s (286 000 -> 42 000 requests
    to the row cache: a row read five times in 1000 steps is gathered once). The helpers of a
    step are inlined into this loop (``inline="always"``): called, each passing of the arrays
    of ``act`` updated their reference counts, which made a step on few active positions 70 %
    slower (haberman, 306 rows, C = 1000, some 120 active positions: 2.4 us a step, 1.4 us
    inlined, 1.5 us before the compact layout).
    ``opts.max_iter`` counts n_var steps; returns (steps / n_var rounded up, converged)."""
    m = qp.y.shape[0]
    max_steps = opts.max_iter * m
    Gf = np.empty(m)
    _gradient_of(kp, qp, a, Gf, True)
    a_sync = a.copy()
    n = _load(act, qp, a, Gf, np.arange(m))
    partial = kp.cache.slots.shape[0] < m
    misses = np.full(1, -1, dtype=np.int64)
    steps, converged = 0, False
    every = min(m, _SHRINK_EVERY)
    fine = False  # the pairs were within tol at the last scan: work out the single steps at once
    while steps < max_steps:
        singles = fine
        k, gain = -1, 0.0
        if singles:
            spread, k, gain, i, up, low = _pair_scan(act, n, qp, a)
        else:
            spread, i, up, low = _violations(act, n)
        if spread <= opts.tol:
            if n == m:
                converged = True
                break
            n = _unshrink(kp, qp, a, a_sync, Gf, act)  # the shrunk variables back for the check
            misses[0] = -1  # their masks held are refreshed before the next partner scan
            continue
        fine = not up - low > opts.tol
        if not singles and (fine or i < 0):  # a single step may be taken: the scan with its gains
            singles = True
            spread, k, gain, i, up, low = _pair_scan(act, n, qp, a)
        if opts.shrinking and steps % every == every - 1:
            n, i, k = _shrink_pairs(act, qp, a, n, up, low, i, k)
        j, t, pair_gain = -1, 0.0, 0.0
        if up > low and i >= 0:
            j, t, pair_gain = _partner_of(kp, qp, a, act, n, i, up, partial, misses)
        pair = j >= 0 and t > 0.0 and (up - low > opts.tol or pair_gain > gain)
        if not pair and not singles:  # no pair step after all (rare): the best single step
            _, k, gain, _, _, _ = _pair_scan(act, n, qp, a)
        if not pair and k < 0:
            converged = True
            break
        _pair_or_single(kp, qp, a, act, n, i, j if pair else -1, t, k, n == m)
        steps += 1
    if n < m:
        n = _unshrink(kp, qp, a, a_sync, Gf, act)
    Gf[:] = act.G
    _gradient_of(kp, qp, a, Gf, False)
    return (-(-steps // m) if converged else opts.max_iter), converged


@njit(cache=True)
def _kernel_kv(cache, y, gamma, kv, sb):
    for i in range(gamma.shape[0]):
        if gamma[i] != 0.0:
            c = gamma[i] * y[i]
            sb[0] += c
            _add_row(cache, i, c, kv)


def _cache_block(n_slots: int, m: int):
    """Rows per block of :func:`_kernel_block_epochs` when the cache holds fewer than m rows
    (room is left for the pending rows of a group), else None: plain epochs."""
    if n_slots >= m:
        return None
    return max(1, n_slots - 2 * _GROUP)


def dcd_kernel(y, D, p, U, *, n_var, cache: KernelRowCache | None = None, gram=None, bias=1.0, u0=None,
               a0=None, q0=None, tol=1e-3, max_iter=1000, shrinking=True, random_state=None,
               warn_label="DCD", selection="random", block_sweeps=None) -> DCDResult:
    """DCD with the kernel data path (see the module docstring).

    Q_ij = y_i y_j (K_ij + bias^2) with K read from exactly one of ``cache`` (a
    :class:`~margindist.kernels.KernelRowCache` over the training rows: columns fetched on
    demand under its byte budget, stored in float64 or float32, or all of them after
    :meth:`~margindist.kernels.KernelRowCache.fill`) or ``gram`` (a dense m x m matrix, float64
    or float32, used in place). A general symmetric matrix Q is passed as ``gram=Q`` with y = 1
    and bias = 0. Sums are float64 whatever the storage.

    u0 : ndarray of shape (m,), optional
        The offset o (u = Q gamma + o).
    q0 : ndarray of shape (m,), optional
        Q gamma of the start ``a0``, when the caller has it (``u - o`` of an earlier run that
        ended at a0): the start's kernel products are then not recomputed from the rows (one
        pass over every row whose variable is non-zero; with a partial cache, a kernel row
        computed for each).
    warn_label : str or None
        The name in the ConvergenceWarning at ``max_iter``; None: no warning (the caller
        continues from the returned point).
    selection : {"random", "greedy", "pairs"}
        ``"random"``: epochs over the variables in a random order (LIBLINEAR's); ``"greedy"``:
        with every row at hand (``gram``, or a cache that holds all rows), each step takes the
        variable whose step lowers the objective most (:func:`_kernel_greedy`; ``max_iter``
        then counts n_var steps, ``n_iter`` the steps / n_var); ``"pairs"`` (n_var = m): pair
        steps of LIBSVM's working-set selection, which keep sum_i y_i a_i, and single steps
        (:func:`_kernel_pairs`; with a smaller cache too, rows computed on demand). With a
        smaller cache ``"greedy"`` is the block sweeps of the random selection.
    block_sweeps : int, optional
        With the random selection on more than ``2 * block_sweeps`` samples: sweeps of pulled
        blocks of this many rows (at most :data:`_LOCAL_MAX`; :func:`_kernel_pull_sweeps`)
        instead of the epochs, with any cache (rows beyond it are computed as the blocks need
        them). For duals where most variables move (ODM's); None: epochs.
    Returns DCDResult with u = Q gamma + o.
    """
    y = np.ascontiguousarray(y, dtype=np.float64)
    m = y.shape[0]
    if n_var not in (m, 2 * m):
        raise ValueError(f"n_var must be m or 2 m; got {n_var} for m = {m}.")
    if selection not in ("random", "greedy", "pairs"):
        raise ValueError(f"selection must be 'random', 'greedy' or 'pairs'; got {selection!r}.")
    if selection == "pairs" and n_var != m:
        raise ValueError("selection='pairs' needs one variable per sample (n_var = m).")
    if (cache is None) == (gram is None):
        raise ValueError("Give exactly one of cache and gram.")
    D, p, U = _as_arrays(n_var, D, p, U)
    bias2 = float(bias) ** 2
    if gram is not None:
        if np.shape(gram) != (m, m):
            raise ValueError(f"gram must be {m} x {m}; got {np.shape(gram)}.")
        cache = KernelRowCache.from_gram(gram)
    elif cache.state.slot_of.shape[0] != m:
        raise ValueError(f"The cache holds {cache.state.slot_of.shape[0]} rows; y has {m}.")
    qd = np.asarray(cache.diag, dtype=np.float64) + bias2
    a = _initial_a(a0, n_var, U)
    o = np.zeros(m) if u0 is None else np.array(u0, dtype=np.float64).ravel()
    kv = np.zeros(m)
    sb = np.zeros(1)
    gamma = a[:m] - a[m:] if n_var == 2 * m else a.copy()
    if q0 is not None:  # Q gamma = Y (K Y gamma + B^2 sb)
        q0 = np.asarray(q0, dtype=np.float64).ravel()
        if q0.shape != (m,):
            raise ValueError(f"q0 must have length {m}; got {q0.shape}.")
        sb[0] = float(y @ gamma)
        kv[:] = y * q0 - bias2 * sb[0]
    elif np.any(gamma != 0):
        _kernel_kv(cache.state, y, gamma, kv, sb)
    path, qp = KernelPath(cache.state, kv, sb, o, bias2), BoxQP(y, qd, D, p, U)
    opts = DCDOptions(float(tol), int(max_iter), bool(shrinking), _GROUP)
    block = _cache_block(cache.state.slots.shape[0], m)
    if selection == "pairs":  # also with a partial cache: a pair step needs only its two rows
        it, conv = _kernel_pairs(path, qp, opts, a, _new_active(m, cache.state.slots.dtype))
    elif block_sweeps and selection == "random" and m > 2 * block_sweeps:
        it, conv = _kernel_pull_sweeps(path, qp, opts, a, seed_from(random_state), int(block_sweeps),
                                       _support_work(cache.state, int(block_sweeps)))
    elif selection == "greedy" and block is None:
        it, conv = _kernel_greedy(path, qp, opts, a)
    elif block is None:
        it, conv = _kernel_epochs(path, qp, opts, a, seed_from(random_state))
    else:
        it, conv = _kernel_block_epochs(path, qp, opts, a, seed_from(random_state), block)
    if not conv and warn_label is not None:  # None: the caller goes on from this point
        _warn(it, tol, warn_label)
    u = y * (kv + bias2 * sb[0]) + o
    return DCDResult(a=a, w=None, u=u, n_iter=int(it), converged=bool(conv))
