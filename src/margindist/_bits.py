"""Reinterpretation of an integer's bits as a float, for the compiled exponentials: 2^k is
assembled in the exponent bits of a register inside a vectorised loop (the kernel rows'
:func:`margindist.kernels._exp_nonpositive` and :func:`margindist._rbf32.exp_nonpositive32`),
where a view of an array through another dtype would take extra passes over memory."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["float32_from_bits", "float64_from_bits"]


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
