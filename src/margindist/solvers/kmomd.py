"""KM-OMD (Aiolli, Da San Martino, Sperduti, ICANN 2008): SMO on two simplices.

Problem (per binary task, labels y_i in {-1, +1}, prior masses w_i > 0 from the sample weights)::

    min_gamma  L(gamma) = (1 - lam) ||v(gamma)||^2 + lam sum_i gamma_i^2 / w_i
    s.t.       gamma >= 0,  sum_{y_i = +1} gamma_i = 1,  sum_{y_i = -1} gamma_i = 1,

with v(gamma) = sum_i y_i gamma_i phi(x_i) (the difference of a point of each class's convex hull)
and ||v||^2 = gamma^T Y K Y gamma. With w = 1 it is the paper's objective. A weight w_i is what
w_i identical copies of example i give at the optimum (the copies share gamma_i equally, and
sum_copies (gamma_i / w_i)^2 = gamma_i^2 / w_i), so integer weights act as repetitions.

The scores s_j = sum_i y_i gamma_i k(x_i, x_j) = <v, phi(x_j)> define the gradient
G_j = 2 (1 - lam) y_j s_j + 2 lam gamma_j / w_j, which the solver keeps up to date.

Pair step (paper Section 3, Eq. 4, with its errors corrected): move mass eps from q to r inside
one class c (gamma_r += eps, gamma_q -= eps). Along that direction L changes by
eps (G_r - G_q) + eps^2 H / 2 with
H = 2 (1 - lam) ||phi(x_r) - phi(x_q)||^2 + 2 lam (1 / w_r + 1 / w_q), so the exact minimiser is
eps* = (G_q - G_r) / H (the paper's Eq. 4 for w = 1), clipped to the feasible interval
[-gamma_r, gamma_q] (the paper prints min(eps, -gamma_r), which makes gamma negative), and the
scores move by s_j += y_c eps (k(x_r, x_j) - k(x_q, x_j)) (the paper drops the label y_c).

Working set (instead of the paper's sweep over all pairs with its "Delta L > delta" acceptance
test, which accepts increases and stops short of the optimum): in each class the maximal
violating pair, r = argmin_j G_j and q = argmax_{j: gamma_j > 0} G_j; the step is taken in the
class with the larger violation G_q - G_r. Every step is an exact line minimisation of a convex
function along a feasible descent direction, so L never increases.

Stopping rule: the largest violation over both classes is <= tol * 2 L(gamma). By convexity and
the simplex constraints, L(gamma) - L* <= sum_c (max_{gamma_j > 0} G_j - min_j G_j), so the rule
bounds the relative objective gap by 2 tol. (The gradient's scale is L itself: the
gamma-weighted class means mu_c of G add up to 2 L, so the rule is invariant to the kernel's
and the weights' scale.) With a kernel that is not positive semi-definite (sigmoid) L can be
negative and the problem is not convex: the rule, on |L|, then stops the steps at a point that
meets the KKT conditions to that accuracy, which need not be the minimiser.

Layout: the rows are put in class order (positive class first) so that the gradient update and
the pair selection run over two contiguous ranges (no index gathers, no per-row class test).

Threshold (the paper's theta = 1/2 sum_j s_j is wrong): the bisector of the two hull points,
theta = 1/2 <v, v_+ + v_-> = 1/2 sum_j gamma_j s_j; decision f(x) = sum_i y_i gamma_i k(x_i, x) - theta.

Back ends
---------
* :func:`kmomd_kernel`: any kernel; two kernel rows per update from the LRU
  :class:`~margindist.kernels.KernelRowCache` (byte budget, never an m x m matrix above it;
  float64 or float32 rows, float64 gradients). O(m) per update plus O(m d) per cache miss.
  The optimum is interior on its support (the weights lie strictly inside their bounds), so the
  SMO needs many updates per support example when lam is small. After 2 m updates the solver
  therefore switches to a primal-dual active-set (semismooth Newton) phase, :func:`_newton_phase`:
  on a candidate support the problem is a linear system, solved by conjugate gradients with a
  Nystrom (pivoted partial Cholesky) preconditioner; the support is then corrected from the signs
  of the weights and the gradients outside it, usually in 4-10 iterations. The SMO resumes from
  that point (only if it is better) and checks, or completes, the stopping rule.
* :func:`kmomd_linear`: linear kernel in the primal; keeps v(gamma) as an explicit vector and
  updates the gradients through X (dense or CSR, never densified). O(nnz(X)) per update, no
  cache.
  With ``init="lbfgs"`` the SMO starts from the maximiser of the concave dual in the weight
  vector (d variables, :func:`_neg_dual`), found by L-BFGS; the SMO then only checks (and if
  needed completes) the stopping rule.
* :func:`kmomd_centroid`: lam = 1, closed form gamma_i = w_i / W_c (the centroid classifier).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from numba import njit

from .._bits import KEY_INF, KEY_NEG_INF, from_order_key, order_key
from ..kernels import (
    DEFAULT_CACHE_BYTES,
    KernelRowCache,
    KernelSpec,
    cache_row,
    kernel_decision,
)
from ._gram import sym_rows
from ._pivoted import pivoted_cholesky
from ._result import SolverResult
from ._rows import make_rows, nonneg, row_axpy, row_dot, row_sq_norms, rows_dot
from .dcd import _flush

__all__ = [
    "KMOMDResult",
    "initial_distribution",
    "kmomd_centroid",
    "kmomd_kernel",
    "kmomd_linear",
    "kmomd_objective",
]

#: Curvature floor for a pair step (LIBSVM's tau): duplicate points at lam = 0, or a kernel that
#: is not positive semi-definite, give H <= 0; the step then goes to the bound of the interval.
_TAU = 1e-12
#: lam = 0 only: stop when ||v||^2 has fallen below this fraction of its start value (the two
#: convex hulls intersect; the hard-margin problem has no margin left to find).
_HULL_TOUCH = 1e-12

#: ``kmomd_kernel(cached_pair=...)``'s default: with fewer rows cached than examples, the SMO
#: takes a pair among the cached rows instead of the maximal violating pair when its violation is
#: at least this fraction of the largest one (magic, 14 000 rows, 3744 cached: 0.5, 0.6, 0.7,
#: 0.75, 0.85 took 9.2, 6.2, 5.8, 5.8, 6.6 s against 12.4 s for the maximal pair alone).
CACHED_PAIR = 0.7

# status codes of the SMO
_CONVERGED, _MAX_ITER, _HULLS_TOUCH = 0, 1, 2


@dataclass(kw_only=True)
class KMOMDResult(SolverResult):
    """Solution of one binary KM-OMD problem.

    gamma : distribution over the rows (each class sums to 1); scores : s_j = <v, phi(x_j)>;
    theta : threshold (decision = <v, phi(x)> - theta); objective : L(gamma);
    n_iter : pair updates; converged : the stopping rule was met; violation : the final largest
    within-class violation; status : "converged", "max_iter" or "hulls_touch" (lam = 0 and the
    convex hulls of the classes intersect); history : objective after every ``history_every``
    updates (first entry: the start point); coef : v as an explicit vector (linear back end);
    lbfgs_iter : L-BFGS iterations of the linear start point (``init="lbfgs"``); newton_iter :
    active-set Newton iterations of the kernel solver (``newton``), or Newton iterations of the
    linear :func:`~margindist.solvers.kmomd_newton.kmomd_newton`; cg_iter : their
    conjugate-gradient steps (kernel solver: products with the reduced Hessian, over all solves).
    """

    gamma: np.ndarray
    scores: np.ndarray
    theta: float
    objective: float
    violation: float
    status: str = "converged"
    coef: np.ndarray | None = None
    lbfgs_iter: int = 0
    newton_iter: int = 0
    cg_iter: int = 0


# --------------------------------------------------------------------------------------
# compiled core
# --------------------------------------------------------------------------------------


#: Rows per chunk of :func:`_update_select`: the chunks' extrema are kept, so the first row
#: that attains an extremum is searched for in one chunk only.
_SELECT_CHUNK = 256


@njit(cache=True)
def _update_select(G, gamma, lo, hi, Ka, Kb, k, slot_of):
    """G_j += k (Ka_j - Kb_j) on rows lo..hi-1, fused with the selection of the class's maximal
    violating pair: returns (min_j G_j, max_{j: gamma_j > 0} G_j, argmin, argmax), argmax -1 if no
    row carries mass, then the argmin and argmax over the rows whose kernel row is cached
    (``slot_of`` >= 0; -1 when ``slot_of`` is empty: no such selection). Ka, Kb may be
    float32 kernel rows (differences taken in float64). Ties go to the first row.

    One pass by chunks of :data:`_SELECT_CHUNK` rows: the update and the chunk's extrema in one
    vectorised loop (the extrema over the integer order keys of the gradients,
    :func:`~margindist._bits.order_key`, since float min / max reductions and a running argmin
    stay scalar); the first row attaining each extremum is then found in the first chunk whose
    extremum it is (:func:`_first_at`). Both classes of 14 000 rows, rows in memory: 29.5 us a
    pair update for running extrema in eight lanes (the previous loop), 16.8 us for float
    extrema by chunks, 10.6 us with the keys (the two rows' reads from memory take about 10);
    with the cached rows' extrema too, 26.6, 24.8 and 12.2 us."""
    n_chunks = (hi - lo + _SELECT_CHUNK - 1) // _SELECT_CHUNK
    if n_chunks <= 0:
        return np.inf, -np.inf, -1, -1, -1, -1
    ext = np.empty((4, n_chunks))
    cached = slot_of.shape[0] > 0
    for c in range(n_chunks):
        s = lo + c * _SELECT_CHUNK
        e = min(s + _SELECT_CHUNK, hi)
        Gs, gs, As, Bs = G[s:e], gamma[s:e], Ka[s:e], Kb[s:e]
        lo_all, hi_mass, lo_c, hi_c = KEY_INF, KEY_NEG_INF, KEY_INF, KEY_NEG_INF
        if cached:
            Ss = slot_of[s:e]
            for j in range(e - s):
                g = Gs[j] + k * (np.float64(As[j]) - np.float64(Bs[j]))
                Gs[j] = g
                kg = order_key(g)
                kq = kg if gs[j] > 0.0 else KEY_NEG_INF
                lo_all = min(lo_all, kg)
                hi_mass = max(hi_mass, kq)
                held = Ss[j] >= 0
                lo_c = min(lo_c, kg if held else KEY_INF)
                hi_c = max(hi_c, kq if held else KEY_NEG_INF)
        else:
            for j in range(e - s):
                g = Gs[j] + k * (np.float64(As[j]) - np.float64(Bs[j]))
                Gs[j] = g
                kg = order_key(g)
                lo_all = min(lo_all, kg)
                hi_mass = max(hi_mass, kg if gs[j] > 0.0 else KEY_NEG_INF)
        ext[0, c], ext[1, c] = from_order_key(lo_all), from_order_key(hi_mass)
        ext[2, c], ext[3, c] = from_order_key(lo_c), from_order_key(hi_c)
    gmin, gmax = ext[0].min(), ext[1].max()
    r = _first_at(G, gamma, slot_of, lo, hi, ext[0], gmin, False, False)
    q = _first_at(G, gamma, slot_of, lo, hi, ext[1], gmax, True, False)
    rc = qc = -1
    if cached:
        rc = _first_at(G, gamma, slot_of, lo, hi, ext[2], ext[2].min(), False, True)
        qc = _first_at(G, gamma, slot_of, lo, hi, ext[3], ext[3].max(), True, True)
    return gmin, gmax, r, q, rc, qc


@njit(cache=True)
def _second_order_q(G, gamma, hq, Kr, r, lo, hi, a2, slot_of, frac):
    """LIBSVM's second-order choice of the pair's second row, given r: among the rows q in
    lo..hi-1 with mass and G_q > G_r, the one of largest (G_q - G_r)^2 / H_rq, the decrease of
    the exact step along the pair before its clip; H_rq = hq_r + hq_q - 2 a2 k(x_r, x_q) with
    hq = a2 diag(K) + 2 lam / w, ``Kr`` the kernel row of r. An uncached q gives way to the best
    cached one (``slot_of`` >= 0) when that scores at least ``frac``^2 as much. By chunks of
    :data:`_SELECT_CHUNK` rows, the maxima over order keys of the scores; -1 when no row
    qualifies."""
    n_chunks = (hi - lo + _SELECT_CHUNK - 1) // _SELECT_CHUNK
    ext = np.zeros((2, max(n_chunks, 1)), dtype=np.int64)
    gr, hr = G[r], hq[r]
    for c in range(n_chunks):
        s = lo + c * _SELECT_CHUNK
        e = min(s + _SELECT_CHUNK, hi)
        Gs, gs, hs, ks, Ss = G[s:e], gamma[s:e], hq[s:e], Kr[s:e], slot_of[s:e]
        best = best_c = 0
        for j in range(e - s):
            key = order_key(_pair_score(Gs[j] - gr, hr + hs[j] - 2.0 * a2 * np.float64(ks[j]), gs[j]))
            best = max(best, key)
            best_c = max(best_c, key if Ss[j] >= 0 else 0)
        ext[0, c], ext[1, c] = best, best_c
    top, top_c = ext[0].max(), ext[1].max()
    if top <= 0:
        return -1
    held = top_c > 0 and from_order_key(top_c) >= frac * frac * from_order_key(top)
    key = top_c if held else top
    for c in range(n_chunks):
        if ext[1 if held else 0, c] == key:
            s = lo + c * _SELECT_CHUNK
            for j in range(s, min(s + _SELECT_CHUNK, hi)):
                sc = _pair_score(G[j] - gr, hr + hq[j] - 2.0 * a2 * np.float64(Kr[j]), gamma[j])
                if order_key(sc) == key and (not held or slot_of[j] >= 0):
                    return j
    return -1


@njit(cache=True, inline="always")
def _pair_score(d, h, mass):
    """d^2 / h for a row with mass and d = G_q - G_r > 0 (h floored at _TAU), else 0."""
    return d * d / max(h, _TAU) if mass > 0.0 and d > 0.0 else 0.0


@njit(cache=True)
def _first_at(G, gamma, slot_of, lo, hi, ext, v, mass, held):
    """The first row j in lo..hi-1 with G_j = v (and gamma_j > 0 if ``mass``, a cached row if
    ``held``), searched in the first chunk of :func:`_update_select` whose extremum ``ext[c]``
    is v; -1 when v is infinite (no such row)."""
    if not np.isfinite(v):
        return -1
    for c in range(ext.shape[0]):
        if ext[c] == v:
            s = lo + c * _SELECT_CHUNK
            for j in range(s, min(s + _SELECT_CHUNK, hi)):
                if G[j] == v and (not mass or gamma[j] > 0.0) and (not held or slot_of[j] >= 0):
                    return j
    return -1


@njit(cache=True)
def _select_range(G, gamma, lo, hi):
    """The selection of :func:`_update_select` without an update (k = 0 leaves G as it is)."""
    return _update_select(G, gamma, lo, hi, G, G, 0.0, np.zeros(0, dtype=np.int64))[:4]


@njit(cache=True)
def _rows_combination(cache, rows, C, out):
    """out[k] += sum_t C[k, t] k(x_{rows_t}, .) for every k (kernel rows from the cache, each read
    once for all k; float64 sums whatever the cache's storage type). One combination (the
    gradient's) takes the rows eight at a time (the DCD's :func:`~.dcd._flush`; the cache holds
    at least eight, so none of them is evicted while the others are fetched): 5000 rows of
    magic, 7 -> 3 ms."""
    nk = C.shape[0]
    t0 = 0
    if nk == 1 and cache.slots.shape[0] >= 8:
        ps = np.empty(8, dtype=np.int64)
        while t0 + 8 <= rows.shape[0]:
            for u in range(8):
                cache_row(cache, rows[t0 + u])
                ps[u] = cache.slot_of[rows[t0 + u]]
            _flush(cache.slots, ps, C[0, t0:t0 + 8], 8, out[0])
            t0 += 8
    for t in range(t0, rows.shape[0]):
        K = cache_row(cache, rows[t])
        for k in range(nk):
            c = C[k, t]
            if c != 0.0:
                o = out[k]
                for j in range(o.shape[0]):
                    o[j] += c * K[j]


@njit(cache=True)
def _pair_step(gamma, G, inv_w, lam, g_r, g_q, dist_sq, r, q):
    """Exact clipped step moving mass from q to r (gamma and the penalty part of G updated);
    returns (eps, change of the objective)."""
    H = 2.0 * (1.0 - lam) * dist_sq + 2.0 * lam * (inv_w[r] + inv_w[q])
    Hs = max(_TAU, H)
    eps = (g_q - g_r) / Hs  # > 0 for a violating pair
    if eps >= gamma[q]:  # feasibility: eps in [-gamma_r, gamma_q]
        eps = gamma[q]
        gamma[q] = 0.0
    else:
        gamma[q] -= eps
    gamma[r] += eps
    G[r] += 2.0 * lam * eps * inv_w[r]
    G[q] -= 2.0 * lam * eps * inv_w[q]
    return eps, eps * (g_r - g_q) + 0.5 * eps * eps * H


@njit(cache=True)
def _clear_rows(rows, r, q, delta):
    """delta = 0 after it held a combination of rows r and q (only their entries for CSR rows)."""
    if rows.sparse:
        for i in (r, q):
            for t in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
                delta[nonneg(rows.indices[t])] = 0.0
    else:
        delta[:] = 0.0


@njit(cache=True)
def _linear_delta(rows, r, q, c, v, u, delta):
    """Linear back end: u_j = <x_j, c (x_r - x_q)> for all rows; v += c (x_r - x_q).

    ``delta`` is a zeroed scratch of length d (left zeroed)."""
    if rows.sparse:
        row_axpy(rows, r, c, delta)
        row_axpy(rows, r, c, v)
        row_axpy(rows, q, -c, delta)
        row_axpy(rows, q, -c, v)
    else:
        X = rows.dense
        for f in range(rows.n_features):
            delta[f] = c * (X[r, f] - X[q, f])
            v[f] += delta[f]
    rows_dot(rows, delta, u)
    _clear_rows(rows, r, q, delta)


@njit(cache=True)
def _linear_dot(rows, r, q, delta):
    """<x_r, x_q>; ``delta`` is a zeroed scratch (left zeroed)."""
    if not rows.sparse:
        return row_dot(rows, q, rows.dense[r])
    row_axpy(rows, r, 1.0, delta)
    s = row_dot(rows, q, delta)
    _clear_rows(rows, r, r, delta)
    return s


@njit(cache=True)
def _smo(kernel, cache, diag, rows, v, y, cached_pair, inv_w, lam, gamma, G, m_pos, tol, it0, max_iter, obj, obj0,
         hist_every, hist, n_hist0):
    """Pair updates until the stopping rule holds or max_iter; rows 0..m_pos-1 are the positive
    class, the rest the negative class.

    Working set: the maximal violating pair of the class with the larger violation. When the
    row cache holds fewer rows than there are examples and ``cached_pair`` > 0, a row of that
    pair that is not cached is replaced by the best cached one of its side (the cached example
    of smallest gradient for r, the cached example with mass and largest gradient for q) if the
    pair still violates by at least ``cached_pair`` times the maximal violation: a step that
    computes no kernel row. Every step is still an exact line minimisation along a violating
    pair, and the stopping rule is checked on the maximal violation, so the optimum and its
    certificate are those of the maximal pairs (a constant-factor working set, as in the
    convergence analyses of SMO-type methods); only the path changes. With such a cache the
    second row of the pair is then LIBSVM's second-order choice given r (:func:`_second_order_q`,
    one more vectorised pass over the class): fewer updates, so fewer rows computed beyond the
    cache (magic, 14 000 rows, 3744 cached: 104 000 -> 58 000 updates, 1.83-1.87 -> 1.46-1.49 s;
    at lam = 0.01 8.0 -> 5.0 s; with every row cached it did not pay: 5000 rows 0.21 -> 0.24 s).

    ``kernel``: kernel rows from the row cache ``cache`` (``diag`` = k(x_i, x_i)); otherwise the
    linear primal on ``rows`` (:class:`~margindist.solvers._rows.Rows`, dense or CSR, no bias column;
    ``diag`` = ||x_i||^2), where ``v`` = sum_i y_i gamma_i x_i is kept up to date. The arguments of
    the other back end are unused placeholders. The count of updates starts at ``it0``
    (a resumed run) and ``max_iter`` caps the total; history entries continue at ``n_hist0``.
    Returns (n_iter, violation, objective, n_hist, status).
    """
    m = G.shape[0]
    a = 2.0 * (1.0 - lam)
    u = np.zeros(1 if kernel else m, dtype=np.float64)
    zero = np.zeros(u.shape[0], dtype=np.float64)
    delta = np.zeros(v.shape[0], dtype=np.float64)
    gmin_p, gmax_p, r_p, q_p = _select_range(G, gamma, 0, m_pos)
    gmin_n, gmax_n, r_n, q_n = _select_range(G, gamma, m_pos, m)
    partial = kernel and cache.slots.shape[0] < m and cached_pair > 0.0
    slots = cache.slot_of if partial else np.zeros(0, dtype=np.int64)
    hq = a * diag + 2.0 * lam * inv_w if partial else np.zeros(0)  # the pair curvature's terms
    rc_p = qc_p = rc_n = qc_n = -1
    n_hist = n_hist0
    it = it0
    viol = 0.0
    while True:
        v_p = gmax_p - gmin_p if q_p >= 0 else 0.0
        v_n = gmax_n - gmin_n if q_n >= 0 else 0.0
        if v_p >= v_n:
            viol, r, q, rc, qc = v_p, r_p, q_p, rc_p, qc_p
        else:
            viol, r, q, rc, qc = v_n, r_n, q_n, rc_n, qc_n
        if partial:  # a pair of cached rows (or one) that violates nearly as much: no kernel row to compute
            rc = r if cache.slot_of[r] >= 0 else rc
            qc = q if cache.slot_of[q] >= 0 else qc
            if rc >= 0 and qc >= 0 and (rc != r or qc != q) and G[qc] - G[rc] >= cached_pair * viol:
                r = rc
                q = qc
        if viol <= tol * 2.0 * abs(obj):
            return it, viol, obj, n_hist, _CONVERGED
        if lam == 0.0 and obj <= _HULL_TOUCH * obj0:
            return it, viol, obj, n_hist, _HULLS_TOUCH
        if it >= max_iter:
            return it, viol, obj, n_hist, _MAX_ITER
        g_r = G[r]
        g_q = G[q]
        yc = y[r]
        if kernel:
            Kr = cache_row(cache, r)
            if partial:  # LIBSVM's second-order choice of q (fewer updates, fewer rows computed)
                q2 = _second_order_q(G, gamma, hq, Kr, r, 0 if r < m_pos else m_pos, m_pos if r < m_pos else m,
                                     a, slots, cached_pair)
                if q2 >= 0:
                    q, g_q = q2, G[q2]
            Kq = cache_row(cache, q)  # the LRU keeps r's slot: it was used last
            dist_sq = diag[r] + diag[q] - 2.0 * np.float64(Kr[q])
            eps, d_obj = _pair_step(gamma, G, inv_w, lam, g_r, g_q, dist_sq, r, q)
            # s_j += y_c eps (k(x_r, x_j) - k(x_q, x_j));  G_j += 2 (1 - lam) y_j (change of s_j)
            k = a * yc * eps
            gmin_p, gmax_p, r_p, q_p, rc_p, qc_p = _update_select(G, gamma, 0, m_pos, Kr, Kq, k, slots)
            gmin_n, gmax_n, r_n, q_n, rc_n, qc_n = _update_select(G, gamma, m_pos, m, Kr, Kq, -k, slots)
        else:
            dist_sq = diag[r] + diag[q] - 2.0 * _linear_dot(rows, r, q, delta)
            eps, d_obj = _pair_step(gamma, G, inv_w, lam, g_r, g_q, dist_sq, r, q)
            _linear_delta(rows, r, q, yc * eps, v, u, delta)
            gmin_p, gmax_p, r_p, q_p = _update_select(G, gamma, 0, m_pos, u, zero, a, slots)[:4]
            gmin_n, gmax_n, r_n, q_n = _update_select(G, gamma, m_pos, m, u, zero, -a, slots)[:4]
        obj += d_obj
        it += 1
        if hist_every > 0 and it % hist_every == 0 and n_hist < hist.shape[0]:
            hist[n_hist] = obj
            n_hist += 1


@njit(cache=True)
def _gather_block(cache, idx, out, lower=False):
    """out[a, b] = k(x_{idx_a}, x_{idx_b}) from the cached rows (the principal block of K on idx);
    with ``lower`` only b <= a (the upper triangle is left as it was). Four rows a pass share
    the loads of idx (when the cache holds four rows: none of them is evicted while the others
    are fetched): a triangle of 4000 of 5000 float32 rows, 7.1 -> 4.6 ms."""
    n = idx.shape[0]
    a = 0
    if cache.slots.shape[0] >= 4:
        while a + 4 <= n:
            r0, r1 = cache_row(cache, idx[a]), cache_row(cache, idx[a + 1])
            r2, r3 = cache_row(cache, idx[a + 2]), cache_row(cache, idx[a + 3])
            o0, o1, o2, o3 = out[a], out[a + 1], out[a + 2], out[a + 3]
            for b in range(a + 1 if lower else n):
                j = idx[b]
                o0[b], o1[b], o2[b], o3[b] = r0[j], r1[j], r2[j], r3[j]
            if lower:  # the rest of the four rows' triangle
                j1, j2, j3 = idx[a + 1], idx[a + 2], idx[a + 3]
                o1[a + 1] = r1[j1]
                o2[a + 1], o2[a + 2] = r2[j1], r2[j2]
                o3[a + 1], o3[a + 2], o3[a + 3] = r3[j1], r3[j2], r3[j3]
            a += 4
    for a in range(a, n):
        row = cache_row(cache, idx[a])
        o = out[a]
        for b in range(a + 1 if lower else n):
            o[b] = row[idx[b]]


# --------------------------------------------------------------------------------------
# Python drivers
# --------------------------------------------------------------------------------------

_STATUS = {_CONVERGED: "converged", _MAX_ITER: "max_iter", _HULLS_TOUCH: "hulls_touch"}


def _check_inputs(y, sample_weight, lam):
    y = np.ascontiguousarray(y, dtype=np.float64)
    if y.ndim != 1 or not np.all(np.abs(y) == 1.0):
        raise ValueError("y must be a 1-d array of labels in {-1, +1}.")
    if not ((y > 0).any() and (y < 0).any()):
        raise ValueError("KM-OMD needs examples of both classes.")
    w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if w.shape != y.shape or not np.all(np.isfinite(w)) or not np.all(w > 0):
        raise ValueError("sample_weight must be positive and finite, one per example.")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must lie in [0, 1]; got {lam!r}.")
    return y, np.ascontiguousarray(w)


def initial_distribution(y, sample_weight, kind):
    """A feasible start: ``"uniform"``: gamma_i = w_i / W_c (the lam = 1 solution);
    ``"vertex"``: all mass of each class on its first example of largest weight."""
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(sample_weight, dtype=np.float64)
    gamma = np.zeros_like(w)
    for sign in (1.0, -1.0):
        idx = np.flatnonzero(y == sign)
        if kind == "uniform":
            gamma[idx] = w[idx] / w[idx].sum()
        elif kind == "vertex":
            gamma[idx[np.argmax(w[idx])]] = 1.0
        else:
            raise ValueError(f"init must be 'uniform' or 'vertex'; got {kind!r}.")
    return gamma


def kmomd_objective(spec_or_gram, X, y, gamma, lam, sample_weight=None):
    """L(gamma) evaluated from scratch (from a kernel or a Gram matrix; for tests and checks)."""
    y = np.asarray(y, dtype=np.float64)
    gamma = np.asarray(gamma, dtype=np.float64)
    w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    c = y * gamma
    if isinstance(spec_or_gram, KernelSpec):
        if spec_or_gram.kind == "precomputed":
            Kc = np.asarray(X, dtype=np.float64) @ c
        else:
            Kc = kernel_decision(spec_or_gram, X, X, c)
    else:
        Kc = np.asarray(spec_or_gram, dtype=np.float64) @ c
    return float((1.0 - lam) * (c @ Kc) + lam * np.sum(gamma**2 / w))


def _feasible_start(gamma0, y, w, perm):
    """A warm-start distribution (caller's order) made exactly feasible for (y, w) in solver order:
    negative entries dropped and each class renormalised to 1; a class without mass falls back to
    its first example of largest weight."""
    g = np.maximum(np.asarray(gamma0, dtype=np.float64).ravel(), 0.0)
    if g.shape != y.shape or not np.all(np.isfinite(g)):
        raise ValueError(f"init must be a finite distribution of length {y.size}; got shape {g.shape}.")
    if perm is not None:
        g = g[perm]
    fallback = initial_distribution(y, w, "vertex")
    for sign in (1.0, -1.0):
        cls = y == sign
        total = g[cls].sum()
        g[cls] = g[cls] / total if total > 0 else fallback[cls]
    return g


def _dummy_cache():
    return KernelRowCache(KernelSpec("precomputed"), np.zeros((1, 1)), max_bytes=16).state


def _class_order(y):
    """Stable permutation putting the positive class first (None if y is already in that order)."""
    perm = np.argsort(-y, kind="stable")
    return None if np.array_equal(perm, np.arange(y.size)) else perm


class _SMORun:
    """The SMO on class-ordered rows, resumable: :meth:`run` continues from the current
    (gamma, G) up to a total of ``max_iter`` updates; the history and the count carry over."""

    def __init__(self, kernel, cache_state, diag, rows, v, y, w, lam, gamma, G, *, tol, history_every,
                 cached_pair=0.0):
        self.args = (kernel, cache_state, diag, rows, v, y, float(cached_pair))
        self.y, self.w, self.lam, self.tol = y, w, float(lam), float(tol)
        self.inv_w = 1.0 / w
        self.gamma, self.G = gamma, np.ascontiguousarray(G, dtype=np.float64)
        self.m_pos = int(np.count_nonzero(y > 0))
        self.obj = self.obj0 = 0.5 * float(gamma @ self.G)  # sum_j gamma_j G_j = 2 L
        self.hist_every = int(history_every or 0)
        self.hist = [np.array([self.obj])]
        self.it, self.violation, self.status = 0, np.inf, "max_iter"

    def run(self, max_iter):
        he = self.hist_every
        n_new = min(max(max_iter - self.it, 0) // he + 2, 1_000_000) if he > 0 else 1
        hist = np.zeros(n_new)
        it, viol, obj, n_hist, status = _smo(*self.args, self.inv_w, self.lam, self.gamma, self.G, self.m_pos,
                                             self.tol, self.it, int(max_iter), self.obj, self.obj0, he, hist, 0)
        self.hist.append(hist[:n_hist])
        self.it, self.violation, self.obj, self.status = int(it), float(viol), float(obj), _STATUS[status]
        return self

    def restart(self, gamma, G):
        """Continue from another feasible point (with its exact gradient G)."""
        self.gamma[:] = gamma
        self.G[:] = G
        self.obj = 0.5 * float(gamma @ G)

    @property
    def history(self):
        return np.concatenate(self.hist)


def _result(gamma, s, y, w, lam, it, viol, status, history, perm=None, coef=None):
    gamma = np.maximum(gamma, 0.0)
    obj = float((1.0 - lam) * np.sum(y * gamma * s) + lam * np.sum(gamma**2 / w))
    theta = 0.5 * float(gamma @ s)
    if perm is not None:  # back to the caller's row order
        gamma_out, s_out = np.empty_like(gamma), np.empty_like(s)
        gamma_out[perm], s_out[perm] = gamma, s
        gamma, s = gamma_out, s_out
    return KMOMDResult(gamma=gamma, scores=s, theta=theta, objective=obj, n_iter=int(it),
                       converged=status == "converged", violation=viol, status=status, history=history,
                       coef=coef)


#: ``newton="auto"`` runs the active-set Newton phase (for a problem of any size: a small one whose
#: SMO creeps, e.g. under very unequal sample weights, is solved in a few direct iterations;
#: titanic's 150 training rows at lam = 0.001: the SMO alone took 51 007 pair updates in 56 ms,
#: 302 and the phase take 2.5 ms) when the SMO's violation after 2 m updates is still above
#: this many times the stopping threshold...
_NEWTON_GAP = 10.0
#: ... after this many pair updates per example without convergence.
_NEWTON_AFTER = 2
#: ... and from a warm start. A neighbouring lam's support can be far larger than this one's
#: (satimage's pairs, RBF at gamma = 4e-4, lam 0.2 -> 0.015: the Newton phase on the previous
#: support took longer than the cold fit): the SMO first moves from it for m updates.
_NEWTON_AFTER_WARM = 1
#: With a partial cache the SMO goes on for at most this many m updates before the Newton phase,
#: while it is projected to converge within them (:func:`_smo_while_fast`). With 8, the phase
#: took over at 4 m on 20 000 rows of two Gaussian classes (lam = 0.01; 287 products, 15.1 s)
#: where the SMO alone finished at 11.7 m (11.4 s); with 16 the SMO finishes there, and the
#: phase still takes over at 3-4 m on magic (lam = 0.01: 63 m for the SMO alone; lam = 0.03).
_NEWTON_PARTIAL_BUDGET = 16
#: At most this many active-set iterations (the phase usually ends after 4-10).
_NEWTON_MAX_ITER = 30
_EARLY_TOL = 0.01
#: At most this many Nystrom landmarks in the preconditioner...
_NEWTON_RANK = 300
#: ... and with a partial cache, where a product with a support larger than the cache computes
#: most of its kernel values, so that fewer products repay the larger factor (magic, 14 000
#: rows, 3744 cached, lam = 0.01: 556 landmarks, 106 products instead of 204; a rank of 900
#: took 67 products but as long in all, its factor costing O(m rank^2)).
_NEWTON_RANK_PARTIAL = 600
#: Conjugate-gradient iterations per active-set iteration, at most.
_NEWTON_MAX_CG = 300
#: From a support of at most this many examples the Newton phase solves its systems directly
#: (Cholesky of the principal block of H on the support, O(n^3 / 3) per iteration) instead of by
#: preconditioned conjugate gradients (whose Nystrom preconditioner costs about as much to make).
_NEWTON_DIRECT_MAX = 400


def _newton_phase(cache, y, w, lam, gamma, tol, block_bytes):
    """Primal-dual active-set (semismooth Newton) iterations from the support of ``gamma``.

    On a fixed candidate support I the problem is an equality-constrained quadratic program:
    H_II gamma_I = nu_+ e_+ + nu_- e_- with H = 2 (1 - lam) Y K Y + 2 lam W^-1 and the class sums
    equal to 1, i.e. two solves with H_II and a 2 x 2 system for the multipliers nu. Then I is
    updated (Hintermueller, Ito, Kunisch 2002): examples of I whose weight came out negative leave,
    examples outside whose gradient is below their class's multiplier enter; when I no longer
    changes, the KKT conditions hold (up to the accuracy of the solves); the phase ends earlier at
    an iterate without negative weights that meets the SMO's stopping rule (its gradient is
    computed for the update of I anyway). The solves are conjugate
    gradients with two right-hand sides (one pass over the kernel rows of I per iteration for
    both), preconditioned by P = 2 (1 - lam) Y (F^T F + diag(d)) Y + 2 lam W^-1 from a pivoted
    partial Cholesky factor F of K (Nystrom landmarks chosen greedily among the starting support,
    residual diagonal d) and the Woodbury identity; from a support of at most
    ``_NEWTON_DIRECT_MAX`` examples (when the m x m block fits in ``block_bytes``) they are
    direct (Cholesky of H_II, no preconditioner to build).

    The products with K_II read the principal block of K on I, gathered once per iteration when
    it fits in ``block_bytes``, else the full cached rows of I, or, when the cache holds fewer
    rows than I, the cached ones (the cache first filled with rows of I) and the triangle of the
    others, computed at each product (:func:`_kernel_block_product`). Returns (gamma, G,
    iterations, conjugate-gradient products with H) with gamma feasible (negative weights
    dropped, each class renormalised) and G its exact gradient, or None when a class loses its
    support or the phase ends without a point.
    """
    from scipy.linalg import cho_factor

    state, m = cache.state, y.shape[0]
    a2, b2 = 2.0 * (1.0 - lam), 2.0 * lam
    inv_w = 1.0 / w
    pos = y > 0
    n_sv = int(np.count_nonzero(gamma > 0))  # the systems are of the support's size
    direct = n_sv <= _NEWTON_DIRECT_MAX and m * m * cache.dtype.itemsize <= block_bytes
    if direct:
        rank, F, dres = 0, None, None
    else:
        diag = np.ascontiguousarray(cache.diag, dtype=np.float64)
        rank_max = _NEWTON_RANK if cache.n_slots >= m else _NEWTON_RANK_PARTIAL
        r_max = int(min(rank_max, m, max(cache.n_slots // 4, 1)))
        F = np.zeros((r_max, m), dtype=np.float32)  # a preconditioner's factor: float32 halves its reads
        # landmarks among the starting support: the residual matters on the examples that carry weight
        rank, dres = pivoted_cholesky(state, diag, gamma > 0, r_max, 0.05 * lam / ((1.0 - lam) * w.max()), F,
                                       np.zeros(r_max, dtype=np.int64))
        F = F[:rank]
    I = gamma > 0
    final_tol = max(0.1 * tol, 1e-10)
    cg_tol, prev_changes, stalls = final_tol if direct else _EARLY_TOL, np.inf, 0
    gI = idx = M = None
    block = [None]  # one buffer for the principal blocks of every iteration
    I_M = np.zeros(m, dtype=bool)
    X_prev = np.zeros((2, m))
    n_it = n_cg = 0
    for n_it in range(1, _NEWTON_MAX_ITER + 1):
        idx = np.flatnonzero(I)
        n = idx.size
        if not (pos[idx].any() and (~pos[idx]).any()):
            return None
        yI, iwI = y[idx], inv_w[idx]
        B = np.vstack([pos[idx], ~pos[idx]]).astype(np.float64)
        if direct:
            Xs = _direct_two_rhs(cache, idx, yI, a2, b2 * iwI, B, block)
        else:
            Dp = a2 * dres[idx] + b2 * iwI
            rDp = np.sqrt(Dp)
            As = prec = None  # the last iteration's rank x n array goes before this one's comes
            As = _scaled_columns(F, idx, rDp)  # F_I diag(Dp)^(-1/2) in float64
            if rank:  # M = I + 2 (1 - lam) As As^T, updated for the examples that changed
                M = _update_capacitance(M, F, As, I, I_M, a2, b2 * inv_w, dres)
                I_M = I.copy()
            prec = _woodbury_preconditioner(Dp, yI / rDp, As, cho_factor(M) if rank else None, a2)
            kmul = _kernel_block_product(cache, idx, block_bytes, block)

            def hmul(V, yI=yI, iwI=iwI, kmul=kmul):
                return a2 * yI * kmul(V * yI) + b2 * iwI * V

            Xs = X_prev[:, idx]  # warm start: the previous solutions, 0 on examples that just entered
            n_cg += _cg_two_rhs(hmul, prec, B, Xs, first=n_it == 1, cg_tol=cg_tol, final_tol=final_tol)
        X_prev[:] = 0.0
        X_prev[:, idx] = Xs
        S = Xs @ B.T  # S[c, c'] = sum over class c' of the solution for class c
        try:
            nu = np.linalg.solve(S.T, np.ones(2))
        except np.linalg.LinAlgError:
            return None
        gI = nu @ Xs
        g = np.zeros(m)
        g[idx] = gI
        G = _kmomd_gradient(cache, y, g, idx, a2, b2 * inv_w)
        if np.all(gI >= 0.0) and _violation(G, g, pos) <= tol * abs(float(g @ G)):
            return g, G, n_it, n_cg  # feasible, and it meets the SMO's stopping rule
        I_new = (I & (g > 0)) | (~I & (G < np.where(pos, nu[0], nu[1])))
        changes = int(np.count_nonzero(I_new != I))
        if cg_tol > final_tol and (changes <= 0.05 * n or changes >= prev_changes):
            cg_tol = final_tol  # near the end (or cycling on inexact solves): solve accurately
        elif changes == 0:
            break
        elif changes >= prev_changes:
            stalls += 1
            if stalls >= 3:
                break
        prev_changes = changes
        I = I_new
    out = _feasible_point(cache, y, idx, gI, pos, a2, b2 * inv_w)
    return None if out is None else (*out, n_it, n_cg)


def _direct_two_rhs(cache, idx, yI, a2, b2_iwI, B, block):
    """The solutions of H_II X = B (rows of B and X), H_II = a2 Y K_II Y + diag(b2_iwI), by a
    Cholesky factorisation (a symmetric indefinite one for a kernel that is not positive
    semi-definite), the principal block gathered into ``block[0]``."""
    n = idx.size
    if block[0] is None or block[0].size < n * n:
        block[0] = np.empty(n * n, dtype=cache.dtype)
    Kb = block[0][: n * n].reshape(n, n)
    _gather_block(cache.state, idx, Kb)
    H = (a2 * yI)[:, None] * Kb * yI[None, :]
    H[np.diag_indices(n)] += b2_iwI
    try:
        return sla.cho_solve(sla.cho_factor(H, lower=True, check_finite=False), B.T, check_finite=False).T
    except np.linalg.LinAlgError:
        return sla.solve(H, B.T, assume_a="sym", check_finite=False).T


@njit(cache=True)
def _scaled_columns(F, idx, scale):
    """F[:, idx] / scale in float64, gathered row by row of F (no float32 copy of the whole;
    300 x 4000 of 5000 columns: 1.8 ms against 5.2 ms for NumPy's fancy indexing by blocks)."""
    out = np.empty((F.shape[0], idx.shape[0]))
    for r in range(F.shape[0]):
        Fr, o = F[r], out[r]
        for b in range(idx.shape[0]):
            o[b] = Fr[idx[b]] / scale[b]
    return out


def _update_capacitance(M, F, As, I, I_M, a2, b2_inv_w, dres):
    """M = I + a2 F_I diag(1 / Dp) F_I^T = I + a2 As As^T: afresh, or by the rank updates of the
    examples that entered or left I since M was made (on support I_M)."""
    changed = np.flatnonzero(I != I_M)
    if M is None or changed.size > As.shape[1] // 2:
        return np.eye(F.shape[0]) + a2 * (As @ As.T)
    Fc = F[:, changed].astype(np.float64)
    sign = np.where(I[changed], 1.0, -1.0)
    M += a2 * ((Fc * (sign / (a2 * dres[changed] + b2_inv_w[changed]))) @ Fc.T)
    return M


def _woodbury_preconditioner(Dp, q, As, Mf, a2):
    """R -> P^-1 R for P = diag(Dp) + a2 Y A^T A Y by the Woodbury identity, from the scaled
    As = A diag(Dp)^(-1/2) and q = y / sqrt(Dp): P^-1 = D^-1 - a2 D^-1 Y A^T M^-1 A Y D^-1 with
    M = I + a2 As As^T, and D^-1 Y A^T = diag(q) As^T (Mf: the Cholesky factor of M; None
    without landmarks)."""
    from scipy.linalg import cho_solve

    def prec(R):
        out = R / Dp
        if Mf is not None:
            out -= a2 * q * (cho_solve(Mf, As @ (R * q).T).T @ As)
        return out

    return prec


def _smo_while_fast(smo, m, max_iter, tol):
    """With a partial cache the Newton phase can meet a support larger than the cache, and then
    computes most of its kernel values at every product (at 14 000 rows of magic a product cost
    as much as about 1300 SMO updates, a phase 50-300 products). Before it, the SMO goes on by m
    updates at a time while its violation, falling at the rate of the last m updates, would
    reach the stopping rule within :data:`_NEWTON_PARTIAL_BUDGET` m updates from here. Returns
    whether the Newton phase should run (the SMO neither converged nor will soon)."""
    budget = _NEWTON_PARTIAL_BUDGET
    v0 = smo.violation
    while budget > 0 and smo.status == "max_iter" and smo.it < max_iter:
        smo.run(min(max_iter, smo.it + m))
        budget -= 1
        v1, target = smo.violation, tol * 2.0 * abs(smo.obj)
        if smo.status != "max_iter" or v1 <= target:
            return False
        if not v1 < v0 or np.log(v1 / target) > budget * np.log(v0 / v1):
            return True
        v0 = v1
    return smo.status == "max_iter" and smo.it < max_iter


def _kernel_block_product(cache, idx, block_bytes, block):
    """V -> V K_II: from the principal block of K on I, gathered once into ``block[0]`` (reused
    across iterations) when it fits in ``block_bytes``, else from the full cached rows of I, or,
    when the cache cannot hold them all, by :meth:`~margindist.kernels.KernelRowCache.dot` on I
    (the rows of I that are cached, and the triangle of the others computed at each product).
    In that case the cache is first filled with rows of I, those already cached kept: a row
    costs one pass, and its values then serve every product of the iteration (magic, 14 000
    rows, 3744 cached, a support of 9400: most of the cache held rows outside it, and the
    products took 6.6 s of a 13 s fit instead of 4.9 s)."""
    state, n, m = cache.state, idx.size, cache.diag.shape[0]
    if n > cache.n_slots:
        held = state.slot_of[idx] >= 0  # the rows of I already cached stay; the others fill the rest
        cache.prefill(np.concatenate([idx[held], idx[~held]]))

        def kmul_dot(V):
            full = np.zeros((m, V.shape[0]))
            full[idx] = V.T
            return cache.dot(full, rows=idx)[idx].T
        return kmul_dot
    if n * n * cache.dtype.itemsize <= block_bytes:
        if block[0] is None or block[0].size < n * n:
            block[0] = np.empty(min(2 * n * n, block_bytes // cache.dtype.itemsize), dtype=cache.dtype)
        Kb = block[0][: n * n].reshape(n, n)
        _gather_block(state, idx, Kb, True)

        def kmul(V):
            out = np.empty_like(V)
            sym_rows(Kb, V, out)
            return out
        return kmul

    def kmul_rows(V):
        full = np.zeros((V.shape[0], m))
        _rows_combination(state, idx, V, full)
        return full[:, idx]
    return kmul_rows


def _cg_two_rhs(hmul, prec, B, Xs, *, first, cg_tol, final_tol):
    """Preconditioned conjugate gradients for H Xs = B (two right-hand sides, rows of B), from
    Xs in place; stops at the relative residual ``cg_tol`` or, once ``cg_tol <= final_tol``, at
    the absolute residual ``final_tol``. Returns the number of products with H."""
    R = B.copy() if first else B - hmul(Xs)
    Z = prec(R)
    P = Z.copy()
    rz = np.sum(R * Z, axis=1)
    for it in range(_NEWTON_MAX_CG + 1):
        if it == _NEWTON_MAX_CG or (np.max(np.abs(R)) <= final_tol if cg_tol <= final_tol else
                np.max(np.sum(R * R, axis=1) / np.sum(B, axis=1)) <= cg_tol * cg_tol):
            return it + (not first)
        HP = hmul(P)
        alpha = rz / np.sum(P * HP, axis=1)
        Xs += alpha[:, None] * P
        R -= alpha[:, None] * HP
        Z = prec(R)
        rz_new = np.sum(R * Z, axis=1)
        P = Z + (rz_new / rz)[:, None] * P
        rz = rz_new


def _kmomd_gradient(cache, y, g, rows, a2, b2_inv_w):
    """The gradient a2 Y K Y g + b2 W^-1 g of the dual at g (non-zero on ``rows``): from the rows
    through the cache, or, when the cache cannot hold them all, by
    :meth:`~margindist.kernels.KernelRowCache.dot` (which computes each missing value once instead
    of evicting and recomputing whole rows)."""
    if rows.size > cache.n_slots:
        s = cache.dot(y * g)
    else:
        s_all = np.zeros((1, y.shape[0]))
        _rows_combination(cache.state, rows, (y[rows] * g[rows])[None, :], s_all)
        s = s_all[0]
    return a2 * y * s + b2_inv_w * g


def _violation(G, gamma, pos):
    """The SMO's stopping quantity: max over the classes of max_{gamma_j > 0} G_j - min_j G_j."""
    out = 0.0
    for cls in (pos, ~pos):
        out = max(out, float(G[cls & (gamma > 0)].max() - G[cls].min()))
    return out


def _feasible_point(cache, y, idx, gI, pos, a2, b2_inv_w):
    """(gamma, its gradient) from the last iterate: negative weights dropped and each
    class renormalised; None when a class is left without weight."""
    g = np.zeros(y.shape[0])
    g[idx] = np.maximum(gI, 0.0)
    for cls in (pos, ~pos):
        total = g[cls].sum()
        if not total > 0:
            return None
        g[cls] /= total
    return g, _kmomd_gradient(cache, y, g, np.flatnonzero(g > 0), a2, b2_inv_w)


def kmomd_kernel(spec: KernelSpec, X, y, sample_weight=None, lam=0.1, *, tol=1e-3, max_iter=10_000_000,
                 max_bytes=DEFAULT_CACHE_BYTES, init="vertex", history_every=0, dtype=np.float64,
                 newton="auto", shared=None, cached_pair=CACHED_PAIR) -> KMOMDResult:
    """KM-OMD by pair SMO with kernel rows from the LRU row cache (any kernel incl. precomputed),
    accelerated by an active-set Newton phase.

    Parameters
    ----------
    spec : KernelSpec
        The resolved kernel.
    X : ndarray or CSR matrix of shape (m, d), or the (m, m) Gram matrix for "precomputed".
    y : ndarray of shape (m,), labels in {-1, +1}.
    sample_weight : ndarray of shape (m,), optional
        Positive prior masses w_i (None: ones).
    lam : float in [0, 1]
        0: hard margin (nearest points of the two convex hulls); 1: centroids (closed form).
    tol : float
        Stop when the largest within-class violation max G - min G is <= tol * 2 L(gamma)
        (relative objective gap <= 2 tol).
    max_iter : int
        Cap on pair updates.
    max_bytes : int
        Row-cache budget in bytes.
    init : {"vertex", "uniform"} or ndarray of shape (m,)
        Start point: one example per class (two kernel rows), the weighted centroid (one
        O(m^2) kernel product), or a distribution to start from (a warm start: e.g. the
        solution for another lam; made feasible by renormalising each class; O(m n_SV) kernel
        evaluations).
    history_every : int
        Record the objective every this many updates (0: only the start value). After the
        Newton phase, its objective is recorded as well.
    dtype : {np.float64, np.float32}
        Storage of the cached kernel rows (see :class:`~margindist.kernels.KernelRowCache`);
        gradients and objective are accumulated in float64 either way. With float32 the solver
        works on the kernel rounded to float32 (relative 6e-8), which suits tol >= 1e-5.
    newton : {"auto", True, False}
        After 2 m pair updates without convergence (m from a warm-start ``init``), run
        :func:`_newton_phase` (primal-dual active set with preconditioned conjugate gradients)
        from the SMO's support, and continue the SMO from its point when that is better (the SMO
        then only checks, or completes, the stopping rule). It needs the kernel rows of the
        support in the cache at once (else it is skipped). "auto": for 0 < lam < 1,
        when the violation is still above 10 times the stopping threshold. The objective never
        increases either way.
    shared : callable(key, make) -> KernelRowCache, optional
        Keeps the row cache for later calls on the same X (a grid search: its kernel rows are
        computed once for every value of lam); ``key`` holds the kernel, the budget, the row
        type and the class order, ``make()`` builds the cache.
    cached_pair : float in [0, 1)
        When the budget holds fewer rows than there are examples: a pair step may use cached
        rows in place of the maximal violating pair when they violate by at least this fraction
        of the largest violation (see :func:`_smo`; 0: always the maximal pair). The same
        optimum and stopping rule; 14 000 rows of magic, 27 % of them cached: 37 000 kernel rows
        computed instead of 125 000, 5.8 s instead of 12.4 s.

    The rows are put in class order internally (a permuted copy of X, or of the Gram matrix for
    "precomputed", when the classes are interleaved) so that the update pass runs over
    contiguous memory; the result is in the caller's order. ``n_iter`` counts pair updates,
    ``newton_iter`` the active-set iterations.
    """
    y, w = _check_inputs(y, sample_weight, lam)
    if lam == 1.0:
        return kmomd_centroid(spec, X, y, w)
    if newton not in ("auto", True, False):
        raise ValueError(f"newton must be 'auto', True or False; got {newton!r}.")
    perm = _class_order(y)
    if perm is not None:
        y, w = y[perm], w[perm]
        X = X[np.ix_(perm, perm)] if spec.kind == "precomputed" else X[perm]
    m = y.size
    def make_cache():
        return KernelRowCache(spec, X, max_bytes=max_bytes, dtype=dtype)

    if shared is None:
        cache = make_cache()
    else:  # the caller keeps the rows for later calls on the same data (a grid search)
        order = None if perm is None else perm.tobytes()
        cache = shared((spec, int(max_bytes), np.dtype(dtype).str, order), make_cache)
    warm = not isinstance(init, str)
    if warm:  # a previous solution (warm start), in the caller's row order
        gamma = _feasible_start(init, y, w, perm)
    else:
        gamma = initial_distribution(y, w, init)
    # s = K Y gamma through the cache rows of the examples with mass (the SMO needs them next)
    sv = np.flatnonzero(gamma > 0)
    s = np.zeros((1, m))
    _rows_combination(cache.state, sv, (y[sv] * gamma[sv])[None, :], s)
    G = 2.0 * (1.0 - lam) * y * s[0] + 2.0 * lam * gamma / w
    if not 0.0 <= cached_pair < 1.0:
        raise ValueError(f"cached_pair must lie in [0, 1); got {cached_pair!r}.")
    smo = _SMORun(True, cache.state, np.ascontiguousarray(cache.diag, dtype=np.float64), make_rows(np.zeros((0, 0))),
                  np.zeros(0), y, w, lam, gamma, G, tol=tol, history_every=history_every, cached_pair=cached_pair)
    use_newton = newton is True or (newton == "auto" and 0.0 < lam < 1.0)
    n_newton = n_cg = 0
    if use_newton and lam > 0.0:
        # a warm start is (about) at the support: the Newton phase may start after m updates
        smo.run(min(max_iter, (_NEWTON_AFTER_WARM if warm else _NEWTON_AFTER) * m))
        far = smo.violation > _NEWTON_GAP * tol * 2.0 * abs(smo.obj)  # else the SMO is about to finish
        if far and newton is not True and cache.n_slots < m:  # a partial cache
            far = _smo_while_fast(smo, m, max_iter, tol)
        if smo.status == "max_iter" and smo.it < max_iter and (far or newton is True):
            out = _newton_phase(cache, y, w, lam, smo.gamma, tol, max_bytes // 2)
            if out is not None:
                g_new, G_new, n_newton, n_cg = out
                if 0.5 * float(g_new @ G_new) < smo.obj:
                    smo.restart(g_new, G_new)
                    smo.hist.append(np.array([smo.obj]))
    if smo.status != "converged" or not use_newton:
        smo.run(max_iter)
    gamma, G = smo.gamma, smo.G
    s = y * (G - 2.0 * lam * gamma / w) / (2.0 * (1.0 - lam))
    res = _result(gamma, s, y, w, lam, smo.it, smo.violation, smo.status, smo.history, perm=perm)
    res.newton_iter, res.cg_iter = n_newton, n_cg
    return res


def _waterfill(t, w, lam):
    """argmin over the simplex of sum_i t_i g_i + lam g_i^2 / w_i: g_i = w_i (mu - t_i)_+ / (2 lam)."""
    # shifting t by a constant leaves the minimiser on the simplex unchanged; relative to min(t)
    # the first candidate keeps mu - t_min = 2 lam / w > 0 even when |t| is huge
    t = t - t.min()
    order = np.argsort(t, kind="stable")
    ts, ws = t[order], w[order]
    mu = (2.0 * lam + np.cumsum(ws * ts)) / np.cumsum(ws)
    active = np.flatnonzero(mu > ts)  # the active prefix of the sorted t (k = 0 always qualifies)
    k = active[-1] if active.size else 0
    return np.maximum(w * (mu[k] - t), 0.0) / (2.0 * lam)


def _neg_dual(z, Xc, y, w, lam, m_pos):
    """-D(z) for the linear problem, its gradient and the inner minimiser gamma(z).

    With (1 - lam) ||v||^2 = max_z 2 (1 - lam) <z, v> - (1 - lam) ||z||^2 and the minimax theorem,
    L* = max_z D(z), D(z) = -(1 - lam) ||z||^2 + sum_c min_{gamma_c in simplex}
    sum_{i in c} (t_i gamma_i + lam gamma_i^2 / w_i), t_i = 2 (1 - lam) y_i <z, x_i>. The inner
    minimiser gamma(z) is a water-filling (gamma_i = w_i (mu_c - t_i)_+ / (2 lam)); D is concave
    and continuously differentiable for lam > 0 with gradient 2 (1 - lam) (v(gamma(z)) - z)
    (Danskin), and at its maximiser z = v(gamma(z)), the KM-OMD weight vector. Rows 0..m_pos-1
    are the positive class.
    """
    t = 2.0 * (1.0 - lam) * y * np.asarray(Xc @ z, dtype=np.float64).ravel()
    g = np.empty_like(t)
    g[:m_pos] = _waterfill(t[:m_pos], w[:m_pos], lam)
    g[m_pos:] = _waterfill(t[m_pos:], w[m_pos:], lam)
    v = np.asarray(Xc.T @ (y * g), dtype=np.float64).ravel()
    val = (1.0 - lam) * (z @ z) - (t @ g + lam * np.sum(g * g / w))
    return val, 2.0 * (1.0 - lam) * (z - v), g


def _dual_lbfgs(Xc, y, w, lam, m_pos, max_iter):
    """Start point of the linear SMO: gamma(z) at the maximiser z of the concave dual
    (:func:`_neg_dual`), found by L-BFGS from the centroid direction. Returns (gamma, iterations)."""
    from scipy.optimize import minimize

    z0 = np.asarray(Xc.T @ (y * initial_distribution(y, w, "uniform")), dtype=np.float64).ravel()
    scale = max(abs(_neg_dual(z0, Xc, y, w, lam, m_pos)[0]), 1e-300)  # objective of order 1

    def fun(z):
        val, grad, _ = _neg_dual(z, Xc, y, w, lam, m_pos)
        return val / scale, grad / scale

    res = minimize(fun, z0, jac=True, method="L-BFGS-B",
                   options={"maxiter": int(max_iter), "ftol": 1e-15, "gtol": 1e-12, "maxcor": 20})
    z = res.x
    if Xc.shape[1] <= _MAX_NEWTON_FEATURES:
        z = _active_set_newton(Xc, y, w, lam, m_pos, z)
    return _neg_dual(z, Xc, y, w, lam, m_pos)[2], int(res.nit)


#: The active-set Newton refinement of the linear dual factorises a d x d matrix.
_MAX_NEWTON_FEATURES = 2000


def _active_set_newton(Xc, y, w, lam, m_pos, z, max_steps=10):
    """Exact stationary point of the linear dual for a fixed support (active-set Newton).

    With S_c = {i in c: gamma_i(z) > 0} fixed, the stationarity z = v(gamma(z)) and the class
    sums are linear: (I + (1 - lam) / lam C_S) z = m_+ - m_-, with m_c the weighted mean of x over
    S_c and C_S the summed weighted within-class scatter over S_+ and S_- (a ridge-regularised
    Fisher discriminant on the examples that carry weight). Steps are kept only while they
    increase the dual D; the loop ends when the support no longer changes (then z is exact up to
    rounding). O(nnz(X_S) d + d^3) per step.
    """
    import scipy.linalg as sla

    a = (1.0 - lam) / lam
    d = Xc.shape[1]
    val, _, g = _neg_dual(z, Xc, y, w, lam, m_pos)
    for _ in range(max_steps):
        S = g > 0
        A = np.eye(d)
        rhs = np.zeros(d)
        for sign, rows in ((1.0, slice(0, m_pos)), (-1.0, slice(m_pos, None))):
            idx = np.flatnonzero(S[rows]) + (0 if sign > 0 else m_pos)
            Xs, ws = Xc[idx], w[idx]
            W = ws.sum()
            mean = np.asarray(Xs.T @ ws, dtype=np.float64).ravel() / W
            if sp.issparse(Xs):
                scatter = np.asarray((Xs.T @ Xs.multiply(ws[:, None]).tocsr()).toarray(), dtype=np.float64)
            else:
                scatter = Xs.T @ (Xs * ws[:, None])
            A += a * (scatter - W * np.outer(mean, mean))
            rhs += sign * mean
        try:
            z_new = sla.solve(A, rhs, assume_a="pos", check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            break
        val_new, _, g_new = _neg_dual(z_new, Xc, y, w, lam, m_pos)
        if not val_new <= val + 1e-13 * abs(val):
            break  # the support guess was wrong: keep the better point
        z, val, g = z_new, val_new, g_new
        if np.array_equal(g_new > 0, S):
            break
    return z


def kmomd_linear(X, y, sample_weight=None, lam=0.1, *, tol=1e-3, max_iter=10_000_000, init="vertex",
                 lbfgs_max_iter=1000, history_every=0) -> KMOMDResult:
    """KM-OMD for the linear kernel in the primal: keeps v = sum_i y_i gamma_i x_i (``coef``).

    Dense or CSR X (never densified); O(nnz(X)) per pair update, no kernel cache. Parameters
    as :func:`kmomd_kernel`, and ``init="lbfgs"`` (lam > 0): start the SMO from the maximiser of
    the concave dual in the weight vector (see :func:`_neg_dual`), found by L-BFGS in d
    variables with O(nnz(X) + m log m) per iteration; the SMO then only verifies (and if needed
    completes) the stopping rule. ``n_iter`` counts the pair updates; ``lbfgs_iter`` the L-BFGS
    iterations.
    """
    y, w = _check_inputs(y, sample_weight, lam)
    perm = _class_order(y)
    if perm is not None:
        y, w, X = y[perm], w[perm], X[perm]
    if sp.issparse(X):
        Xc = sp.csr_matrix(X, dtype=np.float64)
        Xc.sort_indices()
    else:
        Xc = np.ascontiguousarray(X, dtype=np.float64)
    rows = make_rows(Xc)
    sqn = row_sq_norms(Xc)
    n_lbfgs = 0
    if lam == 1.0:
        gamma = initial_distribution(y, w, "uniform")
    elif isinstance(init, str) and init == "lbfgs":
        if lam == 0.0:
            raise ValueError("init='lbfgs' needs lam > 0 (at lam = 0 the dual is not differentiable).")
        gamma, n_lbfgs = _dual_lbfgs(Xc, y, w, lam, int(np.count_nonzero(y > 0)), lbfgs_max_iter)
    elif not isinstance(init, str):  # warm start from a previous distribution
        gamma = _feasible_start(init, y, w, perm)
    else:
        gamma = initial_distribution(y, w, init)
    c = y * gamma
    v = np.ascontiguousarray(np.asarray(Xc.T @ c, dtype=np.float64).ravel())
    s = np.asarray(Xc @ v, dtype=np.float64).ravel()
    if lam == 1.0:
        return _result(gamma, s, y, w, lam, 0, 0.0, "converged", np.array([0.0]), perm=perm, coef=v)
    G = 2.0 * (1.0 - lam) * y * s + 2.0 * lam * gamma / w
    smo = _SMORun(False, _dummy_cache(), sqn, rows, v, y, w, lam, gamma, G, tol=tol,
                  history_every=history_every).run(max_iter)
    s = np.asarray(Xc @ v, dtype=np.float64).ravel()  # exact scores from the final v
    res = _result(gamma, s, y, w, lam, smo.it, smo.violation, smo.status, smo.history, perm=perm, coef=v)
    res.lbfgs_iter = n_lbfgs
    return res


def kmomd_centroid(spec: KernelSpec, X, y, sample_weight=None) -> KMOMDResult:
    """lam = 1: gamma_i = w_i / W_c in closed form (the weighted centroid classifier)."""
    y, w = _check_inputs(y, sample_weight, 1.0)
    gamma = initial_distribution(y, w, "uniform")
    c = y * gamma
    if spec.kind == "precomputed":
        s = np.asarray(X, dtype=np.float64) @ c
    else:
        s = kernel_decision(spec, X, X, c)
    return _result(gamma, np.ascontiguousarray(s, dtype=np.float64), y, w, 1.0, 0, 0.0, "converged",
                   np.zeros(0))
