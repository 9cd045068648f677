"""Cross-validated estimators: ``ODMCV``, ``LDMCV``, ``MSVMAvCV``, ``KMOMDCV``, ``M3SVMCV``,
``MarginPursuitCV`` and ``LSSVMCV``.

Each searches a hyperparameter grid of its method by k-fold cross-validation, in the manner of
scikit-learn's ``LogisticRegressionCV``, and refits the best point on all the data. The search
is :func:`margindist.search.cv_search`, the same one the experiment runner uses: within a fold
it walks the grid with the method's regularisation parameter varying fastest and, where a
warm-started refit reaches the same model as a cold fit (a deterministic solver run to its
tolerance on a convex problem), refits from the previous grid point's solution.

The result is laid out as ``GridSearchCV``'s: ``cv_results_`` in ``ParameterGrid`` order (keys
sorted, the last varying fastest), ranks and the best point chosen by the same rule (the first
point of highest mean score), so a ``*CV`` picks the parameters ``GridSearchCV`` picks over the
same grid and folds.

The constructor of each class takes the search's own parameters (``param_grid``, ``cv``,
``scoring``, ``refit``, ``n_jobs``) followed by every parameter of the estimator it tunes, by
name; the signature is built from the tuned estimator's, so the two never drift apart.
"""

from __future__ import annotations

import inspect
import numbers
import time
from collections.abc import Mapping

import numpy as np
from scipy.stats import rankdata
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.metrics import check_scoring
from sklearn.model_selection import check_cv
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import combined_sample_weight
from .._validation import check_class_totals, check_labels, close_matches
from ..search import Scaled, cv_search, grid_points, point_params, resolve_grid
from .kmomd import KMOMD
from .ldm import LDM
from .lssvm import LSSVM
from .m3svm import M3SVM
from .margin_pursuit import MarginPursuit
from .msvmav import MSVMAv
from .odm import ODM

__all__ = ["KMOMDCV", "LDMCV", "LSSVMCV", "M3SVMCV", "ODMCV", "MSVMAvCV", "MarginPursuitCV"]

_SEARCH_PARAMS = ("param_grid", "cv", "scoring", "refit", "n_jobs")

_SEARCH_DOC = """\
param_grid : dict or None, default=None
    Parameter name -> list of values (or a :class:`margindist.search.Scaled` rule resolved on
    the training data, such as the papers' RBF widths). None: the method's paper grid, as the
    reproduction presets search it (:func:`margindist.experiments.presets.paper_grid`).
cv : int, cross-validation generator or iterable, default=5
    Folds as in ``GridSearchCV``: an int gives stratified k-fold (unshuffled).
scoring : str or callable, default=None
    Score maximised on the held-out folds; None is the estimator's ``score`` (accuracy).
refit : bool, default=True
    Refit the best point on the whole data; ``predict`` and the fitted model's attributes need it.
n_jobs : int, default=None
    Folds searched in parallel (each fold walks the whole grid); the refit then fits its
    sub-problems with this many jobs where the method has them.
"""

_ATTRIBUTES_DOC = """\
Attributes
----------
best_params_ : dict
    The grid point of the highest mean cross-validation score.
best_score_ : float
    Its mean score over the folds.
best_index_ : int
    Its index in ``cv_results_``.
cv_results_ : dict of arrays
    ``GridSearchCV``'s layout (``params``, ``param_<name>``, ``split<k>_test_score``,
    ``mean_test_score``, ``std_test_score``, ``rank_test_score``, fit and score times), so
    ``pandas.DataFrame(cv_results_)`` works.
best_estimator_ : estimator
    The refitted model (``refit=True``). Its fitted attributes (``coef_``, ``intercept_``,
    ``dual_coef_``, ``support_vectors_``, ``n_iter_`` ...) are also set on this object.
classes_ : ndarray of shape (n_classes,)
    Class labels.
n_features_in_ : int
    Number of features seen in fit.
n_splits_ : int
    Number of folds.
refit_time_ : float
    Seconds spent refitting the best point.
"""


