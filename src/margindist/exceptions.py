"""Warnings that margindist estimators raise (import them to filter or catch them)."""

from __future__ import annotations

__all__ = ["DegenerateModelWarning", "FeatureScaleWarning", "KernelApproximationWarning"]


class DegenerateModelWarning(UserWarning):
    """A fitted model puts every training example in one class.

    The message names the likely cause: features on an extreme scale, regularisation too strong
    for the data, very imbalanced classes, or a solver stopped early.
    """


class FeatureScaleWarning(UserWarning):
    """The features are on a scale where the method's regularisation and solver step sizes are
    far from their intended range: rows of tiny or huge norm, or columns whose magnitudes differ
    by many orders. Standardise the features (``StandardScaler``, or ``MinMaxScaler`` /
    ``MaxAbsScaler`` for sparse data)."""


class KernelApproximationWarning(UserWarning):
    """``kernel_approximation="auto"`` fitted a kernel model on Nyström features whose
    landmarks capture the kernel poorly on the training rows (a large share of its trace left
    out: a kernel whose spectrum is flat, such as an RBF kernel on many informative
    dimensions), so the model may be markedly less accurate than the exact one. Pass more
    landmarks (an int ``kernel_approximation``) or a ``cache_size`` that holds the exact path."""
