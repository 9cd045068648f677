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
  alpha = A^{-1} Y (beta + shift), f(x) = sum_j alpha_j (k(x_j, x) + B^2).
* Linear: Q_lin = I + c (S Xh^T D Xh - g g^T), g = Xh^T (y * s); M = I + c S Xh^T D Xh is
  factored once (Cholesky, R R^T = M; shared by the sub-problems of one-vs-rest, which differ
  only in y), and the rank-one downdate is applied by Sherman-Morrison on the factor:
  Q_lin = L L^T with L = R (I - rho hh hh^T), h = R^{-1} g. The data are transformed,
  Z = Xh L^{-T} (dense m x (d + 1)), so that H = Y Z Z^T Y and the generic linear DCD of
  :mod:`margindist.solvers.dcd` runs over beta with wt = Z^T Y (beta + shift) maintained
  (O(d) per step); w = L^{-T} wt. Set-up O(nnz(X) d + m d^2 + d^3).
* Averaged SGD on g = F / (C S) (paper Algorithm 2) for large linear problems, sparse
  friendly: :func:`ldm_asgd` and :class:`ASGDState` (also the state of ``partial_fit``).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg as sla
from scipy.linalg import lapack
import scipy.sparse as sp
from numba import njit

from .dcd import _row_axpy, _row_dot, _xorshift, csr_parts, dcd_kernel, dcd_linear

@njit(cache=True)
def _store(scal, wdiv, adiv, wfrac, t, abar_nz):
    scal[0] = wdiv
    scal[1] = adiv
    scal[2] = wfrac
    scal[3] = t
    scal[4] = abar_nz


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
    "ldm_primal_objective",
    "LDMKernelBase",
    "LDMKernelSystem",
    "ldm_dcd_kernel",
    "LDMLinearFactor",
    "ldm_dcd_linear",
    "ASGDState",
    "ldm_asgd",
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
            _lower_to_full(Tinv)
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


def ldm_dcd_kernel(G, y, sample_weight, lambda1, lambda2, C, *, tol=1e-3, max_iter=1000, beta0=None,
                   shrinking=True, random_state=None, overwrite=False, base=None):
    """Kernel LDM: set up H (O(m^3)), DCD over beta, alpha from one solve.

    G must include the constant feature (k + B^2) (unused when a shared ``base`` is given).
    Returns (alpha, beta, n_iter, dual value e^T beta - 1/2 (beta + shift)^T H (beta + shift)).
    """
    s = np.asarray(sample_weight, dtype=np.float64)
    if base is None:
        system = LDMKernelBase(G, s, lambda1, overwrite=overwrite).system(y, reuse=True)
    else:
        system = base.system(y)
    shift = (lambda2 / system.S) * s
    u0 = system.H @ shift
    res = dcd_kernel(np.ones_like(s), 0.0, -1.0, C * s, n_var=s.shape[0], gram=system.H, bias=0.0, u0=u0,
                     a0=beta0, tol=tol,
                     max_iter=max_iter, shrinking=shrinking, random_state=random_state,
                     warn_label="LDM")
    beta = res.a
    dual = float(beta.sum() - 0.5 * (beta + shift) @ res.u)
    return system.alpha(beta, lambda2), beta, res.n_iter, dual


# ----------------------------------------------------------------------------- linear dual


def _weighted_gram(X, s, bias):
    """Xh^T diag(s) Xh (d + 1, d + 1) in float64, without densifying sparse X."""
    d = X.shape[1]
    out = np.empty((d + 1, d + 1))
    if sp.issparse(X):
        Xc = X.tocsr()
        out[:d, :d] = (Xc.T @ Xc.multiply(s[:, None]).tocsr()).toarray()
        xs = np.asarray(Xc.T @ s, dtype=np.float64).ravel()
    else:
        Xf = np.asarray(X, dtype=np.float64)
        out[:d, :d] = Xf.T @ (Xf * s[:, None])
        xs = Xf.T @ s
    out[:d, d] = out[d, :d] = bias * xs
    out[d, d] = bias * bias * s.sum()
    return out


def _xh_t(X, r, bias):
    """Xh^T r."""
    head = np.asarray(X.T @ r, dtype=np.float64).ravel()
    return np.concatenate([head, [bias * float(np.sum(r))]])


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
        self.R = np.linalg.cholesky(M)
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