class _MarginCV(ClassifierMixin, BaseEstimator):
    """Base of the ``*CV`` estimators (see the module docstring)."""

    #: the estimator class tuned
    _estimator = None
    #: method name of its paper grid (:func:`margindist.experiments.presets.paper_grid`)
    _method = None
    #: the regularisation parameter walked fastest (warm-started where exact)
    _path_parameter = None
    #: grid used when no paper preset searches the method
    _fallback_grid = None
    #: docstring parts: summary line, how the path is walked, the paper grid, an example grid
    _doc = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls._estimator is None:
            return
        params = _search_signature(cls._estimator)
        cls.__init__ = _make_init(cls.__name__, params)
        cls._parameter_constraints = {
            **cls._estimator._parameter_constraints,
            "param_grid": [Mapping, None],
            "cv": ["cv_object"],
            "scoring": [str, callable, None],
            "refit": ["boolean"],
            "n_jobs": [numbers.Integral, None],
        }
        summary, warm, source, example_grid = cls._doc
        notes = _NOTES.format(path=cls._path_parameter, warm=warm, source=source)
        cls.__doc__ = _docstring(summary, cls._estimator, notes, _example(cls.__name__, example_grid))

    @staticmethod
    def _exact_warm_start(est, X) -> bool:
        """Whether a warm-started refit of ``est`` on the rows X converges to the cold fit's model."""
        return False

    @property
    def _expected_failed_checks(self):
        """The tuned estimator's known failures of scikit-learn's checks (the search refits it)."""
        return dict(getattr(self._base(), "_expected_failed_checks", {}))

    # ------------------------------------------------------------------ set-up
    def _base(self):
        """The tuned estimator with this object's estimator parameters."""
        names = [p for p in inspect.signature(self._estimator).parameters]
        return self._estimator(**{k: getattr(self, k) for k in names if hasattr(self, k)})

    def __sklearn_tags__(self):
        tags = self._base().__sklearn_tags__()
        tags.estimator_type = "classifier"
        return tags

    def _grid(self, X, y) -> dict:
        """The grid to search (validated, Scaled entries resolved on X)."""
        grid = self.param_grid
        if grid is None:
            grid = self._paper_grid()
        grid = check_param_grid(grid, self._base())
        seed = self.random_state if isinstance(getattr(self, "random_state", None), numbers.Integral) else 0
        n_features = X.shape[1] if not self._base()._pairwise() else 0
        return resolve_grid(grid, X, n_features, int(seed), np.unique(y).size)

    def _paper_grid(self) -> dict:
        from ..experiments.presets import (
            paper_grid,  # the presets are the grids' one source
        )

        kernel = getattr(self, "kernel", "linear")
        grid = paper_grid(self._method, kernel if isinstance(kernel, str) else "callable")
        return grid if grid else dict(self._fallback_grid)

    def _walk_order(self, grid: dict) -> tuple[dict, dict]:
        """The grid in walking order (path parameter last, its values ascending) and, per
        parameter, the index of each walked value in the given grid."""
        keys = [k for k in grid if k != self._path_parameter] + [k for k in grid if k == self._path_parameter]
        walk, index = {}, {}
        for k in keys:
            order = list(range(len(grid[k])))
            if k == self._path_parameter and all(isinstance(v, numbers.Real) for v in grid[k]):
                order.sort(key=lambda i: grid[k][i])
            walk[k] = [grid[k][i] for i in order]
            index[k] = order
        return walk, index

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, sample_weight=None):
        """Search the grid by cross-validation, then refit the best point on all of X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data (a square Gram matrix for ``kernel="precomputed"``).
        y : array-like of shape (n_samples,)
            Class labels.
        sample_weight : array-like of shape (n_samples,), optional
            Per-sample weights, cut to each fold's training rows (the held-out scores are
            unweighted, as in ``GridSearchCV``).

        Returns
        -------
        self
        """
        self._validate_params()
        base = self._base()
        sparse = base.__sklearn_tags__().input_tags.sparse
        X, y = validate_data(self, X, y, accept_sparse="csr" if sparse else False,
                             dtype=[np.float64, np.float32])
        check_labels(y)
        base._check_pairwise_shape(X, fit=True)
        _check_fit_input(self, X, y, sample_weight)
        grid = self._grid(X, y)
        folds = list(check_cv(self.cv, y, classifier=True).split(X, y))
        walk, index = self._walk_order(grid)
        n_jobs = self.n_jobs if "n_jobs" in base.get_params() else None

        def build(params):
            est = clone(base).set_params(**params)
            return est.set_params(n_jobs=None) if n_jobs is not None else est

        res = cv_search(build, walk, X, y, folds, warm_start=True, exact_warm_start=self._exact_warm_start,
                        scoring=None if self.scoring is None else check_scoring(base, scoring=self.scoring), sample_weight=sample_weight,
                        pairwise=base._pairwise(), n_jobs=self.n_jobs)
        self.cv_results_ = cv_results(grid, walk, index, res)
        self.best_index_ = int(np.argmin(self.cv_results_["rank_test_score"]))
        self.best_params_ = self.cv_results_["params"][self.best_index_]
        self.best_score_ = float(self.cv_results_["mean_test_score"][self.best_index_])
        self.n_splits_ = len(folds)
        self.classes_ = np.unique(y)
        if self.refit:
            self._refit(base, X, y, sample_weight)
        return self

    def _refit(self, base, X, y, sample_weight):
        t0 = time.perf_counter()
        est = clone(base).set_params(**self.best_params_)
        self.best_estimator_ = est.fit(X, y) if sample_weight is None else est.fit(X, y, sample_weight=sample_weight)
        self.refit_time_ = time.perf_counter() - t0
        for name, value in vars(self.best_estimator_).items():
            if name.endswith("_") and not name.startswith("_") and name not in ("n_features_in_",):
                setattr(self, name, value)

    # ------------------------------------------------------------------ predict
    def _check_refit(self):
        check_is_fitted(self)
        if not self.refit:
            raise AttributeError(f"{type(self).__name__} was fitted with refit=False: no model to predict with.")
        return True

    @available_if(_check_refit)
    def decision_function(self, X):
        """Decision values of the refitted best model (see the tuned estimator).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
            Decision values.
        """
        return self.best_estimator_.decision_function(X)

    @available_if(_check_refit)
    def predict(self, X):
        """Class labels predicted by the refitted best model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,)
            Predicted labels.
        """
        return self.best_estimator_.predict(X)

    @available_if(_check_refit)
    def margins(self, X, y):
        """Normalised margins of (X, y) under the refitted best model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Samples.
        y : array-like of shape (n_samples,)
            Their labels.

        Returns
        -------
        ndarray of shape (n_samples,)
            Margins (negative for errors).
        """
        return self.best_estimator_.margins(X, y)


