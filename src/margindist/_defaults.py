"""Data-dependent default parameters, in the spirit of scikit-learn's ``SVC(gamma="scale")``.

Each function takes the estimator's parameter value and the data of one (sub-)problem and
returns the number the solver uses: a number passes through unchanged (the papers' values stay
available explicitly), a string (``"auto"``, ``"scale"``) is resolved by a rule written out in
the function's docstring. Pure functions of arrays: no estimator objects, no side effects. The
estimators call them in ``fit`` (one line each); ``PAPER_DEFAULTS`` holds the fixed values the
reproduction presets and the experiment registry pass explicitly, so that the papers' numbers
do not depend on these rules.
"""

from __future__ import annotations

import numpy as np

from .solvers._gram import column_spreads, gram_dot, weighted_gram, xt_dot
from .solvers._rows import row_sq_norms

__all__ = [
    "PAPER_DEFAULTS",
    "m3svm_lam",
    "margin_pursuit_lam",
    "msvmav_alpha_beta",
    "odm_lam",
]

#: The fixed values the estimators had before their data-dependent defaults (the papers' or the
#: reference code's), by registry name; the experiment registry passes them explicitly.
PAPER_DEFAULTS = {
    "odm": {"lam": 1.0, "multi_class": "ovr"},
    "msvmav": {"alpha": 1.0, "beta": 1.0, "max_iter": 100, "return_best": False, "multi_class": "ovr"},
    "margin_pursuit": {"lam": 1e-3, "average": False, "multi_class": "ovr", "solver": "sgd"},
    "ldm": {"multi_class": "ovr"},
    "kmomd": {"multi_class": "ovr"},
    "lssvm": {"multi_class": "ovr"},
    "mamc": {"multi_class": "ovr"},
    "m3svm": {"lam": 0.01},
}

#: alpha = MSVMAV_ALPHA_FACTOR * ||u_bar||: each average-margin step moves the unit-norm w by
#: at most 1 / (2 * 256) (see :func:`msvmav_alpha_beta`).
MSVMAV_ALPHA_FACTOR = 256.0
#: beta = MSVMAV_BETA_FACTOR * mean ||x||^2 (see :func:`msvmav_alpha_beta`).
MSVMAV_BETA_FACTOR = 1.0 / 32.0
#: alpha grows by max(1, beta / (MSVMAV_SPREAD_FACTOR * lambda_typ)), lambda_typ the typical
#: curvature of the centred data per direction (see :func:`msvmav_alpha_beta`).
MSVMAV_SPREAD_FACTOR = 32.0
#: Up to this many features the centred covariance is formed exactly; beyond it ||C||_F^2 is
#: estimated from :data:`_SPREAD_PROBES` fixed Rademacher probes (Hutchinson's estimator).
_SPREAD_EXACT_MAX_D = 512
_SPREAD_PROBES = 16


def odm_lam(lam, sample_weight, theta):
    """ODM's loss weight; ``"auto"``: the weight that matches LinearSVC's ``C = 1``.

    ODM minimises 1/2 ||w||^2 + kappa / S sum_i s_i l_i(w), kappa = lam / (1 - theta)^2, with
    l_i = (1 - theta - z_i)_+^2 + mu (z_i - 1 - theta)_+^2 and S = sum_i s_i. In the rescaled
    weights w' = w / (1 - theta), whose margins z' = z / (1 - theta) are 1 at the lower edge of
    the band, the objective is (1 - theta)^2 [1/2 ||w'||^2 + kappa / S sum_i s_i
    ((1 - z'_i)_+^2 + ...)]: a squared-hinge SVM with C = kappa / S per unit of sample weight.
    LinearSVC's default (squared hinge, C = 1 on the *summed* loss) therefore corresponds to
    kappa = S, i.e. ``lam = S (1 - theta)^2`` (S = n_samples for unit weights): the loss weight
    grows with the data, as C = 1 does in an SVM, instead of the fixed ``lam = 1``
    (LIBODM's default, C = 1 / m), which drives w towards 0 on large data.

    Parameters
    ----------
    lam : float or "auto"
        The estimator's ``lam``.
    sample_weight : ndarray of shape (n_samples,)
        Positive sample weights of the sub-problem (class weights folded in).
    theta : float
        ODM's band half-width.

    Returns
    -------
    float
    """
    if isinstance(lam, str):
        return float(np.sum(sample_weight)) * (1.0 - float(theta)) ** 2
    return float(lam)


