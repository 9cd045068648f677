"""Compiled MSVMAv loop for dense X with few features.

At d up to a few dozen features one iteration is a few microseconds of arithmetic, and the
NumPy implementation in :mod:`margindist.solvers.msvmav` spends most of its time in call
overhead. This loop does the same iteration (the "batched" scheme: the Gram sum over the active
set kept incrementally, a Cholesky refactorisation of the d x d system every iteration) in one
compiled function. It computes exactly what :func:`~margindist.solvers.msvmav.msvmav_iterate`
computes with ``update="batched"`` (tested to agree to round-off).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["dense_loop"]


@njit(cache=True)
def _margins(XF, y, w, intercept, out):
    """out = y * (X w (+ w_bias)), X in column-major order (the inner loop runs down a column)."""
    n, p = XF.shape
    b = w[p] if intercept else 0.0
    for i in range(n):
        out[i] = b
    for j in range(p):
        wj = w[j]
        if wj == 0.0:
            continue
        for i in range(n):
            out[i] += XF[i, j] * wj
    for i in range(n):
        out[i] *= y[i]


@njit(cache=True)
def _add_row(X, y, i, wt, intercept, G, g):
    """G += wt z z^T (upper triangle), g += wt z for z = y_i [x_i, 1]."""
    p = X.shape[1]
    d = G.shape[0]
    yi = y[i]
    for a in range(p):
        xa = X[i, a]
        if xa == 0.0:
            continue
        g[a] += wt * yi * xa
        f = wt * xa
        for b in range(a, p):
            G[a, b] += f * X[i, b]
        if intercept:
            G[a, d - 1] += f
    if intercept:
        g[d - 1] += wt * yi
        G[d - 1, d - 1] += wt


@njit(cache=True)
def _solve_spd(H, rhs, L, x):
    """x = H^{-1} rhs by Cholesky (H symmetric positive definite, upper triangle given)."""
    d = H.shape[0]
    for j in range(d):
        acc = H[j, j]
        for k in range(j):
            acc -= L[j, k] * L[j, k]
        if acc <= 0.0:
            return False
        ljj = np.sqrt(acc)
        L[j, j] = ljj
        for i in range(j + 1, d):
            acc = H[j, i]  # H[i, j] by symmetry (upper triangle stored)
            for k in range(j):
                acc -= L[i, k] * L[j, k]
            L[i, j] = acc / ljj
    for i in range(d):  # L t = rhs
        acc = rhs[i]
        for k in range(i):
            acc -= L[i, k] * x[k]
        x[i] = acc / L[i, i]
    for i in range(d - 1, -1, -1):  # L^T x = t
        acc = x[i]
        for k in range(i + 1, d):
            acc -= L[k, i] * x[k]
        x[i] = acc / L[i, i]
    return True


@njit(cache=True)
def dense_loop(X, y, s, intercept, u, w0, P, am_step, N, beta, max_iter, tol):
    """The MSVMAv iteration on dense X (rows z_i = y_i [x_i, 1?]); X column-major (Fortran).

    Returns (w_last, w_best, n_iter, hist (n_iter + 1, 6): theta, SV, SV/theta^2, |A|,
    changes, step ||w_k - w_{k-1}||; best_k, converged, status) with status 0 ok, 1 Cholesky failure, 2 non-finite w.
    """
    n = X.shape[0]
    d = u.shape[0]
    S = 0.0
    for i in range(n):
        S += s[i]
    nb = S * beta
    hist = np.zeros((max_iter + 1, 6))
    m = np.empty(n)
    A = np.zeros(n, dtype=np.bool_)
    G = np.zeros((d, d))
    g = np.zeros(d)
    H = np.zeros((d, d))
    L = np.zeros((d, d))
    rhs = np.empty(d)
    w_half = np.empty(d)
    w = w0.copy()
    w_new = np.empty(d)
    best_w = w0.copy()
    best_k = 0

    changed = np.empty(n, dtype=np.int64)  # indices whose membership changed
    # iterate 0
    _margins(X, y, w, intercept, m)
    theta = 0.0
    for j in range(d):
        theta += u[j] * w[j]
    theta /= S
    sv = 0.0
    n_act = 0
    c = 0
    for i in range(n):
        A[i] = m[i] < theta
        if A[i]:
            n_act += 1
            sh = theta - m[i]
            sv += s[i] * sh * sh
            changed[c] = i
            c += 1
    sv /= S
    hist[0, 0] = theta
    hist[0, 1] = sv
    hist[0, 2] = sv / theta**2 if theta > 0 else np.inf
    hist[0, 3] = n_act
    hist[0, 4] = n_act
    hist[0, 5] = np.nan

    converged = False
    status = 0
    k = 0
    for k in range(1, max_iter + 1):
        # Gram sum over A_k: incremental, or from scratch when more indices changed than A holds
        if c > n_act:
            G[:, :] = 0.0
            g[:] = 0.0
            for i in range(n):
                if A[i]:
                    _add_row(X, y, i, s[i], intercept, G, g)
        else:
            for t in range(c):
                i = changed[t]
                _add_row(X, y, i, s[i] if A[i] else -s[i], intercept, G, g)
        scale = theta / nb
        for a in range(d):
            rhs[a] = scale * g[a] + P[a] * w[a]
            for b in range(a, d):
                H[a, b] = G[a, b] / nb
            H[a, a] += P[a]
        if not _solve_spd(H, rhs, L, w_half):
            status = 1
            break
        nrm = 0.0
        mean = 0.0
        for j in range(d):
            w_new[j] = w_half[j] + am_step[j]
            nrm += N[j] * w_new[j] * w_new[j]
            mean += u[j] * w_new[j]
        nrm = np.sqrt(nrm)
        if not np.isfinite(nrm) or nrm <= 0.0:
            status = 2
            break
        sgn = 1.0 / nrm if mean >= 0 else -1.0 / nrm
        dw = 0.0
        for j in range(d):
            w_new[j] *= sgn
            dw += N[j] * (w_new[j] - w[j]) ** 2
            w[j] = w_new[j]
        dw = np.sqrt(dw)

        _margins(X, y, w, intercept, m)
        theta = 0.0
        for j in range(d):
            theta += u[j] * w[j]
        theta /= S
        sv = 0.0
        n_act = 0
        c = 0
        for i in range(n):
            a_i = m[i] < theta
            if a_i:
                n_act += 1
                sh = theta - m[i]
                sv += s[i] * sh * sh
            if a_i != A[i]:
                changed[c] = i
                c += 1
                A[i] = a_i
        sv /= S
        hist[k, 0] = theta
        hist[k, 1] = sv
        hist[k, 2] = sv / theta**2 if theta > 0 else np.inf
        hist[k, 3] = n_act
        hist[k, 4] = c
        hist[k, 5] = dw
        if hist[k, 2] < hist[best_k, 2]:
            best_k = k
            best_w[:] = w
        if tol > 0 and c == 0 and dw <= tol:
            converged = True
            break
    return w, best_w, k, hist[: k + 1].copy(), best_k, converged, status