def ldm_dcd_linear(X, y, sample_weight, lambda1, lambda2, C, *, bias=1.0, tol=1e-3, max_iter=1000,
                   beta0=None, shrinking=True, random_state=None, factor=None):
    """Linear LDM by DCD over beta on the transformed data Z.

    Returns (w (d,), b, beta, n_iter, dual value e^T beta - 1/2 ||wt||^2).
    """
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sample_weight, dtype=np.float64)
    if factor is None:
        factor = LDMLinearFactor(X, s, lambda1, bias)
    Z, Linv, LTinv, g = factor.transform(y)
    wt0 = Linv(g * (lambda2 / factor.S))  # Z^T Y shift
    res = dcd_linear(Z, y, 0.0, -1.0, C * s, n_var=y.shape[0], bias=0.0,
                     w0=np.concatenate([wt0, [0.0]]), a0=beta0, tol=tol, max_iter=max_iter,
                     shrinking=shrinking, random_state=random_state, warn_label="LDM")
    wt = res.w[:-1]
    v = LTinv(wt)
    dual = float(res.a.sum() - 0.5 * wt @ wt)
    return v[:-1].copy(), float(bias * v[-1]), res.a, res.n_iter, dual


# ----------------------------------------------------------------------------- averaged SGD


@njit(cache=True)
def _lower_to_full(A):
    """Copy the lower triangle of A onto its upper triangle, in place."""
    n = A.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            A[i, j] = A[j, i]


@njit(cache=True)
def _asgd_pass(Xd, data, indices, indptr, sparse, bias, y, sfac, cumw, order, jshift, lam3, l1, l2, eta0,
               eta_const, t0, w, abar, scal, rng, average):
    """One pass of (averaged) SGD over ``order``. Returns 0, or 1 if the weights blew up.

    State (Bottou's ASGD representation): w_true = w / wdiv; average = (abar + wfrac w) / adiv.
    scal = [wdiv, adiv, wfrac, t, abar_nonzero].

    The second sample j of the two-sample gradient: with weights (cumw non-empty) drawn with
    probability s_j / S; with equal weights and ``jshift`` > 0 the sample ``jshift`` positions
    further along ``order`` (a permutation of all rows: j is uniform over the rows other than
    i, and ((m - 1) z_j + z_i) / m is an unbiased estimate of the mean margin; the rows are
    then read in storage order, which is much faster than random access); else uniform.
    """
    m = y.shape[0]
    n_order = order.shape[0]
    d = w.shape[0] - 1
    wdiv, adiv, wfrac, t, abar_nz = scal[0], scal[1], scal[2], scal[3], scal[4]
    total = cumw[cumw.shape[0] - 1] if cumw.shape[0] > 0 else 0.0
    for s in range(n_order):
        i = order[s]
        wxi = _row_dot(Xd, data, indices, indptr, sparse, i, w, bias) / wdiv
        yi = y[i]
        zi = yi * wxi
        if cumw.shape[0] > 0:
            r = (np.float64(_xorshift(rng) >> np.uint64(11)) * (1.0 / 9007199254740992.0)) * total
            j = np.searchsorted(cumw, r, side="right")
            if j >= m:
                j = m - 1
            zbar = y[j] * _row_dot(Xd, data, indices, indptr, sparse, j, w, bias) / wdiv
        elif jshift > 0 and m > 1:
            j = order[(s + jshift) % n_order]
            zj = y[j] * _row_dot(Xd, data, indices, indptr, sparse, j, w, bias) / wdiv
            zbar = ((m - 1) * zj + zi) / m
        else:
            j = np.int64(_xorshift(rng) % np.uint64(m))
            zbar = y[j] * _row_dot(Xd, data, indices, indptr, sparse, j, w, bias) / wdiv
        coef = 4.0 * l1 * (wxi - yi * zbar) - l2 * yi
        if zi <= 1.0:
            coef -= yi
        coef *= sfac[i]
        if eta_const > 0.0:
            eta = eta_const
        else:
            eta = eta0 / (1.0 + lam3 * eta0 * t) ** 0.75
        decay = 1.0 - eta * lam3
        if decay <= 0.0 or not np.isfinite(coef):
            _store(scal, wdiv, adiv, wfrac, t, abar_nz)
            return 1
        wdiv = wdiv / decay
        etd = -eta * coef * wdiv
        if etd != 0.0:
            _row_axpy(Xd, data, indices, indptr, sparse, i, etd, w, bias)
        if average:
            n_avg = t + 2.0 - t0
            if n_avg <= 1.0:
                if abar_nz != 0.0:
                    for f in range(d + 1):
                        abar[f] = 0.0
                    abar_nz = 0.0
                adiv = wdiv
                wfrac = 1.0
            else:
                mu_t = 1.0 / n_avg
                if etd != 0.0:
                    _row_axpy(Xd, data, indices, indptr, sparse, i, -wfrac * etd, abar, bias)
                    abar_nz = 1.0
                adiv = adiv / (1.0 - mu_t)
                wfrac = wfrac + mu_t * adiv / wdiv
        t += 1.0
        if wdiv > 1e5 or adiv > 1e5:
            if average:
                for f in range(d + 1):
                    abar[f] = (abar[f] + wfrac * w[f]) / adiv
                abar_nz = 1.0
            for f in range(d + 1):
                w[f] /= wdiv
            wdiv = 1.0
            adiv = 1.0
            wfrac = 0.0
    _store(scal, wdiv, adiv, wfrac, t, abar_nz)
    return 0


