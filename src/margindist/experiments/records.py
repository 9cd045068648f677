"""The data model of an experiment: its definition, its tasks and their result records.

* :class:`MethodRun`: one column of a table (a registry method with its kernel, grid and
  fixed settings);
* :class:`Experiment`: a protocol, datasets, method runs, the reference method, the paper's
  numbers (a preset, or a ``margindist bench`` grid);
* :class:`Task`: one unit of work, a method run on one split of one dataset (pure data: a
  worker process or a Dask worker runs it from this description alone);
* :class:`TaskRecord`: the result of a task as the result store keeps it (score, times,
  chosen parameters, margins and other details in ``info``), with :meth:`TaskRecord.to_dict`
  / :meth:`TaskRecord.from_dict` for the store's row format.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from .. import __version__
from ..search import Scaled, grid_to_dict
from .protocols import DatasetSpec, Protocol, stable_hash
from .stats import TESTS

__all__ = ["Experiment", "MethodRun", "Task", "TaskRecord", "config_hash", "fmt_value", "make_task"]


def fmt_value(x) -> str:
    """A parameter value as the reports show it (powers of two as ``2^k``)."""
    if isinstance(x, float) and x > 0:
        k = np.log2(x)
        if abs(k - round(k)) < 1e-12 and abs(k) >= 2:
            return f"2^{int(round(k))}"
        return f"{x:.4g}"
    return str(x)


@dataclass(frozen=True)
class MethodRun:
    """One column of a table: a registry method with its kernel, grid and fixed settings.

    Parameters
    ----------
    method : str
        Registry name (see :func:`margindist.experiments.registry.list_methods`).
    label : str, optional
        Column name (default: ``method``); unique within an experiment.
    kernel : str
        "linear" or "rbf" (...), passed to the estimator.
    grid : dict
        Parameter -> list of values or :class:`~margindist.search.Scaled`,
        searched by CV on the training part (in order; last parameter fastest).
    fixed : dict
        Parameters set for every fit.
    overrides : dict
        Dataset name -> extra fixed parameters for that dataset (e.g. a large-scale solver).
    exclude : dict
        Dataset name -> reason: datasets this run skips.
    note : str
        Shown in the report.
    """

    method: str
    label: str | None = None
    kernel: str = "linear"
    grid: dict = field(default_factory=dict)
    fixed: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    exclude: dict = field(default_factory=dict)
    note: str = ""

    @property
    def name(self) -> str:
        return self.label or self.method

    def fixed_for(self, dataset: str) -> dict:
        return {**self.fixed, **self.overrides.get(dataset, {})}

    def to_dict(self, dataset: str) -> dict:
        return {
            "method": self.method,
            "label": self.name,
            "kernel": self.kernel,
            "grid": grid_to_dict(self.grid),
            "fixed": sorted(self.fixed_for(dataset).items()),
        }

    def grid_size(self) -> int:
        """Number of grid points (1 without a search)."""
        return int(np.prod([len(v.factors) if isinstance(v, Scaled) else len(v) for v in self.grid.values()]))

    def describe_grid(self) -> str:
        parts = []
        for k, v in self.grid.items():
            if isinstance(v, Scaled):
                parts.append(f"{k} in {v}")
            else:
                parts.append(f"{k} in {{{', '.join(fmt_value(x) for x in v)}}}")
        fixed = ", ".join(f"{k}={fmt_value(v)}" for k, v in self.fixed.items())
        text = "; ".join(parts) if parts else "no hyperparameter search"
        return text + (f"; fixed {fixed}" if fixed else "")


@dataclass
class Experiment:
    """A complete experiment (a preset, or a ``margindist bench`` grid).

    ``paper`` maps dataset name -> method label -> (value, plus-minus or None), in the
    table's ``metric``; ``paper_wtl`` maps method label -> the paper's win/tie/loss text.
    ``test`` is the test of each method against the reference over the splits of a dataset
    (the ● / ○ marks and W/T/L): "paired-t", the papers' paired t-test (the default), or
    "corrected-t", the Nadeau–Bengio corrected resampled t-test (see
    :mod:`margindist.experiments.stats`). It changes the statistics only, never a stored result.
    """

    name: str
    protocol: Protocol
    datasets: list
    methods: list
    title: str = ""
    source: str = ""
    reference: str | None = None
    metric: str = "accuracy"
    paper: dict = field(default_factory=dict)
    paper_wtl: dict = field(default_factory=dict)
    unavailable: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    quick: bool = False
    margin_splits: tuple = (0,)
    test: str = "paired-t"

    def __post_init__(self):
        labels = [m.name for m in self.methods]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"duplicate method labels {dup}: give each MethodRun a unique label.")
        if self.metric not in ("accuracy", "error"):
            raise ValueError(f"metric must be 'accuracy' or 'error'; got {self.metric!r}.")
        if self.test not in TESTS:
            raise ValueError(f"test must be one of {TESTS}; got {self.test!r}.")


@dataclass(frozen=True)
class Task:
    """One unit of work: a method run on one split of one dataset."""

    key: str
    config: str
    dataset: DatasetSpec
    run: MethodRun
    protocol: Protocol
    split: int
    phase: str = "eval"  # "eval": choose (or use ``choice``), fit, test; "select": CV only
    choice: tuple | None = None
    data_dir: str | None = None
    store_margins: bool = False

    @property
    def label(self) -> str:
        return f"{self.dataset.name}/{self.run.name}#{self.split}"


def config_hash(protocol: Protocol, dataset: DatasetSpec, run: MethodRun, phase: str) -> str:
    """The hash of everything that determines a (dataset, run, phase)'s results but the split."""
    return stable_hash({"protocol": protocol, "dataset": dataset, "run": run.to_dict(dataset.name),
                        "phase": phase})


