"""Reports of an experiment: tables (Markdown, CSV, LaTeX), figures, an index.

The main table has the papers' layout: one row per dataset, one column per method, cells
``mean ± std (se)`` over the splits (se = std / sqrt(n), the standard error; the papers'
± values are sometimes one and sometimes the other, so both are given), a mark ● / ○ where
the method is significantly better / worse than the reference method (two-sided paired
t-test over the splits at 95 %), a W/T/L row counting those outcomes over the datasets,
and the paper's number in a column beside ours where the preset has one.

Files written to the output directory (all atomically: a reader never sees half a file):

* ``report.md``: everything below in one page (tables, skipped work, failures, times,
  chosen hyperparameters, margin statistics, figures, notes);
* ``table.md``, ``table.csv``, ``table.tex``: the main table;
* ``summary.csv``: one row per (dataset, method) with every number, full precision;
* ``results.csv``: one row per task (split) with score, times, chosen parameters;
* ``margins_<dataset>.png``: cumulative distributions of the normalised training margins
  (split 0), ``train_time.png``: mean training time per method and dataset;
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

from .stats import paired_ttest, summarize, win_tie_loss

__all__ = ["Summary", "summarize_experiment", "write_reports", "markdown_table", "csv_table", "latex_table"]

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

    def paper_methods(self) -> list:
        return [m for m in self.methods if any(m in self.paper.get(d, {}) for d in self.datasets)]

    def cell(self, d, m) -> Cell | None:
        return self.cells.get((d, m))


def _fmt_params(params: dict) -> str:
    from .runner import _fmt_value

    return ", ".join(f"{k}={_fmt_value(v)}" for k, v in params.items()) if params else "-"


def summarize_experiment(exp, plan, records) -> Summary:
    """Aggregate evaluation records over splits and test each method against the reference."""
    by = {}
    for r in records:
        by.setdefault((r["dataset"], r["method"]), []).append(r)
    methods = [run.name for run in plan.runs]
    datasets = [ds.name for ds in plan.datasets]
    ref = exp.reference if exp.reference in methods else None
    cells = {}
    for d in datasets:
        for m in methods:
            recs = sorted(by.get((d, m), []), key=lambda r: r["split"])
            ok = [r for r in recs if r["status"] == "ok" and r["score"] is not None]
            c = Cell(d, m, n_failed=len(recs) - len(ok))
            if ok:
                acc = np.array([r["score"] for r in ok])
                vals = acc if exp.metric == "accuracy" else 1.0 - acc
                s = summarize(vals)
                c.n, c.mean, c.std, c.se = s["n"], s["mean"], s["std"], s["se"]
                c.scores = {int(r["split"]): float(r["score"]) for r in ok}
                c.fit_time = float(np.mean([r["fit_time"] for r in ok]))
                c.predict_time = float(np.mean([r["predict_time"] for r in ok]))
                cvt = [r["cv_time"] for r in ok if r["cv_time"] is not None]
                c.cv_time = float(np.mean(cvt)) if cvt else float("nan")
                counts = Counter(_fmt_params(r["params"] or {}) for r in ok)
                top, k = counts.most_common(1)[0]
                c.params = top if k == len(ok) else f"{top} ({k}/{len(ok)})"
                ms = [r["info"].get("margin_stats") for r in ok if (r["info"] or {}).get("margin_stats")]
                if ms:
                    c.margin = {key: float(np.mean([x[key] for x in ms])) for key in ms[0]}
                for r in ok:
                    if r["split"] == min(exp.margin_splits) and r["info"].get("margins"):
                        c.margins = r["info"]["margins"]
                notes = {r["info"].get("margin_note") for r in ok if r["info"].get("margin_note")}
                c.margin_note = "; ".join(sorted(notes))
                c.cv_failed = int(sum(r["info"].get("cv_failed", 0) for r in ok))
                errs = [r["info"]["cv_errors"][0] for r in ok if r["info"].get("cv_errors")]
                c.cv_error = errs[0] if errs else ""
                c.fit_warnings = int(sum(r["info"].get("fit_warnings", 0) for r in ok))
                warns = [r["info"]["fit_warning"] for r in ok if r["info"].get("fit_warning")]
                c.fit_warning = warns[0] if warns else ""
            cells[(d, m)] = c
    wtl = {}
    if ref is not None:
        for d in datasets:
            rc = cells[(d, ref)]
            for m in methods:
                c = cells[(d, m)]
                if m == ref or not c.n or not rc.n:
                    continue
                common = sorted(set(c.scores) & set(rc.scores))
                a = [c.scores[s] for s in common]
                b = [rc.scores[s] for s in common]
                t = paired_ttest(a, b)
                c.outcome, c.pvalue, c.mean_diff = t.outcome, t.pvalue, t.mean_diff
        for m in methods:
            if m == ref:
                continue
            pairs = []
            for d in datasets:
                c, rc = cells[(d, m)], cells[(d, ref)]
                if c.n and rc.n:
                    common = sorted(set(c.scores) & set(rc.scores))
                    pairs.append(([c.scores[s] for s in common], [rc.scores[s] for s in common]))
            wtl[m] = win_tie_loss(pairs)
    labels = {ds.name: ds.display for ds in plan.datasets}
    skipped = {(d, m): why for d, m, why in plan.skipped_pairs}
    return Summary(exp.name, exp.title, exp.metric, ref, datasets, labels, methods, cells, wtl,
                   exp.paper, exp.paper_wtl, exp.quick, skipped)


# ---------------------------------------------------------------------- formatting
def _num(v: float) -> str:
    return "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"


def _paper_num(v: float) -> str:
    text = f"{v:.4f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _cell_text(c: Cell | None, reason: str | None = None) -> str:
    if c is None or c.n == 0:
        return f"n/a ({reason})" if reason else "—"
    text = f"{_num(c.mean)} ± {_num(c.std)} ({_num(c.se)})"
    return f"{text} {c.mark}" if c.mark else text


def _paper_text(summary: Summary, d: str, m: str) -> str:
    entry = summary.paper.get(d, {}).get(m)
    if entry is None:
        return ""
    v, pm = entry if isinstance(entry, (tuple, list)) else (entry, None)
    return _paper_num(v) + (f" ± {_paper_num(pm)}" if pm is not None else "")


def _header_name(summary: Summary, m: str) -> str:
    return f"{m} (ref)" if m == summary.reference else m


def _table_rows(summary: Summary, latex: bool = False):
    """(header, rows, wtl_row) with display strings."""
    pm = set(summary.paper_methods())
    header = ["dataset"]
    for m in summary.methods:
        header.append(_header_name(summary, m))
        if m in pm:
            header.append(f"{m} (paper)")
    rows = []
    for d in summary.datasets:
        row = [summary.labels.get(d, d)]
        for m in summary.methods:
            row.append(_cell_text(summary.cell(d, m), summary.skipped_pairs.get((d, m))))
            if m in pm:
                row.append(_paper_text(summary, d, m))
        rows.append(row)
    wtl_row = None
    if summary.reference is not None:
        wtl_row = [f"W/T/L vs {summary.reference}"]
        for m in summary.methods:
            if m == summary.reference:
                wtl_row.append("(ref)")
            else:
                w, t, l = summary.wtl.get(m, (0, 0, 0))
                wtl_row.append(f"{w}/{t}/{l}")
            if m in pm:
                wtl_row.append(summary.paper_wtl.get(m, ""))
    return header, rows, wtl_row


def legend(summary: Summary, exp=None) -> str:
    what = "accuracy" if summary.metric == "accuracy" else "error (1 - accuracy)"
    text = (f"Cells: mean ± standard deviation over the splits of the test {what}, the standard error "
            "(std/√n) in parentheses.")
    if summary.reference is not None:
        text += (f" {MARK_BETTER} / {MARK_WORSE}: significantly better / worse than the reference "
                 f"{summary.reference} (two-sided paired t-test over the splits at the 95 % level). "
                 f"W/T/L vs {summary.reference}: number of datasets where the method is significantly "
                 "better / not significantly different / significantly worse.")
    if summary.paper_methods():
        text += " Columns '(paper)': the numbers printed in the paper."
    return text


def markdown_table(summary: Summary) -> str:
    header, rows, wtl_row = _table_rows(summary)
    esc = [[c.replace("|", "\\|") for c in r] for r in [header] + rows + ([wtl_row] if wtl_row else [])]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)


def csv_table(summary: Summary) -> str:
    """The main table as CSV with numeric columns (full precision)."""
    pm = set(summary.paper_methods())
    header = ["dataset"]
    for m in summary.methods:
        header += [f"{m} mean", f"{m} std", f"{m} se", f"{m} n", f"{m} mark"]
        if m in pm:
            header += [f"{m} paper", f"{m} paper pm"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for d in summary.datasets:
        row = [d]
        for m in summary.methods:
            c = summary.cell(d, m)
            if c is None or c.n == 0:
                row += ["", "", "", "0", ""]
            else:
                row += [repr(c.mean), repr(c.std), repr(c.se), str(c.n), c.mark]
            if m in pm:
                entry = summary.paper.get(d, {}).get(m)
                if entry is None:
                    row += ["", ""]
                else:
                    v, p = entry if isinstance(entry, (tuple, list)) else (entry, None)
                    row += [repr(float(v)), "" if p is None else repr(float(p))]
        w.writerow(row)
    if summary.reference is not None:
        row = [f"W/T/L vs {summary.reference}"]
        for m in summary.methods:
            wtl = "(ref)" if m == summary.reference else "/".join(map(str, summary.wtl.get(m, (0, 0, 0))))
            row += ["", "", "", "", wtl]
            if m in pm:
                row += [summary.paper_wtl.get(m, ""), ""]
        w.writerow(row)
    return buf.getvalue()


_TEX_ESC = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def _tex(s: str) -> str:
    return "".join(_TEX_ESC.get(ch, ch) for ch in str(s))


def latex_table(summary: Summary, caption: str = "") -> str:
    pm = set(summary.paper_methods())
    cols = ["dataset"]
    for m in summary.methods:
        cols.append(_tex(_header_name(summary, m)))
        if m in pm:
            cols.append(_tex(f"{m} (paper)"))
    lines = [r"\begin{table}[t]", r"\centering", r"\footnotesize"]
    if caption:
        lines.append(r"\caption{" + _tex(caption) + "}")
    lines += [r"\begin{tabular}{l" + "c" * (len(cols) - 1) + "}", r"\toprule", " & ".join(cols) + r" \\",
              r"\midrule"]
    for d in summary.datasets:
        row = [_tex(summary.labels.get(d, d))]
        for m in summary.methods:
            c = summary.cell(d, m)
            if c is None or c.n == 0:
                row.append("--")
            else:
                mark = {1: r" $\bullet$", -1: r" $\circ$"}.get(c.outcome, "")
                row.append(f"${_num(c.mean)} \\pm {_num(c.std)}$ ({_num(c.se)}){mark}")
            if m in pm:
                t = _paper_text(summary, d, m)
                row.append("$" + t.replace("±", r"\pm") + "$" if t else "")
        lines.append(" & ".join(row) + r" \\")
    if summary.reference is not None:
        lines.append(r"\midrule")
        row = [_tex(f"W/T/L vs {summary.reference}")]
        for m in summary.methods:
            row.append("--" if m == summary.reference else "/".join(map(str, summary.wtl.get(m, (0, 0, 0)))))
            if m in pm:
                row.append(_tex(summary.paper_wtl.get(m, "")))
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


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
    cols = ["dataset", "method", "metric", "n", "mean", "std", "se", "reference", "outcome", "mark", "pvalue",
            "mean_diff_accuracy", "paper", "paper_pm", "fit_time", "predict_time", "cv_time", "params",
            "margin_mean", "margin_std", "margin_semivariance", "margin_bound_term", "failed"]
    w.writerow(cols)
    for d in summary.datasets:
        for m in summary.methods:
            c = summary.cell(d, m)
            entry = summary.paper.get(d, {}).get(m)
            pv, pp = (entry if isinstance(entry, (tuple, list)) else (entry, None)) if entry is not None else (None, None)
            w.writerow([d, m, summary.metric, c.n, repr(c.mean), repr(c.std), repr(c.se), summary.reference or "",
                        c.outcome, c.mark, repr(c.pvalue), repr(c.mean_diff), "" if pv is None else repr(float(pv)),
                        "" if pp is None else repr(float(pp)), repr(c.fit_time), repr(c.predict_time),
                        repr(c.cv_time), c.params, *(repr(c.margin.get(k, float("nan"))) for k in
                                                     ("mean", "std", "semivariance", "bound_term")), c.n_failed])
    return buf.getvalue()


def results_csv(records) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["dataset", "method", "split", "status", "accuracy", "fit_time", "predict_time", "cv_time",
                "params", "n_train", "n_test", "error"])
    for r in sorted(records, key=lambda r: (r["dataset"], r["method"], r["split"])):
        info = r["info"] or {}
        w.writerow([r["dataset"], r["method"], r["split"], r["status"],
                    "" if r["score"] is None else repr(r["score"]),
                    "" if r["fit_time"] is None else repr(r["fit_time"]),
                    "" if r["predict_time"] is None else repr(r["predict_time"]),
                    "" if r["cv_time"] is None else repr(r["cv_time"]),
                    json.dumps(r["params"] or {}, sort_keys=True), info.get("n_train", ""), info.get("n_test", ""),
                    info.get("error", "")])
    return buf.getvalue()


# ---------------------------------------------------------------------- figures
def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def margin_figure(summary: Summary, dataset: str, path: Path) -> bool:
    from matplotlib.figure import Figure

    from ..plotting import plot_margin_cdf

    curves = {m: np.asarray(summary.cell(dataset, m).margins) for m in summary.methods
              if summary.cell(dataset, m) is not None and summary.cell(dataset, m).margins}
    if not curves:
        return False
    fig = Figure(figsize=(6.0, 4.2))
    ax = fig.subplots()
    plot_margin_cdf(curves, ax=ax, title=f"{summary.labels.get(dataset, dataset)}: training margins (split 0)")
    fig.tight_layout()
    _atomic_fig(fig, path)
    return True


def time_figure(summary: Summary, path: Path) -> bool:
    from matplotlib.figure import Figure

    ds = summary.datasets
    ms = [m for m in summary.methods if any(summary.cell(d, m) and summary.cell(d, m).n for d in ds)]
    if not ds or not ms:
        return False
    fig = Figure(figsize=(max(6.0, 1.1 * len(ds) + 2), 4.2))
    ax = fig.subplots()
    width = 0.8 / len(ms)
    x = np.arange(len(ds))
    for j, m in enumerate(ms):
        vals = [summary.cell(d, m).fit_time if summary.cell(d, m) and summary.cell(d, m).n else np.nan for d in ds]
        ax.bar(x + (j - (len(ms) - 1) / 2) * width, vals, width, label=m)
    ax.set_yscale("log")
    ax.set_xticks(x, [summary.labels.get(d, d) for d in ds], rotation=30, ha="right")
    ax.set_ylabel("mean training time per split (s)")
    ax.set_title("training time (final fit with the chosen hyperparameters)")
    ax.legend(fontsize="small", ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    _atomic_fig(fig, path)
    return True


def _atomic_fig(fig, path: Path):
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, format=path.suffix.lstrip("."))
    os.replace(tmp, path)


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
    put("table.tex", latex_table(summary, caption), "main table (LaTeX, booktabs)")
    put("summary.csv", summary_csv(summary), "one row per dataset and method: every number of the report")
    put("results.csv", results_csv(records), "one row per split: accuracy, times, chosen hyperparameters")

    figs = []
    for d in summary.datasets:
        name = f"margins_{_safe(d)}.png"
        if margin_figure(summary, d, out_dir / name):
            figs.append((name, f"cumulative margin distribution on {d} (training margins, split 0)"))
    if time_figure(summary, out_dir / "train_time.png"):
        figs.append(("train_time.png", "mean training time per method and dataset"))
    files += figs

    lines = header_lines(exp, plan, outcome, command, records)
    lines += ["", "## Results", "", table_md, "", leg, ""]
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
              "Mean seconds per split: final fit / prediction on the test part (and the CV search).", "",
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
