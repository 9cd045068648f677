"""Optimal margin Distribution Machine (Zhang & Zhou, TKDE 2019): objective, dual, solvers.

Primal, in the convention of the reference package LIBODM (``-b`` appends a constant feature
B, so the intercept is regularised), with sample weights s_i and S = sum_i s_i:

    P(w) = 1/2 ||w||^2 + sum_i c_i [ (1 - theta - z_i)_+^2 + mu (z_i - 1 - theta)_+^2 ],
    c_i = kappa s_i / S,   kappa = lam / (1 - theta)^2,   z_i = y_i <w, xh_i>,  xh_i = [x_i, B].

With unit weights c_i = kappa / m, LIBODM's ``lambda / (m (1 - theta)^2)`` (some slides of the
paper write lam / (2 m) instead: a factor 2 in lam). Normalising by S instead of m makes an
integer weight k identical to k copies of the sample.

Dual (a = [alpha; beta] >= 0, gamma = alpha - beta, Q = Y Xh Xh^T Y or Y (G + B^2) Y):

    min_a 1/2 gamma^T Q gamma + sum_i [ D_a,i / 2 alpha_i^2 + D_b,i / 2 beta_i^2
                                          + (theta - 1) alpha_i + (theta + 1) beta_i ],
    D_a,i = 1 / (2 c_i) = S (1 - theta)^2 / (2 lam s_i),   D_b,i = D_a,i / mu,

w = Xh^T Y gamma; with mu = 0 the upper side costs nothing and beta is left out. Strong duality
holds and P(w*) = -min_a (dual).

Solvers:

* :func:`odm_dcd_linear` / :func:`odm_dcd_kernel`: dual coordinate descent
  (:mod:`margindist.solvers.dcd`), O(nnz(x_i)) per step (linear) or O(m) per changed variable
  with kernel columns from a bounded LRU cache (kernel).
* :func:`odm_newton`: Newton's method on the piecewise-quadratic primal with the generalised
  Hessian I + Xh^T diag(c h) Xh (h = 2 below the band, 2 mu above it, 0 inside), directions by
  conjugate gradients with Hessian-vector products, and an exact line search on the
  one-dimensional piecewise quadratic. Gradient and each Hessian-vector product cost O(nnz(X)).
  (LIBODM's trust-region gradient recomputes X^T v inside its loop over the samples, which makes
  it quadratic in m; that is not reproduced.)
* :func:`odm_svrg`: stochastic variance-reduced gradient with step 1 / (4 L_max) from the
  smoothness constants L_i = 1 + 2 kappa (m s_i / S) max(1, mu) ||xh_i||^2 of the per-sample
  functions, lazy dense updates (O(nnz(x_i)) per step), and a check for non-finite weights
  after every epoch (LIBODM's SVRG, with a Barzilai-Borwein step, can diverge to NaN silently).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from numba import njit
from sklearn.exceptions import ConvergenceWarning

from ..kernels import KernelRowCache
from ._gram import x_dot
from ._result import UnpackableResult
from ._rows import (
    XhProducts,
    rng_below,
    row_axpy,
    row_dot,
    row_sq_norms,
    seed_from,
)
from .dcd import dcd_kernel, dcd_linear

__all__ = [
    "ODMKernelResult",
    "ODMLinearResult",
    "newton_after",
    "odm_band_loss",
    "odm_band_loss_grad",
    "odm_band_loss_hess",
    "odm_coefficients",
    "odm_dcd_kernel",
    "odm_dcd_linear",
    "odm_dual_objective",
    "odm_dual_terms",
    "odm_newton",
    "odm_primal_objective",
    "odm_svrg",
]


# ----------------------------------------------------------------------------- results


@dataclass(kw_only=True)
class ODMLinearResult(UnpackableResult):
    """A linear ODM run: w (d,), b = bias * w_B, and the dual variables a = [alpha; beta] (DCD
    only, else None). Unpacks as (w, b, a, n_iter) from DCD, (w, b, n_iter) from Newton / SVRG."""

    w: np.ndarray
    b: float
    a: np.ndarray | None = None

    @property
    def _unpack(self):
        return ("w", "b", "n_iter") if self.a is None else ("w", "b", "a", "n_iter")


@dataclass(kw_only=True)
class ODMKernelResult(UnpackableResult):
    """A kernel ODM run: dual_coef = y * gamma (m,), b = bias^2 sum(dual_coef), a = [alpha; beta],
    u = Q gamma; ``newton``: :func:`odm_kernel_newton` took part. Unpacks as
    (dual_coef, b, a, n_iter, u)."""

    _unpack = ("dual_coef", "b", "a", "n_iter", "u")
    dual_coef: np.ndarray
    b: float
    a: np.ndarray
    u: np.ndarray
    newton: bool = False


# ----------------------------------------------------------------------------- the loss


def odm_band_loss(z, mu=0.8, theta=0.2):
    """(1 - theta - z)_+^2 + mu (z - 1 - theta)_+^2: zero inside the band [1 - theta, 1 + theta]."""
    z = np.asarray(z, dtype=np.float64)
    lo = np.maximum(1.0 - theta - z, 0.0)
    hi = np.maximum(z - 1.0 - theta, 0.0)
    return lo * lo + mu * hi * hi


def odm_band_loss_grad(z, mu=0.8, theta=0.2):
    """d/dz of :func:`odm_band_loss`: -2 (1 - theta - z)_+ + 2 mu (z - 1 - theta)_+."""
    z = np.asarray(z, dtype=np.float64)
    return -2.0 * np.maximum(1.0 - theta - z, 0.0) + 2.0 * mu * np.maximum(z - 1.0 - theta, 0.0)


def odm_band_loss_hess(z, mu=0.8, theta=0.2):
    """Generalised second derivative: 2 below the band, 2 mu above it, 0 inside."""
    z = np.asarray(z, dtype=np.float64)
    return np.where(z < 1.0 - theta, 2.0, 0.0) + np.where(z > 1.0 + theta, 2.0 * mu, 0.0)


# ----------------------------------------------------------------------------- objective


def odm_coefficients(sample_weight, lam, theta) -> np.ndarray:
    """c_i = kappa s_i / S with kappa = lam / (1 - theta)^2."""
    s = np.asarray(sample_weight, dtype=np.float64)
    kappa = lam / (1.0 - theta) ** 2
    return kappa * s / s.sum()


def odm_dual_terms(sample_weight, lam, mu, theta):
    """(n_var, D, p, U) of the ODM dual for :mod:`margindist.solvers.dcd`."""
    c = odm_coefficients(sample_weight, lam, theta)
    m = c.shape[0]
    Da = 0.5 / c
    if mu > 0:
        D = np.concatenate([Da, Da / mu])
        p = np.concatenate([np.full(m, theta - 1.0), np.full(m, theta + 1.0)])
        n_var = 2 * m
    else:
        D, p, n_var = Da, np.full(m, theta - 1.0), m
    return n_var, D, p, np.full(n_var, np.inf)


def odm_primal_objective(w_sq, z, sample_weight, lam, mu, theta) -> float:
    """P = 1/2 ||w||^2 + sum_i c_i band_loss(z_i); ``w_sq`` = ||w||^2 (bias weight included)."""
    c = odm_coefficients(sample_weight, lam, theta)
    return 0.5 * float(w_sq) + float(c @ odm_band_loss(z, mu, theta))


def odm_dual_objective(gQg, a, sample_weight, lam, mu, theta) -> float:
    """The dual objective (to be minimised): 1/2 gamma^T Q gamma + sum D/2 a^2 + p^T a.

    ``gQg`` = gamma^T Q gamma (= ||w||^2 on the linear path). At the optimum it equals
    -P(w*).
    """
    _, D, p, _ = odm_dual_terms(sample_weight, lam, mu, theta)
    a = np.asarray(a, dtype=np.float64)
    return 0.5 * float(gQg) + float(0.5 * (D * a) @ a + p @ a)


# ----------------------------------------------------------------------------- dual coordinate descent


def odm_dcd_linear(X, y, sample_weight, lam=1.0, mu=0.8, theta=0.2, *, bias=1.0, tol=1e-3,
                   max_iter=1000, a0=None, shrinking=True, random_state=None):
    """Linear ODM by DCD. Returns an :class:`ODMLinearResult` (w (d,), b = bias * w_B, a = [alpha; beta])."""
    n_var, D, p, U = odm_dual_terms(sample_weight, lam, mu, theta)
    res = dcd_linear(X, y, D, p, U, n_var=n_var, bias=bias, a0=a0, tol=tol, max_iter=max_iter,
                     shrinking=shrinking, random_state=random_state, warn_label="ODM")
    return ODMLinearResult(w=res.w[:-1].copy(), b=float(bias * res.w[-1]), a=res.a, n_iter=res.n_iter,
                           converged=res.converged)


#: The kernel DCD hands over to :func:`odm_kernel_newton` after this many epochs without
#: converging (per thousand examples, at least this many: :func:`newton_after`), on at most
#: ``_KERNEL_NEWTON_MAX`` examples whose kernel rows are all cached; after
#: ``_KERNEL_NEWTON_SOON`` epochs when the caller says the DCD creeps (``newton="soon"``).
_KERNEL_NEWTON_AFTER = 20
_KERNEL_NEWTON_SOON = 2
_KERNEL_NEWTON_MAX = 6000
#: The kernel DCD runs sweeps of pulled blocks of this many rows
#: (:func:`~margindist.solvers.dcd.dcd_kernel`'s ``block_sweeps``): ODM's duals are dense, and
#: a sweep that reads each row once takes the place of about three plain epochs (magic, 5000
#: rows: 13-16 sweeps against 43-44 epochs, 0.37 -> 0.18-0.19 s a fit; 14 000 rows, 3744 of
#: them cached: 3.6 -> 3.2-3.3 s).
_KERNEL_BLOCK = 320


def newton_after(m) -> int:
    """DCD epochs before the Newton phase on m examples: :data:`_KERNEL_NEWTON_AFTER` per
    thousand (at least that many). An epoch costs O(m^2) and a Newton iteration O(|A|^3) with
    |A| up to m, so the DCD's budget grows like the Newton phase's cost counted in epochs (a
    DCD that would end soon after the budget is not handed an expensive Newton phase). On
    [0, 1]-scaled data with the polynomial kernel (whose values share a large common part, so
    every pair of dual coordinates is strongly coupled) the DCD crept through all 1000 epochs
    at 2250-4900 examples, 4-9 s; with the Newton phase it ends in 0.6-3 s."""
    return max(_KERNEL_NEWTON_AFTER, _KERNEL_NEWTON_AFTER * m // 1000)


def odm_dcd_kernel(cache: KernelRowCache | None, y, sample_weight, lam=1.0, mu=0.8, theta=0.2, *, gram=None,
                   bias=1.0, tol=1e-3, max_iter=1000, a0=None, shrinking=True, random_state=None,
                   newton=True):
    """Kernel ODM by DCD, kernel rows from ``cache`` or from a dense Gram matrix ``gram``.

    ``newton``: when the DCD has not converged after :func:`newton_after` epochs (large lam
    and an ill-conditioned kernel can leave it creeping for thousands) on at most
    ``_KERNEL_NEWTON_MAX`` examples with every kernel row at hand, :func:`odm_kernel_newton`
    solves the problem from the DCD's point and the DCD certifies the result (its stopping
    rule, usually in one epoch). ``"soon"``: the same after ``_KERNEL_NEWTON_SOON`` epochs, for
    a caller that knows the DCD creeps here (a warm start from a neighbouring problem that
    needed the Newton phase: along a grid of growing lam each next problem is harder). The
    model is the DCD's optimum either way. ``n_iter`` counts DCD epochs.

    Returns an :class:`ODMKernelResult` (dual_coef = y * gamma (m,), b = bias^2 sum(dual_coef), a,
    u = Q gamma); f(x) = sum_j dual_coef_j k(x_j, x) + b.
    """
    if newton not in (True, False, "soon"):
        raise ValueError(f"newton must be True, False or 'soon'; got {newton!r}.")
    n_var, D, p, U = odm_dual_terms(sample_weight, lam, mu, theta)
    m = y.shape[0]
    K = gram if gram is not None else cache.matrix()
    after = _KERNEL_NEWTON_SOON if newton == "soon" else newton_after(m)
    handover = bool(newton) and K is not None and m <= _KERNEL_NEWTON_MAX and max_iter > after
    kw = dict(n_var=n_var, cache=cache, gram=gram, bias=bias, tol=tol, shrinking=shrinking, random_state=random_state,
              block_sweeps=_KERNEL_BLOCK)
    res = dcd_kernel(y, D, p, U, a0=a0, max_iter=after if handover else max_iter,
                     warn_label=None if handover else "ODM", **kw)
    n_iter = res.n_iter
    used = handover and not res.converged
    if used:
        g, _ = odm_kernel_newton(K, y, sample_weight, lam, mu, theta, bias=bias, gamma0=res.gamma(m))
        a_start = np.concatenate([np.maximum(g, 0.0), np.maximum(-g, 0.0)]) if n_var == 2 * m else np.maximum(g, 0.0)
        res = dcd_kernel(y, D, p, U, a0=a_start, max_iter=max_iter - n_iter, warn_label="ODM", **kw)
        n_iter += res.n_iter
    coef = np.asarray(y, dtype=np.float64) * res.gamma(m)
    return ODMKernelResult(dual_coef=coef, b=float(bias * bias * coef.sum()), a=res.a, u=res.u, n_iter=n_iter,
                           converged=res.converged, newton=used)


def odm_kernel_newton(K, y, sample_weight, lam=1.0, mu=0.8, theta=0.2, *, bias=1.0, gamma0=None, max_iter=50):
    """Kernel ODM by Newton's method in the expansion coefficients (an active-set method).

    With f = sum_j y_j gamma_j (k(x_j, .) + B^2), the primal is P(gamma) = 1/2 gamma^T Q gamma
    + sum_i c_i band_loss(z_i), z = Q gamma, Q = Y (K + B^2) Y. On a fixed active set A (z_i
    below the band, weight h_i = 2, target t_i = 1 - theta; above it, h_i = 2 mu, t_i = 1 +
    theta) the loss is quadratic and its minimiser has gamma_i = c_i h_i (t_i - z_i) on A, 0
    elsewhere: (Q_AA + diag(1 / (c h))_A) gamma_A = t_A, one Cholesky solve. The step to it is
    Newton's step (Chapelle's primal Newton for the squared hinge, here with two sides); an exact
    line search on the piecewise-quadratic P along it keeps every iteration a descent, and the
    iteration ends when a full step leaves the active set unchanged: gamma = -c band_loss'(z)
    there, the optimality condition. A system that is not positive definite (an indefinite
    precomputed kernel) ends it where it is. Returns (gamma, iterations).
    """
    y = np.asarray(y, dtype=np.float64)
    K = np.asarray(K)
    if K.dtype not in (np.float32, np.float64):
        K = K.astype(np.float64)
    c = odm_coefficients(sample_weight, lam, theta)
    m, B2 = y.shape[0], float(bias) ** 2

    def qmul(v):  # float64 products, also with a float32 cache's rows (not copied to float64)
        yv = y * v
        return y * (x_dot(K, yv) + B2 * yv.sum())

    gamma = np.zeros(m) if gamma0 is None else np.array(gamma0, dtype=np.float64)
    z = qmul(gamma)
    it = 0
    for it in range(1, max_iter + 1):
        sets = _band_sets(z, mu, theta)
        target = _band_minimiser(K, y, c, sets, mu, theta, B2)
        if target is None:  # an indefinite (precomputed) kernel: the DCD goes on from here
            break
        p = target - gamma
        q = qmul(p)
        step = _line_search(float(gamma @ q), float(p @ q), z, q, c, mu, theta)
        gamma += step * p
        z += step * q
        if abs(step - 1.0) <= 1e-9 and all(np.array_equal(a, b) for a, b in zip(_band_sets(z, mu, theta), sets)):
            break
    return gamma, it


def _band_sets(z, mu, theta):
    """(below, outside): the margins below the band, and those below or (mu > 0) above it."""
    below = z < 1.0 - theta
    return below, (below | (z > 1.0 + theta) if mu > 0 else below)


def _band_minimiser(K, y, c, sets, mu, theta, B2):
    """The minimiser of P with the loss quadratic on the active ``sets``: gamma_A from
    (Q_AA + diag(1 / (c h))_A) gamma_A = t_A, 0 elsewhere; None if that system is not positive
    definite. Since Q_AA = Y (K_AA + B^2) Y with y_i^2 = 1, that is gamma_A = Y u with
    (K_AA + B^2 + diag(1 / (c h))) u = Y t_A: no products with y y^T."""
    below, outside = sets
    idx = np.flatnonzero(outside)
    target = np.zeros(y.shape[0])
    if idx.size:
        h = np.where(below[idx], 2.0, 2.0 * mu)
        M = np.empty((idx.size, idx.size))
        _band_block(K, idx, B2, 1.0 / (c[idx] * h), M)
        rhs = y[idx] * np.where(below[idx], 1.0 - theta, 1.0 + theta)
        try:  # M.T: Fortran order, its lower triangle the one filled
            u = sla.cho_solve(sla.cho_factor(M.T, lower=True, overwrite_a=True, check_finite=False), rhs,
                              check_finite=False)
        except np.linalg.LinAlgError:
            return None
        target[idx] = y[idx] * u
    return target


@njit(cache=True)
def _band_block(K, idx, B2, diag, out):
    """out[a, b] = K[idx_a, idx_b] + B2 (+ diag_a on the diagonal) for b >= a: the upper
    triangle of the C-ordered ``out``, the lower one of its Fortran view (the other is not
    written). Gathers half of what ``K[np.ix_(idx, idx)]`` does, along rows of K."""
    n = idx.shape[0]
    for a in range(n):
        row = K[idx[a]]
        o = out[a]
        for b in range(a, n):
            o[b] = row[idx[b]] + B2
        o[a] += diag[a]


# ----------------------------------------------------------------------------- products with Xh


def _odm_grad(v, z, A: XhProducts, y, c, mu, theta):
    return v + A.xtr(y * c * odm_band_loss_grad(z, mu, theta))


def _warn_max_iter(method, tol, max_iter, unit, remedy):
    """The ConvergenceWarning of the primal solvers (stacklevel: the caller of the solver)."""
    warnings.warn(
        f"ODM: {method} did not reach tol={tol:g} in max_iter={max_iter} {unit}. Increase max_iter, "
        f"loosen tol, or {remedy}.",
        ConvergenceWarning,
        stacklevel=3,
    )


# ----------------------------------------------------------------------------- Newton


def _cg(hessp, rhs, rtol, max_cg):
    """Conjugate gradients on H x = rhs from 0 to a relative residual ``rtol``; stops at a
    value that overflows (x is then not finite, which the caller reports)."""
    x = np.zeros_like(rhs)
    r = rhs.copy()
    pdir = r.copy()
    rr = r @ r
    stop = (rtol**2) * rr
    n = 0
    with np.errstate(over="ignore", invalid="ignore"):
        while n < max_cg and rr > stop and np.isfinite(rr):
            Hp = hessp(pdir)
            alpha = rr / (pdir @ Hp)
            x += alpha * pdir
            r -= alpha * Hp
            rr_new = r @ r
            pdir = r + (rr_new / rr) * pdir
            rr = rr_new
            n += 1
    return x, n


def _line_search(vd, dd, z, e, c, mu, theta):
    """argmin_t phi(t) = vd t + dd t^2 / 2 + sum_i c_i band_loss(z_i + t e_i), a convex piecewise
    quadratic: the primal P(v + t d) along a direction d (vd = v^T d, dd = d^T d, e = y * Xh d;
    in the kernel form vd = gamma^T Q d, dd = d^T Q d, e = Q d)."""

    def dphi(t):
        zt = z + t * e
        return vd + t * dd + float((c * odm_band_loss_grad(zt, mu, theta)) @ e)

    def ddphi(t):
        zt = z + t * e
        return dd + float((c * odm_band_loss_hess(zt, mu, theta)) @ (e * e))

    # bracket [lo, hi] with dphi(lo) < 0 <= dphi(hi); dphi(0) < 0 for a descent direction
    lo, hi = 0.0, 1.0
    g_hi = dphi(hi)
    while g_hi < 0.0:
        lo, hi = hi, 2.0 * hi
        g_hi = dphi(hi)
        if hi > 1e12:
            break
    t = 1.0 if lo == 0.0 else hi
    for _ in range(100):
        g = dphi(t)
        if abs(g) <= 1e-13 * (abs(vd) + dd + 1.0):
            break
        if g < 0.0:
            lo = t
        else:
            hi = t
        h = ddphi(t)
        t_new = t - g / h if h > 0.0 else 0.5 * (lo + hi)
        if not (lo < t_new < hi):
            t_new = 0.5 * (lo + hi)
        if abs(t_new - t) <= 1e-15 * max(1.0, abs(t)):
            t = t_new
            break
        t = t_new
    return t


def odm_newton(X, y, sample_weight, lam=1.0, mu=0.8, theta=0.2, *, bias=1.0, tol=1e-3, max_iter=1000,
               w0=None, log=None):
    """Linear ODM by Newton-CG on the primal.

    Stops when ||grad P(v)|| <= tol * ||grad P(0)|| (v = [w, w_B]). Returns an :class:`ODMLinearResult`.
    """
    y = np.asarray(y, dtype=np.float64)
    A = XhProducts(X, bias)
    c = odm_coefficients(sample_weight, lam, theta)
    v = np.zeros(A.d + 1) if w0 is None else np.array(w0, dtype=np.float64).ravel()
    g_ref = np.linalg.norm(_odm_grad(np.zeros(A.d + 1), np.zeros(A.m), A, y, c, mu, theta))
    z = y * A.xv(v)
    converged = False
    it = 0
    while it < max_iter:
        g = _odm_grad(v, z, A, y, c, mu, theta)
        gnorm = np.linalg.norm(g)
        if gnorm <= tol * g_ref:
            converged = True
            break
        h = c * odm_band_loss_hess(z, mu, theta)

        def hessp(s, h=h):
            return s + A.xtr(h * A.xv(s))

        dvec, n_cg = _cg(hessp, -g, min(0.1, np.sqrt(gnorm / max(g_ref, 1e-300))), 10 * (A.d + 1))
        with np.errstate(over="ignore", invalid="ignore"):
            e = y * A.xv(dvec)
        if not (np.all(np.isfinite(dvec)) and np.all(np.isfinite(e))):
            raise FloatingPointError(
                f"ODM: Newton's method overflowed at iteration {it + 1} (its direction is not finite in "
                "float64): the features are too large. Scale the features (e.g. to [0, 1] or standardise them)."
            )
        t = _line_search(float(v @ dvec), float(dvec @ dvec), z, e, c, mu, theta)
        v += t * dvec
        z += t * e
        it += 1
        if log is not None:
            log.debug("ODM Newton it %d |g| %.3e cg %d step %.3g", it, gnorm, n_cg, t)
    if not converged:
        _warn_max_iter("Newton's method", tol, max_iter, "iterations", "scale the features")
    return ODMLinearResult(w=v[:-1].copy(), b=float(bias * v[-1]), n_iter=it, converged=converged)


# ----------------------------------------------------------------------------- SVRG


@njit(cache=True)
def _svrg_epoch(rows, y, cm, mu, theta, r, xr, snap, eta, n_steps, rng, v):
    """One SVRG inner loop. w = A v + Bc r, r = w_snap - full_grad; returns w (dense).

    cm_i = m c_i; snap_i = cm_i * loss'(z_i(w_snap)) * y_i; xr_i = <xh_i, r>.
    """
    m = y.shape[0]
    d = v.shape[0] - 1
    A = 1.0
    Bc = 0.0
    for _ in range(n_steps):
        i = rng_below(rng, m)
        acc = row_dot(rows, i, v)
        zi = y[i] * (A * acc + Bc * xr[i])
        if zi < 1.0 - theta:
            dl = -2.0 * (1.0 - theta - zi)
        elif zi > 1.0 + theta:
            dl = 2.0 * mu * (zi - 1.0 - theta)
        else:
            dl = 0.0
        delta = cm[i] * dl * y[i] - snap[i]
        A *= 1.0 - eta
        Bc = (1.0 - eta) * Bc + eta
        if delta != 0.0:
            row_axpy(rows, i, -eta * delta / A, v)
        if A < 1e-9:
            for f in range(d + 1):
                v[f] *= A
            A = 1.0
    out = np.empty(d + 1)
    for f in range(d + 1):
        out[f] = A * v[f] + Bc * r[f]
    return out


def odm_svrg(X, y, sample_weight, lam=1.0, mu=0.8, theta=0.2, *, bias=1.0, tol=1e-3, max_iter=1000,
             w0=None, step=None, random_state=None, log=None):
    """Linear ODM by SVRG (one epoch of m uniformly drawn steps per snapshot).

    P(w) = (1/m) sum_i f_i(w), f_i = 1/2 ||w||^2 + m c_i band_loss(z_i); ``step`` defaults to
    1 / (4 L_max), L_i = 1 + 2 m c_i max(1, mu) ||xh_i||^2. Stops when the full gradient at the
    snapshot satisfies ||grad P|| <= tol * ||grad P(0)||. Raises FloatingPointError if the
    weights become non-finite (a step too large for the data). Returns an :class:`ODMLinearResult`.
    """
    y = np.asarray(y, dtype=np.float64)
    A = XhProducts(X, bias)
    m = A.m
    c = odm_coefficients(sample_weight, lam, theta)
    cm = m * c
    sq = row_sq_norms(X, bias)
    L = 1.0 + 2.0 * cm * max(1.0, mu) * sq
    eta = 1.0 / (4.0 * float(L.max())) if step is None else float(step)
    rng = seed_from(random_state)
    w = np.zeros(A.d + 1) if w0 is None else np.array(w0, dtype=np.float64).ravel()
    g_ref = np.linalg.norm(_odm_grad(np.zeros(A.d + 1), np.zeros(m), A, y, c, mu, theta))
    converged = False
    it = 0
    while True:
        z = y * A.xv(w)
        if not np.all(np.isfinite(z)):
            raise FloatingPointError(
                f"ODM SVRG diverged (non-finite weights) with step {eta:.3g}; the step is too large "
                "for this data. Use the default step, solver='dcd' or solver='newton'."
            )
        snap = cm * odm_band_loss_grad(z, mu, theta) * y
        full = w + A.xtr(snap / m)
        gnorm = np.linalg.norm(full)
        if gnorm <= tol * g_ref:
            converged = True
            break
        if it >= max_iter:
            break
        r = w - full
        xr = A.xv(r)
        v = w.copy()
        w = _svrg_epoch(A.rows, y, cm, float(mu), float(theta), r, xr, snap, eta, m, rng, v)
        it += 1
        if log is not None:
            log.debug("ODM SVRG epoch %d |g| %.3e", it, gnorm)
    if not converged:
        _warn_max_iter("SVRG", tol, max_iter, "epochs", "use solver='dcd' / 'newton'")
    return ODMLinearResult(w=w[:-1].copy(), b=float(bias * w[-1]), n_iter=it, converged=converged)