#: lam = M3SVM_LAM_FACTOR v^(p / 2) / S * 2 / K, v the typical spread of the rows (see :func:`m3svm_lam`).
M3SVM_LAM_FACTOR = 0.02
#: ISM3's (``loss="softmax"``) ``"auto"`` lam: fixed (see :func:`m3svm_lam`).
ISM3_LAM = 1e-4


def m3svm_lam(lam, X, sample_weight, p, n_classes, loss="smooth_hinge", fit_intercept=True):
    """M3SVM's lam; ``"auto"``: ``0.02 v^(p / 2) / S * 2 / K`` (S = sum of the sample weights,
    K classes) for the smoothed hinge, the fixed 1e-4 for the cross-entropy of ISM3.

    v = d' median_j v_j is the typical spread of the rows: v_j = sum_i s_i (x_ij - xbar_j)^2 / S
    is the weighted spread of feature j around its mean (its mean square sum_i s_i x_ij^2 / S
    without an intercept), and the median runs over the d' features that vary (v_j > 0). Where
    the features share a scale (standardised, min-max, L2-normalised sparse rows), v is close to
    the total spread sum_j v_j (the trace of the covariance).

    M3SVM minimises sum_i s_i sum_{k != y_i} loss_ik + lam sum_{k<l} ||w_k - w_l||^p. A fixed lam
    regularises differently on different data:

    * units: for X -> c X the same model has weights W / c, so the regulariser changes by
      c^-p; lam proportional to v^(p / 2) keeps the problem the same in any units.
      L2-normalised sparse rows (norm 1, nearly orthogonal to each other) need large weights,
      and a fixed lam let the regulariser dominate the loss there;
    * features on different scales: a feature of spread sigma^2 needs a weight of size
      1 / sigma to matter, so the weights of the many small-scale features set ||w_k - w_l||,
      and a scale taken from the total spread (dominated by the few largest features of raw
      data: incomes beside rates) regularised them (sigma_big / sigma_small)^p times too
      strongly. The median feature's spread is that of the many (raw australian .67 with the
      total spread, .85 with the median; LinearSVC .85);
    * origin: for X -> X + 1 c^T the same weights with the intercepts b - W c give the same
      scores (the intercepts carry only the eps ridge), so with an intercept the problem does
      not depend on where the data sit, and neither does v. The mean square ||x||^2 did: rows
      at 1000 + N(0, 1) made lam about 10^12 times too strong, and the model predicted one
      class (LinearSVC: 1.0 on the same data);
    * samples and classes: the loss has K - 1 terms per sample, the regulariser K (K - 1) / 2
      pairs, so lam / S * 2 / K is the regulariser's weight per pair against a unit of loss per
      sample (for two classes, 1 / S).

    The factor 0.02 is where the best point of a lam grid sat on normalised sparse rows at two
    sizes (about 1e-6 at 20k rows, 1e-7 at 200k), with v the mean square mean ||x||^2 (the
    rule before; on those rows v is 0.95 of it). Against that rule, together with the
    centring of off-centre dense rows for the solve (M3SVM's ``eps``), held-out accuracy on 24
    bundled sets (15 two-class, 5 splits; 9 multi-class, 3 splits):

    * min-max scaled: two-class -0.1 point on average (sonar +1.9; glass1 -0.9, wdbc -0.8,
      heart -0.7), multi-class +0.4 (vehicle +2.5, iris +1.5, segment +0.9; glass -1.5);
    * unscaled: two-class +4.2 points on average (australian .67 -> .85, spambase .73 -> .93,
      heart .73 -> .86, breast_cancer .92 -> .96), multi-class +10.4 (glass .31 -> .66, wine
      .68 -> .97, vehicle .57 -> .80);
    * standardised: the same accuracy on all 24; cornell's raw word counts (CSR, 3 splits)
      -0.3 point (v is 0.47 of the total spread there), a synthetic Zipf tf-idf corpus the
      same (v 0.57 of the total).

    The same rule with the fixed lam = 1e-4 before it: 200k x 50k tf-idf-like rows .803 ->
    .829, 20k x 5k .816 -> .832; at least as good on 11 of 13 bundled two-class KEEL sets,
    min-max, and on four standardised ones; on nine multi-class sets within a point either way
    on average, never more than 1 point below LinearSVC Crammer-Singer where 1e-4 was not.

    ISM3 (``loss="softmax"``) keeps lam = 1e-4. Its cross-entropy has one term per sample and no
    margin at which the loss stops: on separable data it keeps growing the weights, so the same
    scaling, with 2 / (K (K - 1)) for its one loss term per sample, was too strong on
    standardised multi-class sets (3 splits: cornell .857 -> .801, vehicle .815 -> .791, glass
    .631 -> .610), though better on spambase, splice and sonar.

    Parameters
    ----------
    lam : float or "auto"
        The estimator's ``lam``.
    X : ndarray or sparse matrix of shape (n_samples, n_features)
        Training data.
    sample_weight : ndarray of shape (n_samples,)
        Positive sample weights (class weights folded in).
    p : float
        The regulariser's exponent.
    n_classes : int
        K.
    loss : {"smooth_hinge", "softmax"}, default="smooth_hinge"
        The estimator's loss.
    fit_intercept : bool, default=True
        Whether the model has intercepts (then the spreads are taken around the feature means).

    Returns
    -------
    float
    """
    if not isinstance(lam, str):
        return float(lam)
    if loss == "softmax":
        return ISM3_LAM
    s = np.asarray(sample_weight, dtype=np.float64)
    S = float(s.sum())
    spread = typical_spread(X, s, fit_intercept) / S
    with np.errstate(over="ignore", under="ignore"):
        scale = np.float64(spread if spread > 0 else 1.0) ** (float(p) / 2.0)
    lam = float(M3SVM_LAM_FACTOR * scale / S * 2.0 / int(n_classes))
    if not (np.isfinite(lam) and lam > 0.0):
        raise ValueError(
            f"lam='auto': the regulariser's weight for features of this scale (a typical spread of {spread:.3g} "
            f"per sample, p={p:g}) is outside float64's range. Scale the features (e.g. StandardScaler) or give "
            "lam a value."
        )
    return lam


