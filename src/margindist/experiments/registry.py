"""The method registry: short names -> estimators.

margindist's own estimators are registered with their classes. An entry may instead name its
class by ``"module:Class"`` (``MethodInfo(target=...)``, e.g. a method from another package):
it is imported when first used, and a module that does not exist is reported as *missing*
instead of breaking the experiment system. Where an estimator's own default is data-dependent
(``margindist._defaults``), :meth:`MethodInfo.build` passes the paper's value
(``PAPER_DEFAULTS``) unless the grid or the fixed settings set it, so that the reproduced tables
do not depend on those rules. The scikit-learn baselines are scikit-learn's own classes (never
re-implemented):

========================  ==========================================================
``svm``                   ``LinearSVC`` (linear) / ``SVC(kernel="rbf")``
``svr``                   ``LinearSVR`` / ``SVR`` fitted on +-1 targets, predict by sign
                          (the MSVMAv paper's "SVR"; :class:`SVRClassifier`)
``lr``                    ``LogisticRegression`` (multinomial for several classes)
``crammer_singer``        ``LinearSVC(multi_class="crammer_singer")``
``ovr`` / ``ovo``         ``OneVsRestClassifier`` / ``OneVsOneClassifier`` around
                          ``LinearSVC`` (linear) or ``SVC`` (rbf); ``C``, ``gamma`` go to
                          the inner estimator
``pegasos``               :class:`PegasosClassifier`: ``SGDClassifier(loss="hinge")`` with
                          steps exactly 1 / (lam t), bias as a regularised constant feature
========================  ==========================================================

:func:`estimator_margins` gives normalised margins y f(x) / ||w|| for any fitted model where
they are defined: ``est.margins`` for margindist estimators, ||coef_|| for linear
scikit-learn models and the RKHS norm of the dual expansion for binary ``SVC`` / ``SVR``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import metrics
from .._defaults import PAPER_DEFAULTS
from .._validation import close_matches
from ..models.cv import KMOMDCV, LDMCV, M3SVMCV, ODMCV, MarginPursuitCV
from ..models.fmm import FMM
from ..models.kmomd import KMOMD
from ..models.ldm import LDM
from ..models.lssvm import LSSVM
from ..models.m3svm import M3SVM
from ..models.mamc import MAMC
from ..models.margin_pursuit import MarginPursuit
from ..models.msvmav import MSVMAv
from ..models.odm import ODM

__all__ = [
    "MethodInfo",
    "SVRClassifier",
    "UnknownMethodError",
    "did_you_mean",
    "estimator_margins",
    "get_method",
    "list_methods",
    "method_status",
]


class UnknownMethodError(KeyError):
    """A method name that is not in the registry."""

    def __str__(self):
        return str(self.args[0]) if self.args else "unknown method"


class UnsupportedError(ValueError):
    """A method cannot run in the requested configuration (e.g. no RBF kernel)."""


def _import(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class MethodInfo:
    """One registry entry.

    ``cls`` is the estimator class of a margindist method, ``target`` the ``"module:Class"``
    of one imported when first used; scikit-learn entries have a
    ``builder(kernel, params, random_state)``.
    """

    name: str
    description: str
    target: str | None = None
    cls: type | None = None
    family: str = "margindist"
    kernels: tuple | None = None  # None: any kernel the class takes, or linear only
    aliases: dict = field(default_factory=dict)
    builder: object = None
    #: est -> bool: a warm-started refit (``warm_start=True``, one parameter changed) converges
    #: to the same model as a cold fit, up to the solver's tolerance, so a CV search may walk a
    #: grid with warm starts. None: never warm-start (path-dependent or fixed-budget solvers:
    #: SGD, ASGD, a fixed number of iterations).
    exact_warm_start: object = None

    # ---------------------------------------------------------------- availability
    def status(self) -> tuple[bool, str]:
        """(available, reason). A missing margindist module is not an error: it is reported."""
        if self.builder is not None:
            return True, "scikit-learn"
        if self.cls is not None:
            return True, f"{self.cls.__module__}:{self.cls.__name__}"
        module = self.target.partition(":")[0]
        try:
            _import(self.target)
        except ModuleNotFoundError as exc:
            if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
                return False, f"missing: module {module} does not exist yet"
            return False, f"broken: importing {module} failed ({exc})"
        except AttributeError:
            return False, f"missing: {self.target} not found"
        except Exception as exc:  # noqa: BLE001 - report, never crash the registry
            return False, f"broken: importing {module} failed ({type(exc).__name__}: {exc})"
        return True, self.target

    @property
    def available(self) -> bool:
        return self.status()[0]

    # ---------------------------------------------------------------- construction
    def param_names(self, kernel: str = "linear") -> set:
        """Parameter names accepted in grids (the estimator's own names plus aliases)."""
        if self.builder is not None:
            est = self.builder(kernel, {}, None)
            names = set(est.get_params(deep=False))
            if "estimator" in names:
                names |= {k.split("__", 1)[1] for k in est.get_params(deep=True) if k.startswith("estimator__")}
            return names | set(self.aliases)
        return set(self.estimator_class()().get_params(deep=False)) | set(self.aliases)

    def estimator_class(self) -> type:
        """The margindist estimator class (``cls``, or ``target`` imported)."""
        return self.cls if self.cls is not None else _import(self.target)

    def supports_kernel(self, kernel: str) -> bool:
        if self.kernels is not None:
            return kernel in self.kernels
        if kernel == "linear":
            return True
        return "kernel" in self.param_names()

    def build(self, kernel: str = "linear", params: dict | None = None, random_state=None):
        """An unfitted estimator with ``params`` (grid values and fixed settings)."""
        params = {self.aliases.get(k, k): v for k, v in (params or {}).items()}
        if not self.supports_kernel(kernel):
            raise UnsupportedError(f"method {self.name!r} has no {kernel!r} kernel.")
        if self.builder is not None:
            return self.builder(kernel, params, random_state)
        cls = self.estimator_class()
        valid = set(cls().get_params(deep=False))
        unknown = sorted(set(params) - valid)
        if unknown:
            raise UnsupportedError(
                f"{cls.__name__} has no parameter(s) {unknown}; valid: {sorted(valid)}."
            )
        kw = {**PAPER_DEFAULTS.get(self.name, {}), **params}
        if "kernel" in valid:
            kw.setdefault("kernel", kernel)
        if "random_state" in valid and random_state is not None:
            kw.setdefault("random_state", random_state)
        return cls(**kw)


# ---------------------------------------------------------------------- scikit-learn baselines
class SVRClassifier(ClassifierMixin, BaseEstimator):
    """Support vector regression on +-1 targets used as a binary classifier (predict by sign).

    This is the "SVR" baseline of the MSVMAv paper: ``LinearSVR`` (``kernel="linear"``) or
    ``SVR`` (any other kernel) fitted on y in {-1, +1}; the decision value is the regression
    output. Two classes only.

    Parameters
    ----------
    C, epsilon : float
        As in scikit-learn's ``LinearSVR`` / ``SVR`` (epsilon default 0, the tube of a
        classifier's targets).
    kernel : str, default="linear"
    gamma : "scale", "auto" or float
    max_iter : int
        ``LinearSVR`` iterations (``SVR``: unlimited).
    random_state : int, optional
    """

    def __init__(self, C=1.0, epsilon=0.0, kernel="linear", gamma="scale", max_iter=5000, random_state=None):
        self.C = C
        self.epsilon = epsilon
        self.kernel = kernel
        self.gamma = gamma
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, X, y, sample_weight=None):
        from sklearn.svm import SVR, LinearSVR

        X, y = validate_data(self, X, y, accept_sparse="csr")
        self.classes_ = np.unique(y)
        if self.classes_.size != 2:
            raise ValueError(f"SVRClassifier is binary; got {self.classes_.size} classes.")
        t = np.where(y == self.classes_[1], 1.0, -1.0)
        if self.kernel == "linear":
            self.regressor_ = LinearSVR(C=self.C, epsilon=self.epsilon, max_iter=self.max_iter,
                                        random_state=self.random_state, dual="auto")
        else:
            self.regressor_ = SVR(C=self.C, epsilon=self.epsilon, kernel=self.kernel, gamma=self.gamma)
        self.regressor_.fit(X, t, sample_weight=sample_weight)
        return self

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", reset=False)
        return self.regressor_.predict(X)

    def predict(self, X):
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    def margins(self, X, y):
        """Normalised margins y f(x) / ||w|| (RKHS norm for kernels)."""
        f = self.decision_function(X)
        y_pm = np.where(np.asarray(y) == self.classes_[1], 1.0, -1.0)
        return y_pm * f / float(metrics.estimator_weight_norm(self.regressor_)[0])


