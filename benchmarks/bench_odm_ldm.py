"""Benchmark ODM and LDM against their scikit-learn peers.

* linear: ODM (dcd, newton), LDM (dcd, asgd) vs LinearSVC on dense 100k x 100 and sparse
  200k x 50k (0.1 % non-zeros);
* RBF: ODM and LDM vs SVC at m = 5k and 20k training points (LDM's exact kernel dual has an
  O(m^3) set-up: at 20k the approximate path, Nystroem features into the linear LDM, is timed
  instead, and the exact set-up time is extrapolated from 5k);
* per epoch (``asgd``): LDM averaged SGD vs SGDClassifier(loss="hinge"), averaged and plain, on
  the dense and the sparse data.

Each estimator is fitted ``--repeats`` times, interleaved with its peer, and the median time
is reported with the ratio ours / peer and the test accuracy of both. BLAS is limited to one
thread (threadpoolctl) so that every method runs single-threaded, as LIBLINEAR and LIBSVM do.

    python benchmarks/bench_odm_ldm.py            # full run (tens of minutes)
    python benchmarks/bench_odm_ldm.py --quick    # seconds-scale smoke run
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
import scipy.sparse as sp
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import SGDClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC, LinearSVC
from threadpoolctl import threadpool_limits

from margindist.models.ldm import LDM
from margindist.models.odm import ODM

from _synthetic import dense_linear, sparse_linear  # noqa: E402 (benchmarks/ is on sys.path)

RESULTS = Path(__file__).resolve().parent / "results" / "bench_odm_ldm.md"


# ----------------------------------------------------------------------------- data


def nonlinear(m, seed=0, n_test=5000):
    X, y = make_classification(n_samples=m + n_test, n_features=20, n_informative=10, n_redundant=4,
                               n_clusters_per_class=3, flip_y=0.02, class_sep=1.0, random_state=seed)
    X = MinMaxScaler().fit(X[:m]).transform(X)
    return X[:m], y[:m], X[m:], y[m:]


# ----------------------------------------------------------------------------- timing


def fit_time(est, X, y):
    """(wall-clock, process CPU) seconds of one fit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t, c = time.perf_counter(), time.process_time()
        est.fit(X, y)
        return time.perf_counter() - t, time.process_time() - c


METHODS = None  # --methods: substrings selecting the rows of ours


def run_task(rows, task, peer_name, make_peer, ours, data, repeats, per_epoch=None):
    """Fit the peer and each of ``ours`` (list of (name, factory)) ``repeats`` times, interleaved;
    one table row per estimator of ours with the medians (wall-clock and CPU) and the ratios
    ours / peer."""
    if METHODS:
        ours = [(name, make) for name, make in ours if any(s in name for s in METHODS)]
        if not ours:
            return
    X, y, Xt, yt = data
    t_peer, acc_peer = [], None
    t_ours = {name: [] for name, _ in ours}
    acc_ours = {}
    for _ in range(repeats):
        peer = make_peer()
        t_peer.append(fit_time(peer, X, y))
        acc_peer = peer.score(Xt, yt)
        for name, make in ours:
            est = make()
            t_ours[name].append(fit_time(est, X, y))
            acc_ours[name] = est.score(Xt, yt)
    scale = 1.0 / per_epoch if per_epoch else 1.0
    b, b_cpu = (scale * statistics.median(t[k] for t in t_peer) for k in (0, 1))
    for name, _ in ours:
        a, a_cpu = (scale * statistics.median(t[k] for t in t_ours[name]) for k in (0, 1))
        rows.append((task, name, a, peer_name, b, a / b, acc_ours[name], acc_peer, a_cpu, b_cpu))
        print(f"{task:38s} {name:30s} {a:9.3f}s  {peer_name:20s} {b:9.3f}s  ratio {a / b:6.2f}  "
              f"(CPU {a_cpu:.3f}s / {b_cpu:.3f}s = {a_cpu / b_cpu:5.2f})  acc {acc_ours[name]:.4f} / {acc_peer:.4f}",
              flush=True)


