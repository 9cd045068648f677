"""Every margindist linear estimator against LinearSVC: time, peak memory, test accuracy, scaling.

Rows (``--rows``; the data of ``bench_defaults.py``):

* ``dense``: make_classification 120k x 100, min-max scaled (``--quick``: 6k);
* ``sparse``: 200k x 50k CSR, 50 non-zeros a row (0.1 %), rows L2-normalised (quick: 10k x 5k);
* ``large_sparse``: 2M x 200k float32 CSR, 20 non-zeros a row, about 40M non-zeros
  (quick: 40k x 20k);
* ``cornell``: the raw word features of cornell as CSR (827 x 4134, 7 classes; a random 70/30
  split, needs ``MARGINDIST_DATA``), M3SVM, LDM, LSSVM, KMOMD and MSVMAv (wide problems: their solvers on
  kernel rows) against ``LinearSVC(multi_class="crammer_singer")`` (the native multi-class SVM);
* ``text``: synthetic tf-idf topic rows (:func:`_synthetic.topic_text`: 15 000 training rows of
  a 20 000-word vocabulary, 6 classes; quick: 3000 of 5000), M3SVM against the same peer.

Each estimator is fitted at its defaults (ODM's ``lam="auto"`` is LinearSVC's C = 1 exactly; the
others' defaults are their own data-dependent choices, see the hyperparameters page), the peer is
``LinearSVC()`` (Crammer-Singer on ``cornell``). Fits of ours and the peer alternate; the times are medians of ``--repeats`` fits
(1 on ``large_sparse`` unless given), after one warm-up fit on 2000 rows (numba compilation
or cache loading is not timed). Reported per estimator: fit time, the peer's time from the
same run, ratio ours / peer (goal <= 1.0), peak memory of one fit above the memory held before it
(resident set high-water mark, reset through ``/proc/self/clear_refs``; Linux only, else blank),
test accuracy of both, and ``time(n) / time(n/2)``: the median fit time on all training rows over
that on the first half (goal <= 2.2; 2.0 is linear scaling), from fits of the two sizes
alternating, repeated until about two seconds are spent on each size (at most 15 fits).

    python benchmarks/bench_linear.py --quick                    # development sizes (minutes)
    python benchmarks/bench_linear.py --rows dense sparse --out benchmarks/results/bench_linear.md
    python benchmarks/bench_linear.py --rows large_sparse --methods ODM LDM
    python benchmarks/bench_linear.py --rows cornell --repeats 5
    python benchmarks/bench_linear.py --rows cornell text --methods M3SVM --repeats 3
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.svm import LinearSVC

from margindist import (
    FMM,
    KMOMD,
    LDM,
    LSSVM,
    M3SVM,
    MAMC,
    ODM,
    MarginPursuit,
    MSVMAv,
    load_dataset,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _synthetic import topic_text
from bench_defaults import dense, large_sparse, sparse

RESULTS = Path(__file__).resolve().parent / "results" / "bench_linear.md"

ESTIMATORS = {
    "ODM": lambda: ODM(random_state=0),
    "LDM": lambda: LDM(random_state=0),
    "LDM(bcd)": lambda: LDM(solver="bcd", random_state=0),
    "LSSVM": lambda: LSSVM(),
    "MarginPursuit": lambda: MarginPursuit(random_state=0),
    "KMOMD(linear)": lambda: KMOMD(kernel="linear"),
    "M3SVM": lambda: M3SVM(),
    "FMM": lambda: FMM(),
    "MSVMAv": lambda: MSVMAv(),
    "MSVMAv(anderson)": lambda: MSVMAv(solver="anderson"),
    "MAMC": lambda: MAMC(),
}


def cornell(quick):
    X, y = load_dataset("cornell")
    X, Xt, y, yt = train_test_split(sp.csr_matrix(X), y, test_size=0.3, random_state=0)
    return X, y, Xt, yt


def text(quick):
    return topic_text(3000, 5000, 6, seed=6) if quick else topic_text(15000, 20000, 6, seed=6)


ROWS = {"dense": dense, "sparse": sparse, "large_sparse": large_sparse, "cornell": cornell, "text": text}
#: Rows with another peer than LinearSVC() and the estimators they run (all others: every one).
PEERS = {"cornell": lambda: LinearSVC(multi_class="crammer_singer"),
         "text": lambda: LinearSVC(multi_class="crammer_singer")}
ROW_ESTIMATORS = {"cornell": ("M3SVM", "LDM", "LSSVM", "KMOMD(linear)", "MSVMAv"), "text": ("M3SVM",)}


# ----------------------------------------------------------------------------- measuring


def _status_kib(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kib("VmRSS")
    except OSError:
        return None


def timed_fit(est, X, y):
    """(fit seconds, peak resident memory above the start in MiB or None, warned)."""
    start = _reset_peak()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        t = time.perf_counter()
        est.fit(X, y)
        dt = time.perf_counter() - t
    peak = _status_kib("VmHWM")
    mib = None if start is None or peak is None else max(peak - start, 0) / 1024
    return dt, mib, any(issubclass(w.category, ConvergenceWarning) for w in caught)


def median_times(make, X, y, repeats, make_peer=LinearSVC):
    """Median fit time of ``make()`` on (X, y) and the peer's, alternating, plus the last fits."""
    ours, peer = [], []
    for _ in range(repeats):
        est = make()
        ours.append(timed_fit(est, X, y))
        ref = make_peer()
        peer.append(timed_fit(ref, X, y))
    return ours, peer, est, ref


