"""Reports of an experiment: tables (Markdown, CSV, LaTeX), figures, an index.

The main table has the papers' layout: one row per dataset, one column per method, cells
``mean ± std (se)`` over the splits (se = std / sqrt(n), the standard error; the papers'
± values are sometimes one and sometimes the other, so both are given), a mark ● / ○ where
the method is significantly better / worse than the reference method (two-sided test over
the splits at 95 %: the papers' paired t-test, or the Nadeau–Bengio corrected resampled
t-test with ``Experiment(test="corrected-t")``), a W/T/L row counting those outcomes over the
datasets, and the paper's number in a column beside ours where the preset has one.

With at least two datasets and two methods the report compares the methods over the
datasets (Demšar 2006): average ranks, Friedman's test with the Iman–Davenport F (three
methods or more), Nemenyi's critical difference and Holm's procedure after it, a Wilcoxon
signed-ranks test for every pair of methods, and the critical-difference diagram.

Files written to the output directory (all atomically: a reader never sees half a file):

* ``report.md``: everything below in one page (tables, statistics over the datasets,
  skipped work, failures, times, chosen hyperparameters, margin statistics, figures, notes);
* ``table.md``, ``table.csv``: the main table; ``table.tex``: a compact LaTeX (booktabs)
  version, best result per dataset in bold, the paper's columns grouped beside ours where
  the preset has them (``table_ours.tex``: ours only);
* ``summary.csv``: one row per (dataset, method) with every number, full precision;
* ``results.csv``: one row per task (split) with score, times, chosen parameters;
* figures, each as PNG and PDF: ``margins_<dataset>``: cumulative distributions of the
  normalised training and test margins (split 0); ``train_time``: mean training time per
  method and dataset (ms); ``cd_diagram``: the critical-difference diagram;
* ``index.md``: the list of files.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .records import TaskRecord, fmt_value
from .stats import (
    compare_splits,
    friedman_from_ranks,
    holm_test,
    nemenyi_cd,
    nemenyi_test,
    rank_scores,
    summarize,
    wilcoxon_test,
    win_tie_loss,
)

__all__ = [
    "MultiDatasetStats",
    "Summary",
    "csv_table",
    "latex_table",
    "markdown_table",
    "multi_dataset_markdown",
    "multi_dataset_stats",
    "summarize_experiment",
    "write_reports",
]

#: Display names of the per-dataset tests.
TEST_NAMES = {"paired-t": "two-sided paired t-test over the splits",
              "corrected-t": "two-sided Nadeau–Bengio corrected resampled t-test over the splits"}

MARK_BETTER, MARK_WORSE = "●", "○"


@dataclass
class Cell:
    dataset: str
    method: str
    n: int = 0
    mean: float = float("nan")  # in the table's metric
    std: float = float("nan")
    se: float = float("nan")
    scores: dict = field(default_factory=dict)  # split -> accuracy
    outcome: int = 0  # +1 better / -1 worse than the reference (significant)
    pvalue: float = float("nan")
    mean_diff: float = float("nan")  # accuracy difference to the reference
    fit_time: float = float("nan")
    predict_time: float = float("nan")
    cv_time: float = float("nan")
    params: str = ""
    margin: dict = field(default_factory=dict)
    margins: list | None = None  # split-0 training margins (quantiles)
    test_margins: list | None = None  # split-0 test margins (quantiles)
    margin_note: str = ""
    n_failed: int = 0
    cv_failed: int = 0  # grid-point fits that raised during CV, over all splits
    cv_error: str = ""
    fit_warnings: int = 0
    fit_warning: str = ""

    @property
    def mark(self) -> str:
        return MARK_BETTER if self.outcome > 0 else MARK_WORSE if self.outcome < 0 else ""


@dataclass
class Summary:
    """Numbers of an experiment, ready for the tables."""

    name: str
    title: str
    metric: str
    reference: str | None
    datasets: list  # names, in order
    labels: dict  # dataset name -> display name
    methods: list  # labels, in order
    cells: dict  # (dataset, method) -> Cell
    wtl: dict  # method -> (w, t, l)
    paper: dict
    paper_wtl: dict
    quick: bool = False
    skipped_pairs: dict = field(default_factory=dict)  # (dataset, method) -> reason
    test: str = "paired-t"  # the per-dataset test of the marks and W/T/L
    ratios: dict = field(default_factory=dict)  # dataset -> n_test / n_train of its splits

    def paper_methods(self) -> list:
        return [m for m in self.methods if any(m in self.paper.get(d, {}) for d in self.datasets)]

    def cell(self, d, m) -> Cell | None:
        return self.cells.get((d, m))


def _fmt_params(params: dict) -> str:
    return ", ".join(f"{k}={fmt_value(v)}" for k, v in params.items()) if params else "-"


def _cell(exp, d: str, m: str, recs: list) -> Cell:
    """The cell of (dataset d, method m) from its evaluation records."""
    recs = sorted(recs, key=lambda r: r.split)
    ok = [r for r in recs if r.ok and r.score is not None]
    c = Cell(d, m, n_failed=len(recs) - len(ok))
    if not ok:
        return c
    acc = np.array([r.score for r in ok])
    s = summarize(acc if exp.metric == "accuracy" else 1.0 - acc)
    c.n, c.mean, c.std, c.se = s["n"], s["mean"], s["std"], s["se"]
    c.scores = {int(r.split): float(r.score) for r in ok}
    c.fit_time = float(np.mean([r.fit_time for r in ok]))
    c.predict_time = float(np.mean([r.predict_time for r in ok]))
    cvt = [r.cv_time for r in ok if r.cv_time is not None]
    c.cv_time = float(np.mean(cvt)) if cvt else float("nan")
    top, k = Counter(_fmt_params(r.params) for r in ok).most_common(1)[0]
    c.params = top if k == len(ok) else f"{top} ({k}/{len(ok)})"
    ms = [r.margin_stats for r in ok if r.margin_stats]
    if ms:
        c.margin = {key: float(np.mean([x[key] for x in ms])) for key in ms[0]}
    for r in ok:
        if r.split == min(exp.margin_splits) and r.margins:
            c.margins, c.test_margins = r.margins, r.test_margins
    c.margin_note = "; ".join(sorted({r.info["margin_note"] for r in ok if r.info.get("margin_note")}))
    c.cv_failed = int(sum(r.info.get("cv_failed", 0) for r in ok))
    errs = [r.info["cv_errors"][0] for r in ok if r.info.get("cv_errors")]
    c.cv_error = errs[0] if errs else ""
    c.fit_warnings = int(sum(r.info.get("fit_warnings", 0) for r in ok))
    warns = [r.info["fit_warning"] for r in ok if r.info.get("fit_warning")]
    c.fit_warning = warns[0] if warns else ""
    return c


def _common_scores(c: Cell, rc: Cell) -> tuple[list, list]:
    common = sorted(set(c.scores) & set(rc.scores))
    return [c.scores[s] for s in common], [rc.scores[s] for s in common]


def _against_reference(cells: dict, datasets: list, methods: list, ref: str, test: str, ratios: dict) -> dict:
    """Marks each cell against the reference (in place); returns method -> (w, t, l)."""
    for d in datasets:
        rc = cells[(d, ref)]
        for m in methods:
            c = cells[(d, m)]
            if m == ref or not c.n or not rc.n:
                continue
            t = compare_splits(*_common_scores(c, rc), test, test_train_ratio=ratios.get(d))
            c.outcome, c.pvalue, c.mean_diff = t.outcome, t.pvalue, t.mean_diff
    wtl = {}
    for m in methods:
        if m == ref:
            continue
        pairs, pair_ratios = [], []
        for d in datasets:
            c, rc = cells[(d, m)], cells[(d, ref)]
            if c.n and rc.n:
                pairs.append(_common_scores(c, rc))
                pair_ratios.append(ratios.get(d))
        wtl[m] = win_tie_loss(pairs, test=test, test_train_ratios=pair_ratios)
    return wtl


def summarize_experiment(exp, plan, records) -> Summary:
    """Aggregate evaluation records over splits and test each method against the reference.

    ``records``: :class:`~margindist.experiments.records.TaskRecord` objects or the store's dicts.
    """
    by = {}
    for r in map(TaskRecord.from_dict, records):
        by.setdefault((r.dataset, r.method), []).append(r)
    methods = [run.name for run in plan.runs]
    datasets = [ds.name for ds in plan.datasets]
    ref = exp.reference if exp.reference in methods else None
    cells = {(d, m): _cell(exp, d, m, by.get((d, m), [])) for d in datasets for m in methods}
    test = getattr(exp, "test", "paired-t")
    ratios = {d: _test_train_ratio(exp, d, by) for d in datasets} if test == "corrected-t" else {}
    wtl = _against_reference(cells, datasets, methods, ref, test, ratios) if ref is not None else {}
    labels = {ds.name: ds.display for ds in plan.datasets}
    skipped = {(d, m): why for d, m, why in plan.skipped_pairs}
    return Summary(exp.name, exp.title, exp.metric, ref, datasets, labels, methods, cells, wtl,
                   exp.paper, exp.paper_wtl, exp.quick, skipped, test, ratios)


def _test_train_ratio(exp, dataset: str, by: dict) -> float:
    """n_test / n_train of a dataset's splits: from the stored records, else from the protocol."""
    n_tr, n_te = [], []
    for (d, _), recs in by.items():
        if d != dataset:
            continue
        for r in recs:
            info = r.info
            if info.get("n_train") and info.get("n_test"):
                n_tr.append(info["n_train"])
                n_te.append(info["n_test"])
    if n_tr:
        return float(np.mean(n_te) / np.mean(n_tr))
    p = exp.protocol
    if p.scheme == "kfold":
        return 1.0 / (p.n_folds - 1)
    if p.scheme == "random" and isinstance(p.train_size, float) and 0 < p.train_size < 1:
        test = p.test_size if isinstance(p.test_size, float) else 1.0 - p.train_size
        return float(test / p.train_size)
    raise ValueError(f"the corrected t-test needs n_test / n_train of the splits of {dataset!r}, which "
                     "neither the results nor the protocol give.")


