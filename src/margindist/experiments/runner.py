"""Experiments: their definition, the plan of independent tasks, the task itself, the run.

An :class:`Experiment` is a protocol, datasets, method runs (a registry method with a kernel,
a hyperparameter grid and fixed settings), a reference method for the significance tests
and, for the papers' presets, the paper's numbers. :func:`run_experiment` turns it into
independent tasks (one per dataset x method x split), skips those already in the result
store, executes the rest (serially, on local processes or on a Dask cluster), stores every
result the moment it arrives and writes the reports.

A task (:func:`execute_task`) is a pure function of its description: it loads the data,
draws its split, scales on the training part, chooses hyperparameters by CV on the training
part, refits, and measures accuracy, fit / predict time and the margin distribution (training
and test margins). The first fit of a method configuration in a process is preceded by an
untimed warm-up fit on a tiny problem (:func:`_warm_up`: numba compilation and other one-off
costs stay out of the reported times). Its randomness derives from the master seed and its key
only.
"""

from __future__ import annotations

import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from ..solvers.msvmav import FactorCache
from .protocols import DatasetSpec, Protocol, derive_seed, load_data, make_split, stable_hash
from .registry import UnsupportedError, estimator_margins, get_method
from .search import Scaled, cv_search, grid_points, grid_to_dict, point_params, resolve_grid

__all__ = ["Experiment", "MethodRun", "Plan", "RunOutcome", "Task", "execute_task", "plan_experiment",
           "run_experiment"]

#: Margins kept per stored distribution (quantiles of the training margins).
MARGIN_POINTS = 1000


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
        Parameter -> list of values or :class:`~margindist.experiments.search.Scaled`,
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

    def describe_grid(self) -> str:
        parts = []
        for k, v in self.grid.items():
            if isinstance(v, Scaled):
                parts.append(f"{k} in {v}")
            else:
                parts.append(f"{k} in {{{', '.join(_fmt_value(x) for x in v)}}}")
        fixed = ", ".join(f"{k}={_fmt_value(v)}" for k, v in self.fixed.items())
        text = "; ".join(parts) if parts else "no hyperparameter search"
        return text + (f"; fixed {fixed}" if fixed else "")


def _fmt_value(x) -> str:
    if isinstance(x, float) and x > 0:
        k = np.log2(x)
        if abs(k - round(k)) < 1e-12 and abs(k) >= 2:
            return f"2^{int(round(k))}"
        return f"{x:.4g}"
    return str(x)


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
        from .stats import TESTS

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
    return stable_hash({"protocol": protocol, "dataset": dataset, "run": run.to_dict(dataset.name),
                        "phase": phase})


def make_task(protocol, dataset, run, split, phase="eval", choice=None, data_dir=None, margin_splits=(0,)):
    config = config_hash(protocol, dataset, run, phase)
    key = stable_hash([config, int(split), None if choice is None else list(choice)], length=24)
    return Task(key=key, config=config, dataset=dataset, run=run, protocol=protocol, split=int(split),
                phase=phase, choice=None if choice is None else tuple(int(c) for c in choice),
                data_dir=None if data_dir is None else str(data_dir),
                store_margins=phase == "eval" and split in margin_splits)


# ---------------------------------------------------------------------- the task
def _inner_folds(y, n_folds, seed):
    from sklearn.model_selection import StratifiedKFold

    _, counts = np.unique(y, return_counts=True)
    k = int(min(n_folds, counts.min())) if counts.min() >= 2 else 2
    return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


#: Warm-up keys of this process (see :func:`_warm_up`).
_WARMED: set = set()
#: Rows per class of the warm-up problem.
WARMUP_ROWS = 8


