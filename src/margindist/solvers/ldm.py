"""Large margin Distribution Machine (Zhang & Zhou, KDD 2014): objective, dual set-up, solvers.

Soft-margin primal (paper Eq. 5) with sample weights s_i, S = sum_i s_i, the margins
z_i = y_i <w, phi(x_i)> (phi including a constant feature B for a regularised intercept; the
paper has no bias):

    F(w) = 1/2 ||w||^2 + lambda1 vhat - lambda2 zbar + C sum_i s_i (1 - z_i)_+,
    zbar = (1/S) sum_i s_i z_i,   vhat = (1/S^2) sum_ij s_i s_j (z_i - z_j)^2 = 2 Var_s(z).

(vhat is twice the variance: the factor 2 of the paper's definition is kept.) With unit
weights S = m and this is the paper's objective; normalising by S makes an integer weight k
identical to k copies of a sample.

Dual (paper Eq. 12), c = 4 lambda1 / S^2, shift = (lambda2 / S) s:

    min_{0 <= beta_i <= C s_i} 1/2 beta^T H beta + (H shift - e)^T beta.

* Kernel (G the Gram matrix with B^2 added): the paper's H = Y G Q^{-1} G Y is computed in the
  stable form H = Y G A^{-1} Y, A = I + c Y N Y G, N = S diag(s) - s s^T (A is always
  invertible; no pseudo-inverse). With D = diag(s), T = I + c S D^{1/2} G D^{1/2} (symmetric
  positive definite, eigenvalues >= 1: one Cholesky factorisation) and W = T^{-1} D^{1/2} G D^{1/2},
  G E^{-1} = D^{-1/2} W D^{-1/2} for E = I + c S D G, and the rank-one part - c q q^T G
  (q = y * s) follows by Sherman-Morrison with the cancellation-free denominator
  q~^T T^{-1} q~ / S (q~ = y * sqrt(s)). Set-up O(m^3) time, two m x m matrices of memory.
  alpha = A^{-1} Y (beta + shift), f(x) = sum_j alpha_j (k(x_j, x) + B^2). The same model
  without the set-up: :mod:`margindist.solvers.ldm_bcd` (an augmented dual by block
  coordinate descent, kernel rows from a cache).
* Linear: Q_lin = I + c (S Xh^T D Xh - g g^T), g = Xh^T (y * s); M = I + c S Xh^T D Xh is
  factored once (Cholesky, R R^T = M; shared by the sub-problems of one-vs-rest, which differ
  only in y), and the rank-one downdate is applied by Sherman-Morrison on the factor:
  Q_lin = L L^T with L = R (I - rho hh hh^T), h = R^{-1} g. The data are transformed,
  Z = Xh L^{-T} (dense m x (d + 1)), so that H = Y Z Z^T Y and the generic linear DCD of
  :mod:`margindist.solvers.dcd` runs over beta with wt = Z^T Y (beta + shift) maintained
  (O(d) per step); w = L^{-T} wt. Set-up O(nnz(X) d + m d^2 + d^3).
* Averaged SGD on g = F / (C S) (paper Algorithm 2) for large linear problems, sparse
  friendly, with the exact mean margin zbar = w . mu (mu = (1/S) sum_j s_j y_j x_j) in place
  of the paper's second random sample: :func:`ldm_asgd` and :class:`ASGDState` (also the
  state of ``partial_fit``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from numba import njit
from scipy.linalg import lapack

from ._gram import lower_to_full, weighted_gram, x_dot, xt_dot
from ._result import UnpackableResult
from ._rows import make_rows, row_axpy, row_axpy2, row_dot, row_sq_norms
from .dcd import dcd_kernel, dcd_linear


@njit(cache=True)
def _store(scal, wdiv, adiv, wfrac, t, abar_nz, pm):
    scal[0] = wdiv
    scal[1] = adiv
    scal[2] = wfrac
    scal[3] = t
    scal[4] = abar_nz
    scal[5] = pm


@njit(cache=True)
def _symmetrize(A):
    """A <- (A + A^T) / 2 in place."""
    n = A.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            v = 0.5 * (A[i, j] + A[j, i])
            A[i, j] = v
            A[j, i] = v


__all__ = [
    "ASGDState",
    "LDMKernelBase",
    "LDMKernelResult",
    "LDMKernelSystem",
    "LDMLinearFactor",
    "LDMLinearResult",
    "ldm_asgd",
    "ldm_dcd_kernel",
    "ldm_dcd_linear",
    "ldm_primal_objective",
    "ldm_sgd_objective",
]


# ----------------------------------------------------------------------------- objective


def ldm_primal_objective(w_sq, z, sample_weight, lambda1, lambda2, C) -> float:
    """F = 1/2 ||w||^2 + lambda1 vhat - lambda2 zbar + C sum_i s_i (1 - z_i)_+."""
    s = np.asarray(sample_weight, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64)
    S = s.sum()
    zbar = float(s @ z) / S
    vhat = 2.0 * float(s @ (z - zbar) ** 2) / S
    return 0.5 * float(w_sq) + lambda1 * vhat - lambda2 * zbar + C * float(s @ np.maximum(1.0 - z, 0.0))


# ----------------------------------------------------------------------------- kernel dual


class LDMKernelBase:
    """The label-independent part of the kernel LDM set-up (one-vs-rest sub-problems share it).

    Parameters
    ----------
    G : ndarray (m, m)
        Gram matrix including the constant feature (k + B^2); overwritten when
        ``overwrite=True`` (saves one m x m array).
    sample_weight : positive weights s;  lambda1 >= 0.

    Attributes
    ----------
    F : ndarray (m, m), G E^{-1} with E = I + c S diag(s) G (symmetric).
    """

    def __init__(self, G, sample_weight, lambda1, *, overwrite=False):
        s = np.asarray(sample_weight, dtype=np.float64)
        m = s.shape[0]
        S = s.sum()
        self.c = c = 4.0 * lambda1 / S**2
        sq = np.sqrt(s)
        Gt = np.array(G, dtype=np.float64, copy=not overwrite, order="C")
        Gt *= sq[:, None]
        Gt *= sq[None, :]  # D^1/2 G D^1/2
        cS = c * S
        T = Gt * cS
        T[np.diag_indices(m)] += 1.0
        self._cho = self._lu = self._Tinv = None
        # With c S G~ not tiny, W = T^{-1} G~ = (I - T^{-1}) / (c S) from the explicit inverse
        # (Cholesky + potri, about m^3 flops) loses at most eps / (c S max diag G~) relative
        # accuracy; otherwise solve with m right-hand sides (about 2.3 m^3 flops).
        use_inverse = cS * float(np.max(np.abs(np.diag(Gt)), initial=0.0)) >= 1e-6
        cfac, info = lapack.dpotrf(T, lower=1, overwrite_a=1, clean=0)
        if info == 0 and use_inverse:
            Tinv, info = lapack.dpotri(cfac, lower=1, overwrite_c=1)
            if info != 0:  # pragma: no cover - singular after a successful Cholesky
                raise np.linalg.LinAlgError("LDM: inverting the kernel system failed.")
            lower_to_full(Tinv)
            self._Tinv = Tinv
            W = Gt
            np.multiply(Tinv, -1.0 / cS, out=W)
            W[np.diag_indices(m)] += 1.0 / cS
        elif info == 0:
            self._cho = (cfac, True)
            W = self.T_solve(Gt, overwrite=True)
        else:
            warnings.warn(
                "The kernel matrix is not positive semi-definite, so the LDM dual is not convex; "
                "set it up with an LU factorisation instead of Cholesky. Check the kernel.",
                UserWarning,
                stacklevel=3,
            )
            T = Gt * cS
            T[np.diag_indices(m)] += 1.0
            self._lu = sla.lu_factor(T, overwrite_a=True, check_finite=False)
            W = self.T_solve(Gt, overwrite=True)
        # W = T^{-1} G~ (= G~ T^{-1}, symmetric)
        _symmetrize(W)
        W /= sq[:, None]
        W /= sq[None, :]
        self.F = W
        self.s, self.S, self._sq = s, S, sq

    def T_solve(self, b, overwrite=False):
        """T^{-1} b."""
        if self._Tinv is not None:
            return self._Tinv @ b
        if self._cho is not None:
            return sla.cho_solve(self._cho, b, overwrite_b=overwrite, check_finite=False)
        return sla.lu_solve(self._lu, b, overwrite_b=overwrite, check_finite=False)

    def system(self, y, *, reuse=False):
        """The :class:`LDMKernelSystem` for labels y (``reuse=True`` builds H inside F)."""
        return LDMKernelSystem(self, y, reuse=reuse)


class LDMKernelSystem:
    """H and the map beta -> alpha of the kernel LDM dual for one labelling y.

    H = Y (F + c f f^T / den) Y with f = F q, q = y * s, den = q~^T T^{-1} q~ / S
    (q~ = y * sqrt(s)): the Sherman-Morrison form of G A^{-1} (see the module docstring).
    """

    def __init__(self, base: LDMKernelBase, y, *, reuse=False):
        y = np.asarray(y, dtype=np.float64)
        self.base = base
        c, S, s, sq = base.c, base.S, base.s, base._sq
        qt = y * sq
        Tq = base.T_solve(qt)
        self.den = float(qt @ Tq) / S  # = 1 - c q^T G E^{-1} q, free of cancellation
        f = base.F @ (y * s)
        H = base.F if reuse else base.F.copy()
        H += (c / self.den) * np.outer(f, f)
        H *= y[:, None]
        H *= y[None, :]
        if reuse:
            base.F = None
        self.H = H
        self._f, self._Eq = f, sq * Tq
        self.y, self.s, self.S, self.c = y, s, S, c

    def alpha(self, beta, lambda2):
        """alpha = A^{-1} Y (beta + (lambda2 / S) s)."""
        base = self.base
        v = self.y * (np.asarray(beta, dtype=np.float64) + (lambda2 / self.S) * self.s)
        Einv_v = base._sq * base.T_solve(v / base._sq)
        return Einv_v + (self.c / self.den) * float(self._f @ v) * self._Eq


@dataclass(kw_only=True)
class LDMKernelResult(UnpackableResult):
    """A kernel LDM run: alpha (f(x) = sum_j alpha_j (k(x_j, x) + B^2)), the dual variables beta
    and the dual value e^T beta - 1/2 (beta + shift)^T H (beta + shift). Unpacks as
    (alpha, beta, n_iter, dual)."""

    _unpack = ("alpha", "beta", "n_iter", "dual")
    alpha: np.ndarray
    beta: np.ndarray
    dual: float


@dataclass(kw_only=True)
class LDMLinearResult(UnpackableResult):
    """A linear LDM run: w (d,), b, and the DCD's beta with its dual value e^T beta - 1/2 ||wt||^2
    (unpacks as (w, b, beta, n_iter, dual)), or the averaged-SGD state (unpacks as
    (w, b, state, n_iter); ``n_iter``: epochs, a fixed number, so ``converged`` is True)."""

    w: np.ndarray
    b: float
    beta: np.ndarray | None = None
    dual: float | None = None
    state: object = None

    @property
    def _unpack(self):
        return ("w", "b", "state", "n_iter") if self.beta is None else ("w", "b", "beta", "n_iter", "dual")


#: Kernel LDM: random-order epochs first; greedy steps take over when these have not converged.
_GREEDY_AFTER = 20


def hinge_dcd(y, s, C, kw, beta0, max_iter, *, u0, random_state, warn=True, q0=None):
    """The hinge block of the kernel LDM duals, min 1/2 b^T Q b + (u0 - e)^T b over
    0 <= b <= C s, by :func:`~margindist.solvers.dcd.dcd_kernel` (Q and the row source in
    ``kw``, with y). ``q0``: Q beta0 when the caller has it. ``warn``: a ConvergenceWarning at
    ``max_iter``. Returns (DCDResult, epochs).

    On kernel rows (``kw["cache"]``, the bcd path, Q = Y (K + B^2) Y): pair steps of LIBSVM's
    working-set selection and single steps (``selection="pairs"``) from the start; the random
    epochs, then greedy single steps, crept along the stiff direction y at large C (5000 rows of
    magic, C = 100: 12.1 s against 1.29 s) and, with fewer rows cached than samples, their block
    sweeps computed most rows in every sweep (14 000 rows, the default C = 1: 6.2 s against
    2.9 s). On a dense matrix H (the factorised path, y = 1): up to ``_GREEDY_AFTER``
    random-order epochs, then greedy steps when those have not converged (see
    :func:`ldm_dcd_kernel`)."""
    label = "LDM" if warn else None
    if kw.get("cache") is not None:
        res = dcd_kernel(y, 0.0, -1.0, C * s, a0=beta0, q0=q0, max_iter=max_iter, u0=u0, random_state=random_state,
                         warn_label=label, selection="pairs", **kw)
        return res, res.n_iter
    first = min(max_iter, _GREEDY_AFTER)
    res = dcd_kernel(y, 0.0, -1.0, C * s, a0=beta0, q0=q0, max_iter=first, u0=u0, random_state=random_state,
                     warn_label=label if first == max_iter else None, **kw)
    n_iter = res.n_iter
    if not res.converged and max_iter > first:
        res = dcd_kernel(y, 0.0, -1.0, C * s, a0=res.a, q0=res.u - u0, max_iter=max_iter - first, u0=u0,
                         random_state=random_state, warn_label=label, selection="greedy", **kw)
        n_iter += res.n_iter
    return res, n_iter


def ldm_dcd_kernel(G, y, sample_weight, lambda1, lambda2, C, *, tol=1e-3, max_iter=1000, beta0=None,
                   shrinking=True, random_state=None, overwrite=False, base=None):
    """Kernel LDM: set up H (O(m^3)), coordinate descent over beta, alpha from one solve.

    Up to ``_GREEDY_AFTER`` random-order epochs (with shrinking: the fast start, and all it
    takes at small C), then, when those have not converged, steps on the variable of greatest
    decrease (``dcd_kernel(..., selection="greedy")``, H is at hand) from that point: the random
    epochs crept on LDM's duals at the paper's C in {10, 50, 100} (16 000 epochs, 1.5 s on 276
    rows of australian at C = 100; the greedy steps 0.15 s to the same stopping rule). Where the
    epochs do converge (5000 rows of magic at C = 1: about 200 epochs) the random, greedy and
    combined runs took about the same time, the O(m^3) set-up dominating; the epochs come first
    because each greedy step scans all m gradients. ``n_iter`` counts epochs and m greedy steps
    alike.

    G must include the constant feature (k + B^2) (unused when a shared ``base`` is given).
    Returns an :class:`LDMKernelResult`.
    """
    s = np.asarray(sample_weight, dtype=np.float64)
    if base is None:
        system = LDMKernelBase(G, s, lambda1, overwrite=overwrite).system(y, reuse=True)
    else:
        system = base.system(y)
    shift = (lambda2 / system.S) * s
    kw = {"n_var": s.shape[0], "gram": system.H, "bias": 0.0, "tol": tol, "shrinking": shrinking}
    res, n_iter = hinge_dcd(np.ones_like(s), s, C, kw, beta0, max_iter, u0=system.H @ shift,
                            random_state=random_state)
    beta = res.a
    dual = float(beta.sum() - 0.5 * (beta + shift) @ res.u)
    return LDMKernelResult(alpha=system.alpha(beta, lambda2), beta=beta, dual=dual, n_iter=n_iter,
                           converged=res.converged)


# ----------------------------------------------------------------------------- linear dual


def _weighted_gram(X, s, bias):
    """Xh^T diag(s) Xh (d + 1, d + 1) in float64 (:func:`._gram.weighted_gram`: sparse X is not
    densified, float32 X not copied)."""
    d = X.shape[1]
    out = np.empty((d + 1, d + 1))
    out[:d, :d] = weighted_gram(X, s)
    xs = xt_dot(X, s)
    out[:d, d] = out[d, :d] = bias * xs
    out[d, d] = bias * bias * s.sum()
    return out


def _xh_t(X, r, bias):
    """Xh^T r."""
    return np.concatenate([xt_dot(X, r), [bias * float(np.sum(r))]])


#: Below this value of 1 - c h^T h the Sherman-Morrison downdate is replaced by a direct
#: Cholesky factorisation of Q_lin (the rank-one term has eaten the precision).
_SM_MIN_DENOM = 1e-10


class LDMLinearFactor:
    """The y-independent part of the linear LDM set-up: R R^T = M = I + c S Xh^T D Xh and
    Z0 = Xh R^{-T} (dense m x (d + 1)). One-vs-rest sub-problems share it."""

    def __init__(self, X, sample_weight, lambda1, bias):
        s = np.asarray(sample_weight, dtype=np.float64)
        self.S = S = s.sum()
        self.c = c = 4.0 * lambda1 / S**2
        self.bias = float(bias)
        self.s = s
        self.X = X
        M = _weighted_gram(X, s, bias) * (c * S)
        M[np.diag_indices(M.shape[0])] += 1.0
        self.M = M
        try:
            self.R = np.linalg.cholesky(M)
        except np.linalg.LinAlgError:
            raise FloatingPointError(
                "LDM (linear, solver='dcd'): the matrix I + c X^T S X is not numerically positive "
                "definite: the features (beside the intercept's constant 1) are on too extreme a scale "
                f"(largest diagonal entry {np.max(np.diag(M)):.3g}). Standardise the features, or use "
                "solver='asgd'."
            ) from None
        m, d = X.shape
        Xh = np.empty((m, d + 1))
        Xh[:, :d] = X.toarray() if sp.issparse(X) else X
        Xh[:, d] = bias
        self.Z0 = sla.solve_triangular(self.R, Xh.T, lower=True, check_finite=False).T.copy()

    def transform(self, y):
        """(Z, Linv, LTinv, g) for labels y: Z = Xh L^{-T}, Linv(v) = L^{-1} v, LTinv(v) = L^{-T} v."""
        y = np.asarray(y, dtype=np.float64)
        g = _xh_t(self.X, y * self.s, self.bias)
        R = self.R
        h = sla.solve_triangular(R, g, lower=True, check_finite=False)
        hn2 = float(h @ h)
        one_minus_a = 1.0 - self.c * hn2
        if hn2 == 0.0:
            def Linv(v):
                return sla.solve_triangular(R, v, lower=True, check_finite=False)

            def LTinv(v):
                return sla.solve_triangular(R, v, lower=True, trans="T", check_finite=False)

            return self.Z0, Linv, LTinv, g
        if one_minus_a > _SM_MIN_DENOM:
            hh = h / np.sqrt(hn2)
            kp = (1.0 - np.sqrt(one_minus_a)) / np.sqrt(one_minus_a)  # P^{-1} = I + kp hh hh^T
            Z = self.Z0 + kp * np.outer(self.Z0 @ hh, hh)

            def Linv(v):
                t = sla.solve_triangular(R, v, lower=True, check_finite=False)
                return t + kp * float(hh @ t) * hh

            def LTinv(v):
                t = v + kp * float(hh @ v) * hh
                return sla.solve_triangular(R, t, lower=True, trans="T", check_finite=False)

            return Z, Linv, LTinv, g
        # 1 - c h^T h lost to rounding (raw second moments much larger than the spread):
        # factor Q_lin itself
        L = np.linalg.cholesky(self.M - self.c * np.outer(g, g))
        Z = sla.solve_triangular(L, (self.Z0 @ R.T).T, lower=True, check_finite=False).T.copy()

        def Linv(v):
            return sla.solve_triangular(L, v, lower=True, check_finite=False)

        def LTinv(v):
            return sla.solve_triangular(L, v, lower=True, trans="T", check_finite=False)

        return Z, Linv, LTinv, g


#: The smoothed-hinge Newton start of the linear DCD (:func:`smoothed_hinge_start`) is made for
#: transformed data of at most this many columns (its Hessian is a dense (d + 1) x (d + 1) matrix).
_NEWTON_START_MAX_COLUMNS = 1000
#: ... and brings the DCD's projected-gradient spread down to at most max(tol / 2, this) (with
#: a smaller delta the kinks of the smoothed hinge come so close that Newton steps only creep).
_NEWTON_START_MIN_DELTA = 1e-6
#: Newton iterations per value of delta, at most (then delta is lowered anyway, and the DCD
#: completes what is left).
_NEWTON_START_MAX_ITER = 50


@njit(cache=True)
def _slope(a, q, t, U, delta, r0, pp):
    """phi'(a) and phi''(a) of :func:`_line_minimum`."""
    d1, d2 = a * pp + r0, pp
    for i in range(q.shape[0]):
        ta = t[i] - a * q[i]
        if ta >= delta:
            d1 -= U[i] * q[i]
        elif ta > 0.0:
            d1 -= U[i] * (ta / delta) * q[i]
            d2 += U[i] * q[i] * q[i] / delta
    return d1, d2


