"""Figures of margin distributions (matplotlib).

The figure every margin-distribution paper shows is the cumulative distribution of the
normalised training (or test) margins of several classifiers on the same data: a curve that
rises late and steeply means large, concentrated margins.

Two interfaces draw it:

* :func:`plot_margin_cdf`: several models in one call;
* :class:`MarginDistributionDisplay`: one curve per call, in scikit-learn's Display style
  (like :class:`sklearn.metrics.RocCurveDisplay`); pass the same ``ax`` to put several models
  on one axis.

Both take any fitted classifier with a ``decision_function`` -- margindist estimators,
scikit-learn linear models, ``SVC`` / ``NuSVC`` with any kernel, or a ``Pipeline`` ending in
one (see :func:`margindist.metrics.estimator_margins`) -- and place the legend outside the
data area, to the right of the axes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .metrics import (
    _estimator_name,
    _is_estimator,
    estimator_margins,
    normalized_margins,
)

__all__ = ["MarginDistributionDisplay", "plot_margin_cdf"]

_XLABEL = "normalised margin  y f(x) / ||w||"
_YLABEL = "cumulative frequency"
_ZERO_LINE_GID = "margindist-zero-margin"


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
        if _is_estimator(m):
            if X is None or y is None:
                raise ValueError("X and y are needed to compute the margins of fitted estimators.")
            values = estimator_margins(m, X, y)
            lab = lab if lab is not None else _estimator_name(m)
        else:
            values = np.asarray(m, dtype=np.float64).ravel()
            lab = lab if lab is not None else f"model {len(out) + 1}"
        if values.size == 0 or not np.all(np.isfinite(values)):
            raise ValueError(f"margins of {lab!r} are empty or not finite.")
        out.append((str(lab), np.asarray(values, dtype=np.float64)))
    return out


def _new_axes():
    import matplotlib.pyplot as plt

    # constrained layout keeps the legend outside the axes inside the figure when saved
    _, ax = plt.subplots(figsize=(7.5, 4.0), layout="constrained")
    return ax


def _cdf(values):
    v = np.sort(np.asarray(values, dtype=np.float64).ravel())
    return v, np.arange(1, v.size + 1) / v.size


def _stats_label(name, values, show_stats):
    if not show_stats:
        return name
    return f"{name} (mean {np.mean(values):.3g}, std {np.std(values):.3g})"


def _decorate(ax, title=None):
    """Axis labels, the zero-margin line (once per axes), grid."""
    if not any(line.get_gid() == _ZERO_LINE_GID for line in ax.get_lines()):
        ax.axvline(0.0, color="0.6", linewidth=0.8, linestyle=":", gid=_ZERO_LINE_GID)
    ax.set_xlabel(_XLABEL)
    ax.set_ylabel(_YLABEL)
    ax.set_ylim(0.0, 1.02)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)


def _outside_legend(ax):
    """A legend of all labelled curves, anchored to the right of the axes (outside the data)."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small",
                     frameon=False)


def plot_margin_cdf(models, X=None, y=None, *, labels=None, ax=None, title=None, show_stats=True,
                    xlim=None):
    """Cumulative distribution of normalised margins, one curve per model.

    Parameters
    ----------
    models : fitted estimator, list of them, dict label -> estimator, or dict label -> array
        Any fitted classifier with ``decision_function`` (margindist estimators, scikit-learn
        linear models, ``SVC`` / ``NuSVC``, a ``Pipeline`` ending in one; margins by
        :func:`margindist.metrics.estimator_margins`); arrays are taken as margins already
        computed.
    X, y : data on which the margins of estimators are computed (training or test data; the
        caller chooses).
    labels : list of str, optional
        Curve labels (default: the dict keys or the class names).
    ax : matplotlib Axes, optional
        Drawn into; a new figure (constrained layout, room for the legend) otherwise.
    title : str, optional
    show_stats : bool, default True
        Append the mean and the standard deviation of the margins to each label.
    xlim : (float, float), optional

    Returns
    -------
    matplotlib.axes.Axes
        The legend sits outside the axes, to their right; save with
        ``ax.figure.savefig("margins.pdf", bbox_inches="tight")`` (PDF, SVG, PNG by extension).
    """
    curves = _collect(models, X, y, labels)
    if ax is None:
        ax = _new_axes()
    for lab, values in curves:
        v, cdf = _cdf(values)
        ax.step(v, cdf, where="post", label=_stats_label(lab, v, show_stats))
    _decorate(ax, title)
    if xlim is not None:
        ax.set_xlim(*xlim)
    _outside_legend(ax)
    return ax


