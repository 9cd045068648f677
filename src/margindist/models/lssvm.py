"""LSSVM: the least-squares support vector machine classifier (Suykens et al. 2002)."""

from __future__ import annotations

from numbers import Integral, Real

import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions

from .._base import BaseMarginClassifier, BinaryModel, get_logger
from .._params import CACHE_SIZE, KERNEL_PARAMS, MULTICLASS_PARAMS, POSITIVE, VERBOSE
from ..solvers.lssvm import lssvm_kernel, lssvm_linear

#: "auto" switches from direct factorisations to conjugate gradients above these sizes.
_MAX_DIRECT_FEATURES = 2000
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
      (kernel products from a Gram matrix held in ``cache_size`` or recomputed in blocks).
    * Linear: the equivalent weighted ridge regression on the +-1 targets with an unpenalised
      intercept, in the primal: O(m d^2 + d^3) by Cholesky, or CG with products through X
      (sparse X stays sparse).

    Parameters
    ----------
    C : float, default=1.0
        Weight of the squared errors (gamma in Suykens' notation).
    kernel : {"linear", "rbf", "poly", "sigmoid", "precomputed"} or callable, default="linear"
    gamma : {"scale", "auto"} or float, default="scale"
    degree : int, default=3
    coef0 : float, default=0.0
    solver : {"auto", "cholesky", "cg"}, default="auto"
        "auto": Cholesky for up to 2000 features (linear) / 5000 samples (kernel), else CG.
    tol : float, default=1e-10
        Relative residual for CG.
    max_iter : int, default=None
        CG iteration cap (None: 10 x the system size).
    cache_size : float, default=200
        MiB for the Gram matrix in the kernel CG path (above it, blocks are recomputed).
    class_weight : dict or "balanced", default=None
    multi_class : {"ovr", "ovo"}, default="ovr"
    n_jobs : int, default=None
    verbose : int, default=0
        Log solver choices through the ``margindist`` logger.

    Attributes
    ----------
    classes_, coef_ (linear), intercept_, dual_coef_ (= a_i y_i), support_, support_vectors_
    (kernel; every training point is a support vector), weight_norm_, n_iter_ (CG matrix-vector
    products, 1 for a direct solve).
    """

    _parameter_constraints = {
        "C": POSITIVE,
        **KERNEL_PARAMS,
        "solver": [StrOptions({"auto", "cholesky", "cg"})],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "cache_size": CACHE_SIZE,
        **MULTICLASS_PARAMS,
        "verbose": VERBOSE,
    }

    def __init__(self, C=1.0, kernel="linear", gamma="scale", degree=3, coef0=0.0, solver="auto",
                 tol=1e-10, max_iter=None, cache_size=200, class_weight=None, multi_class="ovr",
                 n_jobs=None, verbose=0):
        self.C = C
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.cache_size = cache_size
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _fit_binary(self, X, y, sample_weight, kernel):
        log = get_logger(self.verbose)
        m, d = X.shape
        if kernel.is_linear:
            solver = self.solver
            if solver == "auto":
                solver = "cholesky" if d <= _MAX_DIRECT_FEATURES else "cg"
            log.info("LSSVM linear primal, %s, m=%d d=%d sparse=%s", solver, m, d, sp.issparse(X))
            w, b, n_iter = lssvm_linear(X, y, sample_weight, self.C, solver=solver, tol=self.tol,
                                        max_iter=self.max_iter)
            return BinaryModel(coef=w, intercept=b, n_iter=n_iter)
        solver = self.solver
        if solver == "auto":
            solver = "cholesky" if m <= _MAX_DIRECT_SAMPLES else "cg"
        log.info("LSSVM kernel=%s, %s, m=%d", kernel.kind, solver, m)
        a, b, n_iter = lssvm_kernel(kernel, X, y, sample_weight, self.C, solver=solver, tol=self.tol,
                                    max_iter=self.max_iter, max_bytes=int(self.cache_size * 2**20))
        return BinaryModel(dual_coef=a, intercept=b, n_iter=n_iter)
