"""Input validation shared by every estimator: labels, class weights, sparse layout, feature
scale and the output of callable kernels.

Each check raises a ``ValueError`` (``TypeError`` for a wrong type) whose message names the
parameter and the remedy, before any solver sees the data; the scale check warns with
:class:`~margindist.exceptions.FeatureScaleWarning`.
"""

from __future__ import annotations

import difflib
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.utils.multiclass import check_classification_targets

from .exceptions import DegenerateModelWarning, FeatureScaleWarning, KernelApproximationWarning

__all__ = [
    "canonical_csr",
    "check_callable_kernel_output",
    "check_class_totals",
    "check_class_weight",
    "check_labels",
    "close_matches",
    "feature_scale_problem",
    "warn_degenerate",
    "warn_scale_problem",
]


def canonical_csr(X):
    """X with summed duplicate entries and sorted column indices, copying only when needed.

    scikit-learn's ``pairwise_kernels`` (through ``row_norms``) and numba loops that walk a
    row assume a canonical CSR matrix; a matrix with duplicate entries would silently give
    wrong squared norms. The structure is checked first (row pointers non-decreasing from 0,
    column indices in [0, n_features)): the compiled loops read the indices unchecked, so a
    malformed matrix raises here instead of reading outside the arrays. Dense input is
    returned unchanged.
    """
    if not sp.issparse(X):
        return X
    try:
        X.check_format(full_check=True)
    except ValueError as err:
        raise ValueError(f"X is a malformed sparse matrix: {err}.") from None
    if X.has_canonical_format:
        return X
    X = X.copy()
    X.sum_duplicates()  # also sorts the indices
    return X


def _plain(label):
    """A label as the user wrote it (a NumPy scalar as its Python value)."""
    return label.item() if isinstance(label, np.generic) else label