class ASGDState:
    """The state of averaged SGD between passes (and between ``partial_fit`` calls).

    w_true = w / wdiv, the averaged weights (abar + wfrac w) / adiv; t the number of steps
    taken; eta0 the initial step (set by the first trial); t0 the step at which averaging
    starts; weight_seen the total sample weight seen (S of the objective).
    """

    def __init__(self, n_weights):
        self.w = np.zeros(n_weights)
        self.abar = np.zeros(n_weights)
        self.scal = np.array([1.0, 1.0, 1.0, 0.0, 0.0])
        self.eta0 = None
        self.t0 = None
        self.weight_seen = 0.0

    @property
    def t(self):
        return int(self.scal[3])

    def weights(self):
        return self.w / self.scal[0]

    def average(self):
        adiv, wfrac = self.scal[1], self.scal[2]
        return (self.abar + wfrac * self.w) / adiv


def ldm_sgd_objective(w, X, y, s, lambda1, lambda2, C, S_total, bias):
    """g(w) = F(w) / (C S_total) with the data terms averaged over (X, y, s) (used by the
    step-size trial; on the whole data set with S_total = sum s it is F / (C S))."""
    z = y * (np.asarray(X @ w[:-1], dtype=np.float64).ravel() + bias * w[-1])
    Sb = s.sum()
    zbar = float(s @ z) / Sb
    vhat = 2.0 * float(s @ (z - zbar) ** 2) / Sb
    hinge = float(s @ np.maximum(1.0 - z, 0.0)) / Sb
    lam3 = 1.0 / (C * S_total)
    return 0.5 * lam3 * float(w @ w) + lam3 * (lambda1 * vhat - lambda2 * zbar) + hinge


def _run_pass(parts, bias, y, sfac, cumw, order, jshift, consts, eta0, eta_const, t0, state, rng, average):
    lam3, l1, l2 = consts
    code = _asgd_pass(*parts, bias, y, sfac, cumw, order, int(jshift), lam3, l1, l2, eta0, eta_const,
                      float(t0), state.w, state.abar, state.scal, rng, average)
    return code == 0 and np.all(np.isfinite(state.w))


def _trial_eta0(X, y, s, lambda1, lambda2, C, S_total, bias, state, rng_np, rng, n_trial=1000):
    """Bottou's recipe: one plain-SGD pass on <= n_trial samples for eta = 1, 2, 4 ... or
    1/2, 1/4 ..., keep the eta with the lowest objective on those samples."""
    m = y.shape[0]
    idx = rng_np.permutation(m)[: min(m, n_trial)]
    Xs = X[idx]
    ys, ss = y[idx], s[idx]
    parts = csr_parts(Xs)
    Sb = ss.sum()
    sfac = ys.shape[0] * ss / Sb
    cumw = np.zeros(0) if np.all(ss == ss[0]) else np.cumsum(ss)
    consts = (1.0 / (C * S_total), lambda1 / (C * S_total), lambda2 / (C * S_total))
    order = np.arange(ys.shape[0])
    jshift = rng_np.randint(1, ys.shape[0]) if ys.shape[0] > 1 else 0
    w_start = state.weights()

    def cost(eta):
        trial = ASGDState(w_start.shape[0])
        trial.w[:] = w_start
        ok = _run_pass(parts, bias, ys, sfac, cumw, order, jshift, consts, 1.0, eta, 0.0, trial, rng, False)
        if not ok:
            return np.inf
        return ldm_sgd_objective(trial.weights(), Xs, ys, ss, lambda1, lambda2, C, S_total, bias)

    factor = 2.0
    lo_eta, lo_cost = 1.0, cost(1.0)
    hi_eta, hi_cost = lo_eta * factor, cost(lo_eta * factor)
    if lo_cost < hi_cost:
        while lo_cost < hi_cost and lo_eta > 1e-12:
            hi_eta, hi_cost = lo_eta, lo_cost
            lo_eta = hi_eta / factor
            lo_cost = cost(lo_eta)
    elif hi_cost < lo_cost:
        while hi_cost < lo_cost and hi_eta < 1e12:
            lo_eta, lo_cost = hi_eta, hi_cost
            hi_eta = lo_eta * factor
            hi_cost = cost(hi_eta)
    return lo_eta