def _check_fit_input(cv_est, X, y, sample_weight):
    """The tuned estimator's own checks of the labels and weights, once, before any fold is fitted."""
    classes, y_index = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise ValueError(f"{type(cv_est).__name__} needs samples of at least 2 classes in the data; "
                         f"got only one class: {classes[0]!r}.")
    sw = combined_sample_weight(sample_weight, getattr(cv_est, "class_weight", None), X, y, classes)
    check_class_totals(sw, y_index, classes)


def check_param_grid(grid, estimator) -> dict:
    """A grid as a dict of non-empty value lists over ``estimator``'s parameters, every value
    valid for it; raises ``ValueError`` (or scikit-learn's ``InvalidParameterError``) naming
    the problem before anything is fitted."""
    if not isinstance(grid, Mapping):
        raise TypeError(f"param_grid must be a dict of parameter -> list of values; got {type(grid).__name__}.")
    if not grid:
        raise ValueError("param_grid is empty: give at least one parameter with at least one value.")
    known = estimator.get_params(deep=False)
    name = type(estimator).__name__
    out = {}
    for key, values in grid.items():
        if key not in known:
            hint = close_matches(key, known)
            raise ValueError(f"param_grid: {name} has no parameter {key!r}{hint}.")
        if isinstance(values, Scaled):
            out[key] = values
            continue
        if isinstance(values, str) or not hasattr(values, "__len__"):
            raise TypeError(f"param_grid[{key!r}] must be a list of values; got {values!r}.")
        if len(values) == 0:
            raise ValueError(f"param_grid[{key!r}] is empty: give at least one value.")
        for v in values:
            clone(estimator).set_params(**{key: v})._validate_params()
        out[key] = list(values)
    return out


