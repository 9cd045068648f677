"""Margin losses and their derivatives, as plain NumPy functions of the margin.

Each loss is written as a function of the margin z = y f(x) (or of the argument the method
uses, as documented per function) with its first derivative beside it, so that solvers and
tests share one definition. Vectorised; no estimator objects.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__: list[str] = []


# ---------------------------------------------------------------------------- smoothed hinge
@njit(cache=True)
def smooth_hinge_scalar(t, delta):
    """(g(t), g'(t)) of the smoothed hinge of M3SVM at one point: the one definition, used by
    :func:`smooth_hinge`, :func:`smooth_hinge_derivative` and the M3SVM solver's compiled data term.

    g(t) = (t + r) / 2 and g'(t) = (1 + t / r) / 2 with r = sqrt(t^2 + delta^2); for t < 0 written
    as g = delta^2 / (2 (r - t)) and g' = g / r, free of the cancellation of t + |t|. g' = 1/2 at
    t = delta = 0.
    """
    r = math.hypot(t, delta)
    if t < 0:
        g = 0.5 * delta * delta / (r - t)
        return g, g / r
    return 0.5 * (t + r), 0.5 * (1.0 + t / r) if r > 0 else 0.5


@njit(cache=True)
def _smooth_hinge_array(t, delta, out_g, out_d):
    for j in range(t.shape[0]):
        out_g[j], out_d[j] = smooth_hinge_scalar(t[j], delta)


def _smooth_hinge_both(t, delta):
    t = np.asarray(t, dtype=np.float64)
    flat = np.ascontiguousarray(t).ravel()
    g = np.empty_like(flat)
    gd = np.empty_like(flat)
    _smooth_hinge_array(flat, float(delta), g, gd)
    return g.reshape(t.shape), gd.reshape(t.shape)


def smooth_hinge(t, delta):
    """The smoothed hinge of M3SVM (Nie, Hao, Wang 2024, Eq. 25): g(t) = (t + sqrt(t^2 + delta^2)) / 2.

    A function of t = 1 - margin (the hinge is max(0, t)). Convex, smooth for delta > 0, and
    0 <= g(t) - max(0, t) <= delta / 2 (the gap is largest at t = 0). For t < 0 it is evaluated as
    delta^2 / (2 (sqrt(t^2 + delta^2) - t)), which avoids the cancellation of t + |t|
    (:func:`smooth_hinge_scalar`).
    """
    return _smooth_hinge_both(t, delta)[0]


def smooth_hinge_derivative(t, delta):
    """g'(t) = (1 + t / sqrt(t^2 + delta^2)) / 2 in [0, 1], the derivative of :func:`smooth_hinge`.

    For t < 0 written as delta^2 / (2 r (r - t)), r = sqrt(t^2 + delta^2), free of cancellation.
    """
    return _smooth_hinge_both(t, delta)[1]


__all__ += ["smooth_hinge", "smooth_hinge_derivative", "smooth_hinge_scalar"]


# ---------------------------------------------------------------------------------------------
# Catoni-type influence functions (margin pursuit, Holland 2019)
#
# psi is the influence function, rho its integral (rho' = psi, rho(0) = 0); the margin-pursuit
# loss of a margin m is  s * rho((gamma - m) / s).

#: Where the Catoni-Giulini psi stops being cubic and becomes constant.
CATONI_KNOT = float(np.sqrt(2.0))
#: sup |psi| = Lipschitz constant of rho for the Catoni-Giulini pair: 2 sqrt(2) / 3.
CATONI_BOUND = 2.0 * float(np.sqrt(2.0)) / 3.0


def catoni_psi(u):
    """Catoni-Giulini influence function.

    psi(u) = u - u^3/6 for |u| <= sqrt(2), else (2 sqrt(2)/3) sign(u): odd, non-decreasing,
    bounded by 2 sqrt(2)/3, 1-Lipschitz (psi'(u) = 1 - u^2/2 in [0, 1] on the cubic part).
    """
    u = np.asarray(u, dtype=np.float64)
    a = np.abs(u)  # evaluated on |u| and signed, so that psi is exactly odd in floating point
    return np.sign(u) * np.where(a <= CATONI_KNOT, a - a * a * a / 6.0, CATONI_BOUND)


def catoni_rho(u):
    """Integral of :func:`catoni_psi`: the Catoni-Giulini rho.

    rho(u) = u^2/2 - u^4/24 for |u| <= sqrt(2), else (2 sqrt(2)/3) |u| - 1/2. Even, convex,
    1-smooth, (2 sqrt(2)/3)-Lipschitz; rho(0) = 0 and rho(sqrt 2) = 5/6 (both pieces agree
    there, as do their derivatives).
    """
    u = np.asarray(u, dtype=np.float64)
    a = np.abs(u)
    inside = a <= CATONI_KNOT
    return np.where(inside, a * a / 2.0 - a**4 / 24.0, CATONI_BOUND * a - 0.5)


def _log_wide(a):
    """log(1 + a + a^2/2) for a >= 0 without overflow for huge a."""
    a = np.asarray(a, dtype=np.float64)
    big = a > 1e8
    safe = np.where(big, 1.0, a)
    small_branch = np.log1p(safe + safe * safe / 2.0)
    abig = np.where(big, a, 1.0)
    big_branch = 2.0 * np.log(abig) - np.log(2.0) + np.log1p((2.0 / abig) * (1.0 + 1.0 / abig))
    return np.where(big, big_branch, small_branch)


def catoni_wide_psi(u):
    """Catoni's wide influence function psi_w(u) = sign(u) log(1 + |u| + u^2/2).

    Odd, increasing, unbounded but logarithmic, 1-Lipschitz (psi_w'(a) = (1 + a) / (1 + a +
    a^2/2) in (0, 1]).
    """
    u = np.asarray(u, dtype=np.float64)
    return np.sign(u) * _log_wide(np.abs(u))


def catoni_wide_rho(u):
    """Integral of :func:`catoni_wide_psi` (even, convex, 1-smooth).

    With a = |u|: rho_w(u) = (1 + a) log(1 + a + a^2/2) - 2a + 2 arctan(a / (2 + a)), a form
    without the catastrophic cancellation of the textbook antiderivative; below a = 1e-3 the
    series a^2/2 - a^4/24 + a^5/40 - a^6/120 is used (error below 1e-21 there).
    """
    a = np.abs(np.asarray(u, dtype=np.float64))
    closed = (1.0 + a) * _log_wide(a) - 2.0 * a + 2.0 * np.arctan(a / (2.0 + a))
    a2 = a * a
    series = a2 / 2.0 - a2 * a2 / 24.0 + a2 * a2 * a / 40.0 - a2 * a2 * a2 / 120.0
    return np.where(a < 1e-3, series, closed)


__all__ += ["CATONI_BOUND", "CATONI_KNOT", "catoni_psi", "catoni_rho", "catoni_wide_psi",
            "catoni_wide_rho"]
