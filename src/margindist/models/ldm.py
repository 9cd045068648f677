"""LDM: the Large margin Distribution Machine (Zhang & Zhou, KDD 2014)."""

from __future__ import annotations

from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if

from .._base import BaseMarginClassifier, BinaryModel, approximation_components, get_logger
from .._params import (
    CACHE_SIZE,
    KERNEL_APPROXIMATION,
    KERNEL_PARAMS,
    LANDMARKS,
    MULTICLASS_PARAMS,
    NON_NEGATIVE,
    POSITIVE,
    RANDOM_STATE,
    VERBOSE,
)
from ..kernels import kernel_diag, kernel_matrix
from ..solvers.ldm import (
    ASGDState,
    LDMKernelBase,
    LDMLinearFactor,
    ldm_asgd,
    ldm_dcd_kernel,
    ldm_dcd_linear,
)
from ..solvers._gram import wide, xt_dot
from ..solvers.ldm_bcd import ldm_bcd_kernel, ldm_bcd_linear

#: solver="auto" on a linear problem: the dual DCD needs the dense transformed data
#: Z (m x (d + 1) float64) and a (d + 1) x (d + 1) factorisation, and its number of epochs
#: grows with m (an L1-loss dual); above these sizes averaged SGD is used.
_DCD_MAX_FEATURES = 2000
_DCD_MAX_BYTES = 2**30
_DCD_MAX_SAMPLES = 50000

#: Root-mean-square row norms the linear defaults serve (FeatureScaleWarning outside).
_DCD_ROW_RANGE = (1e-1, 1e5)
_ASGD_ROW_RANGE = (1e-1, 1e2)

#: Epochs of averaged SGD when max_iter is None (the paper's T = 5).
_ASGD_EPOCHS = 5
#: Fewest stochastic steps of averaged SGD when max_iter is None (more epochs on small data).
_ASGD_MIN_STEPS = 10_000


