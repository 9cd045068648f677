"""
A large sparse problem: ODM and LDM beside LinearSVC
====================================================

The linear solvers of margindist keep sparse input sparse: ODM's Newton-CG works through
products with X, LDM's averaged SGD (``solver="asgd"``, chosen automatically for sparse X)
reads one row per step. This example builds a synthetic tf-idf-like matrix (a few tens of
thousands of documents, a Zipf-distributed vocabulary, L2-normalised rows), fits
scikit-learn's LinearSVC, ODM and LDM, and compares accuracy and training time.
"""

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC

import margindist as md

rng = np.random.default_rng(0)
n_docs, n_terms, words_per_doc = 30_000, 20_000, 40

# Term frequencies from a Zipf law; a hidden linear rule on the term weights gives the labels,
# with 5 % label noise.
p = 1.0 / np.arange(1, n_terms + 1) ** 1.1
p /= p.sum()
rows = np.repeat(np.arange(n_docs), words_per_doc)
cols = rng.choice(n_terms, size=rows.size, p=p)
X = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n_docs, n_terms))
X.sum_duplicates()
idf = np.log(n_docs / (1.0 + np.bincount(X.indices, minlength=n_terms)))
X = normalize(X @ sp.diags(idf), norm="l2").tocsr()
w_true = rng.standard_normal(n_terms) * (rng.random(n_terms) < 0.05)
score = X @ w_true
y = np.where(score > np.median(score), 1, -1)
y[rng.random(n_docs) < 0.05] *= -1
print(f"X: {X.shape[0]} x {X.shape[1]}, {X.nnz} non-zeros ({X.nnz / np.prod(X.shape):.2%})")

Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0)

# %%
# Fit and time. ODM's ``lam`` multiplies an *average* loss, so lam = m weighs each sample like
# LinearSVC's C = 1 (squared hinge); LDM's C multiplies a sum, like LinearSVC's.
m = Xtr.shape[0]
models = {
    "LinearSVC": LinearSVC(C=1.0),
    "ODM (newton)": md.ODM(lam=float(m), solver="newton"),
    "LDM (asgd)": md.LDM(C=1.0, random_state=0),
}
names, accs, times = [], [], []
for name, est in models.items():
    t0 = time.perf_counter()
    est.fit(Xtr, ytr)
    elapsed = time.perf_counter() - t0
    acc = est.score(Xte, yte)
    names.append(name)
    accs.append(acc)
    times.append(elapsed)
    print(f"{name:>13}: test accuracy {acc:.3f}, fit {elapsed:.2f} s")

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3))
ax1.barh(names, accs)
ax1.set_xlim(min(accs) - 0.05, 1.0)
ax1.set_xlabel("test accuracy")
ax2.barh(names, times)
ax2.set_xlabel("fit time (s)")
fig.tight_layout()
plt.show()
