"""Kernel specification, memory-bounded Gram blocks and an LRU kernel-row cache.

Every kernel method in margindist resolves its kernel parameters once per fit with
:func:`resolve_kernel` (so ``gamma="scale"`` means the same thing everywhere and matches
scikit-learn's definition), evaluates Gram blocks with :func:`kernel_matrix` /
:func:`kernel_decision` (row chunks under a byte budget, never an n x m matrix above it),
and, when a solver needs kernel columns on demand, uses :class:`KernelRowCache`, an LRU
cache of kernel rows with a byte budget whose state is a named tuple of arrays that numba-compiled
solvers read through :func:`cache_row`. Rows are stored in float64 or, as LIBSVM does, in float32
(:func:`cache_dtype` picks by the solver tolerance) and computed by vectorised loops (the dot
products as axpy passes over X^T, exp by a polynomial with the exponent assembled in its bits):
in float64, except dense RBF rows stored in float32, which are computed in float32 from the
centred rows (:mod:`margindist._rbf32`: within about 1e-7 of the float64 values, 2.3 times
faster); :meth:`KernelRowCache.fill` computes all rows up front when the whole matrix fits in
the budget.

Supported kernels: ``"linear"`` ``<x, z>``, ``"rbf"`` ``exp(-gamma ||x - z||^2)``,
``"poly"`` ``(gamma <x, z> + coef0)^degree``, ``"sigmoid"`` ``tanh(gamma <x, z> + coef0)``,
``"precomputed"`` (X is a Gram matrix) and any callable ``k(X, Z) -> (n, m) array``.
"""

from __future__ import annotations

import numbers
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numba import njit
from sklearn.metrics.pairwise import pairwise_kernels

from ._bits import float64_from_bits
from ._rbf32 import centred_t32, rbf_chunk32
from ._validation import check_callable_kernel_output
from .solvers._rows import make_rows, row_axpy, row_sq_norms, rows_dot

KERNELS = ("linear", "rbf", "poly", "sigmoid", "precomputed")

#: Kernel kinds as compiled code sees them (:attr:`RowCacheState.kind`).
KIND_LINEAR, KIND_RBF, KIND_POLY, KIND_SIGMOID, KIND_PRECOMPUTED = 0, 1, 2, 3, 4
_KIND_CODE = {"linear": KIND_LINEAR, "rbf": KIND_RBF, "poly": KIND_POLY, "sigmoid": KIND_SIGMOID,
              "precomputed": KIND_PRECOMPUTED}

#: Default byte budget for a Gram block (chunked evaluation) and for the row cache.
DEFAULT_BLOCK_BYTES = 64 * 2**20
DEFAULT_CACHE_BYTES = 200 * 2**20


@dataclass(frozen=True)
class KernelSpec:
    """A fully resolved kernel: no ``"scale"``/``"auto"`` left, ready to evaluate.

    Attributes
    ----------
    kind : str
        One of ``"linear"``, ``"rbf"``, ``"poly"``, ``"sigmoid"``, ``"precomputed"``,
        ``"callable"``.
    gamma, coef0 : float
    degree : int
    func : callable or None
        The user's kernel function when ``kind == "callable"``.
    params : dict
        Extra keyword arguments passed to ``func``.
    device : str or None
        A PyTorch device ("cpu", "cuda", "cuda:1", ...) that computes the Gram blocks of the
        built-in kernels (:func:`margindist.torch._kernels.kernel_products`); None: NumPy and
        numba. Rows the cache computes one at a time stay on the CPU either way.
    """

    kind: str
    gamma: float = 1.0
    degree: int = 3
    coef0: float = 0.0
    func: Callable | None = None
    params: dict = field(default_factory=dict)
    device: str | None = None

    @property
    def is_linear(self) -> bool:
        return self.kind == "linear"

    def __call__(self, X, Z=None):
        """Evaluate the kernel between the rows of X and Z (one block, no chunking)."""
        return _kernel_block(self, X, X if Z is None else Z)


def _scale_gamma(X, sample_weight=None) -> float:
    """scikit-learn's ``gamma="scale"``: 1 / (n_features * Var(X)), 1.0 if Var(X) == 0.

    Var(X) is the variance of all entries of X; with sample weights, the weighted variance
    (row i counted s_i times), so that integer weights act as repeated rows.
    """
    n, d = X.shape
    s = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if sp.issparse(X):
        X = X.tocsr()
        row_sum = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
        row_sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        Xf = np.asarray(X, dtype=np.float64)
        row_sum, row_sq = Xf.sum(axis=1), np.einsum("ij,ij->i", Xf, Xf)
    total = s.sum() * d
    with np.errstate(over="ignore", invalid="ignore"):
        mean = (s @ row_sum) / total
        var = (s @ row_sq) / total - mean**2
    if not np.isfinite(var):
        raise ValueError(
            "gamma='scale': the variance of X overflows in float64 (features too large); "
            "scale the features or give gamma as a number."
        )
    return 1.0 / (d * var) if var > 1e-300 else 1.0


def indefinite_kernel(kind, coef0=0.0) -> bool:
    """Whether the built-in kernel ``kind`` is not positive semi-definite in general: the sigmoid,
    and the polynomial with coef0 < 0 (rbf, linear and poly with coef0 >= 0 are; a precomputed
    or callable kernel is the user's, and not judged here)."""
    return kind == "sigmoid" or (kind == "poly" and coef0 < 0)


def builtin_psd(spec: KernelSpec) -> bool:
    """Whether ``spec`` is a built-in kernel whose Gram matrices are positive semi-definite by
    construction: rbf, linear, poly with coef0 >= 0 (not the sigmoid, a poly with coef0 < 0, a
    callable or a precomputed one)."""
    return spec.kind in ("rbf", "linear", "poly") and not indefinite_kernel(spec.kind, spec.coef0)


def resolve_kernel(kernel="rbf", X=None, *, gamma="scale", degree=3, coef0=0.0, kernel_params=None,
                   sample_weight=None):
    """Resolve kernel parameters against the training data.

    Parameters
    ----------
    kernel : str or callable
        A name in :data:`KERNELS` or a callable ``k(X, Z) -> ndarray``.
    X : array-like or sparse matrix of shape (n_samples, n_features)
        Training data, needed for ``gamma="scale"`` / ``"auto"``.
    gamma : {"scale", "auto"} or float
        ``"scale"`` = 1 / (n_features * X.var()) as in scikit-learn's SVC (the weighted
        variance when ``sample_weight`` is given); ``"auto"`` = 1 / n_features.
    degree, coef0 : polynomial / sigmoid parameters.
    kernel_params : dict, optional
        Extra keyword arguments for a callable kernel.
    sample_weight : array-like of shape (n_samples,), optional
        Weights for ``gamma="scale"``.

    Returns
    -------
    KernelSpec
    """
    if callable(kernel):
        return KernelSpec("callable", func=kernel, params=dict(kernel_params or {}))
    if kernel not in KERNELS:
        raise ValueError(f"Unknown kernel {kernel!r}; expected one of {KERNELS} or a callable.")
    if kernel in ("linear", "precomputed"):
        return KernelSpec(kernel)
    if isinstance(gamma, str):
        if X is None:
            raise ValueError(f"gamma={gamma!r} needs the training data to be resolved.")
        if gamma == "scale":
            g = _scale_gamma(X, sample_weight)
        elif gamma == "auto":
            g = 1.0 / X.shape[1]
        else:
            raise ValueError(f"gamma must be 'scale', 'auto' or a positive float; got {gamma!r}.")
    elif isinstance(gamma, numbers.Real) and gamma > 0:
        g = float(gamma)
    else:
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive float; got {gamma!r}.")
    return KernelSpec(kernel, gamma=float(g), degree=int(degree), coef0=float(coef0))


