"""MSVMAv (Qian, Ai, Zhang, Gao, IJCAI 2022): alternating average-margin / semi-variance steps.

Notation (weighted; s_i > 0 the sample weights, S = sum_i s_i replaces the paper's n):

    z_i = y_i x_i (the constant 1 appended to x_i when there is an intercept)
    u = sum_i s_i z_i,  margins m_i = <w, z_i>,  theta = <u, w> / S   (weighted average margin)

One iteration of the paper's Algorithm 1 (with the corrected Eq. 8, see below):

    A_k   = { i : <w_{k-1}, z_i> < theta_{k-1} }
    w'_k  = argmin_w (1/S) sum_{A_k} s_i (theta_{k-1} - <w, z_i>)^2 + beta ||w - w_{k-1}||_P^2
          = H_k^{-1} (theta/(S beta) g_k + P w_{k-1}),  H_k = P + sum_{A_k} s_i z_i z_i^T / (S beta),
            g_k = sum_{A_k} s_i z_i
    w_k   = argmin_w -(1/S) <u, w> + alpha ||w - w'_k||^2 = w'_k + u / (2 alpha S)
    w_k  <- w_k / ||w_k||_N;  w_k <- -w_k if its average margin is negative.

P = I and N = I in the paper's linear algorithm. The kernel algorithm (Section 4.2) is the same
iteration in the eigenbasis of the Gram matrix with diagonal P and N (:func:`msvmav_kernel`), so
one core, :func:`msvmav_iterate`, serves both. By default, though, the kernel path needs no
eigendecomposition: with R = diag(1/s) + K factorised once, the semi-variance step is a solve
with the |A| x |A| capacitance matrix of the Woodbury identity (:class:`_Capacitance`,
:func:`_kernel_factor_loop`, compiled as :func:`.msvmav_dense.kernel_loop`).

H_k is updated from H_{k-1} when indices enter or leave A. Schemes (``update``):

* ``"sherman-morrison"``: the explicit inverse M_k = H_k^{-1} is updated by Sherman-Morrison /
  Woodbury. For one index x with weight s (the paper's Eqs. 7 and 8, s = 1):

      removal:   M <- M - M x x^T M / (x^T M x - S beta / s)
      addition:  M <- M - M x x^T M / (x^T M x + S beta / s)

  The paper prints Eq. 8 with '+ M x x^T M'; that sign is wrong (Sherman-Morrison gives '-'
  for both directions; with the printed sign M drifts from H^{-1} without bound). Removals and
  additions are applied as two separate Woodbury blocks (a mixed block can have a singular
  capacitance matrix, e.g. duplicate points of opposite labels); each block costs
  O(c d^2 + c^2 d + c^3) for c rows. After every fourth update M is checked against H on a fixed
  probe vector (O(d^2)) and recomputed from the Gram sum when the residual exceeds
  :data:`REFRESH_TOL` (or every ``refresh_every`` iterations when that is set), which bounds
  round-off.
* ``"batched"``: keep the Gram sum S_A = sum_{A} s_i z_i z_i^T incrementally (O(c d^2) for c
  changes) and re-factorise H by Cholesky (O(d^3)) every iteration.
* ``"cg"``: conjugate gradients on H with products through a reused copy of the rows of A,
  a diagonal-plus-mean-direction preconditioner and a Galerkin start from the last solutions
  (:class:`_CGSystem`); never forms a d x d matrix (sparse, high-dimensional X).
* ``"auto"``: dense X with few columns: the batched scheme in one compiled loop
  (:mod:`.msvmav_dense`); CG when d is large (no d x d matrix); otherwise per iteration the
  cheaper of a Woodbury update of M (about 4 c d^2 flops) and a Cholesky refactorisation
  (d^3 / 3).

All dense linear algebra runs with one BLAS thread for matrices up to order
:data:`BLAS_SINGLE_THREAD_MAX` (multi-threaded OpenBLAS was measured 10x slower there).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from contextlib import nullcontext

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.linalg import blas, lapack

from ..kernels import KernelSpec, kernel_matrix
from ._threads import single_blas_thread
from .msvmav_dense import dense_loop, kernel_loop

__all__ = [
    "Design",
    "msvmav_iterate",
    "msvmav_linear",
    "msvmav_kernel",
    "weighted_gram_eig",
    "blas_single_thread",
    "clear_factor_cache",
    "HISTORY_FIELDS",
]

#: Columns of the per-iterate history (row k describes iterate w_k; row 0 the start w_0).
HISTORY_FIELDS = ("theta", "semivariance", "bound", "n_active", "n_changes", "step", "update")

#: "auto" never forms a d x d matrix above this many features (dense / sparse X).
MAX_DIRECT_DENSE = 4096
MAX_DIRECT_SPARSE = 2048
#: "auto" runs the compiled loop (:mod:`.msvmav_dense`) on dense X up to this many features.
MAX_COMPILED = 128
#: Row blocks for Gram sums and Woodbury updates (bounds temporaries).
_ROW_BLOCK = 4096
#: Probe residual of the explicit inverse above which it is recomputed from scratch.
REFRESH_TOL = 1e-10
#: The probe check runs after every CHECK_EVERY-th incremental update.
CHECK_EVERY = 4
#: Relative residual of the conjugate-gradient solves.
CG_TOL = 1e-10
#: CG: the copy of the active rows is rebuilt once the products spent on stale and extra rows
#: since the last rebuild add up to this many products (about what a rebuild costs).
COPY_REBUILD = 2.0
#: Previous solutions whose span gives the conjugate-gradient start.
CG_WINDOW = 4
#: Largest sum of |coefficients| of the Galerkin start in the window's vectors.
GALERKIN_MAX_COEF = 1e4
#: Iterations at the end of a run in which an active-set change means "not settled".
CHANGE_WINDOW = 5

#: Problems whose largest dense matrix has at most this order run with one BLAS thread.
BLAS_SINGLE_THREAD_MAX = 2048


def blas_single_thread(size: int):
    """Context manager limiting BLAS to one thread when the dense matrices are small.

    Multi-threaded OpenBLAS was measured 10-60x slower than one thread on the small matrices of
    this solver (d or m up to a few hundred) on a 2-core machine; ``size`` is the order of the
    largest dense matrix of the problem. Above :data:`BLAS_SINGLE_THREAD_MAX` the BLAS
    threading is left alone (control it with threadpoolctl around ``fit``).
    """
    return nullcontext() if size > BLAS_SINGLE_THREAD_MAX else single_blas_thread()


def _rowwise(v, like):
    """v as a column when ``like`` is 2-D (scales the rows of a matrix)."""
    return v if like.ndim == 1 else v[:, None]


# --------------------------------------------------------------------------------------
# the design matrix Z = diag(r) [B, 1] diag(c), never copied
# --------------------------------------------------------------------------------------


class Design:
    """Rows z_i = r_i * [b_i, 1] * c without forming Z.

    ``B`` (n, p) dense float64 array or CSR matrix, ``r`` (n,) row scales (the labels y),
    ``col_scale`` (p,) optional column scales, ``intercept``: append a constant-1 column
    (only without ``col_scale``).
    """

    def __init__(self, B, r, col_scale=None, intercept=False):
        if intercept and col_scale is not None:
            raise ValueError("Design: intercept and col_scale are exclusive.")
        self.B = B
        self.r = np.asarray(r, dtype=np.float64)
        self.c = None if col_scale is None else np.asarray(col_scale, dtype=np.float64)
        self.intercept = bool(intercept)
        self.sparse = sp.issparse(B)
        self.n, self.p = B.shape
        self.d = self.p + self.intercept

    def matvec(self, w):
        """Z @ w (w of shape (d,) or (d, q))."""
        v = w[: self.p] if self.intercept else w
        if self.c is not None:
            v = _rowwise(self.c, v) * v
        out = self.B @ v
        if self.sparse:
            out = np.asarray(out)
        if self.intercept:
            out = out + w[self.p]
        return _rowwise(self.r, out) * out

    def rmatvec(self, t):
        """Z^T @ t (t of shape (n,) or (n, q))."""
        rt = _rowwise(self.r, t) * t
        out = self.B.T @ rt
        if self.sparse:
            out = np.asarray(out)
        if self.c is not None:
            out = _rowwise(self.c, out) * out
        if self.intercept:
            out = np.concatenate([out, rt.sum(axis=0)[None]])
        return out

    def rows(self, idx):
        """Z[idx] as a dense (k, d) array or, for sparse B, a CSR matrix."""
        r = self.r[idx]
        if self.sparse:
            R = self.B[idx]
            if self.intercept:
                R = sp.hstack([R, np.ones((len(idx), 1))], format="csr")
            if self.c is not None:
                R = R @ sp.diags(self.c)
            return sp.csr_matrix(R.multiply(r[:, None]))
        R = np.empty((len(idx), self.d))
        R[:, : self.p] = self.B[idx]
        if self.intercept:
            R[:, self.p] = 1.0
        if self.c is not None:
            R *= self.c
        R *= r[:, None]
        return R

    def subset(self, idx):
        """The design of rows idx (a copy of those rows of B)."""
        return Design(self.B[idx], self.r[idx], self.c, self.intercept)

    def touched(self, idx):
        """(design of rows idx on the coordinates they touch, those coordinates) for sparse B
        with few non-zeros in those rows: products with them then cost O(their nnz), not O(d).
        Otherwise (subset, None)."""
        sub = self.subset(idx)
        if not self.sparse or self.c is not None or sub.B.nnz > self.p // 4:
            return sub, None
        cols, inv = np.unique(sub.B.indices, return_inverse=True)
        B = sp.csr_matrix((sub.B.data, inv.astype(sub.B.indices.dtype), sub.B.indptr),
                          shape=(len(idx), cols.size))
        coords = np.append(cols, self.p) if self.intercept else cols
        return Design(B, sub.r, intercept=self.intercept), coords

    def sq_rmatvec(self, t):
        """sum_i t_i z_i * z_i (elementwise squares): the diagonal of Z^T diag(t) Z."""
        rt = self.r * self.r * t
        if self.sparse:
            B2 = sp.csr_matrix((self.B.data * self.B.data, self.B.indices, self.B.indptr),
                               shape=self.B.shape, copy=False)
            out = np.asarray(B2.T @ rt).ravel()
        else:
            out = np.einsum("ij,ij,i->j", self.B, self.B, rt, optimize=True)
        if self.c is not None:
            out = self.c * self.c * out
        if self.intercept:
            out = np.append(out, rt.sum())
        return out


class _Direct:
    """Explicit d x d state of the semi-variance system H = P + G / nb.

    g = sum_{A} s_i z_i is always current. G = sum_{A} s_i z_i z_i^T (upper triangle, Fortran
    order, updated in place by BLAS syrk) is kept current only while Cholesky steps need it
    (Sherman-Morrison steps leave it stale and it is rebuilt when needed). M = H^{-1} (upper
    triangle, Fortran order) is kept current by Sherman-Morrison / Woodbury updates when present.
    """

    def __init__(self, design, s, P, nb):
        d = design.d
        self.design, self.s, self.P, self.nb, self.d = design, s, P, nb, d
        self.G = np.zeros((d, d), order="F")
        self.G_valid = True  # G matches the active set of the last gram_sync
        self.g = np.zeros(d)
        self.M = None
        self.active = np.zeros(design.n, dtype=bool)
        self.n_refresh = 0
        # fixed probe vector for the round-off check of M (deterministic, not user randomness)
        self.probe = np.cos(np.arange(1, d + 1) * 2.399963229728653)
        self.probe /= np.linalg.norm(self.probe)

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

    # -- solves
    def cholesky_solve(self, rhs, keep_inverse):
        """Solve H x = rhs by a fresh Cholesky factorisation; optionally keep M = H^{-1}."""
        self.ensure_gram()
        c, info = lapack.dpotrf(self.H(), lower=0, clean=0, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"MSVMAv: Cholesky of the semi-variance system failed (info={info}).")
        x, info = lapack.dpotrs(c, rhs, lower=0)
        if keep_inverse:
            self.M = _potri_full(c)
        else:
            self.M = None
        return x

    def refresh(self):
        self.ensure_gram()
        c, info = lapack.dpotrf(self.H(), lower=0, clean=0, overwrite_a=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"MSVMAv: Cholesky of the semi-variance system failed (info={info}).")
        self.M = _potri_full(c)
        self.n_refresh += 1

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


class _CGSystem:
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

    def __init__(self, design, s, P, nb):
        self.design, self.s, self.P, self.nb = design, s, P, nb
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

    def solve(self, b, rtol, maxiter):
        """Preconditioned CG on H x = b to ||b - H x|| <= rtol ||b||; (x, iterations, converged)."""
        pre = self._preconditioner()
        x, r = self._start(b)
        stop = rtol * np.linalg.norm(b)
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


def _potri_full(c):
    """Inverse from an upper Cholesky factor (LAPACK potri); upper triangle, Fortran order."""
    inv, info = lapack.dpotri(c, lower=0, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"MSVMAv: Cholesky inverse failed (info={info}).")
    return np.asfortranarray(inv)


def _woodbury_cheaper(c, d):
    """Flop counts: Woodbury update of M for c changed rows (~4 c d^2 plus the O(d^2) probe
    check) against a Cholesky refactorisation (d^3 / 3)."""
    return 4.0 * c * d * d + 4.0 * d * d < d**3 / 3.0


def _choose_family(design, update):
    """'direct' (explicit d x d matrices) or 'cg'."""
    if update == "cg":
        return "cg"
    if update in ("sherman-morrison", "batched"):
        return "direct"
    limit = MAX_DIRECT_SPARSE if design.sparse else MAX_DIRECT_DENSE
    return "cg" if design.d > limit else "direct"


class _History:
    """Per-iterate history (row k describes iterate k; fields :data:`HISTORY_FIELDS`), the
    best iterate by SV / theta^2 and the run's summary, shared by the solver loops."""

    def __init__(self, max_iter, s, S):
        self.s, self.S = s, S
        self.rows = np.zeros((max_iter + 1, 6))
        self.rows[:, 5] = np.nan
        self.schemes = ["init"]
        self.best_k, self.best = 0, None

    def record(self, k, m, theta, A, changes, w, step=np.nan, scheme=None):
        short = np.maximum(theta - m, 0.0)
        sv = float(self.s @ (short * short)) / self.S
        bound = sv / theta**2 if theta > 0 else np.inf
        self.rows[k] = (theta, sv, bound, np.count_nonzero(A), changes, step)
        if scheme is not None:
            self.schemes.append(scheme)
        if k == 0 or bound < self.rows[self.best_k, 2]:
            self.best_k, self.best = k, w.copy()

    def advance(self, k, m, theta, prevA, w, step, scheme, log, tol):
        """Record iterate k (margins m, average margin theta); returns (A_k, tol met)."""
        A = m < theta
        changes = int(np.count_nonzero(A != prevA))
        self.record(k, m, theta, A, changes, w, step, scheme)
        if log is not None and log.isEnabledFor(10):
            log.debug("MSVMAv iteration %d (%s): theta=%.6g SV/theta^2=%.6g |A|=%d changes=%d |dw|=%.3g",
                      k, scheme, theta, self.rows[k, 2], self.rows[k, 3], changes, step)
        return A, tol > 0 and changes == 0 and step <= tol

    def result(self, w, n_iter, converged, return_best, **extra):
        return _result(self.rows[: n_iter + 1], self.schemes, w, self.best, self.best_k, n_iter,
                       converged, return_best, **extra)


