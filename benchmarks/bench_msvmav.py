"""Benchmark MSVMAv against its scikit-learn peers, plus a quick accuracy sanity check.

Timing (fixed hyperparameters, stated in the output):

* linear MSVMAv vs LinearSVC on magic (scaled to [0, 1]), dense synthetic 100k x 100 and
  sparse synthetic 200k x 50k (about 50 non-zeros per row, 0.1 %);
* RBF MSVMAv (exact kernel path: Cholesky inverse of I + K, capacitance updates) vs SVC at
  m = 2k and 5k (magic subsets), and the Nystroem path (``kernel_approximation``) at m = 5k
  and on all of magic's training part;
* grid throughput of the exact RBF path: every fit of an (alpha, beta) grid at one width, as
  the experiment presets' cross-validation runs it (the factorisation of I + K cached after the
  first fit), at m = 450, 1000, 2000, against SVC over its C grid;
* BLAS threads: the estimator's own one-thread limit for small dense matrices against
  OpenBLAS's default threading.

Each pair is fitted ``--repeats`` times, interleaved, and the median time is reported with the
ratio ours / peer and the held-out accuracy of both. Unless stated otherwise BLAS is limited to
one thread (threadpoolctl) so that every method runs single-threaded, as LIBLINEAR and LIBSVM do.

Default rows (``--default-rows``): the two linear rows of ``bench_defaults.py`` (dense 120k x 100
min-max scaled; sparse 200k x 50k CSR, rows L2-normalised) with every estimator at its defaults:
``MSVMAv()`` and ``FMM()`` (the MSVMAv paper's FMM baseline) against ``LinearSVC()``, each beside
its previous solver (MSVMAv: ``update="batched"``, the NumPy loop that computes every margin every
iteration, on the dense row; FMM: ``solver="two_pass"``), interleaved, median of ``--repeats``,
plus time(n) / time(n / 2) of the default solvers (fits on the first half of the rows). Written
to ``results/bench_msvmav_defaults.md``.

Sanity accuracy (``--sanity``): 80/20 splits of australian, german, wdbc, pima, titanic scaled
to [0, 1]; alpha, beta of MSVMAv (the presets' 11 x 11 grid) and C of LinearSVC chosen by 5-fold CV.

    python benchmarks/bench_msvmav.py              # timing + sanity (tens of minutes)
    python benchmarks/bench_msvmav.py --quick      # seconds-scale smoke run
    python benchmarks/bench_msvmav.py --sanity     # only the accuracy check
    python benchmarks/bench_msvmav.py --default-rows [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC, LinearSVC
from threadpoolctl import threadpool_limits

import margindist.solvers.msvmav._common as msvmav_common
from margindist.datasets import load_dataset
from margindist.models.fmm import FMM
from margindist.models.msvmav import MSVMAv
from margindist.solvers.msvmav import FactorCache

from _synthetic import dense_linear, sparse_linear  # noqa: E402 (benchmarks/ is on sys.path)

RESULTS = Path(__file__).resolve().parent / "results" / "bench_msvmav.md"

#: Fixed hyperparameters of the timing runs.
ALPHA, BETA = 16.0, 1 / 16
C_PEER = 1.0


# ----------------------------------------------------------------------------- data


def magic(m=None, seed=0, n_test=None):
    """magic scaled to [0, 1] on the training part; m training points (None: 80 %)."""
    X, y = load_dataset("magic")
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)
    if m is not None and m < X_tr.shape[0]:
        idx = np.random.default_rng(seed).choice(X_tr.shape[0], m, replace=False)
        X_tr, y_tr = X_tr[idx], y_tr[idx]
    if n_test is not None:
        X_te, y_te = X_te[:n_test], y_te[:n_test]
    sc = MinMaxScaler().fit(X_tr)
    return sc.transform(X_tr), y_tr, np.clip(sc.transform(X_te), 0, 1), y_te


# ----------------------------------------------------------------------------- timing


def timed_fit(make, X, y):
    est = make()
    t0 = time.perf_counter()
    est.fit(X, y)
    return time.perf_counter() - t0, est


def compare(label, ours, peer, data, repeats, blas_threads=1):
    """Interleaved fits; median times, ratio, held-out accuracy of both."""
    X_tr, y_tr, X_te, y_te = data
    t_ours, t_peer = [], []
    est_o = est_p = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with threadpool_limits(limits=blas_threads, user_api="blas"):
            for _ in range(repeats):
                t, est_o = timed_fit(ours, X_tr, y_tr)
                t_ours.append(t)
                if peer is not None:
                    t, est_p = timed_fit(peer, X_tr, y_tr)
                    t_peer.append(t)
    row = {
        "case": label,
        "n": X_tr.shape[0],
        "d": X_tr.shape[1],
        "ours_s": statistics.median(t_ours),
        "ours_acc": est_o.score(X_te, y_te),
        "iters": int(np.max(est_o.n_iter_)),
    }
    if peer is not None:
        row["peer_s"] = statistics.median(t_peer)
        row["peer_acc"] = est_p.score(X_te, y_te)
        row["ratio"] = row["ours_s"] / row["peer_s"]
    print(fmt_row(row), flush=True)
    return row


def fmt_row(r):
    peer = (f"| {r['peer_s']:.3f} | {r['ratio']:.2f} | {r['peer_acc']:.4f} " if "peer_s" in r
            else "| - | - | - ")
    return (f"| {r['case']} | {r['n']} | {r['d']} | {r['ours_s']:.3f} {peer}| {r['ours_acc']:.4f} "
            f"| {r['iters']} |")


HEADER = ("| case | n train | d | MSVMAv s | peer s | ratio ours/peer | peer acc | MSVMAv acc "
          "| MSVMAv iterations |\n|---|---|---|---|---|---|---|---|---|")


#: the paper's T = 100 and last iterate (the estimator's defaults are 1000 and the best iterate),
#: so that the timed problem stays the one the tables above were measured on
PAPER = {"max_iter": 100, "return_best": False}


def _msvmav(**kw):
    return MSVMAv(**{**PAPER, **kw})


def run_timing(quick, repeats):
    rows = {"linear": [], "rbf": [], "grid": [], "threads": []}

    def lin():
        return _msvmav(alpha=ALPHA, beta=BETA)

    def lsvc():
        return LinearSVC(C=C_PEER)

    # ---- linear
    sizes = dict(magic=None, dense=(100_000, 100), sparse=(200_000, 50_000, 50))
    if quick:
        sizes = dict(magic=3000, dense=(5000, 50), sparse=(5000, 5000, 20))
    rows["linear"].append(compare("magic (scaled)", lin, lsvc, magic(sizes["magic"]), repeats))
    m, d = sizes["dense"]
    rows["linear"].append(compare(f"dense synthetic {m}x{d}", lin, lsvc,
                                  dense_linear(m, d, n_test=2000 if quick else 20000), repeats))
    m, d, k = sizes["sparse"]
    rows["linear"].append(compare(f"sparse synthetic {m}x{d} ({k} nnz/row, CG)", lin, lsvc,
                                  sparse_linear(m, d, k, n_test=2000 if quick else 20000), repeats))

    # ---- RBF (cache_size=0: every fit pays its factorisation; the refit row below shows
    # what a grid search over alpha, beta pays per point once the factorisation is cached in
    # the FactorCache its points share)
    def rbf():
        return _msvmav(alpha=ALPHA, beta=BETA, kernel="rbf", cache_size=0)

    def rbf_cached(cache):
        return lambda: _msvmav(alpha=ALPHA, beta=BETA, kernel="rbf", factor_cache=cache)

    def svc():
        return SVC(C=C_PEER, kernel="rbf")

    def nys(c):
        return lambda: _msvmav(alpha=ALPHA, beta=BETA, kernel="rbf", kernel_approximation=c,
                              random_state=0)

    ms = (300, 600) if quick else (2000, 5000)
    for m in ms:
        data = magic(m, n_test=1000 if quick else 5000)
        rows["rbf"].append(compare(f"magic m={m}, exact kernel path", rbf, svc, data, repeats))
        cache = FactorCache()
        with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
            warnings.simplefilter("ignore", ConvergenceWarning)
            _msvmav(alpha=1.0, beta=1.0, kernel="rbf", factor_cache=cache).fit(data[0], data[1])  # fill the cache
        rows["rbf"].append(compare(f"magic m={m}, refit, factorisation cached", rbf_cached(cache),
                                   svc, data, repeats))
    m_big = ms[-1]
    n_comp = 100 if quick else 500
    data = magic(m_big, n_test=1000 if quick else 5000)
    rows["rbf"].append(compare(f"magic m={m_big}, Nystroem {n_comp}", nys(n_comp), svc, data, repeats))
    data = magic(3000 if quick else None)
    rows["rbf"].append(compare(f"magic all, Nystroem {n_comp}", nys(n_comp), svc, data, repeats))

    # ---- grid throughput: all (alpha, beta) of a grid at gamma = 1/d, the factorisation cached
    rows["grid"] = [grid_throughput(m, quick) for m in ((200, 400) if quick else (450, 1000, 2000))]

    # ---- BLAS threads: the estimator's one-thread limit vs OpenBLAS threading (2 threads)
    default_limit = msvmav_common.BLAS_SINGLE_THREAD_MAX
    for label, make, data in [
        ("RBF exact, magic m=1000" if not quick else "RBF exact, magic m=300", rbf,
         magic(300 if quick else 1000, n_test=1000)),
        ("linear update='batched', dense " + ("5000 x 100" if quick else "100k x 100"),
         lambda: _msvmav(alpha=ALPHA, beta=BETA, update="batched"),
         dense_linear(5000 if quick else 100_000, 100, n_test=1000)),
    ]:
        out = {}
        for mode in ("1 thread", "2 threads"):
            msvmav_common.BLAS_SINGLE_THREAD_MAX = default_limit if mode == "1 thread" else 0
            try:
                out[mode] = compare(f"{label}, BLAS {mode}", make, None, data, repeats, blas_threads=2)
            finally:
                msvmav_common.BLAS_SINGLE_THREAD_MAX = default_limit
        rows["threads"].append((label, out["1 thread"]["ours_s"], out["2 threads"]["ours_s"]))
    return rows


def grid_throughput(m, quick):
    """Per-fit times over an (alpha, beta) grid at gamma = 1/d (the presets' middle width), fitted
    in the presets' order; the first fit (which pays the O(m^3) factorisation) is timed apart.
    SVC over its C grid on the same data for comparison."""
    ks = range(-10, 11, 4) if quick else range(-10, 11, 2)
    grid = [2.0**k for k in ks]
    X_tr, y_tr, X_te, y_te = magic(m, seed=1, n_test=1000)
    gamma = 1.0 / X_tr.shape[1]
    times, accs, iters = [], [], []
    cache = FactorCache()  # shared by the grid's points, as the experiment runner shares one
    with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        _msvmav(kernel="rbf", gamma=gamma, fit_intercept=False, max_iter=1, cache_size=0).fit(X_tr, y_tr)
        setup = time.perf_counter() - t0
        for a in grid:
            for b in grid:
                t, est = timed_fit(lambda a=a, b=b: _msvmav(alpha=a, beta=b, kernel="rbf", gamma=gamma,
                                                           fit_intercept=False, factor_cache=cache), X_tr, y_tr)
                times.append(t)
                accs.append(est.score(X_te, y_te))
                iters.append(est.n_iter_)
        svc = []
        for C in grid:
            t, est = timed_fit(lambda C=C: SVC(C=C, kernel="rbf", gamma=gamma), X_tr, y_tr)
            svc.append(t)
    row = {"m": m, "points": len(times), "setup": setup, "mean": float(np.mean(times)),
           "median": float(np.median(times)), "max": float(np.max(times)), "iters": float(np.mean(iters)),
           "svc_mean": float(np.mean(svc)), "best_acc": float(np.max(accs))}
    print(f"grid m={m}: {row['points']} fits, mean {row['mean']:.4f} s (median {row['median']:.4f}, max "
          f"{row['max']:.3f}), factorisation {row['setup']:.3f} s; SVC mean {row['svc_mean']:.4f} s",
          flush=True)
    return row


# ----------------------------------------------------------------------------- sanity accuracy


SANITY_SETS = ("australian", "german", "wdbc", "pima", "titanic")
#: An independent reference implementation (10 splits, tuned): MSVMAv / LinearSVC.
REFERENCE = {"australian": (0.85, 0.85), "german": (0.75, 0.76), "wdbc": (0.97, 0.97),
             "pima": (0.76, 0.76), "titanic": (0.78, 0.78)}


def run_sanity(n_splits, quick):
    grid_ab = [2.0**k for k in range(-10, 11, 2)]  # the presets' grid 2^-10, 2^-8, ..., 2^10
    grid_c = [2.0**k for k in range(-6, 7, 2)]
    if quick:
        grid_ab, grid_c = [2.0**-4, 1.0, 2.0**4], [0.1, 1.0, 10.0]
    rows = []
    for name in SANITY_SETS:
        X, y = load_dataset(name)
        acc_o, acc_p, picks = [], [], []
        for split in range(n_splits):
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=split,
                                                      stratify=y)
            sc = MinMaxScaler().fit(X_tr)
            X_tr, X_te = sc.transform(X_tr), np.clip(sc.transform(X_te), 0, 1)
            with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
                warnings.simplefilter("ignore", ConvergenceWarning)
                gs_o = GridSearchCV(_msvmav(), {"alpha": grid_ab, "beta": grid_ab}, cv=5).fit(X_tr, y_tr)
                gs_p = GridSearchCV(LinearSVC(), {"C": grid_c}, cv=5).fit(X_tr, y_tr)
            acc_o.append(gs_o.score(X_te, y_te))
            acc_p.append(gs_p.score(X_te, y_te))
            picks.append((gs_o.best_params_["alpha"], gs_o.best_params_["beta"]))
        row = {"dataset": name, "ours": np.mean(acc_o), "ours_sd": np.std(acc_o),
               "peer": np.mean(acc_p), "peer_sd": np.std(acc_p), "reference": REFERENCE[name],
               "picks": picks}
        print(f"{name}: MSVMAv {row['ours']:.3f} +- {row['ours_sd']:.3f}   LinearSVC {row['peer']:.3f} "
              f"+- {row['peer_sd']:.3f}   reference run {row['reference'][0]:.2f} / {row['reference'][1]:.2f}",
              flush=True)
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- report


def _default_row_fits(row):
    """(label, factory) of the default-rows benchmark for one row."""
    fits = [("MSVMAv()", MSVMAv), ("FMM()", FMM), ("FMM(solver='two_pass')", lambda: FMM(solver="two_pass")),
            ("LinearSVC()", LinearSVC)]
    if row == "dense":
        fits.insert(1, ("MSVMAv(update='batched')", lambda: MSVMAv(update="batched")))
    return fits


def run_default_rows(quick, repeats):
    """Median fit times, accuracies and time(n) / time(n / 2) on bench_defaults' linear rows."""
    import bench_defaults

    out = []
    for row in ("dense", "sparse"):
        X, y, Xt, yt = getattr(bench_defaults, row)(quick)
        h = X.shape[0] // 2
        fits = _default_row_fits(row)
        times = {lab: [] for lab, _ in fits}
        halves = {lab: [] for lab, _ in fits}
        acc = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            for _, make in fits:  # compiled code loaded before timing
                make().fit(X[:500], y[:500])
            for _ in range(repeats):
                for lab, make in fits:
                    t, est = timed_fit(make, X, y)
                    times[lab].append(t)
                    acc[lab] = est.score(Xt, yt)
                    if "(" in lab and "=" not in lab:  # the defaults: also on half the rows
                        halves[lab].append(timed_fit(make, X[:h], y[:h])[0])
        peer = statistics.median(times["LinearSVC()"])
        for lab, _ in fits:
            med = statistics.median(times[lab])
            scale = med / statistics.median(halves[lab]) if halves[lab] else float("nan")
            out.append((row, X.shape, lab, med, med / peer, acc[lab], scale))
            print(f"{row} {lab:28s} {med:8.3f} s  ratio {med / peer:5.2f}  acc {acc[lab]:.4f}  "
                  f"t(n)/t(n/2) {scale:.2f}", flush=True)
    return out


def write_default_rows(path, rows, repeats, quick):
    lines = ["# MSVMAv and FMM at their defaults against LinearSVC()", ""]
    if quick:
        lines += ["**Quick smoke run (small sizes) — not representative.**", ""]
    lines += [conditions(repeats) + " Data: `bench_defaults.py` rows (`python benchmarks/bench_msvmav.py "
              "--default-rows`). ratio = time / LinearSVC() time of the same run; t(n)/t(n/2): the same "
              "estimator on the first half of the training rows.", "",
              "| row | n x d | estimator | fit s | ratio | test acc | t(n)/t(n/2) |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {row} | {shape[0]} x {shape[1]} | {lab} | {t:.3f} | {r:.2f} | {a:.4f} | "
              + ("-" if np.isnan(sc) else f"{sc:.2f}") + " |" for row, shape, lab, t, r, a, sc in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


def conditions(repeats):
    return (f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared with other jobs: ratios from "
            f"the same run are what counts), Python {platform.python_version()}, numpy "
            f"{np.__version__}. Median of {repeats} interleaved repeats.")


def write_report(path, timing, sanity, repeats, n_splits, quick):
    lines = ["# MSVMAv benchmark", ""]
    if quick:
        lines += ["**Quick smoke run (tiny sizes) — not representative.**", ""]
    lines += [conditions(repeats), ""]
    if timing:
        lines += [
            f"Fixed hyperparameters: MSVMAv alpha = {ALPHA:g}, beta = {BETA:g} (2^4, 2^-4), max_iter = 100, "
            "tol = 1e-6, fit_intercept = True, update = 'auto', gamma = 'scale'; LinearSVC C = 1 "
            "(dual='auto'); SVC C = 1, gamma = 'scale'. Accuracy on a held-out split (magic: 20 % "
            "stratified; synthetic: 20 000 separate points; RBF: 5 000 magic test points). "
            "BLAS limited to 1 thread for both methods (threadpoolctl).",
            "",
            "## Linear: MSVMAv vs LinearSVC",
            "",
            HEADER,
            *[fmt_row(r) for r in timing["linear"]],
            "",
            "## RBF: MSVMAv vs SVC",
            "",
            HEADER,
            *[fmt_row(r) for r in timing["rbf"]],
            "",
            "## Grid throughput of the exact RBF path",
            "",
            "Every (alpha, beta) of the grid {2^-10, 2^-8, ..., 2^10}^2 at gamma = 1/d (the middle of "
            "the presets' width grid), fit_intercept=False as in the msvmav-rbf preset, T = 100, on magic "
            "subsets; the fits run in the presets' order, so the factorisation of I + K (cached) is paid "
            "once: its time is the 'factorisation' column (a fresh fit at that m). SVC: the mean over "
            "C in the same grid at the same gamma. BLAS one thread.",
            "",
            "| m | fits | MSVMAv mean s/fit | median | max | mean iterations | factorisation s | SVC mean s/fit |",
            "|---|---|---|---|---|---|---|---|",
            *[f"| {r['m']} | {r['points']} | {r['mean']:.4f} | {r['median']:.4f} | {r['max']:.3f} | "
              f"{r['iters']:.0f} | {r['setup']:.3f} | {r['svc_mean']:.4f} |" for r in timing["grid"]],
            "",
            "## BLAS threads (2-thread pool; MSVMAv alone)",
            "",
            "The estimator limits BLAS to one thread for dense matrices up to order 2048; the "
            "'2 threads' column switches that off. The linear row uses update='batched' (the "
            "NumPy/BLAS loop); the default compiled loop for <= 128 columns calls no BLAS.",
            "",
            "| case | estimator's 1-thread limit s | OpenBLAS 2 threads s | slowdown |",
            "|---|---|---|---|",
            *[f"| {lab} | {a:.3f} | {b:.3f} | {b / a:.1f}x |" for lab, a, b in timing["threads"]],
            "",
        ]
    if sanity:
        lines += [
            "## Sanity accuracy (not the papers' protocol)",
            "",
            f"{n_splits} stratified 80/20 splits, features scaled to [0, 1] on the training part, 5-fold "
            "CV on the training part: MSVMAv alpha, beta in {2^-10, 2^-8, ..., 2^10} (121 points), "
            "LinearSVC C in {2^-6, 2^-4, ..., 2^6}. Mean +- std of the test accuracy over the splits; "
            "an independent reference run (10 splits) for comparison.",
            "",
            "| dataset | MSVMAv | LinearSVC | reference run MSVMAv / LinearSVC | chosen (alpha, beta) |",
            "|---|---|---|---|---|",
            *[f"| {r['dataset']} | {r['ours']:.3f} +- {r['ours_sd']:.3f} | {r['peer']:.3f} +- "
              f"{r['peer_sd']:.3f} | {r['reference'][0]:.2f} / {r['reference'][1]:.2f} | "
              + ", ".join(f"(2^{int(np.log2(a))}, 2^{int(np.log2(b))})" for a, b in r["picks"]) + " |"
              for r in sanity],
            "",
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, seconds-scale smoke run")
    ap.add_argument("--sanity", action="store_true", help="only the accuracy sanity check")
    ap.add_argument("--no-sanity", action="store_true", help="only the timing")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--splits", type=int, default=None, help="sanity splits (default 5, quick 2)")
    ap.add_argument("--out", type=Path, default=None, help=f"report path (default {RESULTS})")
    ap.add_argument("--default-rows", action="store_true",
                    help="only MSVMAv() and FMM() against LinearSVC() on bench_defaults' dense and sparse rows")
    args = ap.parse_args(argv)
    if args.default_rows:
        rows = run_default_rows(args.quick, args.repeats)
        name = "bench_msvmav_defaults" + ("_quick" if args.quick else "") + ".md"
        write_default_rows(args.out or RESULTS.with_name(name), rows, args.repeats, args.quick)
        return
    n_splits = args.splits or (2 if args.quick else 5)
    print(conditions(args.repeats))
    timing = None if args.sanity else run_timing(args.quick, args.repeats)
    sanity = None if args.no_sanity else run_sanity(n_splits, args.quick)
    out = args.out or (RESULTS if not args.quick else RESULTS.with_name("bench_msvmav_quick.md"))
    write_report(out, timing, sanity, args.repeats, n_splits, args.quick)


if __name__ == "__main__":
    main()
