"""Margin pursuit by a preconditioned, line-searched Newton-CG method (``solver="newton"``).

Minimises the objective of :mod:`margindist.solvers.margin_pursuit` (binary, y in {-1, +1},
sample weights s_i, c_i = s_i / W with W = sum_i s_i, theta = (w, b), z_i = [x_i, 1] with
``fit_intercept`` else x_i)::

    J(theta) = (lam/2) ||theta||^2 + sum_i c_i S rho(u_i),     u_i = (gamma - y_i <z_i, theta>) / S,
    grad J   = lam theta - Z^T r,                                r_i = c_i psi(u_i) y_i,
    H v      = lam v + Z^T (D * (Z v)),                          D_i = c_i psi'(u_i) / S.

psi' = rho'' lies in [0, 1] (Catoni-Giulini: 1 - u^2/2 for |u| <= sqrt 2, 0 in the linear
tails; the wide one: (1 + a) / (1 + a + a^2/2), a = |u|), so J is strongly convex with a
Lipschitz, semismooth gradient (psi' jumps at |u| = sqrt 2) and H is an element of its
generalised Hessian. Each iteration solves H p = -grad J by preconditioned conjugate gradients
to the relative residual min(0.5, ||g|| / ||g_0||) (an inexact Newton forcing term: locally
quadratic convergence; with the square root of that ratio, the other classical choice, the
sparse benchmark row took 3 iterations and 4-6 CG steps instead of 2 and 5) and backtracks along p from the step 1 (Armijo on J; where J cannot resolve
the decrease, Hager and Zhang's approximate Armijo condition on the exact directional
derivative). Z p is accumulated during CG, so a trial point costs O(n) and no pass over X; one
iteration costs one product with Z and one with Z^T per CG step (for dense and float32 rows
fused into one pass, each row read once) and one Z^T product for the gradient.

Preconditioner, fixed for a given scale: the Hessian of the quadratic part (psi' = 1),
M = lam I + Z^T diag(c) Z / S, factorised (Cholesky) when d + 1 <= 500 -- then H = M exactly
where every |u_i| is small, which is the usual case at the Catoni scale, and CG takes a few
steps -- else its diagonal (Jacobi). Both are invariant to a rescaling of the features, so the
iteration counts are too.

Scale and rescaling exactly as :func:`~margindist.solvers.margin_pursuit.mp_gd`: with
``rescale`` pending, :func:`mp_gd` itself takes its ``rescale_after`` steepest-descent steps
(step 1/L) from the start and re-estimates the scale once (the default single step from 0 is
taken in closed form, :func:`_first_step`); Newton then minimises J at that scale, so both
solvers converge to the same minimiser. The stopping rule is GD's too:
||grad J|| <= tol ||grad J(0)||.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.linalg import cho_factor, cho_solve

from ._result import SolverResult
from ._rows import make_rows, nonneg, row_axpy, row_dot, rows_dot
from .margin_pursuit import (
    INFLUENCE_CODES,
    _check_finite,
    _psi1,
    _rho1,
    check_norm_finite,
    influence_psi,
    influence_rho,
    mp_gd,
    rescaled_scale,
    rows_rmatvec,
    weighted_gram,
    weighted_op_norm_sq,
)

__all__ = ["Curvature", "NewtonResult", "influence_dpsi", "mp_hessp", "mp_newton", "newton_curvature"]

#: Up to this many columns of [X, 1] the preconditioner is the factorised quadratic Hessian.
GRAM_MAX_COLUMNS = 500
#: Armijo constant and the most halvings of the line search.
_ARMIJO = 1e-4
_APPROX_ARMIJO = 0.1
_MAX_HALVINGS = 60
_FM = {"reassoc", "contract", "nsz"}


# ------------------------------------------------------------------ pointwise parts
def influence_dpsi(u, influence):
    """psi'(u) = rho''(u) of the named influence function (vectorised; 0 in the Catoni-Giulini
    tails)."""
    u = np.asarray(u, dtype=np.float64)
    a = np.abs(u)
    if influence == "catoni_giulini":
        return np.where(a <= math.sqrt(2.0), 1.0 - 0.5 * u * u, 0.0)
    if influence == "catoni_wide":
        with np.errstate(over="ignore"):
            return (1.0 + a) / (1.0 + a + 0.5 * a * a)
    raise ValueError(f"psi' is defined for 'catoni_giulini' and 'catoni_wide', not {influence!r}.")


@njit(cache=True, inline="always")
def _dpsi1(u, kind):
    a = abs(u)
    if kind == 0:
        return 1.0 - 0.5 * u * u if a <= math.sqrt(2.0) else 0.0
    if a > 1e150:
        return 0.0
    return (1.0 + a) / (1.0 + a + 0.5 * a * a)


@njit(cache=True)
def _evaluate(f, y, c, margin, scale, kind, r, D):
    """Loss sum_i c_i S rho(u_i); r_i = c_i psi(u_i) y_i and D_i = c_i psi'(u_i) / S in place."""
    loss = 0.0
    for i in range(f.shape[0]):
        u = (margin - y[i] * f[i]) / scale
        loss += c[i] * _rho1(u, kind)
        r[i] = c[i] * _psi1(u, kind) * y[i]
        D[i] = c[i] * _dpsi1(u, kind) / scale
    return scale * loss