def _result(rows, schemes, w, best_w, best_k, n_iter, converged, return_best, **extra):
    """The solver's result dict from the history rows (theta, SV, bound, |A|, changes, step)."""
    history = {f: rows[:, j].copy() for j, f in enumerate(HISTORY_FIELDS[:3])}
    history["n_active"] = rows[:, 3].astype(np.int64)
    history["n_changes"] = rows[:, 4].astype(np.int64)
    history["step"] = rows[:, 5].copy()
    history["update"] = np.array(schemes)
    # a run ends at tol or at max_iter; "changing": max_iter with A still moving at the end
    window = history["n_changes"][-CHANGE_WINDOW:]
    return {"w": best_w if return_best else w, "n_iter": int(n_iter), "history": history,
            "best_iter": int(best_k), "converged": bool(converged),
            "changing": not converged and bool(np.any(window > 0)), **extra}


# --------------------------------------------------------------------------------------
# the core iteration
# --------------------------------------------------------------------------------------


def msvmav_iterate(design, s, alpha, beta, *, prox=None, step=None, norm_weights=None,
                   max_iter=100, tol=1e-6, update="auto", refresh_every=None, cg_tol=CG_TOL,
                   return_best=False, callback=None, log=None):
    """Run the MSVMAv iteration on the rows z_i of ``design``.

    Parameters
    ----------
    design : Design
        Rows z_i = y_i x_i.
    s : ndarray (n,)
        Positive sample weights; S = s.sum() takes the place of the paper's n.
    alpha, beta : float
        The paper's alpha (average-margin step) and beta (semi-variance step).
    prox : ndarray (d,), optional
        Diagonal metric P of the semi-variance proximal term (default identity).
    step : ndarray (d,), optional
        Direction of the average-margin step, w <- w' + step / (2 alpha S) (default u); also
        the starting point w_0 = step / ||step||_N.
    norm_weights : ndarray (d,), optional
        Diagonal metric N of the normalisation ||w||_N = 1 (default identity).
    max_iter : int
        T, the paper's iteration count (100).
    tol : float
        Stop early when an iteration leaves the active set unchanged and moves w by at most
        tol (in the N-norm; w has unit norm). 0 runs all ``max_iter`` iterations.
    update : {"auto", "sherman-morrison", "batched", "cg"}
    refresh_every : int or None
        Sherman-Morrison scheme: after every :data:`CHECK_EVERY`-th incremental update, M is
        checked against H on a fixed probe vector (O(d^2)) and recomputed from the Gram sum
        (O(d^3)) when the relative residual exceeds :data:`REFRESH_TOL`; ``refresh_every``
        additionally forces a recomputation after that many incremental iterations (None: only
        when the check fails).
    return_best : bool
        Return the iterate with the smallest SV/theta^2 instead of the last one.
    callback : callable, optional
        Called after each iteration with a dict (k, active, theta, w_prev, w_half, w, scheme,
        M (current explicit inverse or None), G (Gram sum or None), g). Testing aid.

    Returns
    -------
    dict with ``w`` (returned iterate), ``n_iter``, ``history`` (dict of arrays, one row per
    iterate 0..n_iter, fields :data:`HISTORY_FIELDS`), ``best_iter``, ``converged`` (tol met)
    and ``changing`` (active set changed in the last iterations of a run that hit max_iter).
    """
    n, d = design.n, design.d
    s = np.asarray(s, dtype=np.float64)
    S = float(s.sum())
    nb = S * beta
    u = design.rmatvec(s)
    P = np.ones(d) if prox is None else np.asarray(prox, dtype=np.float64)
    N = None if norm_weights is None else np.asarray(norm_weights, dtype=np.float64)
    step = u if step is None else np.asarray(step, dtype=np.float64)

    def norm(v):
        return float(np.sqrt(v @ v if N is None else v @ (N * v)))

    w = step.copy()
    nrm = norm(w)
    if nrm > 0 and np.isfinite(nrm):
        w /= nrm
    else:  # sum_i s_i z_i = 0: the average margin does not pick a direction; start on an axis
        w = np.zeros(d)
        j = 0 if N is None else int(np.argmax(N))
        w[j] = 1.0 / (1.0 if N is None else np.sqrt(N[j]))
    am_step = step / (2.0 * alpha * S)

    if (update == "auto" and callback is None and not design.sparse and design.c is None
            and d <= MAX_COMPILED):
        return _compiled(design, s, u, w, P, am_step, N, beta, max_iter, tol, return_best)

    family = _choose_family(design, update)
    hist = _History(max_iter, s, S)
    m = design.matvec(w)
    theta = float(u @ w) / S
    A = m < theta
    hist.record(0, m, theta, A, int(np.count_nonzero(A)), w)
    prevA = np.zeros(n, dtype=bool)

    direct = _Direct(design, s, P, nb) if family == "direct" else None
    since_refresh = 0  # incremental inverse updates since M was last computed from scratch
    cgs = None  # conjugate-gradient state
    g = None
    converged = False
    k = 0
    for k in range(1, max_iter + 1):
        diff = np.flatnonzero(A != prevA)
        add = diff[A[diff]]
        rem = diff[~A[diff]]
        c = diff.size
        rhs_scale = theta / nb

        if family == "direct":
            if update in ("sherman-morrison", "batched"):
                scheme = update
            else:  # auto: the cheaper of a Woodbury update of M and a Cholesky refactorisation
                cheap = direct.M is not None and _woodbury_cheaper(c, d)
                scheme = "sherman-morrison" if cheap else "batched"
            # g = sum_A s z always; the Gram sum G only for Cholesky steps
            direct.move(A, add, rem, gram=scheme == "batched")
            g = direct.g
            rhs = rhs_scale * g + P * w
            if scheme == "sherman-morrison":
                if direct.M is None:
                    # from H = P, every index of A enters as an update (the paper starts at M = I)
                    direct.M = np.asfortranarray(np.diag(1.0 / P))  # upper triangle: diagonal
                    direct.woodbury(np.flatnonzero(A), 1.0)
                else:
                    if rem.size:  # removals and additions as two separate batches
                        direct.woodbury(rem, -1.0)
                    if add.size:
                        direct.woodbury(add, 1.0)
                since_refresh += 1
                if refresh_every is not None and since_refresh >= refresh_every:
                    direct.refresh()
                    since_refresh = 0
                elif since_refresh % CHECK_EVERY == 0 and direct.residual() > REFRESH_TOL:
                    direct.refresh()
                    since_refresh = 0
                w_half = direct.solve(rhs)
            else:
                keep = update == "auto" and _woodbury_cheaper(c, d)
                w_half = direct.cholesky_solve(rhs, keep_inverse=keep)
                since_refresh = 0
        else:
            scheme = "cg"
            if cgs is None:
                cgs = _CGSystem(design, s, P, nb)
            cgs.move(A, add, rem)
            g = cgs.g
            rhs = rhs_scale * g + P * w
            w_half, _, done = cgs.solve(rhs, cg_tol, 10 * d + 100)
            if not done and log is not None:
                log.info("MSVMAv: CG stopped at its iteration cap (rtol=%g) in iteration %d", cg_tol, k)

        w_new = w_half + am_step
        nrm = norm(w_new)
        if not np.isfinite(nrm) or nrm <= 0:
            raise FloatingPointError(
                f"MSVMAv diverged at iteration {k}: the weight vector is not finite (norm {nrm}). "
                "Scale the features (e.g. to [0, 1]) or choose larger alpha/beta."
            )
        w_new /= nrm
        if u @ w_new < 0:  # Section 5: keep the average margin positive
            w_new = -w_new
        if callback is not None:
            callback({"k": k, "active": A, "theta": theta, "w_prev": w, "w_half": w_half,
                      "w": w_new, "scheme": scheme, "nb": nb, "g": g,
                      "M": direct.M_full() if scheme == "sherman-morrison" else None,
                      "G": direct.G_full() if direct is not None and direct.G_valid else None,
                      "n_refresh": direct.n_refresh if direct is not None else 0})
        dw = norm(w_new - w)
        w = w_new
        prevA = A
        m = design.matvec(w)
        A, converged = hist.advance(k, m, float(u @ w) / S, prevA, w, dw, scheme, log, tol)
        theta = hist.rows[k, 0]
        if converged:
            break

    return hist.result(w, k, converged, return_best, family=family,
                       n_refresh=direct.n_refresh if direct is not None else 0,
                       n_products=cgs.n_products if cgs is not None else 0)


