"""The reproduction record (docs/reproductions): every committed table parses back to the numbers
of its committed per-split results, recomputed here independently of the report code.

For each recorded preset, ``docs/reproductions/<preset>/`` holds the run's ``report.md``,
``table.csv`` (the main table at full precision), ``summary.csv`` and ``results.csv`` (one row
per split). From ``results.csv`` alone this file recomputes each cell's mean, standard
deviation, standard error and split count, the paired t-test against the reference method
(scipy's ``ttest_rel``), the win/tie/loss row and the average ranks over the datasets, and
checks them against both ``table.csv`` and the Markdown table of the report. It also checks
that every preset has its page, that each page includes its report and gives verdicts, and
that the index links every page. A preset whose full run has not finished may keep its finished
work as an export of the run's store (``<preset>/records.jsonl.gz``, ``margindist store
export``): its records must be tasks of the preset as it is now, under the fingerprint that
``margindist reproduce`` gives its output directory, so that the run resumes from them.
"""

import csv
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from margindist.cli import _check_out, _identity, reproduce_description
from margindist.experiments.presets import PRESETS, get_preset
from margindist.experiments.records import config_hash
from margindist.experiments.store import read_export

ROOT = Path(__file__).resolve().parents[1] / "docs" / "reproductions"
RECORDED = sorted(p.name for p in ROOT.iterdir() if (p / "table.csv").is_file())
EXPORTED = sorted(p.parent.name for p in ROOT.glob("*/records.jsonl.gz"))
BETTER, WORSE = "●", "○"


def _rows(path: Path) -> list:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _markdown_table(text: str, after: str) -> list:
    """The cells of the first Markdown table after the line ``after`` (header row included)."""
    lines = text.splitlines()
    start = lines.index(after)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            if not set(line) <= set("|-"):
                rows.append([c.strip() for c in line.strip("| ").split(" | ")])
        elif rows:
            break
    return rows


def _scores(preset: str) -> dict:
    """(dataset, method) -> {split: score} from results.csv, in the table's metric."""
    higher = _higher_is_better(preset)
    out = defaultdict(dict)
    for r in _rows(ROOT / preset / "results.csv"):
        if r["status"] == "ok":
            acc = float(r["accuracy"])
            out[(r["dataset"], r["method"])][int(r["split"])] = acc if higher else 1 - acc
    return out


def _methods(table_rows: list) -> list:
    return [k[:-5] for k in table_rows[0] if k.endswith(" mean")]


def _higher_is_better(preset: str) -> bool:
    metrics = {r["metric"] for r in _rows(ROOT / preset / "summary.csv")}
    assert len(metrics) == 1 and metrics <= {"accuracy", "error"}
    return metrics == {"accuracy"}


def _reference(preset: str) -> str:
    refs = {r["reference"] for r in _rows(ROOT / preset / "summary.csv")}
    assert len(refs) == 1
    return refs.pop()


def _outcome(a: dict, b: dict, higher_is_better: bool) -> int:
    """+1 / -1 / 0: a significantly better / worse than b (two-sided paired t-test, 95 %)."""
    common = sorted(set(a) & set(b))
    x, y = np.array([a[s] for s in common]), np.array([b[s] for s in common])
    if np.allclose(x, y):
        return 0
    p = stats.ttest_rel(x, y).pvalue
    if not p < 0.05:
        return 0
    better = x.mean() > y.mean() if higher_is_better else x.mean() < y.mean()
    return 1 if better else -1


@pytest.mark.parametrize("preset", RECORDED)
def test_table_csv_is_recomputed_from_the_split_results(preset):
    table = [r for r in _rows(ROOT / preset / "table.csv") if not r["dataset"].startswith("W/T/L")]
    scores = _scores(preset)
    ref = _reference(preset)
    higher = _higher_is_better(preset)
    wtl = defaultdict(lambda: [0, 0, 0])
    for row in table:
        for m in _methods(table):
            s = scores.get((row["dataset"], m), {})
            assert int(row[f"{m} n"]) == len(s), (row["dataset"], m)
            if not s:
                continue
            v = np.array(list(s.values()))
            assert float(row[f"{m} mean"]) == pytest.approx(v.mean(), abs=1e-12)
            std = v.std(ddof=1) if len(v) > 1 else 0.0
            assert float(row[f"{m} std"]) == pytest.approx(std, abs=1e-12)
            assert float(row[f"{m} se"]) == pytest.approx(std / math.sqrt(len(v)), abs=1e-12)
            if m != ref and scores.get((row["dataset"], ref)):
                o = _outcome(s, scores[(row["dataset"], ref)], higher)
                assert row[f"{m} mark"] == {1: BETTER, -1: WORSE, 0: ""}[o], (row["dataset"], m)
                wtl[m][1 - o] += 1
    last = _rows(ROOT / preset / "table.csv")[-1]
    if last["dataset"].startswith("W/T/L"):
        for m, (w, t, l) in wtl.items():
            assert last[f"{m} mark"] == f"{w}/{t}/{l}", m