def _device_products(spec: KernelSpec):
    """The device path's :func:`~margindist.torch._kernels.kernel_products` when ``spec`` names
    a device and a built-in kernel, else None (the NumPy path). A model fitted on a device
    predicts through NumPy where PyTorch is not installed (the same numbers)."""
    if spec.device is None or spec.kind in ("precomputed", "callable"):
        return None
    try:
        from .torch._kernels import kernel_products
    except ImportError:
        return None
    return kernel_products


def _dense_block(spec: KernelSpec, X, Z) -> np.ndarray:
    """K(X, Z) for dense, validated rows and the RBF, polynomial or sigmoid kernel, in float64 from
    one BLAS product X Z^T: the formulas of scikit-learn's pairwise kernels (squared distances
    ||x||^2 + ||z||^2 - 2 <x, z> clipped at 0 for the RBF) without their input checks, which
    took most of the time of a prediction on a few rows (four array validations a call)."""
    X = np.asarray(X, dtype=np.float64)
    Z = np.asarray(Z, dtype=np.float64)
    K = X @ Z.T
    if spec.kind == "rbf":
        K *= -2.0
        K += row_sq_norms(X)[:, None]
        K += row_sq_norms(Z)[None, :]
        np.maximum(K, 0.0, out=K)
        K *= -spec.gamma
        np.exp(K, out=K)
    elif spec.kind == "poly":
        K *= spec.gamma
        K += spec.coef0
        K **= spec.degree
    else:  # sigmoid
        K *= spec.gamma
        K += spec.coef0
        np.tanh(K, out=K)
    return K


def _kernel_block(spec: KernelSpec, X, Z) -> np.ndarray:
    on_device = _device_products(spec)
    if on_device is not None:
        return on_device(spec, X, Z, max_bytes=DEFAULT_BLOCK_BYTES)
    if spec.kind == "precomputed":
        raise ValueError("A precomputed kernel has no block to evaluate: pass the Gram matrix.")
    if spec.kind == "callable":
        return check_callable_kernel_output(spec.func, spec.func(X, Z, **spec.params), X.shape[0], Z.shape[0])
    if spec.kind == "linear":
        K = X @ Z.T
    elif not (sp.issparse(X) or sp.issparse(Z)):
        K = _dense_block(spec, X, Z)
    elif spec.kind == "rbf":
        K = pairwise_kernels(X, Z, metric="rbf", gamma=spec.gamma)
    elif spec.kind == "poly":
        K = pairwise_kernels(X, Z, metric="poly", gamma=spec.gamma, degree=spec.degree, coef0=spec.coef0)
    else:  # sigmoid
        K = pairwise_kernels(X, Z, metric="sigmoid", gamma=spec.gamma, coef0=spec.coef0)
    if sp.issparse(K):
        K = K.toarray()
    return np.asarray(K, dtype=np.float64)


