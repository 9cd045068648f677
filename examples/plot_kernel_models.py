"""
Kernel models: RBF ODM and KM-OMD beside SVC
============================================

ODM and KMOMD take scikit-learn's kernels (``kernel="rbf"`` with the same ``gamma="scale"``).
On the two-dimensional ``banana`` data the decision boundaries of RBF ODM, KMOMD and
scikit-learn's :class:`~sklearn.svm.SVC` are drawn side by side, with their test accuracy and
number of support vectors. KMOMD's ``lam`` moves between the hard-margin SVM (0) and the class
centroids (1); lam = 1 / (1 + C) matches the 2-norm soft-margin SVM with penalty C.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC

import margindist as md

X, y = md.load_dataset("banana")
X = MinMaxScaler().fit_transform(X)
Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=600, test_size=1000, random_state=0,
                                      stratify=y)

models = {
    "SVC (C=10)": SVC(kernel="rbf", C=10.0),
    "ODM (lam=100)": md.ODM(kernel="rbf", lam=100.0),
    "KMOMD (lam=0.1)": md.KMOMD(kernel="rbf", lam=0.1),
}
for name, est in models.items():
    est.fit(Xtr, ytr)
    print(f"{name:>16}: test accuracy {est.score(Xte, yte):.3f}, "
          f"{len(est.support_)} support vectors")

# %%
# Decision functions on a grid; the black line is the decision boundary.
xx, yy = np.meshgrid(np.linspace(0, 1, 80), np.linspace(0, 1, 80))
grid = np.c_[xx.ravel(), yy.ravel()]
fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), sharey=True)
for ax, (name, est) in zip(axes, models.items()):
    z = est.decision_function(grid).reshape(xx.shape)
    ax.contourf(xx, yy, z, levels=20, cmap="RdBu", alpha=0.6)
    ax.contour(xx, yy, z, levels=[0], colors="k")
    ax.scatter(Xtr[:, 0], Xtr[:, 1], c=ytr, s=4, cmap="RdBu", edgecolors="none")
    ax.set_title(f"{name}\naccuracy {est.score(Xte, yte):.3f}")
fig.tight_layout()
plt.show()
