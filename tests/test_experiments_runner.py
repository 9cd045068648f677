"""Running experiments: determinism, resume, parallel and Dask execution, skips, failures, the
median-of-first-choices rule, and the scikit-learn baselines of the registry."""

import dataclasses
import time

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.svm import SVC, LinearSVC, LinearSVR

from margindist.experiments import (
    DatasetSpec,
    Experiment,
    MethodRun,
    Protocol,
    ResultStore,
    SVRClassifier,
    estimator_margins,
    execute_task,
    get_method,
    plan_experiment,
    registry,
    run_experiment,
)
from margindist.experiments.planning import median_choice, plan_eval_tasks
from margindist.experiments.registry import MethodInfo, UnsupportedError


def small_experiment(**changes):
    exp = Experiment(
        name="t",
        protocol=Protocol("random", 0.8, n_repeats=2, cv_folds=3, seed=5),
        datasets=[DatasetSpec("heart"), DatasetSpec("sonar")],
        methods=[
            MethodRun("svm", "SVM", grid={"C": (0.1, 1.0)}),
            MethodRun("lssvm", "LSSVM", grid={"C": (0.1, 1.0, 10.0)}),
            MethodRun("mamc", "MAMC"),
        ],
        reference="SVM",
    )
    return dataclasses.replace(exp, **changes)


def scores(records):
    return {(r["dataset"], r["method"], r["split"]): (r["score"], tuple(sorted(r["params"].items())))
            for r in records}


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    return run_experiment(small_experiment(), out, write_reports=False), out


def test_run_stores_everything_and_resumes(serial_run):
    outcome, out = serial_run
    assert outcome.ok and outcome.n_planned == 12 and outcome.n_executed == 12
    assert all(r["status"] == "ok" for r in outcome.records)
    again = run_experiment(small_experiment(), out, write_reports=False)
    assert again.n_executed == 0 and scores(again.records) == scores(outcome.records)
    with ResultStore(out / "results.sqlite") as store:
        assert store.count() == 12
    # more repeats reuse the stored splits and compute only the new ones
    more = run_experiment(small_experiment(protocol=small_experiment().protocol.with_(n_repeats=3)), out,
                          write_reports=False)
    assert more.n_executed == 6 and more.n_planned == 18
    old = scores(outcome.records)
    assert {k: v for k, v in scores(more.records).items() if k in old} == old


def test_tasks_do_not_depend_on_order(serial_run):
    outcome, _ = serial_run
    plan = plan_experiment(small_experiment())
    tasks = plan.first_phase_tasks()[::-1]
    recs = [execute_task(t) for t in tasks]
    assert scores(recs) == scores(outcome.records)


def test_serial_equals_local_processes(serial_run, tmp_path):
    outcome, _ = serial_run
    par = run_experiment(small_experiment(), tmp_path, workers=2, write_reports=False)
    assert par.n_executed == 12 and scores(par.records) == scores(outcome.records)


def test_serial_equals_dask(serial_run, tmp_path):
    distributed = pytest.importorskip("distributed")
    outcome, _ = serial_run
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        res = run_experiment(small_experiment(), tmp_path, scheduler=cluster.scheduler_address,
                             write_reports=False)
    assert res.n_executed == 12 and scores(res.records) == scores(outcome.records)


def test_summary_numbers(serial_run):
    outcome, _ = serial_run
    s = outcome.summary
    for (d, m), c in s.cells.items():
        acc = [r["score"] for r in outcome.records if r["dataset"] == d and r["method"] == m]
        assert c.n == 2 and c.mean == pytest.approx(np.mean(acc)) and c.std == pytest.approx(np.std(acc, ddof=1))
        assert c.se == pytest.approx(c.std / np.sqrt(2))
    assert set(s.wtl) == {"LSSVM", "MAMC"}


