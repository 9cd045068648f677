"""Statistics of an experiment: mean, spread, standard error, paired t-tests, win/tie/loss.

The papers compare two methods on a dataset by a paired t-test at the 95 % level over the
splits (both methods see the same splits), and summarise a table by the number of datasets
on which a method is significantly better (win), not significantly different (tie) or
significantly worse (loss) than the reference method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["PairedTest", "paired_ttest", "summarize", "win_tie_loss"]


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


def paired_ttest(a, b, alpha: float = 0.05) -> PairedTest:
    """Two-sided paired t-test of a vs b (``scipy.stats.ttest_rel``) at level ``alpha``.

    Zero-variance differences are decided without the t statistic (which is undefined):
    all differences zero -> no difference (p = 1); all differences equal and non-zero ->
    significant in their direction (p = 0, the same difference on every split). Fewer than
    two pairs -> not significant (p = NaN). NaN pairs are dropped.
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size}.")
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
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


def win_tie_loss(pairs, alpha: float = 0.05) -> tuple[int, int, int]:
    """Counts over datasets of a method against the reference.

    Parameters
    ----------
    pairs : iterable of (scores_method, scores_reference)
        One pair of equally long, split-aligned score arrays per dataset (higher is better).
    """
    w = t = l = 0
    for a, b in pairs:
        o = paired_ttest(a, b, alpha).outcome
        if o > 0:
            w += 1
        elif o < 0:
            l += 1
        else:
            t += 1
    return w, t, l
