"""ISM3: softmax cross-entropy plus the M3SVM pairwise-margin regulariser (Nie, Hao, Wang 2024)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._penalty import pairwise_penalty


class ISM3Loss(torch.nn.Module):
    """Cross-entropy + lam * sum_{k<l} ||w_k - w_l||_2^p on the final layer's weight.

    ``loss(logits, targets, weight)``: ``logits`` (n, K) are the outputs of the final linear
    layer, ``targets`` (n,) the class indices, ``weight`` that layer's (K, d) weight matrix
    (``model.fc.weight``; its rows w_k are the class vectors). The regulariser pushes the class
    vectors apart in the p-norm-sum sense that approximates maximising the minimum pairwise margin
    2 / ||w_k - w_l|| (paper Sec. "ISM3"); p = 2 on a zero-mean weight is plain weight decay.

    Parameters
    ----------
    p : float, default=4
        Exponent p of the regulariser (paper searches 1..8).
    lam : float, default=1e-3
        The paper's lambda. With ``reduction="mean"`` the cross-entropy is averaged over the
        batch, so this lam equals the paper's lam (whose data term is a sum over n samples)
        divided by the number of training samples. The authors' code (mean cross-entropy divided
        by K, ordered pairs, divided by the number n_all of all samples, test ones included)
        corresponds to lam = 2 K lam_code / n_all here.
    reduction : {"mean", "sum"}, default="mean"
        Reduction of the cross-entropy (the regulariser is added once).
    label_smoothing : float, default=0.0
        Passed to :func:`torch.nn.functional.cross_entropy`.

    Attributes
    ----------
    p : float
        The exponent p.
    lam : float
        The regularisation weight.
    reduction : str
        The reduction of the cross-entropy.
    label_smoothing : float
        The label smoothing of the cross-entropy.

    See Also
    --------
    margindist.M3SVM : The linear model with this regulariser (``loss="softmax"`` is ISM3).
    pairwise_penalty : The regulariser alone, as a differentiable function.

    References
    ----------
    .. [1] F. Nie, Z. Hao and R. Wang, "Multi-class support vector machine with maximizing
       minimum margin", Proceedings of the AAAI Conference on Artificial Intelligence, 38,
       2024.

    Examples
    --------
    >>> import torch
    >>> from margindist.torch import ISM3Loss
    >>> _ = torch.manual_seed(0)
    >>> fc = torch.nn.Linear(5, 3)
    >>> x, t = torch.randn(8, 5), torch.randint(0, 3, (8,))
    >>> loss = ISM3Loss(p=4, lam=1e-3)(fc(x), t, fc.weight)
    >>> loss.backward()
    >>> fc.weight.grad.shape
    torch.Size([3, 5])
    """

    def __init__(self, p: float = 4.0, lam: float = 1e-3, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__()
        if not p > 0:
            raise ValueError(f"p must be > 0; got {p}.")
        if not lam >= 0:
            raise ValueError(f"lam must be >= 0; got {lam}.")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum'; got {reduction!r}.")
        self.p = float(p)
        self.lam = float(lam)
        self.reduction = reduction
        self.label_smoothing = float(label_smoothing)

    def forward(self, logits: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the logits plus the pairwise regulariser of the final layer.

        Parameters
        ----------
        logits : torch.Tensor of shape (n, n_classes)
            Outputs of the final linear layer.
        targets : torch.Tensor of shape (n,)
            Class indices.
        weight : torch.Tensor of shape (n_classes, n_features)
            The final layer's weight matrix (its rows are the class vectors).

        Returns
        -------
        torch.Tensor
            The scalar loss.
        """
        if weight.dim() != 2 or weight.shape[0] != logits.shape[-1]:
            raise ValueError(
                f"weight must be the final layer's (n_classes, n_features) matrix with "
                f"n_classes = logits.shape[-1] = {logits.shape[-1]}; got shape {tuple(weight.shape)}."
            )
        ce = F.cross_entropy(logits, targets, reduction=self.reduction,
                             label_smoothing=self.label_smoothing)
        if self.lam == 0:
            return ce
        return ce + self.lam * pairwise_penalty(weight, self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}, lam={self.lam}, reduction={self.reduction!r}"
