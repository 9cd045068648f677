"""Statistics of an experiment: summaries, tests on one dataset, tests over several datasets.

One dataset: the papers compare two methods by a paired t-test at the 95 % level over the
splits (both methods see the same splits), and summarise a table by the number of datasets
on which a method is significantly better (win), not significantly different (tie) or
significantly worse (loss) than the reference method. Beside it, the Nadeau–Bengio corrected
resampled t-test (:func:`corrected_ttest`) accounts for the overlap of the training sets.

Several datasets (Demšar 2006, "Statistical comparisons of classifiers over multiple data
sets", JMLR 7): the Wilcoxon signed-ranks test of two methods (:func:`wilcoxon_test`),
Friedman's test with the Iman–Davenport correction (:func:`friedman_test`) and its post-hoc
tests, Nemenyi's (:func:`nemenyi_test`, :func:`nemenyi_cd`) and Holm's
(:func:`holm_test`), all on one score per dataset and method (the mean over the splits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "TESTS",
    "FriedmanResult",
    "PairedTest",
    "RankComparison",
    "WilcoxonResult",
    "compare_splits",
    "corrected_ttest",
    "friedman_from_ranks",
    "friedman_test",
    "holm_adjust",
    "holm_test",
    "nemenyi_cd",
    "nemenyi_q",
    "nemenyi_test",
    "paired_ttest",
    "rank_scores",
    "summarize",
    "wilcoxon_test",
    "win_tie_loss",
]


@dataclass(frozen=True)
class PairedTest:
    """Result of :func:`paired_ttest` of a against b (higher is better).

    ``outcome`` is +1 when a is significantly better than b, -1 when significantly worse,
    0 otherwise (including when there are fewer than two paired values).
    """

    n: int
    mean_diff: float
    statistic: float
    pvalue: float
    outcome: int


def _paired(a, b):
    """Float arrays of equal length with the NaN pairs dropped."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size}.")
    keep = ~(np.isnan(a) | np.isnan(b))
    return a[keep], b[keep]


def _degenerate(a, b) -> PairedTest | None:
    """The result without a t statistic: fewer than two pairs, or constant differences."""
    n = int(a.size)
    if n < 2:
        md = float(np.mean(a - b)) if n else float("nan")
        return PairedTest(n, md, float("nan"), float("nan"), 0)
    d = a - b
    md = float(d.mean())
    # exactly constant differences (up to round-off of the inputs): variance zero
    if np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):
        if abs(md) <= 1e-12:
            return PairedTest(n, 0.0, 0.0, 1.0, 0)
        return PairedTest(n, md, math.copysign(math.inf, md), 0.0, 1 if md > 0 else -1)
    return None


def paired_ttest(a, b, alpha: float = 0.05) -> PairedTest:
    """Two-sided paired t-test of a vs b (``scipy.stats.ttest_rel``) at level ``alpha``.

    Zero-variance differences are decided without the t statistic (which is undefined):
    all differences zero -> no difference (p = 1); all differences equal and non-zero ->
    significant in their direction (p = 0, the same difference on every split). Fewer than
    two pairs -> not significant (p = NaN). NaN pairs are dropped.
    """
    a, b = _paired(a, b)
    early = _degenerate(a, b)
    if early is not None:
        return early
    n = int(a.size)
    md = float((a - b).mean())
    from scipy.stats import ttest_rel

    res = ttest_rel(a, b)
    t, p = float(res.statistic), float(res.pvalue)
    outcome = 0
    if p < alpha:
        outcome = 1 if md > 0 else -1
    return PairedTest(n, md, t, p, outcome)


def summarize(scores) -> dict:
    """n, mean, std (sample, ddof=1; 0 for one value), se = std / sqrt(n)."""
    s = np.asarray([v for v in scores if v is not None and not np.isnan(v)], dtype=np.float64)
    n = int(s.size)
    if n == 0:
        return {"n": 0, "mean": float("nan"), "std": float("nan"), "se": float("nan")}
    std = float(s.std(ddof=1)) if n > 1 else 0.0
    return {"n": n, "mean": float(s.mean()), "std": std, "se": std / math.sqrt(n)}