def cv_results(grid: dict, walk: dict, index: dict, res) -> dict:
    """``GridSearchCV``'s ``cv_results_`` from a search run in walking order.

    ``grid`` is the grid as given; ``walk`` the same grid in walking order and ``index[k][i]``
    the position in ``grid[k]`` of ``walk[k][i]``.
    """
    keys = sorted(grid)
    sizes = [len(grid[k]) for k in keys]
    n = int(np.prod(sizes))
    order = np.empty(n, dtype=np.intp)  # walked point -> position in ParameterGrid order
    for p, idx in enumerate(grid_points(walk)):
        given = {k: index[k][i] for k, i in zip(walk, idx)}
        order[p] = np.ravel_multi_index([given[k] for k in keys], sizes)
    scores = np.empty_like(res.scores)
    scores[order] = res.scores
    out = {}
    for name, arr in (("fit_time", res.fit_times), ("score_time", res.score_times)):
        a = np.empty_like(arr)
        a[order] = arr
        out[f"mean_{name}"], out[f"std_{name}"] = _mean_std(a)
    params = [point_params({k: grid[k] for k in keys}, idx) for idx in grid_points({k: grid[k] for k in keys})]
    for k in keys:
        col = np.ma.MaskedArray(np.empty(n, dtype=object), mask=False)
        col[:] = [p[k] for p in params]
        out[f"param_{k}"] = col
    out["params"] = params
    for f in range(scores.shape[1]):
        out[f"split{f}_test_score"] = scores[:, f]
    mean, std = _mean_std(scores)
    out["mean_test_score"], out["std_test_score"] = mean, std
    out["rank_test_score"] = _rank(mean)
    return out


def _mean_std(a):
    """Mean and standard deviation over folds, computed as ``GridSearchCV`` does."""
    mean = np.average(a, axis=1)
    return mean, np.sqrt(np.average((a - mean[:, np.newaxis]) ** 2, axis=1))


def _rank(mean):
    """``GridSearchCV``'s ranks: 1 is best, ties share the lowest rank, failed points last."""
    if np.isnan(mean).all():
        return np.ones(mean.size, dtype=np.int32)
    filled = np.nan_to_num(mean, nan=np.nanmin(mean) - 1)
    return rankdata(-filled, method="min").astype(np.int32)


def _search_signature(estimator_cls) -> list:
    """The ``*CV`` constructor's parameters: the search's, then the estimator's by keyword."""
    own = [inspect.Parameter("param_grid", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
    own += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=d)
            for k, d in (("cv", 5), ("scoring", None), ("refit", True), ("n_jobs", None))]
    rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(estimator_cls).parameters.values() if p.name not in _SEARCH_PARAMS]
    return own + rest


def _make_init(name: str, params: list):
    """An ``__init__`` storing exactly ``params`` (scikit-learn reads the signature)."""
    signature = inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + params)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        for key, value in list(bound.arguments.items())[1:]:
            setattr(self, key, value)

    __init__.__signature__ = signature
    __init__.__qualname__ = f"{name}.__init__"
    return __init__


def _docstring(summary: str, estimator_cls, notes: str, example: str) -> str:
    """Numpydoc of a ``*CV`` class: the search's parameters, then the tuned estimator's."""
    doc = inspect.cleandoc(estimator_cls.__doc__)
    params = doc.split("Parameters\n----------\n", 1)[1].split("\n\nAttributes\n----------", 1)[0]
    kept = _drop_entries(params, _SEARCH_PARAMS)
    name = estimator_cls.__name__
    return (f"{summary}\n\n{notes}\n\nParameters\n----------\n{_SEARCH_DOC}{kept}\n\n{_ATTRIBUTES_DOC}\n"
            f"See Also\n--------\n{name} : The estimator tuned.\n"
            "sklearn.model_selection.GridSearchCV : The generic search this one matches.\n\n"
            f"References\n----------\nSee :class:`margindist.{name}`.\n\nExamples\n--------\n{example}\n")


def _drop_entries(section: str, names) -> str:
    """A numpydoc Parameters section without the entries of ``names``."""
    out, keep = [], True
    for line in section.splitlines():
        if line and not line[0].isspace():
            keep = line.split(" :", 1)[0].strip() not in names
        if keep:
            out.append(line)
    return "\n".join(out)


def _example(cls_name: str, grid: str) -> str:
    return (">>> from sklearn.datasets import load_breast_cancer\n"
            ">>> from sklearn.preprocessing import MinMaxScaler\n"
            f">>> from margindist import {cls_name}\n"
            ">>> X, y = load_breast_cancer(return_X_y=True)\n"
            ">>> X = MinMaxScaler().fit_transform(X)\n"
            f">>> clf = {cls_name}({grid}, cv=3).fit(X, y)\n"
            ">>> sorted(clf.best_params_) == sorted(clf.param_grid)\n"
            "True\n"
            ">>> bool(clf.score(X, y) > 0.9)\n"
            "True")


_NOTES = ("The search walks the grid with ``{path}`` varying fastest{warm}. With ``param_grid=None`` the "
          "grid is the paper's ({source}); it can be large (hundreds of points times the folds), so "
          "give a smaller grid on large data. Warm-started points agree with cold fits to the "
          "solver's tolerance, so at a loose ``tol`` a held-out prediction right at the boundary "
          "can differ from ``GridSearchCV``'s.")