def close_matches(word, choices, *, n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The ``choices`` closest to ``word`` ignoring case, best first (:func:`difflib.get_close_matches`
    with the similarity ``cutoff`` in [0, 1]), for "did you mean" messages."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(str(choice).lower(), str(choice))
    hits = difflib.get_close_matches(str(word).lower(), list(by_lower), n=n, cutoff=cutoff)
    return [by_lower[h] for h in hits]


def check_labels(y) -> None:
    """Classification targets of one kind: discrete, and not a mix of strings and numbers."""
    y = np.asarray(y)
    if y.dtype == object and y.size:
        is_str = np.fromiter((isinstance(v, str) for v in y.ravel()), dtype=bool, count=y.size)
        if is_str.any() and not is_str.all():
            raise ValueError(
                "Mix of label input types (string and number) in y: e.g. "
                f"{y.ravel()[np.argmax(is_str)]!r} and {y.ravel()[np.argmin(is_str)]!r}. "
                "Use labels of one type (e.g. y.astype(str))."
            )
    check_classification_targets(y)


def check_class_weight(class_weight, classes) -> None:
    """``class_weight`` is None, ``"balanced"`` or a dict of positive finite weights whose keys
    are labels of ``classes``."""
    if class_weight is None or (isinstance(class_weight, str) and class_weight == "balanced"):
        return
    if not isinstance(class_weight, dict):
        raise ValueError(f"class_weight must be None, 'balanced' or a dict label -> weight; got {class_weight!r}.")
    known = set(np.asarray(classes).tolist())
    unknown = [k for k in class_weight if k not in known]
    if unknown:
        raise ValueError(
            f"class_weight names labels that are not classes of y: {unknown[:5]!r}; the classes are "
            f"{[_plain(c) for c in classes[:10]]!r}."
        )
    for label, weight in class_weight.items():
        ok = isinstance(weight, numbers.Real) and not isinstance(weight, bool)
        if not ok or not np.isfinite(weight) or weight <= 0:
            raise ValueError(
                f"class_weight[{label!r}] must be a positive finite number; got {weight!r}. "
                "To leave a class out, remove its samples from the data."
            )


def check_class_totals(sample_weight, y_index, classes) -> None:
    """Every class keeps a positive total weight (sample_weight times class_weight)."""
    totals = np.bincount(y_index, weights=sample_weight, minlength=classes.size)
    empty = np.flatnonzero(totals <= 0)
    if empty.size:
        raise ValueError(
            f"The class {_plain(classes[empty[0]])!r} has zero total sample weight (sample_weight times "
            "class_weight): a model could never predict it. Remove its samples from X and y, or give "
            "them positive sample_weight."
        )


def check_callable_kernel_output(func, K, n_rows: int, n_cols: int, *, symmetric: bool = False) -> np.ndarray:
    """The result of a user's kernel ``func(X, Z)`` as a float64 (n_rows, n_cols) array, or a
    clear error naming the callable."""
    name = getattr(func, "__name__", repr(func))
    if sp.issparse(K):
        K = K.toarray()
    try:
        K = np.asarray(K, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"The kernel callable {name!r} returned something that is not a numeric array: {exc}") from None
    if K.shape != (n_rows, n_cols):
        raise ValueError(
            f"The kernel callable {name!r} must return an array of shape (len(X), len(Z)) = "
            f"({n_rows}, {n_cols}); it returned shape {K.shape}."
        )
    if not np.all(np.isfinite(K)):
        raise ValueError(f"The kernel callable {name!r} returned NaN or infinite values.")
    if symmetric and n_rows == n_cols and not np.allclose(K, K.T, rtol=1e-6, atol=1e-10 * max(1.0, np.abs(K).max())):
        raise ValueError(
            f"The kernel callable {name!r} returned a non-symmetric Gram matrix K(X, X); a kernel "
            "must satisfy k(x, z) = k(z, x)."
        )
    return K


#: Rows whose root-mean-square norm is outside this range trigger :class:`~margindist.exceptions.FeatureScaleWarning`.
ROW_NORM_RANGE = (1e-4, 1e5)
#: Largest ratio of the largest to the smallest (non-zero) column magnitude before a warning.
COLUMN_RATIO_MAX = 1e6


def feature_scale_problem(X, *, columns: bool = True, rows: bool = True,
                          row_range: tuple[float, float] = ROW_NORM_RANGE) -> str | None:
    """A sentence describing an extreme feature scale of X, or None when it looks ordinary.

    ``rows``: the root-mean-square row norm is outside ``row_range`` (by default
    :data:`ROW_NORM_RANGE`; a method whose defaults assume rows of norm about 1 passes a
    narrower one); ``columns``: the
    largest absolute value of some column is over :data:`COLUMN_RATIO_MAX` times that of
    another (non-zero) column.
    """
    n = X.shape[0]
    if n == 0 or X.shape[1] == 0:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        if sp.issparse(X) and X.format == "csr":  # straight from the stored entries (no CSC copy)
            data = np.abs(X.data, dtype=np.float64)
            sq_total = float(data @ data) if X.has_canonical_format else float(X.multiply(X).sum())
            col_max = np.zeros(X.shape[1])
            np.maximum.at(col_max, X.indices, data)
        elif sp.issparse(X):
            sq_total = float(X.multiply(X).sum()) if X.nnz else 0.0
            col_max = np.asarray(abs(X).max(axis=0).todense()).ravel()
        else:
            sq_total = float(np.einsum("ij,ij->", X, X, dtype=np.float64))
            col_max = np.abs(X).max(axis=0)
    if rows:
        rms = np.sqrt(sq_total / n)
        lo, hi = row_range
        if rms > 0 and not lo <= rms <= hi:
            return f"the rows have a root-mean-square norm of {rms:.3g} (ordinary: {lo:g} to {hi:g})"
    if columns:
        nz = col_max[col_max > 0]
        if nz.size >= 2 and nz.max() > COLUMN_RATIO_MAX * nz.min():
            big, small = int(np.argmax(col_max)), int(np.flatnonzero(col_max == nz.min())[0])
            return (f"column {big} reaches {nz.max():.3g} while column {small} stays below {nz.min():.3g} "
                    f"(a ratio over {COLUMN_RATIO_MAX:g})")
    return None


def warn_scale_problem(estimator, problem: str | None) -> None:
    """Warn that X is on an extreme scale for ``estimator`` (``problem``: the sentence from
    :func:`feature_scale_problem`; None: no warning)."""
    if problem is not None:
        warnings.warn(
            f"{type(estimator).__name__}: {problem}. At this scale its regularisation and step sizes "
            "are far from their intended range and the model may be degenerate (e.g. predict one "
            "class). Standardise the features first (StandardScaler, or MinMaxScaler / "
            "MaxAbsScaler for sparse data).",
            FeatureScaleWarning,
            stacklevel=3,
        )


def warn_approximation(estimator, landmarks: int, rows: int, share: float, n_problems: int, need_mib: float) -> None:
    """Warn that ``kernel_approximation="auto"`` fitted ``estimator`` on Nyström features that
    leave ``share`` of the kernel's trace out on a sub-problem of ``rows`` rows (the worst of
    ``n_problems``); ``need_mib``: the ``cache_size`` that would hold the exact path."""
    where = "the training rows" if n_problems == 1 else f"the rows of one of its {n_problems} sub-problems"
    warnings.warn(
        f"{type(estimator).__name__}: kernel_approximation='auto' fitted the model on {landmarks} Nyström "
        f"landmarks of {rows} rows instead of the exact kernel, and they leave {100.0 * share:.0f} % of the "
        f"kernel's trace on {where} out: the kernel's spectrum is too flat for them, and the model may be "
        f"markedly less accurate than the exact one. Pass more landmarks (an int kernel_approximation), or "
        f"cache_size={need_mib:.0f} (MiB) for the exact path.",
        KernelApproximationWarning,
        stacklevel=6,  # the caller of fit
    )


def warn_degenerate(estimator, missing, predicted, scale_problem: str | None) -> None:
    """Warn that ``estimator`` never predicts the classes ``missing`` on its training data."""
    if scale_problem is not None:
        cause = f"the features are on an extreme scale ({scale_problem}): standardise them"
    else:
        cause = ("the regularisation is too strong for this data (see the estimator's regularisation "
                 "parameter), the classes are very imbalanced (try class_weight='balanced'), or the "
                 "solver stopped early (raise max_iter)")
    what = (f"predicts the single class {_plain(predicted[0])!r} for every training example"
            if predicted.size == 1 else
            f"never predicts the class(es) {[_plain(c) for c in missing[:10]]} on its training data")
    warnings.warn(f"{type(estimator).__name__} {what}. Likely cause: {cause}.",
                  DegenerateModelWarning, stacklevel=3)