@njit(cache=True)
def _loss_along(f, zp, step, y, c, margin, scale, kind):
    """The loss sum_i c_i S rho(u_i) at the decision values f + step * zp, and its derivative in
    step, -sum_i c_i psi(u_i) y_i zp_i."""
    loss = 0.0
    slope = 0.0
    for i in range(f.shape[0]):
        u = (margin - y[i] * (f[i] + step * zp[i])) / scale
        loss += c[i] * _rho1(u, kind)
        slope -= c[i] * _psi1(u, kind) * y[i] * zp[i]
    return scale * loss, slope


# ------------------------------------------------------------------ passes over the rows
@njit(cache=True, inline="always")
def _hessp_body(rows, D, v, out, zv):
    out[:] = 0.0
    for i in range(zv.shape[0]):
        t = row_dot(rows, i, v)
        zv[i] = t
        if D[i] != 0.0:
            row_axpy(rows, i, D[i] * t, out)


@njit(cache=True, fastmath=_FM)
def _hessp_dense(rows, D, v, out, zv):
    """out = Z^T (D * (Z v)) and zv = Z v, one read of each row (vectorised sums)."""
    _hessp_body(rows, D, v, out, zv)


@njit(cache=True)
def _hessp_csr(rows, D, v, out, zv):
    """:func:`_hessp_dense` for CSR rows (sums in index order: gathers do not vectorise)."""
    _hessp_body(rows, D, v, out, zv)


# ------------------------------------------------------------------ the problem at one scale
@dataclass
class _Problem:
    """Z, labels, normalised weights and the constants of J; work arrays of length n.

    Products with Z: float64 CSR X through SciPy's sparse products (faster on gathers and
    scatters than a compiled row loop), everything else through the row loops above, which read
    float32 values without an upcast copy of X and sum in float64.
    """

    rows: object
    csr64: object  # X itself when it is float64 CSR, else None
    y: np.ndarray
    c: np.ndarray
    margin: float
    lam: float
    kind: int
    r: np.ndarray
    D: np.ndarray
    zv: np.ndarray

    def matvec(self, v):
        """Z v."""
        if self.csr64 is None:
            out = np.empty(self.y.shape[0])
            rows_dot(self.rows, v, out)
            return out
        d = self.rows.n_features
        out = self.csr64 @ v[:d]
        return out + v[d] * self.rows.bias if self.rows.has_bias else out

    def rmatvec(self, r):
        """Z^T r."""
        if self.csr64 is None:
            out = np.empty(self.rows.n_features + int(self.rows.has_bias))
            rows_rmatvec(self.rows, r, out)
            return out
        out = self.csr64.T @ r
        return np.append(out, self.rows.bias * r.sum()) if self.rows.has_bias else out

    def evaluate(self, theta, f, scale):
        """(J, grad J) at theta with decision values f = Z theta; keeps D for :meth:`hessp`."""
        loss = _evaluate(f, self.y, self.c, self.margin, scale, self.kind, self.r, self.D)
        g = self.lam * theta - self.rmatvec(self.r)
        return 0.5 * self.lam * float(theta @ theta) + loss, g

    def hessp(self, v):
        """H v at the last evaluated point; Z v is left in ``self.zv``."""
        if self.csr64 is not None:
            self.zv = self.matvec(v)
            return self.rmatvec(self.D * self.zv) + self.lam * v
        out = np.empty_like(v)
        (_hessp_csr if self.rows.sparse else _hessp_dense)(self.rows, self.D, v, out, self.zv)
        return out + self.lam * v

    def along(self, theta, f, p, zp, step, scale):
        """(J, dJ/dstep) at theta + step p, from f = Z theta and zp = Z p (O(n), no pass over X)."""
        t = theta + step * p
        loss, slope = _loss_along(f, zp, step, self.y, self.c, self.margin, scale, self.kind)
        return 0.5 * self.lam * float(t @ t) + loss, self.lam * float(t @ p) + slope


