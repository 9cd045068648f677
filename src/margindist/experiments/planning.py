"""Planning an experiment: which tasks exist, which are already done, which come next.

:func:`plan_experiment` checks which datasets load offline and which methods exist and lists
the (dataset, method run) pairs; :class:`Plan` turns them into tasks. With the "median of the
first choices" selection rule (``Protocol(selection="median_first")``) the work has two
phases: selection tasks (CV on the first splits) and, once they are stored, evaluation tasks
with the per-parameter median of their choices (:func:`second_phase_tasks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .protocols import load_data
from .records import Experiment, MethodRun, Task, TaskRecord, config_hash, make_task
from .registry import UnsupportedError, get_method

__all__ = ["Plan", "failed_selection", "median_choice", "pending_tasks", "plan_eval_tasks", "plan_experiment",
           "second_phase_tasks"]


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
                tasks += self.selection_tasks(ds, run)
            else:
                for s in range(p.n_splits):
                    tasks.append(make_task(p, ds, run, s, "eval", data_dir=self.data_dir,
                                           margin_splits=exp.margin_splits))
        return tasks

    def selection_tasks(self, ds, run: MethodRun) -> list:
        p = self.experiment.protocol
        return [make_task(p, ds, run, s, "select", data_dir=self.data_dir)
                for s in range(min(p.selection_splits, p.n_splits))]

    def needs_selection(self, run: MethodRun) -> bool:
        if self.experiment.protocol.selection != "median_first":
            return False
        return run.grid_size() > 1

    def n_second_phase(self) -> int:
        """Evaluation tasks that wait for a selection (an upper bound for the progress)."""
        return sum(self.experiment.protocol.n_splits for _, run in self.pairs if self.needs_selection(run))

    def configs(self) -> list:
        """Config hashes of every planned (dataset, run, phase), for ``--force``."""
        p = self.experiment.protocol
        out = []
        for ds, run in self.pairs:
            out.append(config_hash(p, ds, run, "eval"))
            if self.needs_selection(run):
                out.append(config_hash(p, ds, run, "select"))
        return out


def _available_datasets(exp: Experiment, data_dir):
    from ..datasets import DatasetFormatError, DatasetNotFoundError

    datasets, meta, skipped = [], {}, []
    for ds in exp.datasets:
        try:
            X, y = load_data(ds, data_dir)
        except DatasetNotFoundError:
            skipped.append((ds.name, f"not available offline (put {ds.loader_name}.csv into --data-dir "
                                     "or MARGINDIST_DATA)"))
            continue
        except (DatasetFormatError, ValueError) as exc:
            skipped.append((ds.name, f"could not be loaded: {exc}"))
            continue
        datasets.append(ds)
        meta[ds.name] = {"n": int(X.shape[0]), "d": int(X.shape[1]), "classes": int(np.unique(y).size)}
    return datasets, meta, skipped


def _available_runs(exp: Experiment, strict: bool):
    runs, skipped = [], []
    for run in exp.methods:
        info = get_method(run.method)
        ok, why = info.status()
        if not ok:
            skipped.append((run.name, why))
            continue
        if not info.supports_kernel(run.kernel):
            skipped.append((run.name, f"{run.method} has no {run.kernel!r} kernel"))
            continue
        names = info.param_names(run.kernel)
        unknown = sorted((set(run.grid) | set(run.fixed)
                          | {k for o in run.overrides.values() for k in o}) - names)
        if unknown:
            msg = f"method {run.name!r} ({run.method}) has no parameter(s) {unknown}; valid: {sorted(names)}"
            if strict:
                raise UnsupportedError(msg)
            skipped.append((run.name, msg))
            continue
        runs.append(run)
    return runs, skipped


def plan_experiment(exp: Experiment, data_dir=None, *, strict: bool = False) -> Plan:
    """Check which datasets load offline and which methods exist; list the work.

    A method whose module does not exist is skipped (listed with the reason). A grid or fixed
    parameter the estimator does not take raises :class:`UnsupportedError` with ``strict``
    (user-given grids), else the method is skipped with the reason (presets).
    """
    datasets, meta, skipped_ds = _available_datasets(exp, data_dir)
    runs, skipped_m = _available_runs(exp, strict)
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


# ---------------------------------------------------------------------- against the store
def pending_tasks(tasks: list, store) -> tuple[list, set]:
    """(tasks without a successful stored result, keys of those with one)."""
    done = store.done_keys(t.key for t in tasks)
    return [t for t in tasks if t.key not in done], done


def stored_records(store, tasks) -> dict:
    """key -> :class:`TaskRecord` for the stored results among ``tasks``."""
    return {k: TaskRecord.from_dict(v) for k, v in store.get_many(t.key for t in tasks).items()}


def _selection_records(plan: Plan, store, ds, run) -> list:
    tasks = plan.selection_tasks(ds, run)
    got = stored_records(store, tasks)
    return [got.get(t.key) for t in tasks]


def failed_selection(plan: Plan, store) -> list:
    """(label, error) of the stored selection tasks that failed."""
    out = []
    for ds, run in plan.pairs:
        if not plan.needs_selection(run):
            continue
        for s, r in enumerate(_selection_records(plan, store, ds, run)):
            if r is not None and not r.ok:
                out.append((f"{ds.name}/{run.name}#{s} (selection)", r.error))
    return out


def second_phase_tasks(plan: Plan, store) -> list:
    """Evaluation tasks of the "median of the first choices" rule, once those are stored."""
    exp, p = plan.experiment, plan.experiment.protocol
    tasks = []
    for ds, run in plan.pairs:
        if not plan.needs_selection(run):
            continue
        recs = _selection_records(plan, store, ds, run)
        if any(r is None or not r.ok for r in recs):
            continue  # reported as a failure of the selection
        choice = median_choice([r.choice for r in recs])
        for s in range(p.n_splits):
            tasks.append(make_task(p, ds, run, s, "eval", choice=choice, data_dir=plan.data_dir,
                                   margin_splits=exp.margin_splits))
    return tasks


def plan_eval_tasks(plan: Plan, store) -> list[Task]:
    """All evaluation tasks of the plan (second-phase ones where their choice is known)."""
    tasks = [t for t in plan.first_phase_tasks() if t.phase == "eval"]
    return tasks + second_phase_tasks(plan, store)
