"""Reports: the Markdown / CSV / LaTeX tables parse back to the same numbers; marks and W/T/L
follow hand-computed t-tests; the store keeps results across reopening without duplicates."""

import csv
import io
import re

import numpy as np
import pytest

from margindist.experiments import (
    DatasetSpec,
    Experiment,
    MethodRun,
    Protocol,
    ResultStore,
    csv_table,
    latex_table,
    markdown_table,
    plan_experiment,
    summarize_experiment,
    write_reports,
)

SPLITS = 6
BASE = {
    "heart": np.array([0.80, 0.82, 0.78, 0.85, 0.79, 0.81]),
    "sonar": np.array([0.70, 0.74, 0.69, 0.72, 0.76, 0.71]),
}
# B: +0.02 on every heart split (zero-variance difference: significantly better), a tie on sonar;
# C: clearly worse on both.
SCORES = {
    ("heart", "A"): BASE["heart"],
    ("heart", "B"): BASE["heart"] + 0.025,
    ("heart", "C"): BASE["heart"] - np.array([0.05, 0.07, 0.04, 0.06, 0.05, 0.08]),
    ("sonar", "A"): BASE["sonar"],
    ("sonar", "B"): BASE["sonar"] + np.array([0.02, -0.03, 0.01, -0.01, 0.02, -0.02]),
    ("sonar", "C"): BASE["sonar"] - np.array([0.10, 0.08, 0.12, 0.09, 0.11, 0.10]),
}


def _experiment(metric="accuracy"):
    return Experiment(
        name="demo", title="synthetic", metric=metric,
        protocol=Protocol("random", 0.8, n_repeats=SPLITS),
        datasets=[DatasetSpec("heart"), DatasetSpec("sonar", label="sonar (rocks)")],
        methods=[MethodRun("mamc", "A"), MethodRun("mamc", "B", fixed={"bias": "zero"}),
                 MethodRun("lssvm", "C")],
        reference="A",
        paper={"heart": {"A": (0.791, 0.03), "B": 0.8}, "sonar": {"A": 0.7}},
        paper_wtl={"B": "3/1/0"},
    )


def _records():
    recs = []
    for (d, m), s in SCORES.items():
        for i, v in enumerate(s):
            recs.append({"key": f"{d}{m}{i}", "dataset": d, "method": m, "split": i, "phase": "eval",
                         "status": "ok", "score": float(v), "fit_time": 0.01, "predict_time": 0.001,
                         "cv_time": None, "params": {"C": 1.0} if m == "C" else {},
                         "info": {"margin_stats": {"mean": 0.2, "std": 0.1, "min": -0.1, "semivariance": 0.01,
                                                   "bound_term": 0.25, "frac_negative": 0.1},
                                  **({"margins": list(np.linspace(-0.2, 0.6, 50))} if i == 0 else {})}})
    return recs


@pytest.fixture(scope="module")
def summary():
    exp = _experiment()
    return summarize_experiment(exp, plan_experiment(exp), _records())


def test_marks_and_wtl_follow_the_tests(summary):
    assert summary.cell("heart", "B").mark == "●" and summary.cell("sonar", "B").mark == ""
    assert summary.cell("heart", "C").mark == "○" and summary.cell("sonar", "C").mark == "○"
    assert summary.cell("heart", "A").mark == ""
    assert summary.wtl == {"B": (1, 1, 0), "C": (0, 0, 2)}
    c = summary.cell("sonar", "C")
    assert c.mean == pytest.approx(SCORES[("sonar", "C")].mean())
    assert c.std == pytest.approx(SCORES[("sonar", "C")].std(ddof=1))
    assert c.se == pytest.approx(c.std / np.sqrt(SPLITS))


CELL = re.compile(r"^(\d\.\d{4}) ± (\d\.\d{4}) \((\d\.\d{4})\)(?: ([●○]))?$")


def test_markdown_parses_back(summary):
    lines = markdown_table(summary).splitlines()
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    assert header == ["dataset", "A (ref)", "A (paper)", "B", "B (paper)", "C"]
    rows = {r[0]: r for r in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}
    for d, label in (("heart", "heart"), ("sonar", "sonar (rocks)")):
        for col, m in ((1, "A"), (3, "B"), (5, "C")):
            mt = CELL.match(rows[label][col])
            c = summary.cell(d, m)
            assert mt, rows[label][col]
            assert float(mt[1]) == round(c.mean, 4) and float(mt[2]) == round(c.std, 4)
            assert float(mt[3]) == round(c.se, 4) and (mt[4] or "") == c.mark
    assert rows["heart"][2] == "0.791 ± 0.03" and rows["heart"][4] == "0.8" and rows["sonar (rocks)"][2] == "0.7"
    assert rows["W/T/L vs A"][1:] == ["(ref)", "", "1/1/0", "3/1/0", "0/0/2"]