@njit(cache=True)
def _line_minimum(q, t, U, delta, r0, pp):
    """The exact minimiser alpha >= 0 of phi(alpha) = P_delta(v + alpha p) (see
    :func:`smoothed_hinge_start`; q = Y Z p, t the hinge arguments at v, r0 = (v - wt0)^T p,
    pp = p^T p): phi' is increasing and piecewise linear, so Newton's method on phi', safeguarded
    by bisection, ends on its root (the full step alpha = 1 is tried first)."""
    d0 = _slope(0.0, q, t, U, delta, r0, pp)[0]
    lo, hi = 0.0, 1.0
    while _slope(hi, q, t, U, delta, r0, pp)[0] < 0.0:
        lo, hi = hi, 2.0 * hi
    a = 1.0
    for _ in range(100):
        d1, d2 = _slope(a, q, t, U, delta, r0, pp)
        if abs(d1) <= 1e-13 * abs(d0):
            return a
        if d1 < 0.0:
            lo = a
        else:
            hi = a
        a_new = a - d1 / d2
        a = a_new if lo < a_new < hi else 0.5 * (lo + hi)
        if hi - lo <= 1e-15 * hi:
            break
    return a


def smoothed_hinge_start(Z, y, U, wt0, delta_final, v0=None, max_iter=_NEWTON_START_MAX_ITER, signed=False):
    """A starting beta for the linear DCD, by Newton's method on the smoothed primal.

    The DCD's problem, min 1/2 ||wt0 + Z^T Y beta||^2 - e^T beta over 0 <= beta <= U, is the dual
    of the hinge-loss problem P(v) = 1/2 ||v - wt0||^2 + sum_i U_i (1 - y_i <z_i, v>)_+. With the
    hinge smoothed into h(t) = t^2 / (2 delta) on [0, delta] (0 below, t - delta / 2 above),
    P_delta is strongly convex with a piecewise-linear gradient
    v - wt0 - Z^T Y (U h'(t)), and its generalised Hessian I + Z^T diag(U / delta on 0 < t < delta)
    Z is a (d + 1) x (d + 1) matrix: Newton's method with the exact line search ends on the
    minimiser in a few steps, from delta = 1 down to ``delta_final`` (each value started from
    the last; from ``v0``, a warm start, at ``delta_final`` right away; a step changes the
    status of about one example once delta is small, so the iterations per value are capped at
    ``max_iter``). At the minimiser beta = U h'(t) is feasible, wt0 + Z^T Y beta = v, and the DCD's
    gradient y_i <z_i, v> - 1 = -t_i is >= 0 where beta_i = 0, <= -delta where beta_i = U_i, and in
    (-delta, 0) in between: the projected-gradient spread of LIBLINEAR's stopping rule is below
    delta. This replaces the DCD's slow phase on ill-conditioned problems (many free variables,
    large C) where its epochs only creep; the DCD then checks, or completes, the stopping rule.
    ``signed``: Z is already Y Z (float64, C-ordered; used as is, no copy).
    Returns (beta, Newton iterations).
    """
    Yz = Z if signed else np.ascontiguousarray(Z * y[:, None], dtype=np.float64)
    v = np.array(wt0 if v0 is None else v0, dtype=np.float64)
    delta = 1.0 if v0 is None else delta_final  # a warm start is near the end of the continuation
    U = np.ascontiguousarray(U, dtype=np.float64)
    wt0 = np.ascontiguousarray(wt0, dtype=np.float64)
    delta, n_it = _newton_levels(Yz, U, wt0, v, delta, float(delta_final), int(max_iter))
    return U * np.clip((1.0 - Yz @ v) / delta, 0.0, 1.0), n_it


