"""BLAS thread limits for solvers whose dense operations are too small for threads.

One :class:`threadpoolctl.ThreadpoolController` per process (building it inspects the loaded
libraries, so it is made once, on first use).
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import lru_cache


@lru_cache(maxsize=1)
def threadpool_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


#: Problems whose largest dense matrix has at most this order run with one BLAS thread.
BLAS_SINGLE_THREAD_MAX = 2048


def single_blas_thread():
    """Context manager: every loaded BLAS limited to one thread."""
    return threadpool_controller().limit(limits=1, user_api="blas")


def blas_single_thread(size: int):
    """Context manager limiting BLAS to one thread when the dense matrices are small.

    ``size`` is the order of the largest dense matrix the problem factorises (the number of
    features of a linear model, the number of rows of a kernel one that factorises its Gram
    matrix; see ``BaseMarginClassifier._factorised_order``). Up to :data:`BLAS_SINGLE_THREAD_MAX`
    threads cost more than they give: the products of these solvers are thin (n x d by d, or
    d x d), and OpenBLAS threads spin waiting for one another. Measured on a 2-core machine,
    default fits on dense 120k x 100: with two BLAS threads and the second core busy, every
    linear estimator that calls BLAS was 2-26x slower than with one (M3SVM 15.6 s against
    0.6 s, MarginPursuit 2.72 s against 0.19 s, LSSVM 2.75 s against 0.29 s); on the idle
    machine M3SVM still took 2.39 s against 0.85 s and MarginPursuit the same. Above that
    order (a large Cholesky factorisation) the BLAS threading is left alone (control it with
    threadpoolctl around ``fit``).
    """
    return nullcontext() if size > BLAS_SINGLE_THREAD_MAX else single_blas_thread()


def single_scipy_blas_thread():
    """Limit the BLAS that scipy ships for its own compiled code to one thread.

    L-BFGS-B's update calls BLAS on vectors of the parameter length; a threaded BLAS spends far
    more on waking threads than on the work (20x slower steps on a busy two-core machine). Only
    the copy bundled with scipy's wheels is limited; numpy's BLAS, which does the products with X,
    keeps its threads. Without such a separate copy this is a no-op.
    """
    ctl = threadpool_controller()
    paths = [info["filepath"] for info in ctl.info()
             if info.get("user_api") == "blas" and "scipy.libs" in info["filepath"].replace("\\", "/")]
    if not paths:
        return nullcontext()
    return ctl.select(filepath=paths).limit(limits=1)