def _make_problem(X, y, sample_weight, margin, lam, influence, fit_intercept):
    csr64 = None
    if sp.issparse(X):
        X = X.tocsr()
        csr64 = X if X.dtype == np.float64 else None
    rows = make_rows(X, 1.0 if fit_intercept else None)
    sw = np.asarray(sample_weight, dtype=np.float64)
    n = X.shape[0]
    return _Problem(rows, csr64, np.ascontiguousarray(y, dtype=np.float64), sw / sw.sum(), float(margin),
                    float(lam), INFLUENCE_CODES[influence], np.empty(n), np.empty(n), np.empty(n))


def mp_hessp(X, y, sample_weight, w, b, v, *, margin, scale, lam, influence="catoni_giulini",
             fit_intercept=True):
    """H(w, b) v, the generalised Hessian of J times v (v of length d + 1 with the intercept)."""
    prob = _make_problem(X, y, sample_weight, margin, lam, influence, fit_intercept)
    theta = np.append(np.asarray(w, dtype=np.float64), b) if fit_intercept else np.asarray(w, dtype=np.float64)
    prob.evaluate(theta, prob.matvec(theta), float(scale))
    return prob.hessp(np.asarray(v, dtype=np.float64))


@njit(cache=True)
def _weighted_col_sq(rows, c, out):
    """out_j = sum_i c_i z_ij^2, the diagonal of Z^T diag(c) Z."""
    out[:] = 0.0
    d = rows.n_features
    for i in range(c.shape[0]):
        if rows.sparse:
            for t in range(nonneg(rows.indptr[i]), nonneg(rows.indptr[i + 1])):
                x = np.float64(rows.data[t])
                out[nonneg(rows.indices[t])] += c[i] * x * x
        else:
            for j in range(d):
                x = np.float64(rows.dense[i, j])
                out[j] += c[i] * x * x
        if rows.has_bias:
            out[d] += c[i] * rows.bias * rows.bias


@dataclass(eq=False)
class Curvature:
    """What Newton's method needs of Z = [X, 1] and the normalised weights c, whatever lam and
    the scale: ``gram`` = Z^T diag(c) Z up to GRAM_MAX_COLUMNS columns of Z (else None and
    ``colsq``, its diagonal), and ``op_norm_sq`` = ||diag(sqrt(c)) Z||_op^2 for the
    steepest-descent steps before the rescaling (computed when first asked for). Grid points
    on the same rows share one (:func:`newton_curvature`)."""

    X: object = field(repr=False)
    c: np.ndarray = field(repr=False)
    fit_intercept: bool
    gram: np.ndarray | None
    colsq: np.ndarray | None

    @cached_property
    def op_norm_sq(self) -> float:
        return weighted_op_norm_sq(self.X, self.c, self.fit_intercept, gram=self.gram)


