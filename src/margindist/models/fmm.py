"""FMM: fast margin maximisation via dual acceleration (Ji, Srebro, Telgarsky, ICML 2021)."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from .._base import BaseMarginClassifier, BinaryModel, get_logger
from .._params import MULTICLASS_PARAMS, POSITIVE, VERBOSE
from ..solvers.fmm import fmm

#: Root-mean-square row norms FMM's constant-1 intercept feature serves (FeatureScaleWarning outside).
_INTERCEPT_ROW_RANGE = (1e-2, 1e2)


class FMM(BaseMarginClassifier):
    """Accelerated hard-margin maximisation (a baseline of the MSVMAv paper).

    A momentum method on the exponential loss whose normalised margin
    min_i y_i f(x_i) / ||w|| tends to the hard-margin SVM margin at rate ~1/t^2 on linearly
    separable data (normalised gradient descent: ~1/t). With z_i = y_i [x_i, 1] / R scaled to
    norm <= 1, q_0 uniform and w_0 = g_{-1} = 0, for t = 0, ..., T - 1::

        g_t = (t/(t+1)) (g_{t-1} + Z^T q_t),  w_{t+1} = w_t + theta (g_t + Z^T q_t),
        q_{t+1} = softmax(-Z w_{t+1})  (log-sum-exp with a max shift).

    This is a reconstruction of the paper's Algorithm 1 from its stated properties:
    Nesterov-accelerated mirror descent on the dual min_{q in simplex} ||Z^T q||, written in
    the primal; the tests check the ~1/t^2 rate against scikit-learn's hard-margin SVC.
    There is no ``warm_start``: the momentum schedule (t/(t+1)) and T = ``max_iter`` define the
    model (on non-separable data it is w_T, not an optimum), so a continued run is another
    model.

    Intercept: with ``fit_intercept=True`` a constant feature 1 is appended and its weight is
    part of w, so FMM maximises the margin of the augmented vector (as the MSVMAv protocol
    does with its appended constant); this is not the SVM with an unpenalised bias.
    ``margin_`` is that augmented margin; :meth:`margins` uses the library-wide convention
    (norm of ``coef_`` only).

    Non-separable data: the algorithm has no guarantee there (the hard-margin problem is
    infeasible); it simply stops after T = ``max_iter`` iterations and returns w_T, whose
    normalised margin (``margin_``) is then negative. This is how the MSVMAv paper uses it on
    its (mostly non-separable) benchmarks, with theta and T chosen by cross-validation.

    The returned weights are normalised: the augmented vector (w R, b R), w = ``coef_``,
    b = ``intercept_``, has unit norm, so decision values are normalised margins of the scaled data and one-vs-rest scores
    of different classes are comparable.

    Parameters
    ----------
    step : float, default=1.0
        The step size theta (paper grid {2^-10, 2^-8, ..., 2^0}; 1 is the theory setting).
    max_iter : int, default=400
        T, the number of iterations (paper grid {50, 100, 200, 400, 800, 1600}).
    tol : float or None, default=None
        Stop early once the certified relative duality gap
        (min_t ||Z^T q_t|| - gamma(w_t)) / min_t ||Z^T q_t|| is at most tol (possible only on
        separable data). None: always run T iterations (the paper's protocol). When tol is
        set and not reached a ``ConvergenceWarning`` is raised.
    fit_intercept : bool, default=True
        Append the constant feature 1 (see above).
    solver : {"auto", "fused", "two_pass"}, default="auto"
        How an iteration reads X. ``"fused"``: one compiled pass over the rows per iteration
        computes the scores Z w and, row by row while the row is in cache (CSR rows: block by
        block), the max-shifted exponential weights and Z^T q (an online log-sum-exp);
        ``"two_pass"``: the original two NumPy/SciPy products per iteration. Both give the same
        iterate w_T up to rounding (tested to 1e-10 relative). ``"auto"`` is ``"fused"``
        (dense X 2-2.5x faster; CSR rows of 50 non-zeros 8 % faster in float64, 19 % in
        float32).
    class_weight : dict or "balanced", default=None
        Multiplies the sample weights per class; ``"balanced"`` uses
        n_samples / (n_classes * np.bincount(y)).
    multi_class : {"ovr", "ovo"}, default="ovr"
        Reduction used for more than two classes: one-vs-rest or one-vs-one.
    n_jobs : int, default=None
        Parallel sub-problems (joblib) for more than two classes.
    verbose : int, default=0
        Log solver progress through the ``margindist`` logger (never prints).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels.
    coef_ : ndarray of shape (n_problems, n_features)
        Weight vectors; n_problems is 1 for two classes, else the number of one-vs-rest or
        one-vs-one sub-problems.
    intercept_ : ndarray of shape (n_problems,)
        The weight of the appended constant feature.
    weight_norm_ : ndarray of shape (n_problems,)
        ||w||, the Euclidean norm of ``coef_``; the normaliser of :meth:`margins`.
    n_iter_ : int or ndarray of shape (n_problems,)
        Iterations run.
    margin_ : float or ndarray of shape (n_problems,)
        Normalised training margin of the final iterate in the scaled, augmented space,
        min_i y_i <w, [x_i, 1]> / (||w|| R).
    margin_history_ : ndarray or list of ndarrays
        That margin after every iteration.
    dual_bound_ : float or ndarray
        min_t ||Z^T q_t||: on separable data an upper bound of the hard margin (scaled units),
        so ``dual_bound_ - margin_`` bounds the remaining gap.
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
    sklearn.svm.SVC : ``SVC(kernel="linear", C=1e8)`` gives the hard margin FMM tends to.
    MSVMAv : The method whose paper uses FMM as a baseline.

    Notes
    -----
    Sample weights s_i weight the exponential loss, sum_i s_i exp(-y_i f(x_i)):
    q_0 = s / sum(s) and q_{t+1} is proportional to s_i exp(-<w, z_i>). Integer weights act
    exactly as repeated rows. The hard margin itself ignores weights (it is a minimum); they
    shape the path and hence the finite-T solution.

    Cost: O(nnz(X)) per iteration (one fused pass over the data with the default solver, two
    products with ``solver="two_pass"``), O(m + d) memory.

    References
    ----------
    .. [1] Z. Ji, N. Srebro and M. Telgarsky, "Fast margin maximization via dual acceleration",
       Proceedings of the 38th International Conference on Machine Learning (ICML), PMLR 139,
       pp. 4860-4869, 2021.

    Examples
    --------
    >>> from margindist import FMM, load_dataset
    >>> from sklearn.preprocessing import MinMaxScaler
    >>> X, y = load_dataset("australian")
    >>> X = MinMaxScaler().fit_transform(X)
    >>> clf = FMM(step=1.0, max_iter=200).fit(X, y)
    >>> clf.score(X, y) > 0.7
    True
    """

    _parameter_constraints = {
        "step": POSITIVE,
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "fit_intercept": ["boolean"],
        "solver": [StrOptions({"auto", "fused", "two_pass"})],
        **MULTICLASS_PARAMS,
        "verbose": VERBOSE,
    }

    def __init__(self, step=1.0, max_iter=400, tol=None, fit_intercept=True, solver="auto", class_weight=None,
                 multi_class="ovr", n_jobs=None, verbose=0):
        self.step = step
        self.max_iter = max_iter
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _row_norm_range(self, X, spec):
        """With an intercept the constant feature 1 competes with the features inside one norm:
        rows far larger than 1 leave the intercept too small for T iterations to reach a boundary
        away from the origin, rows far smaller make the constant dominate. Without an intercept
        FMM is scale-invariant."""
        return _INTERCEPT_ROW_RANGE if self.fit_intercept else super()._row_norm_range(X, spec)

    def _fit_binary(self, problem):
        X, y, sample_weight = problem.X, problem.y, problem.sample_weight
        log = get_logger(self.verbose)
        res = fmm(X, y, sample_weight, step=self.step, max_iter=self.max_iter,
                  fit_intercept=self.fit_intercept, tol=self.tol,
                  method=self._method(X))
        if self.tol is not None and not res.converged:
            warnings.warn(
                f"FMM did not close the duality gap to tol={self.tol} in {self.max_iter} "
                "iterations; increase max_iter or step (on non-separable data the gap cannot "
                "close; use tol=None).", ConvergenceWarning, stacklevel=4)
        nrm = float(np.sqrt(res.w @ res.w + res.b**2))
        if nrm > 0:
            w, b = res.w / (nrm * res.radius), res.b / (nrm * res.radius)
        else:
            w, b = res.w, res.b
        margin = float(res.margins[-1]) if res.n_iter else 0.0
        dual = float(res.dual.min()) if res.n_iter else 0.0
        if self.verbose:
            log.info("FMM: %d iterations, normalised margin %.6g, dual bound %.6g", res.n_iter, margin, dual)
        return BinaryModel(coef=w, intercept=b, n_iter=res.n_iter,
                           extra={"margin": margin, "history": res.margins, "dual": dual})

    def _method(self, X):
        return "fused" if self.solver == "auto" else self.solver

    def _set_extra(self, extras):
        margins = np.array([e["margin"] for e in extras])
        duals = np.array([e["dual"] for e in extras])
        hist = [e["history"] for e in extras]
        if len(extras) == 1:
            self.margin_, self.dual_bound_, self.margin_history_ = float(margins[0]), float(duals[0]), hist[0]
        else:
            self.margin_, self.dual_bound_, self.margin_history_ = margins, duals, hist