def win_tie_loss(pairs, alpha: float = 0.05, *, test: str = "paired-t", test_train_ratios=None
                 ) -> tuple[int, int, int]:
    """Counts over datasets of a method against the reference.

    Parameters
    ----------
    pairs : iterable of (scores_method, scores_reference)
        One pair of equally long, split-aligned score arrays per dataset (higher is better).
    alpha : float
        Significance level of the per-dataset tests.
    test : {"paired-t", "corrected-t"}
        The per-dataset test (see :func:`compare_splits`).
    test_train_ratios : sequence of float, optional
        n_test / n_train of each dataset's splits, in the order of ``pairs`` (for "corrected-t").
    """
    pairs = list(pairs)
    ratios = [None] * len(pairs) if test_train_ratios is None else list(test_train_ratios)
    if len(ratios) != len(pairs):
        raise ValueError(f"{len(pairs)} pairs but {len(ratios)} test/train ratios.")
    w = t = l = 0
    for (a, b), ratio in zip(pairs, ratios):
        o = compare_splits(a, b, test, alpha, ratio).outcome
        if o > 0:
            w += 1
        elif o < 0:
            l += 1
        else:
            t += 1
    return w, t, l


# ---------------------------------------------------------------------- one dataset: the test choice
#: Tests of one method against another over the splits of one dataset.
TESTS = ("paired-t", "corrected-t")


def corrected_ttest(a, b, test_train_ratio: float, alpha: float = 0.05) -> PairedTest:
    """Nadeau–Bengio corrected resampled t-test of a vs b (higher is better) at level ``alpha``.

    The J paired scores come from J train/test resamplings of one dataset; their training sets
    overlap, so the plain paired t-test underestimates the variance of the mean difference.
    Nadeau and Bengio (2003, "Inference for the generalization error", Machine Learning 52)
    replace the variance factor 1/J of the plain test by ``1/J + n_test/n_train``::

        t = mean(d) / sqrt((1/J + n_test/n_train) * var(d)),   var with ddof = 1,

    compared with Student's t with J - 1 degrees of freedom (two-sided). For r repetitions of
    k-fold cross-validation (J = r k) the ratio is 1/(k - 1), Bouckaert and Frank's corrected
    repeated k-fold test. Constant differences, fewer than two pairs and NaN pairs are handled
    as in :func:`paired_ttest`.

    Parameters
    ----------
    a, b : array-like of shape (J,)
        Split-aligned scores of the two methods.
    test_train_ratio : float
        n_test / n_train of the splits (> 0).
    alpha : float
        Significance level.

    Returns
    -------
    PairedTest
    """
    ratio = float(test_train_ratio)
    if not ratio > 0 or not math.isfinite(ratio):
        raise ValueError(f"test_train_ratio must be a positive number (n_test / n_train); got {test_train_ratio!r}.")
    a, b = _paired(a, b)
    n = int(a.size)
    early = _degenerate(a, b)
    if early is not None:
        return early
    d = a - b
    md = float(d.mean())
    var = float(d.var(ddof=1))
    t = md / math.sqrt((1.0 / n + ratio) * var)
    from scipy.stats import t as student

    p = float(2.0 * student.sf(abs(t), n - 1))
    outcome = (1 if md > 0 else -1) if p < alpha else 0
    return PairedTest(n, md, t, p, outcome)


