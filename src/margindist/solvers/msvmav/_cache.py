"""An explicit, caller-owned cache of the kernel path's O(m^3) factorisations."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import scipy.sparse as sp

__all__ = ["FactorCache"]

#: Default budget of a :class:`FactorCache` (bytes).
FACTOR_CACHE_BYTES = 500 * 2**20


def _same_data(A, B) -> bool:
    """A and B are the same object, or equal arrays / CSR matrices (a comparison that stops at
    the first difference; no hashing)."""
    if A is B:
        return True
    if sp.issparse(A) != sp.issparse(B) or A.shape != B.shape or A.dtype != B.dtype:
        return False
    if sp.issparse(A):
        A, B = sp.csr_matrix(A), sp.csr_matrix(B)
        return (A.nnz == B.nnz and np.array_equal(A.indptr, B.indptr)
                and np.array_equal(A.indices, B.indices) and np.array_equal(A.data, B.data))
    return np.array_equal(A, B)


class FactorCache:
    """Factorisations of weighted Gram matrices, shared by the fits that pass it.

    The kernel path of MSVMAv pays one O(m^3) factorisation (the inverse of diag(1/s) + K, or
    an eigendecomposition) per data set, kernel and sample weights; every (alpha, beta) of a
    grid reuses it. An estimator holds one such cache for the length of one ``fit`` (its
    one-vs-rest sub-problems share it); a grid search or the experiment runner passes one
    instance to every grid point (``MSVMAv(factor_cache=...)``) so that the points share it.
    Nothing is process-wide: the entries live as long as the cache object does.

    An entry matches a later call with the same kind of factorisation, the same kernel
    parameters, intercept flag and sample weights, and the same X: the very same object, or
    an array of equal shape and contents (compared element by element, and only against the
    entries that matched on everything else; X is never hashed). X is kept by reference:
    do not modify a cached X in place. Callable kernels are not cached. Least recently used
    entries leave first once the arrays exceed ``max_bytes``; an entry larger than the budget is
    not stored. Cached arrays are read-only.

    Copies share the cache (``copy.deepcopy`` returns the same object, so scikit-learn's
    ``clone`` keeps it); a pickled cache arrives empty.

    Parameters
    ----------
    max_bytes : int, default=500 MiB
        Budget of the cached arrays; 0 stores nothing.
    """

    def __init__(self, max_bytes: int = FACTOR_CACHE_BYTES):
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._next = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        return {"max_bytes": self.max_bytes}

    def __setstate__(self, state):
        self.__init__(state["max_bytes"])

    def __repr__(self) -> str:
        return f"FactorCache(max_bytes={self.max_bytes})"

    def _find(self, key, X, s):
        for handle, (k, X_ref, s_ref, value) in self._entries.items():
            if k == key and np.array_equal(s_ref, s) and _same_data(X_ref, X):
                self._entries.move_to_end(handle)
                return value
        return None

    def get(self, key: tuple, X, s, nbytes: int, compute):
        """``compute()`` (a tuple of arrays, or None), cached under ``key`` (hashable: the kind
        of factorisation and the kernel parameters), X and the weights s; ``nbytes`` is the
        size of the result."""
        cacheable = 0 < nbytes <= self.max_bytes
        if cacheable:
            with self._lock:
                hit = self._find(key, X, s)
            if hit is not None:
                return hit
        value = compute()
        if value is None:
            return None
        for v in value:
            v.flags.writeable = False
        if cacheable:
            with self._lock:
                self._entries[self._next] = (key, X, np.array(s, dtype=np.float64), value)
                self._next += 1
                total = sum(sum(8 * a.size for a in e[3]) for e in self._entries.values())
                while total > self.max_bytes and len(self._entries) > 1:
                    _, old = self._entries.popitem(last=False)
                    total -= sum(8 * a.size for a in old[3])
        return value