def measure(name, make, data, repeats, scaling, make_peer=LinearSVC):
    X, y, Xt, yt = data
    make().fit(X[:2000], y[:2000])  # compile / load the numba cache outside the timings
    ours, peer, est, ref = median_times(make, X, y, repeats, make_peer)
    t = statistics.median(r[0] for r in ours)
    t_peer = statistics.median(r[0] for r in peer)
    row = {
        "name": name, "time": t, "peer_time": t_peer, "ratio": t / t_peer,
        "mem": max((r[1] for r in ours if r[1] is not None), default=None),
        "peer_mem": max((r[1] for r in peer if r[1] is not None), default=None),
        "acc": float(est.score(Xt, yt)), "peer_acc": float(ref.score(Xt, yt)),
        "warned": any(r[2] for r in ours), "scale": None, "peer_scale": None,
    }
    if scaling:
        row["scale"] = scaling_ratio(make, X, y, repeats, t)
        row["peer_scale"] = scaling_ratio(make_peer, X, y, repeats, t_peer)
    return row


#: The time(n) / time(n/2) fits of an estimator that fits in less than this many seconds are
#: repeated until about this much time is spent on each size (at most SCALING_MAX_REPEATS).
SCALING_SECONDS = 2.0
SCALING_MAX_REPEATS = 15


def scaling_ratio(make, X, y, repeats, t_full):
    """Median time of a fit on all rows over that on the first half, the fits of the two sizes
    alternating. Fits under a second are repeated more often (:data:`SCALING_SECONDS`): with
    three of each, ratios of fits of 0.05-0.5 s came out at 2.3-3.1 where five to seven alternating
    pairs give 1.9-2.0."""
    half = X.shape[0] // 2
    n = min(max(repeats, math.ceil(SCALING_SECONDS / max(t_full, 1e-3))), SCALING_MAX_REPEATS)
    full, halves = [], []
    for _ in range(n):
        full.append(timed_fit(make(), X, y)[0])
        halves.append(timed_fit(make(), X[:half], y[:half])[0])
    return statistics.median(full) / statistics.median(halves)


# ----------------------------------------------------------------------------- output


def _fmt(v, spec):
    return "" if v is None else format(v, spec)


def show(row_name, r):
    print(f"{row_name:13s} {r['name']:14s} time {r['time']:8.2f}s peer {r['peer_time']:7.2f}s "
          f"ratio {r['ratio']:6.2f}  acc {r['acc']:.4f} peer {r['peer_acc']:.4f}  "
          f"mem {_fmt(r['mem'], '.0f')} MiB peer {_fmt(r['peer_mem'], '.0f')} MiB  "
          f"t(n)/t(n/2) {_fmt(r['scale'], '.2f')} peer {_fmt(r['peer_scale'], '.2f')}"
          f"{'  WARN' if r['warned'] else ''}", flush=True)


def run_line(script, argv):
    """The command and the machine of a run, for the head of a results file."""
    return (f"`python benchmarks/{script} {' '.join(argv)}` on {platform.machine()}, "
            f"{os.cpu_count()} logical CPUs (shared), Python {platform.python_version()}\n\n")


def markdown(results, argv):
    head = ("| row | estimator | time (s) | LinearSVC (s) | ratio | test acc | LinearSVC acc | diff (pt) | "
            "peak MiB | LinearSVC peak MiB | t(n)/t(n/2) | LinearSVC t(n)/t(n/2) | ConvergenceWarning |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {row} | {r['name']} | {r['time']:.3f} | {r['peer_time']:.3f} | {r['ratio']:.2f} | {r['acc']:.4f} | "
        f"{r['peer_acc']:.4f} | {100 * (r['acc'] - r['peer_acc']):+.1f} | {_fmt(r['mem'], '.0f')} | "
        f"{_fmt(r['peer_mem'], '.0f')} | {_fmt(r['scale'], '.2f')} | {_fmt(r['peer_scale'], '.2f')} | "
        f"{'yes' if r['warned'] else ''} |\n" for row, r in results)
    return "# bench_linear\n\n" + run_line("bench_linear.py", argv) + head + body


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="development sizes")
    ap.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    ap.add_argument("--methods", nargs="*", default=None, help="substrings of the estimator names to run")
    ap.add_argument("--repeats", type=int, default=None, help="fits per median (3; 1 on large_sparse)")
    ap.add_argument("--no-scaling", action="store_true", help="skip the time(n)/time(n/2) fits")
    ap.add_argument("--out", type=Path, default=None, help=f"write a Markdown table (e.g. {RESULTS})")
    args = ap.parse_args(argv)
    results = []
    for row in args.rows:
        data = ROWS[row](args.quick)
        repeats = args.repeats or (1 if row == "large_sparse" and not args.quick else 3)
        for name, make in ESTIMATORS.items():
            if args.methods and not any(s.lower() in name.lower() for s in args.methods):
                continue
            if row in ROW_ESTIMATORS and name not in ROW_ESTIMATORS[row]:
                continue
            r = measure(name, make, data, repeats, not args.no_scaling, PEERS.get(row, LinearSVC))
            show(row, r)
            results.append((row, r))
    if args.out:
        args.out.write_text(markdown(results, argv))


if __name__ == "__main__":
    main()
