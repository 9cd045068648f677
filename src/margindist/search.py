"""Hyperparameter grids and their search by k-fold cross-validation on a training part.

A grid is an ordered mapping ``parameter -> values``. Values are a list of numbers / strings,
or a :class:`Scaled` rule whose values depend on the training data (the MSVMAv paper's RBF
width 2^k / d, the LDM paper's widths 2^k s with s the average distance between instances).
Points are searched in the grid's order with the last parameter varying fastest; ties in the
CV score go to the first point, so the search is deterministic.

Warm starts: for an estimator with a ``warm_start`` parameter the search walks the last grid
parameter (the regularisation path, ascending) with one estimator per fold, refitting from
the previous solution; a change of any other parameter starts a fresh estimator. The final
model of a split is always fitted from scratch with the chosen parameters.
"""

from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.utils._param_validation import validate_parameter_constraints

from .kernels import kernel_matrix

__all__ = [
    "Scaled",
    "SearchResult",
    "cv_search",
    "fold_data",
    "grid_points",
    "grid_to_dict",
    "mean_scores",
    "pow2",
    "reraise_interrupt",
    "resolve_grid",
]

RULES = ("per_feature", "rbf_width", "per_class")


def pow2(lo: int, hi: int, step: int = 1) -> tuple:
    """(2^lo, 2^(lo+step), ..., 2^hi) as floats."""
    return tuple(float(2.0**k) for k in range(lo, hi + 1, step))


@dataclass(frozen=True)
class Scaled:
    """Grid values computed from the training data of a split.

    ``rule="per_feature"``: value = factor / d (d the number of original features): the
    MSVMAv paper's RBF widths {2^-10/d, ..., 2^10/d}, as the ``gamma`` of
    exp(-gamma ||x - z||^2). ``rule="rbf_width"``: the Gaussian width sigma = factor * s,
    s the average Euclidean distance between training instances (on at most 1000 of them),
    turned into gamma = 1 / (2 sigma^2) (the LDM paper's {2^-2 s, ..., 2^2 s}).
    ``rule="per_class"``: value = factor * K (K the number of classes of the training part): a
    regularisation weight given on a per-class scale, such as the M3SVM authors' lam, which is
    1.6 K times smaller than the lam of the paper's Eq. 25 (see ``M3SVM``).
    """

    factors: tuple
    rule: str = "per_feature"
    label: str = ""

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"Scaled rule must be one of {RULES}; got {self.rule!r}.")

    def resolve(self, X, n_features: int, seed: int, n_classes: int | None = None) -> list:
        f = np.asarray(self.factors, dtype=np.float64)
        if self.rule == "per_feature":
            return [float(v) for v in f / n_features]
        if self.rule == "per_class":
            if n_classes is None:
                raise ValueError("a per-class grid needs the number of classes.")
            return [float(v) for v in f * n_classes]
        s = mean_distance(X, seed)
        return [float(1.0 / (2.0 * (v * s) ** 2)) for v in f]

    def to_dict(self) -> dict:
        return {"scaled": self.rule, "factors": list(self.factors)}

    def __str__(self) -> str:
        if self.label:
            return self.label
        ks = [float(np.log2(v)) for v in self.factors]
        if all(k.is_integer() for k in ks):
            if len(ks) > 4:
                step = int(ks[1] - ks[0])
                rng = f"2^{int(ks[0])}, 2^{int(ks[1])}, ..., 2^{int(ks[-1])}" if step != 1 else \
                    f"2^{int(ks[0])}, ..., 2^{int(ks[-1])}"
            else:
                rng = ", ".join(f"2^{int(k)}" for k in ks)
        else:
            rng = ", ".join(f"{v:g}" for v in self.factors)
        if self.rule == "per_feature":
            return f"{{{rng}}}/d"
        if self.rule == "per_class":
            return f"K x {{{rng}}}"
        return f"gamma=1/(2 (f s)^2), f in {{{rng}}}"


