"""Margins and statistics of the margin distribution.

The margin of a binary classifier f(x) = <w, phi(x)> + b on a labelled example is
y f(x) / ||w|| (``||w||`` the Euclidean norm for linear models, the RKHS norm
sqrt(a^T K a) for kernel expansions; the intercept is not part of the norm). Every
margindist estimator computes these for you with ``est.margins(X, y)``; the functions
here work on any array of margins, e.g. from a scikit-learn model.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "normalized_margins",
    "margin_stats",
    "semivariance",
    "msvmav_bound_term",
    "multiclass_margins",
]


def _as_margins(margins) -> np.ndarray:
    m = np.asarray(margins, dtype=np.float64).ravel()
    if m.size == 0:
        raise ValueError("margins is empty: need at least one margin.")
    if not np.all(np.isfinite(m)):
        raise ValueError("margins contain NaN or infinity.")
    return m


def normalized_margins(decision_values, y, norm=1.0, *, pos_label=None) -> np.ndarray:
    """Binary margins y_i f(x_i) / ||w||.

    Parameters
    ----------
    decision_values : array-like of shape (n,)
        f(x_i).
    y : array-like of shape (n,)
        Labels. Either {-1, +1} or two distinct labels, ``pos_label`` (default: the larger of
        the two, scikit-learn's convention) mapped to +1.
    norm : float
        ||w|| (positive). Use 1.0 for raw functional margins.
    """
    f = np.asarray(decision_values, dtype=np.float64).ravel()
    y = np.asarray(y).ravel()
    if f.shape != y.shape:
        raise ValueError(f"decision_values and y differ in length: {f.shape[0]} vs {y.shape[0]}.")
    if not norm > 0 or not np.isfinite(norm):
        raise ValueError(f"norm must be a positive finite number; got {norm!r}.")
    labels = np.unique(y)
    if labels.size > 2:
        raise ValueError(f"normalized_margins is binary; y has {labels.size} classes.")
    if pos_label is None:
        pos_label = labels[-1]
    y_pm = np.where(y == pos_label, 1.0, -1.0)
    return y_pm * f / norm


def multiclass_margins(scores, y_index) -> np.ndarray:
    """Multi-class margins: score of the true class minus the best other score.

    Parameters
    ----------
    scores : array of shape (n, K)
        Normalised per-class scores.
    y_index : int array of shape (n,)
        Column of the true class.
    """
    scores = np.asarray(scores, dtype=np.float64)
    y_index = np.asarray(y_index, dtype=np.intp)
    rows = np.arange(scores.shape[0])
    true = scores[rows, y_index]
    others = scores.copy()
    others[rows, y_index] = -np.inf
    return true - others.max(axis=1)


def semivariance(margins, *, sample_weight=None) -> float:
    """Semi-variance below the mean: (1/n) sum_i (theta - m_i)_+^2 with theta the mean margin.

    This is SV(h) of Qian et al. (IJCAI 2022), the mean squared shortfall of the margins
    below their average (normalised by all n samples, not only those below the mean).
    """
    m = _as_margins(margins)
    w = np.ones_like(m) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).ravel()
    theta = np.average(m, weights=w)
    return float(np.average(np.maximum(theta - m, 0.0) ** 2, weights=w))


def msvmav_bound_term(margins, *, sample_weight=None) -> float:
    """The data-dependent term SV(h) / theta_h^2 of the MSVMAv bound (Qian et al. 2022, Thm. 1).

    theta_h is the average margin, SV(h) the semi-variance below it. Smaller is better; the
    term is scale-invariant (multiplying all margins by c > 0 leaves it unchanged). Returns
    ``inf`` when the average margin is not positive (the bound is vacuous there).
    """
    m = _as_margins(margins)
    w = np.ones_like(m) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).ravel()
    theta = np.average(m, weights=w)
    if theta <= 0:
        return float("inf")
    return semivariance(m, sample_weight=w) / theta**2


def margin_stats(margins, quantiles=(0.05, 0.25, 0.5, 0.75, 0.95), *, sample_weight=None) -> dict:
    """Summary statistics of a margin distribution.

    Returns
    -------
    dict with keys ``n``, ``min``, ``max``, ``mean``, ``std``, ``variance`` (population
    variance, 1/n), ``semivariance`` (see :func:`semivariance`), ``bound_term`` (SV/theta^2,
    see :func:`msvmav_bound_term`), ``frac_negative`` (training error for training margins)
    and ``q<p>`` for each requested quantile (e.g. ``q0.5`` the median). Without weights the
    quantiles interpolate linearly (numpy's default); with ``sample_weight`` they are the
    weighted inverted-CDF quantiles (the smallest margin whose cumulative weight reaches q),
    which equal the same rule on margins repeated by integer weights.
    """
    m = _as_margins(margins)
    w = np.ones_like(m) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).ravel()
    mean = float(np.average(m, weights=w))
    var = float(np.average((m - mean) ** 2, weights=w))
    out = {
        "n": int(m.size),
        "min": float(m.min()),
        "max": float(m.max()),
        "mean": mean,
        "std": var**0.5,
        "variance": var,
        "semivariance": semivariance(m, sample_weight=w),
        "bound_term": msvmav_bound_term(m, sample_weight=w),
        "frac_negative": float(np.average(m < 0, weights=w)),
    }
    order = np.argsort(m, kind="stable")
    cum = np.cumsum(w[order])
    for q in quantiles:
        if not 0 <= q <= 1:
            raise ValueError(f"quantiles must lie in [0, 1]; got {q}.")
        if sample_weight is None:
            out[f"q{q:g}"] = float(np.quantile(m, q))
        else:
            k = min(int(np.searchsorted(cum, q * cum[-1], side="left")), m.size - 1)
            out[f"q{q:g}"] = float(m[order][k])
    return out