def _warm_up(build, params: dict, key: tuple, X, y) -> float | None:
    """One untimed fit on a tiny problem, once per method configuration and process.

    The first fit of a method in a process pays for one-off work that is no part of the
    method's cost: numba compiles the solver's loops (seconds), modules are imported, caches
    are filled. Timing that fit would make whichever split a process runs first look slow
    and the reported times depend on the scheduling. So before the first timed fit (and the
    CV search) of a configuration - method, kernel, fixed settings, dense / sparse input, its
    dtype, binary / multi-class - this fits the estimator once on at most ``WARMUP_ROWS``
    rows per class of the training part (same types, so the same compiled code). A failure
    of the warm-up is ignored (the timed fit reports its own errors).

    Returns the warm-up's seconds, or None when the configuration was already warm.
    """
    import scipy.sparse as sp

    classes = np.unique(y)
    full = key + (sp.issparse(X), str(X.dtype), classes.size > 2)
    if full in _WARMED:
        return None
    _WARMED.add(full)
    idx = np.sort(np.concatenate([np.flatnonzero(y == c)[:WARMUP_ROWS] for c in classes]))
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build(params).fit(X[idx], y[idx])
    except Exception:  # noqa: BLE001 - the timed fits report errors
        pass
    return time.perf_counter() - t0


