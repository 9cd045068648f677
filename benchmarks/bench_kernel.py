"""Kernel estimators against SVC: exact and Nyström paths, time, peak memory, test accuracy.

Two parts (``--part``):

* ``magic``: magic, min-max scaled on the training part, RBF with SVC's ``gamma="scale"`` (every
  estimator's default), at ``--sizes`` training points (2000 5000 14000), 5000 test points.
  Each kernel estimator at its defaults on the exact path and with ``kernel_approximation``
  (``--landmarks``, 1000 by default), against ``SVC()`` from the same run; ``--cv`` adds each
  method at the parameters its ``*CV`` picks on the first 2000 training points (a 3-point grid
  over the main parameter, 3 folds). Exact paths over ``--exact-max`` rows are left out where
  they have an O(m^3) set-up (MSVMAv; LDM's factorised path ``LDM-dcd``, the same model as
  ``LDM``'s default block coordinate descent); ODM, KM-OMD and LDM work from a row cache,
  LS-SVM by conjugate gradients above 5000 rows. MSVMAv, whose default
  ``kernel_approximation="auto"`` chooses between the two, also has a row "auto, defaults".
* ``repeats``: titanic (2201 rows, 24 distinct (x, y) pairs), min-max scaled, a stratified
  70 / 30 split: every estimator at its defaults and with ``--cv`` at its ``*CV`` choice, against
  ``SVC()``; data with few distinct rows, which the methods whose weight k is k copies of a
  sample solve on the distinct pairs with summed weights.
* ``kernels``: the other kernels (``--kernels``, poly by default) on bundled data sets
  (``--sets``; at most 7000 rows of each, min-max scaled, a stratified 70 / 30 split): each
  estimator at its defaults with that kernel against ``SVC(kernel=...)``.
* ``scale``: a synthetic nonlinear problem (two Gaussian classes in 20 dimensions with
  different covariances, so the Bayes boundary is quadratic; float32) at ``--scale-sizes``
  (50000 200000 1000000): the Nyström path of each estimator, the exact path where m is at
  most ``--exact-max`` and SVC where m is at most ``--svc-max``.

Times are medians of ``--repeats`` fits (1 by default), after one warm-up fit of each path on
500 rows (numba compilation is not timed); peak memory is the resident-set high-water
mark of one fit above the memory held before it (Linux). Ratios are ours / SVC in the same run.
``--device cpu|cuda`` repeats each default row of the magic part with the estimator's
``device`` set (its kernel blocks through PyTorch on that device), beside the NumPy row.

    python benchmarks/bench_kernel.py --part magic --sizes 2000 5000
    python benchmarks/bench_kernel.py --part magic --sizes 5000 14000 --device cuda   # NumPy and GPU rows
    python benchmarks/bench_kernel.py --part scale --scale-sizes 50000 200000 1000000 --methods ODM LDM
    python benchmarks/bench_kernel.py --part repeats --methods ODM LDM-dcd KMOMD --repeats 5 --cv
    python benchmarks/bench_kernel.py --part kernels --kernels poly sigmoid --methods ODM LDM KMOMD LSSVM
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC

import margindist as md
from margindist.datasets import load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_linear import run_line, timed_fit

RESULTS = Path(__file__).resolve().parent / "results" / "bench_kernel.md"

ESTIMATORS = {
    "ODM": lambda **kw: md.ODM(kernel="rbf", random_state=0, **kw),
    "KMOMD": lambda **kw: md.KMOMD(kernel="rbf", **kw),
    "LDM": lambda **kw: md.LDM(kernel="rbf", random_state=0, **kw),
    "LDM-dcd": lambda **kw: md.LDM(kernel="rbf", solver="dcd", random_state=0, **kw),
    # the exact rows explicitly (the default kernel_approximation="auto" leaves the exact path above
    # 5724 rows)
    "MSVMAv": lambda **kw: md.MSVMAv(kernel="rbf", random_state=0, **{"kernel_approximation": None, **kw}),
    "LSSVM": lambda **kw: md.LSSVM(kernel="rbf", **kw),
}
#: estimators whose default kernel_approximation is "auto" (a row "auto, defaults": the estimator
#: as a user meets it, exact or on landmarks by its rule)
AUTO = {"MSVMAv"}
#: exact paths with an O(m^3) set-up (left out above --exact-max rows; LS-SVM's "auto" runs
#: its CG above 5000 rows, LDM's block coordinate descent has no set-up)
CUBIC = {"LDM-dcd", "MSVMAv"}
#: the *CV class and a 3-point grid over the main parameter (``--cv``)
CV = {
    "ODM": (md.ODMCV, {"lam": ["auto", 0.1, 10.0]}),
    "KMOMD": (md.KMOMDCV, {"lam": [0.01, 0.1, 0.5]}),
    "LDM": (md.LDMCV, {"C": [1.0, 10.0, 100.0]}),
    "LDM-dcd": (md.LDMCV, {"C": [1.0, 10.0, 100.0]}),  # the same model as "LDM" (factorised path)
    "MSVMAv": (md.MSVMAvCV, {"alpha": ["scale", 1.0, 64.0]}),
    "LSSVM": (md.LSSVMCV, {"C": [0.1, 1.0, 10.0]}),
}


# ----------------------------------------------------------------------------- data


def magic(m, seed=0):
    X, y = load_dataset("magic")
    X, Xt, y, yt = train_test_split(X, y, train_size=m, test_size=5000, random_state=seed, stratify=y)
    s = MinMaxScaler().fit(X)
    return s.transform(X), y, np.clip(s.transform(Xt), -1, 2), yt


def titanic(seed=0):
    X, y = load_dataset("titanic")
    X, Xt, y, yt = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    s = MinMaxScaler().fit(X)
    return s.transform(X), y, s.transform(Xt), yt


def bundled(name, max_rows=7000, seed=0):
    X, y = load_dataset(name)
    if X.shape[0] > max_rows:
        X, _, y, _ = train_test_split(X, y, train_size=max_rows, random_state=seed, stratify=y)
    X, Xt, y, yt = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    s = MinMaxScaler().fit(X)
    return s.transform(X), y, s.transform(Xt), yt


def gaussian_classes(m, d=20, seed=0, n_test=20000):
    """Two Gaussian classes in d dimensions, N(0, I) and N(mu, diag(sigma^2)) with sigma in
    [0.5, 2]: a quadratic Bayes boundary. float32."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(scale=0.3, size=d)
    sigma = rng.uniform(0.5, 2.0, size=d)
    n = m + n_test
    y = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, d))
    X[y == 1] = X[y == 1] * sigma + mu
    X = X.astype(np.float32)
    return X[:m], y[:m], X[m:], y[m:]


