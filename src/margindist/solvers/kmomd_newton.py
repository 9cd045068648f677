"""KM-OMD with the linear kernel: semismooth Newton on the dual in the weight vector.

Problem (per binary task, labels y_i in {-1, +1}, prior masses w_i > 0, rows x_i of X)::

    min_gamma  L(gamma) = (1 - lam) ||X^T Y gamma||^2 + lam sum_i gamma_i^2 / w_i
    s.t.       gamma >= 0,  sum_{y_i = +1} gamma_i = 1,  sum_{y_i = -1} gamma_i = 1,

the KM-OMD problem of :mod:`margindist.solvers.kmomd` for k(x, x') = <x, x'>, with
v(gamma) = X^T Y gamma (the model's weight vector).

Dual in the weight vector. With (1 - lam) ||v||^2 = max_z 2 (1 - lam) <z, v> - (1 - lam) ||z||^2
and the minimax theorem, L* = max_z D(z) = -min_z phi(z) with::

    phi(z) = (1 - lam) ||z||^2 - sum_c min_{gamma_c in simplex} sum_{i in c} (t_i gamma_i + lam gamma_i^2 / w_i)
           = (1 - lam) ||z||^2 - sum_c [ mu_c - sum_{i in c} w_i (mu_c - t_i)_+^2 / (4 lam) ],
    t_i = b y_i <x_i, z>,  b = 2 (1 - lam),

where the inner minimiser is the water-filling gamma_i(z) = w_i (mu_c - t_i)_+ / (2 lam), its level
mu_c the root of sum_{i in c} w_i (mu_c - t_i)_+ = 2 lam (the multiplier of the class's sum
constraint; the second line is the Lagrangian minimised over gamma >= 0 and maximised over mu_c).
Written in the d + 2 variables (z, mu_+, mu_-), phi is a convex piecewise-quadratic function of the
form of the L2-loss (squared hinge) SVM primal: a ridge term, a linear term -mu_+ - mu_- and the
squared positive parts of the affine functions mu_c - b y_i <x_i, z>, each class with its own
unregularised "threshold" mu_c. Here mu is eliminated exactly (for fixed z the levels are a
one-dimensional monotone root, found in O(m) by Newton's method from above), which leaves a convex,
continuously differentiable, piecewise-quadratic function of z alone:

* gradient (Danskin): grad phi(z) = b (z - v(gamma(z)));
* generalised Hessian on the active set A = {i: gamma_i(z) > 0}, A_c its part in class c,
  W_c = sum_{A_c} w_i, s_c = sum_{A_c} w_i x_i (differentiating gamma_i through mu_c(z))::

      hess phi(z) = b (I + a C),  a = (1 - lam) / lam,
      C = sum_{i in A} w_i x_i x_i^T - sum_c s_c s_c^T / W_c

  (the weighted within-class scatter of the active rows: positive semi-definite, so the Hessian
  is at least b I, and phi is strongly convex).

At the minimiser z* = v(gamma(z*)), the KM-OMD weight vector, and gamma(z*) is the optimum gamma*.

Method (generalised Newton, as LIBLINEAR's Newton methods for the squared hinge): the direction p
solves (I + a C) p = v - z, directly (Cholesky of the d x d matrix, whose sum over the active
rows is kept up to date by rank updates as rows enter and leave A) when d is small, else by
conjugate gradients with Hessian-vector products X_A^T (w_A (X_A p)) - sum_c s_c <s_c, p> / W_c
(one pass over the active rows, Jacobi preconditioner). The step length is the exact minimiser of
phi along p (phi restricted to the line is convex piecewise quadratic, and with u = X p computed
once every trial point costs O(m): a water-filling on t + alpha b y u). Once the active set has
settled, the full Newton step lands on the minimiser (finite termination).

Stopping rule: the SMO's rule of :mod:`margindist.solvers.kmomd`, checked on gamma(z) itself, so
the result carries the same certificate as the pair SMO: with G the gradient of L at gamma,
G_j = b y_j <x_j, v> + 2 lam gamma_j / w_j, the largest within-class violation
max_{gamma_j > 0} G_j - min_j G_j must be <= tol * 2 L(gamma), which bounds the relative
objective gap by 2 tol. Since t_j + 2 lam gamma_j / w_j = mu_c on A_c and t_j >= mu_c elsewhere,
G_j - mu_c = b y_j <x_j, v - z> on A and G_j >= mu_c + b y_j <x_j, v - z> off A, so the
violation is at most 2 b max_j ||x_j|| ||v - z|| (Cauchy-Schwarz); the rule is checked exactly
(one product X v) once that bound is below the threshold. If it is not met after ``max_iter``
Newton iterations (or a step makes no progress in floating point), the pair SMO continues from
gamma(z) and completes it.

Costs: per Newton iteration one pass over the active rows (v, s_c) and one over all rows (X p),
plus the direction: O(n_changed d^2 + d^3) for the direct solve (O(|A| d^2) the first time), or
one pass over the active rows per conjugate-gradient step. X is read through
:mod:`margindist.solvers._rows` (dense or CSR, float32 or float64 values, never densified; sums
in float64), in the caller's row order; with CSR X the conjugate gradients read a float32 copy of
the active rows (:class:`_ActiveCopy`), made in the gradient's pass.

Started from z = 0 (every row active, gamma the class centroids' weights) or, for a warm start,
from z = v(gamma) of the given distribution.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from ._gram import spd_solve
from ._rows import make_rows, nonneg, row_axpy, row_axpy2, row_dot, row_sq_norm
from .kmomd import KMOMDResult, _check_inputs, _feasible_start, _result, _violation, kmomd_linear

__all__ = ["kmomd_newton"]

#: Direct solves (a d x d Cholesky factorisation) up to this many features, conjugate gradients above.
_DIRECT_MAX_FEATURES = 1000
#: ... whose sum over the active rows is accumulated over blocks of this many values.
_GRAM_BLOCK = 1 << 19
#: Newton iterations before the pair SMO takes over (it usually ends after 5-15).
_MAX_NEWTON_ITER = 100
#: Conjugate-gradient steps per Newton direction, at most.
_MAX_CG = 500
#: Line search: stop when |phi'(alpha)| <= this fraction of |phi'(0)|, or after _MAX_LS trial points.
_LS_SLOPE = 1e-3
_MAX_LS = 40
#: Water-filling: Newton passes over the rows, at most (it ends when the active set repeats).
_MAX_LEVEL_PASSES = 200
#: With conjugate gradients the stopping rule is checked exactly (one product X v) once the bound
#: on the violation is below this many times the threshold (direct solves: once it is below it);
#: the measured violation per unit of |v - z| then sets how accurate the next Newton direction
#: must be: a reduction of |v - z| by _TARGET times the one that would just meet the threshold.
_CHECK_RATIO = 1e4
_TARGET = 0.1
#: The SMO takes over after this many Newton iterations in a row that shrink |v - z| by less than 10 %
#: and phi by less than its rounding.
_MAX_SLOW = 5



# --------------------------------------------------------------------------------------
# compiled kernels
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _levels(t, dt, alpha, pos, w, lam, mu, gamma):
    """The water-filling of both classes at t + alpha dt.

    Fills ``gamma`` (gamma_i = w_i (mu_c - t_i)_+ / (2 lam)) and ``mu`` (the levels; a finite
    ``mu`` on entry is used as the start). Returns (inner, sum_i gamma_i dt_i, curvature, n_active)
    with inner = sum_c min over the simplex (so phi = (1 - lam) ||z||^2 - inner) and curvature =
    sum_A w_i dt_i^2 - sum_c (sum_{A_c} w_i dt_i)^2 / W_c (the second derivative of -inner along
    dt is curvature / (2 lam)). Levels are found relative to each class's smallest t (so a class
    keeps at least its smallest-t example even when |t| dwarfs 2 lam) by Newton's method on the
    convex piecewise-linear f(mu) = sum w_i (mu - t_i)_+ - 2 lam, which ends when the active set
    repeats.
    """
    m = t.shape[0]
    two_lam = 2.0 * lam
    tmin = np.full(2, np.inf)
    W = np.zeros(2)
    S = np.zeros(2)
    for i in range(m):
        c = 0 if pos[i] else 1
        ti = t[i] + alpha * dt[i]
        tmin[c] = min(tmin[c], ti)
        W[c] += w[i]
        S[c] += w[i] * ti
    lev = np.empty(2)  # levels relative to tmin
    for c in range(2):
        start = mu[c] - tmin[c]
        # cold start: the weighted mean plus 2 lam / W is above the root
        lev[c] = start if np.isfinite(start) and start > 0.0 else (S[c] - W[c] * tmin[c] + two_lam) / W[c]
        if not lev[c] > 0.0:
            lev[c] = two_lam / W[c]
    n_prev = np.full(2, -1)
    n = np.zeros(2, dtype=np.int64)
    WA = np.zeros(2)
    SA = np.zeros(2)
    for _ in range(_MAX_LEVEL_PASSES):
        n[:] = 0
        WA[:] = 0.0
        SA[:] = 0.0
        for i in range(m):
            c = 0 if pos[i] else 1
            u = t[i] + alpha * dt[i] - tmin[c]
            if u < lev[c]:
                n[c] += 1
                WA[c] += w[i]
                SA[c] += w[i] * u
        # the sets {u < level} of two levels are nested: equal counts mean equal sets
        done = n[0] == n_prev[0] and n[1] == n_prev[1]
        for c in range(2):
            lev[c] = (two_lam + SA[c]) / WA[c]  # > 0: the smallest u is 0
        if done:
            break
        n_prev[:] = n
    inner = 0.0
    gdt = 0.0
    curv = 0.0
    Sd = np.zeros(2)
    Wf = np.zeros(2)
    sq = 0.0
    for i in range(m):
        c = 0 if pos[i] else 1
        r = lev[c] - (t[i] + alpha * dt[i] - tmin[c])
        if r > 0.0:
            g = w[i] * r / two_lam
            gamma[i] = g
            sq += w[i] * r * r
            gdt += g * dt[i]
            curv += w[i] * dt[i] * dt[i]
            Sd[c] += w[i] * dt[i]
            Wf[c] += w[i]
        else:
            gamma[i] = 0.0
    for c in range(2):
        mu[c] = lev[c] + tmin[c]
        inner += tmin[c] + lev[c]
        curv -= Sd[c] * Sd[c] / Wf[c]
    inner -= sq / (4.0 * lam)
    return inner, gdt, curv, n[0] + n[1]


@njit(cache=True)
def _xdot(rows, p, out):
    """out = X p."""
    for i in range(out.shape[0]):
        out[i] = row_dot(rows, i, p)


@njit(cache=True)
def _active_sums(rows, act, coef, wa, pos_a, v, s_pos, s_neg):
    """v = sum_k coef_k x_{act_k} and s_c = sum_{k: class c} wa_k x_{act_k} (one pass over the
    active rows; coef_k = y_i gamma_i)."""
    v[:] = 0.0
    s_pos[:] = 0.0
    s_neg[:] = 0.0
    for k in range(act.shape[0]):
        if pos_a[k]:
            row_axpy2(rows, act[k], coef[k], v, wa[k], s_pos)
        else:
            row_axpy2(rows, act[k], coef[k], v, wa[k], s_neg)


@njit(cache=True)
def _copy_active_sums(rows, act, ga, wa, pa, indptr, indices, data, acc):
    """The sums of :func:`_active_sums` on CSR rows, fused with a contiguous copy of the active
    rows (``indptr``, ``indices``, ``data``: the CSR arrays of the copy, sized by the caller; the
    values rounded to the type of ``data``): each active row is read once for both.

    The sums go to acc (d, 4): acc[f, 2 c] = sum_{A_c} gamma_i x_if, acc[f, 2 c + 1] =
    sum_{A_c} w_i x_if (c = 0 for the positive class), so that the two sums of a feature share a
    cache line (a scattered write each instead of two)."""
    acc[:] = 0.0
    q = 0
    indptr[0] = 0
    for k in range(act.shape[0]):
        i = act[k]
        g, ww = ga[k], wa[k]
        c = 0 if pa[k] else 2
        for t in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
            f = nonneg(rows.indices[t])
            x = rows.data[t]
            acc[f, c] += g * x
            acc[f, c + 1] += ww * x
            indices[q] = f
            data[q] = x
            q += 1
        indptr[k + 1] = q


@njit(cache=True)
def _active_hessp(rows, act, wa, p, u, out):
    """out = sum_k wa_k <x_{act_k}, p> x_{act_k}, in two passes (u: scratch of length n_act).

    Two passes rather than one fused loop: the scattered writes of the second pass would otherwise
    stall the gathered reads of the first (measured 1.6x slower)."""
    for k in range(act.shape[0]):
        u[k] = wa[k] * row_dot(rows, act[k], p)
    out[:] = 0.0
    for k in range(act.shape[0]):
        row_axpy(rows, act[k], u[k], out)


@njit(cache=True)
def _active_sq(rows, act, wa, out):
    """out_f = sum_k wa_k x_{act_k, f}^2 (the diagonal of sum_A w_i x_i x_i^T)."""
    out[:] = 0.0
    for k in range(act.shape[0]):
        i = act[k]
        if rows.sparse:
            for q in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
                x = np.float64(rows.data[q])
                out[nonneg(rows.indices[q])] += wa[k] * x * x
        else:
            for f in range(rows.n_features):
                x = np.float64(rows.dense[i, f])
                out[f] += wa[k] * x * x


@njit(cache=True)
def _max_sq_norm(rows, m):
    """max_i ||x_i||^2."""
    best = 0.0
    for i in range(m):
        best = max(best, row_sq_norm(rows, i))
    return best


# --------------------------------------------------------------------------------------
# Newton iteration
# --------------------------------------------------------------------------------------


def _gram(X, idx, wts):
    """sum_k wts_k x_{idx_k} x_{idx_k}^T as a dense d x d float64 array (X dense or CSR, never
    densified), accumulated over blocks of rows of at most _GRAM_BLOCK values (no copy of X)."""
    d = X.shape[1]
    out = np.zeros((d, d))
    step = max(1, _GRAM_BLOCK // d)
    for k in range(0, idx.size, step):
        rows, ws = idx[k : k + step], wts[k : k + step]
        if sp.issparse(X):
            Xa = X[rows]
            out += (Xa.T @ Xa.multiply(ws[:, None]).tocsr()).toarray()
        else:
            Xa = np.asarray(X[rows], dtype=np.float64) * np.sqrt(ws)[:, None]
            out += Xa.T @ Xa  # a symmetric rank-k update (BLAS syrk)
    return out


class _ActiveRows:
    """The rows of the active set A, read in place from X through compiled loops (dense X, or the
    direct solver): the sums of the gradient, Hessian-vector products and the Hessian's diagonal
    (weights ``wa`` of the active rows, positive class ``pa``)."""

    def __init__(self, rows, act, wa, pa):
        self.rows, self.act, self.wa, self.pa = rows, act, wa, pa
        self.u = None

    def sums(self, coef, v, s):
        """v = sum_A coef_k x_k, s_c = sum_{A_c} w_k x_k."""
        _active_sums(self.rows, self.act, coef, self.wa, self.pa, v, s[0], s[1])

    def hessp(self, p, out):
        """out = sum_A w_k <x_k, p> x_k."""
        if self.u is None:
            self.u = np.empty(self.act.size)
        _active_hessp(self.rows, self.act, self.wa, p, self.u, out)

    def sq(self, out):
        """out_f = sum_A w_k x_kf^2."""
        _active_sq(self.rows, self.act, self.wa, out)


class _ActiveCopy(_ActiveRows):
    """:class:`_ActiveRows` of CSR X whose Hessian products (the many passes of the conjugate
    gradients) read a contiguous float32 CSR copy of the active rows through scipy's sparse
    products: 2.5-3 times as fast as compiled loops over the scattered rows of X (measured on
    200k x 50k, half of the rows active). The copy is made in the pass that forms the gradient
    sums (in float64 from X itself). Float32 values suffice for the products, which only shape the
    Newton direction (relative error 1e-7, far below the residual the conjugate gradients stop at)."""

    def __init__(self, rows, act, wa, pa):
        super().__init__(rows, act, wa, pa)
        self.wa32 = wa.astype(np.float32)
        self.XA = None

    def sums(self, coef, v, s):
        rows, act = self.rows, self.act
        nnz = int(np.sum(rows.indptr[act + 1] - rows.indptr[act]))
        itype = np.int32 if nnz < 2**31 else np.int64
        indptr = np.empty(act.size + 1, dtype=itype)
        indices, data = np.empty(nnz, dtype=itype), np.empty(nnz, dtype=np.float32)
        acc = np.empty((rows.n_features, 4))
        _copy_active_sums(rows, act, np.abs(coef), self.wa, self.pa, indptr, indices, data, acc)
        v[:] = acc[:, 0] - acc[:, 2]
        s[0], s[1] = acc[:, 1], acc[:, 3]
        self.XA = sp.csr_matrix((data, indices, indptr), shape=(act.size, rows.n_features))

    def hessp(self, p, out):
        XA = self.XA
        out[:] = XA.T @ (self.wa32 * (XA @ p.astype(np.float32)))

    def sq(self, out):
        XA = self.XA
        out[:] = sp.csr_matrix((XA.data * XA.data, XA.indices, XA.indptr), shape=XA.shape).T @ self.wa32


class _Newton:
    """State of one run: z, t = b Y X z, the water-filling gamma(z) with its levels mu, and the
    active-set quantities of the last gradient (v, s_c, W_c and the active rows ``rows_A``: for
    CSR X with conjugate gradients a contiguous copy, see :class:`_ActiveCopy`); the direct
    solver's sum M = sum_A w_i x_i x_i^T over the active set ``in_M`` it was made for."""

    def __init__(self, X, rows, y, w, lam, z, direct):
        self.X, self.rows, self.y, self.w, self.lam = X, rows, y, w, lam
        self.pos = y > 0
        self.b, self.a = 2.0 * (1.0 - lam), (1.0 - lam) / lam
        self.m, self.d = X.shape
        self.direct = direct
        self.copy_rows = sp.issparse(X) and not direct
        self.z = z
        self.t = self.b * y * self.xdot(z)
        self.mu = np.full(2, np.nan)
        self.gamma = np.empty(self.m)
        inner = _levels(self.t, self.t, 0.0, self.pos, w, lam, self.mu, self.gamma)[0]
        self.phi = (1.0 - lam) * float(z @ z) - inner
        self.v, self.s = np.empty(self.d), np.empty((2, self.d))
        self.M, self.in_M = None, None
        self.n_cg = 0

    def gradient(self):
        """v = X^T Y gamma and the class sums s_c, W_c of the active rows; returns v - z."""
        act = self.act = np.flatnonzero(self.gamma > 0)
        ga, wa, pa = self.gamma[act], self.w[act], self.pos[act]
        self.rows_A = (_ActiveCopy if self.copy_rows else _ActiveRows)(self.rows, act, wa, pa)
        self.rows_A.sums(np.where(pa, ga, -ga), self.v, self.s)
        self.W = np.array([wa[pa].sum(), wa[~pa].sum()])
        return self.v - self.z

    def xdot(self, p):
        """X p in float64: BLAS or scipy for float64 X, compiled loops for float32 X (whose
        products in scipy would convert X to float64 at every call)."""
        if self.X.dtype == np.float64:
            return np.asarray(self.X @ p).ravel()
        out = np.empty(self.m)
        _xdot(self.rows, p, out)
        return out

    def objective(self):
        """L(gamma) = (1 - lam) ||v||^2 + lam sum gamma_i^2 / w_i at the last gradient."""
        g = self.gamma[self.act]
        return (1.0 - self.lam) * float(self.v @ self.v) + self.lam * float(np.sum(g * g / self.w[self.act]))

    def direction(self, r, rel_tol):
        """p with (I + a C) p = r: directly or by preconditioned conjugate gradients."""
        return self._direct(r) if self.direct else self._cg(r, rel_tol)

    def _direct(self, r):
        A = self.gamma > 0
        changed = np.flatnonzero(A != self.in_M) if self.M is not None else None
        if changed is None or changed.size > self.act.size // 2:
            self.M = _gram(self.X, self.act, self.w[self.act])
        elif changed.size:  # rows entered (+) or left (-) the active set since M was made
            entered, left = changed[A[changed]], changed[~A[changed]]
            if entered.size:
                self.M += _gram(self.X, entered, self.w[entered])
            if left.size:
                self.M -= _gram(self.X, left, self.w[left])
        self.in_M = A
        H = self.M - np.outer(self.s[0], self.s[0] / self.W[0]) - np.outer(self.s[1], self.s[1] / self.W[1])
        H *= self.a
        H[np.diag_indices_from(H)] += 1.0
        return spd_solve(H, r)  # H >= I up to rounding

    def _cg(self, r, rel_tol):
        rows_A, s, W, a = self.rows_A, self.s, self.W, self.a
        diag = np.empty(self.d)
        rows_A.sq(diag)
        diag = 1.0 + a * (diag - s[0] ** 2 / W[0] - s[1] ** 2 / W[1])
        inv_diag = 1.0 / np.maximum(diag, 1.0)  # the scatter's diagonal is >= 0
        hp = np.empty(self.d)

        def hessp(p):
            rows_A.hessp(p, hp)
            return p + a * (hp - s[0] * (float(s[0] @ p) / W[0]) - s[1] * (float(s[1] @ p) / W[1]))

        x, res = np.zeros(self.d), r.copy()
        zr = inv_diag * res
        p = zr.copy()
        rz = float(res @ zr)
        stop = (rel_tol * np.linalg.norm(r)) ** 2
        for _ in range(_MAX_CG):
            if float(res @ res) <= stop:
                break
            hq = hessp(p)
            alpha = rz / float(p @ hq)
            x += alpha * p
            res -= alpha * hq
            zr = inv_diag * res
            rz, rz_old = float(res @ zr), rz
            p = zr + (rz / rz_old) * p
            self.n_cg += 1
        return x

    def step(self, p, r):
        """Exact line minimisation of phi from z along p (r = v - z); False if phi did not decrease."""
        lam, c = self.lam, 1.0 - self.lam
        dt = self.b * self.y * self.xdot(p)
        zp, pp = float(self.z @ p), float(p @ p)
        d0 = -self.b * float(r @ p)  # phi'(0) = b <z - v, p> < 0
        mu0 = self.mu.copy()
        lo, hi, alpha, flat = 0.0, np.inf, 1.0, False
        for _ in range(_MAX_LS):
            inner, gdt, curv, _ = _levels(self.t, dt, alpha, self.pos, self.w, lam, self.mu, self.gamma)
            evaluated = alpha  # inner, mu and gamma belong to this step length
            d1 = 2.0 * c * (zp + alpha * pp) - gdt
            flat = abs(d1) <= _LS_SLOPE * abs(d0)
            if flat:
                break
            lo, hi = (alpha, hi) if d1 < 0 else (lo, alpha)
            new = alpha - d1 / (2.0 * c * pp + curv / (2.0 * lam))
            alpha = new if lo < new < hi else (2.0 * alpha if hi == np.inf else 0.5 * (lo + hi))
        alpha = evaluated  # after _MAX_LS trials without a flat point: the last evaluated one
        phi = c * float((self.z + alpha * p) @ (self.z + alpha * p)) - inner
        # a point where phi' vanishes (to 1e-3 of its start) lies below phi(0) even when the
        # decrease, of order |v - z|^2, is below the rounding of phi
        if not (phi < self.phi or (flat and alpha > 0.0)):  # no progress: keep z
            self.mu[:] = mu0
            _levels(self.t, dt, 0.0, self.pos, self.w, lam, self.mu, self.gamma)
            return False
        self.z += alpha * p
        self.t += alpha * dt
        self.phi = phi
        return True