# ---------------------------------------------------------------------- over the datasets
@dataclass
class MultiDatasetStats:
    """Comparison of the methods over the datasets (Demšar 2006), from :func:`multi_dataset_stats`.

    Scores are one number per dataset and method: the mean test accuracy over the splits
    (ranked higher-is-better; for an error table the ranks are the same). Rank-based tests
    use the datasets on which every method in ``methods`` has a result; Wilcoxon tests of a
    pair use the datasets on which both have one.
    """

    methods: list  # methods in the rank tests
    datasets: list  # datasets in the rank tests
    dropped: list  # (dataset, methods without a result) left out of the rank tests
    scores: np.ndarray | None = None  # (datasets, methods) mean accuracies
    avg_ranks: dict = field(default_factory=dict)  # method -> average rank (1 = best)
    friedman: object = None  # FriedmanResult, or None (see note)
    cd: float = float("nan")  # Nemenyi critical difference at alpha
    nemenyi: list = field(default_factory=list)  # RankComparison, all pairs
    holm: list = field(default_factory=list)  # RankComparison, vs the control (or all pairs)
    control: str | None = None
    wilcoxon: dict = field(default_factory=dict)  # (a, b) -> WilcoxonResult (a better: outcome +1)
    alpha: float = 0.05
    notes: list = field(default_factory=list)  # why a test is not applicable

    @property
    def applicable(self) -> bool:
        """At least 2 methods, and 2 datasets for the rank tests or one pair for a Wilcoxon test."""
        return len(self.methods) >= 2 and (len(self.datasets) >= 2 or bool(self.wilcoxon))