@pytest.mark.parametrize("preset", RECORDED)
def test_report_table_prints_the_csv_numbers(preset):
    report = (ROOT / preset / "report.md").read_text(encoding="utf-8")
    md = _markdown_table(report, "## Results")
    header, body = md[0], md[1:]
    table = _rows(ROOT / preset / "table.csv")
    assert len(body) == len(table)
    for cells, row in zip(body, table):
        line = dict(zip(header, cells))
        for m in _methods(table):
            text = line.get(m) or line.get(f"{m} (ref)")
            if row["dataset"].startswith("W/T/L"):
                assert text == (row[f"{m} mark"] or "(ref)")
            elif int(row[f"{m} n"]) == 0:
                assert text == "—" or text.startswith("n/a ("), text
            else:
                want = f"{float(row[f'{m} mean']):.4f} ± {float(row[f'{m} std']):.4f} ({float(row[f'{m} se']):.4f})"
                assert text == (f"{want} {row[f'{m} mark']}" if row[f"{m} mark"] else want)
            paper = line.get(f"{m} (paper)")
            if paper and not row["dataset"].startswith("W/T/L"):
                assert float(paper.split(" ± ")[0]) == pytest.approx(float(row[f"{m} paper"]))


@pytest.mark.parametrize("preset", RECORDED)
def test_average_ranks_follow_from_the_means(preset):
    report = (ROOT / preset / "report.md").read_text(encoding="utf-8")
    if "| method | average rank |" not in report:
        pytest.skip("no rank statistics for this table")
    table = [r for r in _rows(ROOT / preset / "table.csv") if not r["dataset"].startswith("W/T/L")]
    methods = _methods(table)
    higher = _higher_is_better(preset)
    full = [r for r in table if all(int(r[f"{m} n"]) > 0 for m in methods)]
    # rank 1 = best: the rank tests always rank by accuracy (1 - error for error tables)
    means = np.array([[float(r[f"{m} mean"]) for m in methods] for r in full])
    acc = means if higher else 1 - means
    # means equal up to round-off (the same predictions summed in another order) tie
    ranks = np.mean([stats.rankdata(-np.round(a, 12)) for a in acc], axis=0)
    lines = report[report.index("| method | average rank |"):].splitlines()[2:2 + len(methods)]
    printed = {c[0]: float(c[1]) for c in (line.strip("| ").split(" | ") for line in lines)}
    # printed to three decimals: off by at most half a unit of the last (3.8125 prints as 3.812)
    assert printed == pytest.approx(dict(zip(methods, ranks)), abs=5e-4 + 1e-12)


def test_every_preset_has_a_page_with_verdicts_and_the_index_links_them():
    index = (ROOT / "index.md").read_text(encoding="utf-8")
    for preset in PRESETS:
        page = ROOT / f"{preset}.md"
        assert page.is_file(), preset
        text = page.read_text(encoding="utf-8")
        assert "## Verdicts" in text, preset
        assert f"]({preset}.md)" in index, preset
        if preset in RECORDED:
            assert f"{preset}/report.md" in text, preset
    for preset in RECORDED:
        assert preset in PRESETS


@pytest.mark.parametrize("preset", EXPORTED)
def test_exported_records_resume_their_preset(preset, tmp_path):
    header, records = read_export(ROOT / preset / "records.jsonl.gz")
    exp = get_preset(preset)
    description, what = reproduce_description(preset, exp)
    identity = _identity(description, what, None)
    assert header["identity"]["fingerprint"] == identity["fingerprint"]
    (tmp_path / "experiment.json").write_text(json.dumps(header["identity"]))
    _check_out(tmp_path, identity, force=False)  # `reproduce` accepts the imported directory
    phases = {r["phase"] for r in records}
    configs = {config_hash(exp.protocol, ds, run, phase)
               for ds in exp.datasets for run in exp.methods for phase in phases}
    assert records and all(r["config"] in configs for r in records)
    page = (ROOT / f"{preset}.md").read_text(encoding="utf-8")
    assert f"{preset}/records.jsonl.gz" in page and f"{len(records)} of" in page
