"""Margins and statistics of the margin distribution.

The margin of a binary classifier f(x) = <w, phi(x)> + b on a labelled example is
y f(x) / ||w|| (``||w||`` the Euclidean norm for linear models, the RKHS norm
sqrt(a^T K a) for kernel expansions; the intercept is not part of the norm). Every
margindist estimator computes these for you with ``est.margins(X, y)``;
:func:`estimator_margins` computes them for any fitted scikit-learn classifier with a
``decision_function`` (linear models, SVC / NuSVC with any kernel, pipelines ending in one),
and the other functions here work on any array of margins.
"""

from __future__ import annotations

import copy
from numbers import Real

import numpy as np
import scipy.sparse as sp

__all__ = [
    "estimator_margins",
    "estimator_weight_norm",
    "label_index",
    "margin_stats",
    "msvmav_bound_term",
    "multiclass_margins",
    "normalized_margins",
    "pairwise_margins",
    "semivariance",
]


def _as_margins(margins) -> np.ndarray:
    m = np.asarray(margins, dtype=np.float64).ravel()
    if m.size == 0:
        raise ValueError("margins is empty: need at least one margin.")
    if not np.all(np.isfinite(m)):
        raise ValueError("margins contain NaN or infinity.")
    return m


def _is_estimator(obj) -> bool:
    """True for a (fitted or not) estimator object, False for array-likes of values."""
    if isinstance(obj, (np.ndarray, list, tuple, Real)) or sp.issparse(obj):
        return False
    return any(hasattr(obj, name) for name in ("fit", "predict", "decision_function"))


def _optional_positional(args, value, default, signature: str, n_required: int, name: str):
    """The one optional argument ``name`` of an array-form call, given by position (``args``)
    or by keyword (``value``); ``default`` when neither."""
    if len(args) > 1:
        raise TypeError(f"{signature} takes at most {n_required + 1} positional arguments; "
                        f"got {n_required + len(args)}.")
    if args:
        if value is not None:
            raise TypeError(f"{signature.split('(')[0]} got {name} both by position and by keyword.")
        value = args[0]
    return default if value is None else value


def normalized_margins(decision_values, y, *args, norm=None, pos_label=None) -> np.ndarray:
    """Binary margins y_i f(x_i) / ||w|| of decision values, or the margins of an estimator.

    Two forms:

    * ``normalized_margins(decision_values, y, norm=1.0, *, pos_label=None)``: the binary
      margins of decision values already computed (``norm`` may be passed by position);
    * ``normalized_margins(estimator, X, y, *, norm=None)``: the normalised margins of a fitted
      classifier on (X, y), binary or multi-class, exactly :func:`estimator_margins`.

    Parameters
    ----------
    decision_values : array-like of shape (n,), or a fitted estimator
        f(x_i); or a fitted classifier / Pipeline (second form).
    y : array-like of shape (n,)
        Labels. Either {-1, +1} or two distinct labels, ``pos_label`` (default: the larger of
        the two, scikit-learn's convention) mapped to +1. In the estimator form: the data X.
    norm : float, optional
        ||w|| (positive); default 1.0 (raw functional margins) for decision values. In the
        estimator form the default None takes the norm from the fitted model and a value
        overrides it (see :func:`estimator_margins`).
    pos_label : label, optional
        The label mapped to +1 (decision-value form only).

    Returns
    -------
    ndarray of shape (n,)
        The margins; negative margins are errors.

    Examples
    --------
    >>> import numpy as np
    >>> normalized_margins(np.array([2.0, -1.0]), np.array(["b", "a"]), norm=2.0)
    array([1. , 0.5])
    """
    if _is_estimator(decision_values):
        if len(args) != 1:
            raise TypeError(
                "normalized_margins(estimator, X, y, *, norm=None): pass the estimator, the data X "
                f"and the labels y; got {2 + len(args)} positional arguments."
            )
        if pos_label is not None:
            raise TypeError(
                "pos_label is only for decision values; an estimator's positive class is classes_[1]."
            )
        return estimator_margins(decision_values, y, args[0], norm=norm)
    norm = _optional_positional(args, norm, 1.0, "normalized_margins(decision_values, y, norm=1.0)", 2, "norm")
    f = np.asarray(decision_values, dtype=np.float64)
    if f.ndim == 2 and f.shape[1] > 1:
        raise ValueError(
            f"normalized_margins takes binary decision values of shape (n,); got shape {f.shape}. "
            "For multi-class scores pass the fitted estimator: normalized_margins(estimator, X, y)."
        )
    f = f.ravel()
    y = np.asarray(y).ravel()
    if f.shape != y.shape:
        raise ValueError(f"decision_values and y differ in length: {f.shape[0]} vs {y.shape[0]}.")
    try:
        norm_arr = np.asarray(norm, dtype=np.float64)
    except (TypeError, ValueError):
        norm_arr = np.array([np.nan, np.nan])
    if norm_arr.size != 1 or not norm_arr.item() > 0 or not np.isfinite(norm_arr.item()):
        raise ValueError(f"norm must be a positive finite number; got {norm!r}.")
    norm = norm_arr.item()
    labels = np.unique(y)
    if labels.size > 2:
        raise ValueError(f"normalized_margins is binary; y has {labels.size} classes.")
    if pos_label is None:
        pos_label = labels[-1]
    y_pm = np.where(y == pos_label, 1.0, -1.0)
    return y_pm * f / norm


