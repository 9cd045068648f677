"""Conjugate-gradient state of the MSVMAv semi-variance system (the "cg" scheme): never a
d x d matrix, for sparse or high-dimensional X."""

from __future__ import annotations

import numpy as np

from ._anderson import MEMORY

__all__ = ["CGSystem"]

#: Relative residual of the conjugate-gradient solves ...
CG_TOL = 1e-10
#: ... or, where that is larger, a residual norm of this multiple of the length of the
#: iteration's last step ||w_k - w_{k-1}|| (w of unit norm). As H >= I (P >= 1) the solve's error
#: is at most the residual's norm: each semi-variance step is solved to an error that is a small
#: fraction of the move it makes, so errors do not pile up along the path (as with a fixed
#: tolerance: 1e-8 left an accelerated run short of its fixed point) and vanish as the
#: iteration settles.
CG_FORCING = 1e-4
#: CG: the copy of the active rows is rebuilt once the products spent on stale and extra rows
#: since the last rebuild add up to this many products (about what a rebuild costs).
COPY_REBUILD = 2.0
#: Previous solutions whose span gives the conjugate-gradient start: as many as the iterates
#: that Anderson's mixing combines (its points jump further than the paper's steps, and the
#: solution of the system, linear in the point while A stays, is then farther from the span of
#: the last few solutions). Four before: on the sparse 200k x 50k row 1.9 products per
#: accelerated evaluation, now 1.4; the paper's 100 iterations 29 products, now 23.
CG_WINDOW = MEMORY
#: Largest sum of |coefficients| of the Galerkin start in the window's vectors.
GALERKIN_MAX_COEF = 1e4


