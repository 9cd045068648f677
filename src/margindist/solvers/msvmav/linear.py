"""The MSVMAv iteration on explicit rows z_i (the linear path, dense or CSR X, and the kernel
path's eigenbasis route), and the linear front end.

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
  :data:`~._common.REFRESH_TOL` (or every ``refresh_every`` iterations when that is set), which
  bounds round-off (:class:`._direct.DirectSystem`).
* ``"batched"``: keep the Gram sum S_A = sum_{A} s_i z_i z_i^T incrementally (O(c d^2) for c
  changes) and re-factorise H by Cholesky (O(d^3)) every iteration.
* ``"cg"``: conjugate gradients on H with products through a reused copy of the rows of A,
  a diagonal-plus-mean-direction preconditioner and a Galerkin start from the last solutions
  (:class:`._cg.CGSystem`); never forms a d x d matrix (sparse, high-dimensional X).
* ``"auto"``: dense X with few columns: the batched scheme in one compiled loop
  (:func:`._loops.dense_loop`; it recomputes only the margins near the average margin, see
  there); CG when d is large (no d x d matrix); otherwise per iteration the
  cheaper of a Woodbury update of M (about 4 c d^2 flops) and a Cholesky refactorisation
  (d^3 / 3).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._gram import RowSpace, row_space
from .._threads import blas_single_thread
from ._anderson import STALL, anderson_state, anderson_step
from ._cg import CG_TOL, CGSystem
from ._common import as_float, diverged
from ._design import Design
from ._direct import DirectSystem
from ._history import History, MSVMAvResult, creeping, creeps_at, make_result
from ._loops import dense_loop, unit
from ._screen import MarginScreen

__all__ = ["SOLVERS", "accelerated", "msvmav_iterate", "msvmav_linear", "row_basis", "solve_auto"]

#: How the fixed point is approached: the paper's iteration, or Anderson-accelerated (:mod:`._anderson`).
SOLVERS = ("fixed-point", "anderson")

#: "auto" never forms a d x d matrix above this many features (dense / sparse X).
MAX_DIRECT_DENSE = 4096
MAX_DIRECT_SPARSE = 2048
#: ``solver="auto"`` judges whether the paper's iteration creeps after this many iterations
#: (the paper's T; :func:`solve_auto`).
AUTO_CHECK = 100
#: "auto" runs the compiled loop (:func:`._loops.dense_loop`) on dense X up to this many features.
MAX_COMPILED = 128
#: The NumPy loop screens the margins (:mod:`._screen`) when a pass over the rows costs at least
#: this many multiply-adds (below, the screening's own NumPy calls cost more than the pass).
SCREEN_MIN_WORK = 2**20
#: :func:`row_basis` only where X~^T and its orthonormal factor take at most this many bytes...
ROW_BASIS_MAX_BYTES = 2**31
#: ... and, for sparse X, on at most this many rows, with its dense orthonormal factor (d x r,
#: r <= n: X's size if densified) of at most this many bytes.
ROW_BASIS_MAX_SPARSE_ROWS = 512
ROW_BASIS_MAX_SPARSE_BYTES = 2**26


def _choose_family(design, update):
    """'direct' (explicit d x d matrices) or 'cg'."""
    if update == "cg":
        return "cg"
    if update in ("sherman-morrison", "batched"):
        return "direct"
    limit = MAX_DIRECT_SPARSE if design.sparse else MAX_DIRECT_DENSE
    return "cg" if design.d > limit else "direct"


def _start(step, N, d):
    """w_0 = step / ||step||_N, or an axis when the average margin picks no direction."""
    w = step.copy()
    nrm = float(np.sqrt(w @ w if N is None else w @ (N * w)))
    if nrm > 0 and np.isfinite(nrm):
        return w / nrm
    # sum_i s_i z_i = 0: the average margin does not pick a direction; start on an axis
    w = np.zeros(d)
    j = 0 if N is None else int(np.argmax(N))
    w[j] = 1.0 / (1.0 if N is None else np.sqrt(N[j]))
    return w


def msvmav_iterate(design, s, alpha, beta, *, prox=None, step=None, norm_weights=None,
                   max_iter=100, tol=1e-6, update="auto", refresh_every=None, cg_tol=CG_TOL,
                   cg_forcing=None, return_best=False, solver="fixed-point", stall=STALL, w0=None, callback=None,
                   log=None, judge_at=0) -> MSVMAvResult:
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
        Sherman-Morrison scheme: after every fourth incremental update, M is checked against H
        on a fixed probe vector (O(d^2)) and recomputed from the Gram sum (O(d^3)) when the
        relative residual exceeds 1e-10; ``refresh_every`` additionally forces a recomputation
        after that many incremental iterations (None: only when the check fails).
    cg_tol, cg_forcing : float
        The conjugate-gradient solves stop at a residual of ``cg_tol`` relative to the right-hand
        side or, where that is larger and ``solver="fixed-point"``, of norm ``cg_forcing`` times
        the length of the run's last step (None: :data:`._cg.CG_FORCING`; 0: every solve to
        ``cg_tol``).
    return_best : bool
        Return the iterate with the smallest SV/theta^2 instead of the last one (with
        ``solver="anderson"``: of the points the accelerated sequence visited).
    solver : {"fixed-point", "anderson"}
        The paper's iteration w_k = T(w_{k-1}), or Anderson acceleration of the same map
        (:mod:`._anderson`): the same fixed point in tens instead of thousands of evaluations.
        ``tol`` then bounds the residual ||T(w) - w||.
    stall : int
        ``solver="anderson"`` also stops when its best SV/theta^2 has not improved in this many
        evaluations (0: only ``tol`` and ``max_iter`` stop it).
    w0 : ndarray (d,), optional
        Start here (normalised in the N-norm) instead of at step / ||step||_N.
    callback : callable, optional
        Called after each iteration with a dict (k, active, theta, w_prev, w_half, w, scheme,
        M (current explicit inverse or None), G (Gram sum or None), g). Testing aid.
    log : logger, optional
        Receives one debug line per iteration.
    judge_at : int
        Also stop after this iteration if the run creeps there (:func:`._history.creeps_at`; the
        result is then that of ``max_iter=judge_at``), else go on to ``max_iter``; 0: never.

    Returns
    -------
    MSVMAvResult
        ``w`` the returned iterate (bias coordinate included), ``converged`` (tol met) and
        ``changing`` (active set changed in the last iterations of a run that hit max_iter);
        the solver never warns, the estimator does.
    """
    d = design.d
    s = np.asarray(s, dtype=np.float64)
    S = float(s.sum())
    u = design.rmatvec(s)
    P = np.ones(d) if prox is None else np.asarray(prox, dtype=np.float64)
    N = None if norm_weights is None else np.asarray(norm_weights, dtype=np.float64)
    step = u if step is None else np.asarray(step, dtype=np.float64)
    w = _start(step if w0 is None else np.asarray(w0, dtype=np.float64), N, d)
    accel = accelerated(solver)
    am_step = step / (2.0 * alpha * S)
    if (update == "auto" and callback is None and not design.sparse and design.c is None
            and d <= MAX_COMPILED):
        return _compiled(design, s, u, w, P, am_step, N, beta, max_iter, tol, return_best, accel, stall, judge_at)
    family = _choose_family(design, update)
    if family == "direct":
        system = DirectSystem(design, s, P, S * beta, update, refresh_every)
    else:
        # Anderson's mixing extrapolates from differences of residuals, which inexact solves
        # corrupt (with the forcing rule: 79 evaluations instead of 39 on the large_sparse row)
        system = CGSystem(design, s, P, S * beta, cg_tol, log, forcing=0.0 if accel else cg_forcing)
    hist = History(max_iter, s, S)
    k, w, converged = _run(design, system, hist, u, w, am_step, N, max_iter, tol, accel, stall, callback, log,
                           judge_at)
    return hist.result(w, k, converged, return_best, family=family,
                       n_refresh=getattr(system, "n_refresh", 0), n_products=getattr(system, "n_products", 0))


