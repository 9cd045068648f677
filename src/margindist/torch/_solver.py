"""Adam back end of ``M3SVM(solver="adam")`` in torch: the same objective, gradient and iteration as
:func:`margindist.solvers.m3svm.m3svm_adam`, with the data on a CUDA device when there is one.

The gradient is analytic (as in the NumPy solver), not autograd: two products X W^T and G^T X per
step (CSR X as a torch sparse CSR tensor, with its transpose kept for the second product), the
Gram-form regulariser of :mod:`._penalty`. Inputs and results are NumPy arrays; nothing of torch
stays in a fitted estimator.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

from ..solvers.m3svm import M3SVMResult, _theta0, adam_minimize
from ._penalty import pairwise_penalty_and_grad


def resolve_device(device="auto") -> torch.device:
    """"auto": the current CUDA device when torch sees one, else the CPU. "cuda" without a CUDA
    device falls back to the CPU with a warning (so code written for a GPU still runs)."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        warnings.warn("device='cuda' was requested but torch sees no CUDA device; running on the CPU.",
                      UserWarning, stacklevel=3)
        return torch.device("cpu")
    return dev


def _csr_tensor(A, dtype, device):
    A = sp.csr_matrix(A)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(
            torch.from_numpy(A.indptr.astype(np.int64)).to(device),
            torch.from_numpy(A.indices.astype(np.int64)).to(device),
            torch.from_numpy(np.asarray(A.data)).to(device=device, dtype=dtype),
            size=A.shape, check_invariants=False,
        )


class _TorchOps:
    @staticmethod
    def sqrt(a):
        return torch.sqrt(a)

    @staticmethod
    def absmax(a):
        return float(a.abs().max()) if a.numel() else 0.0

    @staticmethod
    def copy(a):
        return a.clone()

    @staticmethod
    def zeros_like(a):
        return torch.zeros_like(a)


def _smooth_hinge(T, delta):
    """(g(T), g'(T)) of the smoothed hinge, elementwise on a tensor: the formulas of
    :func:`margindist.losses.smooth_hinge_scalar` (the one definition; compiled NumPy code cannot
    take tensors on a GPU, so they are restated here as tensor expressions, and
    tests/test_torch.py checks that the two agree)."""
    r = torch.hypot(T, torch.as_tensor(delta, dtype=T.dtype, device=T.device))
    neg = T < 0
    half_d2 = 0.5 * delta * delta
    g = torch.where(neg, half_d2 / (r - T), 0.5 * (T + r))
    gd = torch.where(neg, half_d2 / (r * (r - T)), 0.5 * (1.0 + T / r))
    return g, gd