def multi_dataset_stats(summary: Summary, alpha: float = 0.05) -> MultiDatasetStats:
    """Average ranks, Friedman / Iman–Davenport, Nemenyi, Holm and pairwise Wilcoxon tests.

    Never raises for too few datasets or methods: the tests that do not apply are left empty
    and ``notes`` says why (Friedman's test needs 3 methods and 2 datasets; with 2 methods the
    Wilcoxon test is the comparison). Holm's procedure compares every method with the
    reference method when there is one (Demšar's setting), else all pairs.
    """

    def acc(c):
        return float(np.mean(list(c.scores.values()))) if c is not None and c.scores else float("nan")

    have = [m for m in summary.methods if any(summary.cell(d, m) and summary.cell(d, m).n for d in summary.datasets)]
    used, dropped = [], []
    for d in summary.datasets:
        missing = [m for m in have if not (summary.cell(d, m) and summary.cell(d, m).n)]
        (dropped.append((d, missing)) if missing else used.append(d))
    out = MultiDatasetStats(methods=have, datasets=used, dropped=dropped, alpha=alpha)
    # pairwise Wilcoxon over the datasets both methods have
    for i, a in enumerate(have):
        for b in have[i + 1:]:
            ds = [d for d in summary.datasets if summary.cell(d, a) and summary.cell(d, a).n
                  and summary.cell(d, b) and summary.cell(d, b).n]
            if len(ds) >= 2:
                out.wilcoxon[(a, b)] = wilcoxon_test([acc(summary.cell(d, a)) for d in ds],
                                                     [acc(summary.cell(d, b)) for d in ds], alpha)
    if len(have) < 2:
        out.notes.append("fewer than 2 methods with results: nothing to compare over the datasets")
        return out
    if len(used) < 2:
        out.notes.append(f"fewer than 2 datasets on which all {len(have)} methods have results: no rank tests")
        return out
    out.scores = np.array([[acc(summary.cell(d, m)) for m in have] for d in used])
    ranks = rank_scores(out.scores, higher_is_better=True).mean(axis=0)
    out.avg_ranks = {m: float(r) for m, r in zip(have, ranks)}
    k, n = len(have), len(used)
    out.cd = nemenyi_cd(k, n, alpha)
    out.nemenyi = nemenyi_test(ranks, n, alpha, names=have)
    out.control = summary.reference if summary.reference in have else None
    out.holm = holm_test(ranks, n, control=out.control, alpha=alpha, names=have)
    if k < 3:
        out.notes.append("Friedman's test needs at least 3 methods; with 2, the Wilcoxon signed-ranks test "
                         "below is the comparison over the datasets")
    else:
        out.friedman = friedman_from_ranks(ranks, n)
    return out