def accelerated(solver):
    """Whether ``solver`` (one of :data:`SOLVERS`) is the Anderson-accelerated one."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    return solver == "anderson"


def _unit(v, N, u, k):
    """v normalised in place by the compiled loops' rule (:func:`._loops.unit`); N an array."""
    if not unit(v, N, u):
        raise diverged(k, detail=f" (norm {np.sqrt(v @ (N * v))})")
    return v


def _run(design, system, hist, u, w, am_step, N, max_iter, tol, accel, stall, callback, log, judge_at=0):
    """The loop of :func:`msvmav_iterate` over a semi-variance ``system`` (direct or CG);
    returns (iterations, last iterate, converged). With ``accel`` the next point is the
    Anderson combination of the last iterates instead of T(w), and the run stops when the best
    iterate is ``stall`` iterations old (0: never), or at iteration ``judge_at`` if it creeps.
    Without ``accel``, and where a pass over the rows costs :data:`SCREEN_MIN_WORK` or more,
    the margins are screened (:class:`._screen.MarginScreen`: the same active sets, passes only
    every few iterations)."""
    S, nb = hist.S, system.nb

    N = np.ones(design.d) if N is None else N

    def norm(v):
        return float(np.sqrt(v @ (N * v)))

    screen = None if accel or design.work() < SCREEN_MIN_WORK else MarginScreen(design, hist.s, am_step)
    m = design.matvec(w) if screen is None else screen.full_pass(w, np.zeros_like(w))
    theta = float(u @ w) / S
    A = m < theta
    hist.record(0, m, theta, A, int(np.count_nonzero(A)), w)
    prevA = np.zeros(design.n, dtype=bool)
    state = anderson_state(design.d) if accel else None
    converged = False
    k, dw = 0, 0.0
    for k in range(1, max_iter + 1):
        diff = np.flatnonzero(A != prevA)
        w_half, scheme = system.half_step(A, diff[A[diff]], diff[~A[diff]], theta, w, k, dw)
        if screen is not None:
            screen.follow(A, diff)
        w_new = _unit(w_half + am_step, N, u, k)
        if callback is not None:
            callback({"k": k, "active": A, "theta": theta, "w_prev": w, "w_half": w_half,
                      "w": w_new, "scheme": scheme, "nb": nb, **system.callback_info(scheme)})
        dw = norm(w_new - w)  # the residual ||T(w) - w||
        if accel:
            nxt = np.empty(w.shape[0])
            anderson_step(w, w_new - w, *state, nxt)
            w_new = _unit(nxt, N, u, k)
        w_prev, w = w, w_new
        prevA = A
        theta = float(u @ w) / S
        screened = None if screen is None else screen.step(w, theta, A, system, w_half)
        if screened is None:
            m = design.matvec(w) if screen is None else screen.full_pass(w, w - w_prev)
            A, converged = hist.advance(k, m, theta, prevA, w, dw, scheme, log, tol)
        else:
            A, converged = hist.advance(k, None, theta, prevA, w, dw, scheme, log, tol, screened=screened)
        if converged or accel and 0 < stall <= k - hist.best_k or k == judge_at and creeps_at(hist.rows, k):
            break
    return k, w, converged