def test_csv_parses_back_exactly(summary):
    rows = list(csv.DictReader(io.StringIO(csv_table(summary))))
    by = {r["dataset"]: r for r in rows}
    for d in ("heart", "sonar"):
        for m in "ABC":
            c = summary.cell(d, m)
            assert float(by[d][f"{m} mean"]) == c.mean and float(by[d][f"{m} std"]) == c.std
            assert float(by[d][f"{m} se"]) == c.se and int(by[d][f"{m} n"]) == SPLITS
            assert by[d][f"{m} mark"] == c.mark
    assert float(by["heart"]["A paper"]) == 0.791 and float(by["heart"]["A paper pm"]) == 0.03
    assert by["W/T/L vs A"]["B mark"] == "1/1/0" and by["W/T/L vs A"]["C mark"] == "0/0/2"


TEX = re.compile(r"\$(\d\.\d{4}) \\pm (\d\.\d{4})\$ \((\d\.\d{4})\)(?: \$\\(bullet|circ)\$)?")


def test_latex_parses_back(summary):
    tex = latex_table(summary, "demo_caption")
    assert r"\begin{tabular}" in tex and r"demo\_caption" in tex
    body = {line.split(" & ")[0]: line for line in tex.splitlines() if " & " in line}
    for d, label in (("heart", "heart"), ("sonar", "sonar (rocks)")):
        found = TEX.findall(body[label])
        assert len(found) == 3
        for (mean, std, se, mark), m in zip(found, "ABC"):
            c = summary.cell(d, m)
            assert (float(mean), float(std), float(se)) == (round(c.mean, 4), round(c.std, 4), round(c.se, 4))
            assert {"bullet": "●", "circ": "○", "": ""}[mark] == c.mark
    assert "1/1/0" in body["W/T/L vs A"] and "0/0/2" in body["W/T/L vs A"]


def test_error_metric_flips_values_not_marks():
    exp = _experiment("error")
    s = summarize_experiment(exp, plan_experiment(exp), _records())
    c = s.cell("heart", "C")
    assert c.mean == pytest.approx(1 - SCORES[("heart", "C")].mean()) and c.mark == "○"
    assert s.cell("heart", "B").mark == "●"


def test_write_reports_files_and_index(tmp_path):
    exp = _experiment()
    exp.quick = True
    summary, files = write_reports(exp, plan_experiment(exp), _records(), tmp_path)
    names = {n for n, _ in files}
    assert {"report.md", "table.md", "table.csv", "table.tex", "summary.csv", "results.csv", "index.md",
            "train_time.png", "margins_heart.png", "margins_sonar.png"} <= names
    index = (tmp_path / "index.md").read_text()
    for n in names - {"index.md"}:
        assert f"[{n}]({n})" in index and (tmp_path / n).stat().st_size > 0
    report = (tmp_path / "report.md").read_text()
    assert "QUICK RUN" in report and "QUICK RUN" in (tmp_path / "table.md").read_text()
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary files
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    r = next(r for r in rows if r["dataset"] == "sonar" and r["method"] == "C")
    assert float(r["mean"]) == summary.cell("sonar", "C").mean and r["mark"] == "○"
    assert float(r["pvalue"]) < 0.05


def test_store_roundtrip_no_duplicates(tmp_path):
    path = tmp_path / "s" / "results.sqlite"
    rec = {"key": "k1", "config": "c1", "dataset": "d", "method": "m", "split": 0, "phase": "eval",
           "status": "ok", "score": 0.5, "params": {"C": 1.0}, "info": {"x": [1, 2]}}
    with ResultStore(path) as st:
        st.put(rec)
        st.put({**rec, "score": 0.75})  # same key: replaced, not duplicated
        st.put({**rec, "key": "k2", "config": "c2", "status": "error", "score": None})
        assert st._con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with ResultStore(path) as st:
        assert st.count() == 2 and st.get("k1")["score"] == 0.75
        assert st.get("k1")["params"] == {"C": 1.0} and st.get("k1")["info"] == {"x": [1, 2]}
        assert st.done_keys(["k1", "k2", "k3"]) == {"k1"}
        assert st.delete_configs(["c1"]) == 1 and st.count() == 1 and st.get("k1") is None


def test_report_flags_results_of_other_versions():
    from types import SimpleNamespace

    from margindist import __version__
    from margindist.experiments.reports import header_lines

    exp = SimpleNamespace(name="x", title="", quick=False, source="", methods=[],
                          protocol=SimpleNamespace(describe=lambda datasets, searched=True: "p"))
    plan = SimpleNamespace(datasets=[], runs=[])
    same = header_lines(exp, plan, records=[{"version": __version__}])
    assert not any("Mixed versions" in line for line in same)
    mixed = header_lines(exp, plan, records=[{"version": __version__}, {"version": "0.0.9"}, {"version": "0.0.9"}])
    line = next(line for line in mixed if "Mixed versions" in line)
    assert "0.0.9 (2 results)" in line and f"{__version__} (1 results)" in line
