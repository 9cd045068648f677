"""The command line: exit codes, messages, bench and reproduce runs, progress output."""

import io
import json
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
    # rich redraws the line in place: carriage return, erase the line
    assert "\r\x1b[2K" in text and "4/4" in text and "heart/svm#0" in text
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


# ---------------------------------------------------------------------- a sturdy bench
@pytest.mark.parametrize("argv, messages", [
    (["bench", "--datasets", "heart"], ["--methods is required", "e.g. --methods svm", "margindist methods"]),
    (["bench", "--methods", "svm"], ["--datasets is required", "e.g. --datasets heart", "margindist datasets"]),
    (["bench", "--datasets", "hearts", "--methods", "svm"], ["unknown dataset 'hearts' (did you mean 'heart'?)"]),
    (["bench", "--datasets", "heart", "--methods", "svn"], ["unknown method 'svn' (did you mean", "'svm'"]),
    (["bench", "--datasets", "heart", "--methods", "svm", "--protocol", "ldm-linaer"],
     ["unknown --protocol 'ldm-linaer' (did you mean 'ldm-linear'"]),
    (["bench", "--datasets", "heart", "--methods", "svm", "--param-grid", "preset:ldm-lin"],
     ["--param-grid preset:ldm-lin: unknown preset 'ldm-lin' (did you mean 'ldm-linear'"]),
    (["bench", "--datasets", "heart", "--methods", "svm", "--param-grid", "preset:msvmav-rbf", "--kernel", "linear"],
     ["rbf-kernel grids", "add --kernel rbf"]),
    (["bench", "--datasets", "heart", "--methods", "mamc", "--param-grid", "preset:m3svm"],
     ["has no grid for any of --methods (mamc)", "the preset runs crammer_singer"]),
    (["bench", "--datasets", "heart", "--methods", "svm", "--param-grid", '{"svn": {"C": [1]}}'],
     ["grid for 'svn' (did you mean 'svm'?)", "not one of --methods"]),
    (["bench", "--datasets", "heart", "--methods", "svm", "--reference", "svn"], ["--reference 'svn'", "svm"]),
    (["bench", "--datasets", "heart", "--methods", "svm", "svm"], ["svm listed twice in --methods"]),
    (["bench", "--datasets", "heart", "--methods", "svm", "--cv", "1"], ["--cv", "at least 2 folds"]),
    (["bench", "--datasets", "heart", "--methods", "lr", "--kernel", "rbf"],
     ["nothing to run", "lr has no 'rbf' kernel", "--kernel"]),
    (["reproduce", "msvmav-linaer"], ["unknown preset 'msvmav-linaer' (did you mean 'msvmav-linear'"]),
    (["reproduce", "ldm-linear", "--datasets", "hart"], ["unknown dataset 'hart' (did you mean 'heart'?)"]),
    (["reproduce", "ldm-linear", "--methods", "kmomdd"], ["unknown method 'kmomdd' (did you mean 'kmomd'"]),
])
def test_misuse_is_a_usage_error_that_names_the_fix(capsys, tmp_path, argv, messages):
    out = tmp_path / "r"
    code, stdout, err = run(capsys, *argv, "--out", str(out))
    assert code == 2, err
    assert f"usage: margindist {argv[0]}" in err and f"margindist {argv[0]}: error: " in err  # argparse's style
    for m in messages:
        assert m in err
    assert "Traceback" not in err and "IndexError" not in err and stdout == ""
    assert not out.exists()  # a run that does not start leaves no directory


def test_nothing_to_run_leaves_no_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("MARGINDIST_DATA", raising=False)
    out = tmp_path / "r"
    code, _, err = run(capsys, "reproduce", "m3svm", "--datasets", "cornell", "--data-dir", str(tmp_path / "none"),
                       "--out", str(out))
    assert code == 1 and "nothing to run (no output written)" in err and "cornell" in err
    assert "not available offline" in err
    assert not out.exists()


