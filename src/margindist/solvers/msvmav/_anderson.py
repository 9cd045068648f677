"""Anderson acceleration of the MSVMAv fixed-point iteration (``solver="anderson"``).

The paper's iteration is a fixed-point map on the unit sphere, w_k = T(w_{k-1}) (both closed-form
steps, the normalisation and the sign rule). With the data-dependent defaults every step turns w
by at most 1/512, so the plain iteration creeps towards its fixed point: thousands of iterations
on typical data (200k sparse rows: SV/theta^2 still falling after 1000). Anderson acceleration
(type II, Walker and Ni 2011) evaluates the same map but, instead of moving to T(x_k), moves to
the combination of the last iterates whose residuals g = T(x) - x cancel best in least squares:

    gamma   = argmin ||g_k - dG gamma||^2 + reg ||dG||_F^2 ||gamma||^2
    x_{k+1} = x_k + g_k - (dX + dG) gamma,   normalised, sign as in the paper

(dX, dG: the differences of the last :data:`MEMORY` iterates and residuals). A fixed point of T
is one of the accelerated sequence and conversely (g = 0), so both reach the same w (tested
against a long plain run and a generic root finder on g). The map is only piecewise smooth
(the active set jumps), so the memory is dropped and a plain step taken whenever a residual
grows past :data:`RESTART` times the smallest one since the last restart, and the run also
stops once its best SV/theta^2 has not improved in :data:`STALL` evaluations.

One compiled function serves the NumPy loop and the compiled dense loop; the caller owns the
state (:func:`anderson_state`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["MEMORY", "RESTART", "STALL", "anderson_state", "anderson_step"]

#: Differences kept for the least-squares mixing.
MEMORY = 10
#: Restart (drop the memory, take the plain step) when ||g_k|| exceeds this many times the
#: smallest residual since the last restart.
RESTART = 2.0
#: The accelerated run also stops when its best SV/theta^2 has not improved in this many
#: evaluations: near a fixed point where a few margins sit on the average the active set can
#: flicker, so the residual stalls above ``tol`` while the point no longer changes the model.
STALL = 50
#: Tikhonov weight of the mixing's normal equations, relative to their trace.
REG = 1e-10


@njit(cache=True)
def anderson_state(d):
    """(dX, dG, last, info, gmin): the differences (:data:`MEMORY`, d), the last iterate and
    residual (2, d), [differences held, ring head, have last], [smallest residual since the
    restart]."""
    return (np.zeros((MEMORY, d)), np.zeros((MEMORY, d)), np.zeros((2, d)), np.zeros(3, dtype=np.int64),
            np.full(1, np.inf))


@njit(cache=True)
def anderson_step(x, g, dX, dG, last, info, gmin, out):
    """The next point x_{k+1} (not normalised) into ``out`` from x_k and g_k = T(x_k) - x_k;
    updates the state in place. Returns whether the memory was restarted."""
    mem, d = dX.shape
    gn = np.sqrt(np.dot(g, g))
    restart = info[2] == 1 and gn > RESTART * gmin[0]
    if restart:
        info[0] = 0
        # the head stays: until the ring wraps, rows 0 ... held - 1 that the mixing reads keep
        # differences from before the restart (refilling from row 0, tried with
        # solver="anderson" on the KEEL sets: up to 20x the SV/theta^2 on ionosphere)
        info[2] = 0
        gmin[0] = np.inf
    gmin[0] = min(gmin[0], gn)
    if info[2] == 1:
        h = info[1]
        for j in range(d):
            dX[h, j] = x[j] - last[0, j]
            dG[h, j] = g[j] - last[1, j]
        info[1] = (h + 1) % mem
        info[0] = min(info[0] + 1, mem)
    last[0, :] = x
    last[1, :] = g
    info[2] = 1
    n = info[0]
    for j in range(d):
        out[j] = x[j] + g[j]
    if n == 0:
        return restart
    DG = dG[:n]
    M = DG @ DG.T
    tr = np.trace(M)
    if not tr > 0.0:
        return restart
    for a in range(n):
        M[a, a] += REG * tr
    gamma = np.linalg.solve(M, DG @ g)
    if not np.all(np.isfinite(gamma)):
        return restart
    for a in range(n):
        for j in range(d):
            out[j] -= gamma[a] * (dX[a, j] + dG[a, j])
    return restart
