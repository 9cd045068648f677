"""Explicit d x d state of the MSVMAv semi-variance system: Sherman-Morrison / Woodbury
updates of its inverse and Cholesky refactorisations (the "sherman-morrison" and "batched"
schemes, and "auto" choosing between them per iteration)."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.linalg import blas, lapack

from ._common import CHECK_EVERY, REFRESH_TOL, probe_vector

__all__ = ["DirectSystem", "potri_full"]

#: Row blocks for Gram sums and Woodbury updates (bounds temporaries).
_ROW_BLOCK = 4096


def potri_full(c):
    """Inverse from an upper Cholesky factor (LAPACK potri); upper triangle, Fortran order."""
    inv, info = lapack.dpotri(c, lower=0, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"MSVMAv: Cholesky inverse failed (info={info}).")
    return np.asfortranarray(inv)


def _woodbury_cheaper(c, d):
    """Flop counts: Woodbury update of M for c changed rows (~4 c d^2 plus the O(d^2) probe
    check) against a Cholesky refactorisation (d^3 / 3)."""
    return 4.0 * c * d * d + 4.0 * d * d < d**3 / 3.0


class DirectSystem:
    """Explicit d x d state of the semi-variance system H = P + G / nb.

    g = sum_{A} s_i z_i is always current. G = sum_{A} s_i z_i z_i^T (upper triangle, Fortran
    order, updated in place by BLAS syrk) is kept current only while Cholesky steps need it
    (Sherman-Morrison steps leave it stale and it is rebuilt when needed). M = H^{-1} (upper
    triangle, Fortran order) is kept current by Sherman-Morrison / Woodbury updates when present.
    """

    def __init__(self, design, s, P, nb, update="auto", refresh_every=None):
        d = design.d
        self.design, self.s, self.P, self.nb, self.d = design, s, P, nb, d
        self.update, self.refresh_every = update, refresh_every
        self.since_refresh = 0  # incremental inverse updates since M was last computed from scratch
        self.G = np.zeros((d, d), order="F")
        self.G_valid = True  # G matches the active set of the last gram_sync
        self.g = np.zeros(d)
        self.M = None
        self.active = np.zeros(design.n, dtype=bool)
        self.n_refresh = 0
        self.probe = probe_vector(d)  # fixed probe vector for the round-off check of M

    # -- the sums over the active set
    def _rows_update(self, idx, sign, gram):
        for start in range(0, len(idx), _ROW_BLOCK):
            sl = idx[start : start + _ROW_BLOCK]
            R = self.design.rows(sl)
            wt = self.s[sl]
            if sp.issparse(R):
                if gram:
                    self.G += sign * (R.T @ R.multiply(wt[:, None]).tocsr()).toarray()
                self.g += sign * np.asarray(R.T @ wt).ravel()
            else:
                if gram:
                    Rw = R * np.sqrt(wt)[:, None]
                    self.G = blas.dsyrk(float(sign), Rw, beta=1.0, c=self.G, trans=1, lower=0,
                                        overwrite_c=1)
                self.g += sign * (R.T @ wt)

    def move(self, A, add, rem, gram):
        """Follow the active set to A (indices add entered, rem left): g always, G if ``gram``."""
        self.active = A
        c = add.size + rem.size
        n_act = int(np.count_nonzero(A))
        if gram and not self.G_valid:
            self.G[:] = 0.0
            self.g[:] = 0.0
            self._rows_update(np.flatnonzero(A), 1.0, True)
        elif c > n_act:  # cheaper from scratch
            self.g[:] = 0.0
            if gram:
                self.G[:] = 0.0
            self._rows_update(np.flatnonzero(A), 1.0, gram)
        else:
            if rem.size:
                self._rows_update(rem, -1.0, gram)
            if add.size:
                self._rows_update(add, 1.0, gram)
        if gram:
            self.G_valid = True
        elif c:
            self.G_valid = False

    def ensure_gram(self):
        if not self.G_valid:
            self.G[:] = 0.0
            self.g[:] = 0.0
            self._rows_update(np.flatnonzero(self.active), 1.0, True)
            self.G_valid = True

    def H(self):
        """P + G / nb, upper triangle valid (a fresh Fortran array)."""
        H = self.G / self.nb
        H[np.diag_indices(self.d)] += self.P
        return np.asfortranarray(H)

    def G_full(self):
        return np.triu(self.G) + np.triu(self.G, 1).T

    def H_times(self, x):
        if self.G_valid:
            return self.P * x + blas.dsymv(1.0, self.G, x, lower=0) / self.nb
        t = self.design.matvec(x)
        return self.P * x + self.design.rmatvec(np.where(self.active, self.s * t, 0.0)) / self.nb

    # -- one semi-variance step
    def half_step(self, A, add, rem, theta, w, k=0, step=0.0):
        """Follow A (``add`` entered, ``rem`` left) and solve H w' = theta / nb g + P w
        (exactly: ``k`` and ``step`` are for the interface of :class:`._cg.CGSystem`);
        returns (w', scheme). "auto" takes per iteration the cheaper of a Woodbury update of M
        and a Cholesky refactorisation."""
        c = add.size + rem.size
        if self.update in ("sherman-morrison", "batched"):
            scheme = self.update
        else:
            cheap = self.M is not None and _woodbury_cheaper(c, self.d)
            scheme = "sherman-morrison" if cheap else "batched"
        # g = sum_A s z always; the Gram sum G only for Cholesky steps
        self.move(A, add, rem, gram=scheme == "batched")
        rhs = theta / self.nb * self.g + self.P * w
        self.Hx = rhs  # H w_half (margin screening, :mod:`._screen`)
        if scheme == "sherman-morrison":
            self._follow_inverse(A, add, rem)
            return self.solve(rhs), scheme
        keep = self.update == "auto" and _woodbury_cheaper(c, self.d)
        self.since_refresh = 0
        return self.cholesky_solve(rhs, keep_inverse=keep), scheme

    def _follow_inverse(self, A, add, rem):
        """M <- H^{-1} of the new A by Woodbury blocks, checked against round-off."""
        if self.M is None:
            # from H = P, every index of A enters as an update (the paper starts at M = I)
            self.M = np.asfortranarray(np.diag(1.0 / self.P))  # upper triangle: diagonal
            self.woodbury(np.flatnonzero(A), 1.0)
        else:
            if rem.size:  # removals and additions as two separate batches
                self.woodbury(rem, -1.0)
            if add.size:
                self.woodbury(add, 1.0)
        self.since_refresh += 1
        if self.refresh_every is not None and self.since_refresh >= self.refresh_every or self.since_refresh % CHECK_EVERY == 0 and self.residual() > REFRESH_TOL:
            self.refresh()

    def callback_info(self, scheme):
        """The state a callback sees: M (explicit inverse) and G (Gram sum) where current."""
        return {"g": self.g, "M": self.M_full() if scheme == "sherman-morrison" else None,
                "G": self.G_full() if self.G_valid else None, "n_refresh": self.n_refresh}

    # -- solves
    def _factor(self):
        """Upper Cholesky factor of H (from a current Gram sum)."""
        self.ensure_gram()
        c, info = lapack.dpotrf(self.H(), lower=0, clean=0, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"MSVMAv: Cholesky of the semi-variance system failed (info={info}).")
        return c

    def cholesky_solve(self, rhs, keep_inverse):
        """Solve H x = rhs by a fresh Cholesky factorisation; optionally keep M = H^{-1}."""
        c = self._factor()
        x, info = lapack.dpotrs(c, rhs, lower=0)
        self.M = potri_full(c) if keep_inverse else None
        return x

    def refresh(self):
        self.M = potri_full(self._factor())
        self.n_refresh += 1
        self.since_refresh = 0

    def woodbury(self, idx, sign):
        """M <- (M^{-1} + sign sum_{idx} s_i z_i z_i^T / nb)^{-1}, blocks of rows.

        One row is the Sherman-Morrison update of the paper's Eq. 7 (removal, sign = -1) and
        the corrected Eq. 8 (addition, sign = +1): M - M z z^T M / (z^T M z + sign nb / s).
        A block of c rows U uses the capacitance C = sign nb diag(1/s) + U M U^T, positive
        definite for additions and negative definite for removals (never mixed), so that
        M - (M U^T) C^{-1} (U M) is a symmetric rank-c update through a Cholesky factor of +-C.
        Only the upper triangle of M is kept (BLAS syr / syrk / symm).
        """
        M = self.M
        block = max(1, min(self.d, 256))
        for start in range(0, len(idx), block):
            sl = idx[start : start + block]
            R = self.design.rows(sl)
            if sp.issparse(R):
                R = R.toarray()
            if len(sl) == 1:
                z = R[0]
                v = blas.dsymv(1.0, M, z, lower=0)
                denom = z @ v + sign * self.nb / self.s[sl[0]]
                M = blas.dsyr(-1.0 / denom, v, a=M, lower=0, overwrite_a=1)
                continue
            MU = blas.dsymm(1.0, M, np.asfortranarray(R.T), side=0, lower=0)  # (d, c)
            C = R @ MU
            C[np.diag_indices_from(C)] += sign * self.nb / self.s[sl]
            L = np.linalg.cholesky(sign * C)  # sign * C = L L^T
            V = sla.solve_triangular(L, MU.T, lower=True, check_finite=False)  # (c, d)
            # M - MU C^{-1} MU^T = M - sign V^T V
            M = blas.dsyrk(-sign, V, beta=1.0, c=M, trans=1, lower=0, overwrite_c=1)
        self.M = M

    def solve(self, rhs):
        return blas.dsymv(1.0, self.M, rhs, lower=0)

    def M_full(self):
        return None if self.M is None else np.triu(self.M) + np.triu(self.M, 1).T

    def residual(self):
        """Relative residual ||p - H M p|| of the explicit inverse on the probe vector."""
        return float(np.linalg.norm(self.probe - self.H_times(self.solve(self.probe))))
