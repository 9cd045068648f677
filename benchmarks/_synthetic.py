"""Synthetic linear classification problems shared by the benchmarks.

Labels are the sign of a random linear function plus Gaussian noise of 0.3 times its spread
(about 90 % Bayes accuracy); the first ``m`` rows are the training part, the next ``n_test``
the test part.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _labels(f, rng):
    return (f + 0.3 * f.std() * rng.normal(size=f.shape[0]) > 0).astype(int)


def dense_linear(m, d, seed=0, n_test=20000):
    """Dense uniform [0, 1] features."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    X = rng.random((m + n_test, d))
    y = _labels((X - 0.5) @ w, rng)
    return X[:m], y[:m], X[m:], y[m:]


def sparse_linear(m, d, per_row, seed=0, n_test=20000):
    """CSR features, Poisson(per_row) (at least 1) uniform [0, 1] non-zeros per row."""
    rng = np.random.default_rng(seed)
    n = m + n_test
    counts = np.maximum(rng.poisson(per_row, size=n), 1)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = rng.integers(0, d, size=indptr[-1])
    X = sp.csr_matrix((rng.random(indptr[-1]), indices, indptr), shape=(n, d))
    X.sum_duplicates()
    f = X @ rng.normal(size=d)
    y = _labels(f - np.median(f), rng)
    return X[:m], y[:m], X[m:], y[m:]
