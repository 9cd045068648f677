"""The one result type every solver returns.

A solver returns an instance of :class:`SolverResult` or of a dataclass derived from it: the
two fields every caller reads (how many iterations ran and whether the stopping rule was met)
sit on the base, and each solver adds the arrays of its own problem as further keyword-only
fields (``w`` and ``b`` for a primal solver, ``a`` for a dual one, ``history`` where the run
keeps one). Tuples and dicts are not used as results, so a caller reads ``res.n_iter`` the
same way for every method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

__all__ = ["SolverResult", "UnpackableResult"]


@dataclass(kw_only=True)
class SolverResult:
    """How a solver run ended.

    Attributes
    ----------
    n_iter : int
        Iterations (epochs, outer steps, updates: each solver's docstring says which) run.
    converged : bool
        Whether the solver's stopping rule was met before its iteration limit.
    history : ndarray
        Per-iteration trace the solver keeps (objective, gap or step; empty when none).
    """

    n_iter: int
    converged: bool
    history: np.ndarray = field(default_factory=lambda: np.empty(0))


@dataclass(kw_only=True)
class UnpackableResult(SolverResult):
    """A result that also unpacks and indexes, in the order of ``_unpack``, as the tuple its solver
    returned before results had a type (``w, b, n_iter = odm_newton(...)`` and ``res[0]`` keep
    working); new code reads the fields by name."""

    _unpack: ClassVar[tuple[str, ...]] = ()

    def _as_tuple(self):
        return tuple(getattr(self, name) for name in self._unpack)

    def __iter__(self):
        return iter(self._as_tuple())

    def __getitem__(self, index):
        return self._as_tuple()[index]

    def __len__(self):
        return len(self._unpack)