def kmomd_newton(X, y, sample_weight=None, lam=0.1, *, tol=1e-3, max_iter=_MAX_NEWTON_ITER, init=None,
                 direct="auto", smo_max_iter=10_000_000) -> KMOMDResult:
    """KM-OMD for the linear kernel by semismooth Newton on the dual in the weight vector.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (m, d)
        Training rows, float32 or float64 (read as they are, never densified or copied).
    y : ndarray of shape (m,)
        Labels in {-1, +1}.
    sample_weight : ndarray of shape (m,), optional
        Positive prior masses w_i (None: ones).
    lam : float in (0, 1]
        The KM-OMD lambda (1: the centroids, in closed form).
    tol : float
        The SMO's stopping rule: largest within-class violation <= tol * 2 L(gamma).
    max_iter : int
        Newton iterations before the pair SMO takes over from gamma(z).
    init : ndarray of shape (m,), optional
        A distribution gamma to start from (z = X^T Y gamma; made feasible per class); None:
        the weighted class centroids.
    direct : {"auto", True, False}
        Newton directions by a d x d Cholesky factorisation (True) or by conjugate gradients
        (False); "auto": direct for d <= 1000.
    smo_max_iter : int
        Cap on the pair updates of the SMO, if it has to take over.

    Returns
    -------
    KMOMDResult
        ``coef`` = v(gamma), ``newton_iter`` Newton iterations, ``cg_iter`` conjugate-gradient
        steps, ``n_iter`` pair updates (0 unless the SMO took over); ``history`` holds the final
        objective (followed by the SMO's, if it took over).
    """
    y, w = _check_inputs(y, sample_weight, lam)
    if lam == 0.0:
        raise ValueError("The Newton solver needs lam > 0 (at lam = 0 the dual is not differentiable).")
    if lam == 1.0:
        return kmomd_linear(X, y, w, 1.0)
    if sp.issparse(X):
        X = X.tocsr()
    direct = X.shape[1] <= _DIRECT_MAX_FEATURES if direct == "auto" else bool(direct)
    rows = make_rows(X)
    z, s = np.zeros(X.shape[1]), np.empty((2, X.shape[1]))
    if init is not None:  # z = v(gamma0), the optimum of the previous fit
        gamma0 = _feasible_start(init, y, w, None)
        act = np.flatnonzero(gamma0 > 0)
        _active_sums(rows, act, y[act] * gamma0[act], w[act], y[act] > 0, z, s[0], s[1])
    nt = _Newton(X, rows, y, w, lam, z, direct)
    bound = 2.0 * nt.b * np.sqrt(_max_sq_norm(rows, y.size))  # violation <= bound ||v - z||
    status, viol, n_it, scores = "max_iter", np.inf, 0, np.empty(y.size)
    r0, r_prev, phi_prev, slow = None, np.inf, np.inf, 0
    for n_it in range(max_iter + 1):
        r = nt.gradient()
        thresh = tol * 2.0 * nt.objective()
        rn = float(np.linalg.norm(r))
        slow = slow + 1 if rn >= 0.9 * r_prev and nt.phi >= phi_prev - 1e-12 * abs(phi_prev) else 0
        r_prev, phi_prev = rn, nt.phi
        if slow >= _MAX_SLOW:  # neither phi nor |v - z| decreases (rounding): the SMO takes over
            break
        kappa = bound  # violation / |v - z|: at most the bound, measured when near the threshold
        if bound * rn <= (1.0 if direct else _CHECK_RATIO) * thresh or n_it == max_iter:
            viol = _exact_violation(nt, scores)
            if viol <= thresh:
                status = "converged"
                break
            kappa = viol / rn
        if n_it == max_iter:
            break
        r0 = rn if r0 is None else r0
        if not nt.step(nt.direction(r, _forcing(rn, r0, _TARGET * thresh / (kappa * rn))), r):
            nt.gradient()
            viol = _exact_violation(nt, scores)
            status = "converged" if viol <= tol * 2.0 * nt.objective() else "stalled"
            break
    if status == "converged":
        res = _result(nt.gamma, scores, y, w, lam, 0, viol, status, np.array([nt.objective()]), coef=nt.v.copy())
    else:  # the pair SMO completes the stopping rule from gamma(z)
        res = kmomd_linear(X, y, w, lam, tol=tol, max_iter=smo_max_iter, init=nt.gamma)
    res.newton_iter, res.cg_iter = n_it, nt.n_cg
    return res


def _exact_violation(nt, scores):
    """The SMO's violation at gamma(z), from the exact scores X v (written to ``scores``)."""
    scores[:] = nt.xdot(nt.v)
    G = nt.b * nt.y * scores + 2.0 * nt.lam * nt.gamma / nt.w
    return _violation(G, nt.gamma, nt.pos)


def _forcing(rn, r0, enough):
    """Relative residual of the conjugate gradients for the Newton direction at |v - z| = rn:
    sqrt(rn / r0) (superlinear convergence; at most 0.3 far from the optimum, where the active set
    still changes), but no smaller than ``enough``, the reduction of |v - z| that is expected to
    meet the stopping rule."""
    return min(0.3, max(np.sqrt(rn / r0), enough))