def _compiled(design, s, u, w0, P, am_step, N, beta, max_iter, tol, return_best):
    """The "auto" scheme for dense X with few features: the compiled batched loop."""
    d = design.d
    N_arr = np.ones(d) if N is None else N
    w, best_w, n_iter, hist, best_k, converged, status = dense_loop(
        np.asfortranarray(design.B), design.r, s, design.intercept, u, w0, P, am_step, N_arr, float(beta),
        int(max_iter), float(tol))
    if status == 1:
        raise np.linalg.LinAlgError("MSVMAv: the semi-variance system is not positive definite.")
    if status == 2:
        raise FloatingPointError(
            f"MSVMAv diverged at iteration {n_iter}: the weight vector is not finite. "
            "Scale the features (e.g. to [0, 1]) or choose larger alpha/beta."
        )
    return _result(hist, ["init"] + ["batched"] * int(n_iter), w, best_w, best_k, n_iter, converged,
                   return_best, family="compiled")


def _kernel_compiled(K, Rinv, y, s, alpha, beta, *, max_iter=100, tol=1e-6, refresh_every=None,
                     return_best=False, **_):
    """:func:`_kernel_factor_loop` as one compiled loop (:func:`.msvmav_dense.kernel_loop`)."""
    c, best_c, n_iter, hist, best_k, converged, status, schemes, n_refresh = kernel_loop(
        K, Rinv, y, s, float(alpha), float(beta), int(max_iter), float(tol),
        int(refresh_every or 0), CHECK_EVERY, REFRESH_TOL)
    if status == 3:
        return None
    if status == 2:
        raise FloatingPointError(
            f"MSVMAv diverged at iteration {n_iter}: the coefficients are not finite. "
            "Scale the features (e.g. to [0, 1]) or choose larger alpha/beta."
        )
    names = ["init"] + ["capacitance-refactor" if f else "capacitance" for f in schemes[1:]]
    res = _result(hist, names, c, best_c, best_k, n_iter, converged, return_best, family="capacitance",
                  n_refresh=int(n_refresh))
    res["w"] = y * res["w"]
    return res