def _compiled(design, s, u, w0, P, am_step, N, beta, max_iter, tol, return_best, accel, stall, judge_at=0):
    """The "auto" scheme for dense X with few features: the compiled batched loop (the result's
    ``n_products`` counts its full passes over X for the margins)."""
    d = design.d
    N_arr = np.ones(d) if N is None else N
    w, best_w, n_iter, hist, best_k, converged, status, n_full = dense_loop(
        np.ascontiguousarray(design.B, dtype=np.float64), design.r, s, design.intercept, u, w0, P, am_step, N_arr,
        float(beta), int(max_iter), float(tol), accel, int(stall), int(judge_at))
    if status == 1:
        raise np.linalg.LinAlgError("MSVMAv: the semi-variance system is not positive definite.")
    if status == 2:
        raise diverged(n_iter)
    return make_result(hist, ["init"] + ["batched"] * int(n_iter), w, best_w, best_k, n_iter, converged,
                       return_best, family="compiled", n_products=int(n_full))


def row_basis(X, fit_intercept) -> RowSpace | None:
    """The rows' span (:func:`~margindist.solvers._gram.row_space`, the constant 1 appended with
    ``fit_intercept``) for X with fewer rows than coordinates (sparse X: at most
    :data:`ROW_BASIS_MAX_SPARSE_ROWS` of them), else None; None too when the factorisation's
    arrays would exceed :data:`ROW_BASIS_MAX_BYTES` (sparse X: its orthonormal factor
    :data:`ROW_BASIS_MAX_SPARSE_BYTES`, so that few sparse rows of a large vocabulary are not
    turned into an array of their dense size).

    Every iterate of the linear iteration lies in that span: w_0 is along u = sum_i s_i y_i x~_i,
    the semi-variance step maps the span into itself (H = I + sum_A s_i x~_i x~_i^T / (S beta)
    is the identity on its orthogonal complement, and its right-hand side lies in the span),
    and so do the average-margin step, the normalisation and Anderson's combinations. With
    w = Q v, ||w|| = ||v|| and <w, x~_i> = <v, Xr[i]>: the iteration on the rows Xr[i] is the
    same iteration, in n coordinates instead of d.

    On dense rows a product with them then costs O(n r) instead of O(n d). Sparse rows are
    cheaper to read than their dense coordinates once n is large against their non-zeros per
    row; on few rows the dense coordinates (the compiled loop up to 127 of them, d x d systems
    of order n above) replace conjugate gradients in d dimensions: cornell's word counts, 4134
    features, one-vs-one pairs of 19-172 rows 3-100x faster, of 600-700 rows as fast; sparse
    rows of 300 x 20 000 2.7x faster, of 1000-2000 rows 1.5-17x slower."""
    n, p = X.shape
    d = p + bool(fit_intercept)
    if sp.issparse(X):
        too_big = n > ROW_BASIS_MAX_SPARSE_ROWS or 8 * n * d > ROW_BASIS_MAX_SPARSE_BYTES
    else:
        too_big = 16 * n * d > ROW_BASIS_MAX_BYTES
    if n >= d or too_big:
        return None
    return row_space(X, bias=1.0 if fit_intercept else None)


