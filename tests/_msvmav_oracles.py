"""Test oracles of the MSVMAv kernel path: the capacitance iteration in NumPy.

:func:`kernel_factor_loop` computes what the compiled loop
(:func:`margindist.solvers.msvmav._loops.kernel_loop`) computes, with a callback that exposes
the capacitance inverse; it plugs into ``msvmav_kernel(..., factor_loop=kernel_factor_loop)``.
"""

import numpy as np
import scipy.linalg as sla
from scipy.linalg import blas, lapack

from margindist.solvers.msvmav._common import (
    CHECK_EVERY,
    REFRESH_TOL,
    diverged,
    probe_vector,
)
from margindist.solvers.msvmav._direct import potri_full
from margindist.solvers.msvmav._history import History


class Capacitance:
    """Explicit inverse of the capacitance matrix of the kernel semi-variance step.

    With R = D^{-1} + K (the "paper" proximal metric, D = diag(s)), Y = diag(y):

        C = nb D_A^{-1} + Y_A (K R^{-1} K)_AA Y_A,   K R^{-1} K = K - D^{-1} + D^{-1} R^{-1} D^{-1},
        C_ij = y_i y_j (K_ij + R^{-1}_ij / (s_i s_j)) + delta_ij (nb - 1) / s_i    (i, j in A),

    |A| x |A| and positive definite (C >= nb D_A^{-1}; every principal submatrix too). Indices
    are kept in the order ``act``. A leaving block R: C^{-1} restricted to the rest is
    Ci_KK - Ci_KR Ci_RR^{-1} Ci_RK; an entering block N (bordering): with B = C_{A,N},
    X = Ci B and the Schur complement S = C_NN - B^T X,
    Ci <- [[Ci + X S^-1 X^T, -X S^-1], [-S^-1 X^T, S^-1]]. Each costs about 3 c |A|^2 for c
    indices; a refactorisation (Cholesky and inverse, |A|^3) replaces them when cheaper. The
    result is checked on a probe vector every :data:`CHECK_EVERY` updates, like the explicit
    inverse of the linear path.
    """

    def __init__(self, K, Rinv, y, s, nb):
        Rinv = np.tril(Rinv) + np.tril(Rinv, -1).T  # the factor's lower triangle, symmetric
        self.K, self.Rinv, self.y, self.s, self.nb = K, Rinv, y, s, nb
        self.ys = y / s
        self.act = None
        self.C = self.Ci = None
        self.since = 0
        self.n_refresh = 0

    def block(self, I, J, diag=False):
        B = self.K[np.ix_(I, J)]
        B *= np.outer(self.y[I], self.y[J])
        B += self.Rinv[np.ix_(I, J)] * np.outer(self.ys[I], self.ys[J])
        if diag:
            B[np.diag_indices_from(B)] += (self.nb - 1.0) / self.s[I]
        return B

    def refactor(self, act):
        self.act = act
        self.C = self.block(act, act, diag=True)
        if act.size:
            c, info = lapack.dpotrf(self.C, lower=0, clean=0)
            if info != 0:
                raise np.linalg.LinAlgError(f"MSVMAv: Cholesky of the capacitance matrix failed (info={info}).")
            inv = potri_full(c)
            self.Ci = np.triu(inv) + np.triu(inv, 1).T
        else:
            self.Ci = np.zeros((0, 0))
        self.since = 0

    def _remove(self, rem):
        where = np.full(self.K.shape[0], -1, dtype=np.int64)
        where[self.act] = np.arange(self.act.size)
        pr = where[rem]
        keep = np.ones(self.act.size, dtype=bool)
        keep[pr] = False
        Ci = self.Ci
        L = np.linalg.cholesky(Ci[np.ix_(pr, pr)])
        V = sla.solve_triangular(L, Ci[np.ix_(pr, keep)], lower=True, check_finite=False)
        self.Ci = Ci[np.ix_(keep, keep)] - V.T @ V
        self.C = self.C[np.ix_(keep, keep)]
        self.act = self.act[keep]

    def _add(self, add):
        n, c = self.act.size, add.size
        B = self.block(self.act, add)
        X = self.Ci @ B
        Dn = self.block(add, add, diag=True)
        Sc = Dn - B.T @ X
        L = np.linalg.cholesky(0.5 * (Sc + Sc.T))
        Si = sla.cho_solve((L, True), np.eye(c), check_finite=False)
        XS = X @ Si
        Ci = np.empty((n + c, n + c))
        Ci[:n, :n] = self.Ci + XS @ X.T
        Ci[:n, n:] = -XS
        Ci[n:, :n] = -XS.T
        Ci[n:, n:] = Si
        C = np.empty((n + c, n + c))
        C[:n, :n] = self.C
        C[:n, n:] = B
        C[n:, :n] = B.T
        C[n:, n:] = Dn
        self.Ci, self.C = Ci, C
        self.act = np.concatenate([self.act, add])

    def move(self, A, add, rem, refresh_every=None):
        """Follow A (``add`` entered, ``rem`` left); returns the scheme used."""
        n_new = int(np.count_nonzero(A))
        c = add.size + rem.size
        if self.Ci is None or 3.0 * c * self.act.size**2 >= float(n_new) ** 3:
            self.refactor(np.flatnonzero(A))
            return "capacitance-refactor"
        if c:
            if rem.size:
                self._remove(rem)
            if add.size:
                self._add(add)
            self.since += 1
            if (refresh_every is not None and self.since >= refresh_every) or (
                    self.since % CHECK_EVERY == 0 and self.residual() > REFRESH_TOL):
                self.refactor(np.flatnonzero(A))
                self.n_refresh += 1
                return "capacitance-refactor"
        return "capacitance"

    def residual(self):
        """Relative residual ||p - C Ci p|| on a fixed probe vector."""
        n = self.act.size
        if n == 0:
            return 0.0
        p = probe_vector(n)
        return float(np.linalg.norm(p - self.C @ (self.Ci @ p)))