# --------------------------------------------------------------------------------------
# linear and kernel front ends
# --------------------------------------------------------------------------------------


def _as_float64(X):
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if X.dtype != np.float64:
            X = X.astype(np.float64)
        return X
    X = np.asarray(X, dtype=np.float64)  # no copy for float64 in C or Fortran order
    if not (X.flags.c_contiguous or X.flags.f_contiguous):
        X = np.ascontiguousarray(X)
    return X


def msvmav_linear(X, y, sample_weight, alpha, beta, *, fit_intercept=True, **kw):
    """Linear MSVMAv (paper Algorithm 1). Returns (coef (p,), intercept, result dict).

    With ``fit_intercept`` the constant 1 is appended to every x_i (implicitly, X is not
    copied), so the bias is a coordinate of w and part of ||w|| = 1, as in the paper.
    """
    X = _as_float64(X)
    design = Design(X, y, intercept=fit_intercept)
    with blas_single_thread(design.d):
        res = msvmav_iterate(design, sample_weight, alpha, beta, **kw)
    w = res["w"]
    if fit_intercept:
        return w[:-1].copy(), float(w[-1]), res
    return w, 0.0, res


def _kernel_gram(spec: KernelSpec, X, fit_intercept):
    if spec.kind == "precomputed":
        K = np.array(X, dtype=np.float64, copy=True)
        K = 0.5 * (K + K.T)
    else:
        K = kernel_matrix(spec, X)
    if fit_intercept:
        K += 1.0
    return K


