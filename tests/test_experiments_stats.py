"""Statistics against hand computations and published worked examples.

One dataset: paired t-test, Nadeau–Bengio corrected t-test, win/tie/loss, summaries.
Several datasets: Demšar (2006, JMLR 7) Table 2 (Wilcoxon, C4.5 vs C4.5+m) and Table 6 (four
C4.5 variants on 14 datasets: Friedman, Iman–Davenport, Nemenyi, Holm), Table 5 (critical
values) and the exact Wilcoxon critical value for N = 14.
"""

import math

import numpy as np
import pytest
from scipy import stats as sps

from margindist.experiments.stats import (
    compare_splits,
    corrected_ttest,
    friedman_from_ranks,
    friedman_test,
    holm_adjust,
    holm_test,
    nemenyi_cd,
    nemenyi_q,
    nemenyi_test,
    paired_ttest,
    rank_scores,
    summarize,
    wilcoxon_test,
    win_tie_loss,
)


def _hand_ttest(a, b):
    """t = mean(d) / (sd(d) / sqrt(n)), two-sided p from the t distribution with n-1 df."""
    d = np.asarray(a, float) - np.asarray(b, float)
    n = d.size
    sd = math.sqrt(sum((x - d.mean()) ** 2 for x in d) / (n - 1))
    t = d.mean() / (sd / math.sqrt(n))
    p = 2 * sps.t.sf(abs(t), n - 1)
    return t, p


def test_ttest_matches_hand_computation():
    a = [0.80, 0.82, 0.79, 0.85, 0.81, 0.83]
    b = [0.78, 0.80, 0.80, 0.82, 0.79, 0.80]
    res = paired_ttest(a, b)
    t, p = _hand_ttest(a, b)
    assert res.n == 6
    assert res.statistic == pytest.approx(t, rel=1e-12)
    assert res.pvalue == pytest.approx(p, rel=1e-10)
    assert res.mean_diff == pytest.approx(np.mean(np.subtract(a, b)))
    assert p < 0.05 and res.outcome == 1
    # symmetric: b against a is significantly worse
    rev = paired_ttest(b, a)
    assert rev.outcome == -1 and rev.pvalue == pytest.approx(p, rel=1e-10)


def test_ttest_not_significant():
    a = [0.80, 0.70, 0.90, 0.75, 0.85]
    b = [0.78, 0.74, 0.86, 0.77, 0.84]
    res = paired_ttest(a, b)
    t, p = _hand_ttest(a, b)
    assert p > 0.05
    assert res.outcome == 0 and res.pvalue == pytest.approx(p, rel=1e-10)


def test_ttest_alpha_threshold():
    a = [0.80, 0.82, 0.79, 0.85, 0.81, 0.83]
    b = [0.78, 0.80, 0.80, 0.82, 0.79, 0.80]
    _, p = _hand_ttest(a, b)
    assert paired_ttest(a, b, alpha=p * 0.99).outcome == 0
    assert paired_ttest(a, b, alpha=p * 1.01).outcome == 1


def test_zero_variance_differences():
    same = paired_ttest([0.8, 0.7, 0.9], [0.8, 0.7, 0.9])
    assert same.outcome == 0 and same.pvalue == 1.0 and same.mean_diff == 0.0
    # the same non-zero difference on every split: significant in its direction
    up = paired_ttest([0.81, 0.71, 0.91], [0.80, 0.70, 0.90])
    assert up.outcome == 1 and up.pvalue == 0.0 and up.statistic == math.inf
    down = paired_ttest([0.79, 0.69, 0.89], [0.80, 0.70, 0.90])
    assert down.outcome == -1 and down.statistic == -math.inf


def test_too_few_pairs_and_nan():
    one = paired_ttest([0.9], [0.1])
    assert one.outcome == 0 and math.isnan(one.pvalue) and one.n == 1
    # NaN pairs are dropped before testing
    res = paired_ttest([0.8, np.nan, 0.82, 0.79, 0.85, 0.81, 0.83],
                       [0.78, 0.5, 0.80, 0.80, 0.82, 0.79, 0.80])
    t, p = _hand_ttest([0.8, 0.82, 0.79, 0.85, 0.81, 0.83], [0.78, 0.80, 0.80, 0.82, 0.79, 0.80])
    assert res.n == 6 and res.pvalue == pytest.approx(p, rel=1e-10)
    with pytest.raises(ValueError, match="differ in length"):
        paired_ttest([1, 2], [1, 2, 3])