def test_paper_grids_have_one_source():
    from margindist.experiments.presets import (
        get_preset,
        paper_grid,
        paper_grid_source,
        preset_method_run,
    )

    svm = next(r for r in get_preset("msvmav-linear").methods if r.method == "svm")
    assert paper_grid("svm") == svm.grid and paper_grid_source("svm") == "msvmav-linear"
    assert paper_grid_source("ldm") == "ldm-linear" and paper_grid_source("ldm", "rbf") == "ldm-rbf"
    assert paper_grid_source("kmomd", "rbf") == "kmomd-raetsch"  # the method's own paper first
    assert paper_grid_source("m3svm") == "m3svm" and paper_grid("m3svm") == preset_method_run("m3svm", "m3svm").grid
    assert preset_method_run("m3svm", "m3svm").name == "M3SVM"  # not ISM3 or Weston-Watkins
    assert "gamma" in paper_grid("svm", "rbf") and "gamma" not in paper_grid("svm")
    assert paper_grid("mamc") == {} and paper_grid("pegasos") == {}  # nothing to tune
    assert paper_grid("ovr", "rbf") == paper_grid("ovr")  # no rbf preset runs it: the linear grid
    assert preset_method_run("m3svm", "mamc") is None


def test_cv_without_grid_searches_the_paper_grids(capsys, tmp_path):
    code, _, err = run(capsys, "bench", "--datasets", "heart", "--methods", "svm", "mamc", "--repeats", "2",
                       "--cv", "3", "--out", str(tmp_path / "r"), "--quiet")
    assert code == 0, err
    assert "warning" not in err  # svm is tuned, mamc has no hyperparameter
    report = (tmp_path / "r" / "report.md").read_text()
    assert "C in {2^-10, 2^-8, 2^-6, 2^-4, 2^-2, 1, 2^2, 2^4, 2^6, 2^8, 2^10}" in report
    assert "Paper grid (preset msvmav-linear), chosen by 3-fold CV" in report
    assert "3-fold" in report


def test_param_grid_preset(capsys, tmp_path):
    code, _, err = run(capsys, "bench", "--datasets", "heart", "--methods", "svm", "lssvm", "--repeats", "2",
                       "--param-grid", "preset:ldm-linear", "--out", str(tmp_path / "r"), "--quiet")
    assert code == 0, err
    report = (tmp_path / "r" / "report.md").read_text()
    assert "svm: `svm` (linear) — C in {10, 50, 100}. Grid of preset ldm-linear" in report
    # lssvm is not in the LDM preset: it runs untuned, and the run says so
    assert "warning: lssvm runs untuned" in err and "preset ldm-linear has no grid for it" in err
    assert "--cv K" in err and "--param-grid preset:NAME" in err
    assert "lssvm: `lssvm` (linear) — no hyperparameter search. Untuned" in report
    # the preset's kernel is taken when --kernel is not given
    code, _, err = run(capsys, "bench", "--datasets", "heart", "--methods", "svm", "--repeats", "2",
                       "--param-grid", "preset:msvmav-rbf", "--out", str(tmp_path / "rbf"), "--quiet")
    assert code == 0, err
    assert "svm: `svm` (rbf) — gamma in" in (tmp_path / "rbf" / "report.md").read_text()


def test_untuned_comparison_warns(capsys, tmp_path):
    code, _, err = run(capsys, "bench", "--datasets", "heart", "--methods", "svm", "mamc", "--repeats", "2",
                       "--out", str(tmp_path / "r"), "--quiet")
    assert code == 0
    assert "margindist: warning: svm runs untuned, with default hyperparameters" in err
    assert "add --cv K" in err and "mamc" not in err
    code, _, err = run(capsys, "bench", "--datasets", "heart", "--methods", "mamc", "--repeats", "2", "--cv", "3",
                       "--out", str(tmp_path / "m"), "--quiet")
    assert code == 0 and "--cv 3 has no effect" in err