def compare_splits(a, b, test: str = "paired-t", alpha: float = 0.05, test_train_ratio: float | None = None
                   ) -> PairedTest:
    """Test a vs b over the splits of one dataset with the named test.

    Parameters
    ----------
    a, b : array-like
        Split-aligned scores (higher is better).
    test : {"paired-t", "corrected-t"}
        The papers' paired t-test (:func:`paired_ttest`) or the Nadeau–Bengio corrected
        resampled t-test (:func:`corrected_ttest`, needs ``test_train_ratio``).
    alpha : float
        Significance level.
    test_train_ratio : float, optional
        n_test / n_train of the splits, for "corrected-t".
    """
    if test == "paired-t":
        return paired_ttest(a, b, alpha)
    if test == "corrected-t":
        if test_train_ratio is None:
            raise ValueError("the corrected t-test needs test_train_ratio = n_test / n_train.")
        return corrected_ttest(a, b, test_train_ratio, alpha)
    raise ValueError(f"unknown test {test!r}; use one of {TESTS}.")


# ---------------------------------------------------------------------- several datasets (Demšar 2006)
def rank_scores(scores, higher_is_better: bool = True) -> np.ndarray:
    """Ranks of the methods on every dataset: 1 for the best, ties get the average rank.

    Parameters
    ----------
    scores : array-like of shape (n_datasets, n_methods)
        One row per dataset, one column per method; no NaN.
    higher_is_better : bool
        True for accuracy / AUC, False for an error.

    Returns
    -------
    ranks : ndarray of shape (n_datasets, n_methods)
    """
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"scores must be a 2-D array (datasets x methods); got shape {s.shape}.")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN: rank only datasets on which every method has a result.")
    # equal up to round-off (e.g. 0.768 - 0.763 vs 0.936 - 0.931) is equal
    s = np.round(s, 12)
    return rankdata(-s if higher_is_better else s, axis=1)


@dataclass(frozen=True)
class FriedmanResult:
    """Result of :func:`friedman_test` / :func:`friedman_from_ranks`.

    ``statistic`` is Friedman's chi-square (k - 1 degrees of freedom), ``iman_davenport`` the
    Iman–Davenport F statistic (k - 1 and (k - 1)(N - 1) degrees of freedom), each with its
    p-value. ``avg_ranks`` are the average ranks (1 = best).
    """

    n_datasets: int
    n_methods: int
    avg_ranks: tuple
    statistic: float
    pvalue: float
    iman_davenport: float
    iman_davenport_pvalue: float
    df1: int
    df2: int


def friedman_from_ranks(avg_ranks, n_datasets: int) -> FriedmanResult:
    """Friedman's test and its Iman–Davenport correction from the average ranks.

    Demšar (2006, JMLR 7, Sec. 3.2.2)::

        chi2_F = 12 N / (k (k + 1)) * (sum_j R_j^2 - k (k + 1)^2 / 4)
        F_F    = (N - 1) chi2_F / (N (k - 1) - chi2_F)

    without the correction for ties that ``scipy.stats.friedmanchisquare`` applies (for
    untied data the two agree). F_F is infinite (p = 0) when every dataset ranks the methods
    in the same order.

    Parameters
    ----------
    avg_ranks : array-like of shape (k,)
        Average rank of each method over the N datasets (k >= 2).
    n_datasets : int
        N >= 2.
    """
    from scipy.stats import chi2, f

    r = np.asarray(avg_ranks, dtype=np.float64).ravel()
    k, n = int(r.size), int(n_datasets)
    if k < 2 or n < 2:
        raise ValueError(f"Friedman's test needs at least 2 methods and 2 datasets; got {k} and {n}.")
    stat = 12.0 * n / (k * (k + 1)) * (float(np.sum(r**2)) - k * (k + 1) ** 2 / 4.0)
    stat = max(stat, 0.0)
    df1, df2 = k - 1, (k - 1) * (n - 1)
    denom = n * (k - 1) - stat
    ff = (n - 1) * stat / denom if denom > 1e-12 else math.inf
    p_ff = float(f.sf(ff, df1, df2)) if math.isfinite(ff) else 0.0
    return FriedmanResult(n, k, tuple(float(x) for x in r), float(stat), float(chi2.sf(stat, df1)), float(ff),
                          p_ff, df1, df2)


