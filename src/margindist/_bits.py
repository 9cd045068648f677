"""Reinterpretation of a number's bits inside compiled loops, where a view of an array through
another dtype would take extra passes over memory:

* an integer's bits as a float: the compiled exponentials assemble 2^k in the exponent bits of
  a register (the kernel rows' :func:`margindist.kernels._exp_nonpositive` and
  :func:`margindist._rbf32.exp_nonpositive32`);
* a float's bits as an integer in the floats' order (:func:`order_key`): the minima and maxima
  of a loop as integer reductions, which vectorise (KM-OMD's pair selection)."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["KEY_INF", "KEY_NEG_INF", "bits_of_float64", "float32_from_bits", "float64_from_bits", "from_order_key",
           "order_key"]


@intrinsic
def float32_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the int32 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def float64_from_bits(typingctx, bits):
    """The float64 whose bit pattern is the int64 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def bits_of_float64(typingctx, x):
    """The int64 whose bit pattern is the float64 ``x``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


_LOW_63 = np.int64(0x7FFFFFFFFFFFFFFF)
#: The order keys of +inf and -inf: the identities of min and max reductions over keys (+inf is
#: positive, so its key is its bits; the key of -x is the complement of x's).
KEY_INF = int(np.array(np.inf).view(np.int64))
KEY_NEG_INF = ~KEY_INF


@njit(inline="always")
def order_key(x):
    """An int64 in the order of the float64 x (-0.0 just below +0.0, NaN above +inf): the
    sign-magnitude bits with the magnitude bits flipped for negative x. Integer min / max
    reductions over these keys vectorise, where the compiler leaves float ones scalar
    (7000 values: 2.2 us against 6.6 us)."""
    i = bits_of_float64(x)
    return i ^ ((i >> 63) & _LOW_63)


@njit(inline="always")
def from_order_key(k):
    """The float64 of :func:`order_key` ``k``."""
    return float64_from_bits(k ^ ((k >> 63) & _LOW_63))
