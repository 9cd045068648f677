import numpy as np
import pytest

from margindist.metrics import (
    margin_stats,
    msvmav_bound_term,
    multiclass_margins,
    normalized_margins,
    semivariance,
)

# hand-computed example: margins 1, 2, 3, 6 -> mean 3; below the mean: 1 (-2), 2 (-1);
# semi-variance = (4 + 1 + 0 + 0) / 4 = 1.25; variance = (4 + 1 + 0 + 9) / 4 = 3.5
M = np.array([1.0, 2.0, 3.0, 6.0])


def test_hand_computed_statistics():
    s = margin_stats(M, quantiles=(0.5,))
    assert s["n"] == 4
    assert s["min"] == 1.0 and s["max"] == 6.0
    assert s["mean"] == 3.0
    assert s["variance"] == 3.5
    assert s["std"] == pytest.approx(3.5**0.5)
    assert s["semivariance"] == 1.25
    assert s["bound_term"] == pytest.approx(1.25 / 9)
    assert s["frac_negative"] == 0.0
    assert s["q0.5"] == 2.5


def test_semivariance_and_bound():
    assert semivariance(M) == 1.25
    assert msvmav_bound_term(M) == pytest.approx(1.25 / 9)
    # scale invariance of SV / theta^2
    assert msvmav_bound_term(7.0 * M) == pytest.approx(msvmav_bound_term(M))
    # vacuous for a non-positive average margin
    assert msvmav_bound_term(-M) == float("inf")


def test_weights_equal_repeats():
    w = np.array([2, 1, 0, 3])
    rep = np.repeat(M, w)
    assert semivariance(M, sample_weight=w) == pytest.approx(semivariance(rep))
    s_w, s_r = margin_stats(M, sample_weight=w), margin_stats(rep)
    for key in ("mean", "variance", "semivariance", "bound_term", "frac_negative"):
        assert s_w[key] == pytest.approx(s_r[key])
    # weighted quantiles: the inverted-CDF rule, as on the repeated margins
    qs = (0.0, 0.1, 0.25, 0.5, 0.6, 0.75, 1.0)
    s_w = margin_stats(M, quantiles=qs, sample_weight=w)
    for q in qs:
        assert s_w[f"q{q:g}"] == np.quantile(rep, q, method="inverted_cdf")


def test_normalized_margins():
    f = np.array([2.0, -1.0, 0.5])
    y = np.array(["b", "a", "a"])
    np.testing.assert_allclose(normalized_margins(f, y, norm=2.0), [1.0, 0.5, -0.25])
    np.testing.assert_allclose(normalized_margins(f, np.array([1, -1, -1])), [2.0, 1.0, -0.5])
    with pytest.raises(ValueError, match="norm"):
        normalized_margins(f, y, norm=0.0)
    with pytest.raises(ValueError, match="length"):
        normalized_margins(f, y[:2])


def test_multiclass_margins():
    scores = np.array([[3.0, 1.0, 0.0], [0.0, 1.0, 2.0]])
    np.testing.assert_allclose(multiclass_margins(scores, [0, 1]), [2.0, -1.0])


def test_bad_margins():
    with pytest.raises(ValueError, match="empty"):
        margin_stats([])
    with pytest.raises(ValueError, match="NaN"):
        margin_stats([1.0, np.nan])
    with pytest.raises(ValueError, match="quantiles"):
        margin_stats(M, quantiles=(1.5,))
