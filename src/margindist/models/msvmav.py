"""MSVMAv: margin distribution by average margin and semi-variance (Qian, Ai, Zhang, Gao, IJCAI 2022)."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from .._base import BaseMarginClassifier, BinaryModel, get_logger
from .._defaults import msvmav_alpha_beta
from .._params import (
    KERNEL_APPROXIMATION,
    KERNEL_PARAMS,
    LANDMARKS,
    MULTICLASS_PARAMS,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    RANDOM_STATE,
    VERBOSE,
)
from ..solvers.msvmav import (
    FactorCache,
    creeping,
    msvmav_kernel,
    msvmav_linear,
)

__all__ = ["MSVMAv"]


#: Root-mean-square row norms the linear path with its constant-1 intercept feature serves
#: (FeatureScaleWarning outside).
_INTERCEPT_ROW_RANGE = (1e-2, 1e2)


#: MiB of ``cache_size`` (the factorisation cache, and the exact path's budget under "auto").
_DEFAULT_CACHE_MIB = 500


class MSVMAv(BaseMarginClassifier):
    """MSVMAv: maximise the average margin and minimise the margin semi-variance.

    Qian, Ai, Zhang, Gao, "On the Optimization of Margin Distribution", IJCAI 2022.
    Their generalisation bound (Theorem 1) is governed by SV(h) / theta_h^2 plus a complexity
    term, with theta_h the average margin and SV(h) = (1/n) sum_i (theta_h - y_i h(x_i))_+^2 the
    *semi-variance*, the mean squared shortfall of the margins below their average (see
    :func:`margindist.metrics.msvmav_bound_term`). MSVMAv decreases it by alternating two
    closed-form steps on the unit sphere ||w|| = 1 (paper Algorithm 1, T = ``max_iter``):

    * semi-variance step (Eq. 6), with A_k = {i : y_i <w_{k-1}, x_i> < theta_{k-1}}::

          w'_k = argmin_w (1/n) sum_{A_k} (theta_{k-1} - y_i <w, x_i>)^2 + beta ||w - w_{k-1}||^2
               = M_k (theta/(n beta) sum_{A_k} y_i x_i + w_{k-1}),
          M_k  = (I + sum_{A_k} x_i x_i^T / (n beta))^{-1};

    * average-margin step (Eq. 10)::

          w_k = argmin_w -(1/n) sum_i y_i <w, x_i> + alpha ||w - w'_k||^2
              = w'_k + u / (2 alpha n),   u = sum_i y_i x_i;

      then w_k <- w_k / ||w_k||, and w_k <- -w_k if its average margin is negative
      (Section 5), so theta stays positive.

    Start: w_0 = u / ||u|| (Eq. 3). With ``fit_intercept`` the constant 1 is appended to every
    x_i, as in the paper: the bias is a coordinate of w and part of ||w|| = 1 (``coef_`` holds
    the other coordinates, ``intercept_`` its weight). The paper scales features to [0, 1];
    do that yourself (e.g. ``MinMaxScaler``).

    Corrections of the paper and decisions:

    * Eq. 8 (adding x x^T / (n beta) to M^{-1} when i enters A) is printed as
      M + M x x^T M / (x^T M x + n beta); Sherman-Morrison gives M - M x x^T M / (x^T M x + n beta)
      (the removal Eq. 7, M - M x x^T M / (x^T M x - n beta), is right). Implemented: the '-'
      sign — with the printed one M_k leaves H_k^{-1} without bound and accuracy collapses.
    * Eq. 6 freezes the active set A_k at w_{k-1}. The paper calls it a rewrite of the
      proximal semi-variance step, but it is exact only while A does not change; it is kept
      as printed (it is what the paper evaluated). For small beta the frozen step differs
      noticeably from the exact proximal minimiser.
    * Section 4 writes the objective as SV / theta; Section 3 and the bound use SV / theta^2,
      which is what ``history_`` reports and what ``return_best`` minimises.
    * Kernel version (Section 4.2), f(x) = sum_j a_j k(x_j, x): a_0 = y / sqrt(y^T K y) and
      a'_k = (I + K + sum_{A_k} K_i K_i^T / (n beta))^{-1}
      ((I + K) a_{k-1} + theta/(n beta) sum_{A_k} y_i K_i),
      a_k = a'_k + y / (2 alpha n), normalised to a^T K a = 1, sign flipped like w. Two typos
      fixed: the printed a'_k uses the average margin of a'_k inside its own definition (read:
      theta of a_{k-1}, the only reading with a closed form), and writes the scalar
      K_i^T K_i where the outer product K_i K_i^T is meant. This a'_k is the exact minimiser
      of (1/n) sum_{A_k} (theta - y_i K_i^T a)^2 + beta (a - a_{k-1})^T (I + K) (a - a_{k-1}).
    * Sample weights s_i (times class weights) replace counts everywhere: weighted average
      margin, weighted semi-variance sums with n beta -> (sum_i s_i) beta, weighted u (and
      a_0, a-step y -> s y in the kernel path). The ridge part I of the kernel path's
      proximal metric becomes diag(1 / s_i), the only choice under which an integer weight k
      equals k copies of a row there (copies split their coefficient); for unit weights it is
      the paper's I. Integer weights equal copied rows on every path except Nyström (its
      landmarks are drawn from the rows).
    * The kernel path with kernel="linear" is not the linear algorithm: the I of the (I + K)
      metric adds a ridge on the coefficients. ``kernel_prox="rkhs"`` drops it
      (beta (a - a_{k-1})^T K (a - a_{k-1}) = beta ||f - f_{k-1}||^2 in the RKHS, the exact
      kernelisation of the linear step), and then ``dual=True, kernel="linear"`` reproduces the linear
      path's decision values.

    Parameters
    ----------
    alpha : float or "scale", default="scale"
        The paper's alpha: proximal weight of the average-margin step; the step adds
        u / (2 alpha n), so smaller alpha pushes harder towards a large average margin.
        The paper selects alpha from {2^-10, 2^-8, ..., 2^10} (on [0, 1] features; its
        reference value 1.0 stays available explicitly). ``"scale"``: 256 ||u / n|| (weighted,
        constant feature included, in the kernel's feature space for kernels), so that every
        step turns the unit-norm w by the same angle (at most 1/512) whatever the units,
        dimension and size of the data; for linear features times max(1, beta / (32 lambda_typ)),
        lambda_typ the curvature of the centred data in a typical direction, which shortens the
        step in proportion where the data spread over thousands of directions (sparse
        normalised rows) and the semi-variance step is damped accordingly (see
        :func:`margindist._defaults.msvmav_alpha_beta`).
    beta : float or "scale", default="scale"
        The paper's beta: proximal weight of the semi-variance step; smaller beta pulls the
        margins below the average harder towards it. Same grid as alpha. ``"scale"``:
        mean ||x_i||^2 / 32 (weighted, constant feature included; k(x_i, x_i) for kernels),
        the trace bound of the step's data curvature, so that the balance of data and proximal
        term does not depend on the feature scale or dimension (a fixed beta = 1 nearly freezes
        w on L2-normalised sparse rows).
    kernel : {"linear", "rbf", "poly", "sigmoid", "precomputed"} or callable, default="linear"
        Kernel: scikit-learn's names and definitions, ``"precomputed"`` (X is a Gram
        matrix) or a callable ``k(X, Z)`` returning an (n, m) array. A kernel that is not
        positive semi-definite (sigmoid, poly with coef0 < 0) runs, on the exact path, with the
        Gram matrix's positive part (its negative eigenvalues clipped to 0), with a warning.
    gamma : {"scale", "auto"} or float, default="scale"
        Kernel coefficient for rbf / poly / sigmoid (scikit-learn's definitions).
    degree : int, default=3
        Degree of the ``"poly"`` kernel.
    coef0 : float, default=0.0
        Independent term of the ``"poly"`` and ``"sigmoid"`` kernels.
    max_iter : int, default=1000
        T, the paper's number of iterations (its stopping rule; the paper's protocol uses
        T = 100, ``max_iter=100, return_best=False``). The default is a cap for
        ``return_best=True``: the iteration is a fixed-point heuristic whose SV/theta^2 is not
        monotone, and on most data sets its best iterate comes within the first few hundred
        iterations.
    tol : float, default=1e-6
        Stop before ``max_iter`` when an iteration leaves the active set unchanged and moves
        the unit-norm w by at most ``tol`` (for ``solver="anderson"``: when the paper's map
        would move it by at most ``tol``, ||T(w) - w|| <= tol, a fixed point to that tolerance).
        ``tol=0`` runs exactly T iterations, as the paper.
    solver : {"auto", "fixed-point", "anderson"}, default="auto"
        How the fixed point of the paper's iteration w_k = T(w_{k-1}) is approached.
        ``"fixed-point"``: the paper's iteration itself (the reproduction presets). ``"anderson"``: Anderson acceleration
        of the same map (the next point is the combination of the last ten iterates whose
        residuals T(w) - w cancel best in least squares; the memory is dropped when a residual
        grows; it also stops once its best SV/theta^2 has not improved in 50 evaluations;
        :mod:`margindist.solvers.msvmav._anderson`). A fixed point of one is a fixed
        point of the other, and where the paper's iteration creeps towards one the accelerated
        run gets there in tens instead of thousands of iterations: with the default alpha and
        beta every paper step turns w by at most 1/512 (200k x 50k sparse rows: SV/theta^2
        still falling after 1000 paper iterations, 32 s; the accelerated run converged in 10
        evaluations, 2.5 s, to a lower SV/theta^2 and the same test accuracy). It is not the
        default because the iteration often does not converge: on small dense data sets the
        paper's iteration wanders past its best iterate (which ``return_best`` keeps) and the
        extrapolation can settle at another fixed point with a larger SV/theta^2 (measured on
        titanic, ionosphere, german and the one-vs-one problems of a small text set; see
        "Solvers" on the MSVMAv page). ``return_best`` keeps the point of smallest SV/theta^2
        the accelerated run visited. ``"auto"``: the paper's iteration; where it is unsettled
        with its SV/theta^2 still falling (it creeps towards a fixed point it has not reached)
        after its first 100 iterations (the paper's T), or else at ``max_iter``, and
        ``return_best`` is set, the accelerated iteration continues from its best iterate (at
        most 50 evaluations without a better point), and the model is the best point of both
        runs, never worse than the paper iteration's best. Elsewhere, and for kernel models
        (exact or ``kernel_approximation``), "auto" is "fixed-point" (a run that wanders at
        100 iterations goes on from there to ``max_iter``: the same model).
    fit_intercept : bool, default=True
        Append the constant-1 feature (the paper's bias, inside the norm). For kernels this is
        the kernel k + 1 with ``intercept_`` = sum_j a_j, so that ``kernel="linear"`` is the same
        model through either path; the paper's kernel model has no bias (use False for it;
        an independent reference implementation found no consistent accuracy difference).
    update : {"auto", "sherman-morrison", "batched", "cg"}, default="auto"
        How M_k (the inverse of the semi-variance system, order d, or m for kernels) follows
        the changes of A_k:

        * "sherman-morrison": the explicit inverse updated by the corrected Eqs. 7/8 (removals
          and additions as two separate Woodbury blocks; O(c d^2) for c changed indices),
          checked against round-off every fourth update and recomputed when needed (see
          ``refresh_every``); the first iteration starts from M = P^{-1} (I for the linear
          path), as the paper does;
        * "batched": the Gram sum over A_k kept incrementally (O(c d^2)) and refactorised by
          Cholesky each iteration (O(d^3));
        * "cg": conjugate gradients with products through a reused copy of the rows of A_k,
          never a d x d matrix (sparse / high-dimensional X); preconditioner: diagonal plus the
          rows' mean direction; start: the Galerkin combination of the last solutions, whose
          products with the system are kept current, so that a settled iteration needs about
          two products through X_A per step;
        * "auto": dense X with at most 128 columns (bias included): a compiled loop of the
          batched scheme (rank-one updates save nothing at this size and per-call overhead
          dominates); CG above 4096 features (2048 for sparse X); otherwise per iteration the
          cheaper of a Woodbury update (about 4 c d^2 flops) and a refactorisation (d^3 / 3).
          Dense X with fewer rows n than coordinates d (features and bias): first the rows'
          coordinates in an orthonormal basis of their span (one QR factorisation, O(d n^2)),
          where every iterate lies; the same iteration then runs on n coordinates.
          Kernel path with ``kernel_prox="paper"`` and a positive semi-definite kernel (rbf,
          linear, poly with coef0 >= 0): no eigendecomposition; one Cholesky inverse of
          diag(1/s) + K and a compiled loop in the coefficients, where the semi-variance step is
          a solve with the #A x #A capacitance matrix (#A the size of A) of the Woodbury identity, kept as an
          explicit inverse through bordering / Schur-complement updates as indices enter and
          leave A (O(c #A^2)), refactorised when cheaper. The other kernel cases: the
          eigenbasis of K with the linear path's schemes.
    refresh_every : int, default=None
        Round-off control of the Sherman-Morrison scheme: every fourth incremental update the
        inverse is checked against the system on a fixed probe vector (O(d^2)) and recomputed
        from scratch (O(d^3)) when the relative residual exceeds 1e-10; an int additionally
        forces a recomputation after that many incremental iterations.
    return_best : bool, default=True
        Return the iterate with the smallest training SV/theta^2 instead of the last one
        (the paper returns the last, ``return_best=False``; SV/theta^2 is not monotone along
        the iteration, and the last iterate of a long run can be far worse than the best:
        e.g. on magic 0.715 against 0.777 test accuracy after 1000 iterations).
        ``best_iter_`` tells which iterate was best either way.
    dual : "auto" or bool, default="auto"
        True: the kernel path (Section 4.2) also for ``kernel="linear"`` (with
        ``kernel_prox="rkhs"`` it reproduces the linear path's decision values; useful when
        n << d). False: the linear path (needs ``kernel="linear"`` or
        ``kernel_approximation``). "auto": linear path for the linear kernel, else kernel path.
    kernel_prox : {"paper", "rkhs"}, default="paper"
        Metric of the semi-variance proximal term of the kernel path: "paper" is
        beta (a - a')^T (I + K) (a - a') as printed; "rkhs" is beta (a - a')^T K (a - a'), the
        exact kernelisation of the linear step (the I term of the paper adds a ridge on the
        coefficients, so with "paper" a linear kernel gives a slightly different model).
    kernel_approximation : int, "auto" or None, default="auto"
        None: the exact kernel model. An int k: the method's own linear solver on the Nyström
        features of k landmark rows of each sub-problem, stored as a kernel expansion over the
        landmarks (the exact model when every row is one, with ``kernel_prox="rkhs"``).
        ``"auto"``: the exact model while its two m x m float64 arrays (K and the inverse of
        diag(1/s) + K: 16 m^2 bytes for a sub-problem of m rows) fit ``cache_size`` (up to
        5724 rows at the default 500 MiB), else landmarks, said in the log: the fewest of 100,
        200, 400 and 700 that leave at most 5 % of the kernel's trace out (with the rbf kernel
        or a poly kernel with coef0 >= 0), else 1000 (with a ``KernelApproximationWarning``
        where they leave more than 30 % out). From 2001 rows (distinct (x, y) pairs) on, also
        within the budget, the fewest of 100, ..., 1000 landmarks that leave at most 5 % out
        (a model close to the exact one, much faster: magic, 5000 rows, 100 landmarks, 34.8 s
        -> 0.11 s), else the exact model. The exact path has no bound on its memory
        (m = 20 000 needs 6.4 GB and an O(m^3) factorisation): None asks for it at any size.
        Ignored for the linear kernel; an int not with ``kernel="precomputed"`` ("auto" is
        exact there). See "Kernel approximation" on the hyperparameters page.
    landmarks : {"uniform", "kmeans++"}, default="uniform"
        How ``kernel_approximation`` draws its landmarks (with ``random_state``): uniformly,
        or by k-means++ seeding in the input space, weighted by the sample weights.
    cache_size : float, default=500
        MiB for the cache of the kernel path's factorisations (the inverse of diag(1/s) + K with
        K, or an eigendecomposition; least recently used first out) that one ``fit`` holds:
        its one-vs-rest sub-problems on the same weights share the O(m^3) factorisation. The
        cache is dropped when ``fit`` returns. 0 disables it. Not used when ``factor_cache``
        is given. Also the budget of ``kernel_approximation="auto"`` (0, no cache, leaves it at
        500).
    factor_cache : FactorCache, default=None
        A :class:`margindist.solvers.msvmav.FactorCache` shared across fits: another
        (alpha, beta) of a grid search on the same data, kernel and weights reuses the
        factorisation. Pass one instance to every grid point (``clone`` keeps the instance,
        a pickled copy arrives empty); its own ``max_bytes`` bounds it. None: only the
        per-fit cache of ``cache_size``.
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
        Only used by ``kernel_approximation``.
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
        Weights without the bias coordinate (linear path); n_problems is 1 for two classes.
        ``[coef_, intercept_]`` has unit norm when ``fit_intercept`` (the paper's
        normalisation).
    intercept_ : ndarray of shape (n_problems,)
        The bias weight (the appended constant's coordinate of w).
    dual_coef_ : ndarray of shape (n_problems, n_SV)
        Kernel expansion coefficients a (kernel path and ``kernel_approximation``, whose
        expansion is over the landmarks).
    support_ : ndarray of shape (n_SV,)
        Indices of the expansion points in the training data (kernel path).
    support_vectors_ : ndarray of shape (n_SV, n_features)
        The expansion points (kernel path and ``kernel_approximation``).
    n_support_ : ndarray of shape (n_problems,)
        Number of expansion points of each sub-problem.
    n_iter_ : int or ndarray
        Iterations run (per sub-problem for more than two classes).
    history_ : dict of ndarrays (list of dicts for more than two classes)
        One row per iterate w_0 ... w_T: ``theta`` (average margin), ``semivariance`` (SV),
        ``bound`` (SV / theta^2), ``n_active`` (#A the iterate induces), ``n_changes``
        (indices that entered or left A against the previous iterate), ``step``
        (||w_k - w_{k-1}||, NaN for w_0), ``update`` (scheme used for the step that produced
        the iterate). Margins here are of the unit-norm w,
        bias included.
    best_iter_ : int or ndarray
        Iterate with the smallest SV / theta^2.
    weight_norm_ : ndarray of shape (n_problems,)
        ||w|| without the bias coordinate, the normaliser of :meth:`margins`.
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
    MAMC : The average-margin direction MSVMAv starts from.
    ODM : Margin mean and variance with a band of zero loss.
    margindist.metrics.msvmav_bound_term : The quantity SV / theta^2 that MSVMAv lowers.

    Notes
    -----
    Costs: linear path O(nnz(X)) per iteration plus the update of M_k (see ``update``);
    kernel path O(m^3) once (Cholesky inverse of diag(1/s) + K, or an eigendecomposition; two
    m x m arrays) and O(m^2 + c #A^2) per iteration for c indices changing A (O(m^2 + c m^2)
    in the eigenbasis). A ConvergenceWarning is raised when the active set still changed in the
    last iterations (T is only a cap; for some (alpha, beta) the iteration oscillates) and the
    returned iterate is the last one, or, with ``return_best=True``, when those last iterations
    also lowered the best SV/theta^2 by more than a relative 1e-4 (still improving; later gains
    are typically 1e-6 per iteration): raise ``max_iter`` or use ``return_best=True``.

    There is no ``warm_start``: the method is the fixed-point iteration itself, started from
    the normalised average-margin direction, and its result depends on that start and on T
    (``max_iter``, tuned in the paper's protocol) rather than being the unique minimiser of an
    objective; starting from another model's iterate would change the model, not only the
    cost. What a grid search repeats is shared instead: the kernel factorisation
    (``factor_cache``).

    References
    ----------
    .. [1] M. Qian, Q. Ai, C. Zhang and W. Gao, "On the optimization of margin distribution",
       Proceedings of the 31st International Joint Conference on Artificial Intelligence
       (IJCAI), 2022.

    Examples
    --------
    >>> from sklearn.preprocessing import MinMaxScaler
    >>> from margindist import MSVMAv, load_dataset
    >>> X, y = load_dataset("australian")
    >>> X = MinMaxScaler().fit_transform(X)
    >>> clf = MSVMAv(alpha=4, beta=1 / 4).fit(X, y)
    >>> clf.score(X, y) > 0.8
    True
    """

    #: the exact kernel path holds K and the inverse of diag(1/s) + K (``kernel_approximation="auto"``)
    _exact_kernel_arrays = 2
    #: beyond this many rows the exact path (an O(m^3) factorisation, then up to 1000 O(m^2)
    #: iterations: 4.4 s at 2000 rows of magic, 32 s at 5000) gives way to the fewest landmarks
    #: that capture the kernel (``kernel_approximation="auto"``; below it, 100 landmarks cost
    #: 0.1-0.7 point against the exact model on 1000-2000 rows of magic)
    _auto_landmark_rows = 2000

    #: a kernel that is not positive semi-definite (the fit-time warning)
    _indefinite_kernel_effect = ("{name} runs with a positive semi-definite stand-in for it (the exact path clips "
                                 "the Gram matrix's negative eigenvalues to 0), which can be far from the kernel "
                                 "itself")

    def _auto_budget_mib(self) -> float:
        # cache_size=0 turns the factorisation cache off, not the exact path: the default budget
        return self.cache_size or _DEFAULT_CACHE_MIB

    @property
    def _expected_failed_checks(self):
        if self.kernel != "linear" or self.alpha == "scale":  # the kernel paths and alpha="scale" pass it
            return {}
        return {
            "check_class_weight_classifiers": (
                "The check expects weights {0: 1000, others: 1e-4} to put ~all test points into "
                "class 0 on unscaled, very noisy blobs. The linear MSVMAv fixed point for "
                "alpha = beta = 1 trades the weighted average margin against the weighted "
                "semi-variance with the bias inside ||w|| = 1; it converges to a direction that "
                "halves the data (0.54 / 0.60 of the points in class 0). With alpha = 2^10, "
                "beta = 2^-10 it predicts class 0 for all."
            ),
        }

    _parameter_constraints = {
        "alpha": [*POSITIVE, StrOptions({"scale"})],
        "beta": [*POSITIVE, StrOptions({"scale"})],
        **KERNEL_PARAMS,
        "max_iter": POSITIVE_INT,
        "tol": NON_NEGATIVE,
        "solver": [StrOptions({"auto", "fixed-point", "anderson"})],
        "fit_intercept": ["boolean"],
        "update": [StrOptions({"auto", "sherman-morrison", "batched", "cg"})],
        "refresh_every": [Interval(Integral, 1, None, closed="left"), None],
        "return_best": ["boolean"],
        "dual": [StrOptions({"auto"}), "boolean"],
        "kernel_prox": [StrOptions({"paper", "rkhs"})],
        "kernel_approximation": KERNEL_APPROXIMATION,
        "landmarks": LANDMARKS,
        "cache_size": [Interval(Real, 0, None, closed="left")],
        "factor_cache": [FactorCache, None],
        **MULTICLASS_PARAMS,
        "random_state": RANDOM_STATE,
        "verbose": VERBOSE,
    }

    def __init__(self, alpha="scale", beta="scale", kernel="linear", gamma="scale", degree=3, coef0=0.0,
                 max_iter=1000, tol=1e-6, solver="auto", fit_intercept=True, update="auto", refresh_every=None,
                 return_best=True, dual="auto", kernel_prox="paper", kernel_approximation="auto", landmarks="uniform",
                 cache_size=_DEFAULT_CACHE_MIB, factor_cache=None, class_weight=None, multi_class="ovo", n_jobs=None,
                 random_state=None,
                 verbose=0, device=None):
        self.alpha = alpha
        self.beta = beta
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.max_iter = max_iter
        self.tol = tol
        self.solver = solver
        self.fit_intercept = fit_intercept
        self.update = update
        self.refresh_every = refresh_every
        self.return_best = return_best
        self.dual = dual
        self.kernel_prox = kernel_prox
        self.kernel_approximation = kernel_approximation
        self.landmarks = landmarks
        self.cache_size = cache_size
        self.factor_cache = factor_cache
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.device = device

    # ------------------------------------------------------------------ fit
    def _row_norm_range(self, X, spec):
        """With the intercept, a constant feature 1 is appended to rows that are scaled to a unit
        direction: rows of norm below 0.01 leave it dominating the direction and the scale of
        beta (a weighted six-point problem at row norm 1e-3 fitted 0.67 of its training points,
        1.0 at norm 1); on rows of norm above 100 the intercept stays far too small (raw,
        unscaled features, rows of norm 200 to 6000: 3 to 14 points below LinearSVC on seven
        UCI sets, level with it once standardised)."""
        if not self.fit_intercept or (spec is not None and not spec.is_linear):
            return super()._row_norm_range(X, spec)
        return _INTERCEPT_ROW_RANGE

    def _prepare(self, X, y_index, sample_weight, kernel):
        self._fit_cache = None  # the per-fit factorisation cache, made on first use

    def _release(self):
        self._fit_cache = None

    def _factor_cache(self):
        """The shared ``factor_cache``, else this fit's own cache of ``cache_size`` MiB (None when 0)."""
        if self.factor_cache is not None:
            return self.factor_cache
        if getattr(self, "_fit_cache", None) is None and self.cache_size > 0:
            budget = int(self.cache_size * 2**20)
            # grid points on one fold of a search share it (the cache knows its X, kernel, weights)
            self._fit_cache = self._fit_shared("factorisations", budget, lambda: FactorCache(budget))
        return getattr(self, "_fit_cache", None)

    def _solver_kwargs(self):
        # "auto" finishes creeping runs on the linear path only: a kernel model, exact or on
        # Nystroem features, keeps the paper's iteration (so that every landmark gives the exact model)
        kernel_model = self.kernel != "linear"
        solver = "fixed-point" if self.solver == "auto" and kernel_model else self.solver
        return {"max_iter": self.max_iter, "tol": self.tol, "update": self.update,
                "refresh_every": self.refresh_every, "return_best": self.return_best, "solver": solver,
                "log": get_logger(self.verbose)}

    def _fit_binary(self, problem):
        X, y, sample_weight, kernel = problem.X, problem.y, problem.sample_weight, problem.kernel
        log = get_logger(self.verbose)
        kw = self._solver_kwargs()
        use_kernel = self.dual is True or (self.dual == "auto" and not kernel.is_linear)
        if not use_kernel:
            if not kernel.is_linear:
                raise ValueError(
                    f"dual=False needs kernel='linear' or the Nystrom path (an int kernel_approximation; "
                    f"'auto' is exact on {X.shape[0]} rows); got kernel={self.kernel!r}."
                )
            log.info("MSVMAv linear path: n=%d d=%d update=%s", X.shape[0], X.shape[1], self.update)
            alpha, beta = msvmav_alpha_beta(self.alpha, self.beta, X, y, sample_weight, self.fit_intercept)
            res = msvmav_linear(X, y, sample_weight, alpha, beta, fit_intercept=self.fit_intercept, **kw)
            return self._model(res, coef=res.w, intercept=res.b)
        log.info("MSVMAv kernel path (%s): m=%d, O(m^3) factorisation", kernel.kind, X.shape[0])
        alpha, beta = msvmav_alpha_beta(self.alpha, self.beta, X, y, sample_weight, self.fit_intercept, kernel)
        res = msvmav_kernel(kernel, X, y, sample_weight, alpha, beta,
                            fit_intercept=self.fit_intercept, kernel_prox=self.kernel_prox,
                            cache=self._factor_cache(), **kw)
        return self._model(res, dual_coef=res.w, intercept=res.b, norm_sq=res.norm_sq)

    def _model(self, res, **kw):
        """The sub-problem's BinaryModel from the solver's result; the solver reports how the
        run ended (``converged``, ``changing``) and the ConvergenceWarning is raised here."""
        h = res.history
        get_logger(self.verbose).info(
            "MSVMAv: %d iterations (%s), theta=%.4g, SV/theta^2=%.4g (best %.4g at %d), |A|=%d, "
            "changes in the last iteration=%d", res.n_iter,
            "converged" if res.converged else "max_iter", h["theta"][-1], h["bound"][-1],
            h["bound"][res.best_iter], res.best_iter, h["n_active"][-1], h["n_changes"][-1])
        if creeping(res) if self.return_best else res.changing:
            best = ""
            if not self.return_best and h["bound"][res.best_iter] < h["bound"][-1]:
                best = (f" The returned last iterate has SV/theta^2 = {h['bound'][-1]:.4g}; iterate "
                        f"{res.best_iter} had {h['bound'][res.best_iter]:.4g}.")
            remedy = ("Increase max_iter." if self.return_best else
                      "Increase max_iter, or use return_best=True to keep the iterate with the best SV/theta^2.")
            warnings.warn(
                f"MSVMAv: the active set (margins below the average) still changed in the last "
                f"iterations of {res.n_iter}; the iterate has not settled.{best} {remedy}",
                ConvergenceWarning,
                stacklevel=4,
            )
        extra = {"history": res.history, "best_iter": res.best_iter}
        return BinaryModel(n_iter=res.n_iter, extra=extra, **kw)

    def _set_extra(self, extras):
        if len(extras) == 1:
            self.history_ = extras[0]["history"]
            self.best_iter_ = extras[0]["best_iter"]
        else:
            self.history_ = [e["history"] for e in extras]
            self.best_iter_ = np.array([e["best_iter"] for e in extras])