class PegasosClassifier(ClassifierMixin, BaseEstimator):
    """Pegasos (Shalev-Shwartz et al.): SGD on the hinge loss with steps exactly 1/(lam t).

    scikit-learn's ``SGDClassifier(loss="hinge", alpha=lam, learning_rate="invscaling",
    eta0=1/lam, power_t=1)`` on the features plus a constant feature 1 (no separate intercept):
    the bias is regularised like the other weights, as in margin pursuit's projected SGD, which
    makes the two directly comparable at the same lam (scikit-learn's unpenalised intercept with
    steps 1/(lam t) is unstable on small samples). No projection step. ``coef_`` and
    ``intercept_`` split the weight of the constant feature off.
    """

    def __init__(self, lam=1e-3, max_iter=20, tol=None, random_state=None):
        self.lam = lam
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    @staticmethod
    def _augment(X):
        ones = np.ones((X.shape[0], 1), dtype=X.dtype)
        return sp.hstack([X, ones], format="csr") if sp.issparse(X) else np.hstack([X, ones])

    def fit(self, X, y, sample_weight=None):
        from sklearn.linear_model import SGDClassifier

        X, y = validate_data(self, X, y, accept_sparse="csr")
        self.sgd_ = SGDClassifier(loss="hinge", alpha=self.lam, learning_rate="invscaling", eta0=1.0 / self.lam,
                                  power_t=1.0, fit_intercept=False, max_iter=self.max_iter, tol=self.tol,
                                  random_state=self.random_state)
        self.sgd_.fit(self._augment(X), y, sample_weight=sample_weight)
        self.classes_ = self.sgd_.classes_
        self.coef_ = self.sgd_.coef_[:, :-1]
        self.intercept_ = self.sgd_.coef_[:, -1].copy()
        self.n_iter_ = self.sgd_.n_iter_
        return self

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", reset=False)
        D = np.asarray(X @ self.coef_.T) + self.intercept_
        return D[:, 0] if self.classes_.size == 2 else D

    def predict(self, X):
        D = self.decision_function(X)
        return self.classes_[(D > 0).astype(int)] if D.ndim == 1 else self.classes_[D.argmax(axis=1)]


