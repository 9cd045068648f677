"""Progress of a run on stderr: a ``rich`` display on a terminal, plain lines elsewhere.

On a terminal (``mode="bar"``) a live ``rich`` progress bar shows the counts, the percentage,
the elapsed time, the ETA, the failures and the task that finished last; while a method
configuration is compiled (the untimed warm-up fit before its first timed fit, see
:func:`margindist.experiments.tasks._warm_up`) it says "compiling (first run only)" instead of
waiting silently. Elsewhere (``mode="log"``: logs, pipes, CI) it writes one plain line every
``interval`` seconds and at the end, and a line when a compilation starts.
"""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]

COMPILING = "compiling (first run only)"


def _fmt_time(seconds: float) -> str:
    seconds = int(round(max(seconds, 0)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Progress of a run on a stream (stderr).

    ``mode="bar"``: a live ``rich`` progress display, redrawn in place (for terminals).
    ``mode="log"``: a plain line every ``interval`` seconds and at the end (for logs and
    pipes). ``mode="off"``: nothing. ``mode="auto"`` picks "bar" when the stream is a TTY,
    else "log"; ``quiet=True`` means "off".
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
        self._status = None  # what the run is doing besides tasks (compiling ...)
        self._item = ""
        self._rich = None
        self._task = None

    # ---------------------------------------------------------------- the rich display
    def _live(self):
        """The rich display, started on first use (bar mode only)."""
        if self._rich is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            console = Console(file=self.stream, highlight=False)
            self._rich = RichProgress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                TaskProgressColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                TextColumn("{task.fields[note]}"), console=console, refresh_per_second=4,
                redirect_stdout=False, redirect_stderr=False)
            self._task = self._rich.add_task(self.label, total=self.total or None, note="")
            self._rich.start()
        return self._rich

    def _refresh(self, now: bool = False) -> None:
        note = [f"{self.failed} failed"] if self.failed else []
        note += [self._status] if self._status else ([self._item] if self._item else [])
        self._live().update(self._task, total=self.total or None, completed=self.done, note="  ".join(note),
                            refresh=now)

    # ---------------------------------------------------------------- the interface
    def set_total(self, total: int) -> None:
        self.total = int(total)
        if self._rich is not None:
            self._refresh()

    def start(self, message: str = "") -> None:
        self._t0 = self._last_log = time.perf_counter()
        if self.mode == "bar":
            if message:
                self._live().console.print(f"{self.label}: {message}", markup=False)
            self._refresh()
        elif self.mode == "log" and message:
            self._write_line(f"{self.label}: {message}")

    def update(self, n: int = 1, *, item: str = "", failed: bool = False) -> None:
        self.done += n
        self.failed += int(failed)
        self._item = item
        if self.mode == "bar":
            self._refresh()
        elif self.mode == "log":
            now = time.perf_counter()
            if now - self._last_log >= self.interval:
                self._write_line(self._line())
                self._last_log = now

    def status(self, text: str | None) -> None:
        """Show what the run is doing besides finishing tasks (None: nothing)."""
        changed = text != self._status
        self._status = text
        if self.mode == "bar":
            self._refresh(now=changed)
        elif self.mode == "log" and text and changed:
            self._write_line(f"{self.label}: {text}")

    def compiling(self, what: str | None) -> None:
        """A warm-up fit (numba compilation ...) of ``what`` began; None: it ended."""
        self.status(f"{COMPILING}: {what}" if what else None)

    def eta(self) -> float | None:
        if self.done == 0 or self.total <= self.done:
            return None if self.done == 0 else 0.0
        elapsed = time.perf_counter() - self._t0
        return elapsed / self.done * (self.total - self.done)

    def _line(self) -> str:
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

    def _write_line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self, message: str = "") -> None:
        if self._rich is not None:
            self._status = None
            self._refresh()
            self._rich.stop()
            self._rich = None
        if self.mode == "log" and self.total:
            self._write_line(self._line())
        if message and self.mode != "off":
            self._write_line(f"{self.label}: {message}")
