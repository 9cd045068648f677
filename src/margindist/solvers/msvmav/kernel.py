"""Kernel MSVMAv (paper Section 4.2 as corrected): the factorised route in the coefficients
(capacitance scheme, compiled) and the eigenbasis route through :func:`.linear.msvmav_iterate`."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from scipy.linalg import lapack

from ...kernels import KernelSpec, builtin_psd, kernel_matrix
from .._gram import lower_to_full
from .._repeats import repeated_rows, split_coefficients
from .._threads import blas_single_thread
from ._anderson import STALL
from ._common import CHECK_EVERY, REFRESH_TOL, diverged
from ._design import Design
from ._history import MSVMAvResult, make_result
from ._loops import kernel_loop
from .linear import accelerated, msvmav_iterate

__all__ = ["msvmav_kernel", "weighted_gram_eig", "weighted_gram_factor"]


def _kernel_gram(spec: KernelSpec, X, fit_intercept):
    if spec.kind == "precomputed":
        K = np.array(X, dtype=np.float64, copy=True)
        K = 0.5 * (K + K.T)
    else:
        K = kernel_matrix(spec, X)
    if fit_intercept:
        K += 1.0
    return K


def _cached(cache, tag, spec, X, s, fit_intercept, nbytes, compute):
    """compute() (a tuple of read-only arrays, or None), through ``cache`` (a
    :class:`~._cache.FactorCache` or None) unless the kernel is a callable."""
    if cache is None or spec.kind == "callable":
        value = compute()
        for v in value or ():
            v.flags.writeable = False
        return value
    key = (tag, spec.kind, spec.gamma, spec.degree, spec.coef0, bool(fit_intercept))
    return cache.get(key, X, s, nbytes, compute)


def weighted_gram_eig(spec, X, s, fit_intercept, cache=None):
    """Eigendecomposition (lam ascending, Q) of D^{1/2} (K (+1)) D^{1/2}, D = diag(s); through
    ``cache`` (a :class:`~._cache.FactorCache`) when one is given."""

    def compute():
        rs = np.sqrt(s)
        K = _kernel_gram(spec, X, fit_intercept)
        K *= rs[:, None]
        K *= rs[None, :]
        lam, Q = sla.eigh(K, overwrite_a=True, check_finite=False)
        return np.maximum(lam, 0.0), Q

    m = s.shape[0]
    return _cached(cache, "eig", spec, X, s, fit_intercept, 8 * (m * m + m), compute)


def weighted_gram_factor(spec, X, s, fit_intercept, cache=None):
    """(K, R^{-1}) with K the Gram matrix (+1) and R = D^{-1} + K, D = diag(s), both m x m,
    symmetric and C-ordered (the loop reads rows of both, and products one triangle). Cached
    like :func:`weighted_gram_eig`. One Cholesky factorisation and inversion, O(m^3) but
    several times cheaper than an eigendecomposition, and two m x m arrays at the peak. None
    when R is not positive definite (an indefinite kernel)."""

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
        Rinv = inv.T  # the upper triangle of the Fortran array is the lower of its C view
        lower_to_full(Rinv)
        return K, Rinv

    m = s.shape[0]
    return _cached(cache, "factor", spec, X, s, fit_intercept, 16 * m * m, compute)


def _kernel_compiled(K, Rinv, y, s, alpha, beta, *, max_iter=100, tol=1e-6, refresh_every=None,
                     return_best=False, solver="fixed-point", stall=STALL, mult=None, **_):
    """The kernel iteration in the coefficients ("paper" metric R = D^{-1} + K, no
    eigendecomposition) as one compiled loop (:func:`._loops.kernel_loop`); the result's ``w``
    are the coefficients a, or None for a degenerate start (s y with zero RKHS norm)."""
    accel = accelerated(solver)
    c, best_c, n_iter, hist, best_k, converged, status, schemes, n_refresh = kernel_loop(
        K, Rinv, y, s, float(alpha), float(beta), int(max_iter), float(tol),
        int(refresh_every or 0), CHECK_EVERY, REFRESH_TOL, accel, int(stall),
        np.ones(y.shape[0], dtype=np.int64) if mult is None else mult)
    if status == 3:
        return None
    if status == 2:
        raise diverged(n_iter, "the coefficients are")
    names = ["init"] + ["capacitance-refactor" if f else "capacitance" for f in schemes[1:]]
    res = make_result(hist, names, c, best_c, best_k, n_iter, converged, return_best,
                      family="capacitance", n_refresh=int(n_refresh))
    res.w = y * res.w
    return res


def _factor_route(spec, X, y, s, alpha, beta, fit_intercept, cache, callback, factor_loop, kw):
    """The "paper" metric with a positive semi-definite kernel: one Cholesky inverse of
    R = diag(1/s) + K and the iteration in the coefficients. None when R is not positive
    definite or the start is degenerate (the eigenbasis route then runs)."""
    if callback is not None and factor_loop is None:
        raise ValueError("MSVMAv: a callback on the factorised kernel route needs a factor_loop that "
                         "calls it (the compiled loop does not); or choose update='batched'.")
    merged = repeated_rows(spec, X, y, s) if factor_loop is None else None
    if merged is not None:  # the same iterates on the distinct rows (duplicates: one row, their weights summed)
        first, inverse, su = merged
        factor = weighted_gram_factor(spec, X[first], su, fit_intercept, cache)
        if factor is None:
            return None
        res = _kernel_compiled(*factor, y[first], su, alpha, beta, mult=np.bincount(inverse), **kw)
        if res is not None:
            res.w = split_coefficients(res.w, s, su, inverse)
    else:
        factor = weighted_gram_factor(spec, X, s, fit_intercept, cache)
        if factor is None:
            return None
        loop = _kernel_compiled if factor_loop is None else factor_loop
        res = loop(*factor, y, s, alpha, beta, callback=callback, **kw)
    if res is not None:
        res.b = float(res.w.sum()) if fit_intercept else 0.0
        res.norm_sq = 1.0 - res.b * res.b  # a^T (K + fit_intercept) a = 1, so a^T K a = 1 - b^2
    return res


def _eig_route(spec, X, y, s, alpha, beta, fit_intercept, kernel_prox, cache, callback, kw):
    """The iteration in the eigenbasis of Kt = D^{1/2} K D^{1/2} through :func:`msvmav_iterate`.

    Negative eigenvalues (a kernel that is not positive semi-definite) are clipped to 0, so the
    iteration runs with the kernel's positive part K+, and the returned coefficients lie in its
    span (for "paper": b's components on the clipped directions, which the iteration never sees,
    are dropped). The model, evaluated with the kernel itself, then has the clipped model's
    values on the training rows: K a = K+ a for a in that span. Keeping those components made
    the two disagree (sigmoid kernel, 1000 standardised rows: test accuracy .38 against .79 with
    them dropped; SVC .79). For a positive semi-definite kernel they lie in the null space of K
    (up to rounding), so nothing changes."""
    m = y.shape[0]
    rs = np.sqrt(s)
    lam, Q = weighted_gram_eig(spec, X, s, fit_intercept, cache)
    if kernel_prox == "paper":
        design = Design(Q, y / rs, col_scale=lam)
        seen = lam > 0  # the iteration sees b only through lam * b: the clipped directions are dropped

        def to_a(b):
            return rs * (Q @ np.where(seen, b, 0.0))

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
    res.w = to_a(res.w)
    res.b = float(res.w.sum()) if fit_intercept else 0.0
    return res


def msvmav_kernel(spec: KernelSpec, X, y, sample_weight, alpha, beta, *, fit_intercept=False,
                  kernel_prox="paper", callback=None, cache=None, factor_loop=None, **kw) -> MSVMAvResult:
    """Kernel MSVMAv (paper Section 4.2 as corrected); the result's ``w`` are the dual
    coefficients a (m,) and ``b`` the intercept.

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
    (:func:`weighted_gram_factor`) and the iteration in the coefficients, where the
    semi-variance step is a solve with the |A| x |A| capacitance matrix of the Woodbury
    identity, kept as an explicit inverse updated as indices enter and leave A
    (:func:`._loops.kernel_loop`).

    Repeated rows (the same x and label; data with few distinct feature values, such as titanic's
    2201 rows of 24 distinct pairs) are merged into one row with their summed weight before the
    factorisation (:func:`~margindist.solvers._repeats.repeated_rows`): an integer weight equals copies of a row on this path,
    so the iterates are the same (the history counts samples), and each copy gets its share of
    the merged coefficient in proportion to its weight. The O(m^3) set-up and the O(m^2)
    iterations then run on the distinct rows (not with a ``factor_loop``).

    ``cache``: a :class:`~._cache.FactorCache` that keeps the factorisation for later calls on
    the same data, kernel and weights (None: computed for this call only). ``factor_loop``:
    replaces the compiled loop of the factorised route, with the signature of
    :func:`_kernel_compiled` plus ``callback`` (a testing aid; a callback on that route needs
    one). ``kw`` go to :func:`msvmav_iterate`; ``solver="auto"`` is the paper's iteration here
    (:func:`~margindist.solvers.msvmav.linear.solve_auto` is the linear path's).
    """
    if kw.get("solver") == "auto":
        kw = {**kw, "solver": "fixed-point"}
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sample_weight, dtype=np.float64)
    with blas_single_thread(y.shape[0]):
        # the factor route needs a positive semi-definite Gram matrix; the eigenbasis clips the others
        if kernel_prox == "paper" and kw.get("update", "auto") == "auto" and builtin_psd(spec):
            res = _factor_route(spec, X, y, s, alpha, beta, fit_intercept, cache, callback, factor_loop, kw)
            if res is not None:
                return res
        return _eig_route(spec, X, y, s, alpha, beta, fit_intercept, kernel_prox, cache, callback, kw)
