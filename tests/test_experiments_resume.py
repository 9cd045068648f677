"""Kill-and-resume: a real run killed with SIGKILL (or interrupted with SIGINT) once some results
are stored resumes to exactly the table of an uninterrupted run, without losing or redoing any
stored result."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from margindist.cli import main

N_TASKS = 2 * 3 * 5

ARGS = ["bench", "--datasets", "heart", "sonar", "--methods", "lssvm", "mamc", "svm", "--kernel", "rbf",
        "--repeats", "5", "--cv", "3", "--param-grid",
        '{"lssvm": {"C": [0.1, 1, 10]}, "svm": {"C": [0.1, 1, 10]}, "mamc": {"gamma": [0.1, 1, 10]}}',
        "--quiet"]


def _count(db):
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:
        return 0


def _start(out):
    return subprocess.Popen([sys.executable, "-m", "margindist.cli", *ARGS, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def _wait_for_results(proc, db, at_least, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        n = _count(db)
        if n >= at_least:
            return n
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be interrupted: {proc.stderr.read()[-2000:]}")
        time.sleep(0.02)
    pytest.fail("no results appeared in time")


def _rows(db):
    con = sqlite3.connect(db)
    try:
        return {k: (s, c) for k, s, c in con.execute("SELECT key, score, created FROM results")}
    finally:
        con.close()


@pytest.fixture(scope="module")
def reference_table(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    assert main([*ARGS, "--out", str(out)]) == 0
    return (out / "table.csv").read_text(), (out / "summary.csv").read_text()


def _check_resume(out, before, reference_table, capsys):
    db = out / "results.sqlite"
    assert main([*ARGS, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    after = _rows(db)
    assert len(after) == N_TASKS  # nothing duplicated, nothing missing
    for key, (score, created) in before.items():  # nothing stored was lost or recomputed
        assert after[key] == (score, created)
    assert f"({N_TASKS - len(before)} computed now)" in text
    table, summary = reference_table
    assert (out / "table.csv").read_text() == table
    strip = lambda s: [line.split(",")[:12] for line in s.splitlines()]
    assert strip((out / "summary.csv").read_text()) == strip(summary)


def test_kill_9_then_resume(tmp_path, reference_table, capsys):
    db = tmp_path / "results.sqlite"
    proc = _start(tmp_path)
    _wait_for_results(proc, db, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = _rows(db)
    assert 3 <= len(before) < N_TASKS, "killed too late to test resuming"
    assert not (tmp_path / "table.csv").exists()
    _check_resume(tmp_path, before, reference_table, capsys)


@pytest.mark.slow
def test_ctrl_c_then_resume(tmp_path, reference_table, capsys):
    db = tmp_path / "results.sqlite"
    proc = _start(tmp_path)
    _wait_for_results(proc, db, 3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "run the same command again to resume" in err
    before = _rows(db)
    assert 3 <= len(before) < N_TASKS
    _check_resume(tmp_path, before, reference_table, capsys)
