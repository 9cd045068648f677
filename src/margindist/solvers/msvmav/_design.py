"""The design matrix Z = diag(r) [B, 1] diag(c) of the MSVMAv iteration, never copied."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._gram import float64_blocks, x_dot, xt_dot
from .._rows import make_rows, rows_axpy_at, rows_dot_at, rows_sq_norm

__all__ = ["Design"]


def _rowwise(v, like):
    """v as a column when ``like`` is 2-D (scales the rows of a matrix)."""
    return v if like.ndim == 1 else v[:, None]


class Design:
    """Rows z_i = r_i * [b_i, 1] * c without forming Z.

    ``B`` (n, p) float64 CSR matrix, or dense array of float64 or float32, ``r`` (n,) row
    scales (the labels y), ``col_scale`` (p,) optional column scales, ``intercept``: append a
    constant-1 column (only without ``col_scale``). A float32 array is never copied whole to
    float64 (the 1M x 1000 Nystroem features of a kernel model would take 8 GB): products go
    through :mod:`margindist.solvers._gram`, which converts blocks of rows, so every sum is
    taken in float64, exactly as for the float64 copy of the same values (the incremental
    inverse's round-off check needs that precision).
    """

    def __init__(self, B, r, col_scale=None, intercept=False):
        if intercept and col_scale is not None:
            raise ValueError("Design: intercept and col_scale are exclusive.")
        self.B = B
        self.r = np.asarray(r, dtype=np.float64)
        self.c = None if col_scale is None else np.asarray(col_scale, dtype=np.float64)
        self.intercept = bool(intercept)
        self.sparse = sp.issparse(B)
        # B^T once: SciPy builds (and checks) a transposed matrix object at every ``B.T @ t``,
        # which outweighed the product itself on small sub-problems (cornell's word pairs)
        self._BT = B.T if self.sparse else None
        self.n, self.p = B.shape
        self.d = self.p + self.intercept
        self._rows = None  # the row layer's view of B (:meth:`matvec_at`), made when first needed

    def matvec(self, w):
        """Z @ w (w of shape (d,) or (d, q))."""
        v = w[: self.p] if self.intercept else w
        if self.c is not None:
            v = _rowwise(self.c, v) * v
        out = x_dot(self.B, v)
        if self.intercept:
            out = out + w[self.p]
        return _rowwise(self.r, out) * out

    def _row_view(self):
        if self._rows is None:
            self._rows = make_rows(self.B, 1.0 if self.intercept else None)
        return self._rows

    def matvec_at(self, idx, w):
        """(Z @ w)[idx], read from the rows in place (one compiled pass over them)."""
        v = w if self.c is None else self.c * w
        out = np.empty(idx.size)
        rows_dot_at(self._row_view(), np.asarray(idx, dtype=np.int64), np.ascontiguousarray(v, dtype=np.float64), out)
        return self.r[idx] * out

    def rmatvec_at(self, idx, t):
        """Z[idx]^T t, read from the rows in place (one compiled pass over them)."""
        out = np.zeros(self.d)
        rows_axpy_at(self._row_view(), np.asarray(idx, dtype=np.int64), self.r[idx] * t, out)
        return out if self.c is None else self.c * out

    def rmatvec(self, t):
        """Z^T @ t (t of shape (n,) or (n, q))."""
        rt = _rowwise(self.r, t) * t
        out = np.asarray(self._BT @ rt, dtype=np.float64) if self.sparse else xt_dot(self.B, rt)
        if self.c is not None:
            out = _rowwise(self.c, out) * out
        if self.intercept:
            out = np.concatenate([out, rt.sum(axis=0)[None]])
        return out

    def rows(self, idx):
        """Z[idx] as a dense (k, d) array or, for sparse B, a CSR matrix."""
        r = self.r[idx]
        if self.sparse:
            R = self.B[idx]
            if self.intercept:
                R = sp.hstack([R, np.ones((len(idx), 1))], format="csr")
            if self.c is not None:
                R = R @ sp.diags(self.c)
            return sp.csr_matrix(R.multiply(r[:, None]))
        R = np.empty((len(idx), self.d))
        R[:, : self.p] = self.B[idx]
        if self.intercept:
            R[:, self.p] = 1.0
        if self.c is not None:
            R *= self.c
        R *= r[:, None]
        return R

    def subset(self, idx):
        """The design of rows idx (a copy of those rows of B)."""
        return Design(self.B[idx], self.r[idx], self.c, self.intercept)

    def touched(self, idx):
        """(design of rows idx on the coordinates they touch, those coordinates) for sparse B
        with few non-zeros in those rows: products with them then cost O(their nnz), not O(d).
        Otherwise (subset, None)."""
        sub = self.subset(idx)
        if not self.sparse or self.c is not None or sub.B.nnz > self.p // 4:
            return sub, None
        cols, inv = np.unique(sub.B.indices, return_inverse=True)
        B = sp.csr_matrix((sub.B.data, inv.astype(sub.B.indices.dtype), sub.B.indptr),
                          shape=(len(idx), cols.size))
        coords = np.append(cols, self.p) if self.intercept else cols
        return Design(B, sub.r, intercept=self.intercept), coords

    def work(self):
        """Multiply-adds of one product with Z (its stored entries)."""
        return self.B.nnz if self.sparse else self.n * self.p

    def sq_row_norms(self):
        """||z_i||^2 for every row (one compiled pass, no copy of B; with column scales, by blocks)."""
        sq = np.empty(self.n)
        if self.c is None:
            rows_sq_norm(self._row_view(), sq)
        else:  # the kernel path's eigenbasis: dense, no intercept
            for i, stop, Bi in float64_blocks(self.B):
                sq[i:stop] = (Bi * Bi) @ (self.c * self.c)
        return self.r * self.r * sq

    def sq_rmatvec(self, t):
        """sum_i t_i z_i * z_i (elementwise squares): the diagonal of Z^T diag(t) Z."""
        rt = self.r * self.r * t
        if self.sparse:
            B2 = sp.csr_matrix((self.B.data * self.B.data, self.B.indices, self.B.indptr),
                               shape=self.B.shape, copy=False)
            out = np.asarray(B2.T @ rt).ravel()
        elif self.B.dtype == np.float64:
            out = np.einsum("ij,ij,i->j", self.B, self.B, rt, optimize=True)
        else:
            out = np.zeros(self.p)
            for i, stop, Bi in float64_blocks(self.B):
                out += np.einsum("ij,ij,i->j", Bi, Bi, rt[i:stop], optimize=True)
        if self.c is not None:
            out = self.c * self.c * out
        if self.intercept:
            out = np.append(out, rt.sum())
        return out