def typical_spread(X, sample_weight, centred=True) -> float:
    """d' times the median of the weighted column spreads sum_i s_i (x_ij - c_j)^2 over the d'
    columns with a non-zero spread (c the weighted column means, or 0 when not ``centred``);
    0.0 for constant data. See :func:`m3svm_lam`."""
    s = np.asarray(sample_weight, dtype=np.float64)
    squares = column_spreads(X, s)
    spreads = column_spreads(X, s, xt_dot(X, s) / s.sum()) if centred else squares
    varying = spreads[spreads > 1e-12 * squares]  # a constant column's spread is round-off
    return float(varying.size * np.median(varying)) if varying.size else 0.0


def margin_pursuit_lam(lam, total_weight, scale=1.0):
    """MarginPursuit's ridge weight; ``"auto"``: ``1 / (S max(s, 1))`` (S = sum of the sample
    weights, s = the loss scale in effect at the start, ``scale`` or its ``"auto"`` value).

    MarginPursuit minimises (lam / 2) ||w||^2 + (1 / S) sum_i s_i loss_i with
    loss_i = s rho((gamma - m_i) / s). Near the margin level rho(u) = u^2 / 2, so the loss is
    (gamma - m_i)^2 / (2 s): least squares on the margins with curvature 1 / s (and a hinge-like
    slope of at most 0.943 far from it). Divided by lam, the objective is then
    1/2 ||w||^2 + C sum_i s_i (gamma - m_i)^2 / 2 with C = 1 / (lam S s), so LinearSVC's
    default C = 1 (on its squared hinge) is ``lam = 1 / (S s)``.
    The automatic scale grows as sqrt(n), so most margins lie in the quadratic part. Below s = 1
    (a handful of samples) the quadratic part is narrower than the margin level and the loss
    acts as its slope, a hinge, so C = 1 on the slope, ``1 / S``, is kept there (with 1 / (S s)
    two samples per class were fitted at 0.75 training accuracy). With
    ``lam = 1 / S`` (C = 1 on the slope) the model was over-regularised by the factor s (test
    accuracy 0.796 against LinearSVC's 0.835 on a 200k x 50k tf-idf-like problem, 0.831 with
    this rule). A fixed lam (the Pegasos convention, the paper's) regularises ever more
    strongly, relative to the data, as n grows.

    Parameters
    ----------
    lam : float or "auto"
        The estimator's ``lam``.
    total_weight : float
        S, the sum of the sub-problem's sample weights.
    scale : float, default=1.0
        s, the loss scale at the start of the fit.

    Returns
    -------
    float
    """
    if isinstance(lam, str):
        return 1.0 / (float(total_weight) * max(float(scale), 1.0))
    return float(lam)


