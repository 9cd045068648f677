"""Greedy pivoted partial Cholesky of a kernel matrix read by rows: Nystrom landmarks chosen
one at a time as the row of largest residual diagonal (the trace of the residual K - F^T F
falls fastest), for the preconditioners of KM-OMD's Newton phase and LS-SVM's conjugate
gradients."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import cache_row

__all__ = ["pivoted_cholesky"]


@njit(cache=True)
def pivoted_cholesky(cache, diag, cand, r_max, stop, F, piv):
    """Greedy pivoted partial Cholesky K ~ F^T F (F: (r_max, m), float32 or float64, filled by
    rows), pivots among the rows with ``cand`` true, columns over all rows.

    Pivot k is the candidate with the largest residual diagonal d_j = K_jj - sum_t F[t, j]^2; stops
    when that is <= ``stop`` or after ``r_max`` pivots. Returns (rank, residual diagonal of all
    rows). One kernel row per pivot; O(m rank^2)."""
    m = diag.shape[0]
    d = diag.copy()
    for k in range(r_max):
        j = -1
        for a in range(m):
            if cand[a] and (j < 0 or d[a] > d[j]):
                j = a
        if j < 0 or d[j] <= stop:
            return k, d
        dj = d[j]
        piv[k] = j
        row = cache_row(cache, j)
        f = F[k]
        if k:  # f = row - F[:k]^T F[:k, j], one BLAS product (k axpys into f: twice the time)
            f[:] = np.dot(np.ascontiguousarray(F[:k, j]), F[:k])
            for a in range(m):
                f[a] = row[a] - f[a]
        else:
            for a in range(m):
                f[a] = row[a]
        sc = 1.0 / np.sqrt(dj)
        for a in range(m):
            f[a] *= sc
            d[a] = max(d[a] - f[a] * f[a], 0.0)
        d[j] = 0.0
    return r_max, d