# ---------------------------------------------------------------------------------------
# margins of any fitted classifier
# ---------------------------------------------------------------------------------------


def _estimator_name(estimator) -> str:
    """A readable name: the class name, for a Pipeline ``Pipeline(StandardScaler, LinearSVC)``."""
    steps = getattr(estimator, "steps", None)
    if isinstance(steps, list) and steps and hasattr(estimator, "named_steps"):
        inner = ", ".join(
            type(step).__name__ if step not in (None, "passthrough") else "passthrough" for _, step in steps
        )
        return f"{type(estimator).__name__}({inner})"
    return type(estimator).__name__


def _split_pipeline(estimator, X):
    """(final estimator, X transformed by all the steps before it); unchanged for non-pipelines.

    A fitted search (``GridSearchCV`` ...) stands for its ``best_estimator_``.
    """
    while True:
        if hasattr(estimator, "best_estimator_") and hasattr(estimator, "cv_results_"):
            estimator = estimator.best_estimator_
        elif isinstance(getattr(estimator, "steps", None), list) and hasattr(estimator, "named_steps"):
            if len(estimator.steps) > 1 and X is not None:
                X = estimator[:-1].transform(X)
            estimator = estimator.steps[-1][1]
            if estimator is None or (isinstance(estimator, str) and estimator == "passthrough"):
                raise ValueError("The last step of the Pipeline is 'passthrough': it has no classifier.")
        else:
            return estimator, X


def _is_libsvm(estimator) -> bool:
    """SVC / NuSVC-like: a dual expansion over support vectors in LIBSVM's one-vs-one layout."""
    return all(
        hasattr(estimator, a) for a in ("dual_coef_", "support_vectors_", "n_support_", "decision_function_shape")
    )


def _libsvm_pair_coef(estimator) -> np.ndarray:
    """Dual coefficients of every one-vs-one sub-problem over all support vectors.

    Shape (n_pairs, n_SV); pair p = (i, j), i < j, in LIBSVM's order. From LIBSVM's layout of
    ``dual_coef_`` (n_classes - 1, n_SV): the coefficient of a support vector of class i in
    the pair (i, j) is in row j - 1, that of a support vector of class j in row i (the same
    bookkeeping as scikit-learn's ``coef_`` of a linear SVC).
    """
    dual = np.asarray(estimator.dual_coef_.toarray() if sp.issparse(estimator.dual_coef_) else estimator.dual_coef_,
                      dtype=np.float64)
    n_support = np.asarray(estimator.n_support_)
    K = n_support.size
    if K <= 2 or dual.shape[0] == 1:  # binary, or a regressor (SVR) used as a score
        return dual.reshape(1, -1)
    locs = np.concatenate([[0], np.cumsum(n_support)])
    rows = []
    for i in range(K):
        for j in range(i + 1, K):
            c = np.zeros(dual.shape[1])
            c[locs[i] : locs[i + 1]] = dual[j - 1, locs[i] : locs[i + 1]]
            c[locs[j] : locs[j + 1]] = dual[i, locs[j] : locs[j + 1]]
            rows.append(c)
    return np.vstack(rows)