def newton_curvature(X, sample_weight, fit_intercept=True) -> Curvature:
    """The :class:`Curvature` of X with the sample weights (normalised to sum 1)."""
    sw = np.asarray(sample_weight, dtype=np.float64)
    c = sw / sw.sum()
    d1 = X.shape[1] + int(bool(fit_intercept))
    if d1 > GRAM_MAX_COLUMNS:
        colsq = np.empty(d1)
        _weighted_col_sq(make_rows(X.tocsr() if sp.issparse(X) else X, 1.0 if fit_intercept else None), c, colsq)
        return Curvature(X, c, bool(fit_intercept), None, colsq)
    with np.errstate(over="ignore", invalid="ignore"):
        gram = weighted_gram(X, c, fit_intercept)
    check_norm_finite(gram)
    return Curvature(X, c, bool(fit_intercept), gram, None)


def _preconditioner(gram, colsq, lam, scale):
    """r -> M^{-1} r for M = lam I + Z^T diag(c) Z / S (``gram`` given), else its diagonal.

    The diagonal also stands in when the Cholesky factorisation fails: lam below the rounding
    of a singular Gram matrix (repeated or dependent columns with lam ~ 1e-18).
    """
    if gram is not None:
        M = gram / scale
        M[np.diag_indices_from(M)] += lam
        try:
            factor = cho_factor(M, lower=True, check_finite=False)
            return lambda r: cho_solve(factor, r, check_finite=False)
        except np.linalg.LinAlgError:
            colsq = np.diag(gram).copy()
    inv = 1.0 / (lam + colsq / scale)
    return lambda r: inv * r


# ------------------------------------------------------------------ Newton-CG
def _pcg(prob, g, precond, tol, max_cg):
    """p ~ -H^{-1} g by preconditioned CG to ||H p + g|| <= tol; returns (p, Z p, CG steps)."""
    p = np.zeros_like(g)
    zp = np.zeros(prob.zv.shape[0])
    r = -g
    z = precond(r)
    d = z.copy()
    rz = float(r @ z)
    k = 0
    while k < max_cg:
        k += 1
        hd = prob.hessp(d)
        dhd = float(d @ hd)  # >= lam ||d||^2 > 0 but for d = 0 (r = 0) or underflow
        if dhd <= 0.0:
            break
        a = rz / dhd
        p += a * d
        zp += a * prob.zv
        r -= a * hd
        if math.sqrt(float(r @ r)) <= tol:
            break
        z = precond(r)
        rz_new = float(r @ z)
        d = z + (rz_new / rz) * d
        rz = rz_new
    return p, zp, k


def _line_search(prob, theta, f, J, g, p, zp, scale):
    """Backtracking from the Newton step 1; the first step with sufficient decrease, 0 if none.

    Sufficient decrease: Armijo's condition on J, or -- where J cannot resolve the decrease
    (equal to J(0) within 1e-12 relative: near the optimum, or on features so small that the
    decrease is below the rounding of J) -- its form with J replaced by the trapezoid rule on the
    exact directional derivative (Hager and Zhang's approximate Armijo condition, which the
    derivative, free of that cancellation, can decide).
    """
    slope = float(g @ p)
    if not slope < 0.0:
        return 0.0
    step = 1.0
    for _ in range(_MAX_HALVINGS):
        J_new, slope_new = prob.along(theta, f, p, zp, step, scale)
        if J_new <= J + _ARMIJO * step * slope:
            return step
        if J_new <= J + 1e-12 * abs(J) and slope_new <= (2.0 * _APPROX_ARMIJO - 1.0) * slope:
            return step
        step *= 0.5
    return 0.0


