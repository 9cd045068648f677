"""The numba-compiled MSVMAv loops.

:func:`dense_loop`: dense X with few features. At d up to a few dozen features one iteration is
a few microseconds of arithmetic, and the NumPy loop of :func:`.linear.msvmav_iterate` spends
most of its time in call overhead. This loop does the same iteration (the "batched" scheme: the
Gram sum over the active set kept incrementally, a Cholesky refactorisation of the d x d system
every iteration) in one compiled function; it computes exactly what ``msvmav_iterate`` computes
with ``update="batched"`` (tested to agree to round-off).

:func:`kernel_loop`: the kernel iteration in the coefficients (the factorised route of
:func:`.kernel.msvmav_kernel`), with the capacitance inverse over A held in a flat buffer.
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding as _llvm
from numba import njit, types
from numba.extending import get_cython_function_address

from ._anderson import anderson_state, anderson_step
from ._history import creeps_at

__all__ = ["dense_loop", "kernel_loop", "unit"]


_FM = {"reassoc", "contract"}
#: The compiled dense loop recomputes all margins (instead of those near theta) when the last
#: iteration had to recompute more than this fraction of the rows.
SCREEN_FULL_FRACTION = 1.0 / 16.0


@njit(cache=True, fastmath=_FM, inline="always")
def _row_margin(X, y, w, b, i):
    acc = 0.0
    for j in range(X.shape[1]):
        acc += X[i, j] * w[j]
    return y[i] * (acc + b)


@njit(cache=True, fastmath=_FM)
def _margins(X, y, w, intercept, out):
    """out = y * (X w (+ w_bias)), X row-major: one pass over the rows, each a vectorised dot
    (summed in any order; a column-by-column pass over a Fortran copy was twice as slow, it
    reads and writes ``out`` once per feature)."""
    b = w[X.shape[1]] if intercept else 0.0
    for i in range(out.shape[0]):
        out[i] = _row_margin(X, y, w, b, i)


@njit(cache=True, fastmath=_FM)
def _margins2(X, y, w, v, intercept, out, zeta):
    """out = Z w and zeta = Z v in one pass over the rows (z_i = y_i [x_i, 1?])."""
    p = X.shape[1]
    bw = w[p] if intercept else 0.0
    bv = v[p] if intercept else 0.0
    for i in range(out.shape[0]):
        aw = 0.0
        av = 0.0
        for j in range(p):
            aw += X[i, j] * w[j]
            av += X[i, j] * v[j]
        out[i] = y[i] * (aw + bw)
        zeta[i] = y[i] * (av + bv)


@njit(cache=True)
def _row_norms(X, intercept):
    """||z_i|| = ||[x_i, 1?]|| (|y_i| = 1)."""
    out = np.empty(X.shape[0])
    for i in range(X.shape[0]):
        acc = 1.0 if intercept else 0.0
        for j in range(X.shape[1]):
            acc += X[i, j] * X[i, j]
        out[i] = np.sqrt(acc)
    return out


@njit(cache=True, fastmath=_FM)
def _screen(X, y, w, intercept, theta, m_ref, zeta, alpha, rnorm, delta, s, A, changed):
    """A <- {i : m_i(w) < theta} from the margins m_ref at a reference point w_ref and the
    scores zeta = Z v of a unit direction v, with w - w_ref = alpha v + r, ||r|| = delta:
    |m_i(w) - m_ref_i - alpha zeta_i| <= ||z_i|| delta, so a row whose estimate is farther from
    theta than that keeps its side; the others (and any row found to change side) get their
    margin recomputed. Fills changed[:c]; returns (c, |A|, rows recomputed, sum over the
    changed rows of +-s_i (theta - m_i)^2, + entering, - leaving)."""
    b = w[X.shape[1]] if intercept else 0.0
    c = 0
    n_act = 0
    n_re = 0
    dsv = 0.0
    for i in range(m_ref.shape[0]):
        gap = m_ref[i] + alpha * zeta[i] - theta
        # + the round-off of m_ref, zeta and the sum
        bound = rnorm[i] * (delta * (1.0 + 1e-9) + 1e-13 * (1.0 + abs(alpha)))
        known = gap > bound or gap < -bound
        a_i = gap < 0.0
        mi = 0.0
        if not known:
            mi = _row_margin(X, y, w, b, i)
            n_re += 1
            a_i = mi < theta
        if a_i:
            n_act += 1
        if a_i != A[i]:
            if known:
                mi = _row_margin(X, y, w, b, i)
            sh = theta - mi
            dsv += s[i] * sh * sh if a_i else -s[i] * sh * sh
            changed[c] = i
            c += 1
            A[i] = a_i
    return c, n_act, n_re, dsv


@njit(cache=True)
def _quad_sv(G, g, SA, w, theta):
    """sum_A s_i (theta - <w, z_i>)^2 = theta^2 S_A - 2 theta <g, w> + w^T G w (G: upper
    triangle of sum_A s_i z_i z_i^T, g = sum_A s_i z_i, S_A = sum_A s_i); also returns the
    sum of the magnitudes of the three terms (to detect cancellation)."""
    d = w.shape[0]
    gw = 0.0
    wGw = 0.0
    for a in range(d):
        gw += g[a] * w[a]
        acc = 0.5 * G[a, a] * w[a]
        for b in range(a + 1, d):
            acc += G[a, b] * w[b]
        wGw += 2.0 * w[a] * acc
    t1 = theta * theta * SA
    return t1 - 2.0 * theta * gw + wGw, t1 + abs(2.0 * theta * gw) + abs(wGw)


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


@njit(cache=True, fastmath=_FM)
def _solve_spd(H, rhs, L, x):
    """x = H^{-1} rhs by Cholesky (H symmetric positive definite, upper triangle given); the
    inner products summed in any order (vectorised: twice as fast at d = 60)."""
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
def _advance(m, theta, s, S, A, changed, hist, k, step, w, best_w, best_k, tol, mult):
    """Iterate k (w, margins m, average margin theta): A <- {i : m_i < theta} in place, the
    indices whose membership changed into changed[:c], history row k (theta, SV, SV/theta^2,
    |A|, c, step; |A| and c count each index ``mult[i]`` times: the samples that a distinct row
    stands for), the best iterate by SV/theta^2 into best_w. Returns (c, the number of indices
    in A, best_k, tol met)."""
    sv = 0.0
    n_act = 0
    n_samples = 0
    c = 0
    c_samples = 0
    for i in range(m.shape[0]):
        a_i = m[i] < theta
        if a_i:
            n_act += 1
            n_samples += mult[i]
            sh = theta - m[i]
            sv += s[i] * sh * sh
        if a_i != A[i]:
            changed[c] = i
            c += 1
            c_samples += mult[i]
            A[i] = a_i
    best_k, conv = _record(hist, k, theta, sv / S, n_samples, c_samples, step, w, best_w, best_k, tol)
    return c, n_act, best_k, conv


@njit(cache=True, inline="always")
def _record(hist, k, theta, sv, n_act, c, step, w, best_w, best_k, tol):
    """History row k (theta, SV, SV/theta^2, |A|, c, step) and the best iterate so far;
    returns (best_k, tol met)."""
    hist[k, 0] = theta
    hist[k, 1] = sv
    hist[k, 2] = sv / theta**2 if theta > 0 else np.inf
    hist[k, 3] = n_act
    hist[k, 4] = c
    hist[k, 5] = step
    if k == 0 or hist[k, 2] < hist[best_k, 2]:
        best_k = k
        best_w[:] = w
    return best_k, tol > 0 and c == 0 and step <= tol


@njit(cache=True)
def unit(v, N, u):
    """v / ||v||_N with the sign that keeps the average margin positive (Section 5), in place;
    False when the norm is not a positive finite number."""
    nrm = 0.0
    mean = 0.0
    for j in range(v.shape[0]):
        nrm += N[j] * v[j] * v[j]
        mean += u[j] * v[j]
    nrm = np.sqrt(nrm)
    if not np.isfinite(nrm) or nrm <= 0.0:
        return False
    sgn = 1.0 / nrm if mean >= 0 else -1.0 / nrm
    for j in range(v.shape[0]):
        v[j] *= sgn
    return True


@njit(cache=True)
def dense_loop(X, y, s, intercept, u, w0, P, am_step, N, beta, max_iter, tol, accel, stall, judge_at=0):
    """The MSVMAv iteration on dense X (rows z_i = y_i [x_i, 1?]); X row-major (C order); with
    ``accel`` the next point is the Anderson combination of the last iterates (:mod:`._anderson`),
    and the run stops when the best iterate is ``stall`` iterations old (0: never). At iteration
    ``judge_at`` (0: never) it also stops if it creeps (:func:`._history.creeps_at`).

    Margins: a full pass over X gives exact reference margins m_ref at w_ref; at the next
    iterates only the rows within ||z_i|| ||w - w_ref|| of theta are recomputed
    (:func:`_screen`); the others cannot have changed side. The semi-variance of the new active
    set is then the quadratic form of the Gram sum (:func:`_quad_sv`) plus the changed rows. A
    full pass runs again once more than :data:`SCREEN_FULL_FRACTION` of the rows had to be
    recomputed, or when the quadratic form loses too many digits. The active sets, hence the
    iterates, are those of the full pass every iteration.

    Returns (w_last, w_best, n_iter, hist (n_iter + 1, 6): theta, SV, SV/theta^2, |A|,
    changes, step ||w_k - w_{k-1}||; best_k, converged, status, full passes) with status 0 ok,
    1 Cholesky failure, 2 non-finite w.
    """
    n = X.shape[0]
    d = u.shape[0]
    S = 0.0
    for i in range(n):
        S += s[i]
    nb = S * beta
    hist = np.zeros((max_iter + 1, 6))
    m = np.empty(n)  # reference margins, at w_ref
    zeta = np.zeros(n)  # Z v, v the unit direction of the step before w_ref
    v = np.zeros(d)
    rnorm = _row_norms(X, intercept)
    A = np.zeros(n, dtype=np.bool_)
    G = np.zeros((d, d))
    g = np.zeros(d)
    SA = 0.0
    H = np.zeros((d, d))
    L = np.zeros((d, d))
    rhs = np.empty(d)
    w_half = np.empty(d)
    w = w0.copy()
    w_ref = w0.copy()
    w_new = np.empty(d)
    best_w = w0.copy()

    changed = np.empty(n, dtype=np.int64)  # indices whose membership changed
    aa_dX, aa_dG, aa_last, aa_info, aa_gmin = anderson_state(d)
    # iterate 0
    _margins(X, y, w, intercept, m)
    n_full = 1
    theta = np.dot(u, w) / S
    ones = np.ones(n, dtype=np.int64)
    c, n_act, best_k, _ = _advance(m, theta, s, S, A, changed, hist, 0, np.nan, w, best_w, 0, 0.0, ones)  # c = |A|
    full_next = False

    converged = False
    status = 0
    k = 0
    for k in range(1, max_iter + 1):
        # Gram sum over A_k: incremental, or from scratch when more indices changed than A holds
        if c > n_act:
            G[:, :] = 0.0
            g[:] = 0.0
            SA = 0.0
            for i in range(n):
                if A[i]:
                    _add_row(X, y, i, s[i], intercept, G, g)
                    SA += s[i]
        else:
            for t in range(c):
                i = changed[t]
                _add_row(X, y, i, s[i] if A[i] else -s[i], intercept, G, g)
                SA += s[i] if A[i] else -s[i]
        scale = theta / nb
        for a in range(d):
            rhs[a] = scale * g[a] + P[a] * w[a]
            for b in range(a, d):
                H[a, b] = G[a, b] / nb
            H[a, a] += P[a]
        if not _solve_spd(H, rhs, L, w_half):
            status = 1
            break
        for j in range(d):
            w_new[j] = w_half[j] + am_step[j]
        if not unit(w_new, N, u):
            status = 2
            break
        dw = 0.0  # the residual ||T(w) - w||
        for j in range(d):
            w_half[j] = w_new[j] - w[j]
            dw += N[j] * w_half[j] ** 2
        dw = np.sqrt(dw)
        if accel:
            anderson_step(w, w_half, aa_dX, aa_dG, aa_last, aa_info, aa_gmin, w_new)
            if not unit(w_new, N, u):
                status = 2
                break
        for j in range(d):
            w_half[j] = w_new[j] - w[j]  # the step, kept for the next full pass
            w[j] = w_new[j]
        theta = np.dot(u, w) / S
        alpha = 0.0  # w - w_ref = alpha v + r
        for j in range(d):
            alpha += (w[j] - w_ref[j]) * v[j]
        delta = 0.0
        for j in range(d):
            delta += (w[j] - w_ref[j] - alpha * v[j]) ** 2

        if not full_next:
            # G, g, SA still describe A_k: SV of A_{k+1} = their quadratic form + changed rows
            q, size = _quad_sv(G, g, SA, w, theta)
            c, n_new, n_re, dsv = _screen(X, y, w, intercept, theta, m, zeta, alpha, rnorm, np.sqrt(delta), s, A,
                                          changed)
            sv = q + dsv
            full_next = n_re > SCREEN_FULL_FRACTION * n
            if sv >= 1e-6 * size:
                best_k, converged = _record(hist, k, theta, sv / S, n_new, c, dw, w, best_w, best_k, tol)
                n_act = n_new
                if converged or accel and 0 < stall <= k - best_k or k == judge_at and creeps_at(hist, k):
                    break
                continue
            for t in range(c):  # too much cancellation: undo and take the exact route
                A[changed[t]] = not A[changed[t]]
        nv = np.sqrt(np.dot(w_half, w_half))  # v: the direction of this step (steps turn slowly)
        for j in range(d):
            v[j] = w_half[j] / nv if nv > 0 else 0.0
        _margins2(X, y, w, v, intercept, m, zeta)
        n_full += 1
        w_ref[:] = w
        full_next = False
        c, n_act, best_k, converged = _advance(m, theta, s, S, A, changed, hist, k, dw, w, best_w, best_k, tol, ones)
        if converged or accel and 0 < stall <= k - best_k or k == judge_at and creeps_at(hist, k):
            break
    return w, best_w, k, hist[: k + 1].copy(), best_k, converged, status, n_full


# --------------------------------------------------------------------------------------
# the kernel iteration in the coefficients (capacitance scheme)
# --------------------------------------------------------------------------------------

# BLAS dsymv (SciPy's) for the m x m products: it reads one triangle, half the memory traffic
# of the gemv behind np.dot, and these products are memory-bound. Bound by symbol name, so
# the compiled functions stay cacheable.
# LAPACK dpotrf / dpotri for the capacitance refactorisation (half the flops of an LU inverse).
_U8P, _I32P, _F64P = types.CPointer(types.uint8), types.CPointer(types.int32), types.CPointer(types.float64)
_llvm.add_symbol("margindist_msvmav_dsymv", get_cython_function_address("scipy.linalg.cython_blas", "dsymv"))
_dsymv = types.ExternalFunction("margindist_msvmav_dsymv", types.void(
    _U8P, _I32P, _F64P, _F64P, _I32P, _F64P, _I32P, _F64P, _F64P, _I32P))
_llvm.add_symbol("margindist_msvmav_dpotrf", get_cython_function_address("scipy.linalg.cython_lapack", "dpotrf"))
_llvm.add_symbol("margindist_msvmav_dpotri", get_cython_function_address("scipy.linalg.cython_lapack", "dpotri"))
_dpotrf = types.ExternalFunction("margindist_msvmav_dpotrf", types.void(_U8P, _I32P, _F64P, _I32P, _I32P))
_dpotri = types.ExternalFunction("margindist_msvmav_dpotri", types.void(_U8P, _I32P, _F64P, _I32P, _I32P))


@njit(cache=True)
def _spd_inverse(C):
    """Inverse of a symmetric positive definite C (C-ordered, overwritten) by Cholesky (LAPACK
    potrf + potri on one triangle, mirrored); an LU inverse if the factorisation fails."""
    n = C.shape[0]
    nn = np.array([n], dtype=np.int32)
    info = np.zeros(1, dtype=np.int32)
    uplo = np.array([85], dtype=np.uint8)  # "U" of the Fortran view: C's lower triangle
    work = C.copy()
    _dpotrf(uplo.ctypes, nn.ctypes, work.ctypes, nn.ctypes, info.ctypes)
    if info[0] == 0:
        _dpotri(uplo.ctypes, nn.ctypes, work.ctypes, nn.ctypes, info.ctypes)
    if info[0] != 0:
        return np.linalg.inv(C)
    for i in range(n):
        for j in range(i + 1, n):
            work[i, j] = work[j, i]
    return work


@njit(cache=True)
def _symv(K, v):
    """K @ v for a symmetric C-ordered K (BLAS dsymv on one triangle)."""
    out = np.zeros(v.shape[0])
    vc = np.ascontiguousarray(v)
    n = np.array([v.shape[0]], dtype=np.int32)
    inc = np.ones(1, dtype=np.int32)
    alpha = np.ones(1)
    beta = np.zeros(1)
    uplo = np.array([85], dtype=np.uint8)  # "U" of the Fortran view: C's lower triangle
    _dsymv(uplo.ctypes, n.ctypes, alpha.ctypes, K.ctypes, n.ctypes, vc.ctypes, inc.ctypes, beta.ctypes,
           out.ctypes, inc.ctypes)
    return out


@njit(cache=True)
def _gather(K, Rinv, y, ys, s, nb, I, J, diag):
    """C[I, J] with C_ij = y_i y_j K_ij + ys_i ys_j Rinv_ij (+ (nb - 1) / s_i on the diagonal);
    K and Rinv symmetric, read along their rows j in J (the indices I come in nearly
    ascending order, so the reads of a row are nearly sequential)."""
    out = np.empty((I.shape[0], J.shape[0]))
    for b in range(J.shape[0]):
        j = J[b]
        Kj, Rj = K[j], Rinv[j]
        yj, ysj = y[j], ys[j]
        for a in range(I.shape[0]):
            i = I[a]
            out[a, b] = y[i] * yj * Kj[i] + ys[i] * ysj * Rj[i]
    if diag:
        for a in range(I.shape[0]):
            out[a, a] += (nb - 1.0) / s[I[a]]
    return out


@njit(cache=True)
def _room(buf, n, m):
    """buf, or a larger buffer (its contents dropped) when it cannot hold an n x n matrix."""
    if buf.shape[0] >= n * n:
        return buf
    cap = min(m, int(1.25 * n) + 1)
    return np.empty(cap * cap)


@njit(cache=True)
def _cap_view(buf, n):
    return buf[: n * n].reshape((n, n))


#: Rows of a rank-c update of the capacitance inverse computed at a time (by one BLAS product
#: into a block that stays in cache): no n x n temporary, whose first touch alone took longer than
#: the update (c = 2 at n = 3000: bordering 62 -> 16 ms, removal 52 -> 7 ms).
_UPDATE_ROWS = 32


@njit(cache=True)
def _cap_remove(buf, out, n, pr):
    """Remove positions pr (ascending) from the inverse held row-major in buf[:n*n]:
    Ci_KK - Ci_KR Ci_RR^{-1} Ci_RK, written compacted (stride n - r) into ``out``."""
    r = pr.shape[0]
    Ci = _cap_view(buf, n)
    W = np.empty((r, n))
    G = np.empty((r, r))
    for q in range(r):
        W[q] = Ci[pr[q]]
        for t in range(r):
            G[q, t] = Ci[pr[q], pr[t]]
    Z = W / G[0, 0] if r == 1 else np.ascontiguousarray(np.linalg.solve(G, W))  # Ci_RR^{-1} Ci_R.
    WT = np.ascontiguousarray(W.T)
    Tb = np.empty((_UPDATE_ROWS if r > 1 else 0, n))
    k = n - r
    # kept columns come in runs between removed ones; unsigned indices let the runs vectorise
    a = 0
    q = 0
    for i0 in range(0, n, _UPDATE_ROWS):
        i1 = min(i0 + _UPDATE_ROWS, n)
        if r > 1:
            np.dot(WT[i0:i1], Z, Tb[: i1 - i0])  # rows i0..i1-1 of Ci_KR Ci_RR^{-1} Ci_RK
        for i in range(i0, i1):
            if q < r and i == pr[q]:
                q += 1
                continue
            src, dst = np.uint64(i * n), np.uint64(a * k)
            wi = W[0, i]
            j0 = 0
            for t in range(r + 1):
                j1 = pr[t] if t < r else n
                off = np.uint64(t)
                if r == 1:
                    for j in range(j0, j1):
                        uj = np.uint64(j)
                        out[dst + uj - off] = buf[src + uj] - wi * Z[0, uj]
                else:
                    Ti = Tb[i - i0]
                    for j in range(j0, j1):
                        uj = np.uint64(j)
                        out[dst + uj - off] = buf[src + uj] - Ti[uj]
                j0 = j1 + 1
            a += 1
    return k


@njit(cache=True)
def _cap_add(buf, out, n, B, Dn):
    """Append c indices with C_{A,N} = B (n x c) and C_NN = Dn to the inverse in buf[:n*n]
    (bordering through the Schur complement), written with stride n + c into ``out``."""
    c = Dn.shape[0]
    Ci = _cap_view(buf, n)
    if n == 0:
        X = np.zeros((0, c))
    elif c == 1:  # Ci is symmetric: one triangle read
        X = _symv(Ci, B[:, 0]).reshape((n, 1))
    else:
        X = np.dot(Ci, B)
    Sc = Dn - np.dot(B.T, X) if n else Dn.copy()
    Sc = 0.5 * (Sc + Sc.T)
    Si = np.linalg.inv(Sc)
    XS = np.dot(X, Si) if n else np.zeros((0, c))
    XT = np.ascontiguousarray(X.T)
    Tb = np.empty((_UPDATE_ROWS if c > 1 else 0, n))
    k = n + c
    for i0 in range(0, n, _UPDATE_ROWS):
        i1 = min(i0 + _UPDATE_ROWS, n)
        if c > 1:
            np.dot(XS[i0:i1], XT, Tb[: i1 - i0])  # rows i0..i1-1 of X S^{-1} X^T
        for i in range(i0, i1):
            src, dst = np.uint64(i * n), np.uint64(i * k)
            if c == 1:
                xi = XS[i, 0]
                for j in range(n):
                    uj = np.uint64(j)
                    out[dst + uj] = buf[src + uj] + xi * XT[0, uj]
            else:
                Ti = Tb[i - i0]
                for j in range(n):
                    uj = np.uint64(j)
                    out[dst + uj] = buf[src + uj] + Ti[uj]
            for q in range(c):
                out[dst + np.uint64(n + q)] = -XS[i, q]
    for q in range(c):
        for i in range(n):
            out[(n + q) * k + i] = -XS[i, q]
        for t in range(c):
            out[(n + q) * k + n + t] = Si[q, t]
    return k


@njit(cache=True)
def _cap_residual(buf, n, act, K, Rinv, y, ys, s, nb):
    """||p - C Ci p|| for a fixed unit probe p, C q from two products over one triangle each:
    C q = (nb - 1) q / s_A + y_A (K (y q~))_A + ys_A (R^{-1} (ys q~))_A with q~ the vector q
    placed on A (the entries of :func:`_gather`; streaming K and R^{-1} once instead of
    gathering |A|^2 scattered pairs of them: 15 against 47 ms at |A| = 3300 of 5000)."""
    if n == 0:
        return 0.0
    p = np.cos(np.arange(1, n + 1) * 2.399963229728653)
    p /= np.sqrt(np.sum(p * p))
    q = np.dot(_cap_view(buf, n), p)
    qy = np.zeros(y.shape[0])
    qys = np.zeros(y.shape[0])
    for a in range(n):
        i = act[a]
        qy[i] = y[i] * q[a]
        qys[i] = ys[i] * q[a]
    kq = _symv(K, qy)
    rq = _symv(Rinv, qys)
    res = 0.0
    for a in range(n):
        i = act[a]
        res += (p[a] - ((nb - 1.0) / s[i] * q[a] + y[i] * kq[i] + ys[i] * rq[i])) ** 2
    return np.sqrt(res)


@njit(cache=True)
def _select(A, changed, n_changed, entered):
    """The indices of changed[:n_changed] now in A (``entered``) or now out of it, in order."""
    out = np.empty(n_changed, dtype=np.int64)
    q = 0
    for t in range(n_changed):
        if A[changed[t]] == entered:
            out[q] = changed[t]
            q += 1
    return out[:q]


@njit(cache=True)
def _cap_leave(buf, spare, n, A, changed, n_changed, act, pos, m):
    """Drop the indices of changed[:n_changed] that left A from the inverse (in buf, order
    act[:n]); returns (buf, spare, n) after the swap of the two buffers."""
    left = _select(A, changed, n_changed, False)
    n_rem = left.shape[0]
    if n_rem == 0:
        return buf, spare, n
    pr = pos[left]
    pr.sort()
    spare = _room(spare, n, m)
    n = _cap_remove(buf, spare, n, pr)
    a = 0
    for t in range(n + n_rem):  # compact act / pos
        i = act[t]
        if A[i]:
            act[a] = i
            pos[i] = a
            a += 1
        else:
            pos[i] = -1
    return spare, buf, n


@njit(cache=True)
def _cap_enter(buf, spare, n, A, changed, n_changed, act, pos, K, Rinv, y, ys, s, nb, m):
    """Border the inverse with the indices of changed[:n_changed] that entered A (appended to
    act); returns (buf, spare, n) after the swap of the two buffers."""
    add = _select(A, changed, n_changed, True)
    n_add = add.shape[0]
    if n_add == 0:
        return buf, spare, n
    spare = _room(spare, n + n_add, m)
    B = _gather(K, Rinv, y, ys, s, nb, act[:n], add, False)
    Dn = _gather(K, Rinv, y, ys, s, nb, add, add, True)
    n = _cap_add(buf, spare, n, B, Dn)
    for q in range(n_add):
        act[n - n_add + q] = add[q]
        pos[add[q]] = n - n_add + q
    return spare, buf, n


@njit(cache=True)
def _cap_refactor(buf, A, act, pos, K, Rinv, y, ys, s, nb, m):
    """The inverse of the capacitance matrix over A from scratch (act / pos rebuilt);
    returns (buf, n)."""
    n = 0
    for i in range(m):
        pos[i] = -1
        if A[i]:
            act[n] = i
            pos[i] = n
            n += 1
    buf = _room(buf, n, m)
    if n:
        buf[: n * n] = _spd_inverse(_gather(K, Rinv, y, ys, s, nb, act[:n], act[:n], True)).ravel()
    return buf, n


@njit(cache=True)
def _unit_k(c, mm, s):
    """Scale the signed coefficients c and their margins mm to a^T K a = c . mm = 1 with a
    positive average margin (Section 5), in place; False when c . mm is not positive and finite."""
    nrm2 = np.dot(c, mm)
    if not (np.isfinite(nrm2) and nrm2 > 0.0):
        return False
    f = 1.0 / np.sqrt(nrm2)
    if np.dot(s, mm) < 0:
        f = -f
    c *= f
    mm *= f
    return True


@njit(cache=True)
def kernel_loop(K, Rinv, y, s, alpha, beta, max_iter, tol, refresh_every, check_every, refresh_tol, accel,
                stall, mult):
    """The kernel MSVMAv iteration in the signed coefficients c = y * a ("paper" metric
    R = D^{-1} + K, D = diag(s), Y = diag(y)); margins m = y * (K a):

        delta = theta - m_A (the shortfalls),  v = C^{-1} delta,
        C     = nb D_A^{-1} + Y_A (K R^{-1} K)_AA Y_A   (the capacitance matrix, |A| x |A|),
        c'    = c + v (on A) - y * R^{-1} (y * v / s),
        a     = a' + s y / (2 alpha S),  normalised to a^T K a = c . m = 1, sign as in Sec. 5.

    (Woodbury on (R + K_A^T D_A K_A / nb)^{-1}.) The inverse of C is held row-major in a flat
    buffer and follows A by Schur-complement removals and bordering additions (about
    3 c |A|^2 for c indices), refactorised when that is cheaper and checked on a probe vector
    every ``check_every`` updates. A NumPy twin with a callback lives with the tests. With
    ``accel`` the next point is the Anderson combination of the last iterates in c
    (:mod:`._anderson`; one more product with K for its margins), stopped when the best iterate is
    ``stall`` iterations old (0: never). ``mult``: the number of samples each row stands for
    (distinct rows with merged weights, :func:`~margindist.solvers._repeats.repeated_rows`), by which the history
    counts |A| and the changes.

    Returns (c_last, c_best, n_iter, hist (n_iter + 1, 6), best_k, converged, status, schemes
    (1 = refactorisation), n_refresh) with status 0 ok, 2 non-finite iterate, 3 degenerate
    start (s y has zero RKHS norm).
    """
    m = y.shape[0]
    S = 0.0
    for i in range(m):
        S += s[i]
    nb = S * beta
    ys = y / s
    am = s / (2.0 * alpha * S)
    hist = np.zeros((max_iter + 1, 6))
    schemes = np.zeros(max_iter + 1, dtype=np.int64)
    c = s.copy()
    mm = y * _symv(K, y * c)
    nrm2 = np.dot(c, mm)
    if not (np.isfinite(nrm2) and nrm2 > 0.0):
        return c, c.copy(), 0, hist[:1].copy(), 0, False, 3, schemes[:1].copy(), 0
    c /= np.sqrt(nrm2)
    mm /= np.sqrt(nrm2)
    theta = np.dot(s, mm) / S
    A = np.zeros(m, dtype=np.bool_)
    changed = np.empty(m, dtype=np.int64)
    best_c = c.copy()
    n_changed, n_act, best_k, _ = _advance(mm, theta, s, S, A, changed, hist, 0, np.nan, c, best_c, 0, 0.0, mult)

    act = np.empty(m, dtype=np.int64)
    pos = np.full(m, -1, dtype=np.int64)
    aa_dX, aa_dG, aa_last, aa_info, aa_gmin = anderson_state(m)
    buf = np.empty(0)  # the inverse, row-major in buf[:n*n]; updates write into spare and swap
    spare = np.empty(0)
    n = -1  # no inverse yet
    since = 0
    n_refresh = 0
    converged = False
    status = 0
    k = 0
    for k in range(1, max_iter + 1):
        # ---- the capacitance inverse follows A
        refac = n < 0 or 3.0 * n_changed * n * n >= float(n_act) ** 3
        if not refac and n_changed:
            buf, spare, n = _cap_leave(buf, spare, n, A, changed, n_changed, act, pos, m)
            buf, spare, n = _cap_enter(buf, spare, n, A, changed, n_changed, act, pos, K, Rinv, y, ys, s, nb, m)
            since += 1
            if refresh_every > 0 and since >= refresh_every or since % check_every == 0 and _cap_residual(buf, n, act, K, Rinv, y, ys, s, nb) > refresh_tol:
                refac = True
                n_refresh += 1
        if refac:
            buf, n = _cap_refactor(buf, A, act, pos, K, Rinv, y, ys, s, nb, m)
            since = 0
            schemes[k] = 1

        # ---- the two steps
        ve = np.zeros(m)
        if n:
            delta = np.empty(n)
            for a in range(n):
                delta[a] = theta - mm[act[a]]
            v = _symv(_cap_view(buf, n), delta)  # Ci is symmetric: one triangle read
            for a in range(n):
                ve[act[a]] = v[a]
        c_full = c + ve - y * _symv(Rinv, ys * ve) + am
        m_full = y * _symv(K, y * c_full)
        if not _unit_k(c_full, m_full, s):
            status = 2
            break
        step = 0.0  # the residual, in the RKHS norm
        for i in range(m):
            step += (c_full[i] - c[i]) * (m_full[i] - mm[i])
        step = np.sqrt(max(step, 0.0))
        if accel:
            anderson_step(c, c_full - c, aa_dX, aa_dG, aa_last, aa_info, aa_gmin, c_full)
            m_full = y * _symv(K, y * c_full)
            if not _unit_k(c_full, m_full, s):
                status = 2
                break
        c[:] = c_full
        mm[:] = m_full

        # ---- margins, A, history
        theta = np.dot(s, mm) / S
        n_changed, n_act, best_k, converged = _advance(mm, theta, s, S, A, changed, hist, k, step, c, best_c,
                                                       best_k, tol, mult)
        if converged or accel and 0 < stall <= k - best_k:
            break
    return c, best_c, k, hist[: k + 1].copy(), best_k, converged, status, schemes[: k + 1].copy(), n_refresh