def _libsvm_norms(estimator) -> np.ndarray:
    """RKHS norms sqrt(a_p^T K a_p) of the sub-problems of a fitted SVC / NuSVC."""
    from sklearn.metrics.pairwise import pairwise_kernels

    kernel = estimator.kernel
    name = type(estimator).__name__
    if kernel == "precomputed":
        raise ValueError(
            f"Cannot compute the weight norm of {name}(kernel='precomputed'): the Gram matrix of its "
            "support vectors is not stored. Pass the RKHS norm explicitly with norm=..."
        )
    coef = _libsvm_pair_coef(estimator)
    Z = estimator.support_vectors_
    if callable(kernel):
        G = pairwise_kernels(Z, metric=kernel)
    else:
        G = pairwise_kernels(
            Z,
            metric=kernel,
            filter_params=True,
            gamma=getattr(estimator, "_gamma", None),
            degree=getattr(estimator, "degree", 3),
            coef0=getattr(estimator, "coef0", 0.0),
        )
    G = np.asarray(G, dtype=np.float64)
    norm_sq = np.einsum("pi,ij,pj->p", coef, G, coef)
    if np.any(norm_sq <= 0):
        raise ValueError(
            f"The squared RKHS norm a^T K a of {name}(kernel={kernel!r}) is not positive "
            f"({norm_sq.min():.3g}): the kernel is not positive semi-definite on the support vectors "
            "(e.g. the sigmoid kernel), so there is no weight norm. Pass one explicitly with norm=..."
        )
    return np.sqrt(norm_sq)


def estimator_weight_norm(estimator) -> np.ndarray:
    """The weight norms ||w|| by which a fitted classifier's decision values are divided.

    Parameters
    ----------
    estimator : fitted classifier or Pipeline
        For a Pipeline, the final step is used.

    Returns
    -------
    ndarray of shape (n_scores,)
        One norm per column of scores: 1 for a binary model; for a multi-class linear model one
        per class (the row norms of ``coef_``); for a multi-class SVC / NuSVC one per
        one-vs-one sub-problem, in LIBSVM's pair order (0, 1), (0, 2), ..., (1, 2), ...

    Raises
    ------
    TypeError
        When the estimator has neither ``coef_`` nor a support-vector expansion (a tree
        ensemble, k-nearest neighbours ...): the error names the estimator.
    ValueError
        For ``kernel="precomputed"`` (the Gram matrix of the support vectors is not stored).

    Notes
    -----
    Linear models (``coef_``): the Euclidean norm of each row of ``coef_``. SVC / NuSVC: the
    RKHS norm sqrt(a^T K a) of the dual expansion, with K the SVC's own kernel (``kernel``,
    the fitted ``gamma`` -- also for ``gamma="scale"`` or ``"auto"`` --, ``degree``,
    ``coef0``) on its support vectors. margindist estimators: their ``weight_norm_``. The
    intercept is never part of the norm.
    """
    est, _ = _split_pipeline(estimator, None)
    name = type(est).__name__
    if hasattr(est, "weight_norm_"):
        return np.atleast_1d(np.asarray(est.weight_norm_, dtype=np.float64))
    if hasattr(est, "dual_coef_") and hasattr(est, "support_vectors_"):  # SVC, NuSVC, SVR ...
        return _libsvm_norms(est)
    if hasattr(est, "coef_"):
        W = est.coef_
        if sp.issparse(W):
            sq = np.asarray(W.multiply(W).sum(axis=1), dtype=np.float64).ravel()
        else:
            W = np.asarray(W, dtype=np.float64)
            sq = np.sum(np.atleast_2d(W) ** 2, axis=1)
        return np.sqrt(sq)
    raise TypeError(
        f"Cannot compute the weight norm of {name}: it has neither coef_ (a linear model) nor a "
        "support-vector expansion (SVC, NuSVC). Normalised margins y f(x) / ||w|| need a norm; "
        f"pass one explicitly with norm=... (norm=1.0 gives the raw decision values of {name})."
    )