class _Problem:
    """Tensors of one M3SVM fit and the objective F / sum(s) with its gradient."""

    def __init__(self, X, y_index, sample_weight, K, lam, p, delta, eps, loss, fit_intercept, device):
        self.dtype = torch.float32 if X.dtype == np.float32 else torch.float64
        self.device = device
        self.sparse = sp.issparse(X)
        self.X_np = X
        if self.sparse:
            self.X = _csr_tensor(X, self.dtype, device)
            self.XT = _csr_tensor(X.T.tocsr(), self.dtype, device)
        else:
            self.X = torch.as_tensor(np.ascontiguousarray(X), dtype=self.dtype, device=device)
            self.XT = None
        self.y = torch.as_tensor(np.asarray(y_index, dtype=np.int64), device=device)
        self.s = torch.as_tensor(np.asarray(sample_weight, dtype=np.float64), dtype=self.dtype,
                                 device=device)
        self.scale = float(np.sum(sample_weight))
        self.K, self.d = K, X.shape[1]
        self.lam, self.p, self.delta, self.eps = lam, p, delta, eps
        self.loss, self.fit_intercept = loss, fit_intercept

    def _batch(self, rows):
        if rows is None:
            return self.X, self.XT, self.y, self.s
        if self.sparse:
            Xb = self.X_np[rows]
            XB = _csr_tensor(Xb, self.dtype, self.device)
            XBT = _csr_tensor(Xb.T.tocsr(), self.dtype, self.device)
        else:
            XB, XBT = self.X[torch.as_tensor(rows, device=self.device)], None
        idx = torch.as_tensor(rows, device=self.device)
        return XB, XBT, self.y[idx], self.s[idx]

    def fun_grad(self, theta, rows=None):
        K, d = self.K, self.d
        W = theta[: K * d].view(K, d)
        b = theta[K * d:] if self.fit_intercept else None
        X, XT, y, s = self._batch(rows)
        S = X @ W.T
        if b is not None:
            S = S + b
        ar = torch.arange(S.shape[0], device=self.device)
        if self.loss == "softmax":
            logp = torch.log_softmax(S, dim=1)
            data = -(s * logp[ar, y]).sum()
            G = torch.exp(logp)
            G[ar, y] -= 1.0
            G *= s[:, None]
        else:
            T = 1.0 - S[ar, y][:, None] + S
            gv, G = _smooth_hinge(T, self.delta)
            gv[ar, y] = 0.0
            G[ar, y] = 0.0
            data = (s * gv.sum(dim=1)).sum()
            G *= s[:, None]
            G[ar, y] = -G.sum(dim=1)
        gW = (XT @ G).T if XT is not None else G.T @ X
        sb = self.scale if rows is None else float(s.sum())
        f_data = data / sb
        gW = gW / sb
        reg = self.eps * (W * W).sum()
        gW_reg = 2.0 * self.eps * W
        if self.lam != 0:
            R, gR = pairwise_penalty_and_grad(W, self.p)
            reg = reg + self.lam * R
            gW_reg = gW_reg + self.lam * gR
        parts = [(gW + gW_reg / self.scale).reshape(-1)]
        if b is not None:
            reg = reg + self.eps * (b * b).sum()
            parts.append(G.sum(dim=0) / sb + 2.0 * self.eps * b / self.scale)
        f = f_data + reg / self.scale
        return float(f), torch.cat(parts)


@torch.no_grad()
def m3svm_adam_torch(X, y_index, sample_weight, n_classes, *, lam, p, delta, eps, loss, fit_intercept,
                     learning_rate=0.01, max_iter=500, tol=1e-6, lr_schedule="adaptive",
                     batch_size=None, random_state=None, coef_init=None, intercept_init=None,
                     device="auto", log=None):
    """Adam on the M3SVM objective in torch. Returns an
    :class:`~margindist.solvers.m3svm.M3SVMResult` of NumPy arrays exactly as
    :func:`margindist.solvers.m3svm.m3svm_adam`."""
    dev = resolve_device(device)
    prob = _Problem(X, y_index, sample_weight, n_classes, lam, p, delta, eps, loss, fit_intercept, dev)
    theta0 = torch.as_tensor(_theta0(n_classes, X.shape[1], fit_intercept, coef_init, intercept_init),
                             dtype=prob.dtype, device=dev)
    res = adam_minimize(prob.fun_grad, theta0, n_samples=X.shape[0], learning_rate=learning_rate,
                        max_iter=max_iter, tol=tol, lr_schedule=lr_schedule, batch_size=batch_size,
                        random_state=random_state, ops=_TorchOps, log=log)
    theta = res.x.detach().to("cpu", torch.float64).numpy()
    if not np.all(np.isfinite(theta)):
        raise FloatingPointError("M3SVM (adam) produced non-finite weights: the optimisation "
                                 "diverged. Lower learning_rate or standardise the features.")
    K, d = n_classes, X.shape[1]
    W = theta[: K * d].reshape(K, d).copy()
    b = theta[K * d:].copy() if fit_intercept else np.zeros(K)
    if log is not None:
        log.info("M3SVM Adam (torch, %s): %d epochs, F=%.10g", dev, res.n_iter, res.fun * prob.scale)
    return M3SVMResult(coef=W, intercept=b, n_iter=res.n_iter, objective=res.fun * prob.scale,
                       converged=res.converged, history=res.history)