def _augmented_moments(X, y, sample_weight, fit_intercept, kernel):
    """(||u_bar||, mean ||x||^2) of the weighted data with the constant feature appended:
    u_bar = sum_i s_i y_i x_i / S, in the RKHS of ``kernel`` when it is not linear."""
    s = np.asarray(sample_weight, dtype=np.float64)
    S = float(s.sum())
    c = s * np.asarray(y, dtype=np.float64) / S
    B2 = 1.0 if fit_intercept else 0.0
    if kernel is not None and not kernel.is_linear:
        from .kernels import kernel_diag, rkhs_norm_sq

        u_sq = float(rkhs_norm_sq(kernel, X, c)) + B2 * c.sum() ** 2
        sq = kernel_diag(kernel, X)
    else:
        u = xt_dot(X, c)
        u_sq = float(u @ u) + B2 * c.sum() ** 2
        sq = row_sq_norms(X)
    return np.sqrt(max(u_sq, 0.0)), float(s @ sq) / S + B2


def typical_curvature(X, sample_weight):
    """lambda_typ = ||C||_F^2 / tr(C) of the weighted centred covariance C of the rows of X: the
    mean eigenvalue of C, each weighted by itself (the curvature of a least-squares term on the
    data in a typical direction that carries variance).

    It is tr(C) / d_eff with d_eff = tr(C)^2 / ||C||_F^2 the participation ratio (the effective
    number of directions the data spread over): close to tr(C) when a few directions carry the
    variance, tr(C) / d when it spreads evenly over d. Exact up to :data:`_SPREAD_EXACT_MAX_D`
    features; beyond, ||C||_F^2 = E ||C g||^2 over :data:`_SPREAD_PROBES` Rademacher vectors g
    drawn from a fixed seed (so the value is a function of the data), all C g by
    :func:`~margindist.solvers._gram.gram_dot` (one pass over CSR rows, O(nnz) per probe; float64
    sums, no temporary of X's size). Returns 0.0 for constant data.
    """
    s = np.asarray(sample_weight, dtype=np.float64)
    S = float(s.sum())
    mu = xt_dot(X, s) / S
    trace = float(s @ row_sq_norms(X)) / S - float(mu @ mu)
    if trace <= 0.0:
        return 0.0
    if X.shape[1] <= _SPREAD_EXACT_MAX_D:
        C = weighted_gram(X, s, center=mu) / S
        return float(np.sum(C * C)) / trace
    G = np.random.default_rng(0).choice([-1.0, 1.0], size=(X.shape[1], _SPREAD_PROBES))
    CG = gram_dot(X, s, G) / S - np.outer(mu, mu @ G)
    return float(np.sum(CG * CG)) / _SPREAD_PROBES / trace