def _newton_at_scale(prob, theta, scale, precond, g_ref, *, max_iter, tol, max_cg, log):
    """Newton-CG on J at a fixed scale from theta: (theta, iterations, CG steps, J history,
    converged)."""
    f = prob.matvec(theta)
    J, g = prob.evaluate(theta, f, scale)
    history, n_iter, n_cg, converged = [J], 0, 0, False
    while True:
        gnorm = math.sqrt(float(g @ g))
        if gnorm == 0.0 or (tol is not None and gnorm <= tol * g_ref):
            converged = True  # a zero gradient is the minimiser (also with tol=None)
            break
        if n_iter >= max_iter:
            break
        forcing = min(0.5, gnorm / g_ref) if g_ref > 0 else 0.5
        p, zp, k = _pcg(prob, g, precond, forcing * gnorm, max_cg)
        n_cg += k
        step = _line_search(prob, theta, f, J, g, p, zp, scale)
        if step == 0.0:  # no decrease left at machine precision
            break
        theta = theta + step * p
        f += step * zp
        J, g = prob.evaluate(theta, f, scale)
        if not (math.isfinite(J) and np.all(np.isfinite(theta))):
            raise ValueError("Margin pursuit diverged (Newton): the weights are not finite. Scale the "
                             "features (e.g. MinMaxScaler or StandardScaler) or increase lam.")
        history.append(J)
        n_iter += 1
        if log is not None:
            log.debug("margin pursuit Newton: iteration %d, J = %.10g, |grad| = %.3g, CG steps %d, step %.3g",
                      n_iter, J, gnorm, k, step)
    return theta, n_iter, n_cg, history, converged


@dataclass(kw_only=True)
class NewtonResult(SolverResult):
    """A run of :func:`mp_newton`. ``n_iter``: steepest-descent steps before the rescaling plus
    Newton iterations; ``history``: J at every iterate (the start included; entries before
    ``rescale_iter`` at the old scale); ``n_newton`` Newton iterations, ``n_cg`` CG steps
    (Hessian-vector products) in all."""

    w: np.ndarray
    b: float
    scale: float
    rescaled: bool
    rescale_iter: int | None
    n_newton: int
    n_cg: int


def _theta(w, b, fit_intercept):
    return np.append(w, b) if fit_intercept else np.array(w, dtype=np.float64)


def _first_step(prob, sample_weight, curv, zy, scale, rescale_kw, log):
    """The default rescaling (``rescale_after=1`` from theta = 0) in closed form: at theta = 0
    every u_i is gamma / S, so grad J(0) = -psi(gamma / S) Z^T (c y) whatever lam, and the
    step 1/L of :func:`mp_gd` gives theta_1 = psi(gamma / S) Z^T (c y) / L with the margins
    y Z theta_1 -- one pass over X given ``zy`` = Z^T (c y), instead of mp_gd's six. Returns
    (theta_1, the rescaled scale, [J(0)])."""
    op2 = curv.op_norm_sq
    check_norm_finite(op2)
    kind = rescale_kw["influence"]
    u0 = prob.margin / scale
    theta = (float(influence_psi(u0, kind)) / (op2 / scale + prob.lam)) * zy
    _check_finite(theta, 0.0, "gradient descent, iteration 1")
    sw = np.asarray(sample_weight, dtype=np.float64)
    new_scale = rescaled_scale(prob.y * prob.matvec(theta), sw, prob.margin, rescale_kw["rescale_quantile"],
                               rescale_kw["delta"], rescale_kw["scale_factor"])
    if log is not None:
        log.info("margin pursuit GD: scale re-estimated after 1 iterations: S = %.4g", new_scale)
    return theta, new_scale, [scale * float(influence_rho(u0, kind))]


def _start(X, y, sample_weight, prob, curv, zy, scale, w0, b0, fit_intercept, rescale_kw, start, log):
    """theta and scale Newton starts from: after mp_gd's steps and rescaling when one is pending
    (``rescale_kw`` not None), else (w0, b0) at ``scale``; ``start`` (w, b), when given,
    replaces the point (not the scale). Returns (theta, scale, history, rescale_iter)."""
    if rescale_kw is None:
        return _theta(*(start or (w0, b0)), fit_intercept), float(scale), [], None
    if rescale_kw["rescale_after"] == 1 and rescale_kw["iters_done"] == 0 and not (np.any(w0) or b0):
        theta, scale, history = _first_step(prob, sample_weight, curv, zy, scale, rescale_kw, log)
        rescale_iter = 1
    else:
        pre = mp_gd(X, y, sample_weight, margin=prob.margin, scale=scale, lam=prob.lam, w0=w0, b0=b0,
                    fit_intercept=fit_intercept, tol=None, rescale=True, rescaled=False,
                    op_norm_sq=curv.op_norm_sq, log=log, **rescale_kw)
        theta, scale, history = _theta(pre.w, pre.b, fit_intercept), pre.scale, list(pre.history[:-1])
        rescale_iter = pre.rescale_iter
    if start is not None:  # this scale, the point of another start (the history is Newton's)
        return _theta(*start, fit_intercept), scale, [], None
    return theta, scale, history, rescale_iter


