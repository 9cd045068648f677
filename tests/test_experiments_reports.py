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


TEX = re.compile(r"(\\textbf\{)?(\d\.\d{4})\}?(?:\{\\scriptsize \$\\pm\$(\d\.\d{4})\})?(?:\$\^\\(bullet|circ)\$)?$")


def _tex_rows(tex):
    return {line.split(" & ")[0]: [c.strip().removesuffix(r"\\").strip() for c in line.split(" & ")]
            for line in tex.splitlines() if " & " in line}


def test_latex_compact_table(summary):
    tex = latex_table(summary, "demo_caption")
    assert r"\begin{tabular}{lccccc}" in tex and r"demo\_caption" in tex
    # booktabs rules, in order
    pos = [tex.index(r) for r in (r"\toprule", r"\midrule", r"\bottomrule")]
    assert pos == sorted(pos)
    rows = _tex_rows(tex)
    # the paper's columns grouped after ours, under their own header
    assert r"\multicolumn{3}{c}{Ours} & \multicolumn{2}{c}{Paper}" in tex
    assert rows["Dataset"] == ["Dataset", "A", "B", "C", "A", "B"]
    for d, label in (("heart", "heart"), ("sonar", "sonar (rocks)")):
        means = {m: SCORES[(d, m)].mean() for m in "ABC"}
        best = max(means, key=means.get)
        for m, cell in zip("ABC", rows[label][1:4]):
            mt = TEX.match(cell)
            c = summary.cell(d, m)
            assert mt, cell
            assert float(mt[2]) == round(SCORES[(d, m)].mean(), 4)
            assert float(mt[3]) == round(SCORES[(d, m)].std(ddof=1), 4)
            assert bool(mt[1]) == (m == best)  # the best per dataset, and only it, in bold
            assert {"bullet": "●", "circ": "○", None: ""}[mt[4]] == c.mark
    assert rows["heart"][4:] == [r"0.791{\scriptsize $\pm$0.03}", r"\textbf{0.8}"]  # paper: best of its own group
    assert rows["sonar (rocks)"][4:] == [r"\textbf{0.7}", ""]
    assert rows["W/T/L vs A"][1:] == ["--", "1/1/0", "0/0/2", "", "3/1/0"]
    # average ranks by hand: heart B > A > C, sonar A > B > C
    assert rows["Avg. rank (2 datasets)"][1:4] == ["1.50", "1.50", "3.00"]


def test_latex_options(summary):
    ours = latex_table(summary, paper="none", spread="se")
    assert "Paper" not in ours and r"\begin{tabular}{lccc}" in ours and "standard error" in ours
    rows = _tex_rows(ours)
    mt = TEX.match(rows["heart"][3])
    assert float(mt[3]) == round(SCORES[("heart", "C")].std(ddof=1) / np.sqrt(SPLITS), 4)
    bare = latex_table(summary, spread="none", ranks=False)
    assert r"\pm" not in _tex_rows(bare)["heart"][1] and "Avg. rank" not in bare
    with pytest.raises(ValueError, match="spread"):
        latex_table(summary, spread="var")
    with pytest.raises(ValueError, match="paper"):
        latex_table(summary, paper="interleaved")
    # an error table: the lowest value is the best
    exp = _experiment("error")
    err = summarize_experiment(exp, plan_experiment(exp), _records())
    rows = _tex_rows(latex_table(err, paper="none"))
    assert [bool(TEX.match(c)[1]) for c in rows["heart"][1:4]] == [False, True, False]


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
    assert r["test"] == "paired-t"
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