def mean_distance(X, seed: int, max_points: int = 1000) -> float:
    """Average Euclidean distance between distinct rows of X (a subsample of max_points)."""
    from sklearn.metrics import pairwise_distances

    n = X.shape[0]
    if n > max_points:
        idx = np.sort(np.random.default_rng(seed).choice(n, max_points, replace=False))
        X = X[idx]
        n = max_points
    D = pairwise_distances(X)
    s = D.sum() / max(n * (n - 1), 1)
    return float(s) if s > 0 else 1.0


def grid_to_dict(grid: dict) -> list:
    """Canonical, order-preserving form of a grid (for hashing and reports)."""
    out = []
    for k, v in grid.items():
        out.append([k, v.to_dict() if isinstance(v, Scaled) else list(v)])
    return out


def resolve_grid(grid: dict, X, n_features: int, seed: int, n_classes: int | None = None) -> dict:
    """The grid with every :class:`Scaled` entry turned into values for this training set."""
    return {k: (v.resolve(X, n_features, seed, n_classes) if isinstance(v, Scaled) else list(v))
            for k, v in grid.items()}


def grid_points(grid: dict) -> list[tuple]:
    """All index tuples of the grid, last parameter varying fastest."""
    return list(itertools.product(*[range(len(v)) for v in grid.values()]))


def point_params(grid: dict, index: tuple) -> dict:
    return {k: _plain(vals[i]) for (k, vals), i in zip(grid.items(), index)}


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


@dataclass
class SearchResult:
    """Outcome of :func:`cv_search`.

    ``scores``, ``fit_times`` and ``score_times`` have shape (n_points, n_folds) with the points
    in the grid's order (:func:`grid_points`); a score is NaN where the fit failed.
    """

    best_index: tuple
    best_params: dict
    best_score: float
    scores: np.ndarray
    n_failed: int = 0
    n_warnings: int = 0
    time: float = 0.0
    errors: list = field(default_factory=list)
    fit_times: np.ndarray | None = None
    score_times: np.ndarray | None = None


@dataclass
class _FoldOutcome:
    scores: np.ndarray
    fit_times: np.ndarray
    score_times: np.ndarray
    n_failed: int = 0
    n_warnings: int = 0
    errors: list = field(default_factory=list)


def _can_warm_start(est, key, exact, X) -> bool:
    """The estimator can refit from its last solution (a ``warm_start`` parameter), takes
    ``key`` under that name, and a warm refit on the training rows X reaches the same model as
    a cold one (``exact(est, X)``)."""
    params = est.get_params(deep=False)
    return "warm_start" in params and key in params and exact is not None and bool(exact(est, X))


def fold_data(X, y, sample_weight, train, test, pairwise: bool = False):
    """(X_train, y_train, w_train, X_test, y_test, w_test) of one fold; a precomputed Gram
    matrix (``pairwise``) is cut to K(train, train) and K(test, train)."""
    if pairwise:
        Xtr, Xte = X[np.ix_(train, train)], X[np.ix_(test, train)]
    else:
        Xtr, Xte = X[train], X[test]
    if sample_weight is None:
        return Xtr, y[train], None, Xte, y[test], None
    return Xtr, y[train], sample_weight[train], Xte, y[test], sample_weight[test]


