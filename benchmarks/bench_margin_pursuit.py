"""Benchmark MarginPursuit's solvers: Newton-CG against LinearSVC, projected SGD against SGDClassifier.

Three parts (``--parts``, all by default):

* ``solvers``: the default fit (``solver="auto"``, i.e. Newton-CG) against ``LinearSVC()`` and the
  previous default (``solver="sgd"``) on the ``dense`` and ``sparse`` rows of
  ``benchmarks/bench_defaults.py`` (120k x 100 min-max scaled; 200k x 50k CSR, 50 non-zeros a
  row, rows L2-normalised; ``--rows large_sparse``: 2M x 200k float32 CSR, 20 non-zeros a row,
  one fit each unless ``--repeats``), every estimator at its defaults. The three fits alternate, the
  times are medians of ``--repeats`` fits, wall-clock and CPU time of this process (the machine
  is shared: CPU time is the steadier of the two); ``t(n)/t(n/2)`` fits the first half of the
  rows the same way.
* ``probe``: the feature-scale probe -- standardised ``make_classification`` (3000 training and
  3000 test rows, 100 features, 10 informative) multiplied by 1, 10 and 100, each solver at the
  default lam: accuracy, iterations and CPU time.
* ``sgd``: time per epoch of the projected SGD against ``SGDClassifier(loss="hinge")``, end-to-end
  fits (validation and the one-time rescaling included), median of ``--repeats`` interleaved
  fits, same lam, tol=None:

  - dense synthetic: n x d Gaussian features, a noisy linear teacher (100k x 100; quick 20k x 50);
  - sparse synthetic CSR: n x d with ``nnz`` non-zeros per row, values in (0, 1), a noisy linear
    teacher (200k x 20k, 40 per row; quick 20k x 5k);
  - magic (real; 19020 x 10, scaled to [0, 1] on the training part), 80/20 split.

  Settings (same for both): lam = alpha = 1e-4 (synthetic) / 1e-3 (magic), E epochs with
  tol=None (a fixed budget of passes, no early stopping), shuffling, an intercept.
  MarginPursuit(solver="sgd") otherwise at its defaults (Catoni-Giulini psi, scale="auto" and
  the rescaling after the first pass, projection, batch size 1, regularised intercept);
  SGDClassifier with loss="hinge" and its default "optimal" schedule (Pegasos-type,
  unregularised intercept). MarginPursuit's psi is never zero, so it updates w at every
  example, where the hinge skips examples with margin > 1: on clean data the peer does less
  work per epoch.

BLAS is limited to one thread (threadpoolctl), so everything runs single-threaded. numba is
compiled before timing.

    python benchmarks/bench_margin_pursuit.py                    # all parts (several minutes)
    python benchmarks/bench_margin_pursuit.py --parts solvers    # Newton vs LinearSVC only
    python benchmarks/bench_margin_pursuit.py --quick            # seconds-scale smoke run
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from sklearn.svm import LinearSVC
from threadpoolctl import threadpool_limits

from margindist.datasets import load_dataset
from margindist.models.margin_pursuit import MarginPursuit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_defaults

RESULTS = Path(__file__).resolve().parent / "results" / "bench_margin_pursuit.md"


def dense_problem(n, d, seed=0, n_test=10000):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + n_test, d))
    f = X @ rng.normal(size=d)
    y = (f + 0.5 * f.std() * rng.normal(size=f.size) > 0).astype(int)
    return X[:n], y[:n], X[n:], y[n:]


def sparse_problem(n, d, nnz, seed=0, n_test=10000):
    rng = np.random.default_rng(seed)
    m = n + n_test
    X = sp.csr_matrix((rng.random(m * nnz), rng.integers(0, d, m * nnz), np.arange(0, m * nnz + 1, nnz)),
                      shape=(m, d))
    X.sum_duplicates()
    f = X @ rng.normal(size=d)
    f = f - np.median(f)
    y = (f + 0.5 * f.std() * rng.normal(size=m) > 0).astype(int)
    return X[:n], y[:n], X[n:], y[n:]


def magic_problem(seed=0):
    X, y = load_dataset("magic")
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)
    sc = MinMaxScaler().fit(Xtr)
    return sc.transform(Xtr), ytr, np.clip(sc.transform(Xte), 0, 1), yte


def time_fit(make, X, y, repeats_out):
    est = make()
    t0 = time.perf_counter()
    est.fit(X, y)
    repeats_out.append(time.perf_counter() - t0)
    return est


def bench(name, data, lam, epochs, repeats):
    Xtr, ytr, Xte, yte = data

    def ours():
        return MarginPursuit(solver="sgd", lam=lam, max_iter=epochs, tol=None, random_state=0)

    def peer():
        return SGDClassifier(loss="hinge", alpha=lam, max_iter=epochs, tol=None, random_state=0)

    # warm-up (numba compilation for this dtype / layout, caches)
    MarginPursuit(solver="sgd", lam=lam, max_iter=1, tol=None).fit(Xtr[:200], ytr[:200])
    t_ours, t_peer = [], []
    for _ in range(repeats):
        a = time_fit(ours, Xtr, ytr, t_ours)
        b = time_fit(peer, Xtr, ytr, t_peer)
    mo, mp = statistics.median(t_ours) / epochs, statistics.median(t_peer) / epochs
    row = dict(name=name, shape=f"{Xtr.shape[0]} x {Xtr.shape[1]}" + (" CSR" if sp.issparse(Xtr) else ""),
               epochs=epochs, ours=mo, peer=mp, ratio=mo / mp, acc_ours=a.score(Xte, yte),
               acc_peer=b.score(Xte, yte), spread_ours=(min(t_ours) / epochs, max(t_ours) / epochs),
               spread_peer=(min(t_peer) / epochs, max(t_peer) / epochs))
    print(f"{name:8s} {row['shape']:>20s}  ours {mo * 1e3:8.2f} ms/epoch  SGDClassifier {mp * 1e3:8.2f} ms/epoch  "
          f"ratio {row['ratio']:.2f}  acc {row['acc_ours']:.4f} / {row['acc_peer']:.4f}", flush=True)
    return row


# ----------------------------------------------------------------------------- Newton vs LinearSVC
def _timed(make, X, y):
    """(fitted estimator, wall seconds, CPU seconds of this process)."""
    est = make()
    t0, c0 = time.perf_counter(), time.process_time()
    est.fit(X, y)
    return est, time.perf_counter() - t0, time.process_time() - c0


SOLVERS = {
    "newton": lambda: MarginPursuit(),  # solver="auto"
    "sgd": lambda: MarginPursuit(solver="sgd", random_state=0),
    "LinearSVC": lambda: LinearSVC(),
}


def _medians(X, y, repeats, names):
    """Median wall and CPU time per estimator over ``repeats`` alternating fits, and the last fits."""
    times = {k: [] for k in names}
    fitted = {}
    for _ in range(repeats):
        for k in names:
            fitted[k], wall, cpu = _timed(SOLVERS[k], X, y)
            times[k].append((wall, cpu))
    med = {k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)) for k, v in times.items()}
    return med, fitted


def bench_solvers(row, quick, repeats):
    X, y, Xt, yt = getattr(bench_defaults, row)(quick)
    MarginPursuit().fit(X[:500], y[:500])  # compile
    MarginPursuit(solver="sgd").fit(X[:500], y[:500])
    full, fitted = _medians(X, y, repeats, list(SOLVERS))
    half, _ = _medians(X[: X.shape[0] // 2], y[: X.shape[0] // 2], repeats, ["newton", "LinearSVC"])
    r = {"row": row, "shape": f"{X.shape[0]} x {X.shape[1]}" + (" CSR" if sp.issparse(X) else ""),
         "t": full, "acc": {k: est.score(Xt, yt) for k, est in fitted.items()},
         "n_iter": fitted["newton"].n_iter_, "scale": fitted["newton"].scale_,
         "ratio_n": [full["newton"][i] / half["newton"][i] for i in (0, 1)],
         "ratio_peer": [full["LinearSVC"][i] / half["LinearSVC"][i] for i in (0, 1)]}
    print(f"{row:7s} newton {full['newton'][0]:.2f}s (cpu {full['newton'][1]:.2f}) LinearSVC "
          f"{full['LinearSVC'][0]:.2f}s (cpu {full['LinearSVC'][1]:.2f}) sgd {full['sgd'][0]:.2f}s  acc "
          f"{r['acc']['newton']:.4f} / {r['acc']['LinearSVC']:.4f} / sgd {r['acc']['sgd']:.4f}  t(n)/t(n/2) "
          f"{r['ratio_n'][0]:.2f} (cpu {r['ratio_n'][1]:.2f}) peer {r['ratio_peer'][0]:.2f}", flush=True)
    return r


def _solver_lines(rows):
    lines = [
        "## Newton-CG (the default) against LinearSVC and the previous default (SGD)",
        "",
        "Every estimator at its defaults (MarginPursuit lam = 1 / n; `solver=\"auto\"` is Newton-CG). Time:",
        "median of the repeats, fits alternating; wall-clock and, in brackets, CPU time of the process.",
        "",
        ("| row | n x d | Newton s | LinearSVC s | ratio Newton / LinearSVC | SGD s | acc Newton | acc LinearSVC "
         "| acc SGD | Newton t(n)/t(n/2) | LinearSVC t(n)/t(n/2) | Newton n_iter_ |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = r["t"]
        lines.append(
            f"| {r['row']} | {r['shape']} | {t['newton'][0]:.2f} ({t['newton'][1]:.2f}) | {t['LinearSVC'][0]:.2f} "
            f"({t['LinearSVC'][1]:.2f}) | **{t['newton'][0] / t['LinearSVC'][0]:.2f}** "
            f"({t['newton'][1] / t['LinearSVC'][1]:.2f}) | {t['sgd'][0]:.2f} ({t['sgd'][1]:.2f}) | "
            f"{r['acc']['newton']:.4f} | {r['acc']['LinearSVC']:.4f} | {r['acc']['sgd']:.4f} | "
            f"{r['ratio_n'][0]:.2f} ({r['ratio_n'][1]:.2f}) | {r['ratio_peer'][0]:.2f} ({r['ratio_peer'][1]:.2f}) | "
            f"{r['n_iter']} |")
    return lines + [""]


# ----------------------------------------------------------------------------- feature-scale probe
def scale_probe():
    X, y = make_classification(6000, 100, n_informative=10, random_state=0)
    X = StandardScaler().fit(X[:3000]).transform(X)
    Xtr, ytr, Xte, yte = X[:3000], y[:3000], X[3000:], y[3000:]
    rows = []
    for c in (1, 10, 100):
        for solver in ("newton", "gd", "sgd"):
            est = MarginPursuit(solver=solver, random_state=0)
            est.fit(Xtr[:300] * c, ytr[:300])  # compile
            c0 = time.process_time()
            est.fit(Xtr * c, ytr)
            rows.append((c, solver, est.score(Xte * c, yte), est.n_iter_, est.scale_, time.process_time() - c0))
        rows.append((c, "LinearSVC", LinearSVC().fit(Xtr * c, ytr).score(Xte * c, yte), None, None, None))
        print("  ".join(f"{r[1]} {r[2]:.4f}" for r in rows[-4:]), f"(x{c})", flush=True)
    return rows


def _probe_lines(rows):
    lines = ["## Feature-scale probe", "",
             "Standardised make_classification (3000 training / 3000 test rows, 100 features, 10 informative)",
             "times c, every solver at the default lam = 1 / n (the same J at every c, up to the scale of w);",
             "n_iter_: Newton iterations (plus GD's step before the rescaling), GD iterations, SGD passes.", "",
             "| c | solver | test acc | n_iter_ | scale_ | CPU s |", "|---|---|---|---|---|---|"]
    for c, solver, acc, it, sc, t in rows:
        extra = "| | | |" if it is None else f"| {it} | {sc:.4g} | {t:.3f} |"
        lines.append(f"| {c} | {solver} | {acc:.4f} {extra}")
    return lines + [""]


# ----------------------------------------------------------------------------- output
def _sgd_lines(rows):
    lines = [
        "## Projected SGD against SGDClassifier (hinge): time per epoch",
        "",
        "Per-epoch time = median over the repeats (interleaved: ours, peer, ours, peer, ...) of the",
        "end-to-end fit time with E epochs, divided by E. Both with tol=None (E full passes), the",
        "same lam / alpha, shuffling and an intercept; MarginPursuit(solver=\"sgd\") otherwise at its",
        "defaults (scale='auto', one rescaling after the first pass, projection). Accuracy on a held-out",
        "set. The min-max columns show the spread of the repeats.",
        "",
        "| problem | n x d | E | ours ms/epoch (min-max) | SGDClassifier ms/epoch (min-max) | ratio ours/peer | acc ours | acc peer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['shape']} | {r['epochs']} | {r['ours'] * 1e3:.2f} "
            f"({r['spread_ours'][0] * 1e3:.1f}-{r['spread_ours'][1] * 1e3:.1f}) | {r['peer'] * 1e3:.2f} "
            f"({r['spread_peer'][0] * 1e3:.1f}-{r['spread_peer'][1] * 1e3:.1f}) | **{r['ratio']:.2f}** | "
            f"{r['acc_ours']:.4f} | {r['acc_peer']:.4f} |")
    return lines + [
        "",
        "Notes: MarginPursuit's influence function psi is never zero, so it updates the weights at",
        "every example, while the hinge skips the examples with margin above 1; its fit also",
        "includes the one-time rescaling (one pass computing the margins and a quantile).",
        "The synthetic sets use lam = 1e-4, magic lam = 1e-3.",
        "",
    ]


def write(sections, argv):
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    lines = [
        "# MarginPursuit benchmarks",
        "",
        f"Produced by `{' '.join(['python benchmarks/bench_margin_pursuit.py', *argv])}`.",
        "",
        (f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores shared "
         f"with other jobs (load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}); "
         "BLAS limited to one thread (threadpoolctl); every estimator single-threaded. "
         f"Python {platform.python_version()}, numpy {np.__version__}. The machine is shared and noisy: "
         "ratios within one run are what counts."),
        "",
    ]
    for part in sections:
        lines += part
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small problems, seconds")
    ap.add_argument("--parts", nargs="*", default=["solvers", "probe", "sgd"], choices=["solvers", "probe", "sgd"])
    ap.add_argument("--rows", nargs="*", default=["dense", "sparse"], choices=["dense", "sparse", "large_sparse"],
                    help="rows of the solvers part (large_sparse: 2M x 200k float32 CSR, one fit each by default)")
    ap.add_argument("--repeats", type=int, default=None, help="repeats per estimator (default 3 solvers / 5 sgd; quick 3)")
    ap.add_argument("--no-write", action="store_true", help="do not write the results file")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    sections = []
    with threadpool_limits(1):
        if "solvers" in args.parts:
            rows = [bench_solvers(row, args.quick, args.repeats or (1 if row == "large_sparse" else 3))
                    for row in args.rows]
            sections.append(_solver_lines(rows))
        if "probe" in args.parts:
            sections.append(_probe_lines(scale_probe()))
        if "sgd" in args.parts:
            sections.append(_sgd_lines(_sgd_part(args.quick, args.repeats or (3 if args.quick else 5))))
    if not args.no_write:
        write(sections, argv)


def _sgd_part(quick, repeats):
    if quick:
        problems = [("dense", dense_problem(20000, 50), 1e-4, 3),
                    ("sparse", sparse_problem(20000, 5000, 40), 1e-4, 3),
                    ("magic", magic_problem(), 1e-3, 5)]
    else:
        problems = [("dense", dense_problem(100000, 100), 1e-4, 5),
                    ("sparse", sparse_problem(200000, 20000, 40), 1e-4, 5),
                    ("magic", magic_problem(), 1e-3, 20)]
    return [bench(name, data, lam, epochs, repeats) for name, data, lam, epochs in problems]


if __name__ == "__main__":
    main()