def test_missing_and_unsupported_methods_are_skipped(monkeypatch, tmp_path):
    monkeypatch.setitem(registry._REGISTRY, "ghost",
                        MethodInfo("ghost", "not written yet", target="margindist.models.ghost_method:Ghost"))
    ok, why = get_method("ghost").status()
    assert not ok and why.startswith("missing")
    exp = small_experiment(
        datasets=[DatasetSpec("heart"), DatasetSpec("no_such_dataset_xyz")],
        methods=[MethodRun("ghost", "Ghost"), MethodRun("mamc", "MAMC"), MethodRun("lr", "LR-rbf", "rbf"),
                 MethodRun("svm", "SVM", fixed={"C": 1.0})],
        protocol=Protocol("random", 0.8, n_repeats=2),
    )
    out = run_experiment(exp, tmp_path, write_reports=True)
    assert out.ok and out.n_planned == 4
    skipped = dict(out.plan.skipped_methods)
    assert skipped["Ghost"].startswith("missing") and "rbf" in skipped["LR-rbf"]
    assert dict(out.plan.skipped_datasets)["no_such_dataset_xyz"].startswith("not available")
    report = (tmp_path / "report.md").read_text()
    assert "Ghost: missing" in report and "no_such_dataset_xyz" in report


def test_unknown_parameter_strict_or_skipped():
    exp = small_experiment(methods=[MethodRun("mamc", "MAMC", grid={"nonsense": (1, 2)}), MethodRun("svm")])
    with pytest.raises(UnsupportedError, match="nonsense"):
        plan_experiment(exp, strict=True)
    plan = plan_experiment(exp)
    assert [r.name for r in plan.runs] == ["svm"] and "nonsense" in dict(plan.skipped_methods)["MAMC"]


def test_failed_tasks_are_recorded_and_retried(tmp_path):
    exp = small_experiment(methods=[MethodRun("lssvm", "bad", fixed={"C": -1.0}), MethodRun("mamc", "MAMC")],
                           datasets=[DatasetSpec("heart")], reference="MAMC")
    out = run_experiment(exp, tmp_path)
    assert not out.ok and out.n_failed == 2
    assert all("C" in err for _, err in out.failures)
    bad = [r for r in out.records if r["method"] == "bad"]
    assert all(r["status"] == "error" and "traceback" in r["info"] for r in bad)
    assert "## Failures" in (tmp_path / "report.md").read_text()
    again = run_experiment(exp, tmp_path, write_reports=False)
    assert again.n_executed == 2 and again.n_failed == 2  # errors are retried, successes kept


def test_force_recomputes(tmp_path):
    exp = small_experiment(datasets=[DatasetSpec("heart")], methods=[MethodRun("mamc", "MAMC")], reference=None)
    first = run_experiment(exp, tmp_path, write_reports=False)
    forced = run_experiment(exp, tmp_path, force=True, write_reports=False)
    assert forced.n_executed == 2 and scores(forced.records) == scores(first.records)
    assert {r["created"] for r in forced.records}.isdisjoint({r["created"] for r in first.records})


def test_median_of_first_choices(tmp_path):
    exp = small_experiment(
        protocol=Protocol("fixed", 120, 100, n_repeats=5, cv_folds=3, selection="median_first",
                          selection_splits=3, seed=2),
        datasets=[DatasetSpec("heart")],
        methods=[MethodRun("svm", "SVM", grid={"C": (0.01, 0.1, 1.0, 10.0)}), MethodRun("mamc", "MAMC")],
    )
    out = run_experiment(exp, tmp_path, write_reports=False)
    assert out.ok and out.n_planned == 10 and out.n_executed == 3 + 10
    with ResultStore(tmp_path / "results.sqlite") as store:
        sel = [r for r in store.all_records() if r["phase"] == "select"]
        assert len(sel) == 3 and all(r["score"] is None for r in sel)
        expected = median_choice([r["info"]["choice"] for r in sel])
        svm = [r for r in out.records if r["method"] == "SVM"]
        assert len(svm) == 5 and all(tuple(r["info"]["choice"]) == expected for r in svm)
        assert all(r["cv_time"] is None for r in svm)  # no CV on the evaluation splits
        assert len(plan_eval_tasks(out.plan, store)) == 10
    assert median_choice([[0, 3], [2, 1], [1, 2]]) == (1, 2)
    assert median_choice([[0], [3], [1], [2]]) == (1,)


