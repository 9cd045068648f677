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


def topic_text(m, vocabulary, n_classes, per_row=30, seed=0, n_test=5000):
    """tf-idf rows (L2-normalised, idf from the training part) of word counts: each document
    draws Poisson(1.2 per_row) words, three quarters from its class's topic (a Zipf background
    with 300 words of the class boosted eightfold), the rest from the background. Classes
    overlap heavily (a linear model reaches 50-75 %), as in real topic classification."""
    from sklearn.feature_extraction.text import TfidfTransformer

    rng = np.random.default_rng(seed)
    base = 1.0 / np.arange(1, vocabulary + 1) ** 1.1
    base /= base.sum()
    topics = []
    for _ in range(n_classes):
        p = base.copy()
        p[rng.choice(vocabulary, 300, replace=False)] *= 8.0
        topics.append(p / p.sum())
    n = m + n_test
    y = rng.integers(0, n_classes, size=n)
    rows, cols = [], []
    for i in range(n):
        length = rng.poisson(per_row * 1.2)
        on_topic = rng.binomial(length, 0.75)
        words = np.concatenate([rng.choice(vocabulary, on_topic, p=topics[y[i]]),
                                rng.choice(vocabulary, length - on_topic, p=base)])
        rows.append(np.full(words.size, i))
        cols.append(words)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    X = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, vocabulary))  # duplicates summed: counts
    tfidf = TfidfTransformer().fit(X[:m])
    return tfidf.transform(X[:m]).tocsr(), y[:m], tfidf.transform(X[m:]).tocsr(), y[m:]
