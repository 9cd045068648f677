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


def single_blas_thread():
    """Context manager: every loaded BLAS limited to one thread."""
    return threadpool_controller().limit(limits=1, user_api="blas")


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
