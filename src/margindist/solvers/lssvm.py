"""Least-squares SVM (Suykens et al. 2002): the kernel KKT system and the linear primal.

Weighted formulation (sample weights s_i, s = 1 gives the textbook LS-SVM):

    min_{w, b, e} 1/2 ||w||^2 + C/2 sum_i s_i e_i^2   s.t.   y_i (<w, phi(x_i)> + b) = 1 - e_i.

Kernel dual (KKT system), Omega = Y G Y, D = diag(1 / (C s_i)):

    [[0, y^T], [y, Omega + D]] [b; a] = [0; 1],    f(x) = sum_i a_i y_i k(x_i, x) + b.

Solved by Cholesky of H = Omega + D (O(m^3), m x m memory) or by conjugate gradients (two
solves, H eta = y and H nu = 1; b = y^T nu / y^T eta, a = nu - b eta). Since H = Y (K + D) Y
with Y = diag(y) orthogonal, CG runs on (K + D) z = 1 and (K + D) z = y together (one product
with K per iteration for both; eta = Y z_1, nu = Y z_2), preconditioned by the Nyström
approximation of K on a few hundred landmark rows plus D, inverted by the Woodbury identity
(FALKON's preconditioner: Rudi, Carratino and Rosasco, NeurIPS 2017): about ten iterations
where plain CG takes hundreds, since K's spectrum decays fast. The landmarks are the pivots of
a greedy pivoted partial Cholesky of K (each the row of largest residual diagonal), and the
residual diagonal joins D (:func:`pivoted_preconditioner`).

Linear primal: since y_i^2 = 1, (1 - y_i f(x_i))^2 = (y_i - f(x_i))^2, so the problem is
weighted ridge regression on the +-1 targets with an unpenalised intercept:
(X_c^T S X_c + I / C) w = X_c^T S (y - ybar), b = ybar - xbar^T w (weighted centring).
Solved by Cholesky of the d x d matrix (O(m d^2 + d^3)) or by CG with products through X
(sparse X is never densified; centring is applied implicitly).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from scipy.linalg import blas
from scipy.sparse.linalg import LinearOperator, cg
from sklearn.exceptions import ConvergenceWarning

from ..kernels import DEFAULT_CACHE_BYTES, KernelRowCache, KernelSpec, kernel_decision, kernel_matrix, psd_inverse_sqrt
from ._gram import sym_dot, weighted_gram, x_dot, xt_dot
from ._pivoted import pivoted_cholesky
from ._repeats import repeated_rows, split_coefficients
from ._result import UnpackableResult


@dataclass(kw_only=True)
class LSSVMResult(UnpackableResult):
    """An LS-SVM solve: ``coef`` (w of the linear form, or dual_coef = a * y of the kernel form)
    and b; ``n_iter``: 1 for Cholesky, else iterations of conjugate gradients (each one
    product with the kernel matrix, for both right-hand sides);
    ``converged``: every CG solve reached its tolerance; ``norm_sq``: the squared RKHS norm
    coef^T K coef of the kernel form when the kernel matrix was at hand (else None). Unpacks as
    (coef, b, n_iter)."""

    _unpack = ("coef", "b", "n_iter")
    coef: np.ndarray
    b: float
    norm_sq: float | None = None


#: Landmarks of the kernel CG's Nyström preconditioner: about 4 sqrt(m), at least 50, at most this.
MAX_LANDMARKS = 500


def _cg(matvec, rhs, tol, max_iter):
    n = rhs.shape[0]
    op = LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    x, info = cg(op, rhs, rtol=tol, atol=0.0, maxiter=max_iter)
    if info > 0:
        _warn_cg(tol, info)
    return x, info


def _warn_cg(tol, n_iter):
    warnings.warn(
        f"Conjugate gradients did not reach rtol={tol} in {n_iter} iterations; raise max_iter, "
        "loosen tol, or use solver='cholesky'.",
        ConvergenceWarning,
        stacklevel=4,
    )


def n_landmarks(m) -> int:
    """Landmarks of :func:`nystroem_preconditioner`: about 4 sqrt(m), at least 50, at most
    :data:`MAX_LANDMARKS` (and m)."""
    return int(min(m, MAX_LANDMARKS, max(50, 4 * np.sqrt(m))))


def nystroem_preconditioner(spec: KernelSpec, X, d, seed=0):
    """R -> (B B^T + D)^{-1} R for the columns of R: B B^T = K_nM K_MM^{-1} K_Mn, the Nyström
    approximation of the kernel matrix K on M uniform landmark rows (:func:`n_landmarks`),
    D = diag(d), by the Woodbury identity
    (B B^T + D)^{-1} = D^{-1} - D^{-1} B (I + B^T D^{-1} B)^{-1} B^T D^{-1}. For a callable
    kernel, whose values come in blocks (:func:`pivoted_preconditioner` reads rows). O(m M^2)
    to make, O(m M) per use."""
    m = d.shape[0]
    idx = np.sort(np.random.default_rng(seed).choice(m, n_landmarks(m), replace=False))
    KnM = kernel_matrix(spec, X, X[idx])
    B = KnM @ psd_inverse_sqrt(KnM[idx])
    return _woodbury(B.T, d)


#: :func:`pivoted_preconditioner` stops pivoting once the largest residual diagonal is below
#: this fraction of the smallest d (the rest of K then matters little beside D).
PIVOT_STOP = 1e-3
#: ... or once the trace of the residual K - F^T F is at most this many times the smallest d.
PIVOT_TRACE = 150.0
#: ... or after :func:`n_pivots` pivots, at most this many.
MAX_PIVOTS = 1000


def n_pivots(m) -> tuple[int, int]:
    """(fewest, most) pivots of :func:`pivoted_preconditioner`: at least :func:`n_landmarks`
    (about 4 sqrt(m)), at most m / 15 where that is more (a CG iteration costs O(m^2), a pivot
    O(m rank): more pivots pay on more rows), and at most :data:`MAX_PIVOTS` (and m)."""
    low = n_landmarks(m)
    return low, int(min(m, max(low, min(MAX_PIVOTS, m // 15))))


def pivoted_preconditioner(rows: KernelRowCache, d, rank=None, *, dtype=np.float32, stop=PIVOT_STOP,
                           stop_trace=PIVOT_TRACE):
    """R -> (F^T F + diag(e) + D)^{-1} R for the columns of R: K ~ F^T F the greedy pivoted
    partial Cholesky of K (:func:`~._pivoted.pivoted_cholesky`: each landmark the row of
    largest residual diagonal; rows from ``rows``, a :class:`~margindist.kernels.KernelRowCache`
    over the training rows or :meth:`~margindist.kernels.KernelRowCache.from_gram`), e the
    diagonal of the residual K - F^T F, D = diag(d), inverted by the Woodbury identity. The
    factor is built in ``dtype`` (float32: a third of the time) and applied in float64.

    Pivots until its largest residual diagonal is at most ``stop`` times the smallest d, or
    ``rank`` pivots; without ``rank``, the bounds of :func:`n_pivots`, and after the fewest,
    until the residual's trace is at most ``stop_trace`` times the smallest d. The CG
    iterations follow that trace (magic, 14 000 rows, C = 1, 10 and 100: trace / d = 5000 ->
    32-39 iterations, 1500 -> 18-21, 500 -> 12-16, 150 -> about 10), while a pivot costs
    O(m rank): so more pivots where d is small (a large C): at 14 000 rows 933 pivots at
    C = 10 and 100 (473 before: 21 -> 10 and 65 -> 20 iterations), the fewest, 473, at C = 1
    (trace / d = 138 there)."""
    m = d.shape[0]
    low, high = n_pivots(m) if rank is None else (rank, rank)
    r_max = int(min(high, m))
    F = np.zeros((r_max, m), dtype=dtype)
    diag = np.ascontiguousarray(rows.diag, dtype=np.float64)
    dmin = float(d.min())
    r, e = pivoted_cholesky(rows.state, diag, np.ones(m, dtype=np.bool_), r_max, stop * dmin, F,
                            np.zeros(r_max, dtype=np.int64), stop_trace * dmin, low)
    return _woodbury(F[:r], d + e)


def _woodbury(Ft, d):
    """R -> (Ft^T Ft + D)^{-1} R (Ft: (M, m), D = diag(d)) by the Woodbury identity
    D^{-1} - D^{-1} Ft^T (I + Ft D^{-1} Ft^T)^{-1} Ft D^{-1}. The M x M matrix, O(m M^2), is
    formed in Ft's precision (float32 at 1000 x 14 000: 0.44 s against 0.59 s in float64),
    factorised and applied in float64."""
    Fs = Ft / np.sqrt(d).astype(Ft.dtype)
    # I + Ft D^-1 Ft^T from one triangle (BLAS syrk), on the Fortran-ordered transpose
    cap = blas.get_blas_funcs("syrk", (Fs,))(1.0, Fs.T, trans=1, lower=1).astype(np.float64)
    cap[np.diag_indices(Ft.shape[0])] += 1.0
    FD = Ft.astype(np.float64) / d
    cap = sla.cho_factor(cap, lower=True, overwrite_a=True, check_finite=False)

    def apply(R):
        # FD as the right operand of products with the few rows of R^T
        S = sla.cho_solve(cap, (R.T @ FD.T).T, check_finite=False)
        return R / d[:, None] - (S.T @ FD).T
    return apply


#: ``block_pcg(give_up=...)`` judges the rate of convergence from this many iterations on.
_GIVE_UP_AFTER = 5


def _predicted_iterations(R, B_norm, target, it):
    """Iterations to reach ``target`` for the slowest column at the geometric rate of its
    residual over the first ``it`` iterations (inf for a column that has not decreased)."""
    ratio = np.linalg.norm(R, axis=0) / B_norm
    live = ratio > target / B_norm
    if not live.any():
        return it
    with np.errstate(divide="ignore"):
        rate = np.log(ratio[live]) / it
        need = np.log(target[live] / B_norm[live]) / rate
    return float(np.max(np.where(rate < 0, need, np.inf)))


class IndefiniteSystem(ArithmeticError):
    """:func:`block_pcg` met a direction of non-positive curvature: H is not positive definite
    (a kernel that is not positive semi-definite, such as the sigmoid)."""

    def __init__(self, iteration):
        super().__init__(f"non-positive curvature at conjugate-gradient iteration {iteration}")
        self.iteration = iteration


def block_pcg(hmul, B, prec, tol, max_iter=None, give_up=None):
    """Solve H Z = B for the columns of B (H symmetric positive definite) by preconditioned
    conjugate gradients, one product ``hmul(P)`` with all columns per iteration; a column stops
    moving once ||r|| <= tol ||b||. ``give_up``: from iteration :data:`_GIVE_UP_AFTER` on, stop
    as soon as the residuals' geometric decrease so far predicts more iterations than this (a
    caller with a direct method to fall back on). Returns (Z, iterations, converged); raises
    :class:`IndefiniteSystem` at a direction p with p^T H p <= 0 (CG would wander on)."""
    Z, R = np.zeros_like(B), B.copy()
    B_norm = np.maximum(np.linalg.norm(B, axis=0), np.finfo(float).tiny)
    target = tol * B_norm
    P = prec(R)
    rz = np.einsum("ij,ij->j", R, P)
    limit = 10 * B.shape[0] if max_iter is None else max_iter
    for it in range(limit + 1):
        live = np.linalg.norm(R, axis=0) > target
        if not live.any():
            return Z, it, True
        if it == limit:
            break
        if give_up is not None and it >= _GIVE_UP_AFTER and _predicted_iterations(R, B_norm, target, it) > give_up:
            return Z, it, False
        HP = hmul(P)
        curvature = np.einsum("ij,ij->j", P, HP)
        if np.any(live & ~(curvature > 0.0)):
            raise IndefiniteSystem(it + 1)
        alpha = np.where(live, rz / np.where(live, curvature, 1.0), 0.0)
        Z += alpha * P
        R -= alpha * HP
        Pz = prec(R)
        rz_new = np.einsum("ij,ij->j", R, Pz)
        P = Pz + np.where(live, rz_new / np.where(live, rz, 1.0), 0.0) * P
        rz = rz_new
    return Z, limit, False


#: solver="auto": conjugate gradients are abandoned for the factorisation once they predict more
#: iterations than m / this, about the break-even of the two on one core with the Gram matrix's
#: products through one triangle (magic, one BLAS thread: 1500 / 2000 / 3000 / 5000 rows, a CG
#: iteration 0.8 / 1.4 / 3.5 / 7.7 ms after a set-up of 26 / 41 / 77 / 200 ms, the Cholesky solve
#: 46 / 111 / 288 / 1439 ms: even at 25 / 50 / 60 / 160 iterations; C = 1 takes 14-15, C = 100 about 80).
AUTO_CG_RATIO = 50


def _system(G, y, d, overwrite):
    """H = Y G Y + D, in G's own memory (``overwrite``) or in a copy of it."""
    H = G if overwrite else np.array(G, dtype=np.float64)
    H *= y[:, None]
    H *= y
    H[np.diag_indices(y.shape[0])] += d
    return H