class CGSystem:
    """H = P + sum_{A} s_i z_i z_i^T / nb for conjugate gradients; never a d x d matrix.

    * Products go through a copy of the rows of A made when the copy was last rebuilt
      (``design.subset``: contiguous, so SciPy's CSR / BLAS kernels run at full speed); rows
      that left A since have weight 0 there, rows that entered form a small extra block. The
      copy is rebuilt once the work spent on those two (summed over the products since the
      last rebuild) reaches :data:`COPY_REBUILD` products, about the cost of a rebuild.
    * g = sum_A s_i z_i, the diagonal of G = sum_A s_i z_i z_i^T and the mean direction
      t = sum_A s_i r_i z_i follow the changes of A (O(nnz of the changed rows)).
    * Preconditioner: the diagonal of G minus its mean part plus the mean part t t^T / tau
      as a rank-one term (Sherman-Morrison, O(d)). With an intercept t is G's bias column,
      so the bias row and column of H are exact in it; for non-negative features it also
      carries the rows' common direction, H's dominant eigenvector.
    * Start: the Galerkin (energy-minimising) combination of the last :data:`CG_WINDOW`
      solutions. Their products with H are kept current through the changes of A (O(nnz of
      the changed rows) each), and the newest one is b - r of the last solve, so the start
      costs no product through X.
    """

    def __init__(self, design, s, P, nb, cg_tol=CG_TOL, log=None, forcing=None):
        self.design, self.s, self.P, self.nb = design, s, P, nb
        self.cg_tol, self.log = cg_tol, log
        self.forcing = CG_FORCING if forcing is None else forcing
        d = design.d
        self.g = None  # sum_A s_i z_i
        self.diagG = None
        self.t = None  # sum_A s_i r_i z_i (the mean direction; G's bias column with an intercept)
        self.tau = 0.0  # sum_A s_i r_i^2
        self.pos = np.full(design.n, -1, dtype=np.int64)  # row -> position in the copy
        self.waste = 0.0  # products' worth of work spent on stale and extra rows
        # window of previous solutions x_j and H x_j (H of the current A), newest first
        self.W = np.empty((d, CG_WINDOW), order="F")  # columns contiguous
        self.HW = np.empty((d, CG_WINDOW), order="F")
        self.V = np.empty((d, CG_WINDOW), order="F")  # scratch of the start
        self.HV = np.empty((d, CG_WINDOW), order="F")
        self.k = 0
        self.x_prev = None
        self.n_products = 0

    # -- one semi-variance step
    def half_step(self, A, add, rem, theta, w, k=0, step=0.0):
        """Follow A (``add`` entered, ``rem`` left) and solve H w' = theta / nb g + P w by CG
        to a residual norm of at most max(cg_tol ||rhs||, forcing * ``step``), ``step`` the
        length of the run's last step (0: to cg_tol); ``k`` the iteration, for the log.
        Returns (w', "cg")."""
        self.move(A, add, rem)
        rhs = theta / self.nb * self.g + self.P * w
        w_half, _, done = self.solve(rhs, self.cg_tol, 10 * self.design.d + 100, atol=self.forcing * step)
        self.Hx = self.HW[:, 0].copy()  # H w_half = rhs - r (margin screening, :mod:`._screen`)
        if not done and self.log is not None:
            self.log.info("MSVMAv: CG stopped at its iteration cap (rtol=%g) in iteration %d", self.cg_tol, k)
        return w_half, "cg"

    def callback_info(self, scheme):
        """The state a callback sees (no explicit matrices)."""
        return {"g": self.g, "M": None, "G": None, "n_refresh": 0}

    # -- following A
    def move(self, A, add, rem):
        design, s = self.design, self.s
        n_act = int(np.count_nonzero(A))
        c = add.size + rem.size
        self.A = A
        if self.g is None or c > n_act:  # from scratch
            idx = np.flatnonzero(A)
            sub = design.subset(idx)
            sA = s[idx]
            self.g = sub.rmatvec(sA)
            self.diagG = sub.sq_rmatvec(sA)
            self.t = sub.rmatvec(sA * sub.r)
            self.tau = float(sA @ (sub.r * sub.r))
            self._set_copy(idx, sub)
            self.k = 0
        elif c:
            changed = np.concatenate([rem, add])
            sc = s[changed]
            sc[: rem.size] *= -1.0
            sub, coords = design.touched(changed)
            at = slice(None) if coords is None else coords
            k = self.k if self.k and c * self.k <= n_act else 0
            self.k = k
            # g, t and the window's H-products in one product through the changed rows
            T = np.empty((c, 2 + k))
            T[:, 0] = sc
            T[:, 1] = sc * sub.r
            if k:
                T[:, 2:] = sub.matvec(self.W[at, :k]) * (sc / self.nb)[:, None]
            out = sub.rmatvec(T)
            self.g[at] += out[:, 0]
            self.t[at] += out[:, 1]
            self.HW[at, :k] += out[:, 2:]
            self.diagG[at] += sub.sq_rmatvec(sc)
            self.tau += float(sc @ (sub.r * sub.r))
            p = self.pos[changed]
            ins = changed[p >= 0]
            now = A[ins]
            self.w_copy[p[p >= 0]] = np.where(now, s[ins], 0.0)
            self.n_stale += ins.size - 2 * int(np.count_nonzero(now))  # left minus re-entered
            # rows of A outside the copy: those that entered, less those that left again
            self.extra_idx = np.union1d(np.setdiff1d(self.extra_idx, rem, assume_unique=True),
                                        add[self.pos[add] < 0])
        if self.waste >= COPY_REBUILD:
            self._set_copy(np.flatnonzero(A))
        extra = self.extra_idx
        self.extra = design.subset(extra) if extra.size else None
        self.s_extra = s[extra]
        n_act = max(n_act, 1)
        self.stale = (self.n_stale + extra.size) / n_act
        self.waste += extra.size / n_act  # the copy of the extra rows

    def _set_copy(self, idx, sub=None):
        self.sub = self.design.subset(idx) if sub is None else sub
        self.pos[:] = -1
        self.pos[idx] = np.arange(idx.size)
        self.w_copy = self.s[idx].copy()
        self.n_stale = 0
        self.extra_idx = np.empty(0, dtype=np.int64)
        self.waste = 0.0

    # -- products and preconditioner
    def matvec(self, v):
        self.n_products += 1
        sub = self.sub
        out = sub.rmatvec(self.w_copy * sub.matvec(v))
        if self.extra is not None:
            out += self.extra.rmatvec(self.s_extra * self.extra.matvec(v))
        return self.P * v + out / self.nb

    def _preconditioner(self):
        """Diagonal plus rank one: H's second-moment part sum_A s_i z_i z_i^T / nb split into
        its mean direction t = sum_A s_i r_i z_i (the rows' common direction up to the label
        sign; with an intercept, G's bias column) and the diagonal of the rest. Inverted by
        Sherman-Morrison in O(d); positive definite whatever the data."""
        nb, t, tau = self.nb, self.t, self.tau
        Dinv = 1.0 / (self.P + np.maximum(self.diagG - t * t / tau, 0.0) / nb) if tau > 0 else \
            1.0 / (self.P + np.maximum(self.diagG, 0.0) / nb)
        if tau <= 0:
            return lambda v: Dinv * v
        c = t / np.sqrt(tau * nb)
        Dc = Dinv * c
        den = 1.0 + c @ Dc

        def apply(v):
            return Dinv * v - Dc * ((Dc @ v) / den)

        return apply

    def _start(self, b):
        """x0 and r0 = b - H x0: the Galerkin solution over the window (else the last
        solution, or 0). Successive solutions are nearly collinear, so the projected system is
        set up on the newest solution and the differences of successive ones, scaled to unit
        H-norm, and solved with small eigenvalues dropped; its coefficients must stay moderate,
        as r0 = b - (HW) y carries the round-off of HW times |y|."""
        k = self.k
        if k:
            V, HV = self.V[:, :k], self.HV[:, :k]
            V[:, 0] = self.W[:, 0]
            HV[:, 0] = self.HW[:, 0]
            np.subtract(self.W[:, : k - 1], self.W[:, 1:k], out=V[:, 1:])
            np.subtract(self.HW[:, : k - 1], self.HW[:, 1:k], out=HV[:, 1:])
            G = V.T @ HV
            G = 0.5 * (G + G.T)
            scale = 1.0 / np.sqrt(np.maximum(np.diag(G), np.finfo(float).tiny))
            lam, U = np.linalg.eigh(G * np.outer(scale, scale))
            keep = lam > 1e-10 * lam[-1]
            y = scale * (U[:, keep] @ ((U[:, keep].T @ (scale * (V.T @ b))) / lam[keep]))
            if not np.all(np.isfinite(y)) or np.abs(y).sum() > GALERKIN_MAX_COEF:
                y = np.zeros(k)
                y[0] = (V[:, 0] @ b) / (V[:, 0] @ HV[:, 0])  # the newest solution, scaled
            return V @ y, b - HV @ y
        if self.x_prev is not None:
            return self.x_prev.copy(), b - self.matvec(self.x_prev)
        return np.zeros_like(b), b.copy()

    def solve(self, b, rtol, maxiter, atol=0.0):
        """Preconditioned CG on H x = b to ||b - H x|| <= max(rtol ||b||, atol); (x, iterations,
        converged)."""
        pre = self._preconditioner()
        x, r = self._start(b)
        stop = max(rtol * np.linalg.norm(b), atol)
        it = 0
        done = np.linalg.norm(r) <= stop
        if not done:
            z = pre(r)
            p = z.copy()
            rz = r @ z
            while it < maxiter:
                q = self.matvec(p)
                a = rz / (p @ q)
                x += a * p
                r -= a * q
                it += 1
                if np.linalg.norm(r) <= stop:
                    done = True
                    break
                z = pre(r)
                rz_new = r @ z
                p *= rz_new / rz
                p += z
                rz = rz_new
            self.waste += it * self.stale
        # the window, newest first: x and H x = b - r
        self.W[:, 1:] = self.W[:, :-1]
        self.HW[:, 1:] = self.HW[:, :-1]
        self.W[:, 0] = x
        self.HW[:, 0] = b - r
        self.k = min(self.k + 1, CG_WINDOW)
        self.x_prev = x
        return x, it, done
