"""The result store: one SQLite database (WAL mode) per output directory.

Every finished task is one row keyed by its task key, a hash of (protocol, dataset, method
run with its grid and fixed parameters, split, phase). Rows are written by the coordinating
process only, one transaction per result, committed (with ``synchronous=FULL``) as soon as the
result arrives, so a run killed at any moment (Ctrl-C, ``kill -9``, power loss) keeps every
finished result and loses at most the tasks that were running. The primary key makes a
result impossible to store twice; re-running the same command skips the stored keys and
computes only the rest, so the final numbers are those of an uninterrupted run.

A store also travels as text (:func:`write_export`, :func:`read_export`): JSON Lines, a header
line naming the experiment, then one record per line in key order (gzip-compressed for a
``.gz`` name, byte for byte the same for the same records). ``margindist store export`` writes
it from a run that may still be going, ``margindist store import`` merges it into another
store (:meth:`ResultStore.merge`): the finished work of a run on another machine, or of a
machine that is gone, is resumed instead of recomputed.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import sqlite3
import time
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["RECORD_FIELDS", "ResultStore", "StoreError", "read_export", "write_export"]


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
        values = _row_values(record)
        with self._transaction():
            self._con.execute(
                f"INSERT OR REPLACE INTO results ({', '.join(RECORD_FIELDS)}) "
                f"VALUES ({', '.join('?' * len(RECORD_FIELDS))})",
                values,
            )

    def merge(self, records, *, replace: bool = False) -> tuple[int, int]:
        """Add records (dicts in the store's format, e.g. from :func:`read_export`) in one
        transaction: a record whose key is already stored is kept as stored unless ``replace``
        (then the incoming one wins). Returns (records written, records left as stored)."""
        rows = [_row_values(r) for r in records]
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        sql = f"{verb} INTO results ({', '.join(RECORD_FIELDS)}) VALUES ({', '.join('?' * len(RECORD_FIELDS))})"
        with self._transaction():
            changes = self._con.total_changes
            self._con.executemany(sql, rows)
            written = self._con.total_changes - changes  # ignored rows are no change
        return written, len(rows) - written

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


def _row_values(record) -> list:
    """The column values of one record (a TaskRecord or a record dict), JSON fields encoded."""
    row = record.to_dict() if hasattr(record, "to_dict") else dict(record)
    row.setdefault("created", time.time())
    for f in _JSON_FIELDS:
        if f in row and not isinstance(row[f], str):
            row[f] = json.dumps(row[f], default=_json_default)
    return [row.get(f) for f in RECORD_FIELDS]


# ---------------------------------------------------------------------- the store as text
#: The ``format`` of an export's header line, and the version of its layout.
EXPORT_FORMAT = "margindist-results"
EXPORT_VERSION = 1

#: The fields every record must have, and the types of every field (None allowed where listed).
_REQUIRED = ("key", "config", "dataset", "method", "split", "phase", "status")
_TYPES = {"key": str, "config": str, "dataset": str, "method": str, "split": int, "phase": str, "status": str,
          "score": (int, float), "fit_time": (int, float), "predict_time": (int, float),
          "cv_time": (int, float), "params": dict, "info": dict, "created": (int, float), "version": str}


def write_export(path, records, *, identity: dict | None = None) -> int:
    """Write ``records`` (store rows, as :meth:`ResultStore.all_records` gives them) to ``path``
    as JSON Lines: a header line ``{"format": "margindist-results", "version": 1, "identity":
    ..., "n_records": N}`` (``identity``: the experiment description of the run's output
    directory, or None), then the records in key order. A name ending in ``.gz`` is
    gzip-compressed without a time stamp, so the same records give the same bytes. The file is
    written beside ``path`` and renamed into place: an interrupted export leaves no partial
    file. Returns the number of records."""
    path = Path(path)
    records = sorted(records, key=lambda r: r["key"])
    header = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "identity": identity, "n_records": len(records)}
    lines = [json.dumps(header, sort_keys=True)]
    lines += [json.dumps({f: r.get(f) for f in RECORD_FIELDS}, sort_keys=True, default=_json_default)
              for r in records]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if path.name.endswith(".gz"):
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
            gz.write(data)
        data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return len(records)


def read_export(path) -> tuple[dict, list[dict]]:
    """The header and the records of an export written by :func:`write_export` (gzip or plain,
    recognised by its bytes), each record checked: a file that is not an export, a damaged or
    truncated one, or a record with a missing field or a field of the wrong type raises a
    ValueError naming the file and the line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    try:
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is damaged ({exc}); export the store again.") from None
    lines = text.splitlines()
    header = _parse_line(path, 1, lines[0] if lines else "")
    if header.get("format") != EXPORT_FORMAT:
        raise ValueError(f"{path} is not a margindist result export (its first line has no "
                         f"\"format\": \"{EXPORT_FORMAT}\"); write one with `margindist store export`.")
    if header.get("version") != EXPORT_VERSION:
        raise ValueError(f"{path} has export version {header.get('version')!r}; this margindist reads "
                         f"version {EXPORT_VERSION}.")
    records = [_check_record(path, n, _parse_line(path, n, line)) for n, line in enumerate(lines[1:], start=2)]
    if header.get("n_records") != len(records):
        raise ValueError(f"{path} is truncated: its header announces {header.get('n_records')} records, "
                         f"it holds {len(records)}; export the store again.")
    return header, records


def _parse_line(path, n, line) -> dict:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"{path}, line {n}: not JSON ({exc}).") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}, line {n}: a JSON object was expected, got {type(obj).__name__}.")
    return obj


def _check_record(path, n, rec) -> dict:
    missing = [f for f in _REQUIRED if rec.get(f) is None]
    if missing:
        raise ValueError(f"{path}, line {n}: the record has no {', '.join(missing)}.")
    for f, kind in _TYPES.items():
        v = rec.get(f)
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
            raise ValueError(f"{path}, line {n}: field {f!r} is {type(v).__name__}, expected "
                             f"{getattr(kind, '__name__', 'a number')}.")
    return {f: rec.get(f) for f in RECORD_FIELDS}


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