def _chunk_rows(n_rows: int, n_cols: int, max_bytes: int) -> int:
    return int(max(1, min(n_rows, max_bytes // max(1, 8 * n_cols))))


def kernel_matrix(spec: KernelSpec, X, Z=None, *, max_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """Gram matrix K(X, Z) evaluated in row chunks of at most ``max_bytes`` each (K(X, X) of
    dense rows and the RBF, linear or polynomial kernel: by the compiled rows of
    :class:`KernelRowCache`).

    The result itself is (n_X, n_Z) float64; use :func:`kernel_decision` when only
    ``K(X, Z) @ coef`` is needed, which never holds more than one chunk.
    """
    square = Z is None
    Z = X if Z is None else Z
    n, m = X.shape[0], Z.shape[0]
    on_device = _device_products(spec)
    if on_device is not None:
        return on_device(spec, X, Z, max_bytes=max_bytes)
    if square and n >= 2 and spec.kind in ("rbf", "linear", "poly") and not sp.issparse(X):
        # K(X, X) by the row cache's compiled rows (float64, exactly symmetric): the RBF
        # matrix of 5000 rows of 10 features in half the time of scikit-learn's pairwise kernel
        return KernelRowCache(spec, X, max_bytes=8 * n * n, dtype=np.float64).fill()
    out = np.empty((n, m), dtype=np.float64)
    step = _chunk_rows(n, m, max_bytes)
    for start in range(0, n, step):
        out[start : start + step] = _kernel_block(spec, X[start : start + step], Z)
    if spec.kind == "callable" and Z is X:
        check_callable_kernel_output(spec.func, out, n, n, symmetric=True)
    return out


def kernel_decision(spec: KernelSpec, X, Z, coef, *, max_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """``K(X, Z) @ coef`` for coef of shape (n_Z,) or (n_Z, k), one bounded chunk at a time
    (zeros when Z has no rows: a model without support vectors)."""
    coef = np.asarray(coef, dtype=np.float64)
    if Z.shape[0] == 0:
        return np.zeros((X.shape[0],) + coef.shape[1:])
    on_device = _device_products(spec)
    if on_device is not None:
        return on_device(spec, X, Z, coef, max_bytes=max_bytes)
    n, m = X.shape[0], Z.shape[0]
    out = np.empty((n,) + coef.shape[1:], dtype=np.float64)
    step = _chunk_rows(n, m, max_bytes)
    for start in range(0, n, step):
        out[start : start + step] = _kernel_block(spec, X[start : start + step], Z) @ coef
    return out


def kernel_diag(spec: KernelSpec, X) -> np.ndarray:
    """Diagonal k(x_i, x_i) without forming the Gram matrix."""
    if spec.kind == "precomputed":
        return np.asarray(np.diag(np.asarray(X)), dtype=np.float64).copy()
    if spec.kind == "callable":
        return np.array([_kernel_block(spec, X[i : i + 1], X[i : i + 1])[0, 0] for i in range(X.shape[0])])
    sq = row_sq_norms(X)
    if spec.kind == "linear":
        return sq
    if spec.kind == "rbf":
        return np.ones(X.shape[0])
    if spec.kind == "poly":
        return (spec.gamma * sq + spec.coef0) ** spec.degree
    return np.tanh(spec.gamma * sq + spec.coef0)


def rkhs_norm_sq(spec: KernelSpec, Z, coef, *, max_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """Squared RKHS norms ``c_p^T K(Z, Z) c_p``: shape (k,) for coef (n_Z, k), a scalar for (n_Z,)."""
    coef = np.asarray(coef, dtype=np.float64)
    if spec.kind == "precomputed":
        Kc = np.asarray(Z, dtype=np.float64) @ coef
    else:
        Kc = kernel_decision(spec, Z, Z, coef, max_bytes=max_bytes)
    return np.maximum(np.sum(coef * Kc, axis=0), 0.0)


@dataclass
class NystroemMap:
    """A Nyström feature map phi(x) = N k(L, x) over landmark rows L of the training data.

    With K_LL = U diag(s) U^T, N = U diag(1 / sqrt(s)) U^T (eigenvalues below 1e-12 of the
    largest clipped, as scikit-learn's ``Nystroem`` does), so phi(x)^T phi(z) =
    k(x, L) K_LL^+ k(L, z), which equals k(x, z) on the span of the landmarks (all of it when
    every training row is a landmark). A linear model w on phi is the kernel expansion
    f(x) = sum_j (N w)_j k(l_j, x): :meth:`dual_coef` gives its coefficients on the training rows.
    """

    landmarks: np.ndarray  # indices of the landmark rows in the training rows (sorted)
    normalization: np.ndarray  # N, (k, k) symmetric

    def transform(self, spec: KernelSpec, X_train, X, *, max_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
        """phi(X) as a dense (n, k) array, float32 for float32 X (else float64), computed in
        row chunks of at most ``max_bytes`` of kernel values (never an n x k float64 block)."""
        L = X_train[self.landmarks]
        k = self.landmarks.size
        out = np.empty((X.shape[0], k), dtype=np.float32 if X.dtype == np.float32 else np.float64)
        step = _chunk_rows(X.shape[0], k, max_bytes)
        for start in range(0, X.shape[0], step):  # (the product with N on the device, if any)
            out[start : start + step] = kernel_decision(spec, X[start : start + step], L, self.normalization,
                                                        max_bytes=max_bytes)
        return out

    def dual_coef(self, coef, n_rows: int) -> np.ndarray:
        """The expansion coefficients of the linear model ``coef`` on the n_rows training rows
        (zero outside the landmarks)."""
        a = np.zeros(n_rows)
        a[self.landmarks] = self.normalization @ np.asarray(coef, dtype=np.float64)
        return a

    @staticmethod
    def residual(spec: KernelSpec, X, features, sample_weight=None) -> float:
        """The share of the kernel's trace on the rows X that their Nyström ``features``
        (:meth:`transform`) leave out: sum_i s_i (k(x_i, x_i) - ||phi(x_i)||^2) / sum_i s_i
        k(x_i, x_i), in [0, 1]. phi(x)^T phi(x) = k(x, L) K_LL^+ k(L, x) is the squared length
        of k(x, .)'s projection on the landmarks' span, so each term is the squared distance
        of x's feature vector from that span: 0 for every row when all rows are landmarks,
        near 1 where the kernel's spectrum is too flat for the landmarks to capture (O(n k),
        no kernel evaluation beyond the diagonal)."""
        diag = kernel_diag(spec, X)
        s = np.ones(diag.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        total = float(s @ diag)
        if not total > 0.0:
            return 0.0
        left = np.maximum(diag - row_sq_norms(features), 0.0)
        return min(float(s @ left) / total, 1.0)


def nystroem_map(spec: KernelSpec, X, n_components: int, seed, *, landmarks: str = "uniform",
                 sample_weight=None) -> NystroemMap:
    """The Nyström map of ``n_components`` landmark rows of X (all rows when n_components >=
    n_samples). ``landmarks``: ``"uniform"`` draws them uniformly without replacement;
    ``"kmeans++"`` by k-means++ seeding in the input space (scikit-learn's
    ``kmeans_plusplus``, D^2 sampling weighted by ``sample_weight``), which spreads them over
    the data and approximates the kernel matrix better for the same number (for the RBF
    kernel, 1 - k(x, l) grows with ||x - l||). X holds features (not a precomputed Gram
    matrix: :func:`margindist._base.approximation_components` rejects that first)."""
    m = X.shape[0]
    if n_components >= m:
        idx = np.arange(m)
    elif landmarks == "kmeans++":
        from sklearn.cluster import kmeans_plusplus

        _, idx = kmeans_plusplus(X, n_components, sample_weight=sample_weight,
                                 random_state=np.random.RandomState(np.random.default_rng(seed).integers(2**31)))
        idx = np.sort(idx)
    else:
        idx = np.sort(np.random.default_rng(seed).choice(m, size=n_components, replace=False))
    return NystroemMap(landmarks=idx, normalization=psd_inverse_sqrt(kernel_matrix(spec, X[idx])))


#: Rows of X on which :func:`fewest_landmarks` measures the share that a count of landmarks leaves
#: out (a mean over rows: its standard error over 2000 rows is a few thousandths).
PROBE_ROWS = 2000


def fewest_landmarks(spec: KernelSpec, X, counts, max_share: float, seed, *, landmarks: str = "uniform",
                     sample_weight=None, probe: int = PROBE_ROWS) -> NystroemMap | None:
    """The Nyström map of the fewest landmarks among ``counts`` (increasing) that leave at most
    ``max_share`` of the kernel's trace out (:meth:`NystroemMap.residual`), measured on ``probe``
    rows of X drawn uniformly (all rows when X has no more), or None when none does. Each count's
    landmarks are those :func:`nystroem_map` draws for it with ``seed``; the probe rows come from
    another stream of ``seed``, so that they are not the landmarks. For a kernel whose share
    measures its landmarks' model (built-in, positive semi-definite). Uniform draws cost
    nothing; k-means++ seeding is drawn anew for each count (O(m d) per landmark, so up to the
    sum of the counts tried)."""
    m = X.shape[0]
    rows = np.arange(m) if m <= probe else np.sort(np.random.default_rng([seed, 1]).choice(m, probe, replace=False))
    X_probe = X[rows]
    s_probe = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[rows]
    for k in counts:
        nmap = nystroem_map(spec, X, k, seed, landmarks=landmarks, sample_weight=sample_weight)
        if NystroemMap.residual(spec, X_probe, nmap.transform(spec, X, X_probe), s_probe) <= max_share:
            return nmap
    return None


def psd_inverse_sqrt(K) -> np.ndarray:
    """K^(-1/2) of a symmetric positive semi-definite K (the landmarks' kernel matrix), its
    eigenvalues floored at 1e-12 times the largest (a rank-deficient K stays usable)."""
    vals, vecs = np.linalg.eigh(K)
    vals = np.maximum(vals, 1e-12 * max(float(vals.max(initial=0.0)), 1e-300))
    return (vecs / np.sqrt(vals)) @ vecs.T


# --------------------------------------------------------------------------------------
# LRU kernel-row cache shared by the numba solvers (ODM/LDM kernel DCD, KM-OMD SMO, ...)
# --------------------------------------------------------------------------------------

#: Reassociation (and fused multiply-adds) for the loops that apply kernel values to vectors:
#: their sums over j then vectorise (a value applied to both sides of a product, 2 columns:
#: 1.57 ns -> 0.36 ns); the kernel values themselves are computed without it (exact symmetry).
_REDUCE = {"reassoc", "contract"}

#: Columns per chunk of the dense row computation (a chunk of the row stays in L1).
_ROW_CHUNK = 512

# exp(x) for x <= 0 in a vectorisable loop: x = k ln 2 + r, |r| <= ln(2) / 2 (Cody-Waite), e^r by
# its Taylor polynomial of degree 12 (truncation < 2e-16 relative), 2^k assembled in the exponent bits.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_MIN = -708.0  # e^-708 ~ 3e-308, the smallest exponent with a normal 2^k; below, 0 is returned


@njit(cache=True, fastmath={"contract"})  # fused multiply-adds: 15.4 -> 11.3 us for 14 000 values
def _exp_nonpositive(v):
    """v[j] <- exp(v[j]) in place for v[j] <= 0 (within 2 ulp of the correctly rounded value; 0 below
    -708). One loop that LLVM vectorises (2^k from the bits of an integer, :mod:`._bits`; 0.56 ->
    0.46 us for 512 values against three passes through a scratch array, the same values), about
    three times faster than a loop over ``np.exp``."""
    for j in range(v.shape[0]):
        x = v[j]
        ok = x >= _EXP_MIN
        x = x if ok else _EXP_MIN
        kf = np.floor(x * _LOG2E + 0.5)
        r = (x - kf * _LN2_HI) - kf * _LN2_LO
        p = 1.0 + r * (1.0 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (
            1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320 + r * (1.0 / 362880 + r * (1.0 / 3628800 + r * (
                1.0 / 39916800 + r * (1.0 / 479001600))))))))))))
        v[j] = p * float64_from_bits((np.int64(kf) + 1023) << 52) if ok else 0.0


@njit(cache=True)
def _poly_inplace(v, gamma, coef0, degree, scratch):
    """v[j] <- (gamma v[j] + coef0) ** degree in place: a whole degree up to 16 by repeated
    products in vectorised passes (within degree / 2 ulp; pow took 14 ns a value), else pow.
    ``scratch``: float64 work array of v's length."""
    n = v.shape[0]
    k = int(degree)
    if k != degree or k < 0 or k > 16:
        for j in range(n):
            v[j] = (gamma * v[j] + coef0) ** degree
        return
    for j in range(n):
        scratch[j] = gamma * v[j] + coef0
        v[j] = 1.0
    for _ in range(k):
        for j in range(n):
            v[j] *= scratch[j]


@njit(cache=True)
def _dot_chunk_dense(XT, i, start, stop, o):
    """o[j - start] = <x_i, x_j> for j in start..stop-1 from X^T (d, m), the features summed in
    groups of four in their order (so that <x_i, x_j> and <x_j, x_i> are the same float: the
    cached kernel is exactly symmetric): each pass over the chunk adds four features, a
    vectorised loop in L1."""
    d = XT.shape[0]
    n = stop - start
    for j in range(n):
        o[j] = 0.0
    f = 0
    while f + 4 <= d:
        c0, c1, c2, c3 = XT[f, i], XT[f + 1, i], XT[f + 2, i], XT[f + 3, i]
        x0, x1, x2, x3 = XT[f, start:stop], XT[f + 1, start:stop], XT[f + 2, start:stop], XT[f + 3, start:stop]
        for j in range(n):
            o[j] += (x0[j] * c0 + x1[j] * c1) + (x2[j] * c2 + x3[j] * c3)
        f += 4
    while f < d:
        c = XT[f, i]
        xf = XT[f, start:stop]
        for j in range(n):
            o[j] += xf[j] * c
        f += 1


@njit(cache=True)
def _dot_rows_csr(rows, i, out, scratch):
    """out[j] = <x_i, x_j> for every row j of CSR rows: row i scattered into the zeroed dense
    ``scratch``, a product with every row, and the scatter undone (x - x is exactly 0)."""
    row_axpy(rows, i, 1.0, scratch)
    rows_dot(rows, scratch, out)
    row_axpy(rows, i, -1.0, scratch)


@njit(cache=True)
def _transform_chunk(kind, params, o, sq, si, scratch):
    """Dot products o[j] = <x_i, x_j> into kernel values in place (nothing to do for linear);
    RBF: ``sq`` the ||x_j||^2 of the chunk, ``si`` = ||x_i||^2; ``scratch``: float64 work
    array of o's length."""
    gamma, coef0, degree = params[0], params[1], params[2]
    n = o.shape[0]
    if kind == KIND_RBF:
        for j in range(n):
            o[j] = -gamma * max(si + sq[j] - 2.0 * o[j], 0.0)
        _exp_nonpositive(o)
    elif kind == KIND_POLY:
        _poly_inplace(o, gamma, coef0, degree, scratch)
    elif kind == KIND_SIGMOID:
        for j in range(n):
            o[j] = np.tanh(gamma * o[j] + coef0)


@njit(cache=True)
def compute_kernel_row(cache, i, out):
    """Fill ``out`` (length m, float64 or float32) with k(x_i, x_j) for all training rows j (no
    caching). The values are computed in float64 and rounded once when ``out`` is float32
    (dense RBF rows of a float32 cache: in float32, :mod:`._rbf32`);
    dense rows in chunks of ``_ROW_CHUNK`` columns that stay in L1 from the dot products to the
    store."""
    kind = cache.kind
    Xd = cache.X
    m = out.shape[0]
    if kind == KIND_PRECOMPUTED:  # X is the (symmetric) Gram matrix
        for j in range(m):
            out[j] = Xd[i, j]
        return
    if cache.X32.shape[0] > 0:  # RBF rows stored in float32: computed in float32 (._rbf32)
        g32 = np.float32(cache.params[0])
        for start in range(0, m, _ROW_CHUNK):
            stop = min(start + _ROW_CHUNK, m)
            rbf_chunk32(cache.X32, g32, i, start, stop, out[start:stop])
        return
    work, sqn = cache.work, cache.sq_norms
    si = sqn[i] if sqn.shape[0] > 0 else 0.0
    if Xd.shape[0] == 0:  # CSR rows: the whole row of dot products, then the transform
        buf = work[0]
        _dot_rows_csr(cache.rows, i, buf, cache.scratch)
        _transform_chunk(kind, cache.params, buf, sqn, si, work[1])
        for j in range(m):
            out[j] = buf[j]
        return
    for start in range(0, m, _ROW_CHUNK):
        stop = min(start + _ROW_CHUNK, m)
        o = work[0, : stop - start]
        _dot_chunk_dense(Xd, i, start, stop, o)
        _transform_chunk(kind, cache.params, o, sqn[start:stop], si, work[1, : stop - start])
        ob = out[start:stop]
        for j in range(stop - start):
            ob[j] = o[j]


@njit(cache=True)
def rbf32_columns(cache, cols, n, XJ):
    """XJ[:, :n] = the centred float32 features of rows cols[:n] (a cache whose RBF rows are
    computed in float32: ``cache.X32`` not empty), for :func:`rbf32_row_at`. XJ is a float32
    (d, n + 1) array or wider: column n is :func:`rbf32_row_at`'s."""
    X32 = cache.X32
    for f in range(X32.shape[0]):
        src = X32[f]
        dst = XJ[f]
        for t in range(n):
            dst[t] = src[cols[t]]


@njit(cache=True)
def rbf32_row_at(cache, i, XJ, n, out):
    """out[t] = k(x_i, x_{cols[t]}) for t < n, the rows whose features :func:`rbf32_columns`
    put in XJ: row i of the kernel at those columns only, the same float32 values as
    :func:`compute_kernel_row` gives there (the same chunk function on the same features)."""
    X32 = cache.X32
    for f in range(X32.shape[0]):
        XJ[f, n] = X32[f, i]
    g32 = np.float32(cache.params[0])
    for start in range(0, n, _ROW_CHUNK):
        stop = min(start + _ROW_CHUNK, n)
        rbf_chunk32(XJ, g32, n, start, stop, out[start:stop])


@njit(cache=True, inline="always")
def _unlink(links, counters, s):
    """Take slot s out of the recency list (``links[0]``: the previous, less recent slot;
    ``links[1]``: the next, more recent one; -1 at the ends; ``counters[4]`` / ``counters[5]``:
    the least / most recently used slot)."""
    prev, nxt = links[0, s], links[1, s]
    if prev >= 0:
        links[1, prev] = nxt
    else:
        counters[4] = nxt
    if nxt >= 0:
        links[0, nxt] = prev
    else:
        counters[5] = prev


@njit(cache=True, inline="always")
def _push_recent(links, counters, s):
    """Slot s becomes the most recently used."""
    tail = counters[5]
    links[0, s] = tail
    links[1, s] = -1
    if tail >= 0:
        links[1, tail] = s
    else:
        counters[4] = s
    counters[5] = s


@njit(cache=True)
def cache_row(cache, i):
    """Kernel row i (a view into the cache; valid until the next miss evicts its slot).

    ``cache`` is :attr:`KernelRowCache.state`. Least-recently-used rows are evicted when the
    byte budget is full; the slots in use form a doubly linked list in order of use (as
    LIBSVM's cache), so a hit or an eviction costs O(1) whatever the number of slots. Row i
    equals column i: all supported kernels are symmetric. The row has the cache's dtype
    (float64, or float32 with ``KernelRowCache(..., dtype=np.float32)``).
    """
    slots, slot_of, row_of, links, counters = cache.slots, cache.slot_of, cache.row_of, cache.links, cache.counters
    counters[0] += 1  # requests
    s = slot_of[i]
    if s >= 0:
        counters[1] += 1  # hits
        if s != counters[5]:
            _unlink(links, counters, s)
            _push_recent(links, counters, s)
        return slots[s]
    counters[2] += 1  # misses
    if counters[3] < slots.shape[0]:  # a free slot
        s = counters[3]
        counters[3] += 1
    else:  # the least recently used
        s = counters[4]
        _unlink(links, counters, s)
        slot_of[row_of[s]] = -1
    _push_recent(links, counters, s)
    row_of[s] = i
    slot_of[i] = s
    compute_kernel_row(cache, i, slots[s])
    return slots[s]


@njit(cache=True)
def replace_row(cache, s, i):
    """Row i computed into slot s in place of the row held there, which leaves the cache
    (counted as a request and a miss, as :func:`cache_row` counts them; the slot keeps its
    place in the recency list). Returns the row."""
    old = cache.row_of[s]
    if old >= 0 and cache.slot_of[old] == s:
        cache.slot_of[old] = -1
    cache.row_of[s] = i
    cache.slot_of[i] = s
    cache.counters[0] += 1
    cache.counters[2] += 1
    compute_kernel_row(cache, i, cache.slots[s])
    return cache.slots[s]


@njit(cache=True)
def _cache_rows(cache, rows):
    """:func:`cache_row` for each of ``rows`` in turn."""
    for i in rows:
        cache_row(cache, i)


@njit(cache=True)
def _fill_rows(cache, lo, hi):
    """Rows lo..hi-1 into their own slots (slot i = row i), each counted as a miss."""
    slots, slot_of = cache.slots, cache.slot_of
    for i in range(lo, hi):
        if slot_of[i] != i:
            compute_kernel_row(cache, i, slots[i])
        _claim_slot(cache, i)


@njit(cache=True)
def _claim_slot(cache, i):
    """Bookkeeping of a row written into slot i by the block fill (rows claimed in increasing
    order, so the slots below i are in use: slot i is in the recency list iff i < counters[3])."""
    slot_of, row_of, links, counters = cache.slot_of, cache.row_of, cache.links, cache.counters
    counters[0] += 1
    counters[2] += 1
    if i < counters[3]:
        r = row_of[i]
        if r >= 0 and slot_of[r] == i:  # the row held here is evicted
            slot_of[r] = -1
        _unlink(links, counters, i)
    else:
        counters[3] = i + 1
    _push_recent(links, counters, i)
    slot_of[i] = i
    row_of[i] = i


@njit(cache=True)
def _transform_block(kind, params, B, sq_rows, sq_cols, scratch):
    """Dot products B[a, b] = <x_a, x_b> into kernel values in place (nothing to do for linear)."""
    for a in range(B.shape[0]):
        _transform_chunk(kind, params, B[a], sq_cols, sq_rows[a], scratch[: B.shape[1]])


@njit(cache=True)
def _store_block(slots, B, r0, tile):
    """Rows r0.. of the upper triangle: slots[r0 + a, r0 + b] = B[a, b] for b >= a, mirrored into
    slots[r0 + b, r0 + a] (rounded to the slots' dtype once: the stored matrix is exactly symmetric).
    The mirror is written in ``tile`` x ``tile`` tiles so that both sides stay in cache."""
    A, N = B.shape
    for a in range(A):
        dst = slots[r0 + a]
        src = B[a]
        for b in range(a, N):
            dst[r0 + b] = src[b]
    for b0 in range(0, N, tile):
        b1 = min(b0 + tile, N)
        for a0 in range(0, min(A, b1), tile):
            a1 = min(a0 + tile, A)
            for b in range(b0, b1):
                dst = slots[r0 + b]
                for a in range(a0, min(a1, b)):
                    dst[r0 + a] = B[a, b]


@njit(cache=True, fastmath=_REDUCE)
def _apply_chunk(o, VT, outT, a, start):
    """The values o[j - start] = k(x_a, x_j), j >= a, of the upper triangle applied to both sides
    of outT += V^T K: outT[:, j] += v_a o_j and outT[:, a] += sum_j o_j v_j (the diagonal once)."""
    n = o.shape[0]
    stop = start + n
    for c in range(VT.shape[0]):
        vc = VT[c, start:stop]
        oc = outT[c, start:stop]
        va = VT[c, a]
        acc = 0.0
        for j in range(n):
            acc += o[j] * vc[j]
            oc[j] += o[j] * va
        if start == a:  # the diagonal value counts once
            oc[0] -= o[0] * va
        outT[c, a] += acc


#: Rows of the triangle computed against each chunk of columns, their dot products by one BLAS
#: product (LS-SVM's CG on 14 000 rows of magic, 15 products: 3.90 s row by row, 3.50 s by
#: blocks of 16, 3.28 s by 64, 3.22 s by 128, whose 512 KiB block leaves a smaller L2).
_TRIANGLE_ROWS = 64


@njit(cache=True)
def _triangle_dot(kind, params, XT, sq, XT32, VT, outT, work, work32):
    """outT += V^T K over the rows of X^T (d, r) (K symmetric: k(x_a, x_b) for b >= a only, each
    value applied to both sides while it is in L1); VT, outT (k, r); ``work`` (2, >= _ROW_CHUNK)
    float64. Blocks of :data:`_TRIANGLE_ROWS` rows go through each chunk of :data:`_ROW_CHUNK`
    columns together. The dot products of a block and a chunk are one BLAS product (float64;
    their transform as in :func:`compute_kernel_row`); when ``XT32`` (the centred float32 rows,
    :mod:`._rbf32`) is not empty, the RBF values are those of the float32 rows of the cache
    (``work32`` (1, >= _ROW_CHUNK) float32)."""
    arith32 = XT32.shape[0] > 0
    r = XT32.shape[1] if arith32 else XT.shape[1]
    g32 = np.float32(params[0])
    Dbuf = np.empty(_TRIANGLE_ROWS * _ROW_CHUNK)
    for a0 in range(0, r, _TRIANGLE_ROWS):
        a1 = min(a0 + _TRIANGLE_ROWS, r)
        XA = np.ascontiguousarray(XT[:, a0:a1].T)  # (0, 0) for float32 rows, whose XT is empty
        for start in range(a0, r, _ROW_CHUNK):
            stop = min(start + _ROW_CHUNK, r)
            D = Dbuf[: (a1 - a0) * (stop - start)].reshape((a1 - a0, stop - start))
            if not arith32:  # the block's dot products with the chunk, one BLAS product
                np.dot(XA, np.ascontiguousarray(XT[:, start:stop]), D)
            for a in range(a0, a1):
                s0 = max(start, a)
                if s0 >= stop:
                    continue
                n = stop - s0
                if arith32:
                    o32 = work32[0, :n]
                    rbf_chunk32(XT32, g32, a, s0, stop, o32)
                    _apply_chunk(o32, VT, outT, a, s0)
                else:
                    o = D[a - a0, s0 - start : stop - start]
                    _transform_chunk(kind, params, o, sq[s0:stop], sq[a], work[1, :n])
                    _apply_chunk(o, VT, outT, a, s0)


#: :func:`row_tile8`'s updates of o: none, o[j] += ..., o[j] += mask[j] * ....
TILE_SUMS_ONLY, TILE_ADD, TILE_MASKED = 0, 1, 2


@njit(cache=True, fastmath=_REDUCE, inline="always")
def row_tile8(R, lo, hi, v0, v1, X, Z, o0, o1, mask, mode):
    """Eight rows R of a symmetric matrix (float32 or float64) against columns lo..hi-1 of two
    vectors, in float64: returns (P, Q), P[t] = sum_j R[t][j] v0[j] and Q[t] = sum_j R[t][j] v1[j],
    and (``mode``) adds sum_t R[t][j] X[t] to o0[j] and sum_t R[t][j] Z[t] to o1[j] (times mask[j]
    for TILE_MASKED). The other side of the symmetric product for eight rows at once: o[j] is
    loaded and stored once per eight values instead of once per value, the eight rows' sums stay
    in registers, and the loop is bound by reading the rows (2.5x faster than one row at a time
    in float64, 3.3x in float32, at 5000 columns on one core)."""
    r0, r1, r2, r3, r4, r5, r6, r7 = R
    x0, x1, x2, x3, x4, x5, x6, x7 = X
    z0, z1, z2, z3, z4, z5, z6, z7 = Z
    p0, p1, p2, p3, p4, p5, p6, p7 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    q0, q1, q2, q3, q4, q5, q6, q7 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for j in range(lo, hi):
        k0, k1, k2, k3 = np.float64(r0[j]), np.float64(r1[j]), np.float64(r2[j]), np.float64(r3[j])
        k4, k5, k6, k7 = np.float64(r4[j]), np.float64(r5[j]), np.float64(r6[j]), np.float64(r7[j])
        u, w = v0[j], v1[j]
        p0 += k0 * u
        p1 += k1 * u
        p2 += k2 * u
        p3 += k3 * u
        p4 += k4 * u
        p5 += k5 * u
        p6 += k6 * u
        p7 += k7 * u
        q0 += k0 * w
        q1 += k1 * w
        q2 += k2 * w
        q3 += k3 * w
        q4 += k4 * w
        q5 += k5 * w
        q6 += k6 * w
        q7 += k7 * w
        if mode != TILE_SUMS_ONLY:
            a = k0 * x0 + k1 * x1 + k2 * x2 + k3 * x3 + k4 * x4 + k5 * x5 + k6 * x6 + k7 * x7
            c = k0 * z0 + k1 * z1 + k2 * z2 + k3 * z3 + k4 * z4 + k5 * z5 + k6 * z6 + k7 * z7
            if mode == TILE_MASKED:
                a *= mask[j]
                c *= mask[j]
            o0[j] += a
            o1[j] += c
    return (p0, p1, p2, p3, p4, p5, p6, p7), (q0, q1, q2, q3, q4, q5, q6, q7)


@njit(cache=True, fastmath=_REDUCE, inline="always")
def row_tile1(r, lo, hi, v0, v1, x, z, o0, o1, mask, mode):
    """:func:`row_tile8` for one row r: returns (sum_j r[j] v0[j], sum_j r[j] v1[j]) over
    lo..hi-1 and (``mode``) adds r[j] x to o0[j] and r[j] z to o1[j] (times mask[j])."""
    p, q = 0.0, 0.0
    for j in range(lo, hi):
        k = np.float64(r[j])
        p += k * v0[j]
        q += k * v1[j]
        if mode != TILE_SUMS_ONLY:
            a, c = k * x, k * z
            if mode == TILE_MASKED:
                a *= mask[j]
                c *= mask[j]
            o0[j] += a
            o1[j] += c
    return p, q


@njit(cache=True, fastmath=_REDUCE)
def _cached_rows_pair(slots, slot_of, rows, scatter, v0, v1, o0, o1):
    """The cached rows' part of (K v0, K v1) (see :func:`_cached_rows_dot`), eight rows at a
    time (:func:`row_tile8`; at 14 000 columns, 1872 float64 rows, two columns: 8 ms against
    27 ms one row at a time), the rows left over one by one (:func:`row_tile1`)."""
    m = v0.shape[0]
    mode = TILE_MASKED if scatter.shape[0] == m else TILE_SUMS_ONLY
    n = rows.shape[0]
    t = 0
    while t + 8 <= n:
        i = (rows[t], rows[t + 1], rows[t + 2], rows[t + 3], rows[t + 4], rows[t + 5], rows[t + 6], rows[t + 7])
        R = (slots[slot_of[i[0]]], slots[slot_of[i[1]]], slots[slot_of[i[2]]], slots[slot_of[i[3]]],
             slots[slot_of[i[4]]], slots[slot_of[i[5]]], slots[slot_of[i[6]]], slots[slot_of[i[7]]])
        X = (v0[i[0]], v0[i[1]], v0[i[2]], v0[i[3]], v0[i[4]], v0[i[5]], v0[i[6]], v0[i[7]])
        Z = (v1[i[0]], v1[i[1]], v1[i[2]], v1[i[3]], v1[i[4]], v1[i[5]], v1[i[6]], v1[i[7]])
        P, Q = row_tile8(R, 0, m, v0, v1, X, Z, o0, o1, scatter, mode)
        for u in range(8):
            o0[i[u]] += P[u]
            o1[i[u]] += Q[u]
        t += 8
    for t in range(t, n):
        i = rows[t]
        p, q = row_tile1(slots[slot_of[i]], 0, m, v0, v1, v0[i], v1[i], o0, o1, scatter, mode)
        o0[i] += p
        o1[i] += q


@njit(cache=True)
def _cached_rows_dot(slots, slot_of, rows, scatter, VT, outT):
    """For the cached rows i in ``rows``: outT[:, i] = V^T K[i, :]^T, and outT[:, j] +=
    scatter[j] K[i, j] V[i] for every row j (K symmetric: the columns of the cached rows;
    ``scatter`` 1.0 on the rows that are not cached, 0.0 elsewhere, or empty for none);
    VT = V^T (k, m), outT (k, m) zeroed; float64 sums whatever the storage. The columns of V by
    pairs (:func:`_cached_rows_pair`; a last odd one paired with itself)."""
    k = VT.shape[0]
    for c in range(0, k - 1, 2):
        _cached_rows_pair(slots, slot_of, rows, scatter, VT[c], VT[c + 1], outT[c], outT[c + 1])
    if k % 2:
        spare = np.zeros(VT.shape[1])
        _cached_rows_pair(slots, slot_of, rows, scatter, VT[k - 1], VT[k - 1], outT[k - 1], spare)


#: The state of a :class:`KernelRowCache` as compiled code receives it. ``slots`` (n_slots, m):
#: the cached rows (float32 or float64); ``slot_of`` (m,): the slot of each row (-1: not cached);
#: ``row_of`` (n_slots,): the row in each slot; ``links`` (2, n_slots): the slots in use as a
#: doubly linked list in order of use (previous / next slot, -1 at the ends);
#: ``counters``: [requests, hits, misses, used slots, least and most recently used slot];
#: ``kind``: a ``KIND_*`` constant; ``params``:
#: [gamma, coef0, degree]; ``X``: the Gram matrix (precomputed), X^T (d, m) for dense rows or
#: empty for CSR rows; ``data``, ``indices``, ``indptr``: the CSR rows (sorted indices, float64)
#: or empty; ``sq_norms``: ||x_i||^2; ``scratch``: a zeroed float64 vector of length d (CSR);
#: ``work``: two float64 rows (the row being computed, exp scratch); ``X32``: the centred rows as a
#: float32 (d, m) array when dense RBF rows are stored in float32 (then computed in float32
#: arithmetic, :mod:`._rbf32`), else empty; ``work32``: one float32 chunk (1, _ROW_CHUNK) for those rows.
#: The ``rows`` of a cache whose kernel rows are not computed from CSR data (no rows at all).
_NO_ROWS = make_rows(sp.csr_matrix((0, 0), dtype=np.float64))


def _full_list(m):
    """The recency list of m slots used in order 0, 1, ..., m - 1."""
    idx = np.arange(m, dtype=np.int64)
    return np.stack([idx - 1, np.where(idx + 1 < m, idx + 1, -1)])


RowCacheState = namedtuple("RowCacheState", ["slots", "slot_of", "row_of", "links", "counters", "kind", "params", "X",
                                             "rows", "sq_norms", "scratch", "work", "X32", "work32"])


#: Tolerances from which the estimators store kernel rows in float32 (see :func:`cache_dtype`).
FLOAT32_ROWS_MIN_TOL = 1e-5


def cache_dtype(tol) -> type:
    """Storage type of cached kernel rows for a solver tolerance: float32 (half the memory and
    memory traffic, as LIBSVM) when ``tol`` >= 1e-5, where the rounding of the rows (relative
    6e-8, which moves the gradients by about that much relative to their scale; dense RBF rows,
    computed in float32, within about 1.2e-7 absolute) is far below the stopping tolerance;
    float64 for tighter tolerances, so that the solution is exact to rounding."""
    return np.float32 if tol >= FLOAT32_ROWS_MIN_TOL else np.float64


class KernelRowCache:
    """LRU cache of kernel rows k(x_i, .) over the training set, bounded in bytes.

    Parameters
    ----------
    spec : KernelSpec
        Resolved kernel. Callable kernels are evaluated once into a Gram matrix, which must
        fit in ``max_bytes`` (otherwise a ValueError says what to do).
    X : ndarray or CSR matrix of shape (m, d), or (m, m) Gram matrix for ``"precomputed"``.
    max_bytes : int
        Byte budget for cached rows (at least two rows are always kept).
    dtype : {np.float64, np.float32}, default=np.float64
        Storage type of the cached rows. float32 storage (as LIBSVM's kernel cache) halves the
        memory traffic of the solvers that stream rows and fits twice as many rows in the budget.
        Its rows are computed in float64 and rounded once (relative error <= 6e-8), except dense
        RBF rows, which are computed in float32 arithmetic from the centred rows by differences
        (:mod:`margindist._rbf32`; absolute error about 1.2e-7, exactly symmetric, 1 on the
        diagonal; the products of :meth:`dot` use the same values). Solvers accumulate in
        float64 either way.

    Attributes
    ----------
    state : RowCacheState
        The named tuple of arrays that numba solvers receive; read rows with :func:`cache_row`.
    diag : ndarray of shape (m,)
        k(x_i, x_i) in float64 (computed, not rounded to ``dtype``).
    n_slots : int
        Number of rows the budget holds.
    dtype : numpy dtype
        Storage type of the rows.
    """

    def __init__(self, spec: KernelSpec, X, *, max_bytes: int = DEFAULT_CACHE_BYTES, dtype=np.float64):
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64; got {dtype}.")
        m = X.shape[0]
        kind = spec.kind
        if kind == "callable":
            if 8 * m * m > max_bytes:
                raise ValueError(
                    f"A callable kernel is evaluated into a full {m}x{m} Gram matrix "
                    f"({8 * m * m / 2**20:.0f} MiB), over the cache budget ({max_bytes / 2**20:.0f} MiB). "
                    "Raise cache_size, or use a built-in kernel name, which is computed row by row."
                )
            X = kernel_matrix(spec, X, max_bytes=max_bytes)
            kind = "precomputed"
        empty_f = np.zeros(0, dtype=np.float64)
        no_rows = _NO_ROWS
        if kind == "precomputed":
            Xd = np.ascontiguousarray(X, dtype=np.float64)
            rows, sqn, scratch = no_rows, empty_f, empty_f
        elif sp.issparse(X):
            Xc = sp.csr_matrix(X, dtype=np.float64)
            Xc.sort_indices()
            Xd = np.zeros((0, 0), dtype=np.float64)
            # scipy's index dtype: int32, or int64 when nnz or the shape need it (numba compiles both)
            it = np.int64 if np.int64 in (Xc.indices.dtype, Xc.indptr.dtype) else np.int32
            rows = make_rows(Xc)._replace(indices=Xc.indices.astype(it, copy=False),
                                          indptr=Xc.indptr.astype(it, copy=False))
            sqn = row_sq_norms(Xc)
            scratch = np.zeros(Xc.shape[1], dtype=np.float64)
        else:
            Xf = np.asarray(X, dtype=np.float64)
            Xd = np.ascontiguousarray(Xf.T)  # (d, m): a row is computed by d contiguous passes
            rows, scratch = no_rows, empty_f
            sqn = row_sq_norms(Xf)
        n_slots = int(max(2, min(m, max_bytes // max(1, dtype.itemsize * m))))
        # dense RBF rows stored in float32 are computed in float32 where it holds the computation
        X32 = centred_t32(Xf, spec.gamma) if kind == "rbf" and dtype == np.float32 and not sp.issparse(X) else None
        X32 = np.zeros((0, 0), dtype=np.float32) if X32 is None else X32
        params = np.array([spec.gamma, spec.coef0, float(spec.degree)], dtype=np.float64)
        self.state = RowCacheState(
            slots=np.empty((n_slots, m), dtype=dtype),
            slot_of=np.full(m, -1, dtype=np.int64),
            row_of=np.full(n_slots, -1, dtype=np.int64),
            links=np.full((2, n_slots), -1, dtype=np.int64),
            counters=np.array([0, 0, 0, 0, -1, -1], dtype=np.int64),
            kind=_KIND_CODE[kind],
            params=params,
            X=Xd,
            rows=rows,
            sq_norms=sqn,
            scratch=scratch,
            work=np.empty((2, m), dtype=np.float64),
            X32=X32,
            work32=np.empty((1, _ROW_CHUNK if X32.size else 0), dtype=np.float32),
        )
        self.n_slots = n_slots
        self.spec = spec
        self.dtype = dtype
        if kind == "precomputed":
            self.diag = np.diag(Xd).copy()
        elif kind == "rbf":
            self.diag = np.ones(m)
        else:
            self.diag = kernel_diag(spec, X)

    @classmethod
    def from_gram(cls, gram) -> KernelRowCache:
        """A full cache over an existing (m, m) Gram matrix, used in place (no copy when it is a
        C-contiguous float64 or float32 array): row i is ``gram[i]``, every read is a hit.

        Lets the solvers take a dense matrix through the same :func:`cache_row` interface (a
        general symmetric matrix Q works as well; nothing checks that it is a kernel).
        """
        G = np.asarray(gram)
        if G.dtype not in (np.float32, np.float64):
            G = G.astype(np.float64)
        G = np.ascontiguousarray(G)
        m = G.shape[0]
        if G.ndim != 2 or G.shape[1] != m:
            raise ValueError(f"gram must be a square matrix; got shape {G.shape}.")
        self = cls.__new__(cls)
        empty_f = np.zeros(0, dtype=np.float64)
        ident = np.arange(m, dtype=np.int64)
        self.state = RowCacheState(slots=G, slot_of=ident, row_of=ident.copy(), links=_full_list(m),
                                   counters=np.array([0, 0, 0, m, 0, m - 1], dtype=np.int64), kind=KIND_PRECOMPUTED,
                                   params=np.zeros(3), X=G, rows=_NO_ROWS, sq_norms=empty_f,
                                   scratch=empty_f, work=np.empty((2, 0)), X32=np.zeros((0, 0), dtype=np.float32),
                                   work32=np.zeros((1, 0), dtype=np.float32))
        self.n_slots = m
        self.spec = KernelSpec("precomputed")
        self.dtype = G.dtype
        self.diag = np.diag(G).astype(np.float64)
        return self

    def row(self, i: int) -> np.ndarray:
        """A copy of kernel row i."""
        return cache_row(self.state, int(i)).copy()

    def fill(self, *, block_bytes: int = 32 * 2**20) -> np.ndarray:
        """Compute every row now, into slot i for row i; needs a budget of all m rows.

        Dense rows: row by row, by the compiled loop of :func:`cache_row` (the stored matrix is
        exactly symmetric, and equal to the rows a lazy cache computes). CSR rows, and on a
        ``device``: the upper triangle in row blocks of at most ``block_bytes`` (float64), from
        SciPy's sparse products and the compiled transform (equal to the lazy rows to rounding;
        578 rows of cornell's word counts in 14-17 ms against 38-49 ms row by row, which
        scatters each row and reads all the others) or from the device, mirrored into the
        lower one. (The same triangle from BLAS blocks on the CPU computes half the
        kernel values but took 1.3-3x as long as the rows at 2000 and 5000 rows of 10
        features, float32 or float64 storage: its mirrored stores and float64 blocks cost
        more than the values they save.)

        Returns the (m, m) Gram matrix (the cache's storage, of its dtype): while nothing is evicted,
        and nothing is when every row is cached, ``cache_row(state, i)`` is its row i.
        """
        state = self.state
        slots, kind = state.slots, state.kind
        m = slots.shape[1]
        if self.n_slots < m:
            raise ValueError(f"fill() needs room for all {m} rows; the budget holds {self.n_slots}.")
        X = None if kind == KIND_PRECOMPUTED else self._data()
        on_device = None if X is None else _device_products(self.spec)
        if on_device is None and (X is None or not sp.issparse(X)):
            _fill_rows(state, 0, m)
            return slots
        step = int(max(16, min(m, block_bytes // (8 * m))))
        for r0 in range(0, m, step):
            r1 = min(r0 + step, m)
            # rows r0..r1-1, columns r0..m-1: kernel values from the device, or from SciPy's
            # sparse products and the compiled transform
            B = (on_device(self.spec, X[r0:r1], X[r0:], max_bytes=block_bytes) if on_device is not None
                 else self._csr_block(X, slice(r0, r1), slice(r0, m)))
            _store_block(slots, B, r0, 128)
            for i in range(r0, r1):
                _claim_slot(state, i)
        return slots

    def _data(self):
        """The training rows as given to the cache: a (m, d) view of the dense rows (Fortran
        order), or the CSR matrix over the compiled rows' arrays (no copy)."""
        st = self.state
        if st.X.shape[0] > 0:
            return st.X.T
        r = st.rows
        return sp.csr_matrix((r.data, r.indices, r.indptr), shape=(st.slot_of.shape[0], r.n_features))

    def dot(self, v, *, block_bytes: int = 32 * 2**20, rows=None) -> np.ndarray:
        """K @ v in float64 for v of shape (m,) or (m, k), without caching anything, once for all
        k columns; with ``rows`` (sorted indices) the principal block's product K_II v_I on
        I = ``rows`` (placed at I, 0 elsewhere; v outside I is not read). K is symmetric, so each
        kernel value is used twice and computed at most once:

        * the cached rows C give (K v)_C = K_C v and, read by columns, K_RC v_C for the other
          rows R (one compiled pass over the cached rows);
        * K_RR v_R, the only part computed: for dense rows by the compiled rows of the cache over
          the upper triangle (each value applied to both sides while in L1); for CSR rows in
          square blocks (I, J), J >= I (at most ``block_bytes`` of float64 each) of sparse
          products and the compiled transform, applied as K_IJ v_J and K_IJ^T v_I. A
          precomputed kernel reads K_R from the Gram matrix.

        O(r^2 d / 2) kernel work for the r rows not cached (a device: K_R v from the device)."""
        st = self.state
        v = np.ascontiguousarray(v, dtype=np.float64)
        m = v.shape[0]
        V = v.reshape(m, -1)
        if rows is None:
            rows, rest = np.flatnonzero(st.slot_of >= 0), np.flatnonzero(st.slot_of < 0)
        else:  # the block on I: v zero outside I, so the cached rows' products see only I
            V = np.zeros_like(V)
            V[rows] = v.reshape(m, -1)[rows]
            rows, rest = rows[st.slot_of[rows] >= 0], rows[st.slot_of[rows] < 0]
        X = None if st.kind == KIND_PRECOMPUTED else self._data()
        on_device = None if X is None else _device_products(self.spec)
        whole_rows = X is None or on_device is not None  # K_R read or computed whole: no K_RC v_C
        outT = np.zeros((V.shape[1], m))
        scatter = np.zeros(0 if whole_rows or rest.size == 0 else m)
        scatter[rest[: scatter.size]] = 1.0
        _cached_rows_dot(st.slots, st.slot_of, rows, scatter, np.ascontiguousarray(V.T), outT)
        out = np.ascontiguousarray(outT.T)
        if rest.size == 0:
            return out.reshape(v.shape)
        if whole_rows:
            out[rest] = st.X[rest] @ V if X is None else on_device(self.spec, X[rest], X, V, max_bytes=block_bytes)
        elif st.X.shape[0] > 0:
            out[rest] += self._triangle_product(rest, V)
        else:
            self._csr_blocks_product(X, rest, V, out, block_bytes)
        return out.reshape(v.shape)

    def _triangle_product(self, rest, V):
        """K_RR V_R for dense rows R = ``rest`` by the compiled upper triangle."""
        st = self.state
        outR = np.zeros((V.shape[1], rest.size))
        arith32 = st.X32.shape[0] > 0
        XT = np.zeros((0, 0)) if arith32 else np.ascontiguousarray(st.X[:, rest])
        XT32 = np.ascontiguousarray(st.X32[:, rest]) if arith32 else st.X32
        _triangle_dot(st.kind, st.params, XT, st.sq_norms[rest], XT32, np.ascontiguousarray(V[rest].T), outR,
                      st.work, st.work32)
        return outR.T

    def _csr_blocks_product(self, X, rest, V, out, block_bytes):
        """out[R] += K_RR V_R for CSR rows R = ``rest``: square blocks (I, J), J >= I, of at most
        ``block_bytes`` float64 each, applied as K_IJ V_J and K_IJ^T V_I."""
        step = int(max(16, min(rest.size, np.sqrt(block_bytes / 8))))
        blocks = [rest[a : a + step] for a in range(0, rest.size, step)]
        for p, I in enumerate(blocks):
            for q in range(p, len(blocks)):
                J = blocks[q]
                B = self._csr_block(X, I, J)
                out[I] += B @ V[J]
                if q > p:
                    out[J] += B.T @ V[I]

    def _csr_block(self, X, I, J):
        """k(x_i, x_j) for i in I, j in J (index arrays or slices) of CSR rows X, float64."""
        st = self.state
        B = np.ascontiguousarray((X[I] @ X[J].T).toarray(), dtype=np.float64)
        _transform_block(st.kind, st.params, B, st.sq_norms[I], st.sq_norms[J], st.work[1])
        return B

    def prefill(self, rows=None) -> int:
        """Compute rows into the cache now, as many as the budget holds (all of them, as
        :meth:`fill`, when they fit): the first rows, or the leading ones of ``rows`` (row
        indices, distinct); for a caller that reads the kernel only through :meth:`dot`, whose
        products then read those rows instead of computing them. Returns the number of rows
        cached."""
        m = self.state.slot_of.shape[0]
        if self.n_slots >= m:
            self.fill()
            return m
        if rows is None:
            _fill_rows(self.state, 0, self.n_slots)
        else:
            _cache_rows(self.state, np.asarray(rows, dtype=np.int64)[: self.n_slots])
        return self.n_slots

    def matrix(self) -> np.ndarray | None:
        """The (m, m) Gram matrix when every row is cached (the storage itself after
        :meth:`fill`, of the cache's dtype), else None."""
        if not self.is_full:
            return None
        slot_of = self.state.slot_of
        if np.array_equal(slot_of, np.arange(slot_of.shape[0])):
            return self.state.slots
        return self.state.slots[slot_of]

    @property
    def is_full(self) -> bool:
        """Whether every row is cached (then no row is ever recomputed)."""
        st = self.state
        return bool(st.counters[3] == st.slot_of.shape[0] and np.all(st.slot_of >= 0))

    @property
    def hits(self) -> int:
        return int(self.state.counters[1])

    @property
    def misses(self) -> int:
        return int(self.state.counters[2])
