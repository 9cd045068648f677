"""
Tuning a margin-distribution model with GridSearchCV
====================================================

Every margindist estimator is a scikit-learn classifier, so it goes into a
:class:`~sklearn.pipeline.Pipeline` and a :class:`~sklearn.model_selection.GridSearchCV`
unchanged. Here ODM's loss weight ``lam`` and band half-width ``theta`` are tuned by 5-fold
cross-validation on the bundled ``heart`` data. Note the direction of ``lam`` in ODM: it
weights the loss, so *larger* values fit the training data harder (see the hyperparameter
page of the documentation).
"""

# %%
import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

import margindist as md

X, y = md.load_dataset("heart")
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)

pipe = make_pipeline(MinMaxScaler(), md.ODM())
lams = 2.0 ** np.arange(-4, 7, 2)
thetas = [0.0, 0.2, 0.4]
search = GridSearchCV(
    pipe,
    {"odm__lam": lams, "odm__theta": thetas},
    cv=StratifiedKFold(5, shuffle=True, random_state=0),
)
search.fit(Xtr, ytr)
print("best parameters:", search.best_params_)
print(f"cross-validated accuracy {search.best_score_:.3f}, test accuracy {search.score(Xte, yte):.3f}")

# %%
# The cross-validated accuracy over the grid.
scores = search.cv_results_["mean_test_score"].reshape(len(lams), len(thetas))
fig, ax = plt.subplots(figsize=(5.5, 3.5))
for j, theta in enumerate(thetas):
    ax.semilogx(lams, scores[:, j], "o-", base=2, label=f"theta = {theta}")
ax.set_xlabel("lam (ODM loss weight)")
ax.set_ylabel("5-fold CV accuracy")
ax.legend()
fig.tight_layout()
plt.show()
