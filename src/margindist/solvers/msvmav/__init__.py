"""MSVMAv (Qian, Ai, Zhang, Gao, IJCAI 2022): alternating average-margin / semi-variance steps.

Notation (weighted; s_i > 0 the sample weights, S = sum_i s_i replaces the paper's n):

    z_i = y_i x_i (the constant 1 appended to x_i when there is an intercept)
    u = sum_i s_i z_i,  margins m_i = <w, z_i>,  theta = <u, w> / S   (weighted average margin)

One iteration of the paper's Algorithm 1 (with the corrected Eq. 8):

    A_k   = { i : <w_{k-1}, z_i> < theta_{k-1} }
    w'_k  = argmin_w (1/S) sum_{A_k} s_i (theta_{k-1} - <w, z_i>)^2 + beta ||w - w_{k-1}||_P^2
          = H_k^{-1} (theta/(S beta) g_k + P w_{k-1}),  H_k = P + sum_{A_k} s_i z_i z_i^T / (S beta),
            g_k = sum_{A_k} s_i z_i
    w_k   = argmin_w -(1/S) <u, w> + alpha ||w - w'_k||^2 = w'_k + u / (2 alpha S)
    w_k  <- w_k / ||w_k||_N;  w_k <- -w_k if its average margin is negative.

P = I and N = I in the paper's linear algorithm. The kernel algorithm (Section 4.2) is the same
iteration in the eigenbasis of the Gram matrix with diagonal P and N, so one core,
:func:`msvmav_iterate`, serves both. By default, though, the kernel path needs no
eigendecomposition: with R = diag(1/s) + K factorised once, the semi-variance step is a solve
with the |A| x |A| capacitance matrix of the Woodbury identity (a compiled loop).

Modules, one per path or shared piece:

* :mod:`.linear`: :func:`msvmav_iterate` (the NumPy loop over a semi-variance system, and the
  compiled loop for dense X with few features) and the linear front end :func:`msvmav_linear`;
* :mod:`.kernel`: :func:`msvmav_kernel`, its factorised route (capacitance scheme, compiled)
  and its eigenbasis route (through :func:`msvmav_iterate`);
* :mod:`._direct` (explicit d x d inverse / Cholesky schemes), :mod:`._cg` (conjugate
  gradients), :mod:`._design` (the rows z_i without forming Z), :mod:`._history` (per-iterate
  history and :class:`MSVMAvResult`), :mod:`._loops` (numba), :mod:`._cache`
  (:class:`FactorCache`), :mod:`._common` (constants).

The solvers return an :class:`MSVMAvResult` and never warn: ``converged`` and ``changing`` say
how a run ended, and the estimator raises the ConvergenceWarning. Factorisations are cached
only in a :class:`FactorCache` that the caller passes (nothing process-wide).

All dense linear algebra runs with one BLAS thread for matrices up to order
``margindist.solvers._threads.BLAS_SINGLE_THREAD_MAX`` (multi-threaded OpenBLAS was measured
10x slower there).
"""

from .._threads import blas_single_thread
from ._cache import FactorCache
from ._design import Design
from ._history import CHANGE_WINDOW, MSVMAvResult, creeping, still_improving
from .kernel import msvmav_kernel
from .linear import msvmav_iterate, msvmav_linear, solve_auto

__all__ = [
    "CHANGE_WINDOW",
    "Design",
    "FactorCache",
    "MSVMAvResult",
    "blas_single_thread",
    "creeping",
    "msvmav_iterate",
    "msvmav_kernel",
    "msvmav_linear",
    "solve_auto",
    "still_improving",
]
