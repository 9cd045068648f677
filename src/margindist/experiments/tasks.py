"""Executing one task: a pure function of its description.

:func:`execute_task` loads the data, draws its split, scales on the training part, chooses
hyperparameters by CV on the training part, refits, and measures accuracy, fit / predict
time and the margin distribution (training and test margins). The first fit of a method
configuration in a process is preceded by an untimed warm-up fit on a tiny problem
(:func:`_warm_up`: numba compilation and other one-off costs stay out of the reported times).
Its randomness derives from the master seed and its key only.
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections.abc import Callable

import numpy as np

from ..search import cv_search, grid_points, point_params, reraise_interrupt, resolve_grid
from ..solvers.msvmav import FactorCache
from .protocols import derive_seed, make_split
from .records import Task, TaskRecord
from .registry import estimator_margins, get_method

__all__ = ["MARGIN_POINTS", "WARMUP_ROWS", "execute_task"]

#: Margins kept per stored distribution (quantiles of the training margins).
MARGIN_POINTS = 1000
#: Warm-up keys of this process (see :func:`_warm_up`).
_WARMED: set = set()
#: Rows per class of the warm-up problem.
WARMUP_ROWS = 8


def _inner_folds(y, n_folds, seed):
    from sklearn.model_selection import StratifiedKFold

    _, counts = np.unique(y, return_counts=True)
    k = int(min(n_folds, counts.min())) if counts.min() >= 2 else 2
    return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _warm_up(build, params: dict, key: tuple, X, y, on_warm_up: Callable | None = None) -> float | None:
    """One untimed fit on a tiny problem, once per method configuration and process.

    The first fit of a method in a process pays for one-off work that is no part of the
    method's cost: numba compiles the solver's loops (seconds), modules are imported, caches
    are filled. Timing that fit would make whichever split a process runs first look slow
    and the reported times depend on the scheduling. So before the first timed fit (and the
    CV search) of a configuration - method, kernel, fixed settings, dense / sparse input, its
    dtype, binary / multi-class - this fits the estimator once on at most ``WARMUP_ROWS``
    rows per class of the training part (same types, so the same compiled code). A failure
    of the warm-up is ignored (the timed fit reports its own errors).

    ``on_warm_up(what)`` is called with the configuration's method before the warm-up fit and
    with None after it (a progress display shows "compiling (first run only)" meanwhile).

    Returns the warm-up's seconds, or None when the configuration was already warm.
    """
    import scipy.sparse as sp

    classes = np.unique(y)
    full = key + (sp.issparse(X), str(X.dtype), classes.size > 2)
    if full in _WARMED:
        return None
    _WARMED.add(full)
    idx = np.sort(np.concatenate([np.flatnonzero(y == c)[:WARMUP_ROWS] for c in classes]))
    if on_warm_up is not None:
        on_warm_up(f"{key[0]} ({key[1]})")
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build(params).fit(X[idx], y[idx])
    except Exception as exc:  # noqa: BLE001 - the timed fits report errors
        reraise_interrupt(exc)
    finally:
        if on_warm_up is not None:
            on_warm_up(None)
    return time.perf_counter() - t0


def execute_task(task: Task, on_warm_up: Callable | None = None) -> TaskRecord:
    """Run one task; never raises (a failure is a record with status "error").

    ``on_warm_up``: see :func:`_warm_up` (serial runs only; it need not be picklable).
    """
    from threadpoolctl import threadpool_limits

    rec = TaskRecord.for_task(task)
    try:
        with threadpool_limits(1):
            _run_task(task, rec, on_warm_up)
    except Exception as exc:  # noqa: BLE001 - one failing task must not stop a run
        reraise_interrupt(exc)
        rec.status = "error"
        rec.info = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)[-4000:]}
    return rec.stamp()


def _choose(task: Task, info, build, grid, data, rec: TaskRecord, extra: dict) -> tuple:
    """The grid point of the task: given, chosen by CV on the training part, or the only one."""
    p, ds = task.protocol, task.dataset
    points = grid_points(grid)
    if task.choice is not None:
        extra["choice_source"] = "given"
        return task.choice
    if len(points) > 1:
        folds = _inner_folds(data.y_train, p.cv_folds, derive_seed(p.seed, "cv", ds.name, task.split))
        res = cv_search(build, grid, data.X_train, data.y_train, folds, warm_start=p.warm_start,
                        exact_warm_start=info.exact_warm_start)
        rec.cv_time = res.time
        extra.update(cv_score=res.best_score, cv_failed=res.n_failed, cv_warnings=res.n_warnings,
                     cv_points=len(points), cv_folds=len(folds))
        if res.errors:
            extra["cv_errors"] = res.errors
        return res.best_index
    return points[0] if points else ()


def _run_task(task: Task, rec: TaskRecord, on_warm_up=None) -> None:
    p, ds, run = task.protocol, task.dataset, task.run
    data = make_split(p, ds, task.split, task.data_dir)
    info = get_method(run.method)
    fixed = run.fixed_for(ds.name)
    est_seed = derive_seed(p.seed, "estimator", ds.name, run.name, task.split)
    grid = resolve_grid(run.grid, data.X_train, data.n_features, derive_seed(p.seed, "grid", ds.name, task.split),
                        n_classes=np.unique(data.y_train).size)

    factor_cache = FactorCache()  # kernel factorisations shared by this task's grid points

    def build(params):
        est = info.build(run.kernel, {**fixed, **params}, est_seed)
        if "factor_cache" in est.get_params(deep=False):
            est.set_params(factor_cache=factor_cache)
        return est

    extra = dict(data.meta)
    first = point_params(grid, grid_points(grid)[0]) if grid else {}
    warm = _warm_up(build, first, (run.method, run.kernel, repr(sorted(fixed.items()))), data.X_train,
                    data.y_train, on_warm_up)
    if warm is not None:
        extra["warmup_time"] = warm
    choice = _choose(task, info, build, grid, data, rec, extra)
    params = point_params(grid, choice) if grid else {}
    rec.params = params
    extra["choice"] = list(choice)
    if task.phase == "select":
        rec.info = extra
        return
    est = _evaluate(build(params), data, rec, extra)
    _measure_margins(est, data, task.store_margins, extra)
    rec.info = extra


def _evaluate(est, data, rec: TaskRecord, extra: dict):
    """The timed final fit and prediction: score, times and warnings go into the record."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, fit_time = _timed(lambda: est.fit(data.X_train, data.y_train))
        pred, predict_time = _timed(lambda: est.predict(data.X_test))
    n_warn = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    if n_warn:
        extra["fit_warnings"] = len(n_warn)
        extra["fit_warning"] = f"{n_warn[0].category.__name__}: {str(n_warn[0].message)[:300]}"
    rec.score = float(np.mean(pred == data.y_test))
    rec.fit_time, rec.predict_time = fit_time, predict_time
    return est


def _measure_margins(est, data, store_curves: bool, extra: dict) -> None:
    """Margin statistics of the training margins; their curves (and the test margins') on request."""
    margins, why = estimator_margins(est, data.X_train, data.y_train)
    if margins is not None and margins.size and np.all(np.isfinite(margins)):
        from ..metrics import margin_stats

        st = margin_stats(margins, quantiles=(0.5,))
        extra["margin_stats"] = {k: st[k] for k in ("mean", "std", "min", "semivariance", "bound_term",
                                                    "frac_negative")}
        if store_curves:
            extra["margins"] = _margin_curve(margins)
            test_m, _ = estimator_margins(est, data.X_test, data.y_test)
            if test_m is not None and test_m.size and np.all(np.isfinite(test_m)):
                extra["test_margins"] = _margin_curve(test_m)
    elif why:
        extra["margin_note"] = why


def _margin_curve(margins) -> list:
    """At most ``MARGIN_POINTS`` evenly spaced quantiles of the margins (what a figure draws)."""
    q = np.linspace(0.0, 1.0, min(MARGIN_POINTS, margins.size))
    return [float(v) for v in np.quantile(margins, q)]
