"""RBF kernel values in float32 arithmetic, for kernel rows that are stored in float32.

A row cache that stores its rows in float32 (:func:`margindist.kernels.cache_dtype`) rounds
every value to 24 bits anyway; computing the values in float32 too lets the vector units take
twice as many lanes and the exponential a polynomial of degree 7 instead of 13. Two choices
keep the error bounded whatever the data and gamma:

* **Centred features.** The rows are shifted by their mean (in float64) before they are
  rounded to float32, so a coordinate is rounded relative to the spread of the data, not to
  its distance from the origin (rows at 100 + U(0, 1) would otherwise lose 7 bits).
* **Differences, not dot products.** ||x_i - x_j||^2 is summed from the differences, so
  it carries a relative error of a few float32 ulps however close the two rows are (the
  expansion ||x_i||^2 + ||x_j||^2 - 2 <x_i, x_j> cancels); the kernel value
  exp(-gamma d) then has an absolute error of at most about (gamma d) e^(-gamma d) times
  that, below 0.4 of it. The sum runs over the features in groups of four in their order,
  and (a - b)^2 = (b - a)^2 exactly, so k(x_i, x_j) and k(x_j, x_i) are the same float.

Where gamma or the squared distances lie far outside float32's range (:func:`centred_t32`:
rows of norm 1e20, gamma 1e-40) the cache keeps float64 arithmetic.

Measured on 14 000 rows of U(0, 1)^10 (and shifted by 100): the largest error of a value
against scikit-learn's ``rbf_kernel`` in float64 is 1.2e-7 (3.0e-8 for float64 arithmetic
rounded to float32), and a row of 14 000 values takes 15 us instead of 36 us (94 against
184 us with 100 features). The exponential runs in the chunk's one loop (2^k assembled by
reinterpreting the bits of an integer, :mod:`._bits`) and products may fuse with sums
into FMAs: 16.0 -> 12.3 us a row through the row cache (95 -> 87 us with 100 features), and
ODM at 14 000 rows of magic, whose rows beyond the cache are recomputed in every sweep,
3.25-3.45 -> 2.44-2.63 s.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._bits import float32_from_bits

__all__ = ["centred_t32", "exp_nonpositive32", "rbf_chunk32"]

_F = np.float32
# exp(x) for x <= 0: x = k ln 2 + r, |r| <= ln(2) / 2 (ln 2 split in two for Cody-Waite), e^r by
# Cephes' expf polynomial (about 1 ulp of float32), 2^k assembled in the exponent bits.
_LOG2E = _F(1.4426950408889634)
_LN2_HI = _F(0.693359375)
_LN2_LO = _F(-2.12194440e-4)
_P = tuple(_F(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                            1.6666665459e-1, 5.0000001201e-1))
_EXP_MIN = _F(-87.0)  # e^-87 ~ 1.6e-38, near the smallest normal float32; below, 0 is returned
_ZERO, _HALF, _ONE = _F(0.0), _F(0.5), _F(1.0)
#: LLVM may fuse a product and a sum into one FMA (one rounding instead of two); no reordering.
_CONTRACT = {"contract"}


@njit(cache=True, fastmath=_CONTRACT, inline="always")
def _exp32(x):
    """exp(x) for a float32 x <= 0 (about 1 ulp; 0 below -87)."""
    p0, p1, p2, p3, p4, p5 = _P
    ok = x >= _EXP_MIN
    x = x if ok else _EXP_MIN
    kf = np.floor(x * _LOG2E + _HALF)
    r = (x - kf * _LN2_HI) - kf * _LN2_LO
    p = (((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * (r * r) + r + _ONE
    two_k = float32_from_bits((np.int32(kf) + np.int32(127)) << np.int32(23))
    return p * two_k if ok else _ZERO


@njit(cache=True, fastmath=_CONTRACT)
def exp_nonpositive32(v):
    """v[j] <- exp(v[j]) in place for float32 v[j] <= 0 (about 1 ulp; 0 below -87)."""
    for j in range(v.shape[0]):
        v[j] = _exp32(v[j])


@njit(cache=True, fastmath=_CONTRACT)
def rbf_chunk32(XT, gamma, i, start, stop, o):
    """o[j - start] = exp(-gamma ||x_i - x_j||^2) for j in start..stop-1, in float32 (o float32
    of length stop - start, ``gamma`` a float32), from the float32 X^T (d, m): the squared
    differences summed in groups of four features in their order (symmetric in i, j; products
    and sums may fuse into FMAs, which keeps the symmetry since (-a) * (-a) = a * a), then the
    exponential in the same chunk."""
    d = XT.shape[0]
    n = stop - start
    for j in range(n):
        o[j] = _ZERO
    f = 0
    while f + 4 <= d:
        c0, c1, c2, c3 = XT[f, i], XT[f + 1, i], XT[f + 2, i], XT[f + 3, i]
        x0, x1, x2, x3 = XT[f, start:stop], XT[f + 1, start:stop], XT[f + 2, start:stop], XT[f + 3, start:stop]
        for j in range(n):
            a0, a1, a2, a3 = x0[j] - c0, x1[j] - c1, x2[j] - c2, x3[j] - c3
            o[j] += (a0 * a0 + a1 * a1) + (a2 * a2 + a3 * a3)
        f += 4
    while f < d:
        c = XT[f, i]
        xf = XT[f, start:stop]
        for j in range(n):
            a = xf[j] - c
            o[j] += a * a
        f += 1
    ng = -gamma
    for j in range(n):
        o[j] = _exp32(ng * o[j])


#: float32 arithmetic is used while gamma and gamma times the largest squared distance stay
#: this far inside float32's normal range (about 1.2e-38 to 3.4e38).
_F32_SAFE = (1e-30, 1e30)


def centred_t32(X, gamma) -> np.ndarray | None:
    """(X - mean) transposed to a C-ordered float32 (d, m) array, the centring in float64 (the
    RBF kernel does not change under a shift of the rows); None where float32 cannot hold the
    computation (gamma, or the squared distances, far outside its range: rows of norm 1e20 or
    gamma = 1e-40), which then stays in float64."""
    X = np.asarray(X, dtype=np.float64)
    Xc = X - X.mean(axis=0)
    r2 = 4.0 * float(np.einsum("ij,ij->i", Xc, Xc).max(initial=0.0))  # bounds every squared distance
    lo, hi = _F32_SAFE
    if not (lo <= gamma <= hi and r2 <= hi and gamma * r2 <= hi):
        return None
    return np.ascontiguousarray(Xc.T, dtype=np.float32)
