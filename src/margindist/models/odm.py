"""ODM: the Optimal margin Distribution Machine (Zhang & Zhou, TKDE 2019)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions

from .._base import BaseMarginClassifier, BinaryModel, get_logger
from .._defaults import odm_lam
from .._params import (
    CACHE_SIZE,
    KERNEL_APPROXIMATION,
    KERNEL_PARAMS,
    LANDMARKS,
    MULTICLASS_PARAMS,
    POSITIVE,
    RANDOM_STATE,
    VERBOSE,
)
from ..solvers.odm import odm_dcd_kernel, odm_dcd_linear, odm_newton, odm_svrg

#: ODM takes the distinct (x, y) pairs of a kernel sub-problem when they are at most this fraction
#: of its rows (the base rule allows three quarters): its DCD needs more epochs on unequal
#: weights, and on 5000 rows of magic with repeats the merged fit was slower at half distinct
#: pairs (0.66 s against 0.53 s) and faster from 0.4 down (0.33 s against 0.54 s). The epochs
#: follow the weakest diagonal term D_k = 1 / (2 c_k), c_k proportional to the weight: a
#: merged pair of weight k has D / k where its k copies each keep D (docs/methods/odm.md).
DISTINCT_MAX_FRACTION = 0.4


def _fit_length(a, n):
    """Warm-start vector a resized to n variables (alpha kept, beta dropped or zero-padded)."""
    if a is None:
        return None
    if a.shape[0] == n:
        return a
    if 2 * a.shape[0] == n:
        return np.concatenate([a, np.zeros_like(a)])
    if a.shape[0] == 2 * n:
        return a[:n]
    return None


class ODM(BaseMarginClassifier):
    """Optimal margin Distribution Machine.

    Minimises, in the convention of the reference package LIBODM (so the same ``lam`` gives
    the same w on the same data)::

        1/2 ||w||^2 + kappa / m * sum_i [ (1 - theta - z_i)_+^2 + mu (z_i - 1 - theta)_+^2 ],
        kappa = lam / (1 - theta)^2,   z_i = y_i f(x_i),

    i.e. margins inside the band [1 - theta, 1 + theta] cost nothing, smaller margins are
    penalised quadratically and larger ones with weight mu: the margin mean is pushed to about
    1 while the spread around it is kept small. Some slides of the paper write lambda / (2 m)
    for kappa / m: their lambda is twice this ``lam``. With sample weights s_i the 1/m becomes
    s_i / S (S = sum s): a weight k is exactly k copies of a sample.

    The intercept is a regularised constant feature of value 1 (LIBODM's ``-b``; an
    unregularised bias would add an equality constraint to the dual): ``intercept_`` is
    that feature's weight, and it enters ||w||^2.

    Parameters
    ----------
    lam : float or "auto", default="auto"
        Paper lambda (LIBODM ``-l``): weight of the loss; larger fits the data harder.
        ``"auto"``: ``lam = S (1 - theta)^2`` with S = sum of the sample weights (n_samples
        for unit weights), the value at which ODM's loss weight equals LinearSVC's default
        C = 1 on the summed squared hinge: in the rescaled weights w / (1 - theta) the
        objective is a squared-hinge SVM with C = lam / ((1 - theta)^2 S) (see
        :func:`margindist._defaults.odm_lam`). The loss weight so grows with the data as in an
        SVM; LIBODM's default ``lam=1`` (the paper's, C = 1 / m) drives w towards 0 as m grows
        and stays available explicitly.
    mu : float in [0, 1], default=0.8
        Paper mu: weight of the margins above the band. mu = 0 leaves them free (one dual
        variable per sample).
    theta : float in [0, 1), default=0.2
        Paper theta: half-width of the zero-loss band around margin 1.
    kernel : {"linear", "rbf", "poly", "sigmoid", "precomputed"} or callable, default="linear"
        Kernel: scikit-learn's names and definitions, ``"precomputed"`` (X is a Gram
        matrix) or a callable ``k(X, Z)`` returning an (n, m) array.
    gamma : {"scale", "auto"} or float, default="scale"
        Coefficient of the ``"rbf"``, ``"poly"`` and ``"sigmoid"`` kernels (scikit-learn's
        definitions of ``"scale"`` and ``"auto"``).
    degree : int, default=3
        Degree of the ``"poly"`` kernel.
    coef0 : float, default=0.0
        Independent term of the ``"poly"`` and ``"sigmoid"`` kernels.
    kernel_approximation : int, "auto" or None, default=None
        None: the exact kernel model. An int k: the method's own linear solver on the Nyström
        features of k landmark rows of each sub-problem, stored as a kernel expansion over the
        landmarks (the exact model when every row is one). ``"auto"``: exact while the m x m
        Gram matrix fits ``cache_size``, else the fewest of 100, 200, 400 and 700
        landmarks that leave at most 5 % of the kernel's trace out, or 1000. Ignored for the
        linear kernel; not with ``kernel="precomputed"``. See "Kernel approximation" on the
        hyperparameters page.
    landmarks : {"uniform", "kmeans++"}, default="uniform"
        How ``kernel_approximation`` draws its landmarks (with ``random_state``): uniformly,
        or by k-means++ seeding in the input space, weighted by the sample weights.
    solver : {"auto", "dcd", "newton", "svrg"}, default="auto"
        * ``"dcd"``: dual coordinate descent (linear: O(nnz(x_i)) per step, w maintained;
          kernel: kernel columns on demand from an LRU cache of ``cache_size`` MiB). Stops
          when the spread of the projected dual gradient is below ``tol`` (margin units).
          With a kernel on at most 1000 examples (matrix cached), a DCD still running after
          20 epochs hands over to an active-set Newton method on the expansion coefficients
          and then certifies its solution (large lam with a wide kernel no longer creeps).
        * ``"newton"`` (linear only): Newton-CG on the primal with an exact line search, each
          gradient / Hessian-vector product O(nnz(X)). Stops at
          ||grad|| <= tol * ||grad at w = 0||.
        * ``"svrg"`` (linear only): SVRG with step 1 / (4 L_max) from the smoothness
          constants L_i = 1 + 2 kappa max(1, mu) ||x_i||^2; same stopping rule as Newton.
          Raises FloatingPointError if the weights become non-finite.
        * ``"auto"``: kernels -> ``"dcd"``; linear -> ``"newton"`` when there are more
          samples than features, else ``"dcd"`` (the rule of scikit-learn's LinearSVC
          ``dual="auto"``). In ``benchmarks/bench_odm_ldm.py`` Newton was 3-5x faster than
          DCD on dense 100k x 100 and sparse 200k x 50k data at lam = 1, and more than 100x
          faster at lam = m (weak regularisation), where the dual is badly conditioned.
    tol : float, default=1e-3
        Stopping tolerance; ``solver`` describes each solver's rule.
    max_iter : int, default=1000
        Epochs (dcd, svrg) or Newton iterations; a ConvergenceWarning names the remedy.
    fit_intercept : bool, default=True
        Append the constant feature.
    cache_size : float, default=200
        MiB for the kernel (DCD): if the m x m Gram matrix fits, it is evaluated once in
        blocks; otherwise kernel rows are computed on demand into an LRU cache of this size.
        No m x m matrix beyond this budget is formed. Rows are stored in float32 (as in
        LIBSVM: twice the rows per MiB, half the memory traffic; sums stay float64) unless
        ``tol`` < 1e-5, where float64 keeps the solution exact to rounding. The kernel DCD is
        fastest when the whole matrix fits (4 m^2 bytes in float32, e.g. 1.6 GB at m = 20000):
        every sweep visits all support vectors, so with a smaller budget the rows beyond it
        are recomputed in every sweep (float32 RBF rows only where the dual is not zero and
        outside the cached rows, whose part of the products is kept; the slots of samples
        that shrinking sets aside take rows of the active ones).
    warm_start : bool, default=False
        Start from the previous fit's dual variables (dcd) or weights (newton, svrg) when the
        number of samples and sub-problems is unchanged. A refit on the same data then stops
        after one epoch.
    class_weight : dict or "balanced", default=None
        Multiplies the sample weights per class; ``"balanced"`` uses
        n_samples / (n_classes * np.bincount(y)).
    multi_class : {"ovr", "ovo"}, default="ovo"
        Reduction used for more than two classes: one-vs-one (SVC's choice; K (K - 1) / 2
        sub-problems of about 2 m / K rows) or one-vs-rest. Why one-vs-one is the default:
        the "Defaults" table of the hyperparameters page.
    n_jobs : int, default=None
        Parallel sub-problems for more than two classes.
    random_state : int, RandomState or None, default=None
        Order of the coordinates (dcd) and samples (svrg).
    verbose : int, default=0
        Log solver progress through the ``margindist`` logger (never prints).
    device : {"auto", "cpu", "cuda"} or None, default=None
        Computes the kernel blocks through PyTorch on this device ("auto": the GPU when torch
        sees one, else NumPy); None: NumPy and numba. The same model to float64 rounding, with
        NumPy fitted state. See "Kernels on a GPU" on the hyperparameters page.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels.
    coef_ : ndarray of shape (n_problems, n_features)
        Weight vectors (linear kernel only). n_problems is 1 for two classes, else the number
        of one-vs-rest or one-vs-one sub-problems.
    intercept_ : ndarray of shape (n_problems,)
        Weight of the constant feature (linear), or sum_j ``dual_coef_[j]`` (kernel).
    dual_coef_ : ndarray of shape (n_problems, n_SV)
        y_i gamma_i of the support vectors: f(x) = sum_j dual_coef_j k(x_j, x) + b with
        b = ``intercept_`` (kernels other than linear).
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors in the training data (kernel models).
    support_vectors_ : ndarray of shape (n_SV, n_features)
        The support vectors (kernel models; empty for ``kernel="precomputed"``).
    n_support_ : ndarray of shape (n_problems,)
        Number of support vectors of each sub-problem (kernel models).
    weight_norm_ : ndarray of shape (n_problems,)
        ||w||, the Euclidean norm of ``coef_`` or the RKHS norm of the kernel expansion; the
        normaliser of :meth:`margins`.
    n_iter_ : int or ndarray of shape (n_problems,)
        Epochs (dcd, svrg) or Newton iterations (per sub-problem for more than two classes).
    problems_ : list of tuple
        One (negative class, positive class) pair of indices into ``classes_`` per
        sub-problem (the negative is None for "the rest" of one-vs-rest): ``[(0, 1)]`` for
        two classes, else one entry per one-vs-rest or one-vs-one sub-problem.
    n_features_in_ : int
        Number of features seen during :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during :meth:`fit` (only when X has string column names).

    See Also
    --------
    LDM : The predecessor: margin mean and variance with a hinge loss.
    MSVMAv : Average margin and semi-variance on the unit sphere.
    sklearn.svm.LinearSVC : ODM with ``theta = mu = 0`` is its squared hinge with C = lam / m.

    References
    ----------
    .. [1] T. Zhang and Z.-H. Zhou, "Optimal margin distribution machine", IEEE Transactions on
       Knowledge and Data Engineering, 32(6):1143-1156, 2019.
    .. [2] T. Zhang and Z.-H. Zhou, "Large margin distribution machine", KDD 2014.

    Examples
    --------
    >>> from margindist import ODM, load_dataset
    >>> from sklearn.preprocessing import MinMaxScaler
    >>> X, y = load_dataset("australian")
    >>> X = MinMaxScaler().fit_transform(X)
    >>> ODM(lam=1.0, mu=0.8, theta=0.2).fit(X, y).score(X, y) > 0.8
    True
    """

    @property
    def _expected_failed_checks(self):
        checks = {
            "check_sample_weight_equivalence_on_dense_data": (
                "The weighted and the duplicated problems have the same optimum (tested to 1e-8 in "
                "tests/test_odm.py with a tight tol), but the iterative solver stops at tol on "
                "different paths, so predictions agree only to about tol."
            ),
            "check_sample_weight_equivalence_on_sparse_data": (
                "Same optimum as the duplicated problem; the iterative solver stops at tol on "
                "different paths (see the dense check)."
            ),
        }
        if self.kernel == "precomputed":
            checks["check_positive_only_tag_during_fit"] = (
                "The check fits a centred Gram matrix, which is indefinite: ODM's dual is then "
                "unbounded below and has no solution, so the fit raises a FloatingPointError "
                "instead of returning a NaN model (any positive semi-definite kernel works)."
            )
        return checks

    _weights_are_copies = True  # repeated (x, y) pairs: solved on the distinct ones (docs: Sample weights)

    _parameter_constraints = {
        "lam": [*POSITIVE, StrOptions({"auto"})],
        "mu": [Interval(Real, 0, 1, closed="both")],
        "theta": [Interval(Real, 0, 1, closed="left")],
        **KERNEL_PARAMS,
        "kernel_approximation": KERNEL_APPROXIMATION,
        "landmarks": LANDMARKS,
        "solver": [StrOptions({"auto", "dcd", "newton", "svrg"})],
        "tol": POSITIVE,
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "fit_intercept": ["boolean"],
        "cache_size": CACHE_SIZE,
        "warm_start": ["boolean"],
        **MULTICLASS_PARAMS,
        "random_state": RANDOM_STATE,
        "verbose": VERBOSE,
    }

    def __init__(self, lam="auto", mu=0.8, theta=0.2, kernel="linear", gamma="scale", degree=3, coef0=0.0,
                 kernel_approximation=None, landmarks="uniform", solver="auto", tol=1e-3, max_iter=1000, fit_intercept=True, cache_size=200,
                 warm_start=False, class_weight=None, multi_class="ovo", n_jobs=None, random_state=None,
                 verbose=0, device=None):
        self.lam = lam
        self.mu = mu
        self.theta = theta
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_approximation = kernel_approximation
        self.landmarks = landmarks
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.fit_intercept = fit_intercept
        self.cache_size = cache_size
        self.warm_start = warm_start
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.device = device

    def _resolve_solver(self, X, kernel):
        solver = self.solver
        if not kernel.is_linear:
            if solver in ("newton", "svrg"):
                raise ValueError(
                    f"solver={solver!r} works on the linear primal only; use solver='dcd' (or "
                    f"'auto') for kernel={self.kernel!r}."
                )
            return "dcd"
        if solver == "auto":
            m, d = X.shape
            return "newton" if m > d else "dcd"
        return solver

    def _factorised_order(self, X, spec):
        return X.shape[1]  # DCD on cached kernel rows; nothing of order m is factorised

    def _shared_setup(self, X, sample_weight, kernel):
        if kernel.is_linear:
            return None
        return self._kernel_source(X, kernel)

    def _solves_distinct(self, problem, X_u):
        return X_u.shape[0] <= DISTINCT_MAX_FRACTION * problem.X.shape[0]

    def _fit_binary(self, problem):
        X, y, sample_weight, kernel = problem.X, problem.y, problem.sample_weight, problem.kernel
        warm, shared, seed = problem.warm, problem.shared, problem.seed
        log = get_logger(self.verbose)
        B = 1.0 if self.fit_intercept else 0.0
        lam, mu, theta = odm_lam(self.lam, sample_weight, self.theta), float(self.mu), float(self.theta)
        solver = self._resolve_solver(X, kernel)
        m = X.shape[0]
        n_var = 2 * m if mu > 0 else m
        warm = warm or {}
        if kernel.is_linear:
            log.info("ODM linear, solver=%s, m=%d d=%d sparse=%s", solver, m, X.shape[1], sp.issparse(X))
            if solver == "dcd":
                w, b, a, n_iter = odm_dcd_linear(X, y, sample_weight, lam, mu, theta, bias=B, tol=self.tol,
                                                 max_iter=self.max_iter, a0=_fit_length(warm.get("a"), n_var),
                                                 random_state=seed)
                state = {"a": a, "v": np.append(w, b / B if B else 0.0)}
            elif solver == "newton":
                w, b, n_iter = odm_newton(X, y, sample_weight, lam, mu, theta, bias=B, tol=self.tol,
                                          max_iter=self.max_iter, w0=warm.get("v"), log=log)
                state = {"v": np.append(w, b / B if B else 0.0)}
            else:
                w, b, n_iter = odm_svrg(X, y, sample_weight, lam, mu, theta, bias=B, tol=self.tol,
                                        max_iter=self.max_iter, w0=warm.get("v"), random_state=seed, log=log)
                state = {"v": np.append(w, b / B if B else 0.0)}
            log.info("ODM: %d iterations", n_iter)
            return BinaryModel(coef=w, intercept=b, n_iter=n_iter, extra={"warm": state})
        cache = shared if shared is not None else self._kernel_source(X, kernel, problem)
        log.info("ODM kernel=%s, dcd, m=%d, %s rows (%s) of %d cached", kernel.kind, m, cache.n_slots,
                 cache.dtype, m)
        a0 = _fit_length(warm.get("a"), n_var)
        # a warm start from a problem that needed the Newton phase with a loss weight kappa no
        # larger (the last point of a grid's path of growing lam) hands over to it after two
        # epochs: the DCD creeps at least as much here
        kappa = lam / (1.0 - theta) ** 2
        soon = a0 is not None and warm.get("newton_kappa") is not None and kappa >= warm["newton_kappa"]
        res = odm_dcd_kernel(cache, y, sample_weight, lam, mu, theta, bias=B, tol=self.tol, max_iter=self.max_iter,
                             a0=a0, random_state=seed, newton="soon" if soon else True)
        log.info("ODM: %d epochs%s, cache hits %d misses %d", res.n_iter, " and the Newton phase" if res.newton else "",
                 cache.hits, cache.misses)
        coef = res.dual_coef
        # ||f||^2 = coef^T K coef from u = Q gamma = Y (K coef + B^2 sum(coef)): no kernel evaluations
        norm_sq = float((y * coef) @ res.u - B * B * coef.sum() ** 2)
        return BinaryModel(dual_coef=coef, intercept=res.b, n_iter=res.n_iter,
                           extra={"warm": {"a": res.a, "newton_kappa": kappa if res.newton else None}},
                           norm_sq=norm_sq)