@njit(cache=True)
def _newton_levels(Yz, U, wt0, v, delta, delta_final, max_iter):
    """The Newton iterations of :func:`smoothed_hinge_start` on v (updated in place), for
    delta = ``delta``, delta / 10, ... down to ``delta_final``. Returns (last delta, iterations)."""
    k = Yz.shape[1]
    n_it = 0
    while True:
        g_ref = -1.0
        for _ in range(max_iter):
            t = 1.0 - Yz @ v
            h = np.minimum(np.maximum(t / delta, 0.0), 1.0)
            grad = v - wt0 - Yz.T @ (U * h)
            gn = np.sqrt(grad @ grad)
            g_ref = gn if g_ref < 0.0 else g_ref
            if gn <= 1e-12 * max(g_ref, 1.0) or not np.isfinite(gn):
                break
            quad = np.nonzero((t > 0.0) & (t < delta))[0]
            A = Yz[quad]
            H = A.T @ (A * (U[quad] / delta)[:, None])
            for j in range(k):
                H[j, j] += 1.0
            p = -np.linalg.solve(H, grad)  # H is positive definite (>= I)
            v += _line_minimum(Yz @ p, t, U, delta, (v - wt0) @ p, p @ p) * p
            n_it += 1
        if delta <= delta_final:
            return delta, n_it
        delta = max(0.1 * delta, delta_final)


