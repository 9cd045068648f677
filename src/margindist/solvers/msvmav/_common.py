"""Constants and small helpers shared by the linear and kernel paths of MSVMAv."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

#: Probe residual of an explicit inverse above which it is recomputed from scratch.
REFRESH_TOL = 1e-10
#: The probe check runs after every CHECK_EVERY-th incremental update.
CHECK_EVERY = 4


def probe_vector(n: int) -> np.ndarray:
    """The fixed unit probe vector of the round-off checks (deterministic, not user randomness)."""
    p = np.cos(np.arange(1, n + 1) * 2.399963229728653)
    return p / np.linalg.norm(p)


def diverged(k, subject: str = "the weight vector is", detail: str = "") -> FloatingPointError:
    """The error of a run whose iterate stopped being finite at iteration ``k``."""
    return FloatingPointError(
        f"MSVMAv diverged at iteration {k}: {subject} not finite{detail}. "
        "Scale the features (e.g. to [0, 1]) or choose larger alpha/beta."
    )


def as_float(X):
    """X as float64 CSR, or as a contiguous array of float64 or, for float32 X, of float32 (no
    copy when it already is one): a dense float32 design keeps its memory, and its products
    are summed in float64 (see :class:`._design.Design`)."""
    dtype = np.float32 if X.dtype == np.float32 and not sp.issparse(X) else np.float64
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        return X if X.dtype == dtype else X.astype(dtype)
    X = np.asarray(X, dtype=dtype)  # no copy in C or Fortran order
    if not (X.flags.c_contiguous or X.flags.f_contiguous):
        X = np.ascontiguousarray(X)
    return X