def label_index(est, y, n) -> np.ndarray:
    """Indices of y in ``est.classes_``, with clear errors for a length mismatch (n rows of X)
    or labels not seen in fit."""
    classes = getattr(est, "classes_", None)
    if classes is None:
        raise TypeError(f"{type(est).__name__} has no classes_: margins need a fitted classifier.")
    y = np.asarray(y).ravel()
    if y.shape[0] != n:
        raise ValueError(f"X and y differ in length: {n} vs {y.shape[0]}.")
    unknown = ~np.isin(y, classes)
    if unknown.any():
        raise ValueError(
            f"y contains labels not seen in fit by {type(est).__name__}: {np.unique(y[unknown])[:5]}."
        )
    return np.searchsorted(classes, y)


def _check_norm(norm, n_scores, name) -> np.ndarray:
    norm = np.atleast_1d(np.asarray(norm, dtype=np.float64))
    if norm.ndim != 1 or norm.size not in (1, n_scores):
        raise ValueError(
            f"norm must be a number or an array of {n_scores} norms (one per column of scores of "
            f"{name}); got shape {norm.shape}."
        )
    if not np.all(np.isfinite(norm)) or not np.all(norm > 0):
        raise ValueError(f"norm must be positive and finite; got {norm}.")
    return np.broadcast_to(norm, (n_scores,))