class MarginDistributionDisplay:
    """Cumulative distribution of normalised margins, in scikit-learn's Display style.

    Build it with :meth:`from_estimator` (a fitted classifier and data) or
    :meth:`from_predictions` (labels and binary decision values); both draw at once. Call them
    again with the same ``ax`` to put several models on one axis; the legend is kept outside
    the data area, to the right of the axes.

    Parameters
    ----------
    margins : array-like of shape (n_samples,)
        Normalised margins (negative margins are errors).
    name : str, optional
        Legend label of the curve.

    Attributes
    ----------
    margins_ : ndarray of shape (n_samples,)
        The margins, as given.
    name : str or None
        The legend label.
    line_ : matplotlib Line2D
        The curve (after :meth:`plot`).
    ax_ : matplotlib Axes
        The axes drawn into.
    figure_ : matplotlib Figure
        The figure of ``ax_``.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklearn.svm import SVC, LinearSVC
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> d = MarginDistributionDisplay.from_estimator(LinearSVC().fit(X, y), X, y)
    >>> d = MarginDistributionDisplay.from_estimator(SVC().fit(X, y), X, y, ax=d.ax_)
    >>> d.savefig("margins.pdf")  # doctest: +SKIP
    """

    def __init__(self, *, margins, name=None):
        m = np.asarray(margins, dtype=np.float64).ravel()
        if m.size == 0:
            raise ValueError("margins is empty: need at least one margin.")
        if not np.all(np.isfinite(m)):
            raise ValueError("margins contain NaN or infinity.")
        self.margins_ = m
        self.name = name

    def plot(self, ax=None, *, name=None, show_stats=True, **kwargs):
        """Draw the cumulative distribution of the margins.

        Parameters
        ----------
        ax : matplotlib Axes, optional
            Drawn into (add a curve to an existing plot); a new figure otherwise.
        name : str, optional
            Legend label; default ``self.name``.
        show_stats : bool, default True
            Append the mean and the standard deviation of the margins to the label.
        **kwargs
            Passed to :meth:`matplotlib.axes.Axes.step` (``color``, ``linestyle``, ``label``
            -- a ``label`` is used verbatim ...).

        Returns
        -------
        self
        """
        if ax is None:
            ax = _new_axes()
        name = self.name if name is None else name
        v, cdf = _cdf(self.margins_)
        if "label" not in kwargs:
            kwargs["label"] = _stats_label(name, v, show_stats) if name is not None else None
        (self.line_,) = ax.step(v, cdf, where="post", **kwargs)
        _decorate(ax)
        if any(not lab.startswith("_") for lab in ax.get_legend_handles_labels()[1]):
            _outside_legend(ax)
        self.ax_ = ax
        self.figure_ = ax.figure
        return self

    @classmethod
    def from_estimator(cls, estimator, X, y, *, name=None, norm=None, ax=None, **kwargs):
        """Plot the margin distribution of a fitted classifier on (X, y).

        Parameters
        ----------
        estimator : fitted classifier or Pipeline
            A margindist estimator, a scikit-learn classifier with ``coef_`` (``LinearSVC``,
            ``LogisticRegression`` ...), ``SVC`` / ``NuSVC`` with any kernel, or a
            ``Pipeline`` ending in one (see :func:`margindist.metrics.estimator_margins`).
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data (the margins the learner optimised) or test data (how they
            generalise): the caller chooses.
        y : array-like of shape (n_samples,)
            True labels.
        name : str, optional
            Legend label; default the estimator's class name (for a Pipeline
            ``Pipeline(StandardScaler, LinearSVC)``).
        norm : float or array-like, optional
            Overrides the model's weight norm (needed for models that have none).
        ax : matplotlib Axes, optional
            Pass the ``ax_`` of an earlier display to draw several models on one axis.
        **kwargs
            Passed to :meth:`plot` (``show_stats``) and on to matplotlib's ``step``.

        Returns
        -------
        MarginDistributionDisplay
        """
        margins = estimator_margins(estimator, X, y, norm=norm)
        name = _estimator_name(estimator) if name is None else name
        return cls(margins=margins, name=name).plot(ax=ax, **kwargs)

    @classmethod
    def from_predictions(cls, y_true, y_score, *, norm=1.0, pos_label=None, name=None, ax=None, **kwargs):
        """Plot the margin distribution of binary decision values.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
            True labels (two classes).
        y_score : array-like of shape (n_samples,)
            Decision values f(x); positive means ``pos_label``.
        norm : float, default 1.0
            ||w||; the margins are y f(x) / norm (1.0: functional margins).
        pos_label : label, optional
            The label mapped to +1; default the larger of the two labels.
        name : str, optional
            Legend label; default ``"model"``.
        ax : matplotlib Axes, optional
            Pass the ``ax_`` of an earlier display to draw several models on one axis.
        **kwargs
            Passed to :meth:`plot` and on to matplotlib's ``step``.

        Returns
        -------
        MarginDistributionDisplay
        """
        margins = normalized_margins(y_score, y_true, norm=norm, pos_label=pos_label)
        return cls(margins=margins, name="model" if name is None else name).plot(ax=ax, **kwargs)

    def savefig(self, fname, **kwargs):
        """Save the figure; the format follows the extension (``.pdf``, ``.svg``, ``.png`` ...).

        ``bbox_inches="tight"`` is the default so that the legend outside the axes is kept;
        other keyword arguments go to :meth:`matplotlib.figure.Figure.savefig`.
        """
        if not hasattr(self, "figure_"):
            raise ValueError("Nothing drawn yet: call plot() first.")
        kwargs.setdefault("bbox_inches", "tight")
        self.figure_.savefig(fname, **kwargs)
        return fname