def ldm_dcd_linear(X, y, sample_weight, lambda1, lambda2, C, *, bias=1.0, tol=1e-3, max_iter=1000,
                   beta0=None, shrinking=True, random_state=None, factor=None, newton_start=True):
    """Linear LDM by DCD over beta on the transformed data Z.

    ``newton_start``: start the DCD from :func:`smoothed_hinge_start` (from beta0's model when
    given) where Z has at most ``_NEWTON_START_MAX_COLUMNS`` columns. Returns an
    :class:`LDMLinearResult` with beta and the dual value (``n_iter``: DCD epochs).
    """
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sample_weight, dtype=np.float64)
    if factor is None:
        factor = LDMLinearFactor(X, s, lambda1, bias)
    Z, Linv, LTinv, g = factor.transform(y)
    wt0 = Linv(g * (lambda2 / factor.S))  # Z^T Y shift
    U = C * s
    if newton_start and Z.shape[1] <= _NEWTON_START_MAX_COLUMNS and y.size:
        v0 = None if beta0 is None else wt0 + Z.T @ (y * np.clip(beta0, 0.0, U))
        beta0, _ = smoothed_hinge_start(Z, y, U, wt0, max(0.5 * tol, _NEWTON_START_MIN_DELTA), v0)
    res = dcd_linear(Z, y, 0.0, -1.0, U, n_var=y.shape[0], bias=0.0,
                     w0=np.concatenate([wt0, [0.0]]), a0=beta0, tol=tol, max_iter=max_iter,
                     shrinking=shrinking, random_state=random_state, warn_label="LDM")
    wt = res.w[:-1]
    v = LTinv(wt)
    dual = float(res.a.sum() - 0.5 * wt @ wt)
    return LDMLinearResult(w=v[:-1].copy(), b=float(bias * v[-1]), beta=res.a, dual=dual, n_iter=res.n_iter,
                           converged=res.converged)


