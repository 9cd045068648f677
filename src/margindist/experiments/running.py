"""Running a plan: the task loop, the workers and resuming.

:func:`run_plan` executes the plan's pending tasks (serially, on local processes or on a
Dask cluster, see :mod:`margindist.experiments.parallel`), stores every result the moment it
arrives, runs the second phase of a "median of the first choices" protocol once its
selection is stored, and reads the evaluation records back from the store. Tasks with a
successful stored result are skipped, so running the same plan against the same store again
resumes an interrupted run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from .parallel import execute, runs_in_process
from .planning import (
    Plan,
    failed_selection,
    pending_tasks,
    plan_eval_tasks,
    second_phase_tasks,
    stored_records,
)
from .tasks import execute_task

__all__ = ["RunOutcome", "run_plan"]


@dataclass
class RunOutcome:
    """What :func:`margindist.experiments.run_experiment` did."""

    plan: Plan
    records: list  # evaluation TaskRecords of the plan (from the store)
    n_planned: int
    n_executed: int
    n_failed: int
    failures: list  # (task label, error)
    elapsed: float
    out_dir: Path | None
    files: list = field(default_factory=list)
    summary: object = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return self.n_failed == 0 and not self.interrupted


def _run_tasks(tasks, store, progress, workers, scheduler, counter: dict) -> None:
    """Execute tasks and store each result as soon as it arrives (counted in ``counter["executed"]``)."""
    if not tasks:
        return
    labels = {t.key: t.label for t in tasks}
    fn = execute_task
    if progress is not None:
        if runs_in_process(workers, scheduler, len(tasks)):
            fn = partial(execute_task, on_warm_up=progress.compiling)
        else:  # the warm-ups happen in the workers, before their first results
            progress.status("starting workers; compiling (first run only)")
    first = True
    for rec in execute(fn, tasks, workers=workers, scheduler=scheduler):
        store.put(rec)
        counter["executed"] += 1
        if progress is not None:
            if first:
                progress.status(None)
                first = False
            progress.update(item=labels.get(rec.key, ""), failed=not rec.ok)


def _run_phases(plan: Plan, store, progress, workers, scheduler) -> tuple[int, bool]:
    """Both phases of the plan; returns (tasks executed, interrupted)."""
    counter = {"executed": 0}
    pending, done = pending_tasks(plan.first_phase_tasks(), store)
    n_second = plan.n_second_phase()
    if progress is not None:
        progress.set_total(len(pending) + n_second)
        later = f" (+ up to {n_second} after the selection)" if n_second else ""
        progress.start(f"{len(pending)} tasks to run{later}, {len(done)} already stored")
    try:
        _run_tasks(pending, store, progress, workers, scheduler, counter)
        second = second_phase_tasks(plan, store)
        if second:
            pending2, _ = pending_tasks(second, store)
            if progress is not None:
                progress.set_total(progress.done + len(pending2))
            _run_tasks(pending2, store, progress, workers, scheduler, counter)
    except KeyboardInterrupt:
        return counter["executed"], True
    return counter["executed"], False


def run_plan(plan: Plan, store, *, workers: int = 1, scheduler=None, force: bool = False,
             progress=None) -> RunOutcome:
    """Run (or resume) the plan's tasks against ``store``; the records are read back from it.

    ``force`` first deletes the stored results of the plan's configurations. Ctrl-C stops the
    run with every finished result stored (``interrupted`` in the outcome). ``elapsed`` and
    ``out_dir`` of the outcome are the caller's to set.
    """
    t0 = time.perf_counter()
    try:
        if force:
            store.delete_configs(plan.configs())
        executed, interrupted = _run_phases(plan, store, progress, workers, scheduler)
        eval_tasks = plan_eval_tasks(plan, store)
        stored = stored_records(store, eval_tasks)
        records = [stored[t.key] for t in eval_tasks if t.key in stored]
        # failures are read back from the store: this run's and any left from an earlier one
        failures = [(t.label, stored[t.key].error) for t in eval_tasks if t.key in stored and not stored[t.key].ok]
        failures += failed_selection(plan, store)
    finally:
        if progress is not None:
            progress.close()
    return RunOutcome(plan=plan, records=records, n_planned=len(eval_tasks), n_executed=executed,
                      n_failed=len(failures), failures=failures, elapsed=time.perf_counter() - t0,
                      out_dir=None, interrupted=interrupted)