def estimator_margins(estimator, X, y, *, norm=None) -> np.ndarray:
    """Normalised margins of a fitted classifier on the labelled data (X, y).

    Works for margindist estimators (their own :meth:`margins`), scikit-learn linear
    classifiers (``LinearSVC``, ``LogisticRegression``, ``SGDClassifier``, ``RidgeClassifier``
    ...), ``SVC`` / ``NuSVC`` with any kernel, and a ``Pipeline`` whose final step is one of
    these (X is transformed through all the steps but the last); a fitted ``GridSearchCV`` /
    ``RandomizedSearchCV`` stands for its ``best_estimator_``.

    Parameters
    ----------
    estimator : fitted classifier or Pipeline
        Must have ``decision_function`` and ``classes_``.
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        The data, training or test -- the caller chooses: training margins describe what the
        learner optimised, test margins how it generalises.
    y : array-like of shape (n_samples,)
        The true labels (labels seen in fit).
    norm : float or array-like of shape (n_scores,), optional
        Overrides the weight norm the model would give (see :func:`estimator_weight_norm`),
        e.g. for a model without one (``norm=1.0``: raw functional margins). One number for
        all, or one per column of scores (1 for binary; n_classes for one score per class;
        n_classes (n_classes - 1) / 2 for a multi-class SVC, one per one-vs-one pair).

    Returns
    -------
    ndarray of shape (n_samples,)
        The margins; negative margins are errors.

    Raises
    ------
    TypeError
        The estimator has no ``decision_function``, or no weight norm can be had and ``norm``
        is not given (the message names the estimator).

    Notes
    -----
    The conventions are those of :meth:`margindist.MSVMAv.margins` (every margindist
    estimator):

    * binary: y f(x) / ||w|| with y = +1 for ``classes_[1]``;
    * one score per class (multi-class linear models, one-vs-rest or multinomial): each
      class's score divided by the norm of its own row of ``coef_``, then the normalised
      score of the true class minus the best other one (the normalised argmax need not be the
      predicted class, so a correctly classified sample can have a negative margin, notably
      for multinomial models with very different row norms);
    * multi-class SVC / NuSVC (one-vs-one): the smallest normalised margin of the pairwise
      classifiers that involve the true class.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.svm import LinearSVC
    >>> X, y = load_iris(return_X_y=True)
    >>> m = estimator_margins(LinearSVC().fit(X, y), X, y)
    >>> m.shape
    (150,)
    """
    est, Xt = _split_pipeline(estimator, X)
    name = type(est).__name__
    if norm is None and callable(getattr(est, "margins", None)) and hasattr(est, "classes_"):
        return np.asarray(est.margins(Xt, y), dtype=np.float64)  # a margindist estimator
    if not callable(getattr(est, "decision_function", None)):
        raise TypeError(
            f"{name} has no decision_function: margins y f(x) / ||w|| need a real-valued score f. "
            "Use a classifier with decision_function (a linear model, SVC, or a margindist estimator)."
        )
    if norm is None:
        norms = estimator_weight_norm(est)
        if np.any(norms == 0):
            raise ValueError(f"The weight vector of {name} is zero: its margins are undefined.")
    if _is_libsvm(est) and np.asarray(est.n_support_).size > 2:
        ovo = copy.copy(est)
        ovo.decision_function_shape = "ovo"
        D = np.asarray(ovo.decision_function(Xt), dtype=np.float64)
    else:
        D = np.asarray(est.decision_function(Xt), dtype=np.float64)
    y_index = label_index(est, y, D.shape[0])
    n_scores = 1 if D.ndim == 1 else D.shape[1]
    norms = _check_norm(norms if norm is None else norm, n_scores, name)
    K = est.classes_.size
    if D.ndim == 1 or n_scores == 1:
        return np.where(y_index == 1, 1.0, -1.0) * D.ravel() / norms[0]
    D = D / norms
    if _is_libsvm(est):  # one-vs-one: pair (i, j), i < j, positive means class i
        return pairwise_margins(D, [(j, i) for i in range(K) for j in range(i + 1, K)], y_index)
    if n_scores != K:
        raise ValueError(
            f"{name}.decision_function gives {n_scores} scores per sample for {K} classes; "
            "expected one score per class."
        )
    if getattr(est, "problems_", None) is not None and isinstance(est.problems_, list) and est.problems_[0][0] is not None:
        raise ValueError(
            f"norm= cannot override the norms of a one-vs-one {name}: its decision_function gives votes. "
            "Use est.margins(X, y) or refit with multi_class='ovr'."
        )
    return multiclass_margins(D, y_index)


def multiclass_margins(scores, y_index) -> np.ndarray:
    """Multi-class margins: score of the true class minus the best other score.

    Parameters
    ----------
    scores : array of shape (n, K)
        Normalised per-class scores.
    y_index : int array of shape (n,)
        Column of the true class.
    """
    scores = np.asarray(scores, dtype=np.float64)
    y_index = np.asarray(y_index, dtype=np.intp)
    rows = np.arange(scores.shape[0])
    true = scores[rows, y_index]
    others = scores.copy()
    others[rows, y_index] = -np.inf
    return true - others.max(axis=1)


def pairwise_margins(scores, pairs, y_index) -> np.ndarray:
    """Multi-class margins of pairwise (one-vs-one) classifiers: for each example the smallest
    signed score among the pairs that involve its class.

    Parameters
    ----------
    scores : array of shape (n, P)
        Normalised score of pair p; positive means its positive class.
    pairs : sequence of P (negative class index, positive class index)
    y_index : int array of shape (n,)
        Index of the true class.
    """
    out = np.full(scores.shape[0], np.inf)
    for p, (neg, pos) in enumerate(pairs):
        signed = np.where(y_index == pos, scores[:, p], -scores[:, p])
        involved = (y_index == neg) | (y_index == pos)
        out = np.where(involved, np.minimum(out, signed), out)
    return out


def semivariance(margins, *, sample_weight=None) -> float:
    """Semi-variance below the mean: (1/n) sum_i (theta - m_i)_+^2 with theta the mean margin.

    This is SV(h) of Qian et al. (IJCAI 2022), the mean squared shortfall of the margins
    below their average (normalised by all n samples, not only those below the mean).
    """
    m = _as_margins(margins)
    w = np.ones_like(m) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).ravel()
    theta = np.average(m, weights=w)
    return float(np.average(np.maximum(theta - m, 0.0) ** 2, weights=w))


