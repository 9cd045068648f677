"""Running an experiment end to end: plan, run (or resume), report.

An :class:`Experiment` is a protocol, datasets, method runs (a registry method with a kernel,
a hyperparameter grid and fixed settings), a reference method for the significance tests
and, for the papers' presets, the paper's numbers. :func:`run_experiment` turns it into
independent tasks (one per dataset x method x split, :mod:`~margindist.experiments.planning`),
skips those already in the result store, executes the rest (serially, on local processes or
on a Dask cluster, :mod:`~margindist.experiments.running`), stores every result the moment
it arrives and writes the reports (:mod:`~margindist.experiments.reports`).

The data model lives in :mod:`~margindist.experiments.records` and one task's work in
:mod:`~margindist.experiments.tasks`; their public names are re-exported here.
"""

from __future__ import annotations

import time
from pathlib import Path

from .planning import Plan, median_choice, plan_eval_tasks, plan_experiment
from .records import Experiment, MethodRun, Task, TaskRecord, config_hash, make_task
from .reports import summarize_experiment
from .reports import write_reports as _write_reports
from .running import RunOutcome, run_plan
from .store import ResultStore
from .tasks import execute_task

__all__ = ["Experiment", "MethodRun", "Plan", "RunOutcome", "Task", "TaskRecord", "config_hash", "execute_task",
           "make_task", "median_choice", "plan_eval_tasks", "plan_experiment", "run_experiment"]


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
    t0 = time.perf_counter()
    plan = plan_experiment(exp, data_dir, strict=strict)
    out_dir = Path(out_dir) if out_dir is not None else None
    own_store = store is None
    if own_store:
        if out_dir is None:
            raise ValueError("give out_dir or store.")
        store = ResultStore(out_dir / "results.sqlite", recover=force, exclusive=True)
    try:
        outcome = run_plan(plan, store, workers=workers, scheduler=scheduler, force=force, progress=progress)
    finally:
        if own_store:
            store.close()
    outcome.elapsed, outcome.out_dir = time.perf_counter() - t0, out_dir
    if outcome.interrupted:
        return outcome
    if write_reports and out_dir is not None:
        outcome.summary, outcome.files = _write_reports(exp, plan, outcome.records, out_dir, outcome,
                                                        command=command)
    else:
        outcome.summary = summarize_experiment(exp, plan, outcome.records)
    return outcome
