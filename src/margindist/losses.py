"""Margin losses and their derivatives, as plain NumPy functions of the margin.

Each loss is written as a function of the margin z = y f(x) (or of the argument the method
uses, as documented per function) with its first derivative beside it, so that solvers and
tests share one definition. Vectorised; no estimator objects.
"""

from __future__ import annotations

import numpy as np

__all__: list[str] = []
