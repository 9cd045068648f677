"""scikit-learn's common estimator checks over every public margindist estimator.

Estimators are discovered from the ``margindist.models`` package, so a new estimator module is
covered without editing this file. Each estimator is checked with its defaults and, when it
takes a ``kernel``, with each of ``"linear"``, ``"rbf"`` and ``"precomputed"`` that is not its
default. An estimator
lists the checks it is known to fail, each with its reason, in a class attribute
``_expected_failed_checks = {"check_name": "reason"}``.
"""

import importlib
import inspect
import pkgutil

from sklearn.base import BaseEstimator
from sklearn.utils.estimator_checks import parametrize_with_checks

import margindist.models


def discover_estimators():
    found = {}
    for info in pkgutil.iter_modules(margindist.models.__path__):
        module = importlib.import_module(f"margindist.models.{info.name}")
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseEstimator)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
                and not inspect.isabstract(obj)
            ):
                found[name] = obj
    return [found[k] for k in sorted(found)]


# A ``*CV`` estimator searches its method's paper grid by default (hundreds of points times the
# folds): the checks give it a two-point grid of its regularisation parameter and 2 folds.
SMALL_SEARCH = {
    "ODMCV": {"lam": [0.5, 2.0]},
    "LDMCV": {"C": [0.5, 2.0]},
    "MSVMAvCV": {"beta": [0.5, 2.0]},
    "KMOMDCV": {"lam": [0.1, 0.5]},
    "M3SVMCV": {"lam": [1e-3, 1e-2]},
    "MarginPursuitCV": {"lam": [1e-4, 1e-3]},
    "LSSVMCV": {"C": [0.5, 2.0]},
}


def _instance(cls, **params):
    if cls.__name__ in SMALL_SEARCH:
        params = {"param_grid": SMALL_SEARCH[cls.__name__], "cv": 2, **params}
    return cls(**params)


def estimator_instances():
    out = []
    for cls in discover_estimators():
        est = _instance(cls)
        out.append(est)
        params = est.get_params()
        if "kernel" in params:
            out.extend(_instance(cls, kernel=k) for k in ("linear", "rbf", "precomputed") if params["kernel"] != k)
    return out


def test_discovery_finds_estimators():
    names = {cls.__name__ for cls in discover_estimators()}
    assert {"MAMC", "LSSVM"} <= names
    assert set(SMALL_SEARCH) <= names


def _expected_failures(est):
    return dict(getattr(est, "_expected_failed_checks", {}))


@parametrize_with_checks(estimator_instances(), expected_failed_checks=_expected_failures)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
