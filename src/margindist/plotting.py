"""Figures of margin distributions (matplotlib).

The figure every margin-distribution paper shows is the cumulative distribution of the
normalised training (or test) margins of several classifiers on the same data: a curve that
rises late and steeply means large, concentrated margins.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["plot_margin_cdf"]


def _collect(models, X, y, labels):
    """(label, margins) pairs from fitted estimators or from margin arrays."""
    if isinstance(models, Mapping):
        items = list(models.items())
    elif isinstance(models, (list, tuple)):
        items = [(None, m) for m in models]
    else:
        items = [(None, models)]
    if labels is not None:
        labels = list(labels)
        if len(labels) != len(items):
            raise ValueError(f"{len(labels)} labels for {len(items)} models.")
        items = [(lab, m) for lab, (_, m) in zip(labels, items)]
    out = []
    for lab, m in items:
        if hasattr(m, "margins"):
            if X is None or y is None:
                raise ValueError("X and y are needed to compute the margins of fitted estimators.")
            values = m.margins(X, y)
            lab = lab if lab is not None else type(m).__name__
        else:
            values = np.asarray(m, dtype=np.float64).ravel()
            lab = lab if lab is not None else f"model {len(out) + 1}"
        if values.size == 0 or not np.all(np.isfinite(values)):
            raise ValueError(f"margins of {lab!r} are empty or not finite.")
        out.append((str(lab), np.asarray(values, dtype=np.float64)))
    return out


def plot_margin_cdf(models, X=None, y=None, *, labels=None, ax=None, title=None, show_stats=True,
                    xlim=None):
    """Cumulative distribution of normalised margins, one curve per model.

    Parameters
    ----------
    models : fitted estimator, list of them, dict label -> estimator, or dict label -> array
        Estimators must have ``margins(X, y)`` (every margindist estimator does); arrays are
        taken as margins already computed (e.g. for a scikit-learn model:
        ``margindist.metrics.normalized_margins(svc.decision_function(X), y, norm)``).
    X, y : data on which the margins of estimators are computed.
    labels : list of str, optional
        Curve labels (default: the dict keys or the class names).
    ax : matplotlib Axes, optional
        Drawn into; a new figure otherwise.
    title : str, optional
    show_stats : bool, default True
        Append the mean and the standard deviation of the margins to each label.
    xlim : (float, float), optional

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    curves = _collect(models, X, y, labels)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 4.0))
    for lab, values in curves:
        v = np.sort(values)
        cdf = np.arange(1, v.size + 1) / v.size
        text = f"{lab} (mean {v.mean():.3g}, std {v.std():.3g})" if show_stats else lab
        ax.step(v, cdf, where="post", label=text)
    ax.axvline(0.0, color="0.6", linewidth=0.8, linestyle=":")
    ax.set_xlabel("normalised margin  y f(x) / ||w||")
    ax.set_ylabel("cumulative frequency")
    ax.set_ylim(0.0, 1.02)
    if xlim is not None:
        ax.set_xlim(*xlim)
    if title:
        ax.set_title(title)
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(True, alpha=0.3)
    return ax
