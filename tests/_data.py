"""Data helpers shared by several test files (imported as ``from _data import ...``)."""

import importlib.util
from pathlib import Path

import numpy as np
from sklearn.preprocessing import MinMaxScaler

from margindist.datasets import load_dataset


def scaled(name, n=None, seed=0):
    """A data set min-max scaled, optionally a random subsample of n rows."""
    X, y = load_dataset(name)
    X = MinMaxScaler().fit_transform(X)
    if n is not None and n < X.shape[0]:
        idx = np.random.default_rng(seed).choice(X.shape[0], n, replace=False)
        X, y = X[idx], y[idx]
    return X, y


def separable(n=60, d=5, seed=0, gap=0.1):
    """Origin-symmetric linearly separable data: rows at least ``gap`` from a random hyperplane
    through the origin, and their mirror images."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    s = X @ w / np.linalg.norm(w)
    X, s = X[np.abs(s) > gap], s[np.abs(s) > gap]
    y = np.sign(s)
    return np.vstack([X, -X]), np.r_[y, -y]


def topic_text(m, vocabulary, n_classes, seed=0):
    """The benchmarks' synthetic tf-idf topic rows (``benchmarks/_synthetic.py``: one
    definition for both), the m training rows and their labels."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "_synthetic.py"
    spec = importlib.util.spec_from_file_location("_synthetic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    X, y, _, _ = module.topic_text(m, vocabulary, n_classes, seed=seed, n_test=1)
    return X, y