def friedman_test(scores, higher_is_better: bool = True) -> FriedmanResult:
    """Friedman's test with the Iman–Davenport F over datasets (rows) and methods (columns).

    See :func:`friedman_from_ranks`; the ranks come from :func:`rank_scores`.
    """
    ranks = rank_scores(scores, higher_is_better)
    return friedman_from_ranks(ranks.mean(axis=0), ranks.shape[0])


def nemenyi_q(k: int, alpha: float = 0.05) -> float:
    """Critical value q_alpha of the two-tailed Nemenyi test for k methods.

    The studentized range quantile with infinite degrees of freedom divided by sqrt(2)
    (Demšar 2006, Table 5(a): 2.569 for k = 4 at alpha = 0.05).
    """
    from scipy.stats import studentized_range

    if k < 2:
        raise ValueError(f"the Nemenyi test needs at least 2 methods; got {k}.")
    return float(studentized_range.ppf(1.0 - alpha, int(k), np.inf) / math.sqrt(2.0))


def _rank_se(k: int, n: int) -> float:
    return math.sqrt(k * (k + 1) / (6.0 * n))


def nemenyi_cd(k: int, n_datasets: int, alpha: float = 0.05) -> float:
    """Critical difference of average ranks, CD = q_alpha sqrt(k (k + 1) / (6 N)).

    Two methods whose average ranks differ by at least CD differ significantly (Nemenyi).
    Demšar's example: k = 4, N = 14, alpha = 0.05 gives CD = 1.25.
    """
    return nemenyi_q(k, alpha) * _rank_se(int(k), int(n_datasets))


@dataclass(frozen=True)
class RankComparison:
    """One post-hoc comparison of average ranks (method ``a`` vs method ``b``).

    ``rank_diff`` = R_a - R_b (positive: b ranks better), ``z`` = rank_diff / SE with
    SE = sqrt(k (k + 1) / (6 N)), ``pvalue`` the unadjusted p, ``adjusted`` the p-value
    adjusted for the family of comparisons (Nemenyi or Holm), ``reject`` whether the
    hypothesis of equal performance is rejected at the level used.
    """

    a: object
    b: object
    rank_diff: float
    z: float
    pvalue: float
    adjusted: float
    reject: bool


def nemenyi_test(avg_ranks, n_datasets: int, alpha: float = 0.05, names=None) -> list:
    """All pairwise Nemenyi comparisons of average ranks.

    The adjusted p-value of a pair is P(range of k standard normals / sqrt(2) > ``|z|``) from the
    studentized range distribution (infinite degrees of freedom); a pair is rejected exactly
    when ``|R_a - R_b|`` >= :func:`nemenyi_cd`.

    Returns
    -------
    list of RankComparison
        In the order (0, 1), (0, 2), ..., (k-2, k-1); ``a``/``b`` are ``names`` or indices.
    """
    from scipy.stats import norm, studentized_range

    r = np.asarray(avg_ranks, dtype=np.float64).ravel()
    k, n = int(r.size), int(n_datasets)
    names = list(range(k)) if names is None else list(names)
    se = _rank_se(k, n)
    cd = nemenyi_cd(k, n, alpha)
    out = []
    for i in range(k):
        for j in range(i + 1, k):
            diff = float(r[i] - r[j])
            z = diff / se
            p = float(2.0 * norm.sf(abs(z)))
            adj = float(min(1.0, studentized_range.sf(abs(z) * math.sqrt(2.0), k, np.inf)))
            out.append(RankComparison(names[i], names[j], diff, z, p, adj, bool(abs(diff) >= cd - 1e-12)))
    return out


