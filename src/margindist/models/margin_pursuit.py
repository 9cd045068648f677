"""MarginPursuit: classification by margin pursuit (Holland, AISTATS 2019)."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if

from .._base import BaseMarginClassifier, BinaryModel, get_logger
from .._defaults import margin_pursuit_lam
from .._params import MULTICLASS_PARAMS, POSITIVE, POSITIVE_INT, RANDOM_STATE, VERBOSE
from ..solvers.margin_pursuit import (
    catoni_scale,
    mp_gd,
    sgd_coef,
    sgd_init,
    sgd_passes,
)
from ..solvers.margin_pursuit_newton import mp_newton, newton_curvature

#: Default number of passes (SGD) and iterations (GD, Newton) when ``max_iter`` is None.
_DEFAULT_PASSES = {"sgd": 100, "gd": 1000, "newton": 100}


def _streaming(est):
    if est.solver not in ("sgd", "auto"):
        raise AttributeError("partial_fit is only available with solver='sgd' or 'auto' (which streams "
                             "with SGD).")
    return True


class MarginPursuit(BaseMarginClassifier):
    """Linear classification by margin pursuit: a robust location of the margins.

    Minimises (Holland 2019; formulas reconstructed, see the status marks below)::

        J(w, b) = (lam/2) (||w||^2 + b^2) + (1/n) sum_i S * rho((gamma - y_i (<w, x_i> + b)) / S)

    where rho is the integral of a Catoni-type influence function psi. rho is quadratic near 0
    and linear in the tails, and it penalises margins *above* gamma as well as below: the loss
    pulls the margins towards a common location gamma and so concentrates their distribution.
    The scale S moves that location between the mean of the margins (S -> infinity: least
    squares on the margins, a ridge regression) and their median (S -> 0: absolute deviation).
    The loss is classification-calibrated for gamma > 0.

    Status of each piece (the paper's formulas are reconstructed here from its text, the
    author's companion code and numerical checks):

    * psi/rho of Catoni and Giulini: psi(u) = u - u^3/6 for abs(u) <= sqrt(2), else
      (2 sqrt(2)/3) sign(u) -- CONFIRMED (the author's code uses it). The wide alternative
      psi_w(u) = sign(u) log(1 + abs(u) + u^2/2) (``influence="catoni_wide"``) -- Catoni's
      classical choice, offered as an option.
    * Loss S * rho((gamma - m)/S) -- INFERRED scaling: the author's code writes S^2 * rho(...);
      both have the same minimisers, S * rho has a hinge-like gradient scale, and with S^2 * rho
      the Pegasos-type steps diverge. margindist uses S * rho.
    * Scale S^2 = n v / (2 log(1/delta)), v a bound on the second moment of gamma - m --
      CONFIRMED as the author's convention. ``scale="auto"``: at w = 0 all margins are 0, so
      v = gamma^2 and S_0 = gamma sqrt(n / (2 log(1/delta))); S is floored at 1e-3.
    * One-time data-driven rescaling -- INFERRED from the paper's text: after ``rescale_after``
      passes v is re-estimated as the ``rescale_quantile`` quantile of (gamma - m_i)^2 over
      the training sample and S recomputed once, then kept fixed.
    * ``solver="gd"`` (paper Algorithm 1) -- INFERRED form: w <- w - (1/L) grad J with
      L = ||X||_op^2 / (n S) + lam (J decreases monotonically).
    * ``solver="newton"`` (not in the paper; the default through ``"auto"``) -- the same J and
      the same rescaling as ``"gd"`` (its ``rescale_after`` steepest-descent steps, then the
      scale is re-estimated once), minimised by a preconditioned Newton-CG method with a line
      search: the minimiser GD converges to, in a few iterations whatever the feature scale.
    * ``solver="sgd"`` (the paper's experiments) -- INFERRED by analogy with Pegasos, against
      which the paper compares: w_1 = 0, eta_t = 1/(lam t), w' = (1 - eta_t lam) w +
      (eta_t / k) sum_{i in A_t} psi((gamma - m_i)/S) y_i x_i over a mini-batch A_t of size k,
      then projection onto the ball of radius r = sqrt(2 S rho(gamma/S) / lam).
      The shortcut "r = 1/sqrt(lam) when gamma = 1, S >= 1" is not right (e.g. S = 1 gives
      sqrt(11/12) / sqrt(lam), S = 10 about 0.32 / sqrt(lam)). margindist uses the formula,
      which is the bound that holds: (lam/2)||w*||^2 <= J(w*) <= J(0) = S rho(gamma/S).

    Intercept: with ``fit_intercept=True`` the intercept b is the weight of a constant feature
    of value 1, *regularised* like the other weights (so GD and SGD minimise the same J, the
    projection ball bounds (w, b) together, and the model equals the intercept-free one on X
    with a column of ones appended). Scale your features (e.g. to [0, 1], as the papers do) so
    that the constant is commensurate with them.

    Sample weights s_i (times ``class_weight``) are frequencies: the loss term is
    (1/W) sum_i s_i S rho(...) with W = sum_i s_i, and the "n" of Catoni's scale is W (so an
    integer weight acts as that many copies, exactly so for ``solver="gd"``); the rescaling
    quantile is the weighted (inverted-CDF) quantile. GD uses the weighted sums directly. SGD
    visits the examples uniformly (a fresh random permutation every pass) and multiplies the
    stochastic gradient of example i by s_i n / W, an unbiased estimate of the gradient of the
    same J; with unit weights this is exactly Pegasos / scikit-learn's ``SGDClassifier``.

    Parameters
    ----------
    margin : float, default=1.0
        The margin level gamma > 0 the margins are pulled towards.
    scale : "auto" or float, default="auto"
        The scale S. "auto": Catoni's S_0 = scale_factor * gamma sqrt(n / (2 log(1/delta)));
        a number is used as given (before any rescaling).
    scale_factor : float, default=1.0
        Multiplies every data-driven scale (the "auto" one and the rescaled one).
    delta : float in (0, 1), default=0.01
        Confidence level delta of Catoni's bound.
    lam : float or "auto", default="auto"
        Ridge penalty lambda (the same lambda as Pegasos / ``SGDClassifier(alpha=lam)``).
        ``"auto"``: 1 / (S s_0), S the sum of the sample weights (n_samples for unit
        weights) and s_0 the loss scale at the start (``scale`` or its ``"auto"`` value). Near
        the margin level the loss is (gamma - m)^2 / (2 s), so J times 1 / lam is
        1/2 ||w||^2 + C sum_i s_i (gamma - m_i)^2 / 2 with C = 1 / (lam S s_0): LinearSVC's
        default C = 1 (s_0 is taken as 1 when smaller: a handful of samples; see
        :func:`margindist._defaults.margin_pursuit_lam`). With
        ``solver="sgd"`` and in :meth:`partial_fit` it is 1 / S (C = 1 on the loss's slope):
        Pegasos' steps 1 / (lam t) grow with 1 / lam, and the smaller value left its default
        passes short of the optimum (0.681 against 0.718 on a dense 120k x 100 problem). A fixed lam
        regularises ever more strongly as n grows (the paper's 1e-3, Pegasos' convention, left
        sparse text-like data at chance). In :meth:`partial_fit`, S is the weight of the
        current batch.
    solver : {"auto", "newton", "sgd", "gd"}, default="auto"
        ``"newton"``: Newton-CG on J (Hessian-vector products, a preconditioner from the
        quadratic part of the loss, a line search); deterministic, it reaches the minimiser of
        J in a few iterations of a few passes each. ``"sgd"``: projected mini-batch SGD with the
        Pegasos schedule (the paper's experiments; needed by :meth:`partial_fit`). ``"gd"``:
        full-batch steepest descent with the step 1/L (paper Algorithm 1; the same minimiser as
        ``"newton"``, thousands of iterations on ill-conditioned data). ``"auto"``: ``"newton"``
        in :meth:`fit` (the exact minimiser at 0.06-0.35 times LinearSVC's time on the
        benchmark rows of the method's docs page, where SGD takes about as long, stops short of
        the minimiser and loses accuracy when the features are scaled up) and SGD in
        :meth:`partial_fit`. The default used to be ``"sgd"``; pass it to keep the
        stochastic solver (the reproduction presets do).
    max_iter : int, default=None
        Newton iterations, passes over the data (SGD; one pass = n stochastic gradients) or
        iterations (GD; one iteration = one pass); the steepest-descent steps before the
        rescaling count for Newton too. None: 100 Newton iterations (it usually stops after
        2-5), 100 passes for SGD (it usually stops after 5-15 by ``tol``), 1000 iterations for
        GD. The paper's experiments use SGD with a fixed budget of 20 passes:
        ``solver="sgd", max_iter=20, tol=None``.
    batch_size : int, default=1
        Mini-batch size k of the SGD solver.
    rescale : bool, default=True
        Re-estimate the scale once from the margins after ``rescale_after`` passes.
    rescale_quantile : float in (0, 1], default=0.75
        Quantile of (gamma - m_i)^2 used as the second-moment bound v at the rescaling.
    rescale_after : int, default=1
        Passes (SGD) or iterations (GD) before the rescaling.
    influence : {"catoni_giulini", "catoni_wide"}, default="catoni_giulini"
        The influence function psi.
    average : bool, default=True
        SGD only: predict with the running average of the iterates (of those after the
        rescaling, when there is one) instead of the last iterate (``False``, the paper's
        procedure). With the weak default regularisation (lam = 1 / n) the Pegasos steps
        1 / (lam t) are long and the last iterate is noisy; the average is the standard remedy
        (it gained 2-4 points of test accuracy in ``benchmarks/bench_defaults.py``).
    fit_intercept : bool, default=True
        Fit b as the regularised weight of a constant feature 1 (see above).
    tol : float or None, default=1e-3
        Newton and GD: stop when ||grad J|| <= tol * ||grad J(0)|| (relative to the gradient at
        the origin, so independent of the units of X). SGD: scikit-learn's rule (and default
        value) -- stop when the mean objective estimate of a pass has not improved on the best
        by tol for 5 passes in a row.
        None: run exactly ``max_iter`` passes or iterations (Newton stops earlier only when
        the line search finds no decrease left). A ``ConvergenceWarning`` is raised when tol is
        set and not reached within ``max_iter``.
    warm_start : bool, default=False
        Continue from the previous fit: its weights, its scale (no second rescaling), and for
        SGD its step counter t (the schedule continues) and random stream. Ignored when the
        problem layout (features, sub-problems) or the solver changed. ``fit`` with warm start
        and GD is equivalent to one longer run. Newton sets the scale as a cold fit does (the
        rescaling steps run again from w = 0, at the current lam, on the current rows) and
        starts from the previous weights, so it reaches the cold fit's minimiser (to ``tol``)
        after a change of lam or of the data: a regularisation path.
    class_weight : dict or "balanced", default=None
        Multiplies the sample weights per class.
    multi_class : {"ovr", "ovo"}, default="ovo"
        Reduction used for more than two classes: one-vs-one (SVC's choice; K (K - 1) / 2
        sub-problems of about 2 m / K rows) or one-vs-rest. Why one-vs-one is the default:
        the "Defaults" table of the hyperparameters page.
    n_jobs : int, default=None
        Parallel sub-problems (joblib) for more than two classes.
    random_state : int, RandomState instance or None, default=None
        Seeds the SGD example order (one independent stream per sub-problem); the Newton and
        GD solvers are deterministic.
    verbose : int, default=0
        Log progress through the ``margindist`` logger.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels.
    coef_ : ndarray of shape (n_problems, n_features)
        Weight vectors; n_problems is 1 for two classes, else the number of one-vs-rest or
        one-vs-one sub-problems.
    intercept_ : ndarray of shape (n_problems,)
        The (regularised) weight b of the constant feature.
    weight_norm_ : ndarray of shape (n_problems,)
        ||w||, the Euclidean norm of ``coef_``; the normaliser of :meth:`margins`.
    scale_ : float or ndarray of shape (n_problems,)
        The final scale S (after the rescaling, if any).
    history_ : ndarray or list of ndarrays
        SGD: the mean objective estimate of every pass; GD and Newton: J at every iterate.
    n_iter_ : int or ndarray
        Newton iterations (plus the steepest-descent steps before the rescaling), passes (SGD)
        or iterations (GD) run by the last call.
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
    sklearn.linear_model.SGDClassifier : Pegasos (hinge loss), the paper's comparison.
    LSSVM : The large-scale limit S -> infinity is a ridge regression on the margins.

    References
    ----------
    .. [1] M. J. Holland, "Classification using margin pursuit", Proceedings of the 22nd
       International Conference on Artificial Intelligence and Statistics (AISTATS), PMLR 89,
       pp. 712-720, 2019.

    Examples
    --------
    >>> from sklearn.preprocessing import MinMaxScaler
    >>> from margindist import MarginPursuit, load_dataset
    >>> X, y = load_dataset("australian")
    >>> X = MinMaxScaler().fit_transform(X)
    >>> clf = MarginPursuit(lam=1e-3).fit(X, y)
    >>> clf.score(X, y) > 0.8
    True
    """

    _parameter_constraints = {
        "margin": POSITIVE,
        "scale": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "scale_factor": POSITIVE,
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "lam": [*POSITIVE, StrOptions({"auto"})],
        "solver": [StrOptions({"auto", "newton", "sgd", "gd"})],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "batch_size": POSITIVE_INT,
        "rescale": ["boolean"],
        "rescale_quantile": [Interval(Real, 0, 1, closed="right")],
        "rescale_after": POSITIVE_INT,
        "influence": [StrOptions({"catoni_giulini", "catoni_wide"})],
        "average": ["boolean"],
        "fit_intercept": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "warm_start": ["boolean"],
        **MULTICLASS_PARAMS,
        "random_state": RANDOM_STATE,
        "verbose": VERBOSE,
    }

    def __init__(self, margin=1.0, scale="auto", scale_factor=1.0, delta=0.01, lam="auto", solver="auto",
                 max_iter=None, batch_size=1, rescale=True, rescale_quantile=0.75, rescale_after=1,
                 influence="catoni_giulini", average=True, fit_intercept=True, tol=1e-3,
                 warm_start=False, class_weight=None, multi_class="ovo", n_jobs=None,
                 random_state=None, verbose=0):
        self.margin = margin
        self.scale = scale
        self.scale_factor = scale_factor
        self.delta = delta
        self.lam = lam
        self.solver = solver
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.rescale = rescale
        self.rescale_quantile = rescale_quantile
        self.rescale_after = rescale_after
        self.influence = influence
        self.average = average
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.warm_start = warm_start
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ helpers
    def _initial_scale(self, total_weight):
        if self.scale == "auto":
            return catoni_scale(self.margin**2, total_weight, self.delta, self.scale_factor)
        return float(self.scale)

    def _lam(self, total_weight, stochastic):
        """The resolved lam: ``"auto"`` is 1 / (S s_0) for the exact solvers and 1 / S for SGD,
        whose Pegasos steps 1 / (lam t) grow with 1 / lam (at 1 / (S s_0) its default 7 passes
        fell from 0.718 to 0.681 test accuracy on a dense 120k x 100 problem)."""
        return margin_pursuit_lam(self.lam, total_weight, 1.0 if stochastic else self._initial_scale(total_weight))

    def _solver_kw(self, total_weight, stochastic):
        return dict(margin=self.margin, lam=self._lam(total_weight, stochastic),
                    influence=self.influence, fit_intercept=self.fit_intercept, rescale=self.rescale,
                    rescale_after=self.rescale_after, rescale_quantile=self.rescale_quantile,
                    delta=self.delta, scale_factor=self.scale_factor)

    def _new_sgd_state(self, d, total_weight, seed):
        return sgd_init(d, scale=self._initial_scale(total_weight), margin=self.margin,
                        lam=self._lam(total_weight, True),
                        influence=self.influence, average=self.average, seed=seed)

    def _fit_solver(self):
        return "newton" if self.solver == "auto" else self.solver

    def _warm_key(self, X, kernel, problems):
        # a previous state is a valid start for data with the same features, any number of rows
        return (X.shape[1], self._fit_solver(), [cls for _, _, cls in problems])

    def _stream_states(self, X, problems):
        # partial_fit continues SGD states only (not the state of a Newton or GD fit)
        states = super()._stream_states(X, problems)
        if states is None or not all(st is None or "sgd" in st for st in states):
            return None
        return states

    # ------------------------------------------------------------------ fit
    def _fit_binary(self, problem):
        return self._fit_one(problem.X, problem.y, problem.sample_weight, problem.seed, problem.warm)

    def _fit_one(self, X, y, sw, seed, warm):
        log = get_logger(self.verbose) if self.verbose else None
        solver = self._fit_solver()
        max_iter = self.max_iter if self.max_iter is not None else _DEFAULT_PASSES[solver]
        W = float(sw.sum())
        if solver != "sgd":
            return self._fit_deterministic(solver, X, y, sw, warm, max_iter, log)
        state = warm["sgd"] if warm is not None else self._new_sgd_state(X.shape[1], W, seed)
        kw = self._solver_kw(W, True)
        run, converged = sgd_passes(X, y, sw, state, n_passes=max_iter, batch_size=self.batch_size,
                                    average=self.average, tol=self.tol, log=log, **kw)
        if self.tol is not None and not converged:
            warnings.warn(
                f"MarginPursuit(solver='sgd') ran max_iter={max_iter} passes without the pass "
                f"objective settling within tol={self.tol}; increase max_iter, or set tol=None "
                "for a fixed budget of passes.", ConvergenceWarning, stacklevel=4)
        return self._sgd_model(state, run)

    def _fit_deterministic(self, solver, X, y, sw, warm, max_iter, log):
        """solver="gd" or "newton" (the same J, the same rescaling, the same warm-start state).

        A warm GD fit continues the previous run (its scale, its iteration count). A warm Newton
        fit sets the scale as a cold fit does (the rescaling steps from w = 0, at this fit's lam
        and rows) and starts Newton from the previous weights: the cold fit's minimiser."""
        W = float(sw.sum())
        cold = warm is None or "passes" not in warm
        if cold or solver == "newton":
            w0, b0, s0, done, rescaled = None, 0.0, self._initial_scale(W), 0, False
        else:
            w0, b0, s0 = warm["w"], warm["b"], warm["scale"]
            done, rescaled = warm["passes"], warm["rescaled"]
        kw = self._solver_kw(W, False)
        if solver == "gd":
            res = mp_gd(X, y, sw, scale=s0, max_iter=max_iter, tol=self.tol, w0=w0, b0=b0, iters_done=done,
                        rescaled=rescaled, log=log, **kw)
        else:  # the grid points of a search fold share the curvature of its rows
            curv = self._fit_shared("newton curvature", (self.fit_intercept, sw.tobytes()),
                                    lambda: newton_curvature(X, sw, self.fit_intercept), X)
            res = mp_newton(X, y, sw, scale=s0, max_iter=max_iter, tol=self.tol, curvature=curv,
                            start=None if cold else (warm["w"], warm["b"]), log=log, **kw)
        if self.tol is not None and not res.converged:
            hint = "; increase max_iter (or use solver='newton')." if solver == "gd" else "; increase max_iter."
            warnings.warn(f"MarginPursuit(solver={self.solver!r}) did not reach tol={self.tol} in {max_iter} "
                          f"iterations{hint}", ConvergenceWarning, stacklevel=5)
        state = {"w": res.w, "b": res.b, "scale": res.scale, "passes": done + res.n_iter, "rescaled": res.rescaled}
        return BinaryModel(coef=res.w.copy(), intercept=res.b, n_iter=res.n_iter,
                           extra={"warm": state, "scale": res.scale, "history": res.history})

    def _sgd_model(self, state, n_iter):
        w, b = sgd_coef(state, self.average)
        wrapped = {"w": state.w, "sgd": state, "scale": state.scale}
        return BinaryModel(coef=w, intercept=b, n_iter=n_iter,
                           extra={"warm": wrapped, "scale": state.scale,
                                  "history": np.asarray(state.history)})

    def _set_extra(self, extras):
        scales = np.array([e.get("scale", np.nan) for e in extras], dtype=np.float64)
        hist = [e.get("history", np.empty(0)) for e in extras]
        if len(extras) == 1:
            self.scale_ = float(scales[0])
            self.history_ = hist[0]
        else:
            self.scale_ = scales
            self.history_ = hist

    # ------------------------------------------------------------------ partial_fit
    @available_if(_streaming)
    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One pass of projected SGD over (X, y), continuing the previous state.

        The first call needs ``classes`` (all labels that will ever occur) unless the model
        was fitted before. On the first call of a sub-problem, ``scale="auto"`` uses the total
        weight of that call's samples as n; the rescaling happens at the end of call
        ``rescale_after`` (one pass each), on that call's samples. ``fit`` with
        ``solver="sgd", max_iter=E, tol=None`` equals E calls of ``partial_fit`` on the same
        data with the same ``random_state``; after a ``fit`` with the Newton or GD solver (the
        default ``solver="auto"`` fits with Newton), ``partial_fit`` starts a fresh SGD stream.
        ``class_weight="balanced"`` is not available here (the class frequencies of a stream
        are unknown); pass a dict.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            A batch of training data.
        y : array-like of shape (n_samples,)
            Its class labels.
        classes : array-like of shape (n_classes,), default=None
            All labels of the stream; needed on the first call unless the model was fitted.
        sample_weight : array-like of shape (n_samples,), default=None
            Per-sample weights of the batch.

        Returns
        -------
        self : MarginPursuit
            The updated estimator.
        """
        return self._partial_fit(X, y, classes, sample_weight)

    def _partial_fit_binary(self, problem):
        X, sw = problem.X, problem.sample_weight
        st = None if problem.warm is None else problem.warm["sgd"]
        if X.shape[0] > 0:
            if st is None:
                st = self._new_sgd_state(X.shape[1], float(sw.sum()), problem.seed)
            sgd_passes(X, problem.y, sw, st, n_passes=1, batch_size=self.batch_size, average=self.average,
                       tol=None, log=get_logger(self.verbose) if self.verbose else None,
                       **self._solver_kw(float(sw.sum()), True))
        if st is None:  # a one-vs-one pair not seen yet
            return BinaryModel(coef=np.zeros(X.shape[1]), intercept=0.0, n_iter=0,
                               extra={"warm": None, "scale": np.nan})
        return self._sgd_model(st, 1)