def execute_task(task: Task) -> dict:
    """Run one task; never raises (a failure is a record with status "error")."""
    from threadpoolctl import threadpool_limits

    rec = {"key": task.key, "config": task.config, "dataset": task.dataset.name, "method": task.run.name,
           "split": task.split, "phase": task.phase, "status": "ok", "score": None, "fit_time": None,
           "predict_time": None, "cv_time": None, "params": {}, "info": {}, "version": __version__}
    try:
        with threadpool_limits(1):
            _run_task(task, rec)
    except Exception as exc:  # noqa: BLE001 - one failing task must not stop a run
        rec["status"] = "error"
        rec["info"] = {"error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=8)[-4000:]}
    rec["created"] = time.time()
    return rec


def _run_task(task: Task, rec: dict) -> None:
    p, ds, run = task.protocol, task.dataset, task.run
    data = make_split(p, ds, task.split, task.data_dir)
    info = get_method(run.method)
    fixed = run.fixed_for(ds.name)
    est_seed = derive_seed(p.seed, "estimator", ds.name, run.name, task.split)
    grid = resolve_grid(run.grid, data.X_train, data.n_features, derive_seed(p.seed, "grid", ds.name, task.split),
                        n_classes=np.unique(data.y_train).size)

    factor_cache = FactorCache()  # kernel factorisations shared by this task's grid points

    def build(params):
        est = info.build(run.kernel, {**fixed, **params}, est_seed)
        if "factor_cache" in est.get_params(deep=False):
            est.set_params(factor_cache=factor_cache)
        return est

    extra = dict(data.meta)
    points = grid_points(grid)
    warm = _warm_up(build, point_params(grid, points[0]) if grid else {},
                    (run.method, run.kernel, repr(sorted(fixed.items()))), data.X_train, data.y_train)
    if warm is not None:
        extra["warmup_time"] = warm
    if task.choice is not None:
        choice = task.choice
        extra["choice_source"] = "given"
    elif len(points) > 1:
        folds = _inner_folds(data.y_train, p.cv_folds, derive_seed(p.seed, "cv", ds.name, task.split))
        res = cv_search(build, grid, data.X_train, data.y_train, folds, warm_start=p.warm_start,
                        exact_warm_start=info.exact_warm_start)
        choice = res.best_index
        rec["cv_time"] = res.time
        extra.update(cv_score=res.best_score, cv_failed=res.n_failed, cv_warnings=res.n_warnings,
                     cv_points=len(points), cv_folds=len(folds))
        if res.errors:
            extra["cv_errors"] = res.errors
    else:
        choice = points[0] if points else ()
    params = point_params(grid, choice) if grid else {}
    rec["params"] = params
    extra["choice"] = list(choice)
    if task.phase == "select":
        rec["info"] = extra
        return

    est = build(params)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, fit_time = _timed(lambda: est.fit(data.X_train, data.y_train))
        pred, predict_time = _timed(lambda: est.predict(data.X_test))
    n_warn = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    if n_warn:
        extra["fit_warnings"] = len(n_warn)
        extra["fit_warning"] = f"{n_warn[0].category.__name__}: {str(n_warn[0].message)[:300]}"
    rec["score"] = float(np.mean(pred == data.y_test))
    rec["fit_time"], rec["predict_time"] = fit_time, predict_time

    margins, why = estimator_margins(est, data.X_train, data.y_train)
    if margins is not None and margins.size and np.all(np.isfinite(margins)):
        from ..metrics import margin_stats

        st = margin_stats(margins, quantiles=(0.5,))
        extra["margin_stats"] = {k: st[k] for k in ("mean", "std", "min", "semivariance", "bound_term",
                                                    "frac_negative")}
        if task.store_margins:
            extra["margins"] = _margin_curve(margins)
            test_m, _ = estimator_margins(est, data.X_test, data.y_test)
            if test_m is not None and test_m.size and np.all(np.isfinite(test_m)):
                extra["test_margins"] = _margin_curve(test_m)
    elif why:
        extra["margin_note"] = why
    rec["info"] = extra


def _margin_curve(margins) -> list:
    """At most ``MARGIN_POINTS`` evenly spaced quantiles of the margins (what a figure draws)."""
    q = np.linspace(0.0, 1.0, min(MARGIN_POINTS, margins.size))
    return [float(v) for v in np.quantile(margins, q)]


# ---------------------------------------------------------------------- planning
@dataclass
class Plan:
    """What an experiment will run, and what it skips and why."""

    experiment: Experiment
    datasets: list  # available DatasetSpec
    runs: list  # available MethodRun
    pairs: list  # (DatasetSpec, MethodRun)
    dataset_meta: dict  # name -> {"n", "d", "classes"}
    skipped_datasets: list  # (name, reason)
    skipped_methods: list  # (label, reason)
    skipped_pairs: list  # (dataset, label, reason)
    data_dir: str | None = None

    def first_phase_tasks(self) -> list:
        exp, p = self.experiment, self.experiment.protocol
        tasks = []
        for ds, run in self.pairs:
            if self.needs_selection(run):
                for s in range(min(p.selection_splits, p.n_splits)):
                    tasks.append(make_task(p, ds, run, s, "select", data_dir=self.data_dir))
            else:
                for s in range(p.n_splits):
                    tasks.append(make_task(p, ds, run, s, "eval", data_dir=self.data_dir,
                                           margin_splits=exp.margin_splits))
        return tasks

    def needs_selection(self, run: MethodRun) -> bool:
        p = self.experiment.protocol
        if p.selection != "median_first":
            return False
        return int(np.prod([len(v.factors) if isinstance(v, Scaled) else len(v) for v in run.grid.values()])) > 1

    def configs(self) -> list:
        """Config hashes of every planned (dataset, run, phase), for ``--force``."""
        p = self.experiment.protocol
        out = []
        for ds, run in self.pairs:
            out.append(config_hash(p, ds, run, "eval"))
            if self.needs_selection(run):
                out.append(config_hash(p, ds, run, "select"))
        return out


def plan_experiment(exp: Experiment, data_dir=None, *, strict: bool = False) -> Plan:
    """Check which datasets load offline and which methods exist; list the work.

    A method whose module does not exist is skipped (listed with the reason). A grid or fixed
    parameter the estimator does not take raises :class:`UnsupportedError` with ``strict``
    (user-given grids), else the method is skipped with the reason (presets).
    """
    from ..datasets import DatasetNotFoundError, DatasetFormatError

    datasets, meta, skipped_ds = [], {}, []
    for ds in exp.datasets:
        try:
            X, y = load_data(ds, data_dir)
        except DatasetNotFoundError:
            skipped_ds.append((ds.name, f"not available offline (put {ds.loader_name}.csv into --data-dir "
                                        "or MARGINDIST_DATA)"))
            continue
        except (DatasetFormatError, ValueError) as exc:
            skipped_ds.append((ds.name, f"could not be loaded: {exc}"))
            continue
        datasets.append(ds)
        meta[ds.name] = {"n": int(X.shape[0]), "d": int(X.shape[1]), "classes": int(np.unique(y).size)}
    runs, skipped_m = [], []
    for run in exp.methods:
        info = get_method(run.method)
        ok, why = info.status()
        if not ok:
            skipped_m.append((run.name, why))
            continue
        if not info.supports_kernel(run.kernel):
            skipped_m.append((run.name, f"{run.method} has no {run.kernel!r} kernel"))
            continue
        names = info.param_names(run.kernel)
        unknown = sorted((set(run.grid) | set(run.fixed)
                          | {k for o in run.overrides.values() for k in o}) - names)
        if unknown:
            msg = f"method {run.name!r} ({run.method}) has no parameter(s) {unknown}; valid: {sorted(names)}"
            if strict:
                raise UnsupportedError(msg)
            skipped_m.append((run.name, msg))
            continue
        runs.append(run)
    pairs, skipped_pairs = [], []
    for ds in datasets:
        for run in runs:
            if ds.name in run.exclude:
                skipped_pairs.append((ds.name, run.name, run.exclude[ds.name]))
                continue
            if run.method == "svr" and meta[ds.name]["classes"] > 2:
                skipped_pairs.append((ds.name, run.name, "binary only"))
                continue
            pairs.append((ds, run))
    return Plan(exp, datasets, runs, pairs, meta, skipped_ds, skipped_m, skipped_pairs,
                None if data_dir is None else str(data_dir))


def median_choice(choices: list) -> tuple:
    """Per-parameter median of grid positions (the lower median for an even count)."""
    arr = np.sort(np.asarray(choices, dtype=int), axis=0)
    return tuple(int(v) for v in arr[(arr.shape[0] - 1) // 2])


# ---------------------------------------------------------------------- running
@dataclass
class RunOutcome:
    """What :func:`run_experiment` did."""

    plan: Plan
    records: list  # evaluation records of the plan (from the store)
    n_planned: int
    n_executed: int
    n_failed: int
    failures: list  # (task label, error)
    elapsed: float
    out_dir: Path | None
    files: list
    summary: object = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return self.n_failed == 0 and not self.interrupted


def _run_tasks(tasks, store, progress, workers, scheduler, counters):
    """Execute tasks and store each result as soon as it arrives."""
    from .parallel import execute

    labels = {t.key: t.label for t in tasks}
    for rec in execute(execute_task, tasks, workers=workers, scheduler=scheduler):
        store.put(rec)
        counters["executed"] += 1
        if progress is not None:
            progress.update(item=labels.get(rec["key"], ""), failed=rec["status"] != "ok")


def run_experiment(exp: Experiment, out_dir=None, *, workers: int = 1, scheduler=None, force: bool = False,
                   progress=None, data_dir=None, store=None, write_reports: bool = True,
                   command: str | None = None, strict: bool = False) -> RunOutcome:
    """Run (or resume) an experiment and write its reports.

    Parameters
    ----------
    exp : Experiment
    out_dir : path, optional
        Output directory: the result store ``results.sqlite`` and the reports. Re-running
        with the same directory resumes: stored results are reused.
    workers : int
        Local processes (1: serial).
    scheduler : str or distributed.Client, optional
        Dask scheduler address: run the tasks on that cluster.
    force : bool
        Delete the stored results of this experiment's tasks and recompute them.
    progress : Progress, optional
        Progress display (default: none).
    data_dir : path, optional
        Extra data directory searched first.
    store : ResultStore, optional
        Use this store instead of ``out_dir/results.sqlite``.
    write_reports : bool
        Write the report files into ``out_dir``.
    command : str, optional
        The command line, recorded in the report.
    strict : bool
        Unknown grid parameters raise instead of skipping the method (see :func:`plan_experiment`).
    """
    from .store import ResultStore

    t0 = time.perf_counter()
    plan = plan_experiment(exp, data_dir, strict=strict)
    out_dir = Path(out_dir) if out_dir is not None else None
    own_store = store is None
    if own_store:
        if out_dir is None:
            raise ValueError("give out_dir or store.")
        store = ResultStore(out_dir / "results.sqlite", recover=force, exclusive=True)
    counters = {"executed": 0}
    interrupted = False
    try:
        if force:
            store.delete_configs(plan.configs())
        first = plan.first_phase_tasks()
        done = store.done_keys(t.key for t in first)
        pending = [t for t in first if t.key not in done]
        p = exp.protocol
        n_second = sum(p.n_splits for _, run in plan.pairs if plan.needs_selection(run))
        if progress is not None:
            progress.set_total(len(pending) + n_second)
            later = f" (+ up to {n_second} after the selection)" if n_second else ""
            progress.start(f"{len(pending)} tasks to run{later}, {len(done)} already stored")
        try:
            _run_tasks(pending, store, progress, workers, scheduler, counters)
            second = _second_phase(plan, store)
            if second:
                done2 = store.done_keys(t.key for t in second)
                pending2 = [t for t in second if t.key not in done2]
                if progress is not None:
                    progress.set_total(progress.done + len(pending2))
                _run_tasks(pending2, store, progress, workers, scheduler, counters)
        except KeyboardInterrupt:
            interrupted = True
        eval_tasks = plan_eval_tasks(plan, store)
        stored = store.get_many(t.key for t in eval_tasks)
        records = [stored[t.key] for t in eval_tasks if t.key in stored]
        # failures are read back from the store: this run's and any left from an earlier one
        failures = [(t.label, stored[t.key]["info"].get("error", "?")) for t in eval_tasks
                    if t.key in stored and stored[t.key]["status"] != "ok"]
        failures += _failed_selection(plan, store)
    finally:
        if progress is not None:
            progress.close()
        if own_store:
            store.close()
    outcome = RunOutcome(plan=plan, records=records, n_planned=len(eval_tasks), n_executed=counters["executed"],
                         n_failed=len(failures), failures=failures, elapsed=time.perf_counter() - t0,
                         out_dir=out_dir, files=[], interrupted=interrupted)
    if write_reports and out_dir is not None and not interrupted:
        from .reports import write_reports as _write

        outcome.summary, outcome.files = _write(exp, plan, records, out_dir, outcome, command=command)
    elif not interrupted:
        from .reports import summarize_experiment

        outcome.summary = summarize_experiment(exp, plan, records)
    return outcome


def _selection_records(plan: Plan, store, ds, run):
    p = plan.experiment.protocol
    tasks = [make_task(p, ds, run, s, "select", data_dir=plan.data_dir)
             for s in range(min(p.selection_splits, p.n_splits))]
    got = store.get_many(t.key for t in tasks)
    return [got.get(t.key) for t in tasks]


def _failed_selection(plan: Plan, store) -> list:
    out = []
    for ds, run in plan.pairs:
        if not plan.needs_selection(run):
            continue
        recs = _selection_records(plan, store, ds, run)
        for s, r in enumerate(recs):
            if r is not None and r["status"] != "ok":
                out.append((f"{ds.name}/{run.name}#{s} (selection)", r["info"].get("error", "?")))
    return out


def _second_phase(plan: Plan, store) -> list:
    """Evaluation tasks of the "median of the first choices" rule, once those are stored."""
    exp, p = plan.experiment, plan.experiment.protocol
    tasks = []
    for ds, run in plan.pairs:
        if not plan.needs_selection(run):
            continue
        recs = _selection_records(plan, store, ds, run)
        if any(r is None or r["status"] != "ok" for r in recs):
            continue  # reported as a failure of the selection
        choice = median_choice([r["info"]["choice"] for r in recs])
        for s in range(p.n_splits):
            tasks.append(make_task(p, ds, run, s, "eval", choice=choice, data_dir=plan.data_dir,
                                   margin_splits=exp.margin_splits))
    return tasks


def plan_eval_tasks(plan: Plan, store) -> list:
    """All evaluation tasks of the plan (second-phase ones where their choice is known)."""
    tasks = [t for t in plan.first_phase_tasks() if t.phase == "eval"]
    return tasks + _second_phase(plan, store)