def estimator_margins(est, X, y):
    """Normalised margins of a fitted model, or (None, reason) where they are not defined.

    Returns
    -------
    (margins or None, note)
    """
    if hasattr(est, "margins"):
        try:
            return np.asarray(est.margins(X, y), dtype=np.float64), ""
        except Exception as exc:  # noqa: BLE001
            return None, f"margins failed: {type(exc).__name__}: {exc}"
    classes = getattr(est, "classes_", None)
    if classes is None or len(classes) != 2:
        return None, "margins are defined here for binary models only"
    try:
        return metrics.estimator_margins(est, X, y), ""
    except TypeError:
        return None, f"no weight norm for {type(est).__name__}"
    except ValueError as exc:
        return None, str(exc)


def _svm(kernel, params, rs):
    from sklearn.svm import SVC, LinearSVC

    if kernel == "linear":
        kw = {"dual": "auto", "max_iter": 5000, "random_state": rs}
        kw.update(params)
        return LinearSVC(**kw)
    kw = {"kernel": kernel, "random_state": rs}
    kw.update(params)
    return SVC(**kw)


def _svr(kernel, params, rs):
    kw = {"kernel": kernel, "random_state": rs}
    kw.update(params)
    return SVRClassifier(**kw)


def _lr(kernel, params, rs):
    from sklearn.linear_model import LogisticRegression

    kw = {"max_iter": 2000, "random_state": rs}
    kw.update(params)
    return LogisticRegression(**kw)


def _crammer(kernel, params, rs):
    from sklearn.svm import LinearSVC

    kw = {"multi_class": "crammer_singer", "max_iter": 5000, "random_state": rs}
    kw.update(params)
    return LinearSVC(**kw)


def _wrapped(wrapper):
    def build(kernel, params, rs):
        import sklearn.multiclass as mc

        outer = {k: v for k, v in params.items() if k in ("n_jobs",)}
        inner = {k.removeprefix("estimator__"): v for k, v in params.items() if k not in outer}
        return getattr(mc, wrapper)(_svm(kernel, inner, rs), **outer)

    return build