def msvmav_bound_term(margins, *, sample_weight=None) -> float:
    """The data-dependent term SV(h) / theta_h^2 of the MSVMAv bound (Qian et al. 2022, Thm. 1).

    theta_h is the average margin, SV(h) the semi-variance below it. Smaller is better; the
    term is scale-invariant (multiplying all margins by c > 0 leaves it unchanged). Returns
    ``inf`` when the average margin is not positive (the bound is vacuous there).
    """
    m = _as_margins(margins)
    w = np.ones_like(m) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).ravel()
    theta = np.average(m, weights=w)
    if theta <= 0:
        return float("inf")
    return semivariance(m, sample_weight=w) / theta**2


_DEFAULT_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def margin_stats(margins, *args, quantiles=None, sample_weight=None, norm=None) -> dict:
    """Summary statistics of a margin distribution.

    Two forms:

    * ``margin_stats(margins, quantiles=(0.05, 0.25, 0.5, 0.75, 0.95), *, sample_weight=None)``:
      statistics of margins already computed (``quantiles`` may be passed by position);
    * ``margin_stats(estimator, X, y, *, norm=None, quantiles=..., sample_weight=None)``:
      statistics of the normalised margins of a fitted classifier or Pipeline on (X, y),
      computed by :func:`estimator_margins` (``norm`` overrides the model's weight norm).

    Returns
    -------
    dict with keys ``n``, ``min``, ``max``, ``mean``, ``std``, ``variance`` (population
    variance, 1/n), ``semivariance`` (see :func:`semivariance`), ``bound_term`` (SV/theta^2,
    see :func:`msvmav_bound_term`), ``frac_negative`` (training error for training margins)
    and ``q<p>`` for each requested quantile (e.g. ``q0.5`` the median). Without weights the
    quantiles interpolate linearly (numpy's default); with ``sample_weight`` they are the
    weighted inverted-CDF quantiles (the smallest margin whose cumulative weight reaches q),
    which equal the same rule on margins repeated by integer weights.
    """
    if _is_estimator(margins):
        if len(args) != 2:
            raise TypeError(
                "margin_stats(estimator, X, y, *, norm=None, quantiles=..., sample_weight=None): "
                f"pass the estimator, X and y; got {1 + len(args)} positional arguments."
            )
        margins = estimator_margins(margins, args[0], args[1], norm=norm)
    else:
        if norm is not None:
            raise TypeError("norm is only for the estimator form margin_stats(estimator, X, y, norm=...).")
        quantiles = _optional_positional(args, quantiles, None, "margin_stats(margins, quantiles)", 1,
                                         "quantiles")
    if quantiles is None:
        quantiles = _DEFAULT_QUANTILES
    m = _as_margins(margins)
    w = np.ones_like(m) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).ravel()
    mean = float(np.average(m, weights=w))
    var = float(np.average((m - mean) ** 2, weights=w))
    out = {
        "n": int(m.size),
        "min": float(m.min()),
        "max": float(m.max()),
        "mean": mean,
        "std": var**0.5,
        "variance": var,
        "semivariance": semivariance(m, sample_weight=w),
        "bound_term": msvmav_bound_term(m, sample_weight=w),
        "frac_negative": float(np.average(m < 0, weights=w)),
    }
    order = np.argsort(m, kind="stable")
    cum = np.cumsum(w[order])
    for q in quantiles:
        if not 0 <= q <= 1:
            raise ValueError(f"quantiles must lie in [0, 1]; got {q}.")
        if sample_weight is None:
            out[f"q{q:g}"] = float(np.quantile(m, q))
        else:
            k = min(int(np.searchsorted(cum, q * cum[-1], side="left")), m.size - 1)
            out[f"q{q:g}"] = float(m[order][k])
    return out