# ---------------------------------------------------------------------- statistics over the datasets
def test_multi_dataset_section_in_report(tmp_path):
    from scipy import stats as sps

    exp = _experiment()
    _, files = write_reports(exp, plan_experiment(exp), _records(), tmp_path)
    names = {n for n, _ in files}
    assert {"cd_diagram.png", "cd_diagram.pdf", "table_ours.tex", "train_time.pdf", "margins_heart.pdf"} <= names
    report = (tmp_path / "report.md").read_text()
    assert "## Over the datasets" in report and "![critical-difference diagram](cd_diagram.png)" in report
    # by hand: ranks heart B 1, A 2, C 3; sonar A 1, B 2, C 3 -> 1.5, 1.5, 3;
    # chi2_F = 12 N / (k (k + 1)) (sum R^2 - k (k + 1)^2 / 4) = 2 (13.5 - 12) = 3, F_F = (N - 1) chi2 / (N (k - 1) - chi2) = 3
    assert f"χ²_F = 3.000 (2 df), p = {sps.chi2.sf(3, 2):.4f}" in report
    assert f"F_F = 3.000 (F(2, 2)), p = {sps.f.sf(3, 2, 2):.4f}" in report
    assert "| C | 3.000 |" in report and "CD = 2.344" in report  # q_0.05(k=3) sqrt(3*4/12) = 2.344 / 1
    assert "each method against A" in report
    # Wilcoxon rows: A vs C on 2 datasets, A better on both: R+ = 3, R- = 0
    assert "| A | C | 2 | 3 | 0 | 0 |" in report