#: Factorisations (inverse of diag(1/s) + K, or eigendecompositions) of recent weighted Gram
#: matrices, keyed by a hash of the data, the kernel and the weights: a grid over alpha and beta
#: at one kernel pays the O(m^3) once. Process-wide (shared by all estimators, so that a grid
#: search's clones find it); bounded by the ``cache_bytes`` of the latest call; emptied by
#: :func:`clear_factor_cache`.
_FACTOR_CACHE: OrderedDict = OrderedDict()
_FACTOR_LOCK = threading.Lock()
FACTOR_CACHE_BYTES = 500 * 2**20


def clear_factor_cache() -> None:
    """Free the kernel path's cached factorisations."""
    with _FACTOR_LOCK:
        _FACTOR_CACHE.clear()


def _factor_key(spec, X, s, fit_intercept):
    if spec.kind == "callable":
        return None
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((spec.kind, spec.gamma, spec.degree, spec.coef0, bool(fit_intercept))).encode())
    if sp.issparse(X):
        Xc = sp.csr_matrix(X)
        h.update(repr((Xc.shape, str(Xc.dtype))).encode())
        for arr in (Xc.data, Xc.indices, Xc.indptr):
            h.update(np.ascontiguousarray(arr).tobytes())
    else:
        Xa = np.ascontiguousarray(X)
        h.update(repr((Xa.shape, str(Xa.dtype))).encode())
        h.update(Xa.tobytes())
    h.update(np.ascontiguousarray(s, dtype=np.float64).tobytes())
    return h.hexdigest()