def test_win_tie_loss_hand_case():
    win = ([0.81, 0.71, 0.91, 0.86], [0.80, 0.70, 0.90, 0.85])   # +0.01 everywhere
    tie = ([0.80, 0.70, 0.90, 0.75], [0.78, 0.74, 0.86, 0.77])
    loss = ([0.70, 0.60, 0.65, 0.62], [0.80, 0.71, 0.74, 0.73])
    assert win_tie_loss([win, tie, loss]) == (1, 1, 1)
    assert win_tie_loss([win, win, tie]) == (2, 1, 0)
    assert win_tie_loss([]) == (0, 0, 0)


def test_summarize():
    s = summarize([0.8, 0.9, 0.7, 0.6])
    assert s["n"] == 4
    assert s["mean"] == pytest.approx(0.75)
    sd = math.sqrt(((0.05**2) * 2 + (0.15**2) * 2) / 3)
    assert s["std"] == pytest.approx(sd)
    assert s["se"] == pytest.approx(sd / 2)
    assert summarize([0.5])["std"] == 0.0
    assert summarize([])["n"] == 0


# ---------------------------------------------------------------------- Nadeau–Bengio
def test_corrected_ttest_matches_hand_formula():
    a = [0.80, 0.82, 0.79, 0.85, 0.81, 0.83, 0.84, 0.80]
    b = [0.78, 0.80, 0.80, 0.82, 0.79, 0.80, 0.81, 0.80]
    n_train, n_test = 160, 40
    d = np.subtract(a, b)
    J = d.size
    var = sum((x - d.mean()) ** 2 for x in d) / (J - 1)
    t = d.mean() / math.sqrt((1 / J + n_test / n_train) * var)
    p = 2 * sps.t.sf(abs(t), J - 1)
    res = corrected_ttest(a, b, n_test / n_train)
    assert res.statistic == pytest.approx(t, rel=1e-12) and res.pvalue == pytest.approx(p, rel=1e-10)
    assert res.n == J and res.mean_diff == pytest.approx(d.mean())
    # the correction inflates the variance: the plain test is significant here, the corrected one not
    plain = paired_ttest(a, b)
    assert plain.outcome == 1 and p > 0.05 and res.outcome == 0
    assert abs(res.statistic) < abs(plain.statistic)
    # ratio -> 0 gives back the plain paired t-test
    tiny = corrected_ttest(a, b, 1e-15)
    assert tiny.statistic == pytest.approx(plain.statistic, rel=1e-9)
    assert tiny.pvalue == pytest.approx(plain.pvalue, rel=1e-8)
    assert compare_splits(a, b, "corrected-t", test_train_ratio=0.25) == res
    assert compare_splits(a, b) == plain


def test_corrected_ttest_edge_cases_and_errors():
    up = corrected_ttest([0.81, 0.71, 0.91], [0.80, 0.70, 0.90], 0.25)
    assert up.outcome == 1 and up.pvalue == 0.0
    assert corrected_ttest([0.9], [0.1], 0.25).outcome == 0
    with pytest.raises(ValueError, match="test_train_ratio"):
        corrected_ttest([1, 2], [2, 3], 0.0)
    with pytest.raises(ValueError, match="needs test_train_ratio"):
        compare_splits([1, 2], [2, 3], "corrected-t")
    with pytest.raises(ValueError, match="unknown test"):
        compare_splits([1, 2], [2, 3], "anova")


def test_win_tie_loss_with_corrected_test():
    a = [0.80, 0.82, 0.79, 0.85, 0.81, 0.83, 0.84, 0.80]
    b = [0.78, 0.80, 0.80, 0.82, 0.79, 0.80, 0.81, 0.80]
    assert win_tie_loss([(a, b)]) == (1, 0, 0)
    assert win_tie_loss([(a, b)], test="corrected-t", test_train_ratios=[0.25]) == (0, 1, 0)
    with pytest.raises(ValueError, match="ratios"):
        win_tie_loss([(a, b)], test="corrected-t", test_train_ratios=[])


