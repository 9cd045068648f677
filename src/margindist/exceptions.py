"""Warnings that margindist estimators raise (import them to filter or catch them)."""

from __future__ import annotations

__all__ = ["DegenerateModelWarning", "FeatureScaleWarning"]


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