def test_out_of_another_experiment_is_refused_unless_force(capsys, tmp_path):
    out = tmp_path / "r"
    first = ["bench", "--datasets", "heart", "wdbc", "--methods", "mamc", "--repeats", "2", "--out", str(out),
             "--quiet"]
    code, _, err = run(capsys, *first)
    assert code == 0, err
    assert {"margins_heart.png", "margins_wdbc.png", "report.md", "experiment.json"} <= {p.name for p in out.iterdir()}
    report = (out / "report.md").read_text()
    # the same experiment resumes, also with more repeats or other progress options
    code, _, err = run(capsys, *first[:-1], "--repeats", "3", "--log-interval", "1000")
    assert code == 0 and "holds a different experiment" not in err
    report = (out / "report.md").read_text()

    other = ["bench", "--datasets", "heart", "--methods", "mamc", "lssvm", "--repeats", "2", "--param-grid",
             '{"lssvm": {"C": [1.0]}}', "--out", str(out), "--quiet"]
    code, stdout, err = run(capsys, *other)
    assert code == 2 and stdout == ""
    assert f"--out {out} holds a different experiment (bench 'bench': mamc (linear) on heart, wdbc" in err
    assert "Give another --out DIR, or add --force" in err
    assert (out / "report.md").read_text() == report  # nothing touched
    assert (out / "margins_wdbc.png").exists()

    code, _, err = run(capsys, *other, "--force")
    assert code == 0, err
    names = {p.name for p in out.iterdir()}
    assert "margins_heart.png" in names and "margins_wdbc.png" not in names  # the stale figure is gone
    assert "results.sqlite" in names and "wdbc" not in (out / "report.md").read_text()
    assert "lssvm" in json.loads((out / "experiment.json").read_text())["experiment"]
    # the new experiment is now the directory's own: no --force needed to resume it
    code, _, _ = run(capsys, *other)
    assert code == 0


def test_same_preset_run_removes_stale_figures(capsys, tmp_path):
    out = tmp_path / "r"
    argv = ["reproduce", "margin-pursuit", "--quick", "--methods", "pegasos", "--repeats", "2", "--out", str(out),
            "--quiet"]
    code, _, err = run(capsys, *argv, "--datasets", "digits-5", "penbased-12")
    assert code == 0, err
    assert (out / "margins_digits-5.png").exists() and (out / "margins_penbased-12.png").exists()
    (out / "notes.txt").write_text("mine")
    # a subset of the same preset is the same experiment: accepted, and the figure it no longer draws goes
    code, _, err = run(capsys, *argv, "--datasets", "digits-5")
    assert code == 0, err
    assert (out / "margins_digits-5.png").exists() and not (out / "margins_penbased-12.png").exists()
    assert (out / "notes.txt").read_text() == "mine"  # files the reports did not write are kept


def test_out_that_is_not_a_run_directory(capsys, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("x")
    argv = ["bench", "--datasets", "heart", "--methods", "mamc", "--repeats", "2", "--out", str(out), "--quiet"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "is not empty and holds no margindist results" in err and "--force" in err
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    code, _, err = run(capsys, *argv, "--force")
    assert code == 0 and (out / "thesis.tex").exists() and (out / "report.md").exists()


def test_cv_fills_in_the_paper_grid_of_a_method_without_one(capsys, tmp_path):
    code, _, err = run(capsys, "bench", "--datasets", "heart", "--methods", "svm", "lssvm", "--repeats", "2",
                       "--cv", "3", "--param-grid", '{"svm": {"C": [1.0, 2.0]}}', "--out", str(tmp_path / "r"),
                       "--quiet")
    assert code == 0, err
    assert "untuned" not in err
    report = (tmp_path / "r" / "report.md").read_text()
    assert "svm: `svm` (linear) — C in {1, 2}" in report
    assert "lssvm: `lssvm` (linear) — C in {2^-10," in report and "Paper grid (preset msvmav-linear)" in report


def test_progress_compiling_state():
    class TTY(io.StringIO):
        def isatty(self):
            return True

    tty = TTY()
    p = Progress(2, stream=tty)
    p.start()
    p.compiling("odm (linear)")
    assert "compiling (first run only): odm (linear)" in tty.getvalue()
    p.compiling(None)
    p.update(item="heart/odm#0")
    p.close()
    pipe = io.StringIO()
    p = Progress(2, stream=pipe, interval=1000.0)
    p.start()
    p.compiling("odm (linear)")
    p.compiling(None)
    p.compiling("odm (linear)")  # a second configuration: a second line
    p.update(2)
    p.close()
    assert pipe.getvalue().count("margindist: compiling (first run only): odm (linear)\n") == 2
    assert "\r" not in pipe.getvalue()
