"""LSSVM: the least-squares support vector machine classifier (Suykens et al. 2002)."""

from __future__ import annotations

from numbers import Integral, Real

import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions

from .._base import BaseMarginClassifier, BinaryModel, get_logger
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
from ..kernels import kernel_matrix
from ..solvers._gram import wide, xt_dot
from ..solvers.lssvm import lssvm_kernel, lssvm_linear

#: "auto" switches from direct factorisations to conjugate gradients above these sizes (kernel:
#: between the two sample counts, CG that falls back on Cholesky when it would be slower).
_MAX_DIRECT_FEATURES = 2000
_MIN_CG_SAMPLES = 1500
_MAX_DIRECT_SAMPLES = 5000


class LSSVM(BaseMarginClassifier):
    """Least-squares SVM classifier.

    Solves min_{w,b,e} 1/2 ||w||^2 + C/2 sum_i s_i e_i^2 subject to
    y_i (<w, phi(x_i)> + b) = 1 - e_i (s_i the sample weights): every margin is pulled to 1, so
    LS-SVM minimises the squared deviation of the functional margins from 1 — a
    margin-variance method with the mean fixed.

    * Kernel: the KKT system [[0, y^T], [y, Omega + D]] [b; a] = [0; 1], Omega = Y G Y,
      D = diag(1 / (C s_i)). ``solver="cholesky"`` factorises the m x m matrix: O(m^3) time
      and m^2 memory — say m = 20k needs 3 GiB; ``solver="cg"`` runs conjugate gradients
      preconditioned by a Nyström approximation of the kernel matrix (FALKON's
      preconditioner; kernel products from a Gram matrix held in ``cache_size`` or
      recomputed in blocks).
    * Linear: the equivalent weighted ridge regression on the +-1 targets with an unpenalised
      intercept, in the primal: O(m d^2 + d^3) by Cholesky, or CG with products through X
      (sparse X stays sparse).

    Parameters
    ----------
    C : float, default=1.0
        Weight of the squared errors (gamma in Suykens' notation).
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
    solver : {"auto", "cholesky", "cg"}, default="auto"
        "auto": linear, the kernel system on X X^T for at most as many rows as features (for
        CSR X while those rows cost at most 1e8 multiply-adds; the model stays linear), else
        Cholesky for up to 2000 features, else CG; kernel, Cholesky for up
        to 1500 samples, CG above 5000, and in between CG that gives way to Cholesky as soon
        as its rate of convergence predicts more than m / 50 iterations (the break-even on
        one core; large C): 5000 rows of magic at C = 1 in 0.31 s instead of 1.44 s, at C = 100
        in 0.85 s.
    tol : float, default=1e-10
        Relative residual for CG.
    max_iter : int, default=None
        CG iteration cap (None: 10 x the system size).
    cache_size : float, default=200
        MiB for the Gram matrix in the kernel CG path (above it, blocks are recomputed).
    class_weight : dict or "balanced", default=None
        Multiplies the sample weights per class; ``"balanced"`` uses
        n_samples / (n_classes * np.bincount(y)).
    multi_class : {"ovr", "ovo"}, default="ovo"
        Reduction used for more than two classes: one-vs-one (SVC's choice; K (K - 1) / 2
        sub-problems of about 2 m / K rows) or one-vs-rest. Why one-vs-one is the default:
        the "Defaults" table of the hyperparameters page.
    n_jobs : int, default=None
        Parallel sub-problems (joblib) for more than two classes.
    random_state : int, RandomState instance or None, default=None
        Only used by ``kernel_approximation`` (the landmark draw).
    verbose : int, default=0
        Log solver choices through the ``margindist`` logger.
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
        The unpenalised bias b.
    dual_coef_ : ndarray of shape (n_problems, n_SV)
        a_i y_i; every training point is a support vector (kernels other than linear).
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
        CG matrix-vector products, 1 for a direct solve.
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
    ODM : Squared losses around margin 1 with a band of zero loss.
    sklearn.linear_model.RidgeClassifier : The linear LS-SVM is a ridge regression on +-1
        targets (with an unpenalised intercept).

    References
    ----------
    .. [1] J. A. K. Suykens, T. Van Gestel, J. De Brabanter, B. De Moor and J. Vandewalle,
       "Least Squares Support Vector Machines", World Scientific, 2002.
    .. [2] J. A. K. Suykens and J. Vandewalle, "Least squares support vector machine
       classifiers", Neural Processing Letters, 9(3):293-300, 1999.

    Examples
    --------
    >>> from margindist import LSSVM, load_dataset
    >>> from sklearn.preprocessing import MinMaxScaler
    >>> X, y = load_dataset("australian")
    >>> X = MinMaxScaler().fit_transform(X)
    >>> LSSVM(C=1.0, kernel="rbf").fit(X, y).score(X, y) > 0.8
    True
    """

    _needs_psd_kernel = False

    _parameter_constraints = {
        "C": POSITIVE,
        **KERNEL_PARAMS,
        "kernel_approximation": KERNEL_APPROXIMATION,
        "landmarks": LANDMARKS,
        "solver": [StrOptions({"auto", "cholesky", "cg"})],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "cache_size": CACHE_SIZE,
        **MULTICLASS_PARAMS,
        "random_state": RANDOM_STATE,
        "verbose": VERBOSE,
    }

    def __init__(self, C=1.0, kernel="linear", gamma="scale", degree=3, coef0=0.0, kernel_approximation=None,
                 landmarks="uniform", solver="auto", tol=1e-10, max_iter=None, cache_size=200, class_weight=None, multi_class="ovo",
                 n_jobs=None, random_state=None, verbose=0, device=None):
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
        self.cache_size = cache_size
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.device = device

    def _kernel_solver(self, m):
        """The kernel solver for m samples ("auto" resolved by size; see ``solver``)."""
        if self.solver != "auto":
            return self.solver
        return "cholesky" if m <= _MIN_CG_SAMPLES else "auto" if m <= _MAX_DIRECT_SAMPLES else "cg"

    def _factorised_order(self, X, spec):
        if spec is not None and not spec.is_linear and self._kernel_solver(X.shape[0]) == "cg":
            return X.shape[1]  # kernel products and a preconditioner on at most 500 landmarks
        if spec is not None and spec.is_linear and self.solver == "auto" and wide(X):
            return X.shape[0]  # the m x m linear Gram matrix
        return super()._factorised_order(X, spec)

    def _fit_wide(self, problem, log):
        """A wide linear problem (:func:`~margindist.solvers._gram.wide`) by the kernel system
        on X X^T (m + 1 unknowns, not d + 1), returned as the linear model w = X^T a: the same
        solution. cornell's words (578 x 4134 CSR, 21 one-vs-one pairs): 0.19 s by CG in the
        primal, whose system is ill-conditioned there (up to 222 iterations a pair)."""
        X, m = problem.X, problem.X.shape[0]
        solver = self._kernel_solver(m)
        log.info("LSSVM linear, %s on the %d x %d linear Gram matrix (d=%d)", solver, m, m, X.shape[1])
        res = lssvm_kernel(problem.kernel, X, problem.y, problem.sample_weight, self.C, solver=solver,
                           tol=self.tol, max_iter=self.max_iter, max_bytes=int(self.cache_size * 2**20), log=log)
        return BinaryModel(coef=xt_dot(X, res.coef), intercept=res.b, n_iter=res.n_iter)

    def _fit_binary(self, problem):
        X, y, sample_weight, kernel = problem.X, problem.y, problem.sample_weight, problem.kernel
        log = get_logger(self.verbose)
        m, d = X.shape
        if kernel.is_linear and self.solver == "auto" and wide(X):
            return self._fit_wide(problem, log)
        if kernel.is_linear:
            solver = self.solver
            if solver == "auto":
                solver = "cholesky" if d <= _MAX_DIRECT_FEATURES else "cg"
            log.info("LSSVM linear primal, %s, m=%d d=%d sparse=%s", solver, m, d, sp.issparse(X))
            w, b, n_iter = lssvm_linear(X, y, sample_weight, self.C, solver=solver, tol=self.tol,
                                        max_iter=self.max_iter)
            return BinaryModel(coef=w, intercept=b, n_iter=n_iter)
        solver = self._kernel_solver(m)
        log.info("LSSVM kernel=%s, %s, m=%d", kernel.kind, solver, m)
        budget = int(self.cache_size * 2**20)
        gram = None
        if self._shares_set_up() and kernel.kind != "precomputed" and (solver != "cg" or 8 * m * m <= budget):
            # grid points on one fold (values of C) share the kernel matrix
            gram = self._fit_shared("gram", kernel, lambda: kernel_matrix(kernel, X), X)
        res = lssvm_kernel(kernel, X, y, sample_weight, self.C, solver=solver, tol=self.tol,
                           max_iter=self.max_iter, max_bytes=budget, gram=gram, log=log)
        return BinaryModel(dual_coef=res.coef, intercept=res.b, n_iter=res.n_iter, norm_sq=res.norm_sq)