def make_task(protocol, dataset, run, split, phase="eval", choice=None, data_dir=None, margin_splits=(0,)) -> Task:
    config = config_hash(protocol, dataset, run, phase)
    key = stable_hash([config, int(split), None if choice is None else list(choice)], length=24)
    return Task(key=key, config=config, dataset=dataset, run=run, protocol=protocol, split=int(split),
                phase=phase, choice=None if choice is None else tuple(int(c) for c in choice),
                data_dir=None if data_dir is None else str(data_dir),
                store_margins=phase == "eval" and split in margin_splits)


@dataclass
class TaskRecord:
    """The result of one task, one row of the result store.

    ``score`` is the test accuracy (None for a selection task or a failure); ``fit_time`` /
    ``predict_time`` the final fit and prediction, ``cv_time`` the CV search (seconds);
    ``params`` the chosen hyperparameters; ``info`` everything else, JSON-compatible: the
    split's sizes, the CV details, warnings, the margin statistics and stored margin curves
    (``margins``, ``test_margins``), and for a failure ``error`` and ``traceback``.

    Records also read like the dicts of the store (``rec["score"]``, ``rec.get("version")``).
    """

    key: str
    config: str = ""
    dataset: str = ""
    method: str = ""
    split: int = 0
    phase: str = "eval"
    status: str = "ok"
    score: float | None = None
    fit_time: float | None = None
    predict_time: float | None = None
    cv_time: float | None = None
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    created: float | None = None
    version: str | None = None

    @classmethod
    def for_task(cls, task: Task) -> TaskRecord:
        """An empty successful record of ``task`` (filled in by the task)."""
        return cls(key=task.key, config=task.config, dataset=task.dataset.name, method=task.run.name,
                   split=task.split, phase=task.phase, version=__version__)

    @classmethod
    def from_dict(cls, row) -> TaskRecord:
        """A record from a store row or an older record dict (missing fields take their defaults,
        unknown ones are ignored; NULL ``params`` / ``info`` read as empty)."""
        if isinstance(row, cls):
            return row
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in dict(row).items() if k in names}
        kw["params"] = kw.get("params") or {}
        kw["info"] = kw.get("info") or {}
        if kw.get("split") is not None:
            kw["split"] = int(kw["split"])
        return cls(**kw)

    def to_dict(self) -> dict:
        """The store's row format (see :data:`margindist.experiments.store.RECORD_FIELDS`)."""
        return asdict(self)

    def stamp(self) -> TaskRecord:
        self.created = time.time()
        return self

    # ---------------------------------------------------------------- views
    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def error(self) -> str:
        return self.info.get("error", "?")

    @property
    def choice(self) -> list | None:
        """Grid positions of the chosen parameters."""
        return self.info.get("choice")

    @property
    def margins(self) -> list | None:
        """Quantiles of the training margins (stored for the margin splits)."""
        return self.info.get("margins")

    @property
    def test_margins(self) -> list | None:
        return self.info.get("test_margins")

    @property
    def margin_stats(self) -> dict | None:
        return self.info.get("margin_stats")

    def __getitem__(self, name: str):
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def get(self, name: str, default=None):
        return getattr(self, name) if name in self.__dataclass_fields__ else default