def test_sklearn_baselines_and_margins():
    from margindist.datasets import load_dataset

    X, y = load_dataset("heart")
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    lin = get_method("svm").build("linear", {"C": 1.0}, 0).fit(X, y)
    assert isinstance(lin, LinearSVC)
    m, _ = estimator_margins(lin, X, y)
    y_pm = np.where(y == lin.classes_[1], 1, -1)
    np.testing.assert_allclose(m, y_pm * lin.decision_function(X) / np.linalg.norm(lin.coef_))
    rbf = get_method("svm").build("rbf", {"C": 1.0, "gamma": 0.5}, 0).fit(X, y)
    assert isinstance(rbf, SVC)
    m, _ = estimator_margins(rbf, X, y)
    sv, a = rbf.support_vectors_, rbf.dual_coef_.ravel()
    K = np.exp(-0.5 * ((sv[:, None, :] - sv[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(m, y_pm * rbf.decision_function(X) / np.sqrt(a @ K @ a), rtol=1e-10)
    svr = SVRClassifier(C=1.0, random_state=0).fit(X, y)
    ref = LinearSVR(C=1.0, epsilon=0.0, random_state=0, dual="auto", max_iter=5000).fit(X, y_pm)
    np.testing.assert_allclose(svr.decision_function(X), ref.predict(X))
    np.testing.assert_array_equal(svr.predict(X), lin.classes_[(ref.predict(X) > 0).astype(int)])
    with pytest.raises(ValueError, match="binary"):
        SVRClassifier().fit(np.arange(9.0).reshape(-1, 1), np.arange(9) % 3)
    ovr = get_method("ovr").build("linear", {"C": 2.0}, 0)
    assert ovr.estimator.C == 2.0
    peg = get_method("pegasos").build("linear", {"lam": 0.01}, 0)
    assert peg.lam == 0.01
    # Pegasos = SGD on the hinge loss, steps exactly 1/(lam t), on [X, 1] (regularised bias)
    from sklearn.linear_model import SGDClassifier

    peg.fit(X, y)
    ref = SGDClassifier(loss="hinge", alpha=0.01, learning_rate="invscaling", eta0=100.0, power_t=1.0,
                        fit_intercept=False, max_iter=20, tol=None, random_state=0)
    ref.fit(np.column_stack([X, np.ones(len(y))]), y)
    np.testing.assert_allclose(peg.decision_function(X), np.column_stack([X, np.ones(len(y))]) @ ref.coef_[0])
    np.testing.assert_allclose(peg.coef_[0], ref.coef_[0, :-1])
    Xm, ym = load_dataset("iris")
    lr = get_method("lr").build("linear", {}, 0).fit(Xm, ym)
    m, note = estimator_margins(lr, Xm, ym)
    assert m is None and "binary" in note
    with pytest.raises(UnsupportedError):
        get_method("lr").build("rbf")


@pytest.mark.parametrize("quick", [False, True])
def test_every_preset_plans_strictly(quick):
    """Every method of every preset exists and takes the preset's parameters (a typo in a grid
    would otherwise silently drop the method), and the protocols are the papers'."""
    from margindist.experiments.planning import plan_experiment
    from margindist.experiments.presets import get_preset, list_presets

    for name in list_presets():
        exp = get_preset(name, quick=quick)
        plan = plan_experiment(exp, strict=True)
        assert not plan.skipped_methods, (name, plan.skipped_methods)
        assert plan.datasets, name
    if quick:
        return
    protocols = {name: get_preset(name).protocol for name in list_presets()}
    assert protocols["msvmav-linear"].n_repeats == 30 and protocols["msvmav-linear"].cv_folds == 5
    assert protocols["msvmav-linear"].train_size == 0.8
    assert protocols["ldm-rbf"].n_repeats == 30 and protocols["ldm-rbf"].train_size == 0.5
    assert protocols["kmomd-raetsch"].n_repeats == 100 and protocols["kmomd-raetsch"].selection == "median_first"
    assert protocols["m3svm"].n_folds == 5 and protocols["m3svm"].n_repeats == 10
    assert protocols["margin-pursuit"].n_repeats == 25
    grid = get_preset("msvmav-linear").methods[0].grid
    assert len(grid["alpha"]) == len(grid["beta"]) == 11 and min(grid["alpha"]) == 2.0**-10


# ---------------------------------------------------------------------- warm-up, test margins
class _SlowFirstFit(ClassifierMixin, BaseEstimator):
    """Its first fit in a process takes 0.4 s longer (like a numba compilation); records fit sizes."""

    fits: list = []

    def __init__(self, C=1.0):
        self.C = C

    def fit(self, X, y):
        if not _SlowFirstFit.fits:
            time.sleep(0.4)
        _SlowFirstFit.fits.append(X.shape[0])
        self.classes_ = np.unique(y)
        return self

    def predict(self, X):
        return np.full(X.shape[0], self.classes_[0])


def test_first_fit_is_an_untimed_warm_up(monkeypatch):
    from margindist.experiments import tasks

    monkeypatch.setattr(tasks, "_WARMED", set())
    monkeypatch.setattr(_SlowFirstFit, "fits", [])
    monkeypatch.setitem(registry._REGISTRY, "slowfirst",
                        MethodInfo("slowfirst", "test double", family="scikit-learn",
                                   builder=lambda kernel, params, rs: _SlowFirstFit(**params)))
    exp = small_experiment(methods=[MethodRun("slowfirst", "S", grid={"C": (0.1, 1.0)})],
                           datasets=[DatasetSpec("heart")], reference=None)
    recs = [execute_task(t) for t in plan_experiment(exp).first_phase_tasks()]
    assert [r["status"] for r in recs] == ["ok", "ok"]
    first, second = recs
    # the slow fit happened in the warm-up, on a tiny problem (8 rows per class), not in CV or the timed fit
    assert first["info"]["warmup_time"] >= 0.4 and "warmup_time" not in second["info"]
    assert _SlowFirstFit.fits[0] == 2 * tasks.WARMUP_ROWS
    assert first["fit_time"] < 0.2 and first["cv_time"] < 0.3
    # one warm-up per configuration and process: other fixed settings warm up again
    exp2 = small_experiment(methods=[MethodRun("slowfirst", "S2", fixed={"C": 3.0})],
                            datasets=[DatasetSpec("heart")], reference=None)
    rec = execute_task(plan_experiment(exp2).first_phase_tasks()[0])
    assert "warmup_time" in rec["info"] and len(tasks._WARMED) == 2


def test_test_margins_are_stored_beside_training_margins(serial_run):
    outcome, _ = serial_run
    split0 = [r for r in outcome.records if r["split"] == 0 and r["info"].get("margins")]
    assert split0
    for r in split0:
        tm = np.asarray(r["info"]["test_margins"])
        n_test = r["info"]["n_test"]
        assert tm.size == min(n_test, 1000) and np.all(np.diff(tm) >= 0)
        # quantiles at i / (n - 1) of n margins are the sorted margins: the negative ones are the errors
        assert np.mean(tm < 0) == pytest.approx(1 - r["score"], abs=1.0 / n_test)
    assert not any("test_margins" in r["info"] for r in outcome.records if r["split"] != 0)


def test_cli_test_option_reaches_the_report(tmp_path, capsys):
    from margindist.cli import main

    common = ["bench", "--datasets", "heart", "sonar", "--methods", "mamc", "lssvm", "svm", "--repeats", "3",
              "--quiet", "--out", str(tmp_path)]
    assert main(common + ["--test", "corrected-t"]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "Nadeau–Bengio corrected resampled t-test" in report and "## Over the datasets" in report
    assert "Friedman: χ²_F" in report and (tmp_path / "cd_diagram.pdf").exists()
    assert "Nadeau–Bengio" in capsys.readouterr().out
    # the default is the papers' paired t-test; the stored results are reused (statistics only)
    assert main(common) == 0
    assert "two-sided paired t-test over the splits" in (tmp_path / "report.md").read_text()
    assert "18 evaluations stored for this table, 0 computed in this run" in (tmp_path / "report.md").read_text()
    assert main(common + ["--test", "z"]) == 2


def test_progress_says_compiling_during_the_warm_up(monkeypatch, tmp_path):
    import io

    from margindist.experiments import Progress, tasks

    monkeypatch.setattr(tasks, "_WARMED", set())
    stream = io.StringIO()
    exp = small_experiment(methods=[MethodRun("mamc", "MAMC")], datasets=[DatasetSpec("heart")], reference=None)
    out = run_experiment(exp, tmp_path, write_reports=False, progress=Progress(stream=stream, interval=0.0))
    assert out.ok and out.n_executed == 2
    lines = stream.getvalue().splitlines()
    # one warm-up in this process, announced before the first task finished; then the counts
    assert [x for x in lines if "compiling" in x] == ["margindist: compiling (first run only): mamc (linear)"]
    assert lines.index("margindist: compiling (first run only): mamc (linear)") < \
        min(i for i, x in enumerate(lines) if "tasks (" in x)
    assert lines[-1].startswith("margindist: 2/2 tasks (100%)")