# ----------------------------------------------------------------------------- measuring


def measure(make, data, repeats):
    """(median seconds, peak MiB, test accuracy, warned) of fits of make() on data."""
    X, y, Xt, yt = data
    runs = []
    for _ in range(repeats):
        est = make()
        runs.append(timed_fit(est, X, y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acc = float(est.score(Xt, yt))
    mem = max((r[1] for r in runs if r[1] is not None), default=None)
    return statistics.median(r[0] for r in runs), mem, acc, any(r[2] for r in runs)


def cv_params(name, data):
    cls, grid = CV[name]
    X, y = data[0][:2000], data[1][:2000]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = cls(kernel="rbf", param_grid=grid, cv=3).fit(X, y)
    return search.best_params_


def row(out, part, m, name, path, res, peer):
    t, mem, acc, warned = res
    ratio = t / peer[0] if peer else None
    out.append((part, m, name, path, t, mem, acc, ratio, peer[2] if peer else None, warned))
    r = "" if ratio is None else f"ratio {ratio:7.2f}"
    p = "" if peer is None else f"SVC {peer[0]:7.2f}s acc {peer[2]:.4f}"
    print(f"{part:6s} m={m:<8d} {name:8s} {path:24s} {t:8.2f}s {'' if mem is None else f'{mem:6.0f} MiB'} "
          f"acc {acc:.4f}  {r}  {p}{'  WARN' if warned else ''}", flush=True)


# ----------------------------------------------------------------------------- parts


def run_magic(args, methods, out):
    for m in args.sizes:
        data = magic(m)
        peer = measure(SVC, data, args.repeats)
        row(out, "magic", m, "SVC", "libsvm", peer, None)
        for name in methods:
            make = ESTIMATORS[name]
            for device in [None] + ([args.device] if args.device else []):
                on = functools.partial(make, device=device)
                at = "" if device is None else f", {device}"
                if m <= args.exact_max or name not in CUBIC:
                    row(out, "magic", m, name, f"exact, defaults{at}", measure(on, data, args.repeats), peer)
                if name in AUTO:
                    row(out, "magic", m, name, f"auto, defaults{at}",
                        measure(functools.partial(on, kernel_approximation="auto"), data, args.repeats), peer)
                if args.landmarks:
                    row(out, "magic", m, name, f"nystroem {args.landmarks}, defaults{at}",
                        measure(functools.partial(on, kernel_approximation=args.landmarks), data, args.repeats), peer)
            if args.cv:
                best = cv_params(name, data)
                exact = m <= args.exact_max or name not in CUBIC
                if exact or args.landmarks:  # (--landmarks 0: no Nyström rows)
                    path = "exact" if exact else f"nystroem {args.landmarks}"
                    kw = {} if exact else {"kernel_approximation": args.landmarks}
                    row(out, "magic", m, name, f"{path}, CV {best}",
                        measure(functools.partial(make, **best, **kw), data, args.repeats), peer)
                if name in AUTO:
                    row(out, "magic", m, name, f"auto, CV {best}",
                        measure(functools.partial(make, **best, kernel_approximation="auto"), data, args.repeats), peer)


def run_repeats(args, methods, out):
    data = titanic()
    m = data[0].shape[0]
    peer = measure(SVC, data, args.repeats)
    row(out, "repeats", m, "SVC", "libsvm", peer, None)
    for name in methods:
        make = ESTIMATORS[name]
        row(out, "repeats", m, name, "exact, defaults", measure(make, data, args.repeats), peer)
        if args.cv:
            best = cv_params(name, data)
            row(out, "repeats", m, name, f"exact, CV {best}", measure(functools.partial(make, **best), data,
                                                                      args.repeats), peer)


def run_kernels(args, methods, out):
    for name in args.sets:
        data = bundled(name)
        m = data[0].shape[0]
        for kernel in args.kernels:
            peer = measure(functools.partial(SVC, kernel=kernel), data, args.repeats)
            row(out, name, m, "SVC", f"libsvm, {kernel}", peer, None)
            for method in methods:
                make = ESTIMATORS[method]
                row(out, name, m, method, f"{kernel}, defaults",
                    measure(lambda: make().set_params(kernel=kernel), data, args.repeats), peer)


def run_scale(args, methods, out):
    for m in args.scale_sizes:
        data = gaussian_classes(m)
        peer = measure(SVC, data, 1) if m <= args.svc_max else None
        if peer:
            row(out, "scale", m, "SVC", "libsvm", peer, None)
        for name in methods:
            make = ESTIMATORS[name]
            if m <= args.exact_max:
                row(out, "scale", m, name, "exact, defaults", measure(make, data, 1), peer)
            row(out, "scale", m, name, f"nystroem {args.landmarks}, defaults",
                measure(functools.partial(make, kernel_approximation=args.landmarks, verbose=1), data, 1), peer)


def markdown(out, argv):
    head = ("| part | m | estimator | path | time (s) | peak MiB | test acc | ratio to SVC | SVC acc | "
            "ConvergenceWarning |\n|---|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {p} | {m} | {n} | {path} | {t:.2f} | {'' if mem is None else f'{mem:.0f}'} | {acc:.4f} | "
        f"{'' if r is None else f'{r:.2f}'} | {'' if pa is None else f'{pa:.4f}'} | {'yes' if w else ''} |\n"
        for p, m, n, path, t, mem, acc, r, pa, w in out)
    return "# bench_kernel\n\n" + run_line("bench_kernel.py", argv) + head + body


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", nargs="*", default=["magic", "scale"], choices=["magic", "scale", "repeats", "kernels"])
    ap.add_argument("--sizes", nargs="*", type=int, default=[2000, 5000, 14000])
    ap.add_argument("--scale-sizes", nargs="*", type=int, default=[50000, 200000, 1000000])
    ap.add_argument("--sets", nargs="*", default=["banana", "phoneme", "spambase", "magic"],
                    help="kernels part: bundled data sets")
    ap.add_argument("--kernels", nargs="*", default=["poly"], help="kernels part: the kernels")
    ap.add_argument("--methods", nargs="*", default=list(ESTIMATORS), choices=list(ESTIMATORS))
    ap.add_argument("--landmarks", type=int, default=1000, help="Nyström landmarks of the approximate rows (0: no such rows)")
    ap.add_argument("--exact-max", type=int, default=5000, help="largest m for the O(m^3) exact paths")
    ap.add_argument("--svc-max", type=int, default=50000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--cv", action="store_true", help="also at the *CV-chosen parameters")
    ap.add_argument("--device", default=None, choices=["cpu", "cuda"],
                    help="magic part: each default row again with the kernel blocks through PyTorch on this device")
    ap.add_argument("--out", type=Path, default=None, help=f"write a Markdown table (e.g. {RESULTS})")
    args = ap.parse_args(argv)
    out = []
    warm = magic(500)  # compile / load the numba caches outside the timings
    for name in args.methods:
        for device in {None, args.device}:
            measure(functools.partial(ESTIMATORS[name], device=device), warm, 1)
            measure(functools.partial(ESTIMATORS[name], kernel_approximation=100, device=device), warm, 1)
    if "magic" in args.part:
        run_magic(args, args.methods, out)
    if "repeats" in args.part:
        run_repeats(args, args.methods, out)
    if "kernels" in args.part:
        run_kernels(args, args.methods, out)
    if "scale" in args.part:
        run_scale(args, args.methods, out)
    if args.out:
        args.out.write_text(markdown(out, argv))


if __name__ == "__main__":
    main()
