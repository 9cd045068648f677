"""Shared estimator plumbing.

:class:`BaseMarginClassifier` does everything that is not the method itself:

* validation through :func:`sklearn.utils.validation.validate_data` (dense or CSR, float64 or
  float32, NaN/inf/empty rejected with scikit-learn's messages), parameter validation through
  ``_parameter_constraints``;
* label encoding for any label type, ``classes_``; a clear error for a single class;
* ``class_weight`` folded into ``sample_weight`` (:func:`combined_sample_weight`); samples of
  weight 0 are removed before the solver sees them, so weight 0 is the same as absent;
* the multi-class path: a binary method becomes multi-class through one-vs-rest or
  one-vs-one (``multi_class``; sub-problems fitted in parallel with joblib ``n_jobs``), or a
  native multi-class method provides ``_fit_multiclass``;
* fitted state assembly in scikit-learn's layout: ``coef_`` (n_problems, d) and
  ``intercept_`` for linear models, ``support_``, ``support_vectors_``, ``dual_coef_``
  (n_problems, n_SV) for kernel expansions, ``n_iter_``;
* ``decision_function`` (shape (n,) for two classes, (n, K) otherwise), ``predict``
  consistent with it, and ``margins(X, y)``: normalised margins y f(x) / ||w||.

A binary method implements one hook, ``_fit_binary(problem)``: it gets a :class:`BinaryProblem`
(rows X, labels y in {-1, +1}, sample weights, the resolved
:class:`~margindist.kernels.KernelSpec` or None for linear-only methods, the previous fit's
warm-start state, set-up shared by one-vs-rest sub-problems, a seed) and returns a
:class:`BinaryModel`. The one alternative is a native multi-class method, which sets
``_native_multiclass = True`` and implements ``_fit_multiclass``. Optional hooks: ``_prepare``
(per-fit set-up before any sub-problem), ``_shared_setup``, ``_warm_key``, ``_set_extra``, and
for streaming methods ``_partial_fit_binary`` (the per-method step of the shared
:meth:`BaseMarginClassifier._partial_fit`).
"""

from __future__ import annotations

import functools
import logging
import numbers
import sys
import warnings
from dataclasses import dataclass, field, replace
from itertools import combinations

import numpy as np
import scipy.sparse as sp
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.validation import (
    _check_sample_weight,
    check_is_fitted,
    validate_data,
)

from ._validation import (
    ROW_NORM_RANGE,
    canonical_csr,
    check_class_totals,
    check_class_weight,
    check_labels,
    feature_scale_problem,
    warn_approximation,
    warn_degenerate,
    warn_scale_problem,
)
from .kernels import (
    KernelRowCache,
    KernelSpec,
    NystroemMap,
    builtin_psd,
    cache_dtype,
    fewest_landmarks,
    indefinite_kernel,
    kernel_decision,
    kernel_matrix,
    nystroem_map,
    resolve_kernel,
    rkhs_norm_sq,
)
from .metrics import label_index, multiclass_margins, pairwise_margins
from .solvers._repeats import repeated_rows, split_coefficients
from .solvers._threads import blas_single_thread

logger = logging.getLogger("margindist")

__all__ = ["BaseMarginClassifier", "BinaryModel", "BinaryProblem", "FitLogger", "combined_sample_weight", "get_logger"]


_STDERR = logging.StreamHandler()
_STDERR.setFormatter(logging.Formatter("[margindist] %(message)s"))


class FitLogger:
    """The logger an estimator uses during one fit (``get_logger(self.verbose)``).

    Messages go to the ``margindist`` logger. ``verbose`` of an estimator decides what is shown
    without touching the logging configuration: ``verbose >= 1`` shows INFO messages and
    ``verbose >= 2`` DEBUG messages of that fit (on stderr when logging is not configured), and
    with ``verbose=0`` the messages obey the user's configuration of the ``margindist`` logger
    (by default nothing below WARNING is shown). No global state changes, so one estimator's
    verbosity never leaks into another's.
    """

    def __init__(self, verbose=0):
        self.verbose = int(verbose or 0)

    def isEnabledFor(self, level: int) -> bool:
        if self.verbose >= 2 or (self.verbose >= 1 and level >= logging.INFO):
            return True
        return logger.isEnabledFor(level)

    def log(self, level: int, msg, *args) -> None:
        forced = self.verbose >= 2 or (self.verbose >= 1 and level >= logging.INFO)
        if forced:
            record = logger.makeRecord(logger.name, level, "(margindist)", 0, msg, args, None)
            if logger.hasHandlers():
                logger.handle(record) if logger.isEnabledFor(level) else _emit_handlers(record)
            else:
                _STDERR.setStream(sys.stderr)  # whatever stderr is now (tests, notebooks redirect it)
                _STDERR.handle(record)
        elif logger.isEnabledFor(level):
            logger.log(level, msg, *args)

    def debug(self, msg, *args) -> None:
        self.log(logging.DEBUG, msg, *args)

    def info(self, msg, *args) -> None:
        self.log(logging.INFO, msg, *args)

    def warning(self, msg, *args) -> None:
        self.log(logging.WARNING, msg, *args)


def _emit_handlers(record) -> None:
    """Pass a record to the handlers of ``margindist`` and its ancestors, bypassing levels."""
    node = logger
    while node is not None:
        for handler in node.handlers:
            handler.handle(record)
        node = node.parent if node.propagate else None


def get_logger(verbose) -> FitLogger:
    """The logger of one fit with the estimator's ``verbose`` (see :class:`FitLogger`)."""
    return FitLogger(verbose)


@dataclass
class BinaryModel:
    """The result of one binary fit on rows X (labels in {-1, +1}).

    Exactly one of ``coef`` (linear model, shape (d,)) and ``dual_coef`` (kernel expansion
    over the rows of the X it was fitted on, shape (m,), zeros for non-support rows) is set.
    f(x) = <coef, x> + intercept or sum_j dual_coef_j k(x_j, x) + intercept.
    ``extra`` holds method-specific results (histories, thresholds ...).
    """

    coef: np.ndarray | None = None
    dual_coef: np.ndarray | None = None
    intercept: float = 0.0
    n_iter: int = 0
    extra: dict = field(default_factory=dict)
    #: Squared RKHS norm dual_coef^T K dual_coef of a kernel model when the solver already has it
    #: (then ``weight_norm_`` costs no kernel evaluations; otherwise it is computed from the
    #: support vectors, O(n_SV^2)).
    norm_sq: float | None = None


@dataclass
class FitData:
    """Training data validated for a fit (:meth:`BaseMarginClassifier._fit_data`): X (dense or
    canonical CSR), labels as indices into ``classes``, positive or zero weights with the class
    weights folded in, and the key of the parameters the validation depended on."""

    X: object
    y_index: np.ndarray
    sample_weight: np.ndarray
    classes: np.ndarray
    key: tuple
    #: Set-up that fits on this data share (see :meth:`BaseMarginClassifier._fit_shared`):
    #: kind -> (key, value), the latest of each kind; None (a plain fit): nothing is kept.
    shared: dict | None = None