def _asgd_epochs(m: int) -> int:
    """Default ASGD epochs: the paper's T = 5, or enough for 10^4 steps on fewer than 2000 rows."""
    return max(_ASGD_EPOCHS, -(-_ASGD_MIN_STEPS // max(m, 1)))


#: Epoch cap of DCD when max_iter is None.
_DCD_MAX_ITER = 10000

#: solver="auto", kernel: the factorised "dcd" path where the variance term outweighs the
#: regulariser by more than this (4 lambda1 times the mean of k(x, x) + B^2, an upper bound on
#: the variance block's relative curvature) and the O(m^3) set-up is affordable
#: (:data:`_FACTOR_MAX_SAMPLES`): block coordinate descent needs more rounds as the coupling grows
#: (australian, min-max scaled, linear kernel: 56 epochs at 0.55, 2093 at 280) and does not
#: settle on unscaled features (coupling 1e10).
_BCD_MAX_COUPLING = 64.0
_FACTOR_MAX_SAMPLES = 10000


def _variance_coupling(kernel, X, lambda1, bias):
    """4 lambda1 mean_i (k(x_i, x_i) + B^2): how much the variance term outweighs 1/2 ||w||^2 at most."""
    if kernel.kind == "callable":
        return 0.0  # not evaluated here (one call per row); the iterative path
    return 4.0 * lambda1 * (float(np.mean(kernel_diag(kernel, X))) + bias * bias)


def _linear_only(est):
    return est.kernel == "linear"


class LDM(BaseMarginClassifier):
    """Large margin Distribution Machine.

    Minimises (paper Eq. 5, soft margin)::

        1/2 ||w||^2 + lambda1 vhat - lambda2 zbar + C sum_i xi_i,
        s.t. z_i >= 1 - xi_i, xi_i >= 0,

    with the margins z_i = y_i f(x_i), their mean zbar = (1/m) sum_i z_i and
    vhat = (1/m^2) sum_{i,j} (z_i - z_j)^2 = 2 Var(z) (the paper's definition, twice the
    variance): a large mean margin and a small margin variance, with the hinge for the
    margin errors. With sample weights s_i, the means are weighted (1/m becomes s_i / S,
    S = sum s) and xi_i is weighted by s_i, so a weight k is exactly k copies of a sample.

    The paper has no bias term; ``fit_intercept=True`` appends a constant feature of value 1
    whose weight (``intercept_``) is regularised like the others (an unregularised bias would
    add an equality constraint to the dual).

    Parameters
    ----------
    lambda1 : float >= 0, default=2**-5
        Paper lambda_1, weight of the margin variance vhat. The paper's grid is
        {2^-8, ..., 2^-2}; the default is its midpoint.
    lambda2 : float >= 0, default=2**-5
        Paper lambda_2, weight of the margin mean zbar (same grid, same default).
    C : float > 0, default=1.0
        Paper C, weight of the hinge losses (the paper's kernel grid is {1, 10, 50, 100}).
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
        features of k landmark rows of each sub-problem (``solver="auto"``'s linear choice
        when ``solver="bcd"``), stored as a kernel expansion over the
        landmarks (the exact model when every row is one). ``"auto"``: exact while the m x m
        float64 Gram matrix fits ``cache_size``, else the fewest of 100, 200, 400 and 700
        landmarks that leave at most 5 % of the kernel's trace out, or 1000. Ignored for the
        linear kernel; not with ``kernel="precomputed"``. See "Kernel approximation" on the
        hyperparameters page.
    landmarks : {"uniform", "kmeans++"}, default="uniform"
        How ``kernel_approximation`` draws its landmarks (with ``random_state``): uniformly,
        or by k-means++ seeding in the input space, weighted by the sample weights.
    solver : {"auto", "bcd", "dcd", "asgd"}, default="auto"
        * ``"bcd"``: no m x m set-up. The variance term is a least-squares term
          on the centred margins; with one free multiplier gamma_i per centred margin the dual
          has two blocks, minimised in turn: beta in [0, C s_i] with gamma fixed (an SVM-type
          box QP over Y (K + B^2) Y, LIBSVM-type pair steps on a compact active set with
          kernel rows from the ``cache_size`` cache, warm-started) and gamma with beta fixed (a
          well-conditioned linear system, conjugate gradients with one kernel product per
          iteration). The same minimiser as ``"dcd"``; a few rounds at the usual lambda1
          (magic, RBF, 5000 / 14 000 rows: 0.10 / 0.62-0.72 s at the defaults, 0.23-0.24 /
          1.46-1.93 s at C = 100, against SVC's 0.19-0.20 / 1.67-1.87 s; the factorised
          ``"dcd"`` took 24.4 s at 5000 rows). :mod:`margindist.solvers.ldm_bcd`.
          On the linear kernel it runs on the rows of X X^T for wide problems (below) and
          returns the linear model w = X^T a; on other linear problems on the rows of X
          itself (dense or sparse, never densified: the beta block is LIBLINEAR's dual
          coordinate descent with w kept, the gamma block's products pass over X): the exact
          linear model where ``"dcd"`` needs a dense m x (d + 1) transform (200 000 x 50 000
          sparse rows at the defaults: 3.0-3.7 s, test accuracy .8203, that of
          ``LinearSVC(loss="hinge")`` in 9.0 s; ``"asgd"``'s 5 epochs 0.35 s, .8157).
        * ``"dcd"``, kernel: the dual (paper Eq. 12) with H = Y G A^{-1} Y formed in a stable
          way (one Cholesky factorisation of an m x m positive definite matrix; no
          pseudo-inverse), then dual coordinate descent over beta in [0, C s_i]. Set-up
          O(m^3) time and two m x m arrays: about m = 5000 takes seconds, m = 20000 minutes
          and 6 GiB.
        * ``"dcd"``, linear, m > d: Q_lin = I + c (m X^T X - (X^T y)(X^T y)^T) factored once (Cholesky
          of I + c m X^T X, then a Sherman-Morrison rank-one downdate), the data transformed to
          Z = X L^{-T} (dense, m x (d + 1)) and LIBLINEAR's dual coordinate descent run over
          beta with w maintained (O(d) per step). Set-up O(nnz(X) d + m d^2 + d^3). With at
          most 1000 columns the DCD starts from a Newton solve of the primal with the hinge
          smoothed on [0, delta] (delta down to tol / 2), which it then certifies: large C no
          longer leaves the DCD creeping to its epoch cap (docs/methods/ldm.md). With m <= d
          rows, the kernel dual on X X^T instead (the m x m factorisation is the smaller),
          returned as the linear model.
        * ``"asgd"`` (linear only): averaged SGD on F / (C m) (paper Algorithm 2),
          eta_t = eta0 (1 + lambda3 eta0 t)^(-3/4), lambda3 = 1 / (C m), eta0 by a short trial
          on <= 1000 samples (Bottou's recipe), averaging from step 2 m on; O(nnz) per epoch,
          sparse friendly, ``max_iter`` epochs. The paper's gradient estimates the mean margin
          from a second random sample; here the exact mean zbar = w . mu
          (mu = (1/m) sum_j y_j x_j, maintained in O(1) a step) takes its place: the exact
          expectation over the second sample, so still unbiased, with less variance and one
          row read per step. Gives :meth:`partial_fit`.
        * ``"auto"``: kernel -> ``"bcd"``, unless the variance term outweighs the regulariser
          by more than 64 (4 lambda1 times the mean of k(x, x) + 1: unscaled features) on at
          most 10000 rows, where block coordinate descent needs many rounds: ``"dcd"``.
          Linear, m <= d rows whose Gram rows X X^T cost at most 1e8 multiply-adds (m nnz(X)
          for CSR X, m^2 d dense) -> the kernel rows, with the kernel rule's ``"bcd"`` or
          ``"dcd"`` (cornell's word counts: 0.14 s against averaged SGD's 0.18 s, and the exact
          optimum). Other linear problems -> ``"dcd"`` (exact) if X is dense, n_samples <=
          50000, n_features <= 2000 and its dense working arrays (about three of m x (d + 1))
          take at most 1 GiB, else ``"asgd"`` (the paper's large-scale solver; in the
          benchmarks it matched the DCD solution's test accuracy at 100k samples in a fraction
          of the time), which keeps sparse X sparse: the linear DCD path works on the
          transformed data Z, dense by nature, so an explicit ``solver="dcd"`` on tall sparse
          X builds that dense Z.
    tol : float, default=1e-2
        DCD stops when the spread of the projected dual gradient is below tol (margin units);
        ``"bcd"`` when, in addition, the gradient of the variance multipliers is. The L1-type dual converges slowly (LIBLINEAR's hinge solver also needs thousands of
        epochs for 1e-3 on small data), hence the looser default.
    max_iter : int or None, default=None
        DCD epoch cap (None: 10000; for ``"bcd"``, of each solve of the hinge block; a
        ConvergenceWarning names the remedy), or the number of
        ASGD epochs (None: the paper's T = 5, raised on small data to at least 10^4 steps in
        all, i.e. ceil(10^4 / n_samples) epochs below 2000 samples: five passes over a few
        dozen rows leave the averaged iterate far from the solution).
    fit_intercept : bool, default=True
        Append a constant feature 1 whose (regularised) weight is ``intercept_``.
    cache_size : float, default=200
        MiB of kernel rows for ``solver="bcd"`` (float32 rows, as LIBSVM's cache, unless
        ``tol`` < 1e-5): when the m x m Gram matrix fits, it is computed once in blocks,
        otherwise rows are computed on demand into an LRU cache of this size and the kernel
        products of the gamma block are computed in blocks (slower, but no m x m matrix
        beyond the budget). The pair steps of the beta block keep a further 16 MiB of rows
        restricted to their active variables. Also the budget of
        ``kernel_approximation="auto"``.
    warm_start : bool, default=False
        DCD: start from the previous dual variables (clipped to the new box; with ``"bcd"``
        the variance multipliers too); ASGD: start
        from the previous averaged weights (a new step-size trial, a fresh schedule).
    class_weight : dict or "balanced", default=None
        Multiplies the sample weights per class; ``"balanced"`` uses
        n_samples / (n_classes * np.bincount(y)).
    multi_class : {"ovr", "ovo"}, default="ovo"
        Reduction used for more than two classes: one-vs-one (SVC's choice; K (K - 1) / 2
        sub-problems of about 2 m / K rows) or one-vs-rest. Why one-vs-one is the default:
        the "Defaults" table of the hyperparameters page (letter, 26 classes: 0.82 against
        0.59 one-vs-rest, LinearSVC Crammer-Singer 0.77). :meth:`partial_fit` streams both.
    n_jobs : int, default=None
        Parallel sub-problems (joblib) for more than two classes.
    random_state : int, RandomState or None, default=None
        Coordinate order (dcd); sample order, pairs and the step trial (asgd).
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
        Weight of the constant feature (linear), or sum_j alpha_j (kernel).
    dual_coef_ : ndarray of shape (n_problems, n_SV)
        alpha, dense (every training point has a coefficient): f(x) = sum_j alpha_j
        k(x_j, x) + b, b = ``intercept_`` (kernels other than linear).
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
        DCD epochs or ASGD epochs (per sub-problem for more than two classes).
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
    ODM : The successor: a band of zero loss around margin 1, squared losses.
    MSVMAv : Average margin and semi-variance on the unit sphere.
    sklearn.svm.LinearSVC : LDM with ``lambda1 = lambda2 = 0`` is its hinge loss with the same C.

    Notes
    -----
    The reference code of the paper takes the inverse in H with ``pinv``, leaves the averaging
    constant of its ASGD uninitialised and forces eta0 to 0; none of that is reproduced.

    References
    ----------
    .. [1] T. Zhang and Z.-H. Zhou, "Large margin distribution machine", Proceedings of the
       20th ACM SIGKDD International Conference on Knowledge Discovery and Data Mining
       (KDD), pp. 313-322, 2014.

    Examples
    --------
    >>> from margindist import LDM, load_dataset
    >>> from sklearn.preprocessing import MinMaxScaler
    >>> X, y = load_dataset("australian")
    >>> X = MinMaxScaler().fit_transform(X)
    >>> LDM(lambda1=2**-5, lambda2=2**-5, C=1.0).fit(X, y).score(X, y) > 0.8
    True
    """

    _expected_failed_checks = {
        "check_sample_weight_equivalence_on_dense_data": (
            "The weighted and the duplicated problems have the same optimum (tested to 1e-8 in "
            "tests/test_ldm.py with a tight tol), but the iterative solver stops at tol on "
            "different paths, so predictions agree only to about tol."
        ),
        "check_sample_weight_equivalence_on_sparse_data": (
            "Same optimum as the duplicated problem; the iterative solver stops at tol on "
            "different paths (see the dense check)."
        ),
    }

    _weights_are_copies = True  # repeated (x, y) pairs: solved on the distinct ones (docs: Sample weights)

    _parameter_constraints = {
        "lambda1": NON_NEGATIVE,
        "lambda2": NON_NEGATIVE,
        "C": POSITIVE,
        **KERNEL_PARAMS,
        "kernel_approximation": KERNEL_APPROXIMATION,
        "landmarks": LANDMARKS,
        "solver": [StrOptions({"auto", "bcd", "dcd", "asgd"})],
        "tol": POSITIVE,
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "fit_intercept": ["boolean"],
        "cache_size": CACHE_SIZE,
        "warm_start": ["boolean"],
        **MULTICLASS_PARAMS,
        "random_state": RANDOM_STATE,
        "verbose": VERBOSE,
    }

    def __init__(self, lambda1=2**-5, lambda2=2**-5, C=1.0, kernel="linear", gamma="scale", degree=3,
                 coef0=0.0, kernel_approximation=None, landmarks="uniform", solver="auto", tol=1e-2,
                 max_iter=None, fit_intercept=True, cache_size=200, warm_start=False, class_weight=None, multi_class="ovo", n_jobs=None, random_state=None,
                 verbose=0, device=None):
        self.lambda1 = lambda1
        self.lambda2 = lambda2
        self.C = C
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

    # ------------------------------------------------------------------ solver choice
    def _resolve_solver(self, X, kernel):
        solver = self.solver
        if not kernel.is_linear:
            if solver == "asgd":
                raise ValueError(
                    f"solver='asgd' works on the linear model only; use solver='bcd' or 'dcd' (or 'auto') "
                    f"for kernel={self.kernel!r}, or kernel_approximation for large data."
                )
            return self._kernel_rule(X, kernel) if solver == "auto" else solver
        m, d = X.shape
        if solver == "bcd" and self.kernel != "linear":  # Nyström features: the linear choice
            solver = "auto"
        if solver == "auto":
            # m <= d rows with cheap Gram rows: the exact dual has m variables, where averaged SGD
            # took hundreds of epochs (its 10^4-step minimum) and the factorised linear dual a
            # (d + 1) x (d + 1) matrix (cornell's words, 21 one-vs-one pairs: 0.18 s against
            # 0.13 s; LDMCV over the paper's grid, 3 folds, 81 s against 12.7 s)
            if wide(X):
                return self._kernel_rule(X, kernel)
            fits = (not sp.issparse(X) and d + 1 <= _DCD_MAX_FEATURES and m <= _DCD_MAX_SAMPLES
                    and 3 * 8 * m * (d + 1) <= _DCD_MAX_BYTES)
            return "dcd" if fits else "asgd"
        k = min(m, d + 1)  # "dcd" factorises the smaller side
        need = 8 * (m * k + 3 * k * k)
        if solver == "dcd" and need > 16 * 2**30:
            raise ValueError(
                f"The linear LDM dual needs a dense {m} x {k} transformed data matrix and a "
                f"{k} x {k} factorisation ({need / 2**30:.0f} GiB); use solver='asgd' (or 'auto')."
            )
        return solver

    def _kernel_rule(self, X, kernel):
        """"auto" on the rows of a kernel: the factorised "dcd" where the variance coupling is
        strong and m^3 affordable, else "bcd"."""
        # grid searches too: block coordinate descent with pair steps outruns the factorised
        # path's shared set-up (heart, the paper's 735 points: LDMCV 7.3 s against 56 s)
        strong = _variance_coupling(kernel, X, float(self.lambda1), self._bias()) > _BCD_MAX_COUPLING
        return "dcd" if strong and X.shape[0] <= _FACTOR_MAX_SAMPLES else "bcd"

    @staticmethod
    def _on_kernel_rows(X, kernel, solver) -> bool:
        """Whether the fit runs on kernel rows: every kernel but the linear one, and the linear
        kernel's rows X X^T for "bcd" on wide problems (:func:`~margindist.solvers._gram.wide`;
        other linear problems run it on the rows of X), and for "dcd" when m <= d (the m x m
        factorisation is the smaller; the same dual as the (d + 1) x (d + 1) one). The model
        is linear either way."""
        return (not kernel.is_linear or (solver == "bcd" and wide(X))
                or (solver == "dcd" and X.shape[0] <= X.shape[1]))

    def _factorised_order(self, X, spec):
        if spec is not None and approximation_components(self, spec, X.shape[0]) is None:
            solver = self._resolve_solver(X, spec)
            if solver == "bcd" and self._on_kernel_rows(X, spec, solver):
                return X.shape[1]  # cached kernel rows, no m x m factorisation
            if spec.is_linear and self._on_kernel_rows(X, spec, solver):
                return X.shape[0]
        return super()._factorised_order(X, spec)

    def _row_norm_range(self, X, spec):
        """C = 1 with a regularised bias underfits rows of norm below 0.1 (as the hinge SVM does),
        and averaged SGD needs rows of norm at most about 100 for its intercept (a regularised
        constant feature 1) to follow the features within its epochs."""
        if spec is not None and not spec.is_linear:
            return super()._row_norm_range(X, spec)
        return _ASGD_ROW_RANGE if self._resolve_solver(X, spec) == "asgd" else _DCD_ROW_RANGE

    def _bias(self):
        return 1.0 if self.fit_intercept else 0.0

    def _shared_setup(self, X, sample_weight, kernel):
        log = get_logger(self.verbose)
        solver = self._resolve_solver(X, kernel)
        if not self._on_kernel_rows(X, kernel, solver):
            if solver != "dcd":
                return None
            log.info("LDM: one factorisation shared by the one-vs-rest sub-problems")
            return LDMLinearFactor(X, sample_weight, float(self.lambda1), self._bias())
        if solver == "bcd":
            return self._kernel_source(X, kernel)
        log.info("LDM: one kernel set-up shared by the one-vs-rest sub-problems")
        return self._kernel_base(X, sample_weight, kernel)

    def _kernel_base(self, X, sample_weight, kernel):
        """The label-independent kernel set-up (O(m^3)); grid points with the same kernel and
        lambda1 on one fold share it."""
        key = (kernel, float(self.lambda1), self._bias())
        return self._fit_shared("kernel set-up", key, lambda: LDMKernelBase(
            self._gram(X, kernel), sample_weight, float(self.lambda1), overwrite=True), X)

    def _gram(self, X, kernel):
        B = self._bias()
        if kernel.kind == "precomputed":
            G = np.array(X, dtype=np.float64, order="C")
        else:
            G = kernel_matrix(kernel, X)
        if B:
            G += B * B
        return G

    def _solves_distinct(self, problem, X_u):
        # on the summed weights of repeated pairs the block coordinate descent converges as
        # usual; the factorised dual's coordinate descent can stall (the method's page)
        return self._resolve_solver(X_u, problem.kernel) == "bcd"

    # ------------------------------------------------------------------ fit
    def _fit_binary(self, problem):
        X, kernel = problem.X, problem.kernel
        log = get_logger(self.verbose)
        solver = self._resolve_solver(X, kernel)
        m = X.shape[0]
        beta0 = (problem.warm or {}).get("beta")
        if beta0 is not None and beta0.shape[0] != m:
            beta0 = None
        if not self._on_kernel_rows(X, kernel, solver):
            return self._fit_linear(problem, solver, beta0, log)
        if kernel.is_linear:
            log.info("LDM linear, solver=%s on the %d x %d linear Gram matrix (d=%d, sparse=%s)", solver, m, m,
                     X.shape[1], sp.issparse(X))
            return self._as_linear(self._fit_kernel(problem, solver, beta0, log), problem)
        return self._fit_kernel(problem, solver, beta0, log)

    def _fit_linear(self, problem, solver, beta0, log):
        """The linear model by the factorised linear dual ("dcd"), block coordinate descent on
        the rows of X ("bcd") or averaged SGD."""
        X, y, sample_weight, shared, seed = problem.X, problem.y, problem.sample_weight, problem.shared, problem.seed
        warm, B = problem.warm or {}, self._bias()
        l1, l2, C = float(self.lambda1), float(self.lambda2), float(self.C)
        log.info("LDM linear, solver=%s, m=%d d=%d sparse=%s", solver, X.shape[0], X.shape[1], sp.issparse(X))
        if solver == "dcd":
            if shared is None and problem.rows is None and self._shares_set_up():
                shared = self._fit_shared("linear factor", (l1, B), lambda: LDMLinearFactor(
                    X, sample_weight, l1, B), X)  # grid points with this lambda1 on one fold
            w, b, beta, n_iter, _ = ldm_dcd_linear(
                X, y, sample_weight, l1, l2, C, bias=B, tol=self.tol,
                max_iter=self.max_iter or _DCD_MAX_ITER, beta0=beta0, random_state=seed, factor=shared,
            )
            state = self._linear_state({"beta": beta}, w, b, problem)
        elif solver == "bcd":
            gamma0 = warm.get("gamma") if beta0 is not None else None
            res = ldm_bcd_linear(X, y, sample_weight, l1, l2, C, bias=B, tol=self.tol,
                                 max_iter=self.max_iter or _DCD_MAX_ITER, beta0=beta0, gamma0=gamma0,
                                 random_state=seed, log=log)
            w, b, n_iter = res.coef, B * B * float(res.alpha.sum()), res.n_iter
            state = self._linear_state({"beta": res.beta, "gamma": res.gamma}, w, b, problem)
        else:
            st = None
            if warm.get("v") is not None and warm["v"].shape[0] == X.shape[1] + 1:
                st = ASGDState(X.shape[1] + 1)
                st.w[:] = warm["v"]
            w, b, st, n_iter = ldm_asgd(X, y, sample_weight, l1, l2, C, bias=B,
                                        n_epochs=self.max_iter or _asgd_epochs(X.shape[0]), state=st,
                                        random_state=seed, log=log)
            state = {"v": np.append(w, b / B if B else 0.0), "asgd": st}
        log.info("LDM: %d epochs", n_iter)
        return BinaryModel(coef=w, intercept=b, n_iter=n_iter, extra={"warm": state})

    def _linear_state(self, state, w, b, problem):
        """A linear solution's warm state: the dual's, the weights (v = [w, b / B]) and, on all
        rows, an averaged-SGD state at them (``partial_fit`` continues from the solution)."""
        B = self._bias()
        state = dict(state, v=np.append(w, b / B if B else 0.0))
        if problem.rows is None:
            state["asgd"] = ASGDState.from_weights(state["v"], problem.X, problem.y, problem.sample_weight, B)
        return state

    def _as_linear(self, model, problem):
        """A kernel-path model on the linear kernel as the linear model w = X^T a (the intercept
        is already B^2 sum a, the weight B sum a of the constant feature times B)."""
        w = xt_dot(problem.X, model.dual_coef)
        state = self._linear_state(model.extra["warm"], w, model.intercept, problem)
        return BinaryModel(coef=w, intercept=model.intercept, n_iter=model.n_iter, extra={"warm": state})

    def _fit_kernel(self, problem, solver, beta0, log):
        """The kernel path: block coordinate descent on cached rows, or the factorised dual."""
        X, y, sample_weight, kernel, shared, seed = (problem.X, problem.y, problem.sample_weight, problem.kernel,
                                                     problem.shared, problem.seed)
        l1, l2, C = float(self.lambda1), float(self.lambda2), float(self.C)
        if solver == "bcd":
            return self._fit_bcd(problem, beta0, l1, l2, C, log)
        log.info("LDM kernel=%s, dual set-up O(m^3) with m=%d", kernel.kind, X.shape[0])
        if shared is None and problem.rows is None and self._shares_set_up():
            shared = self._kernel_base(X, sample_weight, kernel)
        if shared is not None:
            alpha, beta, n_iter, _ = ldm_dcd_kernel(None, y, sample_weight, l1, l2, C, tol=self.tol,
                                                    max_iter=self.max_iter or _DCD_MAX_ITER, beta0=beta0,
                                                    random_state=seed, base=shared)
        else:
            alpha, beta, n_iter, _ = ldm_dcd_kernel(self._gram(X, kernel), y, sample_weight, l1, l2, C,
                                                    tol=self.tol, max_iter=self.max_iter or _DCD_MAX_ITER,
                                                    beta0=beta0, random_state=seed, overwrite=True)
        log.info("LDM: %d epochs", n_iter)
        B = self._bias()
        return BinaryModel(dual_coef=alpha, intercept=B * B * float(alpha.sum()), n_iter=n_iter,
                           extra={"warm": {"beta": beta}})

    def _fit_bcd(self, problem, beta0, l1, l2, C, log):
        X, y, kernel, warm = problem.X, problem.y, problem.kernel, problem.warm or {}
        B = self._bias()
        cache = problem.shared if problem.shared is not None else self._kernel_source(X, kernel, problem)
        gamma0 = warm.get("gamma") if beta0 is not None else None
        log.info("LDM kernel=%s, bcd, m=%d, %d rows (%s) cached", kernel.kind, X.shape[0], cache.n_slots,
                 cache.dtype)
        res = ldm_bcd_kernel(cache, y, problem.sample_weight, l1, l2, C, bias=B, tol=self.tol,
                             max_iter=self.max_iter or _DCD_MAX_ITER, beta0=beta0, gamma0=gamma0,
                             random_state=problem.seed, log=log)
        log.info("LDM: %d epochs", res.n_iter)
        return BinaryModel(dual_coef=res.alpha, intercept=B * B * float(res.alpha.sum()), n_iter=res.n_iter,
                           extra={"warm": {"beta": res.beta, "gamma": res.gamma}}, norm_sq=res.norm_sq)

    # ------------------------------------------------------------------ streaming
    @available_if(_linear_only)
    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One pass of averaged SGD over the batch (X, y) (linear kernel only).

        The first call needs ``classes`` (all labels that will ever appear). The objective is
        that of all samples seen so far: m (S with weights) in lambda3 = 1 / (C m) and in the
        scaled lambda1, lambda2 is the total seen, and the mean margin is w . mu with mu the
        (weighted) mean of y x over all samples seen, this batch included, so one pass of
        ``partial_fit`` over the data in batches ends on the objective of ``fit``. After
        ``fit``, the samples of that fit count as seen. Averaging starts after twice the first
        batch's size of steps; eta0 comes from a trial on the first batch. With
        ``multi_class="ovo"`` a pair of classes starts when a batch first holds its rows and
        keeps its state through batches without them; ``class_weight`` must be None or a dict
        (not "balanced", which needs the whole data).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            A batch of training data.
        y : array-like of shape (n_samples,)
            Its class labels.
        classes : array-like of shape (n_classes,), default=None
            All labels of the stream; needed on the first call.
        sample_weight : array-like of shape (n_samples,), default=None
            Per-sample weights of the batch.

        Returns
        -------
        self : LDM
            The updated estimator.
        """
        return self._partial_fit(X, y, classes, sample_weight)

    @property
    def _asgd_states(self):
        """The averaged-SGD state of every sub-problem that ``partial_fit`` continues from
        (after a linear fit on all rows, or ``partial_fit``), else None."""
        prev = getattr(self, "_warm_state", None)
        if prev is None or not all(st is not None and "asgd" in st for st in prev["states"]):
            return None
        return [st["asgd"] for st in prev["states"]]

    def _stream_states(self, X, problems):
        states = self._asgd_states
        if states is None or len(states) != len(problems):
            return None
        return self._warm_state["states"]

    def _stream_seeds(self, n_problems, restart):
        # every call draws its orders from random_state anew, one generator for all sub-problems
        return [check_random_state(self.random_state)] * n_problems

    def _partial_fit_binary(self, problem):
        st = None if problem.warm is None else problem.warm["asgd"]
        if problem.X.shape[0] == 0:  # a one-vs-one pair without rows in this batch: unchanged
            if st is None:
                return BinaryModel(coef=np.zeros(problem.X.shape[1]), intercept=0.0, n_iter=0,
                                   extra={"warm": {"asgd": None}})
            wbar = st.average()
            return BinaryModel(coef=wbar[:-1].copy(), intercept=float(self._bias() * wbar[-1]), n_iter=0,
                               extra={"warm": {"asgd": st}})
        w, b, st, _ = ldm_asgd(problem.X, problem.y, problem.sample_weight, float(self.lambda1),
                               float(self.lambda2), float(self.C), bias=self._bias(), n_epochs=1, state=st,
                               random_state=problem.seed, log=get_logger(self.verbose))
        return BinaryModel(coef=w, intercept=b, n_iter=1, extra={"warm": {"asgd": st}})
