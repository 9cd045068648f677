"""Executing independent tasks: serially, on local processes, or on a Dask cluster.

All three paths run the same pure task function and yield results as they finish (in any
order); the caller stores them. Results do not depend on the path: every task derives its
randomness from the master seed and its own key, and runs with one BLAS thread.

* ``workers=1``: in this process, one task after the other.
* ``workers=N`` (N > 1, or -1 for all cores): joblib's ``loky`` process pool.
* ``scheduler="tcp://host:8786"``: a ``distributed.Client`` connected to that scheduler and
  joblib's Dask backend (``joblib.parallel_config(backend="dask")``); needs the ``dask`` extra
  (``pip install "margindist[dask]"``). Workers must be able to import margindist and load
  the datasets (bundled ones always; others from the same ``--data-dir`` path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from .progress import Progress

__all__ = ["Progress", "dask_available", "execute", "runs_in_process"]


def dask_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("distributed") is not None


def runs_in_process(workers: int | None, scheduler, n_tasks: int) -> bool:
    """Whether :func:`execute` runs its tasks in this process, one after the other."""
    return scheduler is None and (workers is None or workers == 1 or n_tasks == 1)


def execute(fn: Callable, tasks: Iterable, *, workers: int = 1, scheduler=None) -> Iterator:
    """Yield ``fn(task)`` for every task, in completion order.

    Parameters
    ----------
    fn : picklable callable (a module-level function)
    tasks : iterable of picklable task objects
    workers : int
        1: serial; N > 1: N local processes (loky); -1: one process per core.
    scheduler : str or distributed.Client, optional
        Address of a Dask scheduler (or a connected client): run on that cluster.
    """
    tasks = list(tasks)
    if not tasks:
        return
    if scheduler is not None:
        yield from _execute_dask(fn, tasks, scheduler)
        return
    if runs_in_process(workers, scheduler, len(tasks)):
        for t in tasks:
            yield fn(t)
        return
    from joblib import Parallel, delayed

    par = Parallel(n_jobs=workers, backend="loky", return_as="generator_unordered", batch_size=1)
    yield from par(delayed(fn)(t) for t in tasks)


def _execute_dask(fn, tasks, scheduler):
    try:
        from distributed import Client
    except ImportError:
        raise RuntimeError(
            "--scheduler needs the Dask 'distributed' package: pip install \"margindist[dask]\""
        ) from None
    from joblib import Parallel, delayed, parallel_config

    own = not isinstance(scheduler, Client)
    client = Client(scheduler, set_as_default=False) if own else scheduler
    try:
        with parallel_config(backend="dask", client=client, wait_for_workers_timeout=60):
            par = Parallel(n_jobs=-1, return_as="generator_unordered", batch_size=1)
            yield from par(delayed(fn)(t) for t in tasks)
    finally:
        if own:
            client.close()
