"""The solvers' row-access layer (solvers._rows) against NumPy / SciPy."""

import numpy as np
import pytest
import scipy.sparse as sp
from numba import njit

from margindist.solvers._rows import (
    XhProducts,
    make_rows,
    permutation,
    rng_below,
    rng_shuffle,
    row_axpy,
    row_axpy2,
    row_dot,
    row_dot_sq,
    row_sq_norm,
    row_sq_norms,
    seed_from,
)


@njit
def _all_dots(rows, w):
    m = rows.indptr.shape[0] - 1 if rows.sparse else rows.dense.shape[0]
    out = np.empty(m)
    sq = np.empty(m)
    for i in range(m):
        out[i] = row_dot(rows, i, w)
        sq[i] = row_sq_norm(rows, i)
    return out, sq


@njit
def _all_dot_sq(rows, w):
    m = rows.indptr.shape[0] - 1 if rows.sparse else rows.dense.shape[0]
    out = np.empty((m, 2))
    for i in range(m):
        out[i, 0], out[i, 1] = row_dot_sq(rows, i, w)
    return out


@njit
def _xt_r(rows, r, out, out2):
    for i in range(r.shape[0]):
        row_axpy(rows, i, r[i], out)
        row_axpy2(rows, i, 2.0 * r[i], out2[0], -r[i], out2[1])


def _unsorted_csr(X):
    """The CSR matrix of X with the indices of every row reversed (canonical otherwise: no
    duplicates)."""
    A = sp.csr_matrix(X)
    data, indices = A.data.copy(), A.indices.copy()
    for i in range(A.shape[0]):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        data[lo:hi], indices[lo:hi] = data[lo:hi][::-1], indices[lo:hi][::-1]
    B = sp.csr_matrix((data, indices, A.indptr.copy()), shape=A.shape)
    assert not B.has_sorted_indices or A.nnz == 0
    return B


def _int64_csr(X):
    """The CSR matrix of X with int64 indices and pointers (read through unsigned casts in the
    compiled loops, as the int32 ones)."""
    A = sp.csr_matrix(X)
    A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    return A


def _data(rng, dtype):
    X = rng.normal(size=(30, 7)).astype(dtype)
    X[rng.random(X.shape) < 0.5] = 0
    X[3] = 0  # an empty row
    return X


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("form", ["dense", "csr", "csr_unsorted", "csr_int64"])
@pytest.mark.parametrize("bias", [None, 0.0, 0.7])
def test_rows_agree_with_numpy(rng, dtype, form, bias):
    X = _data(rng, dtype)
    Xin = {"dense": X, "csr": sp.csr_matrix(X), "csr_unsorted": _unsorted_csr(X), "csr_int64": _int64_csr(X)}[form]
    rows = make_rows(Xin, bias)
    assert rows.sparse == (form != "dense") and rows.n_features == 7 and rows.has_bias == (bias is not None)
    assert rows.data.dtype == dtype and rows.dense.dtype == dtype  # values read in their own type
    Xh = X.astype(np.float64) if bias is None else np.c_[X.astype(np.float64), np.full(30, bias)]
    w = rng.normal(size=Xh.shape[1])
    dots, sq = _all_dots(rows, w)
    tol = dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dots, Xh @ w, **tol)
    np.testing.assert_allclose(sq, np.sum(Xh * Xh, axis=1), **tol)
    np.testing.assert_allclose(row_sq_norms(Xin, bias), np.sum(Xh * Xh, axis=1), **tol)
    ds = _all_dot_sq(rows, w)
    np.testing.assert_allclose(ds[:, 0], X.astype(np.float64) @ w[:7], **tol)
    np.testing.assert_allclose(ds[:, 1], np.sum(X.astype(np.float64) ** 2, axis=1), **tol)
    r = rng.normal(size=30)
    out = np.zeros(Xh.shape[1])
    out2 = np.zeros((2, Xh.shape[1]))
    _xt_r(rows, r, out, out2)
    np.testing.assert_allclose(out, Xh.T @ r, **tol)
    np.testing.assert_allclose(out2[0], 2.0 * Xh.T @ r, **tol)
    np.testing.assert_allclose(out2[1], -Xh.T @ r, **tol)
    if bias is not None:  # the products of [X, B] (r with zeros: skipped rows)
        xh = XhProducts(Xin, bias)
        r[::4] = 0.0
        np.testing.assert_allclose(xh.xv(w), Xh @ w, **tol)
        np.testing.assert_allclose(xh.xtr(r), Xh.T @ r, **tol)


def test_make_rows_keeps_types_and_does_not_copy(rng):
    X = _data(rng, np.float32)
    assert make_rows(X).dense is X
    A = sp.csr_matrix(X)
    A.indices = A.indices.astype(np.int64)
    A.indptr = A.indptr.astype(np.int64)
    rows = make_rows(A, 1.0)
    assert rows.data is A.data and rows.indices.dtype == np.int64 and rows.indptr.dtype == np.int64
    assert make_rows(sp.csc_matrix(X)).sparse
    assert make_rows(X.astype(np.int32)).dense.dtype == np.float64


def test_rng_is_deterministic_and_seeded(rng):
    a, b = seed_from(3), seed_from(3)
    assert a.dtype == np.uint64 and a.shape == (1,) and a[0] != 0
    np.testing.assert_array_equal(a, b)
    assert seed_from(4)[0] != a[0]
    np.testing.assert_array_equal(seed_from(np.random.RandomState(5)), seed_from(np.random.RandomState(5)))
    p, q = permutation(a, 50), permutation(b, 50)
    np.testing.assert_array_equal(p, q)  # same seed, same stream
    np.testing.assert_array_equal(np.sort(p), np.arange(50))
    assert not np.array_equal(permutation(a, 50), p)  # the state advanced
    draws = np.array([rng_below(seed_from(7), 10)] + [0] * 0)
    assert 0 <= draws[0] < 10
    s = seed_from(0)
    counts = np.bincount([rng_below(s, 4) for _ in range(4000)], minlength=4)
    assert counts.min() > 850  # roughly uniform
    idx = np.arange(20)
    rng_shuffle(idx, 10, seed_from(1))
    np.testing.assert_array_equal(idx[10:], np.arange(10, 20))  # only the first n move
    np.testing.assert_array_equal(np.sort(idx[:10]), np.arange(10))