def msvmav_alpha_beta(alpha, beta, X, y, sample_weight, fit_intercept=True, kernel=None):
    """MSVMAv's (alpha, beta); ``"scale"``: ``alpha = 256 ||u_bar|| max(1, beta / (32 lambda_typ))``,
    ``beta = mean ||x||^2 / 32``.

    u_bar = sum_i s_i y_i x_i / S and mean ||x||^2 = sum_i s_i ||x_i||^2 / S are taken with the
    constant-1 feature appended (``fit_intercept``) and, for a non-linear kernel, in its
    feature space (||u_bar||^2 = c^T K c with c = s y / S, ||x_i||^2 = k(x_i, x_i)).

    * alpha: the average-margin step adds u_bar / (2 alpha) to a w of norm 1 (paper Eq. 10
      with the weighted mean). A fixed alpha makes the length of that step depend on the units
      of X; with alpha proportional to ||u_bar|| every step turns w by the same angle whatever
      the feature scale, dimension or sample size.
    * beta: the semi-variance step minimises (1 / S) sum_A s_i (theta - y_i <w, x_i>)^2 +
      beta ||w - w_prev||^2 (paper Eq. 6). The data term's curvature (1 / S) sum_A s_i x_i x_i^T
      has trace at most mean ||x||^2; beta proportional to it keeps the balance between data and
      proximal term the same for any feature scale and dimension (a fixed beta = 1 nearly
      freezes w on L2-normalised sparse rows, where mean ||x||^2 = 1 spreads over thousands of
      directions, and barely damps it on 100 dense [0, 1] features).
    * alpha, on data spread over many directions (linear features only): the trace bound is
      tight when a few directions carry the data's variance. Where the variance spreads over
      thousands of directions (sparse rows, L2-normalised: every row nearly orthogonal to the
      others), the curvature in a typical direction, lambda_typ (:func:`typical_curvature`), is
      a small fraction of beta, so the semi-variance step moves w by that fraction of what it
      does on dense data, while the average-margin step still turns w by its fixed angle: the
      iteration then stays near the class-mean direction u_bar (.798 test accuracy against
      LinearSVC's .835 on 200k x 50k tf-idf-like rows, beta / lambda_typ = 2500). alpha is
      scaled up by the excess ``beta / (32 lambda_typ)`` where it exceeds 1, which shortens the
      average-margin step in proportion (.837 there; .762 -> .783 against .776 on 40k x 20k
      sparse rows). On every bundled data set, min-max scaled (every one-vs-one pair),
      beta / lambda_typ is below 7, so the factor is 1; on 100 dense [0, 1] features it is
      1.7. Shrinking beta instead (the other way to restore the balance) reached the same
      accuracy but left the iteration
      wandering to max_iter on the 200k row at two of four factors tried. A kernel's feature
      space is left at ``256 ||u_bar||`` (its spectrum is not computed).

    The factors 256 and 1/32 (each step moves w by at most 1 / 512; the semi-variance step does
    the work) are the best common point of a grid over both factors on synthetic dense and
    sparse data and seven small data sets (``benchmarks/bench_defaults.py``); the scaling, not
    the factors, is what carries the defaults across data sets.

    Parameters
    ----------
    alpha, beta : float or "scale"
        The estimator's ``alpha`` and ``beta``; numbers pass through.
    X : ndarray or sparse matrix of shape (n_samples, n_features)
        Training data of the sub-problem (the features the solver sees, or the kernel's inputs).
    y : ndarray of shape (n_samples,)
        Labels in {-1, +1}.
    sample_weight : ndarray of shape (n_samples,)
        Positive sample weights.
    fit_intercept : bool, default=True
        Whether the constant-1 feature is appended.
    kernel : KernelSpec or None, default=None
        A non-linear kernel: u_bar and ||x|| in its feature space.

    Returns
    -------
    (float, float)
    """
    if not isinstance(alpha, str) and not isinstance(beta, str):
        return float(alpha), float(beta)
    u_norm, mean_sq = _augmented_moments(X, y, sample_weight, fit_intercept, kernel)
    if isinstance(beta, str):
        beta = MSVMAV_BETA_FACTOR * mean_sq if mean_sq > 0 else 1.0
    if isinstance(alpha, str):
        alpha = MSVMAV_ALPHA_FACTOR * u_norm if u_norm > 0 else 1.0
        if kernel is None or kernel.is_linear:
            alpha *= _spread_excess(float(beta), X, sample_weight)
    return float(alpha), float(beta)


def _spread_excess(beta, X, sample_weight):
    """max(1, beta / (32 lambda_typ)): how much more the proximal term damps the semi-variance
    step in a typical direction than the trace bound allows for (1 for constant data)."""
    lam = typical_curvature(X, sample_weight)
    return max(1.0, beta / (MSVMAV_SPREAD_FACTOR * lam)) if lam > 0 else 1.0
