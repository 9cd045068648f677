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
and the weights' scale.)

Layout: the rows are put in class order (positive class first) so that the gradient update and
the pair selection run over two contiguous ranges (no index gathers, no per-row class test).

Threshold (the paper's theta = 1/2 sum_j s_j is wrong): the bisector of the two hull points,
theta = 1/2 <v, v_+ + v_-> = 1/2 sum_j gamma_j s_j; decision f(x) = sum_i y_i gamma_i k(x_i, x) - theta.

Back ends
---------
* :func:`kmomd_kernel`: any kernel; two kernel rows per update from the LRU
  :class:`~margindist.kernels.KernelRowCache` (byte budget, never an m x m matrix above it).
  O(m) per update plus O(m d) per cache miss.
* :func:`kmomd_linear`: linear kernel in the primal; keeps v(gamma) as an explicit vector and
  updates the gradients through X (dense or CSR, never densified). O(nnz(X)) per update, no
  cache.
  With ``init="lbfgs"`` the SMO starts from the maximiser of the concave dual in the weight
  vector (d variables, :func:`_neg_dual`), found by L-BFGS; the SMO then only checks (and if
  needed completes) the stopping rule.
* :func:`kmomd_centroid`: lam = 1, closed form gamma_i = w_i / W_c (the centroid classifier).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numba import njit

from ..kernels import DEFAULT_CACHE_BYTES, KernelRowCache, KernelSpec, cache_row, kernel_decision

__all__ = [
    "KMOMDResult",
    "kmomd_kernel",
    "kmomd_linear",
    "kmomd_centroid",
    "kmomd_objective",
    "initial_distribution",
]

#: Curvature floor for a pair step (LIBSVM's tau): duplicate points at lam = 0, or a kernel that
#: is not positive semi-definite, give H <= 0; the step then goes to the bound of the interval.
_TAU = 1e-12
#: lam = 0 only: stop when ||v||^2 has fallen below this fraction of its start value (the two
#: convex hulls intersect; the hard-margin problem has no margin left to find).
_HULL_TOUCH = 1e-12

# status codes of the SMO
_CONVERGED, _MAX_ITER, _HULLS_TOUCH = 0, 1, 2


@dataclass
class KMOMDResult:
    """Solution of one binary KM-OMD problem.

    gamma : distribution over the rows (each class sums to 1); scores : s_j = <v, phi(x_j)>;
    theta : threshold (decision = <v, phi(x)> - theta); objective : L(gamma);
    n_iter : pair updates; converged : the stopping rule was met; violation : the final largest
    within-class violation; status : "converged", "max_iter" or "hulls_touch" (lam = 0 and the
    convex hulls of the classes intersect); history : objective after every ``history_every``
    updates (first entry: the start point); coef : v as an explicit vector (linear back end);
    lbfgs_iter : L-BFGS iterations of the linear start point (``init="lbfgs"``).
    """

    gamma: np.ndarray
    scores: np.ndarray
    theta: float
    objective: float
    n_iter: int
    converged: bool
    violation: float
    status: str = "converged"
    history: np.ndarray = field(default_factory=lambda: np.zeros(0))
    coef: np.ndarray | None = None
    lbfgs_iter: int = 0


# --------------------------------------------------------------------------------------
# compiled core
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _select_range(G, gamma, lo, hi):
    """(min_j G_j, max_{j: gamma_j > 0} G_j, argmin, argmax) over rows lo..hi-1 (argmax -1 if no
    row carries mass)."""
    gmin = np.inf
    gmax = -np.inf
    r = -1
    q = -1
    for j in range(lo, hi):
        g = G[j]
        if g < gmin:
            gmin = g
            r = j
        gq = g if gamma[j] > 0.0 else -np.inf
        if gq > gmax:
            gmax = gq
            q = j
    return gmin, gmax, r, q


@njit(cache=True)
def _update_select_range(G, gamma, lo, hi, Ka, Kb, k):
    """G_j += k (Ka_j - Kb_j) on rows lo..hi-1, fused with :func:`_select_range` (one pass).

    (Returning the selection rather than writing it into an array argument keeps the loop
    about twice as fast.)"""
    gmin = np.inf
    gmax = -np.inf
    r = -1
    q = -1
    for j in range(lo, hi):
        g = G[j] + k * (Ka[j] - Kb[j])
        G[j] = g
        if g < gmin:
            gmin = g
            r = j
        gq = g if gamma[j] > 0.0 else -np.inf
        if gq > gmax:
            gmax = gq
            q = j
    return gmin, gmax, r, q


@njit(cache=True)
def _scores_from_rows(cache, rows, coef, out):
    """out += sum_t coef_t k(x_{rows_t}, .) from the kernel-row cache."""
    for t in range(rows.shape[0]):
        K = cache_row(cache, rows[t])
        c = coef[t]
        for j in range(out.shape[0]):
            out[j] += c * K[j]


@njit(cache=True)
def _pair_step(gamma, inv_w, lam, g_r, g_q, dist_sq, r, q):
    """Exact clipped step moving mass from q to r; returns (eps, change of the objective)."""
    H = 2.0 * (1.0 - lam) * dist_sq + 2.0 * lam * (inv_w[r] + inv_w[q])
    Hs = H if H > _TAU else _TAU
    eps = (g_q - g_r) / Hs  # > 0 for a violating pair
    if eps >= gamma[q]:  # feasibility: eps in [-gamma_r, gamma_q]
        eps = gamma[q]
        gamma[q] = 0.0
    else:
        gamma[q] -= eps
    gamma[r] += eps
    return eps, eps * (g_r - g_q) + 0.5 * eps * eps * H


@njit(cache=True)
def _linear_delta(mode, Xd, data, indices, indptr, r, q, c, v, u, delta):
    """Linear back end: u_j = <x_j, c (x_r - x_q)> for all rows; v += c (x_r - x_q).

    ``delta`` is a zeroed scratch of length d (left zeroed)."""
    m = u.shape[0]
    if mode == 1:
        d = Xd.shape[1]
        for f in range(d):
            delta[f] = c * (Xd[r, f] - Xd[q, f])
            v[f] += delta[f]
        for j in range(m):
            s = 0.0
            for f in range(d):
                s += Xd[j, f] * delta[f]
            u[j] = s
        for f in range(d):
            delta[f] = 0.0
    else:
        for k in range(indptr[r], indptr[r + 1]):
            delta[indices[k]] += c * data[k]
            v[indices[k]] += c * data[k]
        for k in range(indptr[q], indptr[q + 1]):
            delta[indices[k]] -= c * data[k]
            v[indices[k]] -= c * data[k]
        for j in range(m):
            s = 0.0
            for k in range(indptr[j], indptr[j + 1]):
                s += data[k] * delta[indices[k]]
            u[j] = s
        for k in range(indptr[r], indptr[r + 1]):
            delta[indices[k]] = 0.0
        for k in range(indptr[q], indptr[q + 1]):
            delta[indices[k]] = 0.0


@njit(cache=True)
def _linear_dot(mode, Xd, data, indices, indptr, r, q, delta):
    """<x_r, x_q> for dense (mode 1) or CSR (mode 2) rows; ``delta`` is a zeroed scratch."""
    if mode == 1:
        s = 0.0
        for f in range(Xd.shape[1]):
            s += Xd[r, f] * Xd[q, f]
        return s
    for k in range(indptr[r], indptr[r + 1]):
        delta[indices[k]] = data[k]
    s = 0.0
    for k in range(indptr[q], indptr[q + 1]):
        s += data[k] * delta[indices[k]]
    for k in range(indptr[r], indptr[r + 1]):
        delta[indices[k]] = 0.0
    return s


@njit(cache=True)
def _smo(mode, cache, diag, Xd, data, indices, indptr, v, y, inv_w, lam, gamma, G, m_pos, tol, max_iter,
         obj, obj0, hist_every, hist):
    """Pair updates until the stopping rule holds or max_iter; rows 0..m_pos-1 are the positive
    class, the rest the negative class.

    mode 0: kernel rows from the row cache ``cache`` (``diag`` = k(x_i, x_i)); mode 1: linear
    primal on dense ``Xd`` (``diag`` = ||x_i||^2), mode 2: on CSR (data, indices, indptr); ``v`` =
    sum_i y_i gamma_i x_i is kept up to date in modes 1 and 2.
    Returns (n_iter, violation, objective, n_hist, status).
    """
    m = G.shape[0]
    a = 2.0 * (1.0 - lam)
    b = 2.0 * lam
    u = np.zeros(m if mode != 0 else 1, dtype=np.float64)
    zero = np.zeros(u.shape[0], dtype=np.float64)
    delta = np.zeros(v.shape[0], dtype=np.float64)
    gmin_p, gmax_p, r_p, q_p = _select_range(G, gamma, 0, m_pos)
    gmin_n, gmax_n, r_n, q_n = _select_range(G, gamma, m_pos, m)
    n_hist = 1
    it = 0
    viol = 0.0
    while True:
        v_p = gmax_p - gmin_p if q_p >= 0 else 0.0
        v_n = gmax_n - gmin_n if q_n >= 0 else 0.0
        if v_p >= v_n:
            viol = v_p
            r = r_p
            q = q_p
        else:
            viol = v_n
            r = r_n
            q = q_n
        if viol <= tol * 2.0 * obj:
            return it, viol, obj, n_hist, _CONVERGED
        if lam == 0.0 and obj <= _HULL_TOUCH * obj0:
            return it, viol, obj, n_hist, _HULLS_TOUCH
        if it >= max_iter:
            return it, viol, obj, n_hist, _MAX_ITER
        g_r = G[r]
        g_q = G[q]
        yc = y[r]
        if mode == 0:
            Kr = cache_row(cache, r)
            Kq = cache_row(cache, q)  # the LRU keeps r's slot: it was used last
            dist_sq = diag[r] + diag[q] - 2.0 * Kr[q]
        else:
            Kr = u
            Kq = zero
            dist_sq = diag[r] + diag[q] - 2.0 * _linear_dot(mode, Xd, data, indices, indptr, r, q, delta)
        eps, d_obj = _pair_step(gamma, inv_w, lam, g_r, g_q, dist_sq, r, q)
        G[r] += b * eps * inv_w[r]
        G[q] -= b * eps * inv_w[q]
        if mode == 0:
            # s_j += y_c eps (k(x_r, x_j) - k(x_q, x_j));  G_j += 2 (1 - lam) y_j (change of s_j)
            k = a * yc * eps
        else:
            _linear_delta(mode, Xd, data, indices, indptr, r, q, yc * eps, v, u, delta)
            k = a
        gmin_p, gmax_p, r_p, q_p = _update_select_range(G, gamma, 0, m_pos, Kr, Kq, k)
        gmin_n, gmax_n, r_n, q_n = _update_select_range(G, gamma, m_pos, m, Kr, Kq, -k)
        obj += d_obj
        it += 1
        if hist_every > 0 and it % hist_every == 0 and n_hist < hist.shape[0]:
            hist[n_hist] = obj
            n_hist += 1


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


def _solve(mode, cache_state, diag, Xd, data, indices, indptr, v, y, w, lam, gamma, s, *, tol, max_iter,
           history_every):
    """Run the SMO on class-ordered rows; returns (G, n_iter, violation, status, history)."""
    a, b = 2.0 * (1.0 - lam), 2.0 * lam
    inv_w = 1.0 / w
    G = np.ascontiguousarray(a * y * s + b * gamma * inv_w)
    m_pos = int(np.count_nonzero(y > 0))
    obj = 0.5 * float(gamma @ G)  # sum_j gamma_j G_j = 2 L
    hist_every = int(history_every or 0)
    hist = np.zeros(min(max_iter // hist_every + 2, 1_000_000) if hist_every > 0 else 1)
    hist[0] = obj
    it, viol, obj, n_hist, status = _smo(mode, cache_state, diag, Xd, data, indices, indptr, v, y, inv_w,
                                         float(lam), gamma, G, m_pos, float(tol), int(max_iter), obj, obj,
                                         hist_every, hist)
    return G, int(it), float(viol), _STATUS[status], hist[:n_hist].copy()


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


def kmomd_kernel(spec: KernelSpec, X, y, sample_weight=None, lam=0.1, *, tol=1e-3, max_iter=10_000_000,
                 max_bytes=DEFAULT_CACHE_BYTES, init="vertex", history_every=0) -> KMOMDResult:
    """KM-OMD by pair SMO with kernel rows from the LRU row cache (any kernel incl. precomputed).

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
        Record the objective every this many updates (0: only the start value).

    The rows are put in class order internally (a permuted copy of X, or of the Gram matrix for
    "precomputed", when the classes are interleaved) so that the update pass runs over
    contiguous memory; the result is in the caller's order.
    """
    y, w = _check_inputs(y, sample_weight, lam)
    if lam == 1.0:
        return kmomd_centroid(spec, X, y, w)
    perm = _class_order(y)
    if perm is not None:
        y, w = y[perm], w[perm]
        X = X[np.ix_(perm, perm)] if spec.kind == "precomputed" else X[perm]
    cache = KernelRowCache(spec, X, max_bytes=max_bytes)
    if not isinstance(init, str):  # a previous solution (warm start), in the caller's row order
        gamma = _feasible_start(init, y, w, perm)
    else:
        gamma = initial_distribution(y, w, init)
    if not isinstance(init, str) or init == "uniform":
        # s = K Y gamma through the cache rows of the examples with mass (the SMO needs them next)
        sv = np.flatnonzero(gamma > 0)
        s = np.zeros(y.size)
        _scores_from_rows(cache.state, sv, y[sv] * gamma[sv], s)
    else:
        pos = np.flatnonzero((gamma > 0) & (y > 0))[0]
        neg = np.flatnonzero((gamma > 0) & (y < 0))[0]
        s = cache.row(pos) - cache.row(neg)
    e_f, e_i = np.zeros(0), np.zeros(0, dtype=np.int64)
    G, it, viol, status, hist = _solve(
        0, cache.state, np.ascontiguousarray(cache.diag, dtype=np.float64), np.zeros((0, 0)), e_f, e_i, e_i,
        e_f, y, w, lam, gamma, np.ascontiguousarray(s, dtype=np.float64), tol=tol, max_iter=max_iter,
        history_every=history_every)
    s = y * (G - 2.0 * lam * gamma / w) / (2.0 * (1.0 - lam))
    return _result(gamma, s, y, w, lam, it, viol, status, hist, perm=perm)


def _waterfill(t, w, lam):
    """argmin over the simplex of sum_i t_i g_i + lam g_i^2 / w_i: g_i = w_i (mu - t_i)_+ / (2 lam)."""
    order = np.argsort(t, kind="stable")
    ts, ws = t[order], w[order]
    mu = (2.0 * lam + np.cumsum(ws * ts)) / np.cumsum(ws)
    k = np.flatnonzero(mu > ts)[-1]  # the active prefix of the sorted t (k = 0 always qualifies)
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
        Xd = np.zeros((0, 0))
        data, indices, indptr = Xc.data, Xc.indices.astype(np.int64), Xc.indptr.astype(np.int64)
        sqn = np.asarray(Xc.multiply(Xc).sum(axis=1), dtype=np.float64).ravel()
        mode = 2
    else:
        Xc = Xd = np.ascontiguousarray(X, dtype=np.float64)
        data, indices, indptr = np.zeros(0), np.zeros(0, np.int64), np.zeros(1, np.int64)
        sqn = np.einsum("ij,ij->i", Xd, Xd)
        mode = 1
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
    G, it, viol, status, hist = _solve(
        mode, _dummy_cache(), sqn, Xd, data, indices, indptr, v, y, w, lam, gamma, np.ascontiguousarray(s),
        tol=tol, max_iter=max_iter, history_every=history_every)
    s = np.asarray(Xc @ v, dtype=np.float64).ravel()  # exact scores from the final v
    res = _result(gamma, s, y, w, lam, it, viol, status, hist, perm=perm, coef=v)
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