@dataclass
class BinaryProblem:
    """One binary sub-problem, the argument of ``_fit_binary`` and ``_partial_fit_binary``.

    ``X`` holds the rows of this sub-problem (validated float64/float32 ndarray or CSR matrix,
    or the Gram matrix block for ``kernel="precomputed"``; rows of weight 0 already removed),
    ``y`` their labels in {-1, +1} (float64; +1 is ``classes_[1]``, or the class of a
    one-vs-rest sub-problem, or the second class of a one-vs-one pair) and ``sample_weight``
    their positive weights (float64, class weights folded in).
    """

    X: object
    y: np.ndarray
    sample_weight: np.ndarray
    #: The resolved kernel (``kernel.is_linear``, ``kernel.kind`` ...), None for methods without
    #: a ``kernel`` parameter and in ``partial_fit``.
    kernel: KernelSpec | None = None
    #: ``extra["warm"]`` that the same sub-problem returned last time: in ``fit``, the previous
    #: fit's when ``warm_start`` is on and ``_warm_key`` matches; in ``partial_fit``, the
    #: previous call's (or fit's) while the stream continues (see ``_stream_states``); else None.
    warm: object = None
    #: The result of ``_shared_setup`` when the sub-problems run one after the other on the
    #: same rows (one-vs-rest), else None.
    shared: object = None
    #: Seed of this sub-problem: an int drawn from ``random_state`` (0 for estimators without
    #: one); in ``partial_fit`` whatever ``_stream_seeds`` gives.
    seed: object = 0
    #: Indices of this sub-problem's rows in the fitted data; None for all rows (two classes,
    #: one-vs-rest).
    rows: np.ndarray | None = None
    #: The fitted data that ``rows`` index (X is its rows ``rows``); None where X is not made of
    #: them (Nyström features).
    parent: object = None
    #: (negative class index or None for "the rest", positive class index).
    classes: tuple = (0, 1)


#: The resolved linear kernel of the Nyström path's linear sub-problems.
LINEAR_KERNEL = resolve_kernel("linear")
#: ``kernel_approximation="auto"``: the most landmarks it takes (when the exact path would not fit
#: its budget, or where an estimator tries landmarks within it).
AUTO_COMPONENTS = 1000
#: ``kernel_approximation="auto"`` first tries these fewer landmarks, fewest first, and takes the
#: first count that leaves at most :data:`AUTO_NEAR_EXACT` of the kernel's trace out (measured on
#: a sample of the rows, :func:`~margindist.kernels.fewest_landmarks`); the fit's time grows about
#: as the square of the count. Measured against the exact models (one 70/30 split each, RBF,
#: standardised rows; the shares as measured on all rows): MSVMAv on 3500 rows of magic, banana,
#: phoneme, satimage, letter, penbased and a 10-dimensional make_classification set, the
#: counts that leave at most 5 % out, -0.15 to +0.4 point (100-1000 landmarks, 0.11-2.4 s against
#: 3.9-13.9 s exact); ODM on 7700-14 000 rows of magic, letter, penbased and make_classification,
#: -0.2 to 0 point. Counts that left 5-10 % out cost up to 0.6 point, 10-30 % up to 2.2.
AUTO_FEWER = (100, 200, 400, 700)
#: ``kernel_approximation="auto"`` warns (:class:`~margindist.exceptions.KernelApproximationWarning`)
#: when its landmarks leave more than this share of the kernel's trace on a sub-problem's rows
#: out (:meth:`~margindist.kernels.NystroemMap.residual`). A share is a risk, not a loss: with
#: ODM, the exact RBF model against 1000 uniform landmarks on at most 10 000 standardised rows,
#: shares up to 0.04 (magic, penbased, satimage, phoneme, banana, make_classification in 10
#: dimensions) cost at most 0.1 point of test accuracy; 0.08 (spambase) 0.36 point; 0.18
#: (make_classification in 20 dimensions) 0.7 point; 0.29 (splice) 0.3 point; 0.38 and 0.50 (in
#: 40 and 80 dimensions) 1.9 and 3.9 points. MSVMAv on 1000 landmarks of the benchmarks' two
#: Gaussian classes in 20 dimensions (0.25 left out at 50 000 rows) matched SVC, and on a
#: 3-class make_classification set in 40 dimensions (0.36) lost 2.6 points against it. The
#: warning is kept for the shares that lost points in every case measured.
WARN_RESIDUAL = 0.3
#: ``kernel_approximation="auto"`` within the budget, for an estimator whose exact path is slow
#: beyond ``_auto_landmark_rows`` rows: it fits on the fewest of :data:`AUTO_FEWER` and
#: :data:`AUTO_COMPONENTS` landmarks that leave at most this share of the kernel's trace out (a
#: model close to the exact one; see :meth:`BaseMarginClassifier._near_exact_features`), else on
#: the exact path. Beyond the budget, the share that a count of :data:`AUTO_FEWER` must meet
#: (else :data:`AUTO_COMPONENTS` landmarks).
AUTO_NEAR_EXACT = 0.05
#: The exact kernel path of a ``_weights_are_copies`` method runs on the distinct (x_i, y_i)
#: pairs when they are at most this fraction of the rows (fewer rows, the same model, but unequal
#: weights, which some solvers take longer over: KM-OMD and LDM gained 1.4-1.5x at three quarters
#: on magic with repeats; a method can ask for fewer through :meth:`_solves_distinct`).
DISTINCT_MAX_FRACTION = 0.75


def approximation_components(estimator, kernel: KernelSpec | None, m: int) -> int | None:
    """Landmarks for the Nyström path of a (sub-)problem of m rows, or None for the exact
    kernel path.

    ``kernel_approximation``: None (exact), an int (that many landmarks, at most the rows), or
    ``"auto"``: exact while the exact path's m x m float64 arrays (the estimator's
    ``_exact_kernel_arrays`` of them) fit its budget (``_auto_budget_mib()``: ``cache_size``),
    else :data:`AUTO_COMPONENTS` landmarks at most (fewer where they capture the kernel:
    :meth:`BaseMarginClassifier._nystroem_features`). The linear kernel is always exact, and so is
    ``"auto"`` with a precomputed kernel (its m x m matrix is the user's); an int with one
    raises.
    """
    value = getattr(estimator, "kernel_approximation", None)
    if value is None or kernel is None or kernel.is_linear:
        return None
    if kernel.kind == "precomputed":
        if value == "auto":  # the user's m x m Gram matrix is at hand: the exact path
            return None
        raise ValueError("kernel_approximation needs the features: it cannot be used with kernel='precomputed'; "
                         "use kernel_approximation=None.")
    if value == "auto":
        return None if exact_kernel_mib(estimator, m) <= estimator._auto_budget_mib() else min(AUTO_COMPONENTS, m)
    return min(int(value), m)


def exact_kernel_mib(estimator, m: int) -> float:
    """MiB of the m x m float64 arrays (``_exact_kernel_arrays`` of them) that the estimator's
    exact kernel path holds for a sub-problem of m rows."""
    return 8.0 * estimator._exact_kernel_arrays * m * m / 2**20


def kernel_device(device, name: str) -> str | None:
    """The PyTorch device of an estimator's ``device`` parameter for its kernel blocks, or None
    for NumPy: "auto" is the GPU when torch sees one (else None); "cuda" without one runs on the
    CPU with a warning (:func:`margindist.torch.resolve_device`)."""
    if device is None:
        return None
    try:
        from .torch import resolve_device
    except ImportError:
        if device == "auto":
            return None
        raise ImportError(f"{name}(device={device!r}) computes its kernel blocks through PyTorch, which is not "
                          "installed: pip install 'margindist[torch]', or use device=None.") from None
    import torch

    if device == "auto" and not torch.cuda.is_available():
        return None
    return str(resolve_device(device))