def _cholesky_solve(G, y, d, remake=None):
    """(eta, nu) = Y (K + D)^{-1} [1, y] by one Cholesky factorisation (a symmetric indefinite
    one, with a warning, for a kernel that is not positive semi-definite).

    ``remake``: None, G is the caller's and stays as it is (a copy is factorised, two m x m
    arrays at the peak); else G is factorised in its own memory (one m x m array) and
    ``remake()`` computes it again should the indefinite solve be needed."""
    m = y.shape[0]
    rhs = np.column_stack([y, np.ones(m)])
    H = _system(G, y, d, overwrite=remake is not None)
    try:  # H.T: the same symmetric matrix in Fortran order, which LAPACK factorises in place
        factor = sla.cho_factor(H.T, lower=True, overwrite_a=True, check_finite=False)
        sol = sla.cho_solve(factor, rhs, check_finite=False)
    except np.linalg.LinAlgError:
        warnings.warn(
            "The kernel matrix is not positive semi-definite, so the LS-SVM system is "
            "indefinite; solved it with a symmetric indefinite factorisation instead of "
            "Cholesky. Check the kernel.",
            UserWarning,
            stacklevel=4,
        )
        H = _system(G, y, d, overwrite=False) if remake is None else _system(remake(), y, d, overwrite=True)
        sol = sla.solve(H.T, rhs, assume_a="sym", overwrite_a=True, check_finite=False)
    return sol[:, 0], sol[:, 1]