def _cached(tag, spec, X, s, fit_intercept, nbytes, cache_bytes, compute):
    """compute() (a tuple of arrays), cached under the data, kernel, weights and ``tag``;
    read-only when cached. ``cache_bytes``: total budget (default :data:`FACTOR_CACHE_BYTES`,
    0 disables the cache); least recently used entries leave first."""
    budget = FACTOR_CACHE_BYTES if cache_bytes is None else int(cache_bytes)
    key = _factor_key(spec, X, s, fit_intercept) if 0 < nbytes <= budget else None
    if key is not None:
        key = f"{tag}:{key}"
        with _FACTOR_LOCK:
            hit = _FACTOR_CACHE.get(key)
            if hit is not None:
                _FACTOR_CACHE.move_to_end(key)
                return hit
    value = compute()
    if value is not None:
        for v in value:
            v.flags.writeable = False
    if key is not None and value is not None:
        with _FACTOR_LOCK:
            _FACTOR_CACHE[key] = value
            total = sum(sum(8 * a.size for a in v) for v in _FACTOR_CACHE.values())
            while total > budget and len(_FACTOR_CACHE) > 1:
                _, old = _FACTOR_CACHE.popitem(last=False)
                total -= sum(8 * a.size for a in old)
    return value


def weighted_gram_eig(spec, X, s, fit_intercept, cache_bytes=None):
    """Eigendecomposition (lam ascending, Q) of D^{1/2} (K (+1)) D^{1/2}, D = diag(s); cached
    (see :func:`_cached`; ``cache_bytes=0`` disables the cache)."""

    def compute():
        rs = np.sqrt(s)
        K = _kernel_gram(spec, X, fit_intercept)
        K *= rs[:, None]
        K *= rs[None, :]
        lam, Q = sla.eigh(K, overwrite_a=True, check_finite=False)
        return np.maximum(lam, 0.0), Q

    m = s.shape[0]
    return _cached("eig", spec, X, s, fit_intercept, 8 * (m * m + m), cache_bytes, compute)