def combined_sample_weight(sample_weight, class_weight, X, y, classes) -> np.ndarray:
    """sample_weight (default ones) times the class weights of ``class_weight``.

    ``class_weight`` is None, ``"balanced"`` (n / (K * count_k)) or a dict label -> weight,
    as in scikit-learn. Negative, zero or non-finite class weights, negative or non-finite
    sample weights and all-zero weights raise ValueError.
    """
    check_class_weight(class_weight, classes)
    sw = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    if not np.all(np.isfinite(sw)):
        raise ValueError("sample_weight contains NaN or infinity.")
    if class_weight is not None:
        cw = compute_class_weight(class_weight, classes=classes, y=y)
        sw = sw * cw[np.searchsorted(classes, y)]
    if not np.all(np.isfinite(sw)):
        raise ValueError("sample_weight times class_weight overflows to infinity.")
    if sw.sum() <= 0:
        raise ValueError("The sample weights (times class weights) sum to zero: nothing to fit.")
    return sw


def _problem_seeds(random_state, n: int) -> np.ndarray:
    """One seed per sub-problem, drawn from ``check_random_state(random_state)``."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return np.array(_int_problem_seeds(int(random_state), n))
    return check_random_state(random_state).randint(0, 2**31 - 1, size=n)


@functools.lru_cache(maxsize=256)
def _int_problem_seeds(random_state: int, n: int) -> tuple:
    """:func:`_problem_seeds` of an int, kept (seeding a RandomState costs ~0.1 ms, and a grid
    search fits every point with the same random_state)."""
    return tuple(check_random_state(random_state).randint(0, 2**31 - 1, size=n).tolist())


def _take_rows(X, idx, pairwise: bool):
    """Rows idx of X; for a precomputed Gram matrix also the matching columns."""
    if pairwise:
        return X[np.ix_(idx, idx)] if not sp.issparse(X) else X[idx][:, idx]
    return X[idx]


def _ovo_decision(pair_decisions, pairs, n_classes) -> np.ndarray:
    """Votes plus a confidence tie-breaker in (-1/3, 1/3), as scikit-learn's OneVsOne.

    Pair (k, l), k < l, has positive class l.
    """
    n = pair_decisions.shape[0]
    votes = np.zeros((n, n_classes))
    conf = np.zeros((n, n_classes))
    for p, (k, l) in enumerate(pairs):
        d = pair_decisions[:, p]
        votes[:, l] += d > 0
        votes[:, k] += d <= 0
        conf[:, l] += d
        conf[:, k] -= d
    return votes + conf / (3.0 * (np.abs(conf) + 1.0))


_LINEAR_ATTRIBUTES = ("coef_",)
_KERNEL_ATTRIBUTES = ("dual_coef_", "support_", "support_vectors_", "n_support_")


def _check_finite_model(est, *arrays):
    """A solver that overflowed must not leave a silent NaN model behind."""
    for a in arrays:
        if not np.all(np.isfinite(a)):
            kernel = getattr(est, "kernel", None)
            cause = (f" The {kernel} kernel is not positive semi-definite, and with it the problem need "
                     "not have a bounded solution: use a positive semi-definite kernel (rbf, linear, poly "
                     "with coef0 >= 0)." if indefinite_kernel(kernel, getattr(est, "coef0", 0.0)) else "")
            raise FloatingPointError(
                f"{type(est).__name__} produced non-finite coefficients (the solver overflowed).{cause} "
                "Scale the features (e.g. MinMaxScaler or StandardScaler), or use a smaller "
                "regularisation weight / step size."
            )


class BaseMarginClassifier(ClassifierMixin, BaseEstimator):
    """Base class of all margindist classifiers (see the module docstring)."""

    #: Native multi-class methods set this and implement ``_fit_multiclass``.
    _native_multiclass = False
    #: Whether the method's problem is convex only with a positive semi-definite kernel (a fit
    #: with the sigmoid kernel, or poly with coef0 < 0, then warns: :meth:`_warn_indefinite`).
    #: MAMC's closed form needs none; LSSVM detects an indefinite system itself.
    _needs_psd_kernel = True
    #: What such a kernel does to the method (the warning's middle; ``{name}``: the class name).
    _indefinite_kernel_effect = ("{name}'s problem is not convex with it: the solution can depend on the solver's "
                                 "path (tol, cache_size) and be far from the best one")
    #: The ``multi_class`` strategies that ``partial_fit`` supports for more than two classes.
    _stream_multi_class = ("ovr", "ovo")
    #: Set by methods whose exact kernel path treats a sample weight k as exactly k copies of a
    #: sample (the same decision function): their sub-problems with repeated (x_i, y_i) pairs
    #: are solved on the distinct pairs (:meth:`_distinct_pairs`).
    _weights_are_copies = False
    #: The m x m float64 arrays that the exact kernel path of a sub-problem of m rows holds at
    #: once (its Gram matrix; two for a method that also keeps a factorisation), by which
    #: ``kernel_approximation="auto"`` judges whether the exact path fits ``cache_size``.
    _exact_kernel_arrays = 1
    #: Rows (of the exact path: distinct pairs where they are merged) beyond which
    #: ``kernel_approximation="auto"`` tries landmarks even where the exact path fits its budget
    #: (None: never; see :meth:`_near_exact_features`).
    _auto_landmark_rows = None

    def _auto_budget_mib(self) -> float:
        """MiB that ``kernel_approximation="auto"`` allows the exact path's m x m arrays."""
        return self.cache_size

    # ------------------------------------------------------------------ hooks
    def _fit_binary(self, problem: BinaryProblem) -> BinaryModel:  # pragma: no cover
        """Fit one binary sub-problem (see :class:`BinaryProblem`).

        Return ``BinaryModel(coef=w, ...)`` for a linear model or ``BinaryModel(dual_coef=a,
        ...)`` with ``a`` over the rows of ``problem.X``. A state to start the same sub-problem
        from next time (``warm_start``, ``partial_fit``) goes into ``extra["warm"]``.
        """
        raise NotImplementedError

    def _fit_multiclass(self, X, y_index, sample_weight, kernel):  # pragma: no cover
        """Native multi-class fit: returns (coef (K, d), intercept (K,), n_iter, extra).

        The one alternative to ``_fit_binary``, for classes that set ``_native_multiclass``:
        ``y_index`` in 0..K-1, one weight vector per class.
        """
        raise NotImplementedError

    def _prepare(self, X, y_index, sample_weight, kernel):
        """Per-fit set-up, called once after validation and before any sub-problem (binary or
        native) with the rows to fit; what every sub-problem must share, parallel ones
        included, goes into attributes of ``self``."""

    def _kernel_source(self, X, kernel, problem: BinaryProblem | None = None):
        """Kernel rows under the estimator's ``cache_size`` budget: all of them, computed up
        front in BLAS blocks, when the m x m matrix fits, else an LRU cache of rows computed on
        demand; shared by the sub-problems and grid points on the same rows (and, for the
        one-vs-one pairs of a search, see :meth:`_rows_holder`). Rows are stored in float32
        (as LIBSVM's cache) unless ``tol`` < 1e-5, where rounding them would show in the
        solution."""
        kind, rows = self._rows_holder(kernel, problem, X)
        return self._fit_shared(kind, self._rows_key(kernel), lambda: self._full_rows(kernel, X), rows)

    def _rows_key(self, kernel):
        return kernel, int(self.cache_size * 2**20), cache_dtype(self.tol)

    def _full_rows(self, kernel, X):
        """A :class:`KernelRowCache` of X's rows under the budget, filled when all rows fit."""
        _, budget, dtype = self._rows_key(kernel)
        cache = KernelRowCache(kernel, X, max_bytes=budget, dtype=dtype)
        if cache.n_slots == X.shape[0]:
            cache.fill()
        return cache

    def _rows_holder(self, kernel, problem, X):
        """(kind, rows) under which :meth:`_fit_shared` keeps the kernel rows of a sub-problem
        on X: ("kernel rows", X); in a search, for a one-vs-one pair whose matrices, with those
        of the other pairs, fit the budget together, the pair's own kind and the fold's rows,
        so that every pair keeps its matrix for the grid points of the fold (otherwise each
        grid point computes its pairs' rows anew: cornell, 7 classes, LDMCV's 147 points,
        25 s against 12 s)."""
        parent = None if problem is None or problem.rows is None else problem.parent
        if parent is None or kernel.kind == "precomputed" or not self._shares_set_up(parent):
            return "kernel rows", X
        n = np.bincount(self._shared_data.y_index).astype(np.float64)
        pairs = (n.size - 2) * (n @ n) + n.sum() ** 2  # sum over pairs k < l of (n_k + n_l)^2
        _, budget, dtype = self._rows_key(kernel)
        if pairs * np.dtype(dtype).itemsize > budget:
            return "kernel rows", X
        # the pair's rows, or its distinct (x, y) pairs (:meth:`_fit_distinct`): told apart by size
        return ("kernel rows", problem.classes, X.shape[0]), parent

    def _fit_shared(self, kind, key, make, X=None):
        """``make()``, or the value it gave in an earlier fit on the same validated data.

        For set-up that grid points share (a Gram matrix, a kernel row cache, a factorisation):
        ``key`` holds every parameter the value depends on, and ``X`` (when given) the rows it
        was made from, which must be the whole training data of the fit. A plain fit makes the
        value afresh; fits on one :class:`FitData` (a fold of :func:`margindist.search.cv_search`)
        keep the latest value of each ``kind``, so a grid walked with that key varying slowly
        makes it once per key value.
        """
        data = getattr(self, "_shared_data", None)
        if not self._shares_set_up(X):
            return make()
        held = data.shared.get(kind)
        if held is None or held[0] != key or held[2] is not X:
            held = data.shared[kind] = (key, make(), X)
        return held[1]

    def _shares_set_up(self, X=None) -> bool:
        """Whether this fit runs on data whose set-up other fits share (see :meth:`_fit_shared`);
        with ``X``, set-up made from these rows: the whole training data of the fit, or its
        distinct pairs (:meth:`_distinct_pairs`)."""
        data = getattr(self, "_shared_data", None)
        if data is None or data.shared is None:
            return False
        distinct = data.shared.get("distinct pairs")
        return X is None or X is data.X or (distinct is not None and distinct[1] is not None and X is distinct[1][0])

    def _release(self):
        """Drop what :meth:`_prepare` made for this fit only (run when the fit ends, even on
        an error), so that a fitted model does not carry, or pickle, set-up work."""

    def _kernel_spec(self, X, sample_weight=None) -> KernelSpec | None:
        """Resolve ``self.kernel`` on the training data; None for linear-only methods."""
        if not hasattr(self, "kernel"):
            return None
        spec = resolve_kernel(
            self.kernel,
            X,
            sample_weight=sample_weight,
            gamma=getattr(self, "gamma", "scale"),
            degree=getattr(self, "degree", 3),
            coef0=getattr(self, "coef0", 0.0),
            kernel_params=getattr(self, "kernel_params", None),
        )
        device = kernel_device(getattr(self, "device", None), type(self).__name__)
        return spec if device is None else replace(spec, device=device)

    def _warn_indefinite(self, spec):
        """Warn that a kernel which is not positive semi-definite (sigmoid, poly with coef0 < 0)
        makes the method's problem non-convex, for the methods that need one
        (:attr:`_needs_psd_kernel`)."""
        if not self._needs_psd_kernel or spec is None:
            return
        if indefinite_kernel(spec.kind, spec.coef0):
            name = type(self).__name__
            warnings.warn(
                f"{name}: the {spec.kind} kernel is not positive semi-definite, so "
                f"{self._indefinite_kernel_effect.format(name=name)}. A positive semi-definite kernel "
                "(rbf, linear, poly with coef0 >= 0) avoids this.",
                UserWarning,
                stacklevel=4,
            )

    def _accepts_sparse(self) -> bool:
        return getattr(self, "kernel", None) != "precomputed"

    def _pairwise(self) -> bool:
        return getattr(self, "kernel", None) == "precomputed"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accepts_sparse()
        tags.input_tags.pairwise = self._pairwise()
        tags.classifier_tags.multi_class = True
        return tags

    # ------------------------------------------------------------------ validation
    def _validate_X(self, X, reset: bool):
        X = validate_data(
            self,
            X,
            reset=reset,
            accept_sparse="csr" if self._accepts_sparse() else False,
            dtype=[np.float64, np.float32],
        )
        return canonical_csr(X)

    def _validate_Xy(self, X, y, reset: bool = True):
        """X (dense or canonical CSR, float64/float32) and y checked for a fit or partial_fit."""
        X, y = validate_data(
            self,
            X,
            y,
            reset=reset,
            accept_sparse="csr" if self._accepts_sparse() else False,
            dtype=[np.float64, np.float32],
        )
        check_labels(y)
        return canonical_csr(X), y

    def _check_pairwise_shape(self, X, fit: bool):
        if not self._pairwise():
            return
        if fit and X.shape[0] != X.shape[1]:
            raise ValueError(
                f"kernel='precomputed' needs a square Gram matrix at fit; got shape {X.shape}."
            )
        if not fit and X.shape[1] != self.shape_fit_[0]:
            raise ValueError(
                f"kernel='precomputed': X must be K(X_test, X_train) with {self.shape_fit_[0]} "
                f"columns (the number of training samples); got {X.shape[1]}."
            )

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, sample_weight=None):
        """Fit the model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data (or the (n_samples, n_samples) Gram matrix for
            ``kernel="precomputed"``).
        y : array-like of shape (n_samples,)
            Class labels of any type (ints, strings ...). Two classes are handled natively;
            more through ``multi_class`` (or natively where the method is multi-class).
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative per-sample weights, multiplied by ``class_weight``. Weight 0 is the
            same as leaving the sample out; an integer weight k the same as k copies.

        Returns
        -------
        self
        """
        self._validate_params()
        return self._fit_validated(self._fit_data(X, y, sample_weight))

    def _fit_data(self, X, y, sample_weight) -> FitData:
        """Validate the training data of a fit (X, labels, sample and class weights) once."""
        X, y = self._validate_Xy(X, y)
        self._check_pairwise_shape(X, fit=True)
        classes, y_index = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data; "
                f"got only one class: {classes[0]!r}."
            )
        sw = combined_sample_weight(sample_weight, getattr(self, "class_weight", None), X, y, classes)
        check_class_totals(sw, y_index, classes)
        return FitData(X, y_index, sw, classes, self._fit_data_key())

    def _fit_data_key(self):
        """The parameters :meth:`_fit_data` depends on: data validated under the same key serves
        another fit (a grid search refits one fold's data at many parameter values)."""
        return (repr(getattr(self, "class_weight", None)), self._accepts_sparse(), self._pairwise())

    def _fit_validated(self, data: FitData, check: bool = True):
        """Fit on data from :meth:`_fit_data`; ``check=False`` leaves out the after-fit check
        of a useful model (:meth:`_check_useful`), for a search that scores the model itself."""
        X, y_index, sw, classes = data.X, data.y_index, data.sample_weight, data.classes
        self.classes_ = classes
        self.shape_fit_ = X.shape
        self.n_features_in_ = X.shape[1]
        keep = np.flatnonzero(sw > 0)
        if keep.size < X.shape[0]:
            X_fit, y_fit, sw_fit = _take_rows(X, keep, self._pairwise()), y_index[keep], sw[keep]
        else:
            keep, X_fit, y_fit, sw_fit = None, X, y_index, sw
        spec = self._kernel_spec(X_fit, sw_fit)
        self._warn_indefinite(spec)
        # one BLAS thread unless the fit factorises a large dense matrix
        with blas_single_thread(self._factorised_order(X_fit, spec)):
            self._shared_data = data
            try:
                scale_problem = self._warn_scale(X_fit, spec)
                self._prepare(X_fit, y_fit, sw_fit, spec)
                if self._native_multiclass:
                    self._fit_native(X_fit, y_fit, sw_fit, spec)
                else:
                    problems = self._binary_problems(y_fit, classes.size)
                    models = self._fit_problems(X_fit, y_fit, sw_fit, spec, problems)
                    self._assemble(X_fit, models, problems, spec, keep)
            finally:
                self._release()
                self._shared_data = None
            if check:
                self._check_useful(X, y_index, sw, scale_problem)
        return self

    def _fit_native(self, X, y_index, sw, spec):
        """Fit and store a native multi-class model (one weight vector per class)."""
        coef, intercept, n_iter, extra = self._fit_multiclass(X, y_index, sw, spec)
        self._drop_attributes(_KERNEL_ATTRIBUTES)
        self.coef_ = np.asarray(coef)
        self.intercept_ = np.asarray(intercept, dtype=self.coef_.dtype)
        _check_finite_model(self, self.coef_, self.intercept_)
        self.n_iter_ = n_iter
        self._set_extra([extra])
        self._kernel_fit_ = None
        self.problems_ = [(None, k) for k in range(self.coef_.shape[0])]

    def _factorised_order(self, X, spec) -> int:
        """The order of the largest dense matrix the fit factorises or multiplies as a square
        (where BLAS threads pay off; see :func:`~margindist.solvers._threads.blas_single_thread`):
        the features of a linear model, the rows of a kernel one, the landmarks of a Nyström
        path (``kernel_approximation``). Kernel paths that stream rows from a cache and
        factorise nothing of order m return the number of features (their BLAS products,
        n x d by d x m blocks, are thin)."""
        if spec is None or spec.is_linear:
            return X.shape[1]
        n_comp = approximation_components(self, spec, X.shape[0])
        return X.shape[0] if n_comp is None else n_comp

    def _warn_scale(self, X, spec):
        """Warn when the features are on an extreme scale for this model; returns the problem.

        A precomputed or callable kernel sees no features. With ``gamma="scale"`` the RBF,
        polynomial and sigmoid kernels adapt to the overall scale, so only columns on very
        different scales are reported.
        """
        if spec is not None and spec.kind in ("precomputed", "callable"):
            return None
        adapts = spec is not None and not spec.is_linear and getattr(self, "gamma", None) == "scale"
        kw = {"rows": not adapts, "row_range": self._row_norm_range(X, spec)}
        # a data property: the grid points of a search fold measure it once
        problem = self._fit_shared("scale problem", tuple(kw.items()), lambda: feature_scale_problem(X, **kw), X)
        warn_scale_problem(self, problem)
        return problem

    def _row_norm_range(self, X, spec):
        """The root-mean-square row norms this model's defaults serve (outside it a
        :class:`~margindist.exceptions.FeatureScaleWarning`); methods whose defaults or solver
        assume rows of norm about 1 narrow it (documented in ``docs/hyperparameters.md``)."""
        return ROW_NORM_RANGE

    def _check_useful(self, X, y_index, sw, scale_problem):
        """After a fit: ``predict`` gives finite values on (a sample of) the training rows and
        predicts every class of them at least once (else a
        :class:`~margindist.exceptions.DegenerateModelWarning` says which and why)."""
        rows = np.flatnonzero(sw > 0)
        rows = rows[np.unique(np.linspace(0, rows.size - 1, min(rows.size, 512)).astype(np.intp))]
        D = self._decision_validated(X[rows])
        if not np.all(np.isfinite(D)):
            raise FloatingPointError(
                f"{type(self).__name__} gives non-finite decision values on its own training data; "
                "check the kernel (a callable kernel must return finite values) and the feature scale."
            )
        predicted = np.searchsorted(self.classes_, np.unique(self._labels(D)))
        missing = np.setdiff1d(np.unique(y_index[rows]), predicted)
        if missing.size:
            warn_degenerate(self, self.classes_[missing], self.classes_[predicted], scale_problem)

    def _partial_fit_data(self, X, y, classes, sample_weight, first: bool):
        """The checks every ``partial_fit`` starts with; returns (X, y_index, sample_weight)
        with rows of weight 0 dropped.

        On the ``first`` call the parameters are validated and ``classes`` (all labels that
        will ever appear) become ``classes_``; later calls must name the same classes or none.
        ``class_weight="balanced"`` needs the class frequencies of the whole data, which a
        stream does not have: pass a dict.
        """
        name = type(self).__name__
        if first:
            self._validate_params()
            if classes is None:
                raise ValueError(f"classes must be passed on the first call to {name}.partial_fit.")
            check_labels(np.asarray(classes))
            classes = np.unique(np.asarray(classes))
            if classes.size < 2:
                raise ValueError(f"{name} needs at least 2 classes; got classes={classes!r}.")
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError(f"classes={classes!r} differs from the classes of the first call {self.classes_!r}.")
        if isinstance(getattr(self, "class_weight", None), str):
            raise ValueError("class_weight='balanced' is not supported by partial_fit (the class frequencies "
                             "of a stream are unknown); compute them over the whole data and pass a dict.")
        X, y = self._validate_Xy(X, y, reset=first)
        if first:
            self.classes_ = classes
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            raise ValueError(f"y contains labels not in classes: {np.unique(y[unknown])[:5]!r}.")
        sw = combined_sample_weight(sample_weight, getattr(self, "class_weight", None), X, y, self.classes_)
        y_index = np.searchsorted(self.classes_, y)
        keep = np.flatnonzero(sw > 0)
        if keep.size < X.shape[0]:
            X, y_index, sw = X[keep], y_index[keep], sw[keep]
        return X, y_index, sw

    def _binary_problems(self, y_index, K):
        """List of (row indices or None for all rows, y in {-1, +1}, (neg, pos) class indices)."""
        if K == 2:
            return [(None, np.where(y_index == 1, 1.0, -1.0), (0, 1))]
        strategy = getattr(self, "multi_class", "ovr")
        if strategy == "ovr":
            return [(None, np.where(y_index == k, 1.0, -1.0), (None, k)) for k in range(K)]
        if strategy == "ovo":
            out = []
            for k, l in combinations(range(K), 2):
                rows = np.flatnonzero((y_index == k) | (y_index == l))
                out.append((rows, np.where(y_index[rows] == l, 1.0, -1.0), (k, l)))
            return out
        raise ValueError(f"multi_class must be 'ovr' or 'ovo'; got {strategy!r}.")

    # ------------------------------------------------------------------ sub-problems
    def _shared_setup(self, X, sample_weight, kernel):
        """Work that one-vs-rest sub-problems (same rows, different labels) can share; it
        reaches ``_fit_binary`` as ``problem.shared``."""
        return

    def _warm_key(self, X, kernel, problems):
        """What must match for the previous fit's sub-problem states to be valid starts."""
        return (X.shape, None if kernel is None else kernel.kind, [cls for _, _, cls in problems],
                getattr(self, "kernel_approximation", None), getattr(self, "landmarks", None))

    def _problem(self, X, sw, spec, problem, warm=None, shared=None, seed=0) -> BinaryProblem:
        """The :class:`BinaryProblem` of one (rows, y in {-1, +1}, classes) sub-problem."""
        rows, y_pm, cls = problem
        parent = None
        if rows is not None:
            parent, X, sw, shared = X, _take_rows(X, rows, self._pairwise()), sw[rows], None
        return BinaryProblem(X=X, y=y_pm, sample_weight=sw, kernel=spec, warm=warm, shared=shared,
                             seed=seed, rows=rows, classes=cls, parent=parent)

    def _fit_problems(self, X, y_index, sw, spec, problems):
        """Fit every sub-problem (in parallel with ``n_jobs``) and keep their warm-start states."""
        key = self._warm_key(X, spec, problems)
        prev = getattr(self, "_warm_state", None) if getattr(self, "warm_start", False) else None
        warm = prev["states"] if prev is not None and prev["key"] == key else [None] * len(problems)
        if hasattr(self, "random_state"):
            seeds = _problem_seeds(self.random_state, len(problems))
        else:  # deterministic methods: no draw from the global random state
            seeds = np.zeros(len(problems), dtype=np.int64)
        n_jobs = getattr(self, "n_jobs", None)
        sequential = len(problems) == 1 or n_jobs in (None, 1)
        shared = None
        full = self._nystroem_full_rows(X, sw, spec, problems, int(seeds[0]))
        if full is None and sequential and len(problems) > 1 and all(rows is None for rows, _, _ in problems):
            shared = self._shared_setup(X, sw, spec)

        def one(k):
            return self._solve_binary(self._problem(X, sw, spec, problems[k], warm[k], shared, int(seeds[k])), full)

        if sequential:
            models = [one(k) for k in range(len(problems))]
        else:
            models = Parallel(n_jobs=n_jobs)(delayed(one)(k) for k in range(len(problems)))
        self._warn_approximation([m.extra.pop("nystroem", None) for m in models])
        self._warm_state = {"key": key, "states": [m.extra.pop("warm", None) for m in models],
                            "seeds": [int(s) for s in seeds]}
        return models

    def _nystroem_full_rows(self, X, sw, spec, problems, seed):
        """(map, features) of the Nyström path for the sub-problems on all rows (two classes,
        one-vs-rest), made once per fit so that they share their landmarks (and, through
        :meth:`_fit_shared`, once per fold of a search when ``random_state`` is fixed); None
        when no such sub-problem takes the Nyström path."""
        if not any(rows is None for rows, _, _ in problems):
            return None
        n_comp = (approximation_components(self, spec, X.shape[0])
                  or self._tried_components(spec, self._exact_rows(spec, X)))
        if n_comp is None:
            return None
        auto = getattr(self, "kernel_approximation", None) == "auto"  # the count depends on the weights
        key = (spec, n_comp, getattr(self, "landmarks", "uniform"), seed, auto, None if sw is None else sw.tobytes())
        return self._fit_shared("nystroem", key, lambda: self._nystroem_features(spec, X, sw, n_comp, seed), X)

    def _nystroem_features(self, spec, X, sw, n_comp, seed):
        """(map, features of X, the share of the kernel's trace they leave out) for ``n_comp``
        landmarks of X drawn by ``self.landmarks``; under ``kernel_approximation="auto"`` for the
        fewest of :data:`AUTO_FEWER` below ``n_comp`` that leave at most :data:`AUTO_NEAR_EXACT`
        out where there are such (kernels whose share measures the landmarks' model)."""
        kind = getattr(self, "landmarks", "uniform")
        nmap = None
        if getattr(self, "kernel_approximation", None) == "auto" and self._share_measures(spec):
            fewer = [k for k in AUTO_FEWER if k < n_comp]
            nmap = fewest_landmarks(spec, X, fewer, AUTO_NEAR_EXACT, seed, landmarks=kind, sample_weight=sw)
        if nmap is None:
            nmap = nystroem_map(spec, X, n_comp, seed, landmarks=kind, sample_weight=sw)
        Z = nmap.transform(spec, X, X)
        return nmap, Z, NystroemMap.residual(spec, X, Z, sw)

    def _warn_approximation(self, fits):
        """After the sub-problems: warn when ``kernel_approximation="auto"`` left a large share
        of the kernel's trace out of one of them (``fits``: (landmarks, rows, share) of each
        sub-problem on the Nyström path, None for the others); see :data:`WARN_RESIDUAL`."""
        fits = [f for f in fits if f is not None]
        if getattr(self, "kernel_approximation", None) != "auto" or not fits:
            return
        worst = max(fits, key=lambda f: f[2])
        if worst[2] > WARN_RESIDUAL:
            warn_approximation(self, *worst, len(fits), exact_kernel_mib(self, max(f[1] for f in fits)))

    def _solve_binary(self, problem: BinaryProblem, full=None) -> BinaryModel:
        """``_fit_binary(problem)``, or, with ``kernel_approximation``, the method's linear path
        on Nyström features of the sub-problem's rows (``full``, shared, for sub-problems on all
        rows), returned as the kernel expansion over its landmarks (the same objective with K
        replaced by its Nyström approximation)."""
        X = problem.X
        n_comp = approximation_components(self, problem.kernel, X.shape[0])
        if n_comp is None:
            merged = self._distinct_pairs(problem)
            nys = self._near_exact_features(problem, merged, full)
            if nys is None:
                return self._fit_binary(problem) if merged is None else self._fit_distinct(problem, merged)
            nmap, Z, left = nys
            why = (f"; the landmarks capture the kernel, and the exact path is slow beyond "
                   f"{self._auto_landmark_rows} rows")
        else:
            nmap, Z, left = self._sub_problem_features(problem, n_comp, full)
            why = "" if self.kernel_approximation != "auto" else (
                f"; the exact path's {self._exact_kernel_arrays} m x m array(s) would exceed "
                f"{self._auto_budget_mib():g} MiB")
        get_logger(getattr(self, "verbose", 0)).info(
            "%s: Nyström approximation with %d landmarks of %d rows (kernel_approximation=%r%s), leaving "
            "%.1f %% of the kernel's trace on these rows out", type(self).__name__, nmap.landmarks.size, X.shape[0],
            self.kernel_approximation, why, 100.0 * left)
        model = self._fit_binary(replace(problem, X=Z, kernel=LINEAR_KERNEL, warm=None, shared=None, parent=None))
        # a method that solved the linear problem in its dual form returns w = Z^T a
        w = model.coef if model.coef is not None else Z.T @ model.dual_coef
        model.extra["nystroem"] = (nmap.landmarks.size, X.shape[0], left)
        return replace(model, coef=None, dual_coef=nmap.dual_coef(w, X.shape[0]), norm_sq=None)

    def _sub_problem_features(self, problem: BinaryProblem, n_comp, full):
        """(map, features, share left out) of a sub-problem: ``full`` for one on all rows."""
        if problem.rows is None and full is not None:
            return full
        return self._nystroem_features(problem.kernel, problem.X, problem.sample_weight, n_comp, problem.seed)

    def _exact_rows(self, kernel, X, y=None) -> int:
        """The rows that an exact kernel path solves, as far as they decide whether landmarks
        are tried: X's distinct (x, y) pairs (y None: its distinct rows, a lower bound of the
        pairs of any sub-problem on them) where :meth:`_tried_components` would try landmarks
        on all of X's rows, else X's rows."""
        m = X.shape[0]
        if self._tried_components(kernel, m) is None:
            return m
        repeats = repeated_rows(kernel, X, np.zeros(m) if y is None else y, np.ones(m))
        return m if repeats is None else repeats[0].size

    def _tried_components(self, kernel, m_exact) -> int | None:
        """The most landmarks that ``kernel_approximation="auto"`` tries (fewer first, see
        :meth:`_nystroem_features`) where the exact path fits its budget but runs on more than
        ``_auto_landmark_rows`` rows (``m_exact``), else None. Only where the share of the trace
        left out measures how close the landmarks' model is (:meth:`_share_measures`): with the
        other kernels the landmarks' Gram matrix is clipped to its positive part, so they stay
        exact within the budget."""
        limit = self._auto_landmark_rows
        if (limit is None or getattr(self, "kernel_approximation", None) != "auto"
                or not self._share_measures(kernel) or m_exact <= limit):
            return None
        return AUTO_COMPONENTS

    @staticmethod
    def _share_measures(kernel) -> bool:
        """Whether the share of the kernel's trace that landmarks leave out measures how close
        their model is: the built-in positive semi-definite kernels (not sigmoid, poly with
        coef0 < 0, a callable or a precomputed one)."""
        return kernel is not None and not kernel.is_linear and builtin_psd(kernel)

    def _near_exact_features(self, problem: BinaryProblem, merged, full):
        """(map, features, share left out) of :meth:`_tried_components` landmarks where they
        leave at most :data:`AUTO_NEAR_EXACT` of the kernel's trace on the sub-problem's rows
        out, else None (the exact path, which the log then names with the share). The rows
        that decide are those of the exact path: distinct (x, y) pairs (``merged``, else
        counted), which an exact kernel path solves as one row each.

        Such landmarks span the rows' feature vectors up to a small distance, so the model on
        them is close to the exact one: the fewest of :data:`AUTO_FEWER` that do, else
        :data:`AUTO_COMPONENTS` (how close, measured: at those constants)."""
        m_exact = merged[0].shape[0] if merged is not None else self._exact_rows(problem.kernel, problem.X, problem.y)
        n_comp = self._tried_components(problem.kernel, m_exact)
        if n_comp is None:
            return None
        nys = self._sub_problem_features(problem, n_comp, full)
        if nys[2] <= AUTO_NEAR_EXACT:
            return nys
        get_logger(getattr(self, "verbose", 0)).info(
            "%s: the exact kernel path on %d rows (kernel_approximation='auto': %d landmarks would leave %.1f %% "
            "of the kernel's trace out)", type(self).__name__, m_exact, nys[0].landmarks.size, 100.0 * nys[2])
        return None

    def _distinct_pairs(self, problem: BinaryProblem):
        """(X_u, first, inverse, s_u) of the distinct pairs (x_i, y_i) of a sub-problem on the
        exact kernel path of an estimator with ``_weights_are_copies``, when they are at most
        :data:`DISTINCT_MAX_FRACTION` of its rows (X_u = X[first], X_u[inverse] = X, s_u the
        summed weights); else None. Shared by the grid points of a search, like the set-up
        made from X_u (:meth:`_fit_shared`)."""
        X, y, s, kernel = problem.X, problem.y, problem.sample_weight, problem.kernel
        if not self._weights_are_copies or kernel is None or kernel.is_linear:
            return None

        def make():
            merged = repeated_rows(kernel, X, y, s)
            if merged is None or merged[0].size > DISTINCT_MAX_FRACTION * X.shape[0]:
                return None
            first, inverse, s_u = merged
            return X[first], first, inverse, s_u

        merged = self._fit_shared("distinct pairs", (y.tobytes(), s.tobytes()), make, X)
        return merged if merged is not None and self._solves_distinct(problem, merged[0]) else None

    def _solves_distinct(self, problem: BinaryProblem, X_u) -> bool:
        """Whether a ``_weights_are_copies`` method takes the sub-problem on its distinct rows
        ``X_u``: a method refuses where its solver for those rows converges badly on the
        summed weights."""
        return True

    def _fit_distinct(self, problem: BinaryProblem, merged) -> BinaryModel:
        """``_fit_binary`` on the distinct pairs with their weights summed (the same decision
        function: a weight k is k copies of a sample), its dual coefficients shared out to the
        copies of each pair in proportion to their weights."""
        X_u, first, inverse, s_u = merged
        get_logger(getattr(self, "verbose", 0)).info(
            "%s: %d distinct (x, y) pairs of %d rows, solved with their weights summed", type(self).__name__,
            first.size, problem.X.shape[0])
        rows = None if problem.rows is None else problem.rows[first]
        model = self._fit_binary(replace(problem, X=X_u, y=problem.y[first], sample_weight=s_u, shared=None,
                                         rows=rows))
        if model.dual_coef is None:
            return model
        return replace(model, dual_coef=split_coefficients(model.dual_coef, problem.sample_weight, s_u, inverse))

    # ------------------------------------------------------------------ streaming
    def _partial_fit_binary(self, problem: BinaryProblem) -> BinaryModel:  # pragma: no cover
        """The per-method step of :meth:`_partial_fit` on one sub-problem: continue from
        ``problem.warm`` (None: start afresh) on the batch and return the model, with the state
        to continue from next time in ``extra["warm"]``."""
        raise NotImplementedError

    def _stream_states(self, X, problems):
        """The per-sub-problem states that ``partial_fit`` continues from, or None to start
        afresh: by default those of the last ``fit`` or ``partial_fit`` when
        ``_warm_key(X, None, problems)`` matches their key."""
        prev = getattr(self, "_warm_state", None)
        if prev is None or prev["key"] != self._warm_key(X, None, problems):
            return None
        return prev["states"]

    def _stream_seeds(self, n_problems, restart: bool):
        """Seeds of the sub-problems of one ``partial_fit`` call: by default ints drawn from
        ``random_state`` when the stream (re)starts (the same draw as ``fit``'s), else those
        kept with the states it continues."""
        if not restart:
            return self._warm_state["seeds"]
        seeds = check_random_state(getattr(self, "random_state", None)).randint(0, 2**31 - 1, size=n_problems)
        return [int(s) for s in seeds]

    def _partial_fit(self, X, y, classes, sample_weight):
        """The shared body of ``partial_fit``: checks (:meth:`_partial_fit_data`), the
        sub-problems of the batch, their states and seeds, one ``_partial_fit_binary`` step
        each, and the fitted attributes. Returns self.

        The states are kept in the same place as ``fit``'s warm-start states, under the key
        ``_warm_key(X, None, problems)``; ``_stream_states`` says which states a call
        continues from (after ``fit``, too), ``_stream_seeds`` which seeds a new state gets,
        ``_stream_multi_class`` which ``multi_class`` strategies are supported.
        """
        first = not hasattr(self, "classes_")
        X, y_index, sw = self._partial_fit_data(X, y, classes, sample_weight, first)
        K = self.classes_.size
        strategy = getattr(self, "multi_class", "ovr")
        if K > 2 and strategy not in self._stream_multi_class:
            allowed = " or ".join(repr(s) for s in self._stream_multi_class)
            raise ValueError(f"partial_fit supports multi_class={allowed} only; got {strategy!r}.")
        problems = self._binary_problems(y_index, K)
        states = None if first else self._stream_states(X, problems)
        seeds = self._stream_seeds(len(problems), restart=states is None)
        states = states if states is not None else [None] * len(problems)
        models = [self._partial_fit_binary(self._problem(X, sw, None, problem, states[p], None, seeds[p]))
                  for p, problem in enumerate(problems)]
        self._warm_state = {"key": self._warm_key(X, None, problems),
                            "states": [m.extra.pop("warm", None) for m in models], "seeds": seeds}
        self.shape_fit_ = X.shape
        self._assemble(X, models, problems, None, None)
        return self

    def _assemble(self, X, models, problems, spec, keep):
        """Store fitted state of all sub-problems in scikit-learn's attribute layout."""
        P = len(models)
        self.problems_ = [cls for _, _, cls in problems]
        self.n_iter_ = models[0].n_iter if P == 1 else np.array([m.n_iter for m in models])
        self._set_extra([m.extra for m in models])
        intercept = np.array([m.intercept for m in models], dtype=np.float64)
        if models[0].coef is not None:
            self._drop_attributes(_KERNEL_ATTRIBUTES)
            coef = np.vstack([np.asarray(m.coef).ravel() for m in models])
            _check_finite_model(self, coef, intercept)
            self.coef_ = coef.astype(X.dtype, copy=False) if X.dtype == np.float32 else coef
            self.intercept_ = intercept.astype(self.coef_.dtype)
            self.weight_norm_ = np.linalg.norm(self.coef_.astype(np.float64), axis=1)
            self._kernel_fit_ = None
            return
        # kernel expansion: map each problem's dual coefficients to global training rows
        self._drop_attributes(_LINEAR_ATTRIBUTES)
        m = X.shape[0]
        full = np.zeros((P, m))
        for p, (model, (rows, _, _)) in enumerate(zip(models, problems)):
            dc = np.asarray(model.dual_coef, dtype=np.float64).ravel()
            if rows is None:
                full[p] = dc
            else:
                full[p, rows] = dc
        _check_finite_model(self, full, intercept)
        support = np.flatnonzero(np.any(full != 0, axis=0))
        self.dual_coef_ = full[:, support]
        self.intercept_ = intercept
        self._kernel_fit_ = spec
        self.support_vectors_ = np.empty((0, 0)) if self._pairwise() else X[support]
        if all(model.norm_sq is not None for model in models):  # known to the solvers
            norm_sq = np.array([model.norm_sq for model in models], dtype=np.float64)
        else:
            norm_sq = self._expansion_norm_sq(spec, X, support)
        self.weight_norm_ = np.sqrt(np.maximum(norm_sq, 0.0))
        # indices into the X given to fit (before weight-0 rows were dropped)
        self.support_ = support if keep is None else keep[support]
        self.n_support_ = np.array([np.count_nonzero(full[p]) for p in range(P)])

    def _expansion_norm_sq(self, spec, X, support):
        """Squared RKHS norms of the fitted expansions ``dual_coef_`` over the rows ``support``
        of X. Fits whose grid points share set-up (:meth:`_fit_shared`) read the kernel values
        from one Gram matrix of the fold's rows, made once per kernel when it fits in
        ``cache_size``; other fits evaluate the kernel on the support vectors."""
        coef = self.dual_coef_.T
        m = X.shape[0]
        budget = getattr(self, "cache_size", 200) * 2**20
        if self._pairwise():
            G = X
        elif self._shares_set_up(X) and 8 * m * m <= budget:
            G = self._fit_shared("gram", spec, lambda: kernel_matrix(spec, X), X)
        else:
            return rkhs_norm_sq(spec, self.support_vectors_, coef)
        return rkhs_norm_sq(KernelSpec("precomputed"), G[np.ix_(support, support)], coef)

    def _raw_decision_from_block(self, K) -> np.ndarray:
        """:meth:`_raw_decision_validated` of rows X of a kernel model from ``K = K(X, X_fit)``,
        the kernel block against every row of the data given to :meth:`fit` (a search fold
        computes it once per kernel and scores every grid point's model from it)."""
        return K[:, self.support_] @ self.dual_coef_.T + self.intercept_

    def _drop_attributes(self, names):
        """Forget fitted attributes of the other model family (e.g. after a kernel change)."""
        for name in names:
            self.__dict__.pop(name, None)

    def _set_extra(self, extras):
        """Hook: a subclass turns per-problem ``BinaryModel.extra`` dicts into attributes."""

    # ------------------------------------------------------------------ predict
    def _raw_decision(self, X) -> np.ndarray:
        """Decision values of every sub-problem, shape (n, P)."""
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        self._check_pairwise_shape(X, fit=False)
        return self._raw_decision_validated(X)

    def _raw_decision_validated(self, X) -> np.ndarray:
        """:meth:`_raw_decision` of X already validated for this model."""
        if getattr(self, "_kernel_fit_", None) is None:
            D = X @ self.coef_.T
            return np.asarray(D, dtype=np.float64) + self.intercept_
        if self._pairwise():
            return np.asarray(X[:, self.support_] @ self.dual_coef_.T) + self.intercept_
        return kernel_decision(self._kernel_fit_, X, self.support_vectors_, self.dual_coef_.T) + self.intercept_

    def decision_function(self, X) -> np.ndarray:
        """Decision values: shape (n,) for two classes (positive means ``classes_[1]``), else
        (n, K) with one column per class (argmax is the prediction)."""
        return self._decision(self._raw_decision(X))

    def _decision_validated(self, X) -> np.ndarray:
        """:meth:`decision_function` of X already validated for this model."""
        return self._decision(self._raw_decision_validated(X))

    def _decision(self, D) -> np.ndarray:
        """Decision values from the sub-problems' raw values ``D`` (n, P)."""
        K = self.classes_.size
        if self._native_multiclass:
            return D[:, 1] - D[:, 0] if K == 2 else D
        if K == 2:
            return D[:, 0]
        if self.problems_[0][0] is not None:
            return _ovo_decision(D, self.problems_, K)
        return D

    def predict(self, X) -> np.ndarray:
        """Predicted class labels, consistent with :meth:`decision_function`."""
        return self._labels(self.decision_function(X))

    def _labels(self, D) -> np.ndarray:
        """Class labels from decision values (the sign for two classes, else the argmax)."""
        if D.ndim == 1:
            return self.classes_[(D > 0).astype(int)]
        return self.classes_[np.argmax(D, axis=1)]

    def margins(self, X, y) -> np.ndarray:
        """Normalised margins of the labelled examples (X, y).

        Binary: y_i f(x_i) / ||w||, with y_i = +1 for ``classes_[1]`` and ||w|` the Euclidean
        norm of ``coef_`` (linear) or the RKHS norm of the kernel expansion (the intercept is
        not part of the norm). Multi-class one-vs-rest: the normalised score of the true class
        minus the best other normalised score; one-vs-one: the smallest normalised margin of
        the pairwise classifiers that involve the true class. Native multi-class models
        (one weight vector per class): the smallest pairwise margin
        min_{k != y} ((w_y - w_k)^T x + b_y - b_k) / ||w_y - w_k|| (for two classes the binary
        margin of w_1 - w_0). Negative margins are errors.
        """
        D = self._raw_decision(X)
        y_index = label_index(self, y, D.shape[0])
        if self._native_multiclass:
            return self._native_margins(D, y_index)
        D = D / np.where(self.weight_norm_ > 0, self.weight_norm_, 1.0)
        if self.classes_.size == 2:
            return np.where(y_index == 1, 1.0, -1.0) * D[:, 0]
        return self._multiclass_margins(D, y_index)

    def _native_margins(self, D, y_index):
        W = np.asarray(self.coef_, dtype=np.float64)
        sq = np.einsum("ij,ij->i", W, W)
        pair_norm = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * W @ W.T, 0.0))
        pair_norm[pair_norm == 0] = 1.0
        rows = np.arange(D.shape[0])
        out = np.full(D.shape[0], np.inf)
        for k in range(W.shape[0]):
            pair = (D[rows, y_index] - D[:, k]) / pair_norm[y_index, k]
            out = np.where(y_index == k, out, np.minimum(out, pair))
        return out

    def _multiclass_margins(self, D, y_index):
        if self.problems_[0][0] is None:  # ovr
            return multiclass_margins(D, y_index)
        return pairwise_margins(D, self.problems_, y_index)  # pair (k, l): positive means class l