def _p(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "nan"
    return "< 0.0001" if v < 1e-4 else f"{v:.4f}"


def multi_dataset_markdown(summary: Summary, ms: MultiDatasetStats, figure: str | None = None) -> str:
    """The report's section on the comparison over the datasets (Markdown)."""
    a = ms.alpha
    lines = ["Scores: the mean test accuracy over the splits of each dataset; rank 1 = best on a dataset, "
             "ties share the average rank (Demšar 2006, JMLR 7)."]
    if ms.dropped:
        lines.append("Left out of the rank tests (a method has no result there): "
                     + "; ".join(f"{summary.labels.get(d, d)} ({', '.join(m)})" for d, m in ms.dropped) + ".")
    lines.append("")
    if ms.avg_ranks:
        rows = sorted(ms.avg_ranks.items(), key=lambda kv: kv[1])
        lines += [_simple_md(["method", "average rank"], [[m, f"{r:.3f}"] for m, r in rows]), ""]
        k, n = len(ms.methods), len(ms.datasets)
        f = ms.friedman
        if f is not None:
            verdict = "the methods differ" if f.iman_davenport_pvalue < a else "no significant difference"
            lines.append(f"- Friedman: χ²_F = {f.statistic:.3f} ({f.df1} df), p = {_p(f.pvalue)}; Iman–Davenport "
                         f"F_F = {f.iman_davenport:.3f} (F({f.df1}, {f.df2})), p = {_p(f.iman_davenport_pvalue)}: "
                         f"{verdict} at α = {a:g} (k = {k} methods, N = {n} datasets).")
        sig = [f"{c.a} vs {c.b}" for c in ms.nemenyi if c.reject]
        lines.append(f"- Nemenyi: critical difference CD = {ms.cd:.3f} at α = {a:g}; pairs whose average ranks "
                     f"differ by at least CD: {', '.join(sig) if sig else 'none'}.")
        what = f"each method against {ms.control}" if ms.control else "all pairs"
        lines += [f"- Holm's step-down procedure on the rank z statistics, {what} "
                  f"(z = ΔR / √(k(k+1)/(6N))):", ""]
        rows = [[c.a, c.b, f"{c.rank_diff:+.3f}", f"{c.z:+.3f}", _p(c.pvalue), _p(c.adjusted),
                 "yes" if c.reject else "no"] for c in ms.holm]
        lines += [_simple_md(["method", "vs", "ΔR", "z", "p", "Holm p", f"significant (α = {a:g})"], rows), ""]
    for note in ms.notes:
        lines.append(f"- Not applicable: {note}.")
    if ms.notes:
        lines.append("")
    if ms.wilcoxon:
        lines += [f"Wilcoxon signed-ranks test of every pair over the datasets both have (two-sided, α = {a:g}; "
                  "R+: rank sum where the first method is better, T = min(R+, R-)):", ""]
        rows = []
        for (m1, m2), w in ms.wilcoxon.items():
            verdict = f"{m1} better" if w.outcome > 0 else f"{m2} better" if w.outcome < 0 else "—"
            rows.append([m1, m2, str(w.n), f"{w.r_plus:g}", f"{w.r_minus:g}", f"{w.statistic:g}", _p(w.pvalue),
                         verdict])
        lines += [_simple_md(["method", "vs", "N", "R+", "R-", "T", "p", "significant"], rows), ""]
    if figure:
        lines += [f"![critical-difference diagram]({figure})", ""]
    return "\n".join(lines)


def cd_figure(summary: Summary, ms: MultiDatasetStats, path: Path) -> list:
    """The critical-difference diagram (PNG and PDF); [] when there are no average ranks."""
    if not ms.avg_ranks:
        return []
    from .figures import plot_critical_difference, save_figure

    ax = plot_critical_difference(ms.avg_ranks, ms.cd,
                                  title=f"average ranks over {len(ms.datasets)} datasets, "
                                        f"Nemenyi CD at α = {ms.alpha:g}")
    return save_figure(ax.figure, path)


# ---------------------------------------------------------------------- the main table: one row model
def _num(v: float) -> str:
    return "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"


def _paper_num(v: float) -> str:
    text = f"{v:.4f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


@dataclass(frozen=True)
class PaperValue:
    """A number printed in the paper, with its plus-minus where the paper gives one."""

    value: float
    pm: float | None = None

    @classmethod
    def of(cls, summary: Summary, d: str, m: str) -> PaperValue | None:
        entry = summary.paper.get(d, {}).get(m)
        if entry is None:
            return None
        v, pm = entry if isinstance(entry, (tuple, list)) else (entry, None)
        return cls(float(v), None if pm is None else float(pm))

    @property
    def value_text(self) -> str:
        return _paper_num(self.value)

    @property
    def pm_text(self) -> str:
        return "" if self.pm is None else _paper_num(self.pm)

    @property
    def text(self) -> str:
        return self.value_text + (f" ± {self.pm_text}" if self.pm is not None else "")


@dataclass
class TableRow:
    """One dataset's row of the main table."""

    dataset: str  # name
    label: str  # display name
    cells: dict  # method -> Cell or None
    reasons: dict  # method -> why the pair was not run (or None)
    paper: dict  # paper method -> PaperValue or None

    def has(self, m: str) -> bool:
        c = self.cells.get(m)
        return c is not None and c.n > 0


@dataclass
class MainTable:
    """The main table, built once (:func:`main_table`) and rendered as Markdown, CSV or LaTeX.

    ``methods`` are ours in order, ``paper_methods`` those with a paper column; ``wtl`` maps
    each method to its (w, t, l) against the reference, or is None without a reference.
    """

    metric: str
    test: str
    reference: str | None
    methods: list
    paper_methods: list
    rows: list  # TableRow
    wtl: dict | None
    paper_wtl: dict

    def wtl_text(self, m: str, ref_text: str = "(ref)") -> str:
        return ref_text if m == self.reference else "/".join(map(str, self.wtl.get(m, (0, 0, 0))))


def main_table(summary: Summary, *, paper: bool = True) -> MainTable:
    """The rows of the main table (with the paper's columns where the preset has them)."""
    pm = summary.paper_methods() if paper else []
    rows = [TableRow(d, summary.labels.get(d, d), {m: summary.cell(d, m) for m in summary.methods},
                     {m: summary.skipped_pairs.get((d, m)) for m in summary.methods},
                     {m: PaperValue.of(summary, d, m) for m in pm})
            for d in summary.datasets]
    wtl = None if summary.reference is None else {m: summary.wtl.get(m, (0, 0, 0)) for m in summary.methods}
    return MainTable(summary.metric, summary.test, summary.reference, list(summary.methods), pm, rows, wtl,
                     dict(summary.paper_wtl))


def _cell_text(c: Cell | None, reason: str | None = None) -> str:
    if c is None or c.n == 0:
        return f"n/a ({reason})" if reason else "—"
    text = f"{_num(c.mean)} ± {_num(c.std)} ({_num(c.se)})"
    return f"{text} {c.mark}" if c.mark else text


def legend(summary: Summary, exp=None) -> str:
    what = "accuracy" if summary.metric == "accuracy" else "error (1 - accuracy)"
    text = (f"Cells: mean ± standard deviation over the splits of the test {what}, the standard error "
            "(std/√n) in parentheses.")
    if summary.reference is not None:
        text += (f" {MARK_BETTER} / {MARK_WORSE}: significantly better / worse than the reference "
                 f"{summary.reference} ({TEST_NAMES.get(summary.test, summary.test)} at the 95 % level). "
                 f"W/T/L vs {summary.reference}: number of datasets where the method is significantly "
                 "better / not significantly different / significantly worse.")
    if summary.paper_methods():
        text += " Columns '(paper)': the numbers printed in the paper."
    return text


def render_markdown(t: MainTable) -> str:
    """Display strings, the paper's column beside each method that has one."""
    pm = set(t.paper_methods)
    header = ["dataset"]
    for m in t.methods:
        header.append(f"{m} (ref)" if m == t.reference else m)
        if m in pm:
            header.append(f"{m} (paper)")
    rows = []
    for r in t.rows:
        row = [r.label]
        for m in t.methods:
            row.append(_cell_text(r.cells[m], r.reasons[m]))
            if m in pm:
                row.append(r.paper[m].text if r.paper[m] is not None else "")
        rows.append(row)
    if t.wtl is not None:
        row = [f"W/T/L vs {t.reference}"]
        for m in t.methods:
            row.append(t.wtl_text(m))
            if m in pm:
                row.append(t.paper_wtl.get(m, ""))
        rows.append(row)
    esc = [[c.replace("|", "\\|") for c in r] for r in [header] + rows]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)


