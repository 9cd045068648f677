"""Newton solvers for M3SVM / ISM3: the objective F of :mod:`margindist.solvers.m3svm`.

F is smooth and, for p >= 2 and eps > 0, strongly convex on the space the minimiser lives in,
so Newton's method with a backtracking (Armijo) line search converges globally and
quadratically near the optimum. For two classes and 1 <= p < 2, F is smooth away from u = 0
(below), which the binary driver steps off first (:func:`_off_the_origin`). Both drivers
minimise F / sum_i s_i, as the L-BFGS driver does, and stop on the same rule: the largest
gradient entry of F / sum_i s_i w.r.t. (W, b) below tol.

**Two classes** (:func:`m3svm_newton_binary`). Data term and regulariser see W, b only through
u = w_1 - w_0 and c = b_1 - b_0. Writing w_0 = m - u/2, w_1 = m + u/2, the ridge is
eps (2 ||m||^2 + ||u||^2 / 2), minimal at m = 0 for every u; likewise for b. So the minimiser is
W = [-u/2, u/2], b = [-c/2, c/2] with (u, c) the minimiser of the d + 1 variable problem

    F2(u, c) = sum_i s_i phi(z_i (u^T x_i + c)) + lam ||u||^p + (eps / 2) (||u||^2 + c^2),

z_i = +1 for class 1, -1 for class 0, phi(m) = g(1 - m) (smoothed hinge) or log(1 + e^-m)
(softmax: the K = 2 cross-entropy), and F(W, b) = F2(u, c) there. Its Hessian is
X^T diag(s phi'') X (bias column included) + lam (p ||u||^(p-2) I + p (p-2) ||u||^(p-4) u u^T)
+ eps I. Newton steps solve it directly (Cholesky of the (d+1) x (d+1) matrix, for dense X
with few features) or by preconditioned conjugate gradients on Hessian-vector products
X^T (D (X v)) (one fused pass over CSR rows; LIBLINEAR's truncated Newton is the model).

**Many classes** (:func:`m3svm_newton_multiclass`). Newton-CG on theta = (W, b). The Hessian of
the data term of sample i w.r.t. its scores S_i = W x_i + b is the K x K matrix

    H_i = diag(c) - c q^T - q c^T + (sum_k c_k) q q^T,

with c_k = s_i g''(1 - S_iy + S_ik) (c_y = 0) and q = e_y for the smoothed hinge, c = s_i p and
q = p (p = softmax(S_i)) for the cross-entropy (then H_i = s_i (diag(p) - p p^T)). A
Hessian-vector product applies H_i to the row a = V x_i + v_b of the direction (V, v_b) and
accumulates H_i a x_i^T: one pass over the rows. The regulariser's Hessian applied to V is
(diag(A 1) - A) V + (diag(B 1) - B) W with A_kl = p ||w_k - w_l||^(p-2) and
B_kl = p (p-2) ||w_k - w_l||^(p-4) (w_k - w_l)^T (v_k - v_l). Data term and regulariser do not
see the common mode (the same vector added to every w_k, the same number to every b_k); only
the ridge does, with curvature 2 eps. The drivers start from a point without common mode (or
remove it: it only raises F) and keep every step free of it, so the iterates stay in the
subspace where the minimiser lies and CG never meets the tiny 2 eps eigenvalue. CG is
preconditioned by the diagonal of the Hessian.

The line search evaluates F along the direction from the scores S and the product X d
computed once per step, O(n K) per trial point.

**L-BFGS on the scores** (:func:`m3svm_lbfgs_scores`): the same problem and line search with
L-BFGS directions (two-loop recursion, compiled) instead of Newton's. On ill-conditioned
problems (sparse word counts with d > n, where most samples sit far inside their margin and
the loss curvature spans many orders of magnitude) it needs far fewer products with X than
Newton-CG, and far less work per step than scipy's L-BFGS-B on K d variables.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from numba import njit

from ..losses import smooth_hinge_scalar
from ._gram import spd_solve
from ._rows import nonneg
from .m3svm import (
    M3SVMResult,
    _check_finite,
    _scores,
    _theta0,
    _xt_dot,
    data_term,
    pair_sq_distances,
    pairwise_penalty,
    shifted_exp_row,
)

__all__ = [
    "lbfgs_minimize",
    "m3svm_lbfgs_scores",
    "m3svm_newton_binary",
    "m3svm_newton_multiclass",
    "newton_minimize",
    "pcg",
    "smoothing_stages",
    "CONTINUATION_MAX_LAM",
]

#: Dense binary problems with at most this many features solve the Newton system directly.
DIRECT_MAX_FEATURES = 1000
#: Armijo constant and the smallest step the backtracking line search tries.
_ARMIJO = 1e-4
_MIN_STEP = 1e-12
#: Steps in a row without a strict decrease of F (all within its rounding) before giving up.
_MAX_FLAT = 5
#: Newton's method stops on a small gradient only after a step that moved x by at most this
#: fraction of its norm: a long step can land where the gradient is small but the objective
#: far from its minimum (a flat region of a weakly regularised problem), and the further
#: Newton steps then go on to it.
_CERTIFY_STEP = 0.1


# ---------------------------------------------------------------------------- driver

def _backtrack(phi, f, gd):
    """Armijo backtracking from step 1 along a descent direction (F(alpha) = ``phi(alpha)``,
    F(0) = f, F'(0) = gd < 0): (alpha, F(alpha), rounding noise of F). Near the optimum F changes
    by less than its rounding, so such steps are accepted (the gradient, not F, then tells
    whether they help); the callers stop after _MAX_FLAT of them in a row."""
    noise = 16 * np.finfo(float).eps * abs(f)
    alpha = 1.0
    fa = phi(alpha)
    while fa > f + _ARMIJO * alpha * gd + noise and alpha >= _MIN_STEP:
        alpha *= 0.5
        fa = phi(alpha)
    return alpha, fa, noise

def pcg(hvp, g, minv, eta, max_iter, project=None):
    """Approximately solve H x = -g by preconditioned conjugate gradients from x = 0.

    ``hvp(v)`` gives H v, ``minv`` the inverse diagonal preconditioner (an array of g's shape),
    ``project`` (optional) maps a vector onto the subspace the iterates must stay in. Stops when
    ||r|| <= eta ||g|| or at ``max_iter`` products (or on non-positive curvature). Returns
    (x, number of Hessian-vector products).
    """
    x = np.zeros_like(g)
    r = -g
    z = minv * r
    if project is not None:
        z = project(z)
    d = z
    rz = float(r @ z)
    target = eta * math.sqrt(float(g @ g))
    for j in range(1, max_iter + 1):
        hd = hvp(d)
        dhd = float(d @ hd)
        if dhd <= 0:
            return (x if j > 1 else d), j
        a = rz / dhd
        x += a * d
        r -= a * hd
        if math.sqrt(float(r @ r)) <= target:
            return x, j
        z = minv * r
        if project is not None:
            z = project(z)
        rz_new = float(r @ z)
        d = z + (rz_new / rz) * d
        rz = rz_new
    return x, max_iter


def newton_minimize(problem, x0, *, tol, max_iter, log=None, name="Newton"):
    """Line-search Newton on ``problem`` from ``x0``.

    ``problem`` holds the iterate ``problem.x`` and provides ``set_point(x) -> (f, g)``,
    ``direction(g, eta) -> (d, n_hvp)``, ``line(d)`` (returns phi(alpha) = f(x + alpha d)) and
    ``move(alpha, d) -> (f, g)`` (x += alpha d, after ``line(d)``). Stops when max |g| <= tol
    after a step that moved x by at most :data:`_CERTIFY_STEP` of its norm (on weighted tf-idf
    rows of 4 classes with a weak p = 2 regulariser, the rule without that condition stopped
    after 4 steps at 15 times the minimum of F); a line search that no longer decreases F at
    machine precision also stops the run, which counts as converged when max |g| <= 10 tol (the
    rounding floor of the gradient).
    Returns (f, g, n_iter, converged, history of f); the minimiser is ``problem.x``.
    """
    f, g = problem.set_point(np.array(x0, dtype=np.float64))
    gnorm0 = max(math.sqrt(float(g @ g)), 1e-300)
    history = [f]
    n_hvp, it, flat, converged, moved = 0, 0, 0, False, 0.0
    while True:
        gmax = float(np.max(np.abs(g))) if g.size else 0.0
        if gmax <= tol and moved <= _CERTIFY_STEP:
            converged = True
            break
        if it >= max_iter:
            break
        gnorm = math.sqrt(float(g @ g))
        d, k = problem.direction(g, min(0.5, math.sqrt(gnorm / gnorm0)))
        n_hvp += k
        gd = float(g @ d)
        if not gd < 0:  # not a descent direction (rounding): fall back to steepest descent
            d, gd = -g, -gnorm * gnorm
        alpha, fa, noise = _backtrack(problem.line(d), f, gd)
        it += 1
        flat = flat + 1 if not fa < f else 0
        if fa > f + noise or flat >= _MAX_FLAT:  # no decrease left at machine precision
            converged = gmax <= 10 * tol
            break
        moved = alpha * math.sqrt(float(d @ d)) / max(math.sqrt(float(problem.x @ problem.x)), 1e-300)
        f, g = problem.move(alpha, d)
        history.append(f)
    if log is not None:
        log.info("M3SVM %s: %d iterations, %d Hessian-vector products, max|grad|=%.3g", name, it, n_hvp,
                 float(np.max(np.abs(g))) if g.size else 0.0)
    return f, g, it, converged, np.asarray(history)


# ---------------------------------------------------------------------------- binary kernels
@njit(cache=True)
def _hinge_margin_terms(m, s, delta, d1, d2):
    """sum_i s_i phi(m_i) with phi(m) = g(1 - m); d1 = s phi'(m), d2 = s phi''(m)."""
    val = 0.0
    for i in range(m.shape[0]):
        t = 1.0 - m[i]
        g, gd = smooth_hinge_scalar(t, delta)
        r = math.hypot(t, delta)
        val += s[i] * g
        d1[i] = -s[i] * gd
        d2[i] = s[i] * 0.5 * delta * delta / (r * r * r)
    return val


@njit(cache=True)
def _logistic_margin_terms(m, s, d1, d2):
    """sum_i s_i log(1 + exp(-m_i)); d1 = s phi'(m), d2 = s phi''(m)."""
    val = 0.0
    for i in range(m.shape[0]):
        e = math.exp(-abs(m[i]))
        if m[i] >= 0:
            val += s[i] * math.log1p(e)
            sig_neg = e / (1.0 + e)  # sigma(-m)
        else:
            val += s[i] * (-m[i] + math.log1p(e))
            sig_neg = 1.0 / (1.0 + e)
        d1[i] = -s[i] * sig_neg
        d2[i] = s[i] * sig_neg * (1.0 - sig_neg)
    return val


@njit(cache=True)
def _hinge_margin_value(m, md, alpha, s, delta):
    """sum_i s_i phi(m_i + alpha md_i) for the smoothed hinge (no temporaries)."""
    val = 0.0
    for i in range(m.shape[0]):
        g, _ = smooth_hinge_scalar(1.0 - m[i] - alpha * md[i], delta)
        val += s[i] * g
    return val


@njit(cache=True)
def _logistic_margin_value(m, md, alpha, s):
    """sum_i s_i log(1 + exp(-(m_i + alpha md_i)))."""
    val = 0.0
    for i in range(m.shape[0]):
        t = m[i] + alpha * md[i]
        val += s[i] * (math.log1p(math.exp(-t)) if t >= 0 else -t + math.log1p(math.exp(t)))
    return val


@njit(cache=True)
def _csr_hvp_binary(indptr, indices, data, D, v, vc, out):
    """out = X^T (D (X v + vc)) for CSR X in one pass over the rows; returns sum_i D_i (x_i v + vc)."""
    out[:] = 0.0
    acc = 0.0
    for i in range(indptr.shape[0] - 1):
        if D[i] == 0.0:
            continue
        a = vc
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            a += data[jj] * v[nonneg(indices[jj])]
        a *= D[i]
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            out[nonneg(indices[jj])] += a * data[jj]
        acc += a
    return acc


def _matvec(X, v):
    """X v in float64 (float32 X multiplied in float32)."""
    vv = v.astype(X.dtype, copy=False) if X.dtype == np.float32 else v
    return np.asarray(X @ vv, dtype=np.float64).ravel()


def _rmatvec(X, r):
    """X^T r in float64."""
    rr = r.astype(X.dtype, copy=False) if X.dtype == np.float32 else r
    return np.asarray(X.T @ rr, dtype=np.float64).ravel()


@njit(cache=True)
def _csr_weighted_sq_colsum(indptr, indices, data, D, out):
    """out_j = sum_i D_i x_ij^2 (the diagonal of X^T D X) for CSR X."""
    out[:] = 0.0
    for i in range(indptr.shape[0] - 1):
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            out[nonneg(indices[jj])] += D[i] * data[jj] * data[jj]


# ---------------------------------------------------------------------------- binary problem
class _BinaryProblem:
    """F2(u, c) / sum(s) of the module docstring at the iterate x = [u, c] (c with an intercept)."""

    def __init__(self, X, z, s, *, lam, p, delta, eps, loss, fit_intercept, direct):
        self.X, self.z, self.s = X, z, s
        self.scale = float(s.sum())
        self.lam, self.p, self.delta, self.eps = lam, p, delta, eps
        self.softmax = loss == "softmax"
        self.bias = fit_intercept
        self.direct = direct
        self.dim = X.shape[1]
        self.d1 = np.empty(X.shape[0])
        self.d2 = np.empty(X.shape[0])
        self._buf = None

    # --- pieces
    def _split(self, x):
        return x[: self.dim], (float(x[self.dim]) if self.bias else 0.0)

    def _margins(self, v):
        u, c = self._split(v)
        return self.z * (_matvec(self.X, u) + c)

    def _reg(self, uu, cc):
        """lam ||u||^p + eps/2 (||u||^2 + c^2) from ||u||^2 and c^2."""
        return self.lam * max(uu, 0.0) ** (0.5 * self.p) + 0.5 * self.eps * (uu + cc)

    def _reg_coefs(self, u):
        """(a, b): the Hessian of lam ||u||^p is a I + b u u^T, its gradient a u."""
        nu = math.sqrt(float(u @ u))
        p, lam = self.p, self.lam
        a = lam * p * nu ** (p - 2) if (nu > 0 or p == 2) else 0.0
        b = lam * p * (p - 2) * nu ** (p - 4) if (nu > 0 and p != 2) else 0.0
        return a, b

    # --- driver interface
    def set_point(self, x):
        self.x = x
        self.m = self._margins(x)
        return self._evaluate()

    def _evaluate(self):
        if self.softmax:
            val = _logistic_margin_terms(self.m, self.s, self.d1, self.d2)
        else:
            val = _hinge_margin_terms(self.m, self.s, self.delta, self.d1, self.d2)
        u, c = self._split(self.x)
        self.a, self.b = self._reg_coefs(u)
        r = self.d1 * self.z
        g = [_rmatvec(self.X, r) + (self.a + self.eps) * u]
        if self.bias:
            g.append([r.sum() + self.eps * c])
        f = val + self._reg(float(u @ u), c * c)
        return f / self.scale, np.concatenate(g) / self.scale

    def hvp(self, v):
        vu, vc = self._split(v)
        D = self.d2
        if sp.issparse(self.X):
            out = np.empty(self.dim)
            hc = _csr_hvp_binary(self.X.indptr, self.X.indices, self.X.data, D, vu, vc, out)
        else:
            t = D * (_matvec(self.X, vu) + vc)
            out, hc = _rmatvec(self.X, t), t.sum()
        u, _ = self._split(self.x)
        out += (self.a + self.eps) * vu + self.b * float(u @ vu) * u
        parts = [out] + ([[hc + self.eps * vc]] if self.bias else [])
        return np.concatenate(parts) / self.scale

    def _diagonal(self):
        D = self.d2
        if sp.issparse(self.X):
            dg = np.empty(self.dim)
            _csr_weighted_sq_colsum(self.X.indptr, self.X.indices, self.X.data, D, dg)
        else:
            dg = np.einsum("ij,ij,i->j", self.X, self.X, D.astype(self.X.dtype, copy=False)).astype(np.float64)
        u, _ = self._split(self.x)
        dg += self.a + self.eps + self.b * u * u
        parts = [dg] + ([[D.sum() + self.eps]] if self.bias else [])
        return np.concatenate(parts) / self.scale

    def _hessian(self):
        """The (d+1) x (d+1) Hessian of F2 / sum(s) (dense X)."""
        X, D = self.X, self.d2
        if self._buf is None:
            self._buf = np.empty_like(X)
        np.multiply(X, np.sqrt(D).astype(X.dtype)[:, None], out=self._buf)
        k = self.dim + self.bias
        H = np.empty((k, k))
        H[: self.dim, : self.dim] = self._buf.T @ self._buf
        u, _ = self._split(self.x)
        H[: self.dim, : self.dim] += self.b * np.outer(u, u)
        if self.bias:
            H[: self.dim, -1] = H[-1, : self.dim] = _rmatvec(X, D)
            H[-1, -1] = D.sum()
        H[np.diag_indices(k)] += self.eps
        H[np.diag_indices(self.dim)] += self.a
        return H / self.scale

    def direction(self, g, eta):
        if self.direct:
            return spd_solve(self._hessian(), -g), 0
        minv = 1.0 / self._diagonal()
        return pcg(self.hvp, g, minv, eta, max(10, g.size))

    def line(self, d):
        self._md = self._margins(d)
        u, c = self._split(self.x)
        du, dc = self._split(d)
        uu, ud, dd = float(u @ u), float(u @ du), float(du @ du)
        m, md, s = self.m, self._md, self.s

        def phi(alpha):
            val = (_logistic_margin_value(m, md, alpha, s) if self.softmax
                   else _hinge_margin_value(m, md, alpha, s, self.delta))
            cc = (c + alpha * dc) ** 2
            return (val + self._reg(uu + alpha * (2 * ud + alpha * dd), cc)) / self.scale

        return phi

    def move(self, alpha, d):
        self.x = self.x + alpha * d
        self.m += alpha * self._md
        return self._evaluate()


def _off_the_origin(prob, x, tol, max_iter):
    """A start for 1 <= p < 2, where the Hessian of lam ||u||^p is unbounded at u = 0 (and for
    p = 1 F2 has a kink there): from x with u = 0, the best intercept at u = 0 (a one-variable
    problem of the same form), then along the steepest descent direction of F2 in u. Returns
    (x, optimal, iterations): ``optimal`` when u = 0 is the minimiser -- for p = 1 when the
    gradient of the data term in u is within the ball of radius lam (0 is in the
    subdifferential of F2), for 1 < p < 2 only when that gradient is 0."""
    d, x = prob.dim, np.array(x, dtype=np.float64)
    it = 0
    if prob.bias:
        sub = _BinaryProblem(np.zeros((prob.X.shape[0], 0)), prob.z, prob.s, lam=0.0, p=2.0, delta=prob.delta,
                             eps=prob.eps, loss="softmax" if prob.softmax else "smooth_hinge",
                             fit_intercept=True, direct=True)
        _, _, it, _, _ = newton_minimize(sub, x[d:], tol=tol, max_iter=max_iter)
        x[d:] = sub.x
    f, g = prob.set_point(x)  # at u = 0 the regulariser adds nothing to g and to H v
    gu = g[:d]
    nrm = math.sqrt(float(gu @ gu))
    slope = -nrm * nrm + (prob.lam / prob.scale * nrm if prob.p == 1 else 0.0)  # along -gu
    if not slope < 0:
        return x, True, it
    step = np.concatenate([-gu, np.zeros(int(prob.bias))])
    t = -slope / max(float(step @ prob.hvp(step)), 1e-300)  # the minimiser of the quadratic model
    phi = prob.line(step)
    while not phi(t) < f and t > 1e-30 * (1.0 + t):
        t *= 0.5
    return x + t * step, False, it


#: M3SVM asks the two-class Newton-CG for continuation in delta when lam is at most this many
#: times the default rule's (:func:`margindist._defaults.m3svm_lam`). On 200k x 50k sparse rows
#: (default lam 1e-7, delta = 0.1), single stage against continuation: lam 1e-9 55.6 s / 37.6 s,
#: 1e-8 28.5 / 9.1 s, 1e-7 9.2 / 4.8 s, 1e-6 4.5 / 5.1 s, 1e-5 1.6 / 2.7 s, 1e-3 0.75 / 1.24 s:
#: with a weak regulariser the margins crowd the kink; with a strong one Newton needs few steps.
CONTINUATION_MAX_LAM = 3.0


def smoothing_stages(delta) -> list[float]:
    """The deltas of the smoothed hinge that :func:`m3svm_newton_binary` minimises in turn for
    ``delta``: 1, 0.1, 0.01, ... while above 2 delta, then delta itself (just [delta] from 0.5 on).

    Newton's method on g with a small delta (curvature up to 1 / (2 delta) in a band of width
    about delta around the kink) takes many damped steps while the margins cross that band;
    from the minimiser for a 10 times larger delta it starts where most margins have settled.
    On 200k x 50k sparse rows (delta = 0.1, the default lam): 22 Newton steps and 215
    Hessian-vector products directly, 4 + 13 steps and 20 + 85 products through delta = 1,
    the same objective to the stopping rule."""
    stages, level = [], 1.0
    while level > 2.0 * delta:
        stages.append(level)
        level /= 10.0
    return stages + [float(delta)]


def m3svm_newton_binary(X, y_index, sample_weight, *, lam, p, delta, eps, loss, fit_intercept,
                        max_iter=1000, tol=1e-6, coef_init=None, intercept_init=None, direct=None,
                        continuation=False, log=None):
    """Minimise F for two classes through the (d + 1)-variable problem F2 of the module docstring.

    ``direct``: solve the Newton systems with the explicit Hessian (default: dense X with at most
    ``DIRECT_MAX_FEATURES`` features) or by preconditioned CG. Needs p >= 1 (convexity). For
    p < 2 the Hessian of ||u||^p is unbounded at u = 0, so a start there first moves off the
    origin (:func:`_off_the_origin`, which also recognises u = 0 as the minimiser where it is:
    p = 1 and a large lam); F2 is smooth along the rest of the path. ``continuation`` (smoothed
    hinge, CG systems, no warm start): minimise F2 for the deltas of :func:`smoothing_stages` in
    turn, each from the previous minimiser, each to ``tol`` (the last one is the problem asked
    for; ``max_iter`` counts the Newton steps of all stages, and so does the history). The
    direct systems are for dense rows with few features, where Newton's method takes a few
    steps from zero anyway (120k x 100: 5 steps directly, 5 + 4 through delta = 1). The
    estimator asks for it where the regulariser is weak (:data:`CONTINUATION_MAX_LAM`). Returns an
    :class:`M3SVMResult` with coef = [-u/2, u/2], intercept = [-c/2, c/2].
    """
    if p < 1:
        raise ValueError(f"The Newton solver needs p >= 1 (got p={p}); use solver='lbfgs'.")
    d = X.shape[1]
    if direct is None:
        direct = not sp.issparse(X) and d <= DIRECT_MAX_FEATURES
    s = np.asarray(sample_weight, dtype=np.float64)
    z = np.where(np.asarray(y_index) == 1, 1.0, -1.0)
    x0 = np.zeros(d + bool(fit_intercept))
    if coef_init is not None:
        W0 = np.asarray(coef_init, dtype=np.float64).reshape(2, d)
        x0[:d] = W0[1] - W0[0]
    if fit_intercept and intercept_init is not None:
        x0[d] = float(intercept_init[1] - intercept_init[0])
    cold = coef_init is None and intercept_init is None  # a warm start is near its minimiser already
    staged = continuation and cold and not direct and loss != "softmax"
    stages = smoothing_stages(delta) if staged else [delta]
    prob = _BinaryProblem(X, z, s, lam=lam, p=p, delta=stages[0], eps=eps, loss=loss,
                          fit_intercept=fit_intercept, direct=direct)
    it, optimal = 0, False
    if p < 2 and not np.any(x0[:d]):
        x0, optimal, it = _off_the_origin(prob, x0, tol, max_iter)
    if optimal:  # u = 0 for the first delta; the later ones start there
        prob.delta = stages[-1]
        x0, optimal, n = _off_the_origin(prob, x0, tol, max_iter)
        it += n
    if optimal:
        f, _ = prob.set_point(x0)
        converged, hist = True, np.array([f])
    else:
        name = "Newton (binary, " + ("direct)" if direct else "CG)")
        hists = []
        for level in stages[stages.index(prob.delta):]:
            prob.delta = level
            f, _, n, converged, h = newton_minimize(prob, x0, tol=tol, max_iter=max_iter - it, log=log,
                                                    name=f"{name}, delta={level:g}")
            it, x0 = it + n, prob.x
            hists.append(h)
        hist = np.concatenate(hists)
    _check_finite(prob.x, "newton", "Check the data scaling (standardise the features) or raise eps.")
    u, c = prob._split(prob.x)
    return M3SVMResult(coef=np.vstack([-0.5 * u, 0.5 * u]), intercept=np.array([-0.5 * c, 0.5 * c]),
                       n_iter=it, objective=f * prob.scale, converged=converged, history=hist)


# ---------------------------------------------------------------------------- multi-class kernels
@njit(cache=True)
def _hinge_curvature(S, y, s, delta, C, Q):
    """H_i of the smoothed pairwise hinge as (c, q): c_k = s_i g''(1 - S_iy + S_ik), q = e_y."""
    n, K = S.shape
    for i in range(n):
        yi = y[i]
        for k in range(K):
            Q[i, k] = 0.0
            if k == yi:
                C[i, k] = 0.0
                continue
            r = math.hypot(1.0 - S[i, yi] + S[i, k], delta)
            C[i, k] = s[i] * 0.5 * delta * delta / (r * r * r)
        Q[i, yi] = 1.0


@njit(cache=True)
def _softmax_curvature(S, s, C, Q):
    """H_i = s_i (diag(p) - p p^T) as (c, q) = (s_i p, p), p = softmax(S_i)."""
    n, K = S.shape
    for i in range(n):
        _, tot = shifted_exp_row(S, i, Q)
        for k in range(K):
            Q[i, k] /= tot
            C[i, k] = s[i] * Q[i, k]


@njit(cache=True)
def _apply_row_hessian(C, Q, i, a, h):
    """h = H_i a with H_i = diag(c) - c q^T - q c^T + (sum c) q q^T (c, q: rows i of C, Q)."""
    qa = 0.0
    ca = 0.0
    sig = 0.0
    for k in range(a.shape[0]):
        qa += Q[i, k] * a[k]
        ca += C[i, k] * a[k]
        sig += C[i, k]
    for k in range(a.shape[0]):
        h[k] = C[i, k] * (a[k] - qa) + Q[i, k] * (sig * qa - ca)


@njit(cache=True)
def _dense_row_hessians(A, C, Q, out):
    """out_i = H_i A_i for every row."""
    for i in range(A.shape[0]):
        _apply_row_hessian(C, Q, i, A[i], out[i])


@njit(cache=True)
def _csr_hvp_multi(indptr, indices, data, VT, vb, C, Q, out):
    """out (d, K) = sum_i x_i (H_i (V x_i + vb))^T for CSR X, VT = V^T (d, K), in one pass over
    the rows; returns sum_i H_i (V x_i + vb), the bias part."""
    K = VT.shape[1]
    a = np.empty(K)
    h = np.empty(K)
    hb = np.zeros(K)
    out[:, :] = 0.0
    for i in range(indptr.shape[0] - 1):
        for k in range(K):
            a[k] = vb[k]
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            x = data[jj]
            j = nonneg(indices[jj])
            for k in range(K):
                a[k] += x * VT[j, k]
        _apply_row_hessian(C, Q, i, a, h)
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            x = data[jj]
            j = nonneg(indices[jj])
            for k in range(K):
                out[j, k] += x * h[k]
        for k in range(K):
            hb[k] += h[k]
    return hb


@njit(cache=True)
def _csr_sq_t_dot(indptr, indices, data, Hd, out):
    """out (d, K) = (X o X)^T Hd for CSR X (the data part of the Hessian's diagonal)."""
    K = Hd.shape[1]
    out[:, :] = 0.0
    for i in range(indptr.shape[0] - 1):
        for jj in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            x2 = data[jj] * data[jj]
            j = nonneg(indices[jj])
            for k in range(K):
                out[j, k] += x2 * Hd[i, k]


# ---------------------------------------------------------------------------- multi-class problem
class _MultiProblem:
    """F(W, b) / sum(s) at theta = [W.ravel(), b] (b with an intercept), K > 2 classes."""

    def __init__(self, X, y, s, K, *, lam, p, delta, eps, loss, fit_intercept):
        self.X, self.y, self.s, self.K = X, y, s, K
        self.scale = float(s.sum())
        self.lam, self.p, self.delta, self.eps, self.loss = lam, p, delta, eps, loss
        self.bias = fit_intercept
        self.dim = X.shape[1]
        self.C = np.empty((X.shape[0], K))
        self.Q = np.empty((X.shape[0], K))
        self._X2 = None
        self._trial = None

    def _unpack(self, theta):
        W = theta[: self.K * self.dim].reshape(self.K, self.dim)
        return W, (theta[self.K * self.dim:] if self.bias else None)

    def project(self, v):
        """Remove the common mode (mean over the classes) of a vector in theta's layout."""
        V, vb = self._unpack(v)
        out = [(V - V.mean(axis=0)).ravel()]
        if self.bias:
            out.append(vb - vb.mean())
        return np.concatenate(out)

    def _value(self, S, W, b):
        """(f, dF/dS, R) of the unscaled objective at scores S and weights W, b."""
        val, G = data_term(S, self.y, self.s, self.loss, self.delta)
        R = pairwise_penalty(W, self.p, return_grad=False) if self.lam != 0 else 0.0
        val += self.lam * R + self.eps * float(np.einsum("ij,ij->", W, W))
        if self.bias:
            val += self.eps * float(b @ b)
        return val, G

    # --- driver interface
    def set_point(self, theta):
        self.x = self.project(theta)
        W, b = self._unpack(self.x)
        self.S = _scores(self.X, W, b)
        return self._evaluate(*self._value(self.S, W, b))

    def _evaluate(self, f, G):
        W, b = self._unpack(self.x)
        gW = _xt_dot(self.X, G) + 2.0 * self.eps * W
        if self.lam != 0:
            gW += self.lam * pairwise_penalty(W, self.p)[1]
        g = [gW.ravel()] + ([G.sum(axis=0) + 2.0 * self.eps * b] if self.bias else [])
        return f / self.scale, self.project(np.concatenate(g)) / self.scale

    def _curvature(self):
        """The per-sample Hessians (C, Q) and the regulariser's (A, Bc) at the iterate."""
        if self.loss == "softmax":
            _softmax_curvature(self.S, self.s, self.C, self.Q)
        else:
            _hinge_curvature(self.S, self.y, self.s, self.delta, self.C, self.Q)
        self._reg_curvature(self._unpack(self.x)[0])

    def _reg_curvature(self, W):
        """A_kl = lam p ||w_k - w_l||^(p-2), Bc_kl = lam p (p-2) ||w_k - w_l||^(p-4) (0 at 0)."""
        D2, _, _ = pair_sq_distances(W)
        p, K = self.p, self.K
        pos = D2 > 0
        np.fill_diagonal(pos, False)
        self.A = np.zeros((K, K))
        self.Bc = np.zeros((K, K))
        if p == 2:
            self.A[:] = 2.0
            np.fill_diagonal(self.A, 0.0)
        else:
            np.power(D2, 0.5 * (p - 2.0), out=self.A, where=pos)
            self.A *= p
            np.power(D2, 0.5 * (p - 4.0), out=self.Bc, where=pos)
            self.Bc *= p * (p - 2.0)
        self.A *= self.lam
        self.Bc *= self.lam

    def hvp(self, v):
        V, vb = self._unpack(v)
        vb0 = vb if self.bias else np.zeros(self.K)
        X = self.X
        if sp.issparse(X):
            out = np.empty((self.dim, self.K))
            hb = _csr_hvp_multi(X.indptr, X.indices, X.data, np.ascontiguousarray(V.T), vb0,
                                self.C, self.Q, out)
            HV = out.T
        else:
            Av = _scores(X, V, vb0)
            Hv = np.empty_like(Av)
            _dense_row_hessians(Av, self.C, self.Q, Hv)
            HV, hb = _xt_dot(X, Hv), Hv.sum(axis=0)
        W, _ = self._unpack(self.x)
        Gm = W @ V.T
        dg = np.diag(Gm)
        B = self.Bc * (dg[:, None] + dg[None, :] - Gm - Gm.T)
        HV = (HV + self.A.sum(1)[:, None] * V - self.A @ V + B.sum(1)[:, None] * W - B @ W
              + 2.0 * self.eps * V)
        out = [HV.ravel()] + ([hb + 2.0 * self.eps * vb] if self.bias else [])
        return np.concatenate(out) / self.scale

    def _diagonal(self):
        C, Q = self.C, self.Q
        Hd = C * (1.0 - 2.0 * Q) + C.sum(axis=1)[:, None] * Q * Q
        X = self.X
        if sp.issparse(X):
            out = np.empty((self.dim, self.K))
            _csr_sq_t_dot(X.indptr, X.indices, X.data, Hd, out)
            DW = out.T
        else:
            if self._X2 is None:
                self._X2 = X * X
            DW = _xt_dot(self._X2, Hd)
        W, _ = self._unpack(self.x)
        Bc = self.Bc
        DW = (DW + self.A.sum(1)[:, None] + W * W * Bc.sum(1)[:, None] - 2.0 * W * (Bc @ W)
              + Bc @ (W * W) + 2.0 * self.eps)
        out = [DW.ravel()] + ([Hd.sum(axis=0) + 2.0 * self.eps] if self.bias else [])
        return np.concatenate(out) / self.scale

    def direction(self, g, eta):
        self._curvature()
        minv = 1.0 / self._diagonal()
        return pcg(self.hvp, g, minv, eta, max(10, min(g.size, 1000)), project=self.project)

    def line(self, d):
        DW, db = self._unpack(d)
        SD = _scores(self.X, DW, db)
        W, b = self._unpack(self.x)

        def phi(alpha):
            Wa = W + alpha * DW
            ba = b + alpha * db if self.bias else None
            Sa = self.S + alpha * SD
            f, G = self._value(Sa, Wa, ba)
            self._trial = (alpha, Sa, f, G)
            return f / self.scale

        return phi

    def move(self, alpha, d):
        self.x = self.x + alpha * d
        a, Sa, f, G = self._trial
        if a != alpha:
            W, b = self._unpack(self.x)
            Sa = _scores(self.X, W, b)
            f, G = self._value(Sa, W, b)
        self.S = Sa
        return self._evaluate(f, G)


def m3svm_newton_multiclass(X, y_index, sample_weight, n_classes, *, lam, p, delta, eps, loss,
                            fit_intercept, max_iter=1000, tol=1e-6, coef_init=None,
                            intercept_init=None, log=None):
    """Minimise F over (W, b) by line-search Newton-CG (module docstring). Needs p >= 2.

    Returns an :class:`M3SVMResult`; the common mode of a warm start is removed first.
    """
    if p < 2:
        raise ValueError(f"The Newton solver needs p >= 2 (got p={p}); use solver='lbfgs'.")
    K, d = n_classes, X.shape[1]
    s = np.asarray(sample_weight, dtype=np.float64)
    y = np.asarray(y_index, dtype=np.intp)
    prob = _MultiProblem(X, y, s, K, lam=lam, p=p, delta=delta, eps=eps, loss=loss,
                         fit_intercept=fit_intercept)
    x0 = _theta0(K, d, fit_intercept, coef_init, intercept_init)
    f, _, it, converged, hist = newton_minimize(prob, x0, tol=tol, max_iter=max_iter, log=log,
                                                name="Newton-CG")
    _check_finite(prob.x, "newton", "Check the data scaling (standardise the features) or raise eps.")
    W, b = prob._unpack(prob.x)
    b = np.zeros(K) if b is None else b.copy()
    return M3SVMResult(coef=W.copy(), intercept=b, n_iter=it, objective=f * prob.scale,
                       converged=converged, history=hist)


@njit(cache=True, fastmath={"reassoc", "contract"})
def _two_loop(g, S, Y, rho, order, out):
    """out = -H g by the L-BFGS two-loop recursion over the pairs (S[j], Y[j]), j in ``order``
    (oldest first), with H_0 = (s^T y / y^T y) I of the newest pair."""
    n = g.shape[0]
    m = order.shape[0]
    alphas = np.empty(m)
    for i in range(n):
        out[i] = -g[i]
    for t in range(m - 1, -1, -1):
        j = order[t]
        a = 0.0
        for i in range(n):
            a += S[j, i] * out[i]
        a *= rho[j]
        alphas[t] = a
        for i in range(n):
            out[i] -= a * Y[j, i]
    j = order[m - 1]
    yy = 0.0
    for i in range(n):
        yy += Y[j, i] * Y[j, i]
    gamma = 1.0 / (rho[j] * yy)
    for i in range(n):
        out[i] *= gamma
    for t in range(m):
        j = order[t]
        b = 0.0
        for i in range(n):
            b += Y[j, i] * out[i]
        b = alphas[t] - rho[j] * b
        for i in range(n):
            out[i] += b * S[j, i]


def lbfgs_minimize(problem, x0, *, tol, max_iter, memory=20, log=None, name="L-BFGS"):
    """L-BFGS (two-loop recursion) with a backtracking Armijo line search on ``problem`` (the
    interface of :func:`newton_minimize`; ``direction`` is not used). F is convex, so every step
    has y^T s > 0. Returns (f, g, n_iter, converged, history of f)."""
    f, g = problem.set_point(np.array(x0, dtype=np.float64))
    S_buf = np.empty((memory, g.size))
    Y_buf = np.empty((memory, g.size))
    rho = np.empty(memory)
    order = []  # ring-buffer slots, oldest first
    history = [f]
    it, flat, converged = 0, 0, False
    d = np.empty_like(g)
    while True:
        gmax = float(np.max(np.abs(g))) if g.size else 0.0
        if gmax <= tol:
            converged = True
            break
        if it >= max_iter:
            break
        if order:
            _two_loop(g, S_buf, Y_buf, rho, np.array(order, dtype=np.intp), d)
        else:
            np.multiply(g, -1.0 / max(math.sqrt(float(g @ g)), 1e-300), out=d)
        gd = float(g @ d)
        if not gd < 0:
            d[:] = -g
            gd = -float(g @ g)
            order = []
        alpha, fa, noise = _backtrack(problem.line(d), f, gd)
        it += 1
        flat = flat + 1 if not fa < f else 0
        if fa > f + noise or flat >= _MAX_FLAT:
            converged = gmax <= 10 * tol
            break
        f_new, g_new = problem.move(alpha, d)
        slot = order.pop(0) if len(order) == memory else len(order)
        np.multiply(d, alpha, out=S_buf[slot])
        np.subtract(g_new, g, out=Y_buf[slot])
        sy = float(S_buf[slot] @ Y_buf[slot])
        if sy > 1e-12 * float(Y_buf[slot] @ Y_buf[slot]):
            rho[slot] = 1.0 / sy
            order.append(slot)
        f, g = f_new, g_new
        history.append(f)
    if log is not None:
        log.info("M3SVM %s: %d iterations, max|grad|=%.3g", name, it, float(np.max(np.abs(g))) if g.size else 0.0)
    return f, g, it, converged, np.asarray(history)


def m3svm_lbfgs_scores(X, y_index, sample_weight, n_classes, *, lam, p, delta, eps, loss,
                       fit_intercept, max_iter=1000, tol=1e-6, coef_init=None, intercept_init=None,
                       memory=10, log=None):
    """Minimise F by L-BFGS (:func:`lbfgs_minimize`) whose line search works on the scores.

    Per step one product X D^T with the direction D and one product G^T X for the gradient; the
    trial points of the line search cost O(n K) each (scores S + alpha X D^T). Any p > 0.
    Returns an :class:`M3SVMResult`; the common mode of a warm start is removed first.
    """
    K, d = n_classes, X.shape[1]
    prob = _MultiProblem(X, np.asarray(y_index, dtype=np.intp), np.asarray(sample_weight, dtype=np.float64),
                         K, lam=lam, p=p, delta=delta, eps=eps, loss=loss, fit_intercept=fit_intercept)
    x0 = _theta0(K, d, fit_intercept, coef_init, intercept_init)
    f, _, it, converged, hist = lbfgs_minimize(prob, x0, tol=tol, max_iter=max_iter, memory=memory,
                                               log=log, name="L-BFGS (scores)")
    _check_finite(prob.x, "lbfgs-scores", "Check the data scaling (standardise the features) or raise eps.")
    W, b = prob._unpack(prob.x)
    b = np.zeros(K) if b is None else b.copy()
    return M3SVMResult(coef=W.copy(), intercept=b, n_iter=it, objective=f * prob.scale,
                       converged=converged, history=hist)