class _Fold:
    """One fold's data and the fitting and scoring of estimators on it.

    margindist estimators validate the fold's training data once (``_fit_data``) and refit
    on it at every grid point (``_fit_validated``) while the parameters that validation
    depends on stay the same, sharing set-up such as kernel rows and factorisations between
    the points (``_fit_shared``); with the default accuracy the test rows are validated once too
    and scored from the decision values (a point whose test decision values are not finite
    fails, as its fit would). Other estimators are fitted and scored the usual way. With
    sample weights the held-out score is weighted too (where the scorer takes weights), as
    scikit-learn's ``GridSearchCV`` does.
    """

    #: Bytes of the held-out kernel block K(test rows, training rows) a fold keeps.
    block_bytes = 256 * 2**20

    def __init__(self, data, scorer):
        self.data, self.scorer = data, scorer
        self._train = self._test = self._block = None

    def fit_score(self, est, changed=None):
        """Fit and score ``est``; ``changed``: the one parameter changed since its last fit here."""
        t0 = time.perf_counter()
        fast = hasattr(est, "_fit_validated")
        if fast:
            self._fit_fast(est, changed)
        else:
            Xtr, ytr, wtr = self.data[:3]
            if wtr is None:
                est.fit(Xtr, ytr)
            else:
                est.fit(Xtr, ytr, sample_weight=wtr)
        t1 = time.perf_counter()
        if fast and self.scorer is None:
            score = self._accuracy_fast(est)
        else:
            score = self._score(est)
        return score, t1 - t0, time.perf_counter() - t1

    def _score(self, est) -> float:
        Xte, yte, wte = self.data[3:]
        if self.scorer is None:
            return float(est.score(Xte, yte, sample_weight=wte))
        if wte is not None and getattr(self.scorer, "_accept_sample_weight", lambda: False)():
            return float(self.scorer(est, Xte, yte, sample_weight=wte))
        return float(self.scorer(est, Xte, yte))

    def _fit_fast(self, est, changed):
        if changed is None:
            est._validate_params()
        else:  # the other parameters were validated at the estimator's first fit here
            validate_parameter_constraints({changed: est._parameter_constraints[changed]},
                                           {changed: getattr(est, changed)}, caller_name=type(est).__name__)
        key = est._fit_data_key()
        if self._train is None or self._train.key != key:
            self._train = est._fit_data(*self.data[:3])
            self._train.shared = {}  # grid points on this fold share their set-up
        est._fit_validated(self._train, check=self.scorer is not None)

    def _accuracy_fast(self, est) -> float:
        key = est._fit_data_key()
        if self._test is None or self._test[0] != key:
            self._test = (key, est._validate_X(self.data[3], reset=False))
        K = self._kernel_block(est)
        if K is None:
            D = est._decision_validated(self._test[1])
        else:
            D = est._decision(est._raw_decision_from_block(K))
        if not np.all(np.isfinite(D)):
            raise FloatingPointError(f"{type(est).__name__} gives non-finite decision values.")
        return float(np.average(est._labels(D) == self.data[4], weights=self.data[5]))

    def _kernel_block(self, est):
        """K(test rows, training rows) of ``est``'s kernel when its model is a kernel expansion
        over the fold's training rows: made once per kernel (the grid points of one kernel
        share it) when it fits in :attr:`block_bytes` and the expansion covers at least a
        quarter of the rows (a Nyström model's few landmarks are cheaper to evaluate directly);
        else None."""
        spec = getattr(est, "_kernel_fit_", None)
        if spec is None or est._pairwise():
            return None
        if self._block is not None and self._block[0] == spec:
            return self._block[1]
        Xte, m = self._test[1], self.data[0].shape[0]
        if 8 * Xte.shape[0] * m > self.block_bytes or 4 * est.support_.size < m:
            return None
        self._block = (spec, kernel_matrix(spec, Xte, self._train.X))
        return self._block[1]


def reraise_interrupt(exc: BaseException) -> None:
    """Raise KeyboardInterrupt if ``exc`` comes from one.

    A Ctrl-C (or SIGTERM, which the command line turns into one) that arrives while compiled
    code is being called is raised by the interpreter as a SystemError "returned a result with
    an exception set", caused by the KeyboardInterrupt. A handler of ``Exception`` that records
    failures and goes on (a grid point, a task, a warm-up) would swallow it, and the run would
    neither stop nor know that one of its results lost a grid point."""
    seen = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        seen = seen.__cause__ or seen.__context__


