"""The result store: one SQLite database (WAL mode) per output directory.

Every finished task is one row keyed by its task key, a hash of (protocol, dataset, method
run with its grid and fixed parameters, split, phase). Rows are written by the coordinating
process only, one transaction per result, committed (with ``synchronous=FULL``) as soon as the
result arrives, so a run killed at any moment (Ctrl-C, ``kill -9``, power loss) keeps every
finished result and loses at most the tasks that were running. The primary key makes a
result impossible to store twice; re-running the same command skips the stored keys and
computes only the rest, so the final numbers are those of an uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["RECORD_FIELDS", "ResultStore", "StoreError"]


class StoreError(RuntimeError):
    """The result store cannot be used; the message names the file and the remedy."""

RECORD_FIELDS = (
    "key", "config", "dataset", "method", "split", "phase", "status", "score",
    "fit_time", "predict_time", "cv_time", "params", "info", "created", "version",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    dataset TEXT NOT NULL,
    method TEXT NOT NULL,
    split INTEGER NOT NULL,
    phase TEXT NOT NULL,
    status TEXT NOT NULL,
    score REAL,
    fit_time REAL,
    predict_time REAL,
    cv_time REAL,
    params TEXT,
    info TEXT,
    created REAL,
    version TEXT
);
CREATE INDEX IF NOT EXISTS results_config ON results (config);
"""

_JSON_FIELDS = ("params", "info")


class ResultStore:
    """SQLite-backed, crash-safe store of task results.

    Parameters
    ----------
    path : str or Path
        Database file (created with its directory). Use one store per output directory;
        several experiments may share one (keys differ).
    recover : bool
        A damaged database is moved aside (``<name>.damaged-<time>``) and a new one started,
        instead of raising :class:`StoreError` (``--force`` on the command line).
    exclusive : bool
        Hold the store's lock file (``<name>.lock``) while open: a second exclusive opening,
        e.g. a second run started on the same output directory, raises :class:`StoreError`
        instead of computing every task twice.
    """

    def __init__(self, path, *, recover: bool = False, exclusive: bool = False):
        self.path = Path(path)
        self._con = None
        self._lock = None
        #: Where a damaged database was moved by ``recover=True`` (None when nothing was moved).
        self.recovered_from = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"Cannot create the directory {self.path.parent} for the result store "
                             f"({exc.strerror or exc}); choose another output directory (--out).") from None
        if exclusive:
            self._lock = _acquire(self.path)
        try:
            self._open(recover)
        except BaseException:
            self.close()
            raise

    def _open(self, recover: bool) -> None:
        try:
            self._connect()
        except sqlite3.DatabaseError as exc:
            if self._con is not None:
                self._con.close()
                self._con = None
            if "unable to open" in str(exc):
                raise StoreError(f"Cannot open or create the result store {self.path} ({exc}): the directory "
                                 "must be writable and the path must not be a directory; choose another "
                                 "output directory (--out).") from None
            if not recover:
                raise StoreError(f"The result store {self.path} is damaged ({exc}). Run the same command with "
                                 "--force to move it aside and start afresh (its results are recomputed), or "
                                 "delete it yourself.") from None
            self.recovered_from = _move_aside(self.path)
            logging.getLogger("margindist").warning(
                "The result store %s was damaged (%s); moved it to %s and started a new one.",
                self.path, exc, self.recovered_from)
            self._connect()

    def _connect(self) -> None:
        self._con = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=FULL")
        check = self._con.execute("PRAGMA quick_check(1)").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(f"integrity check: {check}")
        self._con.executescript(_SCHEMA)

    # ---------------------------------------------------------------- writing
    def put(self, record) -> None:
        """Insert or replace one result (a :class:`~margindist.experiments.records.TaskRecord` or a
        record dict) and commit it durably."""
        row = record.to_dict() if hasattr(record, "to_dict") else dict(record)
        row.setdefault("created", time.time())
        for f in _JSON_FIELDS:
            if f in row and not isinstance(row[f], str):
                row[f] = json.dumps(row[f], default=_json_default)
        values = [row.get(f) for f in RECORD_FIELDS]
        with self._transaction():
            self._con.execute(
                f"INSERT OR REPLACE INTO results ({', '.join(RECORD_FIELDS)}) "
                f"VALUES ({', '.join('?' * len(RECORD_FIELDS))})",
                values,
            )

    def delete_configs(self, configs) -> int:
        """Remove every result of the given config hashes (``--force``)."""
        configs = list(configs)
        n = 0
        with self._transaction():
            for i in range(0, len(configs), 500):
                chunk = configs[i:i + 500]
                cur = self._con.execute(
                    f"DELETE FROM results WHERE config IN ({', '.join('?' * len(chunk))})", chunk
                )
                n += cur.rowcount
        return n

    def _transaction(self):
        con = self._con

        class _Tx:
            def __enter__(self_):
                con.execute("BEGIN IMMEDIATE")

            def __exit__(self_, exc_type, exc, tb):
                con.execute("ROLLBACK" if exc_type else "COMMIT")
                return False

        return _Tx()

    # ---------------------------------------------------------------- reading
    def _rows(self, sql, args=()):
        cur = self._con.execute(sql, args)
        names = [c[0] for c in cur.description]
        out = []
        for r in cur.fetchall():
            rec = dict(zip(names, r))
            for f in _JSON_FIELDS:
                if rec.get(f):
                    rec[f] = json.loads(rec[f])
            out.append(rec)
        return out

    def get(self, key: str) -> dict | None:
        rows = self._rows("SELECT * FROM results WHERE key = ?", (key,))
        return rows[0] if rows else None

    def get_many(self, keys) -> dict:
        """key -> record for the stored keys among ``keys``."""
        keys = list(keys)
        out = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            for rec in self._rows(
                f"SELECT * FROM results WHERE key IN ({', '.join('?' * len(chunk))})", chunk
            ):
                out[rec["key"]] = rec
        return out

    def done_keys(self, keys) -> set:
        """The keys among ``keys`` with a successful result."""
        return {k for k, r in self.get_many(keys).items() if r["status"] == "ok"}

    def count(self, status: str | None = None) -> int:
        if status is None:
            return self._con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        return self._con.execute("SELECT COUNT(*) FROM results WHERE status = ?", (status,)).fetchone()[0]

    def all_records(self) -> list[dict]:
        return self._rows("SELECT * FROM results ORDER BY dataset, method, split, phase")

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _acquire(path: Path) -> FileLock:
    """The lock that gives one run at a time the right to compute into the store at ``path``.

    The operating system releases it when the process ends, however it ends, so a killed run
    leaves no stale lock behind.
    """
    lock = FileLock(str(path) + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise StoreError(f"Another margindist run is using the result store {path} right now. Wait for it "
                         "to finish (then run this command again: it reuses that run's results), or "
                         "choose another output directory (--out).") from None
    return lock


def _move_aside(path: Path) -> Path:
    """Rename a damaged database (and its WAL files) to ``<name>.damaged-<time>``; returns the new name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(path) + suffix)
        if src.exists():
            src.rename(Path(str(aside) + suffix))
    return aside


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