def holm_adjust(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values: max over j <= i of min(1, (m - j + 1) p_(j)).

    Rejecting where the adjusted p < alpha is Holm's procedure (Demšar 2006, Sec. 3.2.2).
    """
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adj = np.maximum.accumulate(adj)
    out = np.empty(m)
    out[order] = adj
    return out


def holm_test(avg_ranks, n_datasets: int, control=None, alpha: float = 0.05, names=None) -> list:
    """Holm's step-down procedure on the rank z statistics after Friedman's test.

    z = (R_i - R_j) / sqrt(k (k + 1) / (6 N)), p = 2 (1 - Phi(``|z|``)).

    Parameters
    ----------
    avg_ranks : array-like of shape (k,)
    n_datasets : int
    control : int or name, optional
        Compare every other method with this one (k - 1 hypotheses, Demšar's setting);
        default: all k (k - 1) / 2 pairs.
    alpha : float
    names : list, optional
        Method names (default: indices); ``control`` may be a name.

    Returns
    -------
    list of RankComparison
        Sorted by unadjusted p-value (the order Holm's procedure steps through).
    """
    from scipy.stats import norm

    r = np.asarray(avg_ranks, dtype=np.float64).ravel()
    k, n = int(r.size), int(n_datasets)
    names = list(range(k)) if names is None else list(names)
    se = _rank_se(k, n)
    if control is None:
        pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    else:
        c = names.index(control) if control in names else int(control)
        pairs = [(c, j) for j in range(k) if j != c]
    z = np.array([(r[i] - r[j]) / se for i, j in pairs])
    p = 2.0 * norm.sf(np.abs(z))
    adj = holm_adjust(p)
    out = [RankComparison(names[i], names[j], float(r[i] - r[j]), float(zz), float(pp), float(aa), bool(aa < alpha))
           for (i, j), zz, pp, aa in zip(pairs, z, p, adj)]
    return sorted(out, key=lambda c: c.pvalue)


@dataclass(frozen=True)
class WilcoxonResult:
    """Result of :func:`wilcoxon_test` of a against b over datasets (higher is better).

    ``r_plus``: sum of the ranks of ``|d|`` where a is better, ``r_minus`` where b is better
    (zero differences split evenly between the two); ``statistic`` T = min(R+, R-);
    ``outcome`` +1 / -1 when a is significantly better / worse, else 0.
    """

    n: int
    r_plus: float
    r_minus: float
    statistic: float
    pvalue: float
    outcome: int


def wilcoxon_test(a, b, alpha: float = 0.05) -> WilcoxonResult:
    """Wilcoxon signed-ranks test of a vs b over datasets, as in Demšar (2006, Sec. 3.1.3).

    d = a - b is ranked by ``|d|`` (average ranks for ties; differences equal up to round-off are
    equal). Ranks of zero differences are split evenly between R+ and R-; with an odd number
    of zeros one of them is ignored first. The two-sided p-value is that of
    ``scipy.stats.wilcoxon(d, zero_method="zsplit")`` on those differences: exact for small N
    without ties or zeros, the normal approximation (with the tie correction) otherwise.
    NaN pairs are dropped; all differences zero (or no pair) gives p = 1.
    """
    from scipy.stats import rankdata, wilcoxon

    a, b = _paired(a, b)
    d = np.round(a - b, 12)
    zeros = np.flatnonzero(d == 0)
    if zeros.size % 2 == 1:
        d = np.delete(d, zeros[0])
    n = int(d.size)
    if n == 0 or not np.any(d):
        half = float(n * (n + 1) / 4)
        return WilcoxonResult(n, half, half, half, 1.0, 0)
    ranks = rankdata(np.abs(d))
    half_zero = 0.5 * float(ranks[d == 0].sum())
    rp = float(ranks[d > 0].sum()) + half_zero
    rm = float(ranks[d < 0].sum()) + half_zero
    p = float(wilcoxon(d, zero_method="zsplit").pvalue)
    outcome = (1 if rp > rm else -1) if p < alpha and rp != rm else 0
    return WilcoxonResult(n, rp, rm, min(rp, rm), p, outcome)