def msvmav_linear(X, y, sample_weight, alpha, beta, *, fit_intercept=True, solver="fixed-point",
                  **kw) -> MSVMAvResult:
    """Linear MSVMAv (paper Algorithm 1): the result's ``w`` are the coefficients (p,) and ``b``
    the intercept; ``kw`` go to :func:`msvmav_iterate`, ``solver`` too, or "auto"
    (:func:`solve_auto`).

    With ``fit_intercept`` the constant 1 is appended to every x_i (implicitly, X is not
    copied), so the bias is a coordinate of w and part of ||w|| = 1, as in the paper. X with
    fewer rows than coordinates (sparse X: few of them, :func:`row_basis`) runs in the
    coordinates of the rows' span under ``update="auto"`` without a callback or start: on
    280 x 3001 dense rows, 0.08 s instead of 2.2 s in d x d systems, the same decision values
    to rounding.
    """
    X = as_float(X)
    reduce = kw.get("update", "auto") == "auto" and kw.get("callback") is None and kw.get("w0") is None
    basis = row_basis(X, fit_intercept) if reduce else None
    design = Design(X, y, intercept=fit_intercept) if basis is None else Design(basis.Xr, y)
    with blas_single_thread(design.d):
        if solver == "auto":
            res = solve_auto(design, sample_weight, alpha, beta, **kw)
        else:
            res = msvmav_iterate(design, sample_weight, alpha, beta, solver=solver, **kw)
    if basis is not None:
        res.w = basis.Q @ res.w
    if fit_intercept:
        res.w, res.b = res.w[:-1].copy(), float(res.w[-1])
    return res


def solve_auto(design, s, alpha, beta, *, return_best=False, max_iter=100, **kw) -> MSVMAvResult:
    """``solver="auto"``: the paper's iteration; where it creeps (unsettled, with its SV/theta^2
    still falling over the last :data:`CHANGE_WINDOW` iterations: :func:`creeping`) and
    ``return_best`` is set, Anderson acceleration of the same map continues from its best
    iterate, and the result is the best point of both runs (the accelerated run's start is that
    iterate, so never a worse one).

    The paper's run is judged after :data:`AUTO_CHECK` iterations (the paper's T): it stops
    there if it creeps, and otherwise (it wanders) goes on to ``max_iter`` -- the same run as
    without the check -- and is judged at its end. A run that creeps at AUTO_CHECK iterations
    would take hundreds more to settle (german: still falling at 1000); the accelerated one
    reaches the fixed point it creeps towards in tens.

    The result's history, ``n_iter`` and ``best_iter`` run over both: the paper's iterates
    0 ... n, then the accelerated evaluations after its start.
    """
    check = AUTO_CHECK if return_best and AUTO_CHECK < max_iter else 0
    res = msvmav_iterate(design, s, alpha, beta, return_best=return_best, solver="fixed-point", max_iter=max_iter,
                         judge_at=check, **kw)
    if not (return_best and creeping(res)):
        return res
    acc = msvmav_iterate(design, s, alpha, beta, return_best=True, solver="anderson", w0=res.w,
                         max_iter=max_iter, **kw)
    n = res.n_iter
    acc.history = {k: np.concatenate([res.history[k], v[1:]]) for k, v in acc.history.items()}
    acc.best_iter = res.best_iter if acc.best_iter == 0 else n + acc.best_iter
    acc.n_iter = n + acc.n_iter
    acc.n_products += res.n_products
    acc.n_refresh += res.n_refresh
    return acc
