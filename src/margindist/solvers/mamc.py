"""Closed forms of the maximal average margin classifier (Pelckmans, Suykens, De Moor 2007)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..kernels import KernelSpec, kernel_decision
from ._result import UnpackableResult


@dataclass(kw_only=True)
class MAMCResult(UnpackableResult):
    """The closed-form MAMC solution: ``coef`` (w, or the dual coefficients of the kernel form) and
    b (n_iter = 0, converged = True: nothing iterates). Unpacks as (coef, b)."""

    _unpack = ("coef", "b")
    coef: np.ndarray
    b: float
    n_iter: int = 0
    converged: bool = True


def _class_coefficients(y, sample_weight, bias):
    """Per-sample coefficients c with w = sum_i c_i phi(x_i).

    ``bias="midpoint"``: c_i = y_i s_i / S_{y_i} (difference of the weighted class means);
    ``bias="zero"``: c_i = y_i s_i / S (the average-margin direction sum_i y_i phi(x_i)).
    """
    s = np.asarray(sample_weight, dtype=np.float64)
    pos = y > 0
    if bias == "midpoint":
        return np.where(pos, s / s[pos].sum(), -s / s[~pos].sum())
    return y * s / s.sum()


def _midpoint_threshold(f0, y, sample_weight):
    """b = -(mean_+ f0 + mean_- f0) / 2 with weighted class means of the projections f0."""
    s = np.asarray(sample_weight, dtype=np.float64)
    pos = y > 0
    return -0.5 * (np.average(f0[pos], weights=s[pos]) + np.average(f0[~pos], weights=s[~pos]))


def mamc_linear(X, y, sample_weight, bias="midpoint"):
    """Linear MAMC. Returns a :class:`MAMCResult` with coef = w, ||w|| = 1 (w = 0 if the class
    means coincide)."""
    c = _class_coefficients(y, sample_weight, bias)
    w = np.asarray(X.T @ c, dtype=np.float64).ravel() if sp.issparse(X) else np.asarray(X, np.float64).T @ c
    norm = np.linalg.norm(w)
    if norm > 0:
        w = w / norm
    if bias == "zero":
        return MAMCResult(coef=w, b=0.0)
    f0 = np.asarray(X @ w, dtype=np.float64).ravel()
    return MAMCResult(coef=w, b=_midpoint_threshold(f0, y, sample_weight))


def mamc_kernel(spec: KernelSpec, X, y, sample_weight, bias="midpoint"):
    """Kernel MAMC (Parzen-window classifier). Returns a :class:`MAMCResult` (coef: the dual
    coefficients, unit RKHS norm).

    f(x) = sum_i a_i k(x_i, x) + b. O(m^2) kernel evaluations (in bounded blocks).
    """
    c = _class_coefficients(y, sample_weight, bias)
    Kc = np.asarray(X, np.float64) @ c if spec.kind == "precomputed" else kernel_decision(spec, X, X, c)
    norm = np.sqrt(max(float(c @ Kc), 0.0))
    if norm > 0:
        c, Kc = c / norm, Kc / norm
    b = 0.0 if bias == "zero" else _midpoint_threshold(Kc, y, sample_weight)
    return MAMCResult(coef=c, b=b)


__all__ = ["MAMCResult", "mamc_kernel", "mamc_linear"]
