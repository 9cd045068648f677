"""Kernel blocks through PyTorch, on a CUDA device when one is asked for.

The kernel estimators' ``device`` parameter puts the device into their
:class:`~margindist.kernels.KernelSpec`; :mod:`margindist.kernels` then hands its Gram blocks,
kernel-times-coefficient products (decision values, the Nyström feature map, products with
the Gram matrix) and row-cache fills to :func:`kernel_products`. The formulas are those of the
NumPy path (scikit-learn's definitions; the squared distance of the RBF kernel clipped at 0), in
float64, so both give the same numbers to float64 rounding (a row cache that stores float32
rounds the device's values, where NumPy computes dense RBF rows in float32: within about 1e-7,
:mod:`margindist._rbf32`). The result is always a NumPy array:
only the blocks travel to the device and back, one at a time, so no more than ``max_bytes`` of
kernel values is held on either side.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

from ..solvers._rows import row_sq_norms
from ._solver import resolve_device

__all__ = ["kernel_products"]


def _dense_block(A, dev):
    """Rows of A (dense or CSR) as a dense float64 tensor on ``dev``."""
    if sp.issparse(A):
        A = A.toarray()
    return torch.as_tensor(np.ascontiguousarray(A, dtype=np.float64), device=dev)


class _Columns:
    """The column rows Z on the device: dense, or CSR (a product with it is then
    ``(Z @ X_b^T)^T``, never a dense copy of Z), with their squared norms for the RBF kernel."""

    def __init__(self, Z, dev):
        if sp.issparse(Z):
            Z = sp.csr_matrix(Z, dtype=np.float64)
            with warnings.catch_warnings():  # "sparse CSR tensor support is in beta state"
                warnings.simplefilter("ignore", UserWarning)
                self.Z = torch.sparse_csr_tensor(
                    torch.as_tensor(Z.indptr.astype(np.int64), device=dev),
                    torch.as_tensor(Z.indices.astype(np.int64), device=dev),
                    torch.as_tensor(Z.data, device=dev), size=Z.shape, dtype=torch.float64,
                    check_invariants=False)  # scipy's canonical CSR: valid by construction
            self.sparse = True
        else:
            self.Z = _dense_block(Z, dev)
            self.sparse = False
        self.sq = torch.as_tensor(row_sq_norms(Z), dtype=torch.float64, device=dev)

    def dots(self, Xb):
        """<x_a, z_b> for the dense row block Xb (a tensor on the device)."""
        return (self.Z @ Xb.T).T if self.sparse else Xb @ self.Z.T


def _transform(spec, B, x_sq, z_sq):
    """Dot products B into kernel values, in place where torch allows it."""
    if spec.kind == "rbf":
        B.mul_(-2.0).add_(x_sq[:, None]).add_(z_sq[None, :]).clamp_(min=0.0)
        return B.mul_(-spec.gamma).exp_()
    if spec.kind == "poly":
        return B.mul_(spec.gamma).add_(spec.coef0).pow_(spec.degree)
    if spec.kind == "sigmoid":
        return B.mul_(spec.gamma).add_(spec.coef0).tanh_()
    return B  # linear


def kernel_products(spec, X, Z, coef=None, *, max_bytes: int) -> np.ndarray:
    """K(X, Z) (``coef`` None, shape (n, m)) or K(X, Z) @ coef (coef of shape (m,) or (m, k))
    for a built-in kernel, computed on ``spec.device`` in row blocks of X of at most
    ``max_bytes`` of kernel values (and of dense rows of X). Dense or CSR X and Z."""
    dev = resolve_device(spec.device)  # a model fitted on a GPU, unpickled where there is none: the CPU
    n, m = X.shape[0], Z.shape[0]
    cols = _Columns(Z, dev)
    C = None if coef is None else torch.as_tensor(np.asarray(coef, dtype=np.float64), device=dev)
    out = np.empty((n, m) if C is None else (n,) + tuple(C.shape[1:]), dtype=np.float64)
    step = int(max(1, min(n, max_bytes // max(1, 8 * max(m, X.shape[1])))))
    x_sq_all = row_sq_norms(X) if spec.kind == "rbf" else None
    for a in range(0, n, step):
        Xb = _dense_block(X[a : a + step], dev)
        B = cols.dots(Xb)
        if spec.kind == "rbf":
            x_sq = torch.as_tensor(x_sq_all[a : a + step], dtype=torch.float64, device=dev)
            B = _transform(spec, B, x_sq, cols.sq)
        else:
            B = _transform(spec, B, None, None)
        out[a : a + step] = (B if C is None else B @ C).cpu().numpy()
    return out
