"""The command line: exit codes, messages, bench and reproduce runs, progress output."""

import io
import os
import subprocess
import sys

import pytest

from margindist import __version__
from margindist.cli import main
from margindist.experiments.parallel import Progress


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version_and_help(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and __version__ in out
    code, out, _ = run(capsys)
    assert code == 2 and "reproduce" in out and "bench" in out


def test_datasets_and_methods(capsys):
    code, out, _ = run(capsys, "datasets", "--names")
    assert code == 0 and "australian" in out.split()
    code, out, _ = run(capsys, "methods")
    assert code == 0 and "svm" in out and "msvmav" in out and "pegasos" in out


def test_reproduce_list_and_unknown_preset(capsys):
    code, out, _ = run(capsys, "reproduce", "--list")
    assert code == 0
    for name in ("msvmav-linear", "msvmav-rbf", "ldm-linear", "ldm-rbf", "kmomd-raetsch", "m3svm",
                 "margin-pursuit"):
        assert name in out
    code, _, err = run(capsys, "reproduce", "no-such-preset")
    assert code == 2 and "unknown preset 'no-such-preset'" in err and "msvmav-linear" in err
    code, _, _ = run(capsys, "reproduce")
    assert code == 2


def test_reproduce_unknown_dataset_or_method(capsys, tmp_path):
    code, _, err = run(capsys, "reproduce", "msvmav-linear", "--quick", "--datasets", "sonar", "--out", str(tmp_path))
    assert code == 2 and "unknown dataset 'sonar'" in err and "australian" in err
    code, _, err = run(capsys, "reproduce", "msvmav-linear", "--methods", "xgboost", "--out", str(tmp_path))
    assert code == 2 and "unknown method 'xgboost'" in err and "MSVMAv" in err
    code, _, err = run(capsys, "reproduce", "msvmav-linear", "--reference", "nope", "--out", str(tmp_path))
    assert code == 2 and "unknown reference" in err
    assert not list(tmp_path.iterdir())  # nothing was run


@pytest.mark.parametrize("argv, message", [
    (["--datasets", "nosuchdata", "--methods", "svm"], "unknown dataset 'nosuchdata'; valid datasets:"),
    (["--datasets", "heart", "--methods", "svm", "xgb"], "unknown method 'xgb'; valid methods:"),
    (["--datasets", "heart", "--methods", "svm", "--param-grid", "{oops"], "not valid JSON"),
    (["--datasets", "heart", "--methods", "svm", "--param-grid", '{"svm": {"Cee": [1]}}'], "no parameter(s) ['Cee']"),
    (["--datasets", "heart", "--methods", "svm", "--protocol", "bootstrap"], "unknown --protocol"),
    (["--datasets", "heart", "--methods", "svm", "--reference", "lr"], "not one of --methods"),
    (["--datasets", "heart", "--methods", "svm", "--workers", "0"], "--workers"),
    (["--datasets", "heart", "--methods", "svm", "--repeats", "0"], "--repeats"),
])
def test_bench_usage_errors(capsys, tmp_path, argv, message):
    code, _, err = run(capsys, "bench", *argv, "--out", str(tmp_path))
    assert code == 2 and message in err
    assert not (tmp_path / "report.md").exists()


def test_bench_runs_and_resumes(capsys, tmp_path):
    argv = ["bench", "--datasets", "heart,digits:5", "--methods", "svm", "mamc", "--repeats", "2", "--cv", "3",
            "--param-grid", '{"svm": {"C": "pow2:-2:2:2"}}', "--out", str(tmp_path), "--quiet"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "| dataset | svm (ref) | mamc |" in out and "W/T/L vs svm" in out and err == ""
    for name in ("index.md", "report.md", "table.md", "table.csv", "table.tex", "summary.csv", "results.csv"):
        assert (tmp_path / name).is_file()
    assert "C in {2^-2, 1, 2^2}" in (tmp_path / "report.md").read_text()
    code, out2, _ = run(capsys, *argv)
    assert code == 0 and "(0 computed now)" in out2
    assert out2.split("\n\n")[1] == out.split("\n\n")[1]  # same table


def test_failing_tasks_exit_1(capsys, tmp_path):
    code, out, _ = run(capsys, "bench", "--datasets", "heart", "--methods", "lssvm", "--repeats", "2",
                       "--param-grid", '{"C": [-1.0]}', "--out", str(tmp_path), "--quiet")
    assert code == 1 and "2 task(s) failed" in out


def test_bench_on_a_dask_scheduler(capsys, tmp_path):
    distributed = pytest.importorskip("distributed")
    argv = ["bench", "--datasets", "heart", "--methods", "mamc", "--repeats", "2", "--quiet"]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        code, out, err = run(capsys, *argv, "--scheduler", cluster.scheduler_address, "--out", str(tmp_path / "d"))
    assert code == 0, err
    code, serial, _ = run(capsys, *argv, "--out", str(tmp_path / "s"))
    assert code == 0 and (tmp_path / "d" / "table.csv").read_text() == (tmp_path / "s" / "table.csv").read_text()
    assert out.split("\n\n")[1] == serial.split("\n\n")[1]


def test_quick_preset_says_so(capsys, tmp_path):
    code, out, err = run(capsys, "reproduce", "margin-pursuit", "--quick", "--datasets", "digits-5",
                         "--methods", "marginpursuit", "--repeats", "2", "--out", str(tmp_path),
                         "--log-interval", "1000")
    assert code == 0, err
    assert "QUICK RUN" in out and "QUICK RUN" in err and "QUICK RUN" in (tmp_path / "index.md").read_text()
    assert "| dataset | MarginPursuit | Pegasos (ref) |" in out  # the reference is kept
    assert "reference method Pegasos" in err


def test_progress_modes():
    class TTY(io.StringIO):
        def isatty(self):
            return True

    tty = TTY()
    p = Progress(4, stream=tty)
    assert p.mode == "bar"
    p.start()
    for _ in range(4):
        p.update(item="heart/svm#0")
    p.close()
    text = tty.getvalue()
    assert "\r[" in text and "4/4" in text and "heart/svm#0" in text
    pipe = io.StringIO()
    p = Progress(3, stream=pipe, interval=0.0)
    assert p.mode == "log"
    p.start("go")
    p.update()
    p.update(failed=True)
    assert "ETA" in pipe.getvalue()
    p.update()
    p.close()
    assert "\r" not in pipe.getvalue() and "3/3 tasks (100%)" in pipe.getvalue() and "1 failed" in pipe.getvalue()
    quiet = TTY()
    p = Progress(2, stream=quiet, quiet=True)
    p.update()
    p.close("done")
    assert p.mode == "off" and quiet.getvalue() == ""


def test_progress_off_when_not_a_tty(tmp_path):
    argv = [sys.executable, "-m", "margindist.cli", "bench", "--datasets", "heart", "--methods", "mamc",
            "--repeats", "3", "--log-interval", "0", "--out", str(tmp_path / "a")]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert res.returncode == 0, res.stderr
    assert "\r" not in res.stderr and "3/3 tasks (100%)" in res.stderr
    assert "| dataset | mamc (ref) |" in res.stdout  # the table goes to stdout, progress to stderr


def test_closed_pipe_is_not_an_error():
    # `margindist datasets | head -1`: the reader closes the pipe before the listing is written
    code = "import sys; from margindist.cli import main; sys.exit(main(['datasets']))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "BrokenPipeError" not in err and "Traceback" not in err