def ldm_asgd(X, y, sample_weight, lambda1, lambda2, C, *, bias=1.0, n_epochs=5, state=None,
             random_state=None, n_trial=1000, log=None):
    """Averaged SGD for linear LDM (paper Algorithm 2) on g = F / (C S).

    Unbiased two-sample gradient (i runs through a random permutation, stored once so that the
    rows are read in storage order; j independent of i with probability s_j / S, or, for equal
    weights, uniform over the other rows with the mean margin estimated by
    ((m - 1) z_j + z_i) / m):

        ghat = lambda3 w + (m s_i / S) [4 l1 ((w.x_i) - y_i y_j (w.x_j)) x_i - l2 y_i x_i
               - y_i x_i 1(y_i w.x_i <= 1)],
        lambda3 = 1 / (C S), l1 = lambda1 / (C S), l2 = lambda2 / (C S),

    steps eta_t = eta0 (1 + lambda3 eta0 t)^(-3/4), eta0 from a short trial on <= ``n_trial``
    samples (Bottou's recipe), averaging from step t0 = 2 m on with weight 1 / (t + 2 - t0),
    lazy scaling (O(nnz(x_i) + nnz(x_j)) per step).

    ``state`` (an :class:`ASGDState`) continues a previous run (``partial_fit``): the objective
    is then that of all samples seen so far (S = total weight seen), t and the average go on.
    Returns (w (d,), b, state, epochs). Raises FloatingPointError if the weights blow up.
    """
    from sklearn.utils import check_random_state

    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sample_weight, dtype=np.float64)
    m, d = X.shape
    rng_np = check_random_state(random_state)
    rng = np.array([int(rng_np.randint(1, 2**31 - 1)) * 2654435761 + 1], dtype=np.uint64)
    if state is None:
        state = ASGDState(d + 1)
    state.weight_seen += float(s.sum())
    S_total = state.weight_seen
    if state.eta0 is None:
        state.eta0 = _trial_eta0(X, y, s, lambda1, lambda2, C, S_total, bias, state, rng_np, rng, n_trial)
        state.t0 = 2.0 * m
        if log is not None:
            log.info("LDM ASGD: eta0 = %g from the trial, averaging from step %d", state.eta0, int(state.t0))
    # one random permutation, stored (a copy of X): the passes then read rows in storage order
    perm = rng_np.permutation(m)
    Xp, yp, sp_ = X[perm], y[perm], s[perm]
    parts = csr_parts(Xp)
    sfac = m * sp_ / sp_.sum()
    cumw = np.zeros(0) if np.all(sp_ == sp_[0]) else np.cumsum(sp_)
    consts = (1.0 / (C * S_total), lambda1 / (C * S_total), lambda2 / (C * S_total))
    order = np.arange(m)
    for ep in range(n_epochs):
        jshift = rng_np.randint(1, m) if m > 1 else 0
        ok = _run_pass(parts, float(bias), yp, sfac, cumw, order, jshift, consts, state.eta0, 0.0, state.t0,
                       state, rng, True)
        if not ok:
            raise FloatingPointError(
                f"LDM ASGD diverged (non-finite weights) with eta0={state.eta0:g}; scale the "
                "features (e.g. to [0, 1]) or use solver='dcd'."
            )
        if log is not None:
            log.debug("LDM ASGD epoch %d done (t = %d)", ep + 1, state.t)
    wbar = state.average()
    if not np.all(np.isfinite(wbar)):
        raise FloatingPointError("LDM ASGD produced non-finite weights; scale the features.")
    return wbar[:-1].copy(), float(bias * wbar[-1]), state, n_epochs