def _gram_product(spec, G):
    """v -> G v: through one triangle (:func:`~._gram.sym_dot`) for a kernel matrix that
    :func:`~margindist.kernels.kernel_matrix` computed (exactly symmetric), by ``G @ v`` for a
    precomputed one (the user's matrix, symmetric or not)."""
    if spec.kind == "precomputed":
        return G.__matmul__
    return functools.partial(sym_dot, G)


def _norm_sq(spec, G, y, d, eta, nu, b, c):
    """c^T K c: from the kernel matrix G when at hand, else read off the solved system. With
    Z = Y [eta, nu] the system says K Z = [1, y] - D Z (to the residual of the solve), and
    c = Z_2 - b Z_1."""
    if G is not None:
        return max(float(c @ _gram_product(spec, G)(c)), 0.0)
    Kc = (y - d * y * nu) - b * (1.0 - d * y * eta)
    return max(float(c @ Kc), 0.0)


def _cg_solve(spec, X, G, y, d, tol, max_iter, give_up=None, max_bytes=None):
    """(eta, nu) by block PCG on (K + D) [z_1, z_2] = [1, y] (eta = Y z_1, nu = Y z_2) with the
    Nyström preconditioner (:func:`pivoted_preconditioner`); products with G, or, when G is
    None, with the kernel rows of a :class:`~margindist.kernels.KernelRowCache` of
    ``max_bytes`` (as many rows as it holds: drawn at random, and the preconditioner's pivots,
    computed once; the others computed for each product). A callable kernel, which a row cache
    would evaluate whole: products in blocks of :func:`~margindist.kernels.kernel_decision`,
    uniform landmarks (:func:`nystroem_preconditioner`). Returns (eta, nu, iterations,
    converged)."""
    m = y.shape[0]
    rows = None  # the row source of the preconditioner (none for a callable kernel)
    if G is not None:
        kmul = _gram_product(spec, G)
        rows = KernelRowCache.from_gram(G)
    elif spec.kind == "callable":
        def kmul(V):
            return kernel_decision(spec, X, X, V)
    else:  # rows in a random order fill the cache (the pivots' rows replace some of them)
        rows = KernelRowCache(spec, X, max_bytes=max_bytes or DEFAULT_CACHE_BYTES, dtype=np.float64)
        rows.prefill(np.random.default_rng(0).permutation(m))
        kmul = rows.dot

    def hmul(V):
        return kmul(V) + d[:, None] * V

    prec = nystroem_preconditioner(spec, X, d) if rows is None else pivoted_preconditioner(rows, d)
    Z, n_iter, converged = block_pcg(hmul, np.column_stack([np.ones(m), y]), prec, tol, max_iter, give_up)
    return y * Z[:, 0], y * Z[:, 1], n_iter, converged