def mp_newton(X, y, sample_weight, *, margin, scale, lam, influence="catoni_giulini", fit_intercept=True,
              max_iter=100, tol=1e-4, rescale=True, rescale_after=1, rescale_quantile=0.75, delta=0.01,
              scale_factor=1.0, w0=None, b0=0.0, iters_done=0, rescaled=False, max_cg=250, curvature=None,
              start=None, log=None):
    """Minimise J by Newton-CG (see the module docstring); returns a :class:`NewtonResult`.

    Parameters are those of :func:`~margindist.solvers.margin_pursuit.mp_gd` plus ``max_cg``, the
    most CG steps per Newton iteration, and ``curvature``, the :func:`newton_curvature` of X and
    the sample weights when the caller has it (grid points on the same rows share it). With ``rescale`` pending, ``max(rescale_after - iters_done,
    1)`` steepest-descent steps come first, as in mp_gd; ``max_iter`` bounds those steps plus the
    Newton iterations. ``start``: a point (w, b) Newton starts from once the scale is settled
    (after the rescaling from (w0, b0), when one is pending) -- a warm start that reaches the
    same minimiser as the cold fit, since J at a fixed scale is strictly convex; its
    steepest-descent steps then only set the scale and count in neither ``n_iter`` nor the
    history. Stops when ||grad J|| <= tol ||grad J(0)|| at the final scale (never
    before the rescaling), after ``max_iter`` iterations, or when the line search finds no
    decrease (J minimal to rounding).
    """
    if influence not in ("catoni_giulini", "catoni_wide"):
        raise ValueError(f"mp_newton needs a smooth influence function, not {influence!r}.")
    prob = _make_problem(X, y, sample_weight, margin, lam, influence, fit_intercept)
    d = X.shape[1]
    w0 = np.zeros(d) if w0 is None else np.array(w0, dtype=np.float64)
    b0 = float(b0) if fit_intercept else 0.0
    curv = newton_curvature(X, sample_weight, fit_intercept) if curvature is None else curvature
    rescale_kw = None
    if rescale and not rescaled:
        rescale_kw = {"influence": influence, "max_iter": max(rescale_after - iters_done, 1),
                      "rescale_after": rescale_after, "rescale_quantile": rescale_quantile, "delta": delta,
                      "scale_factor": scale_factor, "iters_done": iters_done}
    start = None if start is None else (np.asarray(start[0], dtype=np.float64), float(start[1]))
    zy = prob.rmatvec(prob.c * prob.y)
    theta, s, history, rescale_iter = _start(X, y, sample_weight, prob, curv, zy, scale, w0, b0, fit_intercept,
                                             rescale_kw, start, log)
    n_gd = len(history)
    g_ref = float(influence_psi(margin / s, influence)) * math.sqrt(float(zy @ zy))  # ||grad J(0)||
    precond = _preconditioner(curv.gram, curv.colsq, prob.lam, s)
    theta, n_newton, n_cg, hist, converged = _newton_at_scale(prob, theta, s, precond, g_ref,
                                                              max_iter=max(max_iter - n_gd, 0), tol=tol,
                                                              max_cg=max_cg, log=log)
    if log is not None:
        log.info("margin pursuit Newton: %d iterations, %d CG steps, S = %.4g", n_newton, n_cg, s)
    w = theta[:d].copy()
    b = float(theta[d]) if fit_intercept else 0.0
    return NewtonResult(w=w, b=b, scale=s, n_iter=n_gd + n_newton, converged=converged,
                        history=np.asarray(history + hist), rescaled=rescaled or rescale_kw is not None,
                        rescale_iter=rescale_iter, n_newton=n_newton, n_cg=n_cg)