def _walk_fold(build, grid, data, warm_start, exact_warm_start, scorer) -> _FoldOutcome:
    """Every grid point on one fold, in grid order, warm-starting along the last parameter.

    Along the last parameter one estimator is refitted with that parameter changed: from its
    last solution where a warm start is exact, else cold (only margindist estimators, whose
    fit starts from nothing of the last one unless ``warm_start``); other points are built
    anew, as ``GridSearchCV`` does."""
    points, keys = grid_points(grid), list(grid)
    fold = _Fold(data, scorer)
    out = _FoldOutcome(*(np.full(len(points), np.nan) for _ in range(3)))
    est, prev, reuse = None, None, False
    for p, idx in enumerate(points):
        params = point_params(grid, idx)
        step = reuse and prev is not None and prev[:-1] == idx[:-1]
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if step:  # a constructor parameter, validated by the fit (cheaper than set_params)
                    setattr(est, keys[-1], params[keys[-1]])
                else:
                    est = build(params)
                    warm = warm_start and bool(keys) and _can_warm_start(est, keys[-1], exact_warm_start, data[0])
                    if warm:
                        est.set_params(warm_start=True)
                    reuse = bool(keys) and (warm or hasattr(est, "_fit_validated"))
                out.scores[p], out.fit_times[p], out.score_times[p] = fold.fit_score(est, keys[-1] if step else None)
            out.n_warnings += sum(1 for w in caught if not issubclass(w.category, DeprecationWarning))
            prev = idx
        except Exception as exc:  # a diverging solver at one grid point must not end the search
            reraise_interrupt(exc)
            out.n_failed += 1
            if len(out.errors) < 3:
                out.errors.append(f"{params}: {type(exc).__name__}: {exc}")
            est, prev, reuse = None, None, False
    return out


def mean_scores(scores: np.ndarray) -> np.ndarray:
    """Mean over folds per grid point; -inf where any fold failed."""
    with np.errstate(all="ignore"):
        return np.where(np.isnan(scores).any(axis=1), -np.inf,
                        np.nanmean(np.where(np.isnan(scores), 0, scores), axis=1))


def cv_search(build, grid: dict, X, y, folds, *, warm_start=True, exact_warm_start=None, scoring=None,
              sample_weight=None, pairwise=False, n_jobs=None) -> SearchResult:
    """Choose the grid point with the best mean score over ``folds``.

    Parameters
    ----------
    build : callable(params: dict) -> unfitted estimator
    grid : dict parameter -> list of values (already resolved)
    X, y : the training part
    folds : list of (train_idx, val_idx)
    warm_start : bool
        Walk the last parameter with warm starts where that is exact.
    exact_warm_start : callable(est, X) -> bool, optional
        Whether a warm-started refit of ``est`` on a fold's training rows X converges to the
        cold fit's model (the estimator's ``_exact_warm_start``). Without it, no warm starts:
        for SGD-type or fixed-budget solvers a warm-started grid point is a different model from the cold
        refit that is finally evaluated, which would bias the choice.
    scoring : callable(est, X, y) -> float, optional
        A scikit-learn scorer; accuracy by default.
    sample_weight : array of shape (n_samples,), optional
        Passed, cut to each fold's training rows, to every fit.
    pairwise : bool
        X is a precomputed Gram matrix (cut in rows and columns).
    n_jobs : int, optional
        Folds run in parallel (joblib); each walks the whole grid.

    The best point is the first in grid order whose mean score is within 1e-12 of the best
    (scores are fold means of exact ratios for accuracy), so the search is deterministic.
    """
    from joblib import Parallel, delayed

    t0 = time.perf_counter()
    scorer = scoring
    sw = None if sample_weight is None else np.asarray(sample_weight)
    datas = (fold_data(X, y, sw, tr, va, pairwise) for tr, va in folds)
    if n_jobs in (None, 1) or len(folds) == 1:
        outs = [_walk_fold(build, grid, d, warm_start, exact_warm_start, scorer) for d in datas]
    else:
        outs = Parallel(n_jobs=n_jobs)(delayed(_walk_fold)(build, grid, d, warm_start, exact_warm_start, scorer)
                                       for d in datas)
    scores = np.column_stack([o.scores for o in outs])
    errors = [e for o in outs for e in o.errors][:3]
    mean = mean_scores(scores)
    if not np.isfinite(mean).any():
        raise RuntimeError("every grid point failed in cross-validation; first errors: " + "; ".join(errors))
    points = grid_points(grid)
    best = int(np.flatnonzero(mean >= mean.max() - 1e-12)[0])
    return SearchResult(
        best_index=tuple(int(i) for i in points[best]),
        best_params=point_params(grid, points[best]),
        best_score=float(mean[best]),
        scores=scores,
        n_failed=sum(o.n_failed for o in outs),
        n_warnings=sum(o.n_warnings for o in outs),
        time=time.perf_counter() - t0,
        errors=errors,
        fit_times=np.column_stack([o.fit_times for o in outs]),
        score_times=np.column_stack([o.score_times for o in outs]),
    )