# ----------------------------------------------------------------------------- averaged SGD


@njit(cache=True, fastmath={"reassoc", "contract"})
def _dense_dot(rows, i, w):
    """xh_i . w for a dense row, the sum reassociated so that it vectorises (the row function is
    inlined here and takes these flags)."""
    return row_dot(rows, i, w)


@njit(cache=True)
def _asgd_pass(rows, y, sfac, xmu, mu, order, lam3, l1, l2, eta0, eta_const, t0, wa, scal, average):
    """One pass of (averaged) SGD over the rows ``order``. Returns 0, or 1 if the weights blew up.

    State (Bottou's ASGD representation): w = wa[:, 0], abar = wa[:, 1] (C order for sparse
    rows: a feature's two entries share a cache line; F order for dense rows: each column is
    contiguous), w_true = w / wdiv, the average (abar + wfrac w) / adiv, and pm = w . mu for
    the stored w, so that the mean margin is zbar = w_true . mu = pm / wdiv.
    scal = [wdiv, adiv, wfrac, t, abar_nonzero, pm].

    A step on sample i: coef = sfac_i (4 l1 (w.x_i - y_i zbar) - l2 y_i - y_i 1(y_i w.x_i <= 1)),
    w <- (1 - eta lam3) w - eta coef xh_i. The stored w changes by etd xh_i only, so
    pm <- pm + etd xmu_i (xmu_i = xh_i . mu, precomputed): O(1), one row read per step.
    """
    n_order = order.shape[0]
    d = wa.shape[0] - 1
    w, ab = wa[:, 0], wa[:, 1]
    wdiv, adiv, wfrac, t, abar_nz, pm = scal[0], scal[1], scal[2], scal[3], scal[4], scal[5]
    for s in range(n_order):
        i = order[s]
        # the sparse dot inlined (a call costs about a tenth of a sparse step); the dense one a
        # call that keeps its fast-math flags
        wxi = (row_dot(rows, i, w) if rows.sparse else _dense_dot(rows, i, w)) / wdiv
        yi = y[i]
        coef = 4.0 * l1 * (wxi - yi * (pm / wdiv)) - l2 * yi
        if yi * wxi <= 1.0:
            coef -= yi
        coef *= sfac[i]
        if eta_const > 0.0:
            eta = eta_const
        else:
            eta = eta0 / (1.0 + lam3 * eta0 * t) ** 0.75
        decay = 1.0 - eta * lam3
        if decay <= 0.0 or not np.isfinite(coef):
            _store(scal, wdiv, adiv, wfrac, t, abar_nz, pm)
            return 1
        wdiv = wdiv / decay
        etd = -eta * coef * wdiv
        averaging = average and t + 2.0 - t0 > 1.0
        if etd != 0.0:
            if averaging:
                row_axpy2(rows, i, etd, w, -wfrac * etd, ab)
            else:
                row_axpy(rows, i, etd, w)
            pm += etd * xmu[i]
        if averaging:
            abar_nz = 1.0
            mu_t = 1.0 / (t + 2.0 - t0)
            adiv = adiv / (1.0 - mu_t)
            wfrac = wfrac + mu_t * adiv / wdiv
        elif average:
            if abar_nz != 0.0:
                for f in range(d + 1):
                    wa[f, 1] = 0.0
                abar_nz = 0.0
            adiv = wdiv
            wfrac = 1.0
        t += 1.0
        if wdiv > 1e5 or adiv > 1e5:
            pm = 0.0
            for f in range(d + 1):
                if average:
                    wa[f, 1] = (wa[f, 1] + wfrac * wa[f, 0]) / adiv
                wa[f, 0] /= wdiv
                pm += wa[f, 0] * mu[f]
            abar_nz = 1.0 if average else abar_nz
            wdiv = 1.0
            adiv = 1.0
            wfrac = 0.0
    _store(scal, wdiv, adiv, wfrac, t, abar_nz, pm)
    return 0


