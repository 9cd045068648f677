"""The M3SVM pairwise regulariser R(W) = sum_{k<l} ||w_k - w_l||_2^p in torch.

Same algorithm as :func:`margindist.solvers.m3svm.pairwise_penalty`: Gram form (O(K^2 d) time,
O(K^2 + K d) memory, rows of W are the class vectors), near-coinciding pairs recomputed from the
explicit difference, gradient L W with L = diag(A 1) - A, A_kl = p ||w_k - w_l||^(p-2), and the
gradient 0 at zero distance (the limit for p > 1, the minimal-norm subgradient for p <= 1).
The authors' ``torch.norm(W[:, None] - W[None], dim=2) ** p`` builds a (K, K, d) tensor (K^2 d
memory, 3x slower) and, for p < 1, has a NaN gradient on its diagonal; this function does neither.
"""

from __future__ import annotations

import torch

_CANCEL_RTOL = 1e-8
_BLOCK_FLOATS = 1 << 20


def pairwise_penalty_and_grad(W: torch.Tensor, p: float):
    """(R, dR/dW) for a (K, d) tensor W, without autograd."""
    K, d = W.shape
    sq = (W * W).sum(dim=1)
    scale = sq[:, None] + sq[None, :]
    D2 = (scale - 2.0 * (W @ W.T)).clamp_min_(0.0)
    D2.fill_diagonal_(0.0)
    iu, ju = torch.triu_indices(K, K, 1, device=W.device)
    near = (D2[iu, ju] <= _CANCEL_RTOL * scale[iu, ju]) & (scale[iu, ju] > 0)
    ni, nj = iu[near], ju[near]
    blocks = []
    if ni.numel():
        step = max(1, _BLOCK_FLOATS // max(d, 1))
        for s in range(0, ni.numel(), step):
            a, b = ni[s:s + step], nj[s:s + step]
            blk = W[a] - W[b]
            d2 = (blk * blk).sum(dim=1)
            D2[a, b] = d2
            D2[b, a] = d2
            if p != 2:
                blocks.append((a, b, blk, d2))
    pos = D2 > 0
    safe = torch.where(pos, D2, torch.ones_like(D2))
    R = 0.5 * torch.where(pos, safe.pow(0.5 * p), torch.zeros_like(D2)).sum()
    if p == 2:
        A = torch.full_like(D2, 2.0)
        A.fill_diagonal_(0.0)
    else:
        A = torch.where(pos, p * safe.pow(0.5 * (p - 2.0)), torch.zeros_like(D2))
        if ni.numel():
            A[ni, nj] = 0.0
            A[nj, ni] = 0.0
    grad = A.sum(dim=1, keepdim=True) * W - A @ W
    for a, b, blk, d2 in blocks:
        c = torch.where(d2 > 0, p * torch.where(d2 > 0, d2, torch.ones_like(d2)).pow(0.5 * (p - 2.0)),
                        torch.zeros_like(d2))[:, None] * blk
        grad.index_add_(0, a, c)
        grad.index_add_(0, b, -c)
    return R, grad


class _PairwisePenalty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, W, p):
        R, grad = pairwise_penalty_and_grad(W.detach(), p)
        ctx.save_for_backward(grad)
        return R

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        return grad_out * grad, None


def pairwise_penalty(W: torch.Tensor, p: float = 4.0) -> torch.Tensor:
    """sum_{k<l} ||w_k - w_l||_2^p over the rows of W (shape (K, d)), differentiable in W.

    For an ``nn.Linear(d, K)`` layer pass ``layer.weight`` (its rows are the class vectors).
    First-order autograd only (no double backward).
    """
    if W.dim() != 2:
        raise ValueError(f"W must be a 2-D (n_classes, n_features) tensor; got shape {tuple(W.shape)}.")
    if not p > 0:
        raise ValueError(f"p must be > 0; got {p}.")
    return _PairwisePenalty.apply(W, float(p))
