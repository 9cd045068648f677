"""Executing independent tasks: serially, on local processes, or on a Dask cluster; progress.

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

import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator

__all__ = ["execute", "Progress", "dask_available"]


def dask_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("distributed") is not None


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
    if workers is None or workers == 1 or len(tasks) == 1:
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


def _fmt_time(seconds: float) -> str:
    seconds = int(round(max(seconds, 0)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Progress of a run on a stream (stderr).

    ``mode="bar"``: a one-line bar with counts, elapsed time and ETA, redrawn in place (for
    terminals). ``mode="log"``: a plain line every ``interval`` seconds and at the end (for
    logs and pipes). ``mode="off"``: nothing. ``mode="auto"`` picks "bar" when the stream is
    a TTY, else "log"; ``quiet=True`` means "off".
    """

    def __init__(self, total: int = 0, *, stream=None, mode: str = "auto", quiet: bool = False,
                 interval: float = 30.0, label: str = "margindist"):
        self.stream = sys.stderr if stream is None else stream
        if quiet:
            mode = "off"
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "bar" if isatty is not None and isatty() else "log"
        if mode not in ("bar", "log", "off"):
            raise ValueError(f"progress mode must be 'bar', 'log', 'off' or 'auto'; got {mode!r}.")
        self.mode = mode
        self.total = int(total)
        self.done = 0
        self.failed = 0
        self.interval = float(interval)
        self.label = label
        self._t0 = time.perf_counter()
        self._last_log = self._t0
        self._last_draw = 0.0
        self._drawn = False

    def set_total(self, total: int) -> None:
        self.total = int(total)

    def start(self, message: str = "") -> None:
        self._t0 = self._last_log = time.perf_counter()
        if self.mode == "log" and message:
            self._write_line(f"{self.label}: {message}")

    def update(self, n: int = 1, *, item: str = "", failed: bool = False) -> None:
        self.done += n
        self.failed += int(failed)
        now = time.perf_counter()
        if self.mode == "bar":
            if now - self._last_draw >= 0.1 or self.done >= self.total:
                self._draw(item)
                self._last_draw = now
        elif self.mode == "log":
            if now - self._last_log >= self.interval:
                self._write_line(self._status())
                self._last_log = now

    def eta(self) -> float | None:
        if self.done == 0 or self.total <= self.done:
            return None if self.done == 0 else 0.0
        elapsed = time.perf_counter() - self._t0
        return elapsed / self.done * (self.total - self.done)

    def _status(self) -> str:
        elapsed = time.perf_counter() - self._t0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = self.eta()
        parts = [f"{self.label}: {self.done}/{self.total} tasks ({pct:.0f}%)",
                 f"elapsed {_fmt_time(elapsed)}"]
        if eta is not None and self.done < self.total:
            parts.append(f"ETA {_fmt_time(eta)}")
        if self.failed:
            parts.append(f"{self.failed} failed")
        return ", ".join(parts)

    def _draw(self, item: str) -> None:
        width = shutil.get_terminal_size((100, 20)).columns
        elapsed = time.perf_counter() - self._t0
        frac = self.done / self.total if self.total else 1.0
        eta = self.eta()
        tail = f" {self.done}/{self.total} {100 * frac:3.0f}% {_fmt_time(elapsed)}"
        tail += f" ETA {_fmt_time(eta)}" if eta is not None and self.done < self.total else ""
        tail += f" {self.failed} failed" if self.failed else ""
        tail += f"  {item}" if item else ""
        bar_w = max(10, min(30, width - len(tail) - 4))
        filled = int(round(bar_w * frac))
        line = f"[{'#' * filled}{'.' * (bar_w - filled)}]{tail}"
        self.stream.write("\r" + line[: width - 1].ljust(width - 1))
        self.stream.flush()
        self._drawn = True

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self, message: str = "") -> None:
        if self.mode == "bar" and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
        if self.mode == "log" and self.total:
            self._write_line(self._status())
        if message and self.mode != "off":
            self._write_line(f"{self.label}: {message}")
