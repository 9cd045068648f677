"""M3SVM / ISM3 (Nie, Hao, Wang, AAAI 2024): objective, gradient, L-BFGS and Adam drivers.

The model has one weight vector w_k (a row of W, shape (K, d)) and one bias b_k per class.
With sample weights s_i the objective (paper Eq. 25) is

    F(W, b) = sum_i s_i l_i(W, b) + lam * sum_{k<l} ||w_k - w_l||^p + eps (||W||_F^2 + ||b||^2)

with the data term l_i either the smoothed pairwise hinge of M3SVM,

    l_i = sum_{k != y_i} g(1 - (w_{y_i} - w_k)^T x_i - b_{y_i} + b_k),
    g(t) = (t + sqrt(t^2 + delta^2)) / 2,

or the cross-entropy of the logits W x_i + b (ISM3, the softmax variant).

* The data term is evaluated for all (i, k) at once: one product S = X W^T (dense or CSR X,
  never densified), one fused numba pass over S for the loss and dF/dS, and one product G^T X
  for the gradient: O(nnz(X) K) time, O(n K) memory.
* The regulariser is evaluated in Gram form, ||w_k - w_l||^2 = ||w_k||^2 + ||w_l||^2 - 2 w_k.w_l,
  O(K^2 d) time and O(K^2 + K d) memory (the authors' broadcast (K, K, d) tensor is neither).
  Its gradient is L W with the weighted Laplacian L = diag(A 1) - A, A_kl = p ||w_k - w_l||^(p-2).
  Pairs whose Gram-form distance is lost to cancellation (||w_k - w_l||^2 below 1e-8 of
  ||w_k||^2 + ||w_l||^2) are recomputed from the explicit difference and their gradient terms
  A_kl (w_k - w_l) are added from it, so the gradient stays exact for p < 2 too. At zero distance
  the gradient of ||v||^p is 0 for p > 1 (its limit) and the minimal-norm subgradient 0 for p <= 1.
* Wide dense data (n rows, d >> n features) is solved in the span of its rows (:class:`RowSpace`):
  every term of F is unchanged when W is projected onto that span, or lowered, so the minimiser
  lies in it, and the deterministic drivers never leave it (Adam, whose per-coordinate steps
  are not rotation invariant, keeps X).
* Both the data term and the regulariser depend on W, b only through differences between classes,
  so their gradients sum to zero over the classes; the eps ridge pins the common mode
  (W^T 1 = 0, b^T 1 = 0 at the optimum) and makes the minimiser unique.

The drivers minimise F / sum_i s_i (same minimiser; tolerances become independent of n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.optimize import minimize
from scipy.special import softmax

from ..losses import smooth_hinge_scalar
from ._gram import RowSpace, row_space
from ._result import SolverResult, UnpackableResult
from ._rows import permutation, seed_from
from ._threads import single_scipy_blas_thread

__all__ = [
    "AdamResult",
    "M3SVMResult",
    "RowSpace",
    "adam_minimize",
    "m3svm_adam",
    "m3svm_lbfgs",
    "m3svm_objective",
    "pairwise_penalty",
    "row_space",
    "row_space_pays",
]

#: Pairs with Gram-form squared distance below this fraction of ||w_k||^2 + ||w_l||^2 are recomputed.
_CANCEL_RTOL = 1e-8
#: Maximum number of floats in one block of explicit pair differences.
_BLOCK_FLOATS = 1 << 20
#: A single fit moves to the row space when the products it saves pay for the QR factorisation
#: within this many iterations by an operation count (the QR runs about twice as fast per
#: operation as the products; L-BFGS took 80 to 650 iterations on cornell's 4134 features).
ROW_SPACE_BREAKEVEN = 100


# ---------------------------------------------------------------------------- regulariser
def pair_sq_distances(W):
    """D2_kl = ||w_k - w_l||^2 of the rows of W (float64) in Gram form, with the pairs whose
    distance is lost to cancellation recomputed from explicit differences (module docstring).

    Returns (D2, ni, nj): the (K, K) matrix and the indices (k < l) of the recomputed pairs
    (None when there are none).
    """
    sq = np.einsum("ij,ij->i", W, W)
    scale = sq[:, None] + sq[None, :]
    D2 = scale - 2.0 * (W @ W.T)
    np.maximum(D2, 0.0, out=D2)
    np.fill_diagonal(D2, 0.0)
    # pairs whose distance is lost to cancellation (and are not both zero vectors)
    near = D2 <= _CANCEL_RTOL * scale
    np.fill_diagonal(near, False)
    near &= scale > 0
    ni = nj = None
    if near.any():
        ni, nj = np.nonzero(np.triu(near))
        step = max(1, _BLOCK_FLOATS // max(W.shape[1], 1))
        for s in range(0, ni.size, step):
            a, b = ni[s:s + step], nj[s:s + step]
            blk = W[a] - W[b]
            d2 = np.einsum("ij,ij->i", blk, blk)
            D2[a, b] = d2
            D2[b, a] = d2
    return D2, ni, nj


def pairwise_penalty(W, p, *, return_grad=True):
    """R(W) = sum_{k<l} ||w_k - w_l||_2^p and its gradient (rows of W are the class vectors).

    Gram form with exact recomputation of near-coincident pairs (see the module docstring).
    Returns (R, grad) with grad of W's shape, or R alone with ``return_grad=False``.
    """
    W = np.asarray(W, dtype=np.float64)
    D2, ni, nj = pair_sq_distances(W)
    R = 0.5 * float(np.power(D2, 0.5 * p).sum())
    if not return_grad:
        return R
    if p == 2:
        A = np.full_like(D2, 2.0)
        np.fill_diagonal(A, 0.0)
    elif p > 2:
        A = np.power(D2, 0.5 * (p - 2.0))
        A *= p
    else:  # negative power: zero distances (diagonal, coinciding rows) get A = 0
        A = np.zeros_like(D2)
        np.power(D2, 0.5 * (p - 2.0), out=A, where=D2 > 0)
        A *= p
    if ni is not None and p != 2:
        # near pairs: their terms come from the explicit differences below
        A[ni, nj] = 0.0
        A[nj, ni] = 0.0
    grad = A.sum(axis=1)[:, None] * W - A @ W
    if ni is not None and p != 2:
        step = max(1, _BLOCK_FLOATS // max(W.shape[1], 1))
        for s in range(0, ni.size, step):
            a, b = ni[s:s + step], nj[s:s + step]
            d2 = D2[a, b]
            coef = np.zeros_like(d2)
            np.power(d2, 0.5 * (p - 2.0), out=coef, where=d2 > 0)
            c = (p * coef)[:, None] * (W[a] - W[b])
            np.add.at(grad, a, c)
            np.add.at(grad, b, -c)
    return R, grad


# ---------------------------------------------------------------------------- data term
def _scores(X, W, b):
    """S = X W^T + b in float64; float32 X is multiplied in float32 (no copy of X)."""
    Wt = W.T.astype(X.dtype, copy=False) if X.dtype == np.float32 else W.T
    S = np.asarray(X @ Wt, dtype=np.float64)
    if b is not None:
        S += b
    return S


def _xt_dot(X, G):
    """G^T X as (K, d) float64 (sparse X stays sparse)."""
    Gc = G.astype(X.dtype, copy=False) if X.dtype == np.float32 else G
    if sp.issparse(X):
        return np.asarray((X.T @ Gc).T, dtype=np.float64)
    return np.asarray(Gc.T @ X, dtype=np.float64)


@njit(cache=True, inline="always")
def shifted_exp_row(S, i, out):
    """out[i, k] = exp(S[i, k] - max_k S[i, k]); returns (the max, the row sum of out)."""
    K = S.shape[1]
    m = S[i, 0]
    for k in range(1, K):
        m = max(m, S[i, k])
    tot = 0.0
    for k in range(K):
        out[i, k] = math.exp(S[i, k] - m)
        tot += out[i, k]
    return m, tot


@njit(cache=True)
def _softmax_term(S, y, s, G):
    """sum_i s_i CE(S_i, y_i); G = dF/dS. One pass, no temporaries."""
    n, K = S.shape
    val = 0.0
    for i in range(n):
        m, tot = shifted_exp_row(S, i, G)
        val += s[i] * (math.log(tot) - (S[i, y[i]] - m))
        c = s[i] / tot
        for k in range(K):
            G[i, k] *= c
        G[i, y[i]] -= s[i]
    return val


@njit(cache=True)
def _smooth_hinge_term(S, y, s, delta, G):
    """sum_i s_i sum_{k != y_i} g(1 - S_iy + S_ik); G = dF/dS (g: losses.smooth_hinge_scalar)."""
    n, K = S.shape
    val = 0.0
    for i in range(n):
        yi = y[i]
        sy = S[i, yi]
        acc = 0.0
        gsum = 0.0
        for k in range(K):
            if k == yi:
                continue
            g, gd = smooth_hinge_scalar(1.0 - sy + S[i, k], delta)
            acc += g
            G[i, k] = s[i] * gd
            gsum += G[i, k]
        G[i, yi] = -gsum
        val += s[i] * acc
    return val


def data_term(S, y_index, sample_weight, loss, delta):
    """Weighted data term sum_i s_i l_i of the scores S (n, K) and dF/dS (n, K)."""
    S = np.ascontiguousarray(S, dtype=np.float64)
    y = np.asarray(y_index, dtype=np.intp)
    s = np.asarray(sample_weight, dtype=np.float64)
    G = np.empty_like(S)
    if loss == "softmax":
        return _softmax_term(S, y, s, G), G
    return _smooth_hinge_term(S, y, s, float(delta), G), G


def _unpack(theta, K, d, fit_intercept):
    W = theta[: K * d].reshape(K, d)
    b = theta[K * d:] if fit_intercept else None
    return W, b


def m3svm_objective(theta, X, y_index, sample_weight, n_classes, *, lam, p, delta, eps, loss,
                    fit_intercept, rows=None):
    """F(W, b) of the module docstring and its gradient w.r.t. theta = [W.ravel(), b].

    ``rows`` restricts the data term to a subset of the samples (a mini-batch); the
    regulariser and ridge are always whole. Returns (F, grad).
    """
    K, d = n_classes, X.shape[1]
    theta = np.asarray(theta, dtype=np.float64)
    W, b = _unpack(theta, K, d, fit_intercept)
    if rows is not None:
        X, y_index, sample_weight = X[rows], y_index[rows], sample_weight[rows]
    S = _scores(X, W, b)
    val, G = data_term(S, y_index, sample_weight, loss, delta)
    gW = _xt_dot(X, G)
    if lam != 0:
        R, gR = pairwise_penalty(W, p)
        val += lam * R
        gW += lam * gR
    val += eps * float(np.einsum("ij,ij->", W, W))
    gW += 2.0 * eps * W
    grad = [gW.ravel()]
    if fit_intercept:
        val += eps * float(b @ b)
        grad.append(G.sum(axis=0) + 2.0 * eps * b)
    return val, np.concatenate(grad)


def softmax_proba(S):
    """Row-wise softmax of the scores."""
    return softmax(S, axis=1)


# ---------------------------------------------------------------------------- row space
def row_space_pays(X, n_classes: int, shared: bool = False) -> bool:
    """Whether to fit dense X in its row space: at least twice as many features as rows, and the
    QR factorisation (2 n^2 d operations) costs no more than the products with X it saves over
    :data:`ROW_SPACE_BREAKEVEN` iterations (4 K n (d - n) per iteration), or is ``shared`` by
    the fits of a grid search. CSR X keeps its O(nnz) products."""
    if sp.issparse(X):
        return False
    n, d = X.shape
    if 2 * n > d:
        return False
    breakeven = n * d / (2.0 * n_classes * (d - n))
    return shared or breakeven <= ROW_SPACE_BREAKEVEN


# ---------------------------------------------------------------------------- L-BFGS
def _theta0(K, d, fit_intercept, coef_init, intercept_init):
    W = np.zeros((K, d)) if coef_init is None else np.asarray(coef_init, dtype=np.float64).reshape(K, d)
    parts = [W.ravel()]
    if fit_intercept:
        parts.append(np.zeros(K) if intercept_init is None else np.asarray(intercept_init, np.float64))
    return np.concatenate(parts)


def _check_finite(theta, solver, remedy):
    if not np.all(np.isfinite(theta)):
        raise FloatingPointError(
            f"M3SVM ({solver}) produced non-finite weights: the optimisation diverged. {remedy}"
        )


def m3svm_lbfgs(X, y_index, sample_weight, n_classes, *, lam, p, delta, eps, loss, fit_intercept,
                max_iter=1000, tol=1e-6, coef_init=None, intercept_init=None, log=None):
    """Minimise F with scipy's L-BFGS-B and the analytic gradient.

    Stops when the largest gradient entry of F / sum(s) is below ``tol`` (or when the relative
    decrease of F stalls at machine precision). Returns an :class:`M3SVMResult` (coef (K, d),
    intercept (K,), objective F).
    """
    K, d = n_classes, X.shape[1]
    sw = np.asarray(sample_weight, dtype=np.float64)
    scale = float(sw.sum())
    kw = dict(lam=lam, p=p, delta=delta, eps=eps, loss=loss, fit_intercept=fit_intercept)

    def fun(theta):
        f, g = m3svm_objective(theta, X, y_index, sw, K, **kw)
        return f / scale, g / scale

    theta0 = _theta0(K, d, fit_intercept, coef_init, intercept_init)
    with single_scipy_blas_thread():
        res = minimize(fun, theta0, jac=True, method="L-BFGS-B",
                       options=dict(maxiter=max_iter, gtol=tol, ftol=1e3 * np.finfo(float).eps,
                                    maxcor=20, maxls=40))
    _check_finite(res.x, "lbfgs", "Check the data scaling (standardise the features) or raise eps.")
    gmax = float(np.max(np.abs(res.jac))) if res.jac.size else 0.0
    converged = bool(res.status == 0 or gmax <= 10 * tol)
    if log is not None:
        log.info("M3SVM L-BFGS: %d iterations, %d evaluations, F=%.10g, max|grad|=%.3g (%s)",
                 res.nit, res.nfev, res.fun * scale, gmax, res.message)
    W, b = _unpack(res.x, K, d, fit_intercept)
    b = np.zeros(K) if b is None else b.copy()
    return M3SVMResult(coef=W.copy(), intercept=b, n_iter=int(res.nit), objective=float(res.fun * scale),
                       converged=converged)


@dataclass(kw_only=True)
class M3SVMResult(UnpackableResult):
    """An M3SVM fit: coef W (K, d), intercept b (K,) and the objective F. Unpacks as
    (coef, intercept, n_iter, objective, converged)."""

    _unpack = ("coef", "intercept", "n_iter", "objective", "converged")
    coef: np.ndarray
    intercept: np.ndarray
    objective: float


# ---------------------------------------------------------------------------- Adam
@dataclass(kw_only=True)
class AdamResult(SolverResult):
    """A run of :func:`adam_minimize` (``n_iter``: steps; ``history``: the objective of every
    full-batch step, or of every pass for mini-batches)."""

    x: object
    fun: float


class _NumpyOps:
    @staticmethod
    def sqrt(a):
        return np.sqrt(a)

    @staticmethod
    def absmax(a):
        return float(np.max(np.abs(a))) if a.size else 0.0

    @staticmethod
    def copy(a):
        return a.copy()

    @staticmethod
    def zeros_like(a):
        return np.zeros_like(a)


def adam_minimize(fun_grad, x0, *, n_samples, learning_rate=0.01, max_iter=500, tol=1e-6,
                  lr_schedule="adaptive", batch_size=None, random_state=None, n_iter_no_change=10,
                  beta1=0.9, beta2=0.999, adam_eps=1e-8, ops=_NumpyOps, log=None):
    """Adam (Kingma & Ba 2015) on fun_grad(x, rows) -> (f, g), array-library agnostic.

    One iteration is one epoch: a single full-batch step (``batch_size=None``) or a pass over
    shuffled mini-batches. ``lr_schedule="constant"`` is the paper's procedure; ``"adaptive"``
    halves the step size when the epoch objective has not improved by a relative 1e-9 for
    ``n_iter_no_change`` epochs and stops once it has fallen by 2^-12 (Adam with a constant step
    only hovers near the optimum). Also stops when max |g| <= tol (full batch). Returns the best
    iterate seen (full batch) or the last one (mini-batch) as an :class:`AdamResult`.
    """
    x = ops.copy(x0)
    m = ops.zeros_like(x)
    v = ops.zeros_like(x)
    lr = learning_rate
    full = batch_size is None or batch_size >= n_samples
    rng = None if full else seed_from(random_state)
    best_f, best_x = math.inf, ops.copy(x)   # best full-batch iterate
    best_epoch, stall, t = math.inf, 0, 0    # plateau detection on the epoch objective
    history = []
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        if full:
            batches = [None]
        else:
            perm = permutation(rng, n_samples)
            batches = [perm[s:s + batch_size] for s in range(0, n_samples, batch_size)]
        epoch_f = 0.0
        for rows in batches:
            f, g = fun_grad(x, rows)
            if not math.isfinite(f):
                raise FloatingPointError(
                    "M3SVM (adam) produced a non-finite objective: the optimisation diverged. "
                    "Lower learning_rate or standardise the features."
                )
            if full:
                if f < best_f:
                    best_f, best_x = f, ops.copy(x)
                if ops.absmax(g) <= tol:
                    converged = True
                    break
                epoch_f = f
            else:
                epoch_f += f * len(rows) / n_samples
            t += 1
            m = beta1 * m + (1.0 - beta1) * g
            v = beta2 * v + (1.0 - beta2) * (g * g)
            step = (lr / (1.0 - beta1 ** t)) * m / (ops.sqrt(v / (1.0 - beta2 ** t)) + adam_eps)
            x = x - step
        history.append(epoch_f)
        if converged:
            break
        if not math.isfinite(best_epoch) or epoch_f < best_epoch - 1e-9 * abs(best_epoch):
            best_epoch, stall = epoch_f, 0
        else:
            stall += 1
        if lr_schedule == "adaptive" and stall >= n_iter_no_change:
            lr *= 0.5
            stall = 0
            if log is not None:
                log.debug("Adam epoch %d: objective %.10g, step size halved to %.3g", it, epoch_f, lr)
            if lr < learning_rate * 2.0 ** -12:
                converged = True
                break
    if full:
        f_last, _ = fun_grad(x, None)
        if f_last < best_f:
            best_f, best_x = f_last, x
        x = best_x
    else:
        best_f, _ = fun_grad(x, None)
    return AdamResult(x=x, fun=float(best_f), n_iter=it, converged=converged, history=np.asarray(history, dtype=float))


def m3svm_adam(X, y_index, sample_weight, n_classes, *, lam, p, delta, eps, loss, fit_intercept,
               learning_rate=0.01, max_iter=500, tol=1e-6, lr_schedule="adaptive", batch_size=None,
               random_state=None, coef_init=None, intercept_init=None, log=None):
    """Minimise F with Adam in NumPy (see :func:`adam_minimize`; the torch back end in
    ``margindist.torch`` runs the same iteration on a GPU). Returns an :class:`M3SVMResult`."""
    K, d = n_classes, X.shape[1]
    sw = np.asarray(sample_weight, dtype=np.float64)
    scale = float(sw.sum())
    kw = dict(lam=lam, p=p, delta=delta, eps=eps, loss=loss, fit_intercept=fit_intercept)

    def fun_grad(theta, rows):
        f, g = m3svm_objective(theta, X, y_index, sw, K, rows=rows, **kw)
        if rows is None:
            return f / scale, g / scale
        # mini-batch: the weighted mean over the batch plus the (whole) regulariser / sum(s)
        sb = float(sw[rows].sum())
        fr, gr = _penalty_part(theta, K, d, fit_intercept, lam, p, eps)
        return (f - fr) / sb + fr / scale, (g - gr) / sb + gr / scale

    theta0 = _theta0(K, d, fit_intercept, coef_init, intercept_init)
    res = adam_minimize(fun_grad, theta0, n_samples=X.shape[0], learning_rate=learning_rate,
                        max_iter=max_iter, tol=tol, lr_schedule=lr_schedule, batch_size=batch_size,
                        random_state=random_state, log=log)
    _check_finite(res.x, "adam", "Lower learning_rate or standardise the features.")
    W, b = _unpack(res.x, K, d, fit_intercept)
    b = np.zeros(K) if b is None else b.copy()
    if log is not None:
        log.info("M3SVM Adam (numpy): %d epochs, F=%.10g", res.n_iter, res.fun * scale)
    return M3SVMResult(coef=W.copy(), intercept=b, n_iter=res.n_iter, objective=res.fun * scale,
                       converged=res.converged, history=res.history)


def _penalty_part(theta, K, d, fit_intercept, lam, p, eps):
    """The regulariser + ridge part of F and its gradient."""
    W, b = _unpack(theta, K, d, fit_intercept)
    R, gR = (pairwise_penalty(W, p) if lam != 0 else (0.0, np.zeros_like(W)))
    f = lam * R + eps * float(np.einsum("ij,ij->", W, W))
    gW = lam * gR + 2.0 * eps * W
    g = [gW.ravel()]
    if fit_intercept:
        f += eps * float(b @ b)
        g.append(2.0 * eps * b)
    return f, np.concatenate(g)
