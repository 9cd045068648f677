"""Optional PyTorch pieces of margindist (needs ``pip install margindist[torch]``).

* :class:`ISM3Loss`: cross-entropy plus the M3SVM pairwise-margin regulariser
  lam * sum_{k<l} ||w_k - w_l||^p on a network's final linear layer (Nie, Hao, Wang 2024, ISM3);
* :func:`pairwise_penalty`: that regulariser as a differentiable torch function (Gram form,
  exact gradient also at coinciding class vectors);
* :func:`m3svm_adam_torch` and :func:`resolve_device`: the Adam back end of
  ``M3SVM(solver="adam")``, on a CUDA device when there is one;
* :mod:`._kernels`: the kernel blocks of the kernel estimators' ``device`` parameter
  (:mod:`margindist.kernels` imports it only when a device is set).

Nothing else in margindist imports torch; ``import margindist`` works without it.
"""

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "margindist.torch needs PyTorch; install it with `pip install margindist[torch]` "
        "(or a CPU build: `pip install torch --index-url https://download.pytorch.org/whl/cpu`)."
    ) from exc

from ._loss import ISM3Loss
from ._penalty import pairwise_penalty, pairwise_penalty_and_grad
from ._solver import m3svm_adam_torch, resolve_device

__all__ = [
    "ISM3Loss",
    "m3svm_adam_torch",
    "pairwise_penalty",
    "pairwise_penalty_and_grad",
    "resolve_device",
]