def weighted_gram_factor(spec, X, s, fit_intercept, cache_bytes=None):
    """(K, R^{-1}) with K the Gram matrix (+1) and R = D^{-1} + K, D = diag(s), both m x m and
    C-ordered; R^{-1} is valid on its lower triangle only (its upper triangle is left over
    from the factorisation). Cached like :func:`weighted_gram_eig`. One Cholesky factorisation
    and inversion, O(m^3) but several times cheaper than an eigendecomposition, and two m x m
    arrays at the peak. None when R is not positive definite (an indefinite kernel)."""

    def compute():
        K = _kernel_gram(spec, X, fit_intercept)
        R = K.T.copy(order="F")  # K symmetric: a plain copy, in Fortran order for LAPACK
        R[np.diag_indices_from(R)] += 1.0 / s
        c, info = lapack.dpotrf(R, lower=0, clean=0, overwrite_a=1)
        if info != 0:
            return None
        inv, info = lapack.dpotri(c, lower=0, overwrite_c=1)
        if info != 0:
            return None
        return K, inv.T  # the upper triangle of the Fortran array is the lower of its C view

    m = s.shape[0]
    return _cached("factor", spec, X, s, fit_intercept, 16 * m * m, cache_bytes, compute)


#: Kernels whose Gram matrix is positive semi-definite by construction (the factor route needs
#: it; other kernels go through the eigendecomposition, which clips negative eigenvalues).
def _psd_kernel(spec):
    return spec.kind in ("rbf", "linear") or (spec.kind == "poly" and spec.coef0 >= 0)


class _Capacitance:
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
            inv = _potri_full(c)
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
        p = np.cos(np.arange(1, n + 1) * 2.399963229728653)
        p /= np.linalg.norm(p)
        return float(np.linalg.norm(p - self.C @ (self.Ci @ p)))