def run_asgd_epochs(rows, task, data, repeats, epochs=5):
    """Per epoch: LDM's averaged SGD vs SGDClassifier(loss="hinge"), averaged (the same
    algorithm) and plain, all fitted for ``epochs`` passes; the whole fit time (validation,
    set-up, LDM's step-size trial) divided by ``epochs``."""
    ours = [("LDM asgd", lambda: LDM(solver="asgd", max_iter=epochs, random_state=0))]
    for peer_name, average in (("SGDClassifier(hinge, avg)", True), ("SGDClassifier(hinge)", False)):
        run_task(rows, task + ", per epoch", peer_name,
                 lambda average=average: SGDClassifier(loss="hinge", average=average, max_iter=epochs, tol=None,
                                                       random_state=0),
                 ours, data, repeats, per_epoch=epochs)


# ----------------------------------------------------------------------------- main


def warm_up():
    """Compile / load the numba kernels once, outside the timings."""
    X, y, _, _ = dense_linear(300, 5, n_test=10)
    Xs = sp.csr_matrix(X)
    for Xw in (X, Xs):
        for est in (ODM(solver="dcd"), ODM(solver="newton"), ODM(solver="svrg"), LDM(), LDM(solver="asgd"),
                    ODM(kernel="rbf"), ODM(kernel="rbf", cache_size=0.1), LDM(kernel="rbf")):
            fit_time(est, Xw, y)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one repeat (smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=["dense", "sparse", "asgd", "rbf"], nargs="*", default=None)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--methods", nargs="*", default=None,
                    help="only the rows of ours whose name contains one of these strings (e.g. ODM)")
    args = ap.parse_args(argv)
    global METHODS
    METHODS = args.methods
    repeats = 1 if args.quick else args.repeats
    if args.quick:
        sizes = dict(dense=(5000, 50), sparse=(10000, 5000, 0.002), rbf=(1000, 2000))
    else:
        sizes = dict(dense=(100000, 100), sparse=(200000, 50000, 0.001), rbf=(5000, 20000))
    only = set(args.only or ["dense", "sparse", "asgd", "rbf"])
    rows = []
    with threadpool_limits(1):
        warm_up()
        if "dense" in only:
            m, d = sizes["dense"]
            data = dense_linear(m, d)
            task = f"dense {m}x{d}"
            run_task(rows, task, "LinearSVC", LinearSVC, [
                ("ODM dcd (lam=1)", lambda: ODM(lam=1.0, solver="dcd", random_state=0)),
                ("ODM newton (lam=1)", lambda: ODM(lam=1.0, solver="newton")),
                ("ODM svrg (lam=1)", lambda: ODM(lam=1.0, solver="svrg", random_state=0)),
                (f"ODM auto=newton (lam=m={m})", lambda: ODM(lam=float(m))),
                ("LDM dcd", lambda: LDM(solver="dcd", random_state=0)),
                ("LDM auto (asgd above 50k samples)", lambda: LDM(random_state=0)),
            ], data, repeats)
            run_task(rows, task, "LinearSVC(hinge)", lambda: LinearSVC(loss="hinge"), [
                ("LDM dcd", lambda: LDM(solver="dcd", random_state=0)),
            ], data, repeats)
        if "sparse" in only:
            m, d, dens = sizes["sparse"]
            data = sparse_linear(m, d, dens * d)
            task = f"sparse {m}x{d} ({100 * dens:g}% nnz)"
            run_task(rows, task, "LinearSVC", LinearSVC, [
                ("ODM dcd (lam=1)", lambda: ODM(lam=1.0, solver="dcd", random_state=0)),
                ("ODM newton (lam=1)", lambda: ODM(lam=1.0, solver="newton")),
                (f"ODM auto=newton (lam=m={m})", lambda: ODM(lam=float(m))),
                ("LDM auto (asgd above 50k samples)", lambda: LDM(random_state=0)),
            ], data, repeats)
        if "asgd" in only:
            m, d = sizes["dense"]
            run_asgd_epochs(rows, f"dense {m}x{d}", dense_linear(m, d), repeats)
            m, d, dens = sizes["sparse"]
            run_asgd_epochs(rows, f"sparse {m}x{d} ({100 * dens:g}% nnz)", sparse_linear(m, d, dens * d), repeats)
        if "rbf" in only:
            t_small = None
            for m in sizes["rbf"]:
                data = nonlinear(m)
                X = data[0]
                gamma = 1.0 / (X.shape[1] * X.var())
                # the m x m Gram matrix fits in the cache of both at 20k (3.2 GB)
                cache = max(200.0, 8 * m * m / 2**20 + 100)
                n_comp = min(1000, m // 2)
                ours = [
                    ("ODM rbf dcd (lam=1)", lambda: ODM(kernel="rbf", lam=1.0, cache_size=cache, random_state=0)),
                    (f"ODM rbf dcd (lam=m={m})", lambda: ODM(kernel="rbf", lam=float(m), cache_size=cache,
                                                           random_state=0)),
                    (f"Nystroem({n_comp})+LDM asgd",
                     lambda: make_pipeline(Nystroem(gamma=gamma, n_components=n_comp, random_state=0),
                                           LDM(solver="asgd", random_state=0))),
                    (f"Nystroem({n_comp})+LDM dcd",
                     lambda: make_pipeline(Nystroem(gamma=gamma, n_components=n_comp, random_state=0),
                                           LDM(solver="dcd", random_state=0))),
                ]
                if t_small is None:
                    ours.append(("LDM rbf dcd", lambda: LDM(kernel="rbf", random_state=0)))
                run_task(rows, f"rbf m={m}", f"SVC(cache {cache:.0f}MB)",
                         lambda: SVC(kernel="rbf", cache_size=cache), ours, data, repeats)
                ldm = [r for r in rows if r[0] == f"rbf m={m}" and r[1] == "LDM rbf dcd"]
                if t_small is None and ldm:
                    t_small, m_small = ldm[0][2], m
                elif t_small is not None:
                    est = t_small * (m / m_small) ** 3
                    nan = float("nan")
                    rows.append((f"rbf m={m}", "LDM rbf dcd (m^3 extrapolation)", est, "", nan, nan, nan, nan, nan,
                                 nan))
                    print(f"rbf m={m}: LDM rbf dcd extrapolated {est:.0f}s", flush=True)
    write(rows, args, repeats)


def write(rows, args, repeats):
    lines = [
        "# ODM / LDM benchmark",
        "",
        f"`python benchmarks/bench_odm_ldm.py{' --quick' if args.quick else ''}` — median of {repeats} fit(s), "
        "ours and the peer interleaved in the same run; accuracy on a held-out test set. Times are wall-clock; "
        "`CPU ours/peer` is the ratio of the process CPU times, less sensitive to other jobs on the machine.",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores shared with other jobs; "
        "BLAS limited to 1 thread (threadpoolctl), so every method runs single-threaded. Defaults of every "
        "estimator unless stated (ODM lam=1, mu=0.8, theta=0.2, tol=1e-3; LDM lambda1=lambda2=2^-5, C=1, "
        "tol=1e-2; LinearSVC / SVC / SGDClassifier defaults; LinearSVC's dual='auto' picks its primal "
        "Newton solver when n_samples > n_features). ODM with lam = m has the per-sample loss weight of "
        "C = 1 (with theta = mu = 0 it is exactly LinearSVC(C=1)). At m = 20k both ODM and SVC get a "
        "cache large enough for the whole Gram matrix.",
        "",
        "| task | ours | time (s) | peer | time (s) | ours/peer | CPU ours/peer | acc ours | acc peer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task, a, ta, b, tb, r, acc_a, acc_b, ca, cb in rows:
        def f(v, fmt):
            return "—" if isinstance(v, float) and np.isnan(v) else format(v, fmt)
        lines.append(f"| {task} | {a} | {f(ta, '.3f')} | {b} | {f(tb, '.3f')} | {f(r, '.2f')} | "
                     f"{f(ca / cb if cb else float('nan'), '.2f')} | {f(acc_a, '.4f')} | {f(acc_b, '.4f')} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
