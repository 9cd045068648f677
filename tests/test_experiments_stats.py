"""Paired t-test, win/tie/loss and summaries against hand computations."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from margindist.experiments.stats import paired_ttest, summarize, win_tie_loss


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