# ---------------------------------------------------------------------- Demšar (2006)
# Table 6: AUC of C4.5 (m = 0), C4.5+m, C4.5+cf, C4.5+m+cf on 14 UCI datasets, with the ranks
# printed in the paper (the voting row ranks 0.975 / 0.975 as 2 / 3: unrounded values differ).
NAMES = ["C4.5", "C4.5+m", "C4.5+cf", "C4.5+m+cf"]
AUC = np.array([
    [0.763, 0.768, 0.771, 0.798], [0.599, 0.591, 0.590, 0.569], [0.954, 0.971, 0.968, 0.967],
    [0.628, 0.661, 0.654, 0.657], [0.882, 0.888, 0.886, 0.898], [0.936, 0.931, 0.916, 0.931],
    [0.661, 0.668, 0.609, 0.685], [0.583, 0.583, 0.563, 0.625], [0.775, 0.838, 0.866, 0.875],
    [1.000, 1.000, 1.000, 1.000], [0.940, 0.962, 0.965, 0.962], [0.619, 0.666, 0.614, 0.669],
    [0.972, 0.981, 0.975, 0.975], [0.957, 0.978, 0.946, 0.970],
])
PAPER_RANKS = np.array([
    [4, 3, 2, 1], [1, 2, 3, 4], [4, 1, 2, 3], [4, 1, 3, 2], [4, 2, 3, 1], [1, 2.5, 4, 2.5], [3, 2, 4, 1],
    [2.5, 2.5, 4, 1], [4, 3, 2, 1], [2.5, 2.5, 2.5, 2.5], [4, 2.5, 1, 2.5], [3, 2, 4, 1], [4, 1, 2, 3],
    [3, 1, 4, 2],
])
PAPER_AVG = [3.143, 2.000, 2.893, 1.964]


def test_ranks_of_table_6():
    ranks = rank_scores(AUC)
    voting = 12
    # every row but voting (printed ties broken by unprinted digits) gives the paper's ranks
    keep = np.arange(14) != voting
    np.testing.assert_array_equal(ranks[keep], PAPER_RANKS[keep])
    np.testing.assert_array_equal(ranks[voting], [4, 1, 2.5, 2.5])
    np.testing.assert_allclose(PAPER_RANKS.mean(axis=0), PAPER_AVG, atol=5e-4)
    # lower-is-better reverses the order; every row sums to k (k + 1) / 2
    np.testing.assert_array_equal(rank_scores(1 - AUC, higher_is_better=False), ranks)
    assert np.all(ranks.sum(axis=1) == 10)
    with pytest.raises(ValueError, match="NaN"):
        rank_scores([[0.5, np.nan]])


def test_friedman_iman_davenport_table_6():
    res = friedman_from_ranks(PAPER_RANKS.mean(axis=0), 14)
    assert round(res.statistic, 2) == 9.28 and round(res.iman_davenport, 2) == 3.69
    assert (res.df1, res.df2) == (3, 39)
    # the paper: F(3, 39) at alpha = 0.05 is 2.85, so the null hypothesis is rejected
    assert round(sps.f.ppf(0.95, 3, 39), 2) == 2.85 and res.iman_davenport_pvalue < 0.05
    assert res.pvalue == pytest.approx(sps.chi2.sf(res.statistic, 3), rel=1e-12)
    # from the ranks as printed (3 decimals), the same two-decimal statistics
    printed = friedman_from_ranks(PAPER_AVG, 14)
    assert round(printed.statistic, 2) == 9.28 and round(printed.iman_davenport, 2) == 3.69


def test_friedman_agrees_with_scipy_without_ties():
    rng = np.random.default_rng(0)
    scores = rng.random((9, 5))
    ours = friedman_test(scores)
    ref = sps.friedmanchisquare(*scores.T)
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert ours.pvalue == pytest.approx(ref.pvalue, rel=1e-10)
    n, k = scores.shape
    assert ours.iman_davenport == pytest.approx((n - 1) * ref.statistic / (n * (k - 1) - ref.statistic))
    # the same order on every dataset: chi2 = N (k - 1), F infinite
    same = friedman_test(np.tile([0.9, 0.8, 0.7], (4, 1)))
    assert same.statistic == pytest.approx(8.0) and same.iman_davenport == math.inf
    assert same.iman_davenport_pvalue == 0.0 and same.avg_ranks == (1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="at least 2"):
        friedman_from_ranks([1.0], 5)


def test_nemenyi_critical_values_table_5():
    q05 = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]
    q10 = [1.645, 2.052, 2.291, 2.459, 2.589, 2.693, 2.780, 2.855, 2.920]
    for k, a, b in zip(range(2, 11), q05, q10):
        assert nemenyi_q(k, 0.05) == pytest.approx(a, abs=1.5e-3)
        assert nemenyi_q(k, 0.10) == pytest.approx(b, abs=1.5e-3)
    assert round(nemenyi_cd(4, 14, 0.05), 2) == 1.25
    assert round(nemenyi_cd(4, 14, 0.10), 2) == 1.12


