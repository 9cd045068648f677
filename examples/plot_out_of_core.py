"""
Out-of-core learning with partial_fit
=====================================

LDM (averaged SGD) and MarginPursuit (projected SGD) learn from a stream through
``partial_fit``: each call makes one pass over the chunk it is given and continues the state of
the previous calls, so data that do not fit in memory can be read chunk by chunk. The chunks
here come from a Dask array when Dask is installed (``pip install margindist[dask]``) and from
NumPy slices otherwise; only one chunk is in memory at a time in either case. The test accuracy
is recorded after every chunk and compared with a fit on all the data at once.
"""

# %%
import importlib.util

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split

import margindist as md

X, y = make_classification(n_samples=40_000, n_features=40, n_informative=10, class_sep=0.8,
                           flip_y=0.05, random_state=0)
X = (X - X.min(0)) / (X.max(0) - X.min(0))          # features in [0, 1], as the papers scale
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=8_000, random_state=0)
chunk = 4_000


def chunks():
    """(X, y) chunks of the training data: from a Dask array when Dask is available."""
    if importlib.util.find_spec("dask") is not None:
        import dask.array as da

        dX = da.from_array(Xtr, chunks=(chunk, Xtr.shape[1]))
        dy = da.from_array(ytr, chunks=chunk)
        for bx, by in zip(dX.to_delayed().ravel(), dy.to_delayed().ravel()):
            yield np.asarray(bx.compute()), np.asarray(by.compute())
    else:
        for s in range(0, Xtr.shape[0], chunk):
            yield Xtr[s:s + chunk], ytr[s:s + chunk]


print("chunks from", "a Dask array" if importlib.util.find_spec("dask") else "NumPy slices")
classes = np.unique(ytr)
stream = {"LDM": md.LDM(C=1.0, random_state=0),
          "MarginPursuit": md.MarginPursuit(lam=1e-4, random_state=0)}
curves = {name: [] for name in stream}
for Xc, yc in chunks():
    for name, est in stream.items():
        est.partial_fit(Xc, yc, classes=classes)
        curves[name].append(est.score(Xte, yte))

batch = {"LDM": md.LDM(C=1.0, solver="asgd", random_state=0).fit(Xtr, ytr),
         "MarginPursuit": md.MarginPursuit(lam=1e-4, random_state=0).fit(Xtr, ytr)}
for name in stream:
    print(f"{name:>13}: streamed {curves[name][-1]:.3f} after {len(curves[name])} chunks, "
          f"fit on all data {batch[name].score(Xte, yte):.3f}")

# %%
fig, ax = plt.subplots(figsize=(5.5, 3.5))
seen = chunk * np.arange(1, len(curves["LDM"]) + 1)
for i, name in enumerate(stream):
    ax.plot(seen, curves[name], "o-", color=f"C{i}", label=f"{name}, partial_fit")
    ax.axhline(batch[name].score(Xte, yte), color=f"C{i}", linestyle=":",
               label=f"{name}, fit on all data")
ax.set_xlabel("training examples seen")
ax.set_ylabel("test accuracy")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