class ASGDState:
    """The state of averaged SGD between passes (and between ``partial_fit`` calls).

    w_true = w / wdiv, the averaged weights (abar + wfrac w) / adiv; t the number of steps
    taken; eta0 the initial step (set by the first trial); t0 the step at which averaging
    starts; weight_seen the total sample weight seen (S of the objective) and yx_sum the
    weighted sum sum_j s_j y_j xh_j over the samples seen, so that mu = yx_sum / weight_seen
    gives the mean margin zbar = w . mu of the objective.
    """

    def __init__(self, n_weights):
        self.wa = np.zeros((n_weights, 2))  # [w, abar] side by side (see _asgd_pass)
        self.scal = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
        self.eta0 = None
        self.t0 = None
        self.weight_seen = 0.0
        self.yx_sum = np.zeros(n_weights)

    @classmethod
    def from_weights(cls, v, X, y, sample_weight, bias):
        """A state at the weights v (e.g. a DCD solution) that has seen (X, y, sample_weight):
        ``partial_fit`` then continues on the objective of those samples and the new ones."""
        st = cls(v.shape[0])
        st.w[:] = v
        s = np.asarray(sample_weight, dtype=np.float64)
        st.weight_seen = float(s.sum())
        st.yx_sum = _xh_t(X, np.asarray(y, dtype=np.float64) * s, bias)
        return st

    @property
    def w(self):
        return self.wa[:, 0]

    @property
    def abar(self):
        return self.wa[:, 1]

    @property
    def t(self):
        return int(self.scal[3])

    def mean_direction(self):
        """mu = (1 / S) sum_j s_j y_j xh_j over the samples seen (zbar = w . mu)."""
        return self.yx_sum / self.weight_seen

    def weights(self):
        return self.w / self.scal[0]

    def average(self):
        adiv, wfrac = self.scal[1], self.scal[2]
        return (self.abar + wfrac * self.w) / adiv


