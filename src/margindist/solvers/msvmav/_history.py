"""Iteration bookkeeping shared by every MSVMAv path: the per-iterate history, the best
iterate by SV / theta^2 and the run's result (:class:`MSVMAvResult`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from .._result import SolverResult

__all__ = ["HISTORY_FIELDS", "History", "MSVMAvResult", "creeping", "creeps", "creeps_at", "make_result",
           "still_improving"]

#: Columns of the per-iterate history (row k describes iterate w_k; row 0 the start w_0).
HISTORY_FIELDS = ("theta", "semivariance", "bound", "n_active", "n_changes", "step", "update")
#: Iterations at the end of a run in which an active-set change means "not settled".
CHANGE_WINDOW = 5
#: Seconds between the progress lines a long run logs at INFO level (verbose=1).
PROGRESS_SECONDS = 30.0


@njit(cache=True)
def still_improving(bound, window=CHANGE_WINDOW, rtol=1e-4) -> bool:
    """Whether the last ``window`` iterates lowered the smallest SV/theta^2 by more than ``rtol``."""
    before = bound[: len(bound) - window]
    return before.size == 0 or bound[len(bound) - window:].min() < before.min() * (1.0 - rtol)


@njit(cache=True)
def creeps(n_changes, bound) -> bool:
    """The history of iterates 0 ... k (its active-set changes and SV/theta^2) of a run that has
    not met tol: unsettled (A changed in the last :data:`CHANGE_WINDOW` iterations) with its
    SV/theta^2 still falling. Judged by the loops at ``judge_at`` and by :func:`creeping`."""
    return bool(np.any(n_changes[max(0, len(n_changes) - CHANGE_WINDOW):] > 0)) and still_improving(bound)


@njit(cache=True)
def creeps_at(rows, k) -> bool:
    """:func:`creeps` on the history rows 0 ... k of a running loop (the columns of
    :data:`HISTORY_FIELDS`: changes in column 4, SV/theta^2 in column 2)."""
    return creeps(rows[: k + 1, 4], rows[: k + 1, 2])


def creeping(res) -> bool:
    """A run that ended at max_iter unsettled with its SV/theta^2 still falling: it creeps
    towards a fixed point it has not reached (rather than wandering past its best iterate)."""
    return not res.converged and creeps(res.history["n_changes"], res.history["bound"])


@dataclass(kw_only=True)
class MSVMAvResult(SolverResult):
    """How an MSVMAv run ended (the solver reports; the estimator decides what to warn about).

    Attributes
    ----------
    n_iter : int
        Iterations run (iterates w_1 ... w_n_iter after the start w_0).
    converged : bool
        ``tol`` was met: an iteration left the active set unchanged and moved w by at most tol.
    history : dict of ndarray
        One row per iterate 0 ... n_iter, fields :data:`HISTORY_FIELDS`.
    w : ndarray
        The returned iterate (the last one, or the best with ``return_best``). From
        :func:`~margindist.solvers.msvmav.msvmav_iterate`: w with the bias coordinate; from
        :func:`~margindist.solvers.msvmav.msvmav_linear`: the coefficients without it; from
        :func:`~margindist.solvers.msvmav.msvmav_kernel`: the dual coefficients a.
    b : float
        Intercept of the front ends (0 from ``msvmav_iterate``).
    best_iter : int
        The iterate with the smallest SV / theta^2.
    changing : bool
        Not converged and the active set still changed in the last :data:`CHANGE_WINDOW`
        iterations (the iterate has not settled).
    family : str
        Which path ran: "compiled", "direct", "cg" or "capacitance".
    n_refresh : int
        Explicit inverses recomputed from scratch after a failed round-off check.
    n_products : int
        Products through X of the conjugate-gradient scheme; for the compiled dense loop, its
        full passes over X for the margins (the other iterations recompute only the rows near
        the average margin).
    norm_sq : float or None
        Kernel path: a^T K a without the intercept's constant kernel (None elsewhere).
    """

    history: dict = field(default_factory=dict)
    w: np.ndarray
    b: float = 0.0
    best_iter: int = 0
    changing: bool = False
    family: str = ""
    n_refresh: int = 0
    n_products: int = 0
    norm_sq: float | None = None


class History:
    """Per-iterate history (row k describes iterate k; fields :data:`HISTORY_FIELDS`), the
    best iterate by SV / theta^2 and the run's summary, for the loops written in NumPy."""

    def __init__(self, max_iter, s, S):
        self.s, self.S = s, S
        self.rows = np.zeros((max_iter + 1, 6))
        self.rows[:, 5] = np.nan
        self.schemes = ["init"]
        self.best_k, self.best = 0, None
        self._last_progress = time.monotonic()

    def record(self, k, m, theta, A, changes, w, step=np.nan, scheme=None):
        short = np.maximum(theta - m, 0.0)
        self._store(k, theta, float(self.s @ (short * short)), A, changes, w, step, scheme)

    def _store(self, k, theta, sv_sum, A, changes, w, step, scheme):
        sv = sv_sum / self.S
        bound = sv / theta**2 if theta > 0 else np.inf
        self.rows[k] = (theta, sv, bound, np.count_nonzero(A), changes, step)
        if scheme is not None:
            self.schemes.append(scheme)
        if k == 0 or bound < self.rows[self.best_k, 2]:
            self.best_k, self.best = k, w.copy()

    def advance(self, k, m, theta, prevA, w, step, scheme, log, tol, screened=None):
        """Record iterate k (margins m, average margin theta); returns (A_k, tol met).
        ``screened``: (A_k, sum_{A_k} s_i (theta - m_i)^2) from :mod:`._screen` instead of m."""
        A = m < theta if screened is None else screened[0]
        changes = int(np.count_nonzero(A != prevA))
        if screened is None:
            self.record(k, m, theta, A, changes, w, step, scheme)
        else:
            self._store(k, theta, screened[1], A, changes, w, step, scheme)
        if log is not None and log.isEnabledFor(10):
            log.debug("MSVMAv iteration %d (%s): theta=%.6g SV/theta^2=%.6g |A|=%d changes=%d |dw|=%.3g",
                      k, scheme, theta, self.rows[k, 2], self.rows[k, 3], changes, step)
        elif log is not None and time.monotonic() - self._last_progress >= PROGRESS_SECONDS:
            self._last_progress = time.monotonic()
            log.info("MSVMAv iteration %d of at most %d: SV/theta^2=%.6g (best %.6g at %d), |A|=%d, "
                     "changes=%d", k, self.rows.shape[0] - 1, self.rows[k, 2], self.rows[self.best_k, 2],
                     self.best_k, self.rows[k, 3], changes)
        return A, tol > 0 and changes == 0 and step <= tol

    def result(self, w, n_iter, converged, return_best, **extra) -> MSVMAvResult:
        return make_result(self.rows[: n_iter + 1], self.schemes, w, self.best, self.best_k, n_iter,
                           converged, return_best, **extra)


def make_result(rows, schemes, w, best_w, best_k, n_iter, converged, return_best, **extra) -> MSVMAvResult:
    """The run's result from the history rows (theta, SV, bound, |A|, changes, step)."""
    history = {f: rows[:, j].copy() for j, f in enumerate(HISTORY_FIELDS[:3])}
    history["n_active"] = rows[:, 3].astype(np.int64)
    history["n_changes"] = rows[:, 4].astype(np.int64)
    history["step"] = rows[:, 5].copy()
    history["update"] = np.array(schemes)
    # a run ends at tol or at max_iter; "changing": max_iter with A still moving at the end
    window = history["n_changes"][-CHANGE_WINDOW:]
    return MSVMAvResult(w=best_w if return_best else w, n_iter=int(n_iter), history=history,
                        best_iter=int(best_k), converged=bool(converged),
                        changing=not converged and bool(np.any(window > 0)), **extra)