def _kernel_factor_loop(K, Rinv, y, s, alpha, beta, *, max_iter=100, tol=1e-6, refresh_every=None,
                        return_best=False, callback=None, log=None, **_):
    """The kernel iteration ("paper" metric R = D^{-1} + K) in the coefficients a, no
    eigendecomposition. With c = y * a (signed coefficients), margins m = y * (K a):

        delta = theta - m_A (the shortfalls),  v = C^{-1} delta  (:class:`_Capacitance`),
        a'    = a + R^{-1} K_{:,A} Y_A v,  i.e.  c' = c + v (on A) - y * R^{-1} (y * v / s),
        a     = a' + s y / (2 alpha S),  normalised to a^T K a = c . m = 1, sign as in Sec. 5.

    (Woodbury on (R + K_A^T D_A K_A / nb)^{-1}; the printed right-hand side collapses because
    T_AA D_A y_A = C D_A y_A - nb y_A.) Per iteration two products with m x m symmetric
    matrices (O(m^2)) and the capacitance update (O(c |A|^2)). Returns the result dict with
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
    hist = _History(max_iter, s, S)
    hist.record(0, mm, theta, A, int(np.count_nonzero(A)), c)
    prevA = np.zeros(m, dtype=bool)
    cap = _Capacitance(K, Rinv, y, s, nb)
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
            raise FloatingPointError(
                f"MSVMAv diverged at iteration {k}: the coefficients are not finite (norm^2 {nrm2}). "
                "Scale the features (e.g. to [0, 1]) or choose larger alpha/beta."
            )
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
    res["w"] = y * res["w"]
    return res


def msvmav_kernel(spec: KernelSpec, X, y, sample_weight, alpha, beta, *, fit_intercept=False,
                  kernel_prox="paper", callback=None, cache_bytes=None, **kw):
    """Kernel MSVMAv (paper Section 4.2 as corrected). Returns (dual_coef (m,), intercept, result).

    f(x) = sum_j a_j k(x_j, x) (+ b with ``fit_intercept``: the kernel k + 1, b = sum_j a_j).
    The semi-variance step is

        a'_k = argmin_a (1/S) sum_{A_k} s_i (theta - y_i K_i^T a)^2 + beta (a - a_{k-1})^T R (a - a_{k-1})

    with R = diag(1/s) + K for ``kernel_prox="paper"`` (the paper's I + K for unit weights; the
    ridge part scales with 1/s_i so that an integer weight is the same as copies of the row) and
    R = K for ``kernel_prox="rkhs"`` (beta ||f - f_{k-1}||_H^2, the exact kernelisation of the
    linear step). For unit weights and "paper" this is the printed update
    a' = (I + K + sum_A K_i K_i^T / (n beta))^{-1} ((I + K) a + theta/(n beta) sum_A y_i K_i).

    One eigendecomposition of Kt = D^{1/2} K D^{1/2} = Q diag(lam) Q^T (D = diag(s); O(m^3)
    time, m x m memory) makes the system "diagonal + low rank": in the coordinates
    b = Q^T D^{-1/2} a the rows are z_i = y_i s_i^{-1/2} lam * q_i with P = 1 + lam, N = lam and
    the average-margin step along Q^T (sqrt(s) y) ("paper"), or, in v = sqrt(lam) b, the linear
    algorithm on the features y_i s_i^{-1/2} sqrt(lam) * q_i with eigenvalues below the
    numerical rank dropped ("rkhs"). The Sherman-Morrison scheme then starts from the diagonal
    inverse 1/P and applies the changes of A_k as Woodbury blocks (removals, then additions).

    ``update="auto"`` with "paper" and a positive semi-definite kernel (rbf, linear, poly with
    coef0 >= 0) needs no eigendecomposition: one Cholesky factorisation and inverse of R
    (:func:`weighted_gram_factor`, cached) and the iteration in the coefficients, where the
    semi-variance step is a solve with the |A| x |A| capacitance matrix of the Woodbury
    identity, kept as an explicit inverse updated as indices enter and leave A
    (:func:`_kernel_factor_loop`).
    """
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sample_weight, dtype=np.float64)
    m = y.shape[0]
    rs = np.sqrt(s)
    with blas_single_thread(m):
        if kernel_prox == "paper" and kw.get("update", "auto") == "auto" and _psd_kernel(spec):
            factor = weighted_gram_factor(spec, X, s, fit_intercept, cache_bytes)
            loop = _kernel_factor_loop if callback is not None else _kernel_compiled
            res = None if factor is None else loop(*factor, y, s, alpha, beta, callback=callback, **kw)
            if res is not None:
                a = res["w"]
                b = float(a.sum()) if fit_intercept else 0.0
                res["norm_sq"] = 1.0 - b * b  # a^T (K + fit_intercept) a = 1, so a^T K a = 1 - b^2
                return a, b, res
        lam, Q = weighted_gram_eig(spec, X, s, fit_intercept, cache_bytes)
        if kernel_prox == "paper":
            design = Design(Q, y / rs, col_scale=lam)

            def to_a(b):
                return rs * (Q @ b)

            kw_core = {"prox": 1.0 + lam, "step": Q.T @ (rs * y), "norm_weights": lam}
        else:
            keep = lam > lam.max() * m * np.finfo(np.float64).eps if lam.size else lam > 0
            Q = Q[:, keep]
            sq = np.sqrt(lam[keep])
            design = Design(Q, y / rs, col_scale=sq)

            def to_a(v):
                return rs * (Q @ (v / sq))

            kw_core = {}
        cb = None
        if callback is not None:
            def cb(info):
                info = dict(info)
                for key in ("w_prev", "w_half", "w"):
                    info["a" + key[1:]] = to_a(info[key])
                info["basis"] = Q  # a = sqrt(s) * (basis @ b) ("paper")
                callback(info)
        res = msvmav_iterate(design, s, alpha, beta, callback=cb, **kw_core, **kw)
        a = to_a(res["w"])
    b = float(a.sum()) if fit_intercept else 0.0
    return a, b, res