def test_multi_dataset_two_methods_and_one_dataset(tmp_path):
    exp = _experiment()
    exp.methods = exp.methods[:2]
    recs = [r for r in _records() if r["method"] in ("A", "B")]
    write_reports(exp, plan_experiment(exp), recs, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "Not applicable: Friedman's test needs at least 3 methods" in report
    assert "| A | B | 2 |" in report  # the Wilcoxon test is still there
    exp = _experiment()
    exp.datasets = exp.datasets[:1]
    recs = [r for r in _records() if r["dataset"] == "heart"]
    _, files = write_reports(exp, plan_experiment(exp), recs, tmp_path / "one")
    report = (tmp_path / "one" / "report.md").read_text()
    assert "## Over the datasets" in report and "Not applicable" in report
    assert "cd_diagram.png" not in {n for n, _ in files}


def test_multi_dataset_drops_incomplete_datasets():
    from margindist.experiments.reports import multi_dataset_stats

    exp = _experiment()
    recs = [r for r in _records() if not (r["dataset"] == "sonar" and r["method"] == "C")]
    s = summarize_experiment(exp, plan_experiment(exp), recs)
    ms = multi_dataset_stats(s)
    assert ms.datasets == ["heart"] and ms.dropped == [("sonar", ["C"])]
    assert ms.friedman is None and ms.notes and not ms.avg_ranks
    assert set(ms.wilcoxon) == {("A", "B")}  # the only pair with 2 datasets


def test_corrected_test_marks():
    import math

    from scipy import stats as sps

    exp = _experiment()
    exp.test = "corrected-t"
    s = summarize_experiment(exp, plan_experiment(exp), _records())
    assert s.ratios == {"heart": pytest.approx(0.25), "sonar": pytest.approx(0.25)}  # 80/20 splits
    # by hand for C against A on sonar
    d = SCORES[("sonar", "C")] - SCORES[("sonar", "A")]
    t = d.mean() / math.sqrt((1 / SPLITS + 0.25) * d.var(ddof=1))
    p = 2 * sps.t.sf(abs(t), SPLITS - 1)
    c = s.cell("sonar", "C")
    assert c.pvalue == pytest.approx(p, rel=1e-10) and c.mark == ("○" if p < 0.05 else "")
    assert "Nadeau–Bengio" in markdown_table(s) + __import__("margindist.experiments.reports",
                                                              fromlist=["legend"]).legend(s)
    # heart C vs A is significant under the paired test; the corrected test is more cautious
    plain = summarize_experiment(_experiment(), plan_experiment(_experiment()), _records())
    assert plain.cell("heart", "C").pvalue < s.cell("heart", "C").pvalue
    # stored split sizes win over the protocol's fraction
    recs = _records()
    for r in recs:
        r["info"].update(n_train=100, n_test=50)
    assert summarize_experiment(exp, plan_experiment(exp), recs).ratios["heart"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="test must be one of"):
        Experiment(name="x", protocol=Protocol("random", 0.8), datasets=[], methods=[], test="z-test")


# ---------------------------------------------------------------------- figures
def _with_test_margins():
    recs = _records()
    for r in recs:
        if r["split"] == 0:
            r["info"]["test_margins"] = list(np.linspace(-0.4, 0.5, 30))
    return recs


def test_margin_figure_has_test_panel_and_outside_legend():
    from margindist.experiments.reports import make_margin_figure

    exp = _experiment()
    s = summarize_experiment(exp, plan_experiment(exp), _with_test_margins())
    fig = make_margin_figure(s, "heart")
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["training margins", "test margins"]
    assert all(ax.get_legend() is None for ax in axes) and len(fig.legends) == 1
    fig.canvas.draw()
    leg = fig.legends[0].get_window_extent()
    assert all(not leg.overlaps(ax.get_window_extent()) for ax in axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["A", "B", "C"]
    # the test curve is the stored test margins
    x = axes[1].get_lines()[0].get_xdata()
    assert x.min() == pytest.approx(-0.4) and x.max() == pytest.approx(0.5)
    # records without test margins: one panel
    s1 = summarize_experiment(exp, plan_experiment(exp), _records())
    assert len(make_margin_figure(s1, "heart").get_axes()) == 1


def test_time_figure_in_milliseconds():
    from margindist.experiments.reports import make_time_figure

    exp = _experiment()
    s = summarize_experiment(exp, plan_experiment(exp), _records())
    fig = make_time_figure(s)
    ax = fig.get_axes()[0]
    assert "(ms)" in ax.get_ylabel()
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([10.0] * 6)  # fit_time 0.01 s in every record
    fig.canvas.draw()
    assert not fig.legends[0].get_window_extent().overlaps(ax.get_window_extent())


def test_cd_diagram_and_cliques_demsar():
    from margindist.experiments.figures import cliques, plot_critical_difference
    from margindist.experiments.stats import nemenyi_cd

    ranks = {"C4.5": 3.143, "C4.5+m": 2.000, "C4.5+cf": 2.893, "C4.5+m+cf": 1.964}
    names = list(ranks)
    # Demšar Fig. 1(a), p = 0.10: {C4.5+m+cf, C4.5+m, C4.5+cf} and {C4.5+cf, C4.5} are not separated
    groups = [{names[i] for i in g} for g in cliques(list(ranks.values()), nemenyi_cd(4, 14, 0.10))]
    assert groups == [{"C4.5+m+cf", "C4.5+m", "C4.5+cf"}, {"C4.5+cf", "C4.5"}]
    # at 0.05 (CD 1.25) one group holds all four
    assert cliques(list(ranks.values()), nemenyi_cd(4, 14, 0.05)) == [(3, 1, 2, 0)]
    ax = plot_critical_difference(ranks, nemenyi_cd(4, 14, 0.10))
    texts = {t.get_text().strip() for t in ax.texts}
    assert {"C4.5 (3.14)", "C4.5+m+cf (1.96)", "CD = 1.12"} <= texts
    assert ax.get_xlim()[0] > ax.get_xlim()[1]  # rank 1 on the right
    with pytest.raises(ValueError, match="names"):
        plot_critical_difference([1.0, 2.0], 1.0, names=["a"])
    with pytest.raises(ValueError, match="at least 2"):
        plot_critical_difference({"a": 1.0}, 1.0)


def test_one_row_model_behind_the_three_tables(summary):
    from margindist.experiments.reports import (
        main_table,
        render_csv,
        render_latex,
        render_markdown,
    )

    t = main_table(summary)
    assert [r.dataset for r in t.rows] == ["heart", "sonar"] and t.paper_methods == ["A", "B"]
    assert t.rows[0].paper["A"].text == "0.791 ± 0.03" and t.rows[1].paper["B"] is None
    assert t.wtl_text("A") == "(ref)" and t.wtl_text("C") == "0/0/2"
    assert render_markdown(t) == markdown_table(summary) and render_csv(t) == csv_table(summary)
    ours = main_table(summary, paper=False)
    assert ours.paper_methods == [] and render_latex(ours, "demo") == latex_table(summary, "demo", paper="none",
                                                                                   ranks=False)