def test_nemenyi_pairs_table_6():
    at05 = nemenyi_test(PAPER_AVG, 14, 0.05, names=NAMES)
    assert len(at05) == 6 and not any(c.reject for c in at05)  # largest gap 1.179 < CD 1.25
    at10 = {(c.a, c.b): c for c in nemenyi_test(PAPER_AVG, 14, 0.10, names=NAMES)}
    # at p = 0.10 (CD 1.12) pure C4.5 is worse than C4.5+m and C4.5+m+cf, nothing else
    assert {k for k, c in at10.items() if c.reject} == {("C4.5", "C4.5+m"), ("C4.5", "C4.5+m+cf")}
    # the adjusted p-value crosses alpha exactly at the critical difference
    for c in at10.values():
        assert (c.adjusted < 0.10) == c.reject
    c = at10[("C4.5", "C4.5+m+cf")]
    assert c.rank_diff == pytest.approx(1.179) and c.z == pytest.approx(1.179 / 0.488, rel=2e-3)


def test_holm_against_control_table_6():
    res = holm_test(PAPER_AVG, 14, control="C4.5", names=NAMES)
    assert [c.b for c in res] == ["C4.5+m+cf", "C4.5+m", "C4.5+cf"]
    assert [round(c.z, 3) for c in res] == pytest.approx([2.416, 2.342, 0.512], abs=2e-3)
    # the paper prints p = 0.016, 0.019, 0.607 (from z rounded to 3 decimals)
    assert [c.pvalue for c in res] == pytest.approx([0.016, 0.019, 0.607], abs=2e-3)
    # Holm rejects the first two (p below alpha/3 and alpha/2) and keeps the third
    assert [c.reject for c in res] == [True, True, False]
    assert res[0].pvalue < 0.05 / 3 and res[1].pvalue < 0.05 / 2 and res[2].pvalue > 0.05


def test_holm_adjust_hand_case():
    # sorted p .01, .03, .04 -> 3 x .01, 2 x .03, 1 x .04 = .03, .06, .04 -> monotone .03, .06, .06
    np.testing.assert_allclose(holm_adjust([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(holm_adjust([0.5, 0.9]), [1.0, 1.0])
    assert len(holm_test([1.0, 2.0, 3.0], 10)) == 3  # all pairs without a control


def test_wilcoxon_table_2():
    res = wilcoxon_test(AUC[:, 1], AUC[:, 0])  # C4.5+m against C4.5
    assert (res.r_plus, res.r_minus, res.statistic, res.n) == (93.0, 12.0, 12.0, 14)
    assert res.outcome == 1 and res.pvalue < 0.05
    # the p-value: normal approximation with tie correction, by hand
    d = np.round(AUC[:, 1] - AUC[:, 0], 12)
    n = d.size
    _, counts = np.unique(sps.rankdata(np.abs(d)), return_counts=True)
    var = n * (n + 1) * (2 * n + 1) / 24 - (counts**3 - counts).sum() / 48
    z = (12 - n * (n + 1) / 4) / math.sqrt(var)
    assert res.pvalue == pytest.approx(2 * sps.norm.sf(abs(z)), rel=1e-9)
    rev = wilcoxon_test(AUC[:, 0], AUC[:, 1])
    assert (rev.r_plus, rev.r_minus, rev.outcome) == (12.0, 93.0, -1)


def test_wilcoxon_exact_critical_value_n14():
    # Demšar: for N = 14 at alpha = 0.05 the difference is significant iff T <= 21.
    d = np.arange(1, 15) * 0.001
    t21 = np.where(np.isin(np.arange(1, 15), [1, 2, 3, 4, 5, 6]), -d, d)  # R- = 21
    t22 = np.where(np.isin(np.arange(1, 15), [1, 2, 3, 4, 5, 7]), -d, d)  # R- = 22
    r21, r22 = wilcoxon_test(t21, np.zeros(14)), wilcoxon_test(t22, np.zeros(14))
    assert r21.statistic == 21 and r21.pvalue <= 0.05 and r21.outcome == 1
    assert r22.statistic == 22 and r22.pvalue > 0.05 and r22.outcome == 0


def test_wilcoxon_zero_differences():
    # an odd number of zeros: one is dropped, the other split evenly
    res = wilcoxon_test([0.5, 0.5, 0.5, 0.6, 0.7], [0.5, 0.5, 0.5, 0.5, 0.5])
    assert res.n == 4 and res.r_plus + res.r_minus == 10 and res.r_minus == 1.5
    same = wilcoxon_test([0.5, 0.6], [0.5, 0.6])
    assert same.pvalue == 1.0 and same.outcome == 0