def ldm_sgd_objective(w, X, y, s, lambda1, lambda2, C, S_total, bias):
    """g(w) = F(w) / (C S_total) with the data terms averaged over (X, y, s) (used by the
    step-size trial; on the whole data set with S_total = sum s it is F / (C S))."""
    z = y * _xh_dot(X, w, bias)
    Sb = s.sum()
    zbar = float(s @ z) / Sb
    vhat = 2.0 * float(s @ (z - zbar) ** 2) / Sb
    hinge = float(s @ np.maximum(1.0 - z, 0.0)) / Sb
    lam3 = 1.0 / (C * S_total)
    return 0.5 * lam3 * float(w @ w) + lam3 * (lambda1 * vhat - lambda2 * zbar) + hinge


def _xh_dot(X, v, bias):
    """Xh v (float64)."""
    return x_dot(X, v[:-1]) + bias * v[-1]


#: ldm_asgd stores the rows in a random order (a copy of X) when X takes at most this many
#: bytes, and each pass visits blocks of _ASGD_BLOCK consecutive stored rows in a fresh
#: random order: nearly sequential reads (a pass over rows visited in a random order in place
#: takes 2-3 times as long) and reshuffled passes (reusing one order for every pass ended 2.5 %
#: higher in objective on sparse data). Above it the rows of X are visited in a fresh random
#: order each pass, in place.
ASGD_COPY_MAX_BYTES = 2**30
_ASGD_BLOCK = 32


def _nbytes(X):
    if sp.issparse(X):
        return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    return np.asarray(X).nbytes


def _run_pass(rows, y, sfac, xmu, mu, order, consts, eta0, eta_const, t0, state, average):
    """One pass over ``order``; the maintained w . mu is first refreshed from w (O(d))."""
    lam3, l1, l2 = consts
    # w and abar of a feature on one cache line for sparse rows, contiguous columns for dense
    state.wa = np.ascontiguousarray(state.wa) if rows.sparse else np.asfortranarray(state.wa)
    state.scal[5] = float(state.w @ mu)
    code = _asgd_pass(rows, y, sfac, xmu, mu, order, lam3, l1, l2, eta0, eta_const, float(t0),
                      state.wa, state.scal, average)
    return code == 0 and np.all(np.isfinite(state.w))


def _reference_step(Xs, sfac, consts, bias) -> float:
    """1 / (lambda3 + (4 l1 + 1) q), q the weighted mean squared row norm (bias included): the
    step at which one update moves a margin by O(1), whatever the scale of the features, of C,
    of lambda1 or of the sample weights."""
    lam3, l1, _ = consts
    sq = row_sq_norms(Xs, bias)
    q = float(np.mean(sfac * sq))
    return 1.0 / (lam3 + (4.0 * l1 + 1.0) * max(q, 1e-300))


def _trial_eta0(X, y, s, lambda1, lambda2, C, S_total, bias, state, rng_np, n_trial=1000):
    """Bottou's recipe: one plain-SGD pass on <= n_trial samples for eta on the grid of powers
    of 2, starting at the power of 2 nearest :func:`_reference_step` and walking up or down,
    keep the eta with the lowest objective on those samples (whose own mean direction mu
    gives the mean margin, as in that objective). eta stays below 1 / (2 lambda3), so that the
    decay 1 - eta lambda3 of every step is positive."""
    m = y.shape[0]
    idx = rng_np.permutation(m)[: min(m, n_trial)]
    Xs = X[idx]
    ys, ss = y[idx], s[idx]
    rows = make_rows(Xs, bias)
    Sb = ss.sum()
    sfac = ys.shape[0] * ss / Sb
    mu = _xh_t(Xs, ys * ss, bias) / Sb
    xmu = _xh_dot(Xs, mu, bias)
    consts = (1.0 / (C * S_total), lambda1 / (C * S_total), lambda2 / (C * S_total))
    order = np.arange(ys.shape[0])
    w_start = state.weights()

    def cost(eta):
        trial = ASGDState(w_start.shape[0])
        trial.w[:] = w_start
        ok = _run_pass(rows, ys, sfac, xmu, mu, order, consts, 1.0, eta, 0.0, trial, False)
        if not ok:
            return np.inf
        return ldm_sgd_objective(trial.weights(), Xs, ys, ss, lambda1, lambda2, C, S_total, bias)

    ref = _reference_step(Xs, sfac, consts, bias)
    cap = 0.5 / consts[0]
    factor = 2.0
    lo_eta = min(2.0 ** np.round(np.log2(ref)), cap)
    floor, ceil = lo_eta * 2.0**-40, min(lo_eta * 2.0**40, cap)
    lo_cost = cost(lo_eta)
    hi_eta = min(lo_eta * factor, cap)
    hi_cost = cost(hi_eta) if hi_eta > lo_eta else np.inf
    if lo_cost <= hi_cost:
        while lo_cost < hi_cost and lo_eta > floor:
            hi_eta, hi_cost = lo_eta, lo_cost
            lo_eta = hi_eta / factor
            lo_cost = cost(lo_eta)
    else:
        while hi_cost < lo_cost and hi_eta * factor <= ceil:
            lo_eta, lo_cost = hi_eta, hi_cost
            hi_eta = lo_eta * factor
            hi_cost = cost(hi_eta)
        if hi_cost < lo_cost:  # stopped by the cap while still improving
            lo_eta = hi_eta
    return float(lo_eta)