def lssvm_kernel(spec: KernelSpec, X, y, sample_weight, C, *, solver="cholesky", tol=1e-10,
                 max_iter=None, max_bytes=None, gram=None, log=None):
    """Solve the LS-SVM KKT system. Returns an :class:`LSSVMResult` (coef = dual_coef = a * y).

    ``solver``: "cholesky", "cg" or "auto" (conjugate gradients, abandoned for the Cholesky
    factorisation as soon as their rate predicts more than m / :data:`AUTO_CG_RATIO`
    iterations; the kernel matrix is formed). ``gram``: the kernel matrix K(X, X) when the
    caller has it (a grid search shares one between the values of C); it is read, never
    modified. Repeated (x, y) pairs are solved as one row with their summed weight (a weight k
    is k copies of a row here; :mod:`._repeats`), each copy's coefficient its weight's share."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sample_weight, dtype=np.float64)
    merged = repeated_rows(spec, X, y, s)
    if merged is not None:
        first, inverse, su = merged
        G = None if gram is None else np.ascontiguousarray(gram[np.ix_(first, first)])
        res = lssvm_kernel(spec, X[first], y[first], su, C, solver=solver, tol=tol, max_iter=max_iter,
                           max_bytes=max_bytes, gram=G, log=log)
        res.coef = split_coefficients(res.coef, s, su, inverse)
        return res
    d = 1.0 / (C * s)
    m = y.shape[0]
    gram_fits = max_bytes is None or 8 * m * m <= max_bytes
    if spec.kind == "precomputed":
        G = np.asarray(X, dtype=np.float64)
    elif gram is not None:
        G = gram
    elif solver != "cg" or gram_fits:
        G = kernel_matrix(spec, X)
    else:
        G = None
    # a kernel matrix made here may be factorised in its own memory (then it is gone)
    remake = None if G is None or G is gram or spec.kind == "precomputed" else functools.partial(kernel_matrix, spec, X)
    n_iter, converged = 1, True
    if solver == "cholesky":
        eta, nu = _cholesky_solve(G, y, d, remake)
        G = G if remake is None else None
    else:
        give_up = max(m / AUTO_CG_RATIO, 2 * _GIVE_UP_AFTER) if solver == "auto" else None
        try:
            eta, nu, n_iter, converged = _cg_solve(spec, X, G, y, d, tol, max_iter, give_up, max_bytes)
        except IndefiniteSystem as exc:
            if G is None:
                raise ValueError(
                    f"LSSVM: the system K + D is not positive definite (kernel={spec.kind!r}; conjugate "
                    f"gradients met negative curvature at iteration {exc.iteration}), so they cannot solve it. "
                    "Use a positive semi-definite kernel (rbf, or poly with coef0 >= 0), or solver='cholesky' "
                    "(an m x m factorisation)."
                ) from None
            eta, nu = _cholesky_solve(G, y, d, remake)  # warns, and solves the indefinite system
            G = G if remake is None else None
            n_iter, converged = exc.iteration + 1, True
        if solver == "auto" and not converged:
            if log is not None:
                log.info("LSSVM: CG predicted more than %d iterations after %d; Cholesky instead", give_up, n_iter)
            eta, nu = _cholesky_solve(G, y, d, remake)
            G = G if remake is None else None
            n_iter, converged = n_iter + 1, True
        elif not converged:
            _warn_cg(tol, n_iter)
    b = float(y @ nu / (y @ eta))
    c = (nu - b * eta) * y
    norm_sq = _norm_sq(spec, G, y, d, eta, nu, b, c) if G is not None or converged else None
    return LSSVMResult(coef=c, b=b, n_iter=n_iter, converged=bool(converged), norm_sq=norm_sq)


def _centred_ridge_solve(X, s, xbar, rhs, C):
    """Solve (X_c^T S X_c + I / C) w = rhs by Cholesky (the centred Gram matrix from
    :func:`._gram.weighted_gram`: no float64 copy of X). Should the factorisation fail, a
    symmetric solver takes over.
    """
    A = weighted_gram(X, s, center=xbar)
    A[np.diag_indices(X.shape[1])] += 1.0 / C
    try:
        return sla.cho_solve(sla.cho_factor(A, lower=True, check_finite=False), rhs, check_finite=False)
    except np.linalg.LinAlgError:
        return sla.solve(A, rhs, assume_a="sym", check_finite=False)


def lssvm_linear(X, y, sample_weight, C, *, solver="cholesky", tol=1e-10, max_iter=None):
    """Weighted ridge form of the linear LS-SVM. Returns an :class:`LSSVMResult` (coef = w)."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sample_weight, dtype=np.float64)
    S = s.sum()
    xbar = xt_dot(X, s) / S
    ybar = float(s @ y) / S
    r = s * (y - ybar)
    rhs = xt_dot(X, r) - xbar * r.sum()  # X_c^T S (y - ybar)
    if solver == "cholesky":
        w = _centred_ridge_solve(X, s, xbar, rhs, C)
        n_iter, info = 1, 0
    else:
        counter = {"n": 0}

        def matvec(v):
            counter["n"] += 1
            v = np.asarray(v).ravel()
            t = s * (x_dot(X, v) - xbar @ v)
            return xt_dot(X, t) - xbar * t.sum() + v / C

        w, info = _cg(matvec, rhs, tol, max_iter)
        n_iter = counter["n"]
    b = ybar - float(xbar @ w)
    return LSSVMResult(coef=w, b=b, n_iter=n_iter, converged=info == 0)