def _pegasos(kernel, params, rs):
    kw = {"lam": 1e-3, "max_iter": 20, "tol": None, "random_state": rs}
    kw.update(params)
    return PegasosClassifier(**kw)


_REGISTRY: dict[str, MethodInfo] = {}


def _register(info: MethodInfo):
    _REGISTRY[info.name] = info


# a warm-started refit reaches the cold fit's model: the rule of the *CV estimators, one source
_EXACT_WARM_START = {"odm": ODMCV._exact_warm_start, "ldm": LDMCV._exact_warm_start,
                     "m3svm": M3SVMCV._exact_warm_start, "kmomd": KMOMDCV._exact_warm_start,
                     "margin_pursuit": MarginPursuitCV._exact_warm_start}

for _name, _cls, _desc in [
    ("msvmav", MSVMAv, "MSVMAv: average margin up, semi-variance down (Qian et al. 2022)"),
    ("odm", ODM, "Optimal margin Distribution Machine (Zhang & Zhou 2019)"),
    ("ldm", LDM, "Large margin Distribution Machine (Zhang & Zhou 2014)"),
    ("m3svm", M3SVM, "multi-class SVM maximising the minimum margin (Nie et al. 2024)"),
    ("margin_pursuit", MarginPursuit, "margin pursuit (Holland 2019)"),
    ("kmomd", KMOMD, "KM-OMD, kernel optimisation of the margin distribution (Aiolli et al. 2008)"),
    ("mamc", MAMC, "maximal average margin classifier (Pelckmans et al. 2007)"),
    ("lssvm", LSSVM, "least-squares SVM (Suykens et al. 2002)"),
    ("fmm", FMM, "fast margin maximisation (Ji et al. 2021)"),
]:
    _register(MethodInfo(_name, _desc, cls=_cls, exact_warm_start=_EXACT_WARM_START.get(_name)))

_register(MethodInfo("svm", "scikit-learn LinearSVC / SVC", family="scikit-learn", builder=_svm,
                     kernels=("linear", "rbf", "poly", "sigmoid")))
_register(MethodInfo("svr", "scikit-learn LinearSVR / SVR on +-1 targets, predict by sign",
                     family="scikit-learn", builder=_svr, kernels=("linear", "rbf", "poly", "sigmoid")))
_register(MethodInfo("lr", "scikit-learn LogisticRegression (multinomial)", family="scikit-learn",
                     builder=_lr, kernels=("linear",)))
_register(MethodInfo("crammer_singer", "scikit-learn LinearSVC(multi_class='crammer_singer')",
                     family="scikit-learn", builder=_crammer, kernels=("linear",)))
_register(MethodInfo("ovr", "scikit-learn OneVsRestClassifier(LinearSVC / SVC)", family="scikit-learn",
                     builder=_wrapped("OneVsRestClassifier"), kernels=("linear", "rbf", "poly", "sigmoid")))
_register(MethodInfo("ovo", "scikit-learn OneVsOneClassifier(LinearSVC / SVC)", family="scikit-learn",
                     builder=_wrapped("OneVsOneClassifier"), kernels=("linear", "rbf", "poly", "sigmoid")))
_register(MethodInfo("pegasos", "Pegasos: scikit-learn SGDClassifier(hinge), steps 1/(lam t), regularised bias",
                     family="scikit-learn", builder=_pegasos, kernels=("linear",)))


def list_methods() -> list[str]:
    """All registry names (available or not)."""
    return sorted(_REGISTRY)


def did_you_mean(word, choices) -> str:
    """`` (did you mean 'x'?)`` for the choices closest to ``word`` (case-insensitive), else ``""``."""
    close = close_matches(word, choices, n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def get_method(name: str) -> MethodInfo:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMethodError(
            f"unknown method {name!r}{did_you_mean(name, list_methods())}; valid methods: "
            f"{', '.join(list_methods())}"
        ) from None


def method_status() -> list[dict]:
    """Name, family, availability and where it comes from, for every method."""
    out = []
    for name in list_methods():
        info = _REGISTRY[name]
        ok, why = info.status()
        out.append({"name": name, "family": info.family, "available": ok, "status": why,
                    "description": info.description})
    return out