def ldm_asgd(X, y, sample_weight, lambda1, lambda2, C, *, bias=1.0, n_epochs=5, state=None,
             random_state=None, n_trial=1000, log=None):
    """Averaged SGD for linear LDM (paper Algorithm 2) on g = F / (C S).

    Stochastic gradient on sample i (the rows in a random order):

        ghat = lambda3 w + (m s_i / S) [4 l1 ((w.x_i) - y_i (w.mu)) x_i - l2 y_i x_i
               - y_i x_i 1(y_i w.x_i <= 1)],
        mu = (1 / S) sum_j s_j y_j x_j,
        lambda3 = 1 / (C S), l1 = lambda1 / (C S), l2 = lambda2 / (C S).

    The paper's two-sample gradient has y_i y_j (w.x_j) with a second random sample j in
    place of y_i (w.mu); w.mu = zbar is its exact expectation over j (the mean margin is
    linear in w), so ghat is still an unbiased gradient of g, with lower variance and one
    row read per step: w.mu is maintained in O(1) per step under the lazy scaling (the stored
    w changes by a multiple of x_i, so w.mu changes by that multiple of x_i.mu, precomputed
    for every row once, O(nnz(X))).

    Steps eta_t = eta0 (1 + lambda3 eta0 t)^(-3/4), eta0 from a short trial on <= ``n_trial``
    samples (Bottou's recipe), averaging from step t0 = 2 m on with weight 1 / (t + 2 - t0),
    lazy scaling: O(nnz(x_i)) per step on dense or CSR X. When X takes at most
    ``ASGD_COPY_MAX_BYTES`` the rows are stored once in a random order (one copy of X) and
    each pass visits blocks of 32 consecutive stored rows in a fresh random order; larger X
    is read in place in a fresh random order each pass (no copy, 2-3 times slower a pass).

    ``state`` (an :class:`ASGDState`) continues a previous run (``partial_fit``): the objective
    is then that of all samples seen so far (S = total weight seen, mu their weighted mean of
    y x), t and the average go on.
    Returns an :class:`LDMLinearResult` with the state. Raises FloatingPointError if the weights
    blow up.
    """
    from sklearn.utils import check_random_state

    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sample_weight, dtype=np.float64)
    m, d = X.shape
    # NumPy's generator, not the solvers' xorshift (solvers._rows): the objective ASGD reaches
    # depends on the eta0 trial's subsample, and a different stream moves the tested results
    rng_np = check_random_state(random_state)
    if state is None:
        state = ASGDState(d + 1)
    state.weight_seen += float(s.sum())
    state.yx_sum = state.yx_sum + _xh_t(X, y * s, bias)
    S_total = state.weight_seen
    if state.eta0 is None:
        state.eta0 = _trial_eta0(X, y, s, lambda1, lambda2, C, S_total, bias, state, rng_np, n_trial)
        state.t0 = 2.0 * m
        if log is not None:
            log.info("LDM ASGD: eta0 = %g from the trial, averaging from step %d", state.eta0, int(state.t0))
    mu = state.mean_direction()
    xmu = _xh_dot(X, mu, bias)
    sfac = m * s / s.sum()
    consts = (1.0 / (C * S_total), lambda1 / (C * S_total), lambda2 / (C * S_total))
    order = np.arange(m)
    copy = _nbytes(X) <= ASGD_COPY_MAX_BYTES
    if copy:
        # the rows stored once in a random order; each pass visits blocks of consecutive rows
        # in a fresh random order (sequential reads, reshuffled passes)
        perm = rng_np.permutation(m)
        X, y, sfac, xmu = X[perm], y[perm], sfac[perm], xmu[perm]
        block = np.arange(_ASGD_BLOCK)
        n_blocks = -(-m // _ASGD_BLOCK)
    rows = make_rows(X, float(bias))
    for ep in range(n_epochs):
        if copy:
            order = (rng_np.permutation(n_blocks)[:, None] * _ASGD_BLOCK + block).ravel()
            order = order[order < m]
        else:
            rng_np.shuffle(order)
        ok = _run_pass(rows, y, sfac, xmu, mu, order, consts, state.eta0, 0.0, state.t0,
                       state, True)
        if not ok:
            raise FloatingPointError(
                f"LDM ASGD diverged (non-finite weights) with eta0={state.eta0:g} (lambda3 = 1 / (C S) = "
                f"{consts[0]:.3g}, lambda1 / (C S) = {consts[1]:.3g}); check C, lambda1, lambda2 and the "
                "sample weights, standardise the features, or use solver='dcd'."
            )
        if log is not None:
            log.debug("LDM ASGD epoch %d done (t = %d)", ep + 1, state.t)
    wbar = state.average()
    if not np.all(np.isfinite(wbar)):
        raise FloatingPointError("LDM ASGD produced non-finite weights; check C, lambda1, lambda2 and the sample "
                                 "weights, standardise the features, or use solver='dcd'.")
    return LDMLinearResult(w=wbar[:-1].copy(), b=float(bias * wbar[-1]), state=state, n_iter=n_epochs,
                           converged=True)