def kernel_factor_loop(K, Rinv, y, s, alpha, beta, *, max_iter=100, tol=1e-6, refresh_every=None,
                        return_best=False, callback=None, log=None, **_):
    """The kernel iteration ("paper" metric R = D^{-1} + K) in the coefficients a, no
    eigendecomposition. With c = y * a (signed coefficients), margins m = y * (K a):

        delta = theta - m_A (the shortfalls),  v = C^{-1} delta  (:class:`Capacitance`),
        a'    = a + R^{-1} K_{:,A} Y_A v,  i.e.  c' = c + v (on A) - y * R^{-1} (y * v / s),
        a     = a' + s y / (2 alpha S),  normalised to a^T K a = c . m = 1, sign as in Sec. 5.

    (Woodbury on (R + K_A^T D_A K_A / nb)^{-1}; the printed right-hand side collapses because
    T_AA D_A y_A = C D_A y_A - nb y_A.) Per iteration two products with m x m symmetric
    matrices (O(m^2)) and the capacitance update (O(c |A|^2)). Returns an MSVMAvResult with
    ``w`` = a, or None for a degenerate start (s y with zero RKHS norm).
    """
    m = y.shape[0]
    S = float(s.sum())
    nb = S * beta
    KF, RF = K.T, Rinv.T  # Fortran views of the symmetric matrices (no copy for BLAS)
    ys = y / s

    def margins(c):
        return y * blas.dsymv(1.0, KF, y * c, lower=0)

    c = s.copy()  # a_0 ~ s y
    mm = margins(c)
    nrm2 = float(c @ mm)
    if not (np.isfinite(nrm2) and nrm2 > 0):
        return None
    c /= np.sqrt(nrm2)
    mm /= np.sqrt(nrm2)
    theta = float(s @ mm) / S
    A = mm < theta
    hist = History(max_iter, s, S)
    hist.record(0, mm, theta, A, int(np.count_nonzero(A)), c)
    prevA = np.zeros(m, dtype=bool)
    cap = Capacitance(K, Rinv, y, s, nb)
    am = s / (2.0 * alpha * S)
    converged = False
    k = 0
    for k in range(1, max_iter + 1):
        diff = np.flatnonzero(A != prevA)
        scheme = cap.move(A, diff[A[diff]], diff[~A[diff]], refresh_every)
        v = cap.Ci @ (theta - mm[cap.act])
        ve = np.zeros(m)
        ve[cap.act] = v
        c_half = c + ve
        c_half -= y * blas.dsymv(1.0, RF, ys * ve, lower=0)
        c_full = c_half + am
        m_full = margins(c_full)
        nrm2 = float(c_full @ m_full)
        if not np.isfinite(nrm2) or nrm2 <= 0:
            raise diverged(k, "the coefficients are", f" (norm^2 {nrm2})")
        f = (1.0 if s @ m_full >= 0 else -1.0) / np.sqrt(nrm2)  # Section 5: mean margin >= 0
        c_new, m_new = f * c_full, f * m_full
        if callback is not None:
            callback({"k": k, "active": A, "theta": theta, "a_prev": y * c, "a_half": y * c_half,
                      "a": y * c_new, "scheme": scheme, "nb": nb, "act": cap.act.copy(),
                      "C_inv": cap.Ci.copy(), "n_refresh": cap.n_refresh})
        dc = c_new - c
        step = float(np.sqrt(max(dc @ (m_new - mm), 0.0)))
        c, mm = c_new, m_new
        prevA = A
        A, converged = hist.advance(k, mm, float(s @ mm) / S, prevA, c, step, scheme, log, tol)
        theta = hist.rows[k, 0]
        if converged:
            break
    res = hist.result(c, k, converged, return_best, family="capacitance", n_refresh=cap.n_refresh)
    res.w = y * res.w
    return res
