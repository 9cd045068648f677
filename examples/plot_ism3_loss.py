"""
The ISM3 loss: pairwise class margins in a softmax model
========================================================

M3SVM maximises the smallest pairwise class margin 2 / ||w_k - w_l|| of a multi-class linear
model through the regulariser lam * sum_{k<l} ||w_k - w_l||^p. With ``loss="softmax"`` the data
term is the cross-entropy: this is ISM3, the form the regulariser takes inside a neural
network. This example compares, on scikit-learn's digits,

* ``M3SVM(loss="softmax")`` (ISM3 on a linear model, NumPy / SciPy only) with
  :class:`~sklearn.linear_model.LogisticRegression` (the same cross-entropy with an l2
  penalty), and
* when PyTorch is installed, a small network trained with
  :class:`margindist.torch.ISM3Loss` on its final layer. The longer study of the network case
  is ``examples/ism3_digits.py``.
"""

# %%
import importlib.util
import itertools

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import margindist as md


def pairwise_margins(W):
    """The margins 2 / ||w_k - w_l|| of all class pairs of a (K, d) weight matrix."""
    return np.array([2.0 / np.linalg.norm(W[k] - W[l])
                     for k, l in itertools.combinations(range(W.shape[0]), 2)])


X, y = load_digits(return_X_y=True)
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
scaler = StandardScaler().fit(Xtr)
Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)

ism3 = md.M3SVM(loss="softmax", lam=0.01, p=4).fit(Xtr, ytr)
logreg = LogisticRegression(C=1.0, max_iter=2000).fit(Xtr, ytr)
for name, est in [("ISM3 (M3SVM softmax)", ism3), ("LogisticRegression", logreg)]:
    pm = pairwise_margins(est.coef_)
    print(f"{name:>21}: test accuracy {est.score(Xte, yte):.3f}, smallest pairwise margin "
          f"{pm.min():.3f}, median {np.median(pm):.3f}")

# %%
# The distribution of the 45 pairwise class margins: the p = 4 regulariser lifts the smallest
# ones (a larger minimum) instead of shrinking all class vectors alike.
fig, ax = plt.subplots(figsize=(5.5, 3.5))
for name, est in [("ISM3", ism3), ("LogisticRegression", logreg)]:
    v = np.sort(pairwise_margins(est.coef_))
    ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=name)
ax.set_xlabel("pairwise class margin 2 / ||w_k - w_l||")
ax.set_ylabel("fraction of class pairs")
ax.legend()
fig.tight_layout()

# %%
# In a network (optional: needs ``pip install margindist[torch]``). ``ISM3Loss`` takes the
# logits, the targets and the final layer's weight matrix.
if importlib.util.find_spec("torch") is None:
    print("PyTorch is not installed: the network part is skipped.")
else:
    import torch

    from margindist.torch import ISM3Loss

    torch.manual_seed(0)
    Xt = torch.tensor(Xtr, dtype=torch.float32)
    yt = torch.tensor(ytr)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    criterion = ISM3Loss(p=4, lam=1e-3)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for epoch in range(30):
        opt.zero_grad()
        loss = criterion(net(Xt), yt, net[-1].weight)
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (net(torch.tensor(Xte, dtype=torch.float32)).argmax(1).numpy() == yte).mean()
        pm = pairwise_margins(net[-1].weight.numpy())
    print(f"network with ISM3Loss: test accuracy {acc:.3f}, smallest pairwise margin {pm.min():.3f}")

plt.show()