class ODMCV(_MarginCV):
    _estimator, _method, _path_parameter = ODM, "odm", "lam"
    _doc = ("ODM with its parameters (lam, mu, theta and the kernel width) chosen by cross-validation.",
            ", each fit warm-started from the previous lam's dual or primal solution (every solver but "
            "svrg converges to the same optimum)",
            "lam, mu, theta as the MSVMAv paper searches them, and its RBF widths",
            '{"lam": [1.0, 64.0], "mu": [0.2]}')

    @staticmethod
    def _exact_warm_start(est, X) -> bool:
        return est.solver != "svrg"


class LDMCV(_MarginCV):
    _estimator, _method, _path_parameter = LDM, "ldm", "C"
    _doc = ("LDM with lambda1, lambda2, C (and the kernel width) chosen by cross-validation.",
            ", warm-started where the solver is the exact dual coordinate descent (with its "
            "smoothed-hinge Newton start on linear data); the kernel set-up "
            "(O(m^3)) is made once per kernel width and lambda1",
            "the LDM paper's lambda1, lambda2, C and its RBF widths",
            '{"C": [0.5, 1.0], "lambda1": [1e-4]}')

    @staticmethod
    def _exact_warm_start(est, X) -> bool:
        # every solver but averaged SGD (which "auto" takes on large linear data) is exact
        return est.solver != "asgd" and (est.solver != "auto" or est.kernel != "linear"
                                         or est._resolve_solver(X, est._kernel_spec(X)) != "asgd")


class MSVMAvCV(_MarginCV):
    _estimator, _method, _path_parameter = MSVMAv, "msvmav", "beta"
    _doc = ("MSVMAv with alpha, beta (and the kernel width) chosen by cross-validation.",
            " (MSVMAv's fixed-point iteration has no warm start; the kernel factorisations are "
            "shared by the grid points of a fold)",
            "the MSVMAv paper's alpha, beta in 2^-10 ... 2^10 and its RBF widths",
            '{"alpha": [1.0, 8.0], "beta": [1.0]}')


class KMOMDCV(_MarginCV):
    _estimator, _method, _path_parameter = KMOMD, "kmomd", "lam"
    _doc = ("KM-OMD with lam (and the kernel width) chosen by cross-validation.",
            ", each fit warm-started from the previous lam's solution",
            "the KM-OMD paper's lam and RBF widths, or the LDM paper's grid for the linear kernel",
            '{"lam": [0.1, 0.5]}')

    @staticmethod
    def _exact_warm_start(est, X) -> bool:
        return True


class M3SVMCV(_MarginCV):
    _estimator, _method, _path_parameter = M3SVM, "m3svm", "lam"
    _doc = ("M3SVM with lam and p chosen by cross-validation.",
            ", warm-started with the deterministic Newton / L-BFGS solvers; on wide dense data the "
            "row-space factorisation (a thin QR of X^T) is made once per fold", "the M3SVM authors' p and lam",
            '{"lam": [1e-3, 1e-2], "p": [2]}')

    @staticmethod
    def _exact_warm_start(est, X) -> bool:
        return est.solver != "adam"


class MarginPursuitCV(_MarginCV):
    _estimator, _method, _path_parameter = MarginPursuit, "margin_pursuit", "lam"
    _fallback_grid = {"lam": [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]}
    _doc = ("Margin pursuit with its ridge penalty lam chosen by cross-validation.",
            ", warm-started with the Newton solver (the default) and a tolerance: each lam sets its "
            "loss scale as a cold fit does and starts Newton from the previous lam's weights; gd is "
            "warm-started only with a fixed scale (rescale=False: its rescaling happens along the path "
            "from w = 0)",
            "the paper fixes lam, so the default grid is lam in 1e-6, 1e-5, ..., 1e-1, Pegasos' usual range",
            '{"lam": [1e-4, 1e-3]}')

    @staticmethod
    def _exact_warm_start(est, X) -> bool:
        if est.tol is None:
            return False
        return est.solver in ("newton", "auto") or (est.solver == "gd" and not est.rescale)


class LSSVMCV(_MarginCV):
    _estimator, _method, _path_parameter = LSSVM, "lssvm", "C"
    _doc = ("LS-SVM with C (and the kernel width) chosen by cross-validation.", "",
            "C in 2^-10 ... 2^10 and the MSVMAv paper's RBF widths", '{"C": [0.5, 1.0]}')