def render_csv(t: MainTable) -> str:
    """Numeric columns at full precision; W/T/L in the 'mark' columns."""
    pm = set(t.paper_methods)
    header = ["dataset"]
    for m in t.methods:
        header += [f"{m} mean", f"{m} std", f"{m} se", f"{m} n", f"{m} mark"]
        if m in pm:
            header += [f"{m} paper", f"{m} paper pm"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in t.rows:
        row = [r.dataset]
        for m in t.methods:
            c = r.cells[m]
            row += [repr(c.mean), repr(c.std), repr(c.se), str(c.n), c.mark] if r.has(m) else ["", "", "", "0", ""]
            if m in pm:
                p = r.paper[m]
                row += ["", ""] if p is None else [repr(p.value), "" if p.pm is None else repr(p.pm)]
        w.writerow(row)
    if t.wtl is not None:
        row = [f"W/T/L vs {t.reference}"]
        for m in t.methods:
            row += ["", "", "", "", t.wtl_text(m)]
            if m in pm:
                row += [t.paper_wtl.get(m, ""), ""]
        w.writerow(row)
    return buf.getvalue()


_TEX_ESC = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def _tex(s: str) -> str:
    return "".join(_TEX_ESC.get(ch, ch) for ch in str(s))


def _best(values: list, higher: bool, digits: int) -> set:
    """Indices of the best values at the printed precision (ties: all of them)."""
    shown = [None if v is None or math.isnan(v) else round(v, digits) for v in values]
    ok = [v for v in shown if v is not None]
    if not ok:
        return set()
    top = max(ok) if higher else min(ok)
    return {i for i, v in enumerate(shown) if v == top}


def _latex_head(t: MainTable, caption: str, spread: str, label: str | None) -> list:
    """From ``\\begin{table}`` to the ``\\midrule`` under the column names."""
    ours, pm = t.methods, t.paper_methods
    lines = [r"\begin{table}[t]", r"\centering", r"\small"]
    what = "accuracy" if t.metric == "accuracy" else "error"
    note = f"Test {what}, mean over the splits"
    if spread != "none":
        note += " $\\pm$ " + ("standard deviation" if spread == "std" else "standard error")
    note += "; the best per dataset in bold"
    if t.reference is not None:
        note += (f"; $\\bullet$/$\\circ$: significantly better/worse than {_tex(t.reference)} "
                 f"({_tex(TEST_NAMES.get(t.test, t.test))}, 95\\%)")
    if pm:
        note += "; the paper's numbers on the right"
    cap = (_tex(caption) + ". " if caption else "") + note + "."
    lines.append(r"\caption{" + cap + "}")
    if label:
        lines.append(r"\label{" + _tex(label) + "}")
    lines.append(r"\begin{tabular}{l" + "c" * len(ours) + ("c" * len(pm)) + "}")
    lines.append(r"\toprule")
    if pm:
        a, b = 2, 1 + len(ours)
        lines.append(r" & \multicolumn{" + str(len(ours)) + r"}{c}{Ours} & \multicolumn{" + str(len(pm))
                     + r"}{c}{Paper} \\")
        lines.append(rf"\cmidrule(lr){{{a}-{b}}} \cmidrule(lr){{{b + 1}-{b + len(pm)}}}")
    lines.append(" & ".join(["Dataset"] + [_tex(m) for m in ours] + [_tex(m) for m in pm]) + r" \\")
    lines.append(r"\midrule")
    return lines


def _latex_row(t: MainTable, r: TableRow, spread: str, digits: int) -> str:
    """One dataset: ours (best in bold, spread in small type, significance marks), then the paper's."""
    higher = t.metric == "accuracy"
    fmt = f"{{:.{digits}f}}"
    best = _best([r.cells[m].mean if r.has(m) else None for m in t.methods], higher, digits)
    row = [_tex(r.label)]
    for i, m in enumerate(t.methods):
        c = r.cells[m]
        if not r.has(m):
            row.append("--")
            continue
        text = fmt.format(c.mean)
        text = r"\textbf{" + text + "}" if i in best else text
        if spread != "none":
            text += r"{\scriptsize $\pm$" + fmt.format(c.std if spread == "std" else c.se) + "}"
        row.append(text + {1: r"$^\bullet$", -1: r"$^\circ$"}.get(c.outcome, ""))
    pvals = [None if r.paper[m] is None else r.paper[m].value for m in t.paper_methods]
    pbest = _best(pvals, higher, digits)
    for i, m in enumerate(t.paper_methods):
        p = r.paper[m]
        if p is None:
            row.append("")
            continue
        text = r"\textbf{" + p.value_text + "}" if i in pbest else p.value_text
        if p.pm is not None and spread != "none":
            text += r"{\scriptsize $\pm$" + p.pm_text + "}"
        row.append(text)
    return " & ".join(row) + r" \\"


def render_latex(t: MainTable, caption: str = "", *, spread: str = "std", digits: int = 4,
                 avg_ranks: dict | None = None, n_ranked: int = 0, label: str | None = None) -> str:
    """The booktabs table of :func:`latex_table`; ``avg_ranks`` (method -> rank over ``n_ranked``
    datasets) adds the average-rank row."""
    lines = _latex_head(t, caption, spread, label)
    lines += [_latex_row(t, r, spread, digits) for r in t.rows]
    foot = []
    if t.wtl is not None:
        row = [_tex(f"W/T/L vs {t.reference}")] + [t.wtl_text(m, "--") for m in t.methods]
        row += [_tex(t.paper_wtl.get(m, "")) for m in t.paper_methods]
        foot.append(" & ".join(row) + r" \\")
    if avg_ranks:
        row = [f"Avg. rank ({n_ranked} datasets)"]
        row += [f"{avg_ranks[m]:.2f}" if m in avg_ranks else "--" for m in t.methods]
        row += [""] * len(t.paper_methods)
        foot.append(" & ".join(row) + r" \\")
    if foot:
        lines.append(r"\midrule")
        lines += foot
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def markdown_table(summary: Summary) -> str:
    return render_markdown(main_table(summary))


def csv_table(summary: Summary) -> str:
    """The main table as CSV with numeric columns (full precision)."""
    return render_csv(main_table(summary))


def latex_table(summary: Summary, caption: str = "", *, spread: str = "std", paper: str = "auto",
                digits: int = 4, ranks: bool = True, label: str | None = None) -> str:
    """The main table as a compact LaTeX table (booktabs), ready for a paper.

    One row per dataset; our methods' columns first, then - grouped under their own header,
    not interleaved - the paper's numbers where the preset has them. Each cell is the mean
    over the splits in the table's metric, optionally with its spread in small type; the best
    value of each row (highest accuracy / lowest error, at the printed precision) is bold,
    separately among ours and among the paper's; $\\bullet$ / $\\circ$ mark a significant win /
    loss against the reference. Below the datasets: W/T/L against the reference and (with
    ``ranks``) the average rank over the datasets on which every method has a result.
    Needs ``\\usepackage{booktabs}``.

    Parameters
    ----------
    summary : Summary
    caption : str
        Caption text; a sentence describing the cells is appended.
    spread : {"std", "se", "none"}
        Standard deviation over the splits, standard error, or the mean alone.
    paper : {"auto", "beside", "none"}
        The paper's columns beside ours ("auto": when the preset has paper numbers) or ours only.
    digits : int
        Decimals of the means (and spreads).
    ranks : bool
        Add the average-rank row.
    label : str, optional
        ``\\label`` of the table.
    """
    if spread not in ("std", "se", "none"):
        raise ValueError(f"spread must be 'std', 'se' or 'none'; got {spread!r}.")
    if paper not in ("auto", "beside", "none"):
        raise ValueError(f"paper must be 'auto', 'beside' or 'none'; got {paper!r}.")
    ms = multi_dataset_stats(summary) if ranks else None
    return render_latex(main_table(summary, paper=paper != "none"), caption, spread=spread, digits=digits,
                        avg_ranks=ms.avg_ranks if ms is not None else None,
                        n_ranked=len(ms.datasets) if ms is not None else 0, label=label)


def _simple_md(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def time_table(summary: Summary) -> str:
    rows = []
    for d in summary.datasets:
        row = [summary.labels.get(d, d)]
        for m in summary.methods:
            c = summary.cell(d, m)
            if c is None or c.n == 0:
                row.append("—")
            else:
                cv = f" (CV {c.cv_time:.3g})" if not math.isnan(c.cv_time) else ""
                row.append(f"{c.fit_time:.3g} / {c.predict_time:.3g}{cv}")
        rows.append(row)
    return _simple_md(["dataset"] + summary.methods, rows)


def params_table(summary: Summary) -> str:
    rows = [[summary.labels.get(d, d)] + [(summary.cell(d, m).params or "—") if summary.cell(d, m) else "—"
                                          for m in summary.methods] for d in summary.datasets]
    return _simple_md(["dataset"] + summary.methods, rows)


def margin_table(summary: Summary) -> str:
    rows = []
    for d in summary.datasets:
        row = [summary.labels.get(d, d)]
        for m in summary.methods:
            c = summary.cell(d, m)
            if c is None or not c.margin:
                row.append("—")
            else:
                row.append(f"{c.margin['mean']:.3g} / {c.margin['std']:.3g} / {c.margin['bound_term']:.3g}")
        rows.append(row)
    return _simple_md(["dataset"] + summary.methods, rows)


def summary_csv(summary: Summary) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ["dataset", "method", "metric", "n", "mean", "std", "se", "reference", "test", "outcome", "mark", "pvalue",
            "mean_diff_accuracy", "paper", "paper_pm", "fit_time", "predict_time", "cv_time", "params",
            "margin_mean", "margin_std", "margin_semivariance", "margin_bound_term", "failed"]
    w.writerow(cols)
    for d in summary.datasets:
        for m in summary.methods:
            c = summary.cell(d, m)
            p = PaperValue.of(summary, d, m)
            pv, pp = (None, None) if p is None else (p.value, p.pm)
            w.writerow([d, m, summary.metric, c.n, repr(c.mean), repr(c.std), repr(c.se), summary.reference or "",
                        summary.test if summary.reference else "", c.outcome, c.mark, repr(c.pvalue),
                        repr(c.mean_diff), "" if pv is None else repr(pv),
                        "" if pp is None else repr(pp), repr(c.fit_time), repr(c.predict_time),
                        repr(c.cv_time), c.params, *(repr(c.margin.get(k, float("nan"))) for k in
                                                     ("mean", "std", "semivariance", "bound_term")), c.n_failed])
    return buf.getvalue()


def results_csv(records) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["dataset", "method", "split", "status", "accuracy", "fit_time", "predict_time", "cv_time",
                "params", "n_train", "n_test", "error"])
    for r in sorted(map(TaskRecord.from_dict, records), key=lambda r: (r.dataset, r.method, r.split)):
        info = r.info
        w.writerow([r.dataset, r.method, r.split, r.status, *("" if v is None else repr(v) for v in
                                                             (r.score, r.fit_time, r.predict_time, r.cv_time)),
                    json.dumps(r.params, sort_keys=True), info.get("n_train", ""), info.get("n_test", ""),
                    info.get("error", "")])
    return buf.getvalue()


# ---------------------------------------------------------------------- figures
def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def margin_figure(summary: Summary, dataset: str, path: Path) -> list:
    """Write :func:`make_margin_figure` as PNG and PDF (``path``'s stem); returns the paths
    ([] when no method has margins on this dataset)."""
    from .figures import save_figure

    fig = make_margin_figure(summary, dataset)
    return [] if fig is None else save_figure(fig, path)


def make_margin_figure(summary: Summary, dataset: str):
    """Cumulative margin distributions on split 0: training margins, and test margins beside.

    One panel per kind of margin (the test panel where test margins were stored), the same
    colour for a method in both, one legend outside the axes. None without margins.
    """
    from matplotlib.figure import Figure

    from ..plotting import plot_margin_cdf
    from .figures import legend_outside

    cells = [summary.cell(dataset, m) for m in summary.methods]
    train = {c.method: np.asarray(c.margins) for c in cells if c is not None and c.margins}
    test = {c.method: np.asarray(c.test_margins) for c in cells if c is not None and c.margins and c.test_margins}
    if not train:
        return None
    panels = [("training margins", train)] + ([("test margins", test)] if test else [])
    fig = Figure(figsize=(4.2 * len(panels) + 2.0, 3.8), layout="constrained")
    axes = fig.subplots(1, len(panels), sharex=True, sharey=True, squeeze=False)[0]
    colors = {m: f"C{i % 10}" for i, m in enumerate(summary.methods)}
    for ax, (what, curves) in zip(axes, panels):
        plot_margin_cdf(curves, ax=ax, title=what, show_stats=False)
        for line in ax.get_lines():  # the same colour for a method in both panels
            if line.get_label() in colors:
                line.set_color(colors[line.get_label()])
    for ax in axes[1:]:
        ax.set_ylabel("")
    fig.suptitle(f"{summary.labels.get(dataset, dataset)}: normalised margins (split 0)")
    legend_outside(fig, axes)
    return fig


def time_figure(summary: Summary, path: Path) -> list:
    """Write :func:`make_time_figure` as PNG and PDF; returns the paths ([] without results)."""
    from .figures import save_figure

    fig = make_time_figure(summary)
    return [] if fig is None else save_figure(fig, path)


def make_time_figure(summary: Summary):
    """Mean training time per split (ms, log scale), grouped bars per dataset, legend outside.

    None without results.
    """
    from matplotlib.figure import Figure

    from .figures import legend_outside

    ds = summary.datasets
    ms = [m for m in summary.methods if any(summary.cell(d, m) and summary.cell(d, m).n for d in ds)]
    if not ds or not ms:
        return None
    fig = Figure(figsize=(max(6.0, 1.1 * len(ds) + 3.5), 4.2), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(ms)
    x = np.arange(len(ds))
    for j, m in enumerate(ms):
        vals = [1e3 * summary.cell(d, m).fit_time if summary.cell(d, m) and summary.cell(d, m).n else np.nan
                for d in ds]
        ax.bar(x + (j - (len(ms) - 1) / 2) * width, vals, width, label=m, color=f"C{j % 10}")
    ax.set_yscale("log")
    ax.set_xticks(x, [summary.labels.get(d, d) for d in ds], rotation=30, ha="right")
    ax.set_ylabel("mean training time per split (ms)")
    ax.set_title("training time (final fit with the chosen hyperparameters)")
    ax.grid(True, axis="y", alpha=0.3)
    legend_outside(fig, [ax])
    return fig


def _atomic_write(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------- the report
def quick_description(exp) -> str:
    p = exp.protocol
    search = f"small grids, {p.cv_folds}-fold CV" if any(m.grid for m in exp.methods) else "no search"
    return f"{p.n_splits} splits, {search}, main datasets only"


def _quick_banner(exp) -> str:
    return (f"**QUICK RUN** — a reduced version of this protocol ({quick_description(exp)}) to check the "
            "pipeline in minutes. Its numbers are not the paper's protocol; run without `--quick` for that.")


def header_lines(exp, plan, outcome=None, command=None, records=()) -> list:
    lines = [f"# {exp.name}: {exp.title}" if exp.title else f"# {exp.name}", ""]
    if exp.quick:
        lines += [_quick_banner(exp), ""]
    if exp.source:
        lines += [f"Source: {exp.source}", ""]
    from .. import __version__

    searched = any(m.grid for m in exp.methods)
    lines += [f"- Protocol: {exp.protocol.describe(plan.datasets, searched=searched)}"]
    if command:
        lines.append(f"- Command: `{command}`")
    lines.append(f"- margindist {__version__}, written {time.strftime('%Y-%m-%d %H:%M:%S')}")
    versions = sorted({str(r.get("version")) for r in records if r.get("version")})
    if versions and versions != [__version__]:
        counts = {v: sum(1 for r in records if str(r.get("version")) == v) for v in versions}
        lines.append("- **Mixed versions**: the stored results come from margindist "
                     + ", ".join(f"{v} ({n} results)" for v, n in counts.items())
                     + "; re-run with --force to recompute them all with this version")
    if outcome is not None:
        lines.append(f"- Tasks: {outcome.n_planned} evaluations stored for this table, {outcome.n_executed} "
                     f"computed in this run ({outcome.elapsed:.1f} s), {outcome.n_failed} failed")
    lines.append("- Methods and grids:")
    for run in plan.runs:
        lines.append(f"  - {run.name}: `{run.method}` ({run.kernel}) — {run.describe_grid()}"
                     + (f". {run.note}" if run.note else ""))
    return lines


def skipped_lines(exp, plan) -> list:
    out = []
    for name, why in exp.unavailable:
        out.append(f"- {name}: {why}")
    for name, why in plan.skipped_datasets:
        out.append(f"- dataset {name}: {why}")
    for name, why in plan.skipped_methods:
        out.append(f"- method {name}: {why}")
    for d, m, why in plan.skipped_pairs:
        out.append(f"- {m} on {d}: {why}")
    return out


def write_reports(exp, plan, records, out_dir, outcome=None, command=None):
    """Write every report file; returns (Summary, list of (path, description))."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize_experiment(exp, plan, records)
    files = []

    def put(name, text, what):
        _atomic_write(out_dir / name, text)
        files.append((name, what))

    caption = f"{exp.name}: {exp.title}" + (" (quick run)" if exp.quick else "")
    table_md = markdown_table(summary)
    leg = legend(summary, exp)
    put("table.md", f"# {caption}\n\n" + (_quick_banner(exp) + "\n\n" if exp.quick else "") + table_md + "\n\n"
        + leg + "\n", "main table (Markdown)")
    put("table.csv", csv_table(summary), "main table (CSV, full precision; W/T/L in the 'mark' columns)")
    put("table.tex", latex_table(summary, caption),
        "main table (LaTeX, booktabs; best per dataset in bold"
        + ("; the paper's columns grouped beside ours)" if summary.paper_methods() else ")"))
    if summary.paper_methods():
        put("table_ours.tex", latex_table(summary, caption, paper="none"), "main table (LaTeX, ours only)")
    put("summary.csv", summary_csv(summary), "one row per dataset and method: every number of the report")
    put("results.csv", results_csv(records), "one row per split: accuracy, times, chosen hyperparameters")

    figs = []

    def fig_files(paths, what):
        for path in paths:
            files.append((path.name, what + (" (PDF)" if path.suffix == ".pdf" else "")))
        return [p.name for p in paths if p.suffix == ".png"]

    for d in summary.datasets:
        for name in fig_files(margin_figure(summary, d, out_dir / f"margins_{_safe(d)}.png"),
                              f"cumulative margin distributions on {d} (training and test margins, split 0)"):
            figs.append((name, f"cumulative margin distributions on {d} (training and test margins, split 0)"))
    for name in fig_files(time_figure(summary, out_dir / "train_time.png"),
                          "mean training time per method and dataset (ms)"):
        figs.append((name, "mean training time per method and dataset (ms)"))
    ms = multi_dataset_stats(summary)
    cd_png = None
    if ms.applicable:
        for name in fig_files(cd_figure(summary, ms, out_dir / "cd_diagram.png"),
                              "critical-difference diagram (average ranks over the datasets, Nemenyi CD)"):
            cd_png = name

    lines = header_lines(exp, plan, outcome, command, records)
    lines += ["", "## Results", "", table_md, "", leg, ""]
    if ms.applicable:
        lines += ["## Over the datasets", "", multi_dataset_markdown(summary, ms, cd_png), ""]
    else:
        lines += ["## Over the datasets", "",
                  f"Not applicable: the comparison over datasets needs at least 2 datasets and 2 methods with "
                  f"results (here {len(ms.datasets) + len(ms.dropped)} dataset(s), {len(ms.methods)} method(s)).", ""]
    skipped = skipped_lines(exp, plan)
    if skipped:
        lines += ["## Not run", ""] + skipped + [""]
    if outcome is not None and outcome.failures:
        lines += ["## Failures", ""]
        lines += [f"- {lab}: {err}" for lab, err in outcome.failures[:50]]
        if len(outcome.failures) > 50:
            lines.append(f"- ... and {len(outcome.failures) - 50} more (see results.csv)")
        lines.append("")
    warn = []
    for c in summary.cells.values():
        if c.cv_failed:
            warn.append(f"- {c.method} on {c.dataset}: {c.cv_failed} grid-point fits failed in CV and were "
                        f"skipped, e.g. {c.cv_error}")
        if c.fit_warnings:
            warn.append(f"- {c.method} on {c.dataset}: warnings in {c.fit_warnings} of {c.n} final fits, e.g. "
                        f"{c.fit_warning}")
    if warn:
        lines += ["## Warnings", ""] + warn + [""]
    lines += ["## Time per split", "",
              "Mean seconds per split: final fit / prediction on the test part (and the CV search). The first "
              "fit of each method in a worker process is preceded by an untimed warm-up fit on a tiny problem, "
              "so one-off costs (numba compilation, imports) are not in these numbers.", "",
              time_table(summary), "", "## Chosen hyperparameters", "",
              "Most frequent choice over the splits (with its count when the choice varied).", "",
              params_table(summary), "", "## Training margins", "",
              "Normalised training margins y f(x) / ||w||, averaged over the splits: mean / standard "
              "deviation / SV/θ² (semi-variance over squared mean, the MSVMAv bound term).", "",
              margin_table(summary), ""]
    notes = sorted({f"{c.method}: {c.margin_note}" for c in summary.cells.values() if c.margin_note})
    if notes:
        lines += ["Margins not shown: " + "; ".join(notes) + ".", ""]
    if figs:
        lines += ["## Figures", ""] + [f"![{what}]({name})" for name, what in figs] + [""]
    if exp.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in exp.notes] + [""]
    put("report.md", "\n".join(lines), "the full report: tables, skipped work, times, hyperparameters, "
                                       "margins, figures, notes")

    index = [f"# {caption}", ""]
    if exp.quick:
        index += [_quick_banner(exp), ""]
    index += ["| file | content |", "|---|---|"]
    index += [f"| [{name}]({name}) | {what} |" for name, what in sorted(files)]
    index += ["| results.sqlite | the result store (resume by re-running the same command) |", ""]
    _atomic_write(out_dir / "index.md", "\n".join(index))
    files.append(("index.md", "this list"))
    return summary, files
