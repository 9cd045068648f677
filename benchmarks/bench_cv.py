"""Benchmark the ``*CV`` estimators against scikit-learn's ``GridSearchCV`` over the same grid.

Each row searches one method's paper grid (:func:`margindist.experiments.presets.paper_grid`,
resolved on the data as the ``*CV`` estimator resolves it) on a bundled data set, min-max
scaled (``ldm-wide-sparse``: CSR, max-abs scaled), with the same 5 stratified folds for both sides: ``GridSearchCV(n_jobs=1)`` refits
the estimator from scratch at every point, the ``*CV`` estimator walks the grid with warm
starts and shared set-up. Printed per row: grid size, the time of both (median of
``--repeats``), the speed-up GridSearchCV / ours, whether the chosen parameters are the same
and the difference of the best scores. BLAS is limited to one thread (threadpoolctl).

    python benchmarks/bench_cv.py                 # every row, the paper grids (tens of minutes)
    python benchmarks/bench_cv.py --quick         # each grid cut to 3 values per parameter
    python benchmarks/bench_cv.py --rows odm-linear ldm-rbf
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler
from threadpoolctl import threadpool_limits

import margindist
from margindist.datasets import load_dataset

RESULTS = Path(__file__).resolve().parent / "results" / "bench_cv.md"

# row name -> (estimator, dataset, fixed parameters)
ROWS = {
    "odm-linear": ("ODM", "australian", {"kernel": "linear"}),
    "odm-rbf": ("ODM", "heart", {"kernel": "rbf", "random_state": 0}),
    "ldm-linear": ("LDM", "australian", {"kernel": "linear", "random_state": 0}),
    "ldm-rbf": ("LDM", "heart", {"kernel": "rbf", "random_state": 0}),
    "msvmav-linear": ("MSVMAv", "australian", {"kernel": "linear"}),
    "msvmav-rbf": ("MSVMAv", "heart", {"kernel": "rbf"}),
    "kmomd-rbf": ("KMOMD", "heart", {"kernel": "rbf"}),
    "m3svm": ("M3SVM", "vehicle", {"random_state": 0}),
    # wide dense data (827 x 4134): a fold's row-space factorisation is shared by the grid
    # (GridSearchCV's fits make their own); cornell is read from MARGINDIST_DATA
    "m3svm-wide": ("M3SVM", "cornell", {"random_state": 0}),
    # the same words as CSR scaled by MaxAbsScaler: LDM's wide sparse problems on kernel rows
    "ldm-wide-sparse": ("LDM", "cornell", {"random_state": 0}),
    "margin-pursuit": ("MarginPursuit", "australian", {"random_state": 0}),
    "lssvm-rbf": ("LSSVM", "heart", {"kernel": "rbf"}),
    # four classes, one-vs-one: each pair keeps its kernel rows for the grid points of a fold
    # (``--data satimage``: six classes, larger kernel matrices)
    "odm-rbf-ovo": ("ODM", "vehicle", {"kernel": "rbf", "random_state": 0}),
    "ldm-rbf-ovo": ("LDM", "vehicle", {"kernel": "rbf", "random_state": 0}),
    "kmomd-rbf-ovo": ("KMOMD", "vehicle", {"kernel": "rbf"}),
}
#: Rows whose data are fitted as CSR, scaled by MaxAbsScaler (sparsity kept).
SPARSE_ROWS = ("ldm-wide-sparse",)


def _grid(cv_est, X, y, quick: bool) -> dict:
    grid = cv_est._grid(X, y)  # the paper grid, resolved on X as fit resolves it
    if quick:
        grid = {k: v[:: max(1, len(v) // 3)][:3] for k, v in grid.items()}
    return grid


def _timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def run_row(name: str, quick: bool, repeats: int, data: str | None = None) -> dict:
    method, dataset, fixed = ROWS[name]
    dataset = data or dataset
    X, y = load_dataset(dataset)
    if name in SPARSE_ROWS:
        X = MaxAbsScaler().fit_transform(sp.csr_matrix(X))
    else:
        X = MinMaxScaler().fit_transform(X)
    folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    cv_cls, base_cls = getattr(margindist, method + "CV"), getattr(margindist, method)
    grid = _grid(cv_cls(**fixed), X, y, quick)
    base_cls(**fixed).fit(X, y)  # compile once, outside the timings
    t_ours, ours = _timed(lambda: cv_cls(grid, cv=folds, **fixed).fit(X, y), repeats)
    t_ref, ref = _timed(lambda: GridSearchCV(base_cls(**fixed), grid, cv=folds).fit(X, y), repeats)
    return {"row": name, "data": f"{dataset} ({X.shape[0]}x{X.shape[1]})",
            "points": int(np.prod([len(v) for v in grid.values()])), "ours": t_ours, "gridsearch": t_ref,
            "speedup": t_ref / t_ours, "same": ours.best_params_ == ref.best_params_,
            "dscore": abs(ours.best_score_ - ref.best_score_), "best": ours.best_params_,
            "score": ours.best_score_}


def render(rows: list) -> str:
    head = ("| row | data | grid points | *CV (s) | GridSearchCV (s) | speed-up | same choice | "
            "|Δ best score| | best score | chosen |\n|---|---|---|---|---|---|---|---|---|---|\n")
    lines = [f"| {r['row']} | {r['data']} | {r['points']} | {r['ours']:.2f} | {r['gridsearch']:.2f} | "
             f"{r['speedup']:.1f}x | {'yes' if r['same'] else 'NO'} | {r['dscore']:.1e} | {r['score']:.4f} | "
             f"{ {k: (round(v, 6) if isinstance(v, float) else v) for k, v in r['best'].items()} } |"
             for r in rows]
    return head + "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 values per grid parameter")
    ap.add_argument("--repeats", type=int, default=1, help="timings per side (median)")
    ap.add_argument("--rows", nargs="*", choices=list(ROWS), default=list(ROWS))
    ap.add_argument("--data", default=None, help="a bundled data set in place of each row's own")
    ap.add_argument("--out", type=Path, default=None, help=f"write the table (e.g. {RESULTS})")
    args = ap.parse_args(argv)
    rows = []
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in args.rows:
            rows.append(run_row(name, args.quick, args.repeats, args.data))
            print(render(rows[-1:]).splitlines()[-1], flush=True)
    table = render(rows)
    print("\n" + table)
    if args.out:
        args.out.write_text(f"# bench_cv.py {'--quick ' if args.quick else ''}(repeats={args.repeats})\n\n{table}")


if __name__ == "__main__":
    main()
