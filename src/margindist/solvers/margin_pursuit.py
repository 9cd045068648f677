"""Margin pursuit (Holland, AISTATS 2019): full-batch gradient descent and projected SGD.

Objective (binary, y in {-1, +1}, sample weights s_i with total W = sum_i s_i):

    J(w, b) = (lam/2) (||w||^2 + b^2) + (1/W) sum_i s_i * S * rho((gamma - m_i) / S),
    m_i = y_i (<w, x_i> + b),

with rho the integral of an influence function psi (Catoni-Giulini or Catoni's wide one, see
:mod:`margindist.losses`), gamma > 0 the margin level and S > 0 the scale. The intercept b is the
weight of a constant feature of value 1 and is regularised like the other weights (so both
solvers minimise the same J and the projection radius below bounds (w, b) together).

* :func:`mp_gd` -- steepest descent with the constant step 1/L, L = ||D^{1/2} [X, 1]||_op^2 / S
  + lam (D = diag(s_i / W)): the gradient of J is L-Lipschitz because 0 <= psi' <= 1, so J
  decreases monotonically. O(nnz) per iteration plus one top singular value of the weighted,
  intercept-augmented X, once (the (d+1) x (d+1) Gram matrix up to 500 columns, else ARPACK on
  a linear operator; sparse X is never densified).
* :func:`sgd_passes` -- projected mini-batch SGD with the Pegasos schedule eta_t = 1/(lam t):
  w' = (1 - eta_t lam) w + (eta_t / k) sum_{i in A_t} c_i psi((gamma - m_i)/S) y_i [x_i, 1],
  then projection onto the ball of radius r = sqrt(2 S rho(gamma/S) / lam) (every minimiser of J
  lies in it since (lam/2)||w*||^2 <= J(w*) <= J(0) = S rho(gamma/S)). c_i = s_i n / W, so a
  step is an unbiased estimate of the gradient of the same J that GD minimises (with unit
  weights c_i = 1: Pegasos / scikit-learn's SGDClassifier). Examples are visited in a fresh
  random permutation every pass. The inner loop is numba-compiled for dense and CSR X and
  costs O(nnz(x_i)) per example: w is held as a * v (scalar times vector) so the shrinkage and
  the projection are O(1), and ||w||^2 is updated in closed form; the running average uses the
  same trick (Xu 2011).

The data-driven scale (Catoni's bound): S^2 = n v / (2 log(1/delta)), with v a bound on the
second moment of gamma - m; at w = 0 all margins are 0 so v = gamma^2; after ``rescale_after``
passes v is re-estimated once as the ``rescale_quantile`` quantile of (gamma - m_i)^2 over the
training sample and S is kept fixed from then on. n is the total sample weight (weights read
as frequencies: integer weights act as repeated rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.sparse.linalg import LinearOperator, svds

from ..losses import (
    CATONI_BOUND,
    CATONI_KNOT,
    catoni_psi,
    catoni_rho,
    catoni_wide_psi,
    catoni_wide_rho,
)
from ._gram import row_gram
from ._result import SolverResult
from ._rows import make_rows, nonneg, row_axpy, row_axpy2, row_dot, row_dot_sq, rows_dot

__all__ = [
    "INFLUENCE_CODES",
    "SGDState",
    "catoni_scale",
    "check_norm_finite",
    "influence_psi",
    "influence_rho",
    "mp_gd",
    "mp_gradient",
    "mp_objective",
    "projection_radius",
    "rescaled_scale",
    "rows_rmatvec",
    "sgd_coef",
    "sgd_init",
    "sgd_passes",
    "weighted_gram",
    "weighted_op_norm_sq",
]

#: Influence functions known to the solvers. "hinge" replaces psi((gamma - m)/S) by the
#: indicator 1[m <= gamma] (the hinge subgradient): with it the SGD solver is Pegasos. It is a
#: solver-level option used to cross-check against scikit-learn, not an estimator option.
INFLUENCE_CODES = {"catoni_giulini": 0, "catoni_wide": 1, "hinge": 2}

#: The smallest scale S used (Catoni's formula can give 0 when all margins equal gamma).
MIN_SCALE = 1e-3

_LOG2 = math.log(2.0)


# ------------------------------------------------------------------ influence functions
def influence_psi(u, influence):
    """psi(u) of the named influence function (vectorised)."""
    if influence == "catoni_giulini":
        return catoni_psi(u)
    if influence == "catoni_wide":
        return catoni_wide_psi(u)
    if influence == "hinge":
        return (np.asarray(u) >= 0).astype(np.float64)
    raise ValueError(f"unknown influence {influence!r}; expected one of {sorted(INFLUENCE_CODES)}.")


def influence_rho(u, influence):
    """rho(u), the integral of :func:`influence_psi` (hinge: max(u, 0))."""
    if influence == "catoni_giulini":
        return catoni_rho(u)
    if influence == "catoni_wide":
        return catoni_wide_rho(u)
    if influence == "hinge":
        return np.maximum(np.asarray(u, dtype=np.float64), 0.0)
    raise ValueError(f"unknown influence {influence!r}; expected one of {sorted(INFLUENCE_CODES)}.")


@njit(cache=True, inline="always")
def _psi1(u, kind):
    if kind == 0:
        if abs(u) <= CATONI_KNOT:
            return u - u * u * u / 6.0
        return CATONI_BOUND if u > 0 else -CATONI_BOUND
    if kind == 1:
        a = abs(u)
        if a > 1e8:
            lw = 2.0 * math.log(a) - _LOG2 + math.log1p((2.0 / a) * (1.0 + 1.0 / a))
        else:
            lw = math.log1p(a + 0.5 * a * a)
        return lw if u >= 0 else -lw
    return 1.0 if u >= 0 else 0.0


@njit(cache=True, inline="always")
def _rho1(u, kind):
    if kind == 0:
        a = abs(u)
        if a <= CATONI_KNOT:
            u2 = u * u
            return 0.5 * u2 - u2 * u2 / 24.0
        return CATONI_BOUND * a - 0.5
    if kind == 1:
        a = abs(u)
        a2 = a * a
        if a < 1e-3:
            return a2 / 2.0 - a2 * a2 / 24.0 + a2 * a2 * a / 40.0 - a2 * a2 * a2 / 120.0
        if a > 1e8:
            lw = 2.0 * math.log(a) - _LOG2 + math.log1p((2.0 / a) * (1.0 + 1.0 / a))
        else:
            lw = math.log1p(a + 0.5 * a2)
        return (1.0 + a) * lw - 2.0 * a + 2.0 * math.atan(a / (2.0 + a))
    return u if u > 0 else 0.0


def _psi_numba(u, influence):
    """Scalar numba psi (exposed for tests: it must agree with :func:`influence_psi`)."""
    return _psi1(float(u), INFLUENCE_CODES[influence])


def _rho_numba(u, influence):
    """Scalar numba rho (exposed for tests: it must agree with :func:`influence_rho`)."""
    return _rho1(float(u), INFLUENCE_CODES[influence])


# ------------------------------------------------------------------ scale and radius
def catoni_scale(v, n, delta, factor=1.0):
    """Catoni's scale factor * sqrt(n v / (2 log(1/delta))), floored at 1e-3."""
    s = factor * math.sqrt(max(n * v, 0.0) / (2.0 * math.log(1.0 / delta)))
    return max(s, MIN_SCALE)


def _weighted_quantile(values, weights, q):
    """Inverted-CDF quantile with frequency weights (numpy's method="inverted_cdf")."""
    if np.all(weights == weights[0]):  # O(n) selection instead of a sort
        return float(np.quantile(values, q, method="inverted_cdf"))
    order = np.argsort(values, kind="stable")
    cw = np.cumsum(weights[order])
    k = int(np.searchsorted(cw, q * cw[-1], side="left"))
    return float(values[order[min(k, values.size - 1)]])


def rescaled_scale(margins, sample_weight, margin, quantile, delta, factor=1.0):
    """The data-driven scale: v = weighted ``quantile`` of (gamma - m_i)^2, n = sum of weights."""
    dev2 = (margin - np.asarray(margins, dtype=np.float64)) ** 2
    v = _weighted_quantile(dev2, sample_weight, quantile)
    return catoni_scale(v, float(np.sum(sample_weight)), delta, factor)


def projection_radius(scale, margin, lam, influence):
    """sqrt(2 S rho(gamma / S) / lam): every minimiser of J lies in this ball."""
    j0 = scale * float(influence_rho(margin / scale, influence))
    return math.sqrt(2.0 * j0 / lam)


# ------------------------------------------------------------------ objective and gradient
def _decision(X, w, b):
    return np.asarray(X @ w, dtype=np.float64).ravel() + b


def mp_objective(X, y, sample_weight, w, b=0.0, *, margin, scale, lam, influence="catoni_giulini"):
    """J(w, b) (see the module docstring)."""
    sw = np.asarray(sample_weight, dtype=np.float64)
    m = y * _decision(X, w, b)
    loss = scale * influence_rho((margin - m) / scale, influence)
    return 0.5 * lam * (float(w @ w) + b * b) + float(sw @ loss) / sw.sum()


def mp_gradient(X, y, sample_weight, w, b=0.0, *, margin, scale, lam, influence="catoni_giulini"):
    """(dJ/dw, dJ/db)."""
    sw = np.asarray(sample_weight, dtype=np.float64)
    m = y * _decision(X, w, b)
    coef = sw * influence_psi((margin - m) / scale, influence) * y / sw.sum()
    gw = lam * w - np.asarray(X.T @ coef, dtype=np.float64).ravel()
    return gw, lam * b - float(coef.sum())


@njit(cache=True, fastmath={"reassoc", "contract", "nsz"})
def rows_rmatvec(rows, r, out):
    """out = Xh^T r for the :class:`~margindist.solvers._rows.Rows` Xh (float32 or float64 values,
    float64 sums), one pass over the rows."""
    out[:] = 0.0
    for i in range(r.shape[0]):
        if r[i] != 0.0:
            row_axpy(rows, i, r[i], out)


def weighted_gram(X, weights, fit_intercept):
    """A^T A for A = diag(sqrt(weights)) [X, 1] (the column of ones only with ``fit_intercept``),
    a dense (d+1) x (d+1) float64 array (formed by a sparse product for CSR X, never densifying
    it); non-finite entries where X overflows."""
    w = np.asarray(weights, dtype=np.float64)
    if sp.issparse(X):
        Xw = sp.csr_matrix(X, dtype=np.float64).multiply(w[:, None]).tocsr()
        G = np.asarray((X.T @ Xw).toarray(), dtype=np.float64)
        c = np.asarray(Xw.sum(axis=0), dtype=np.float64).ravel()
    else:
        Xf = np.asarray(X, dtype=np.float64)
        G = Xf.T @ (Xf * w[:, None])
        c = Xf.T @ w
    if fit_intercept:
        G = np.block([[G, c[:, None]], [c[None, :], np.array([[w.sum()]])]])
    return G


def _top_eigenvalue(G, margin):
    """The largest eigenvalue of the symmetric G, raised by ``margin`` relative (inf if G is
    not finite)."""
    if not np.all(np.isfinite(G)):
        return math.inf
    return float(np.linalg.eigvalsh(G)[-1]) * (1.0 + margin)


def weighted_op_norm_sq(X, weights, fit_intercept, gram=None):
    """||diag(sqrt(weights)) [X, 1]||_op^2 (the column of ones only with ``fit_intercept``).

    Up to 500 columns: the largest eigenvalue of the (d+1) x (d+1) Gram matrix A^T A
    (:func:`weighted_gram`, or ``gram`` when the caller has it); up to 500 rows: that of the
    n x n matrix A A^T; otherwise ARPACK (``svds``) on a linear operator, inflated by 1e-6
    relative so that 1/L stays a safe step. Sparse X is never densified.
    """
    n, d = X.shape
    w = np.asarray(weights, dtype=np.float64)
    sq = np.sqrt(w)
    d1 = d + int(bool(fit_intercept))
    if d1 <= 500 or gram is not None:
        G = weighted_gram(X, w, fit_intercept) if gram is None else gram
        return _top_eigenvalue(G, 1e-12)
    if n <= 500:  # a few wide rows: the same top eigenvalue, from the smaller side
        G = row_gram(X) + float(bool(fit_intercept))
        return _top_eigenvalue(sq[:, None] * G * sq[None, :], 1e-12)

    # float32 X through the row loops (NumPy / SciPy would upcast a copy of X at every product)
    rows = make_rows(X, 1.0 if fit_intercept else None) if X.dtype == np.float32 else None

    def matvec(v):
        v = np.asarray(v, dtype=np.float64).ravel()
        if rows is not None:
            out = np.empty(n)
            rows_dot(rows, v, out)
            return sq * out
        out = np.asarray(X @ v[:d], dtype=np.float64).ravel()
        if fit_intercept:
            out = out + v[d]
        return sq * out

    def rmatvec(u):
        u = sq * np.asarray(u, dtype=np.float64).ravel()
        if rows is not None:
            out = np.empty(d1)
            rows_rmatvec(rows, u, out)
            return out
        out = np.asarray(X.T @ u, dtype=np.float64).ravel()
        return np.append(out, u.sum()) if fit_intercept else out

    op = LinearOperator((n, d1), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
    # 6 Lanczos vectors: ARPACK's default 20 costs 20 products before its first convergence test,
    # where the top singular value of a non-centred design (a dominant mean row) needs 8 (a
    # standardised 20000 x 800 design: 44 against 42 with the default)
    s = svds(op, k=1, tol=1e-8, ncv=min(6, n, d1), return_singular_vectors=False, random_state=0)
    return float(s[0]) ** 2 * (1.0 + 1e-6)


# ------------------------------------------------------------------ gradient descent
@dataclass(kw_only=True)
class GDResult(SolverResult):
    """A run of :func:`mp_gd` (``n_iter``: iterations; ``history``: J at every iterate, the
    starting point included)."""

    w: np.ndarray
    b: float
    scale: float
    rescaled: bool
    rescale_iter: int | None  # history[:k] used the old scale, history[k:] the new (None: no change)


def check_norm_finite(value):
    """Raise the error of a design whose norm overflows (``value``: a norm or Gram matrix of X)."""
    if not np.all(np.isfinite(value)):
        raise ValueError(
            "The norm of X overflows: margin pursuit cannot take a step. Scale the features "
            "(e.g. MinMaxScaler or StandardScaler)."
        )


def _check_finite(w, b, where):
    if not (np.all(np.isfinite(w)) and np.isfinite(b)):
        raise ValueError(
            f"Margin pursuit diverged ({where}): the weights are not finite. Scale the features "
            "(e.g. MinMaxScaler or StandardScaler) or increase lam."
        )


def mp_gd(X, y, sample_weight, *, margin, scale, lam, influence="catoni_giulini", fit_intercept=True,
          max_iter=1000, tol=1e-4, rescale=True, rescale_after=1, rescale_quantile=0.75, delta=0.01,
          scale_factor=1.0, w0=None, b0=0.0, iters_done=0, rescaled=False, op_norm_sq=None, log=None):
    """Full-batch steepest descent on J with the constant step 1/L (paper Algorithm 1).

    Stops when ||grad J(w, b)|| <= tol * ||grad J(0, 0)|| (relative to the gradient at the
    origin, so the criterion does not depend on the units of X), or after ``max_iter``
    iterations. With ``rescale`` the scale is re-estimated once, after iteration
    ``rescale_after`` (counting ``iters_done`` earlier iterations of a warm start); no stop
    happens before that. ``op_norm_sq``: ||D^{1/2} [X, 1]||_op^2 when the caller has it
    (:func:`weighted_op_norm_sq` of X and s / W). Returns a :class:`GDResult`.
    """
    if influence == "hinge":
        raise ValueError("mp_gd needs a smooth influence function, not 'hinge'.")
    y = np.asarray(y, dtype=np.float64)
    sw = np.asarray(sample_weight, dtype=np.float64)
    W = sw.sum()
    swn = sw / W
    d = X.shape[1]
    w = np.zeros(d) if w0 is None else np.array(w0, dtype=np.float64)
    b = float(b0) if fit_intercept else 0.0
    op2 = op_norm_sq
    if op2 is None:
        with np.errstate(over="ignore", invalid="ignore"):
            op2 = weighted_op_norm_sq(X, swn, fit_intercept)
    check_norm_finite(op2)
    s = float(scale)
    XTy = np.asarray(X.T @ (swn * y), dtype=np.float64).ravel()
    ysum = float(swn @ y)

    def ref_norm(s):
        p0 = float(influence_psi(margin / s, influence))
        return p0 * math.sqrt(XTy @ XTy + (ysum * ysum if fit_intercept else 0.0))

    L = op2 / s + lam
    g0 = ref_norm(s)
    history = []
    rescale_iter = None
    converged = False
    done = iters_done
    n_iter = 0
    pending = rescale and not rescaled
    while True:
        m = y * _decision(X, w, b)
        u = (margin - m) / s
        J = 0.5 * lam * (w @ w + b * b) + s * float(swn @ influence_rho(u, influence))
        history.append(J)
        coef = swn * influence_psi(u, influence) * y
        gw = lam * w - np.asarray(X.T @ coef, dtype=np.float64).ravel()
        gb = lam * b - float(coef.sum()) if fit_intercept else 0.0
        gnorm = math.sqrt(float(gw @ gw) + gb * gb)
        if not pending and tol is not None and gnorm <= tol * g0:
            converged = True
            break
        if n_iter >= max_iter:
            break
        w -= gw / L
        b -= gb / L
        n_iter += 1
        done += 1
        _check_finite(w, b, f"gradient descent, iteration {done}")
        if pending and done >= rescale_after:
            m = y * _decision(X, w, b)
            s = rescaled_scale(m, sw, margin, rescale_quantile, delta, scale_factor)
            L = op2 / s + lam
            g0 = ref_norm(s)
            pending = False
            rescaled = True
            rescale_iter = len(history)
            if log is not None:
                log.info("margin pursuit GD: scale re-estimated after %d iterations: S = %.4g", done, s)
        if log is not None and n_iter % 100 == 0:
            log.debug("margin pursuit GD: iteration %d, J = %.8g, |grad| = %.3g", done, J, gnorm)
    return GDResult(w=w, b=b, scale=s, n_iter=n_iter, history=np.asarray(history), converged=converged,
                    rescaled=rescaled, rescale_iter=rescale_iter)


# ------------------------------------------------------------------ projected SGD
#: Fast-math flags of the hot loops: reassociation lets LLVM vectorise the dot products (the
#: result is deterministic for a given build; it differs from a sequential sum by rounding).
#: No "nnan"/"ninf": overflow must still show up as inf/nan and be reported.
_FM = {"reassoc", "contract", "nsz"}


# The single-example kernels carry the pass state in scalars: t (step number), a (w = a v, v the
# array being updated), nsq = ||(w, b)||^2, bv = b / a, Q and Pb (the running sum of averaged
# iterates is P + Q v, its intercept part Pb), cnt (averaged iterates), obj (objective sum).


@njit(cache=True, inline="always")
def _step_begin(acc, xsq, ymk, v, P, t, a, nsq, bv, Q, Pb, obj, margin, scale, lam, kind, one, do_avg):
    """Everything of one single-example step before the axpy. Returns the coefficient of x_i
    in v-space (0: no update) and the updated scalars."""
    f = a * (acc + bv * one)
    yi = 1.0 if ymk > 0 else -1.0
    u = (margin - yi * f) / scale
    obj += abs(ymk) * scale * _rho1(u, kind) + 0.5 * lam * nsq
    g = _psi1(u, kind) * ymk
    eta = 1.0 / (lam * t)
    c = 1.0 - eta * lam
    if c <= 0.0:  # only at t = 1: w becomes 0
        if do_avg:
            for j in range(v.shape[0]):
                P[j] += Q * v[j]
            Pb += Q * bv
            Q = 0.0
        v[:] = 0.0
        bv = 0.0
        a = 1.0
        nsq = 0.0
        f = 0.0
    else:
        a *= c
        nsq *= c * c
        f *= c
    coef = 0.0
    if g != 0.0:
        step = eta * g
        nsq += 2.0 * step * f + step * step * (xsq + one)
        coef = step / a
        bv += coef * one
        Pb -= Q * coef * one
    return coef, a, nsq, bv, Q, Pb, obj


@njit(cache=True, inline="always")
def _renormalise(v, P, a, bv, Q, Pb, do_avg):
    """w = a v with a tiny: fold a into v (returns a = 1). The averaged sum P + Q v is kept by
    adding Q v to P first (Q = 0): rescaling Q by 1 / a instead compounds and overflows when the
    projection shrinks a often (rows of large norm)."""
    if do_avg:
        for j in range(v.shape[0]):
            P[j] += Q * v[j]
        Pb += Q * bv
        Q = 0.0
    for j in range(v.shape[0]):
        v[j] *= a
    return 1.0, bv * a, Q, Pb


@njit(cache=True, inline="always")
def _step_end(v, P, t, a, nsq, bv, Q, Pb, cnt, r2, radius, do_avg):
    """Projection, averaging bookkeeping and renormalisation after the axpy."""
    nsq = max(nsq, 0.0)
    if nsq > r2:
        a *= radius / math.sqrt(nsq)
        nsq = r2
    if do_avg:
        Q += a
        cnt += 1.0
    if a < 1e-9:
        a, bv, Q, Pb = _renormalise(v, P, a, bv, Q, Pb, do_avg)
    return t + 1.0, a, nsq, bv, Q, Pb, cnt


@njit(cache=True, inline="always")
def _pass_finish(v, P, st, t, a, bv, Q, Pb, cnt, do_avg):
    """Materialise w = a v and the averaged sum P + Q v; write the carried state to st."""
    if do_avg:
        for j in range(v.shape[0]):
            P[j] += Q * v[j]
        Pb += Q * bv
    ns = 0.0
    for j in range(v.shape[0]):
        v[j] *= a
        ns += v[j] * v[j]
    bv *= a
    st[0] = t
    st[1] = bv
    st[2] = ns + bv * bv
    st[3] = Pb
    st[4] = cnt


@njit(cache=True, fastmath=_FM)
def _sgd_pass1_dense(X, ym, order, v, P, st, margin, scale, lam, radius, kind, fit_intercept, do_avg):
    """:func:`_sgd_pass` for mini-batches of one example on dense X, row loops inline.

    The hot path (the default ``batch_size=1``): one dot product (vectorised: reassociation
    allowed) and one axpy per example, everything else O(1).
    """
    n = order.shape[0]
    d = v.shape[0]
    one = 1.0 if fit_intercept else 0.0
    r2 = radius * radius
    t, bv, nsq, Pb, cnt = st[0], st[1], st[2], st[3], st[4]
    a, Q, obj = 1.0, 0.0, 0.0
    for k in range(n):
        i = order[k]
        acc = 0.0
        xsq = 0.0
        for j in range(d):
            x = X[i, j]
            acc += v[j] * x
            xsq += x * x
        if not math.isfinite(xsq):
            return math.nan  # overflow: reported by the caller
        coef, a, nsq, bv, Q, Pb, obj = _step_begin(acc, xsq, ym[k], v, P, t, a, nsq, bv, Q, Pb, obj,
                                                   margin, scale, lam, kind, one, do_avg)
        if coef != 0.0:
            if do_avg:
                qc = Q * coef
                for j in range(d):
                    x = X[i, j]
                    v[j] += coef * x
                    P[j] -= qc * x
            else:
                for j in range(d):
                    v[j] += coef * X[i, j]
        t, a, nsq, bv, Q, Pb, cnt = _step_end(v, P, t, a, nsq, bv, Q, Pb, cnt, r2, radius, do_avg)
    _pass_finish(v, P, st, t, a, bv, Q, Pb, cnt, do_avg)
    return obj


@njit(cache=True, fastmath={"contract"})
def _sgd_pass1_csr(data, indices, indptr, ym, order, v, P, st, margin, scale, lam, radius, kind,
                   fit_intercept, do_avg):
    """:func:`_sgd_pass1_dense` for CSR X.

    No reassociation here: LLVM would turn the indexed loops into vector gathers, which are
    slower than scalar loads. The rows visited a few steps ahead are touched early (software
    prefetch): random rows of a large CSR matrix are cache misses, and these loads are off the
    critical path.
    """
    n = order.shape[0]
    one = 1.0 if fit_intercept else 0.0
    r2 = radius * radius
    t, bv, nsq, Pb, cnt = st[0], st[1], st[2], st[3], st[4]
    a, Q, obj = 1.0, 0.0, 0.0
    touch = 0.0
    for k in range(n):
        i = order[k]
        if k + 8 < n:
            touch += indptr[order[k + 8]]
        if k + 4 < n:
            q1 = indptr[order[k + 4] + 1]
            for q in range(indptr[order[k + 4]], q1, 8):
                touch += data[q]
            for q in range(indptr[order[k + 4]], q1, 16):
                touch += indices[q]
        acc = 0.0
        xsq = 0.0
        for p in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
            x = data[p]
            acc += v[nonneg(indices[p])] * x
            xsq += x * x
        if not math.isfinite(xsq):
            return math.nan  # overflow: reported by the caller
        coef, a, nsq, bv, Q, Pb, obj = _step_begin(acc, xsq, ym[k], v, P, t, a, nsq, bv, Q, Pb, obj,
                                                   margin, scale, lam, kind, one, do_avg)
        if coef != 0.0:
            qc = Q * coef
            for p in range(nonneg(indptr[i]), nonneg(indptr[i + 1])):
                x = data[p]
                v[nonneg(indices[p])] += coef * x
                if do_avg:
                    P[nonneg(indices[p])] -= qc * x
        t, a, nsq, bv, Q, Pb, cnt = _step_end(v, P, t, a, nsq, bv, Q, Pb, cnt, r2, radius, do_avg)
    _pass_finish(v, P, st, t, a, bv, Q, Pb, cnt, do_avg)
    # "+ 0 * touch" keeps the prefetching loads alive (no "nnan" flag: it cannot be folded)
    return obj + 0.0 * touch


@njit(cache=True, fastmath=_FM)
def _sgd_pass(rows, ym, order, v, P, st, margin, scale, lam, radius, kind, batch_size, fit_intercept, do_avg,
              fbuf, gbuf, sbuf):
    """One pass of projected mini-batch SGD over ``order``; updates v, P and st in place.

    Example k of the pass is row order[k]; ym[k] = y_i c_i (label times weight multiplier,
    c_i > 0) is given in pass order, gathered beforehand, so the loop reads it sequentially
    (random reads of per-row arrays cost as much as the row itself on large data); ||x_i||^2
    is accumulated in the dot-product loop. Overflow shows as a non-finite return value. st = [t (next step number), b, ||(w, b)||^2, sum of averaged
    intercepts, number of averaged iterates]. v holds w on entry and on exit; P the running
    sum of averaged iterates (w part). Returns the sum over examples of c_i * loss_i +
    (lam/2)||(w, b)||^2 at the time each example was visited (its mean estimates J along the
    pass).
    """
    n = order.shape[0]
    t = st[0]
    bv = st[1]
    normsq = st[2]
    Pb = st[3]
    count = st[4]
    a = 1.0
    Q = 0.0
    one = 1.0 if fit_intercept else 0.0
    r2 = radius * radius
    obj = 0.0
    start = 0
    while start < n:
        stop = min(start + batch_size, n)
        kk = stop - start
        eta = 1.0 / (lam * t)
        for jj in range(kk):
            i = order[start + jj]
            dot, xsq = row_dot_sq(rows, i, v)
            if not math.isfinite(xsq):
                return math.nan  # overflow: reported by the caller
            f = a * (dot + bv * one)
            fbuf[jj] = f
            sbuf[jj] = xsq
            yi = 1.0 if ym[start + jj] > 0 else -1.0
            u = (margin - yi * f) / scale
            obj += abs(ym[start + jj]) * scale * _rho1(u, kind) + 0.5 * lam * normsq
            gbuf[jj] = _psi1(u, kind) * ym[start + jj] / kk
        c = 1.0 - eta * lam
        if c <= 0.0:
            if do_avg:
                for j in range(v.shape[0]):
                    P[j] += Q * v[j]
                Pb += Q * bv
                Q = 0.0
            v[:] = 0.0
            bv = 0.0
            a = 1.0
            normsq = 0.0
        else:
            a *= c
            normsq *= c * c
        for jj in range(kk):
            g = gbuf[jj]
            if g == 0.0:
                continue
            i = order[start + jj]
            step = eta * g
            if kk == 1:
                fcur = c * fbuf[0] if c > 0.0 else 0.0
            else:
                fcur = a * (row_dot(rows, i, v) + bv * one)
            normsq += 2.0 * step * fcur + step * step * (sbuf[jj] + one)
            coef = step / a
            if do_avg:  # v += coef x_i, P -= Q coef x_i
                row_axpy2(rows, i, coef, v, -Q * coef, P)
            else:
                row_axpy(rows, i, coef, v)
            if fit_intercept:
                bv += coef
                if do_avg:
                    Pb -= Q * coef
        normsq = max(normsq, 0.0)
        if normsq > r2:
            fac = radius / math.sqrt(normsq)
            a *= fac
            normsq = r2
        if do_avg:
            Q += a
            count += 1.0
        if a < 1e-9:
            a, bv, Q, Pb = _renormalise(v, P, a, bv, Q, Pb, do_avg)
        t += 1.0
        start = stop
    _pass_finish(v, P, st, t, a, bv, Q, Pb, count, do_avg)
    return obj


@dataclass
class SGDState:
    """Everything projected SGD carries from one pass (or ``partial_fit`` call) to the next."""

    w: np.ndarray
    b: float = 0.0
    t: int = 1  # the next step number: eta_t = 1 / (lam t)
    scale: float = 1.0
    radius: float = math.inf
    passes: int = 0
    rescaled: bool = False
    avg_sum: np.ndarray | None = None
    avg_b: float = 0.0
    avg_count: int = 0
    rng: np.random.Generator | None = None
    history: list = field(default_factory=list)  # mean objective estimate of every pass


def sgd_init(n_features, *, scale, margin, lam, influence="catoni_giulini", project=True, average=False,
             seed=None):
    """A fresh SGD state at w = 0 with scale S and its projection radius."""
    radius = projection_radius(scale, margin, lam, influence) if project else math.inf
    return SGDState(w=np.zeros(n_features), scale=float(scale), radius=radius,
                    avg_sum=np.zeros(n_features) if average else None,
                    rng=np.random.default_rng(seed))


def sgd_coef(state, average):
    """(w, b) to predict with: the running average of the iterates or the last iterate."""
    if average and state.avg_sum is not None and state.avg_count > 0:
        return state.avg_sum / state.avg_count, state.avg_b / state.avg_count
    return state.w.copy(), state.b


def _project(state):
    nrm = math.sqrt(float(state.w @ state.w) + state.b * state.b)
    if nrm > state.radius:
        state.w *= state.radius / nrm
        state.b *= state.radius / nrm


#: Stochastic steps before the SGD stopping rule may end a run (fewer for tiny data: 50 passes).
_MIN_STEPS_BEFORE_STOP = 1000


def sgd_passes(X, y, sample_weight, state, *, n_passes, margin, lam, influence="catoni_giulini",
               batch_size=1, fit_intercept=True, average=False, rescale=True, rescale_after=1,
               rescale_quantile=0.75, delta=0.01, scale_factor=1.0, shuffle=True, tol=None,
               n_iter_no_change=5, project=True, log=None):
    """Run up to ``n_passes`` passes of projected SGD from ``state`` (modified in place).

    Stopping (only with ``tol`` not None, scikit-learn's SGD rule): the mean objective estimate
    of a pass (examples' losses and the penalty at the time they were visited) failing to
    improve on the best so far by ``tol`` for ``n_iter_no_change`` passes in a row. The rule
    starts counting once min(1000, 50 n) steps are taken: on a handful of examples the mean of a
    pass is too noisy to say that the iterate stopped improving (with two examples per class it
    would stop, for some seeds, on a one-class iterate). Returns (passes run, converged).
    """
    kind = INFLUENCE_CODES[influence]
    y = np.ascontiguousarray(y, dtype=np.float64)
    sw = np.asarray(sample_weight, dtype=np.float64)
    n, d = X.shape
    ym = y * (sw * (n / sw.sum()))  # label times weight multiplier c_i = s_i n / W
    sparse = sp.issparse(X)
    if sparse:
        X = X.tocsr()
        if not X.has_sorted_indices:
            X = X.sorted_indices()
    rows = make_rows(X)
    k = int(batch_size)
    fbuf = np.empty(k)
    gbuf = np.empty(k)
    sbuf = np.empty(k)
    if average and state.avg_sum is None:
        state.avg_sum = np.zeros(d)
    P = state.avg_sum if average else np.empty(0)
    if not fit_intercept:
        state.b = 0.0
    st = np.array([state.t, state.b, float(state.w @ state.w) + state.b**2, state.avg_b,
                   state.avg_count], dtype=np.float64)
    if state.rng is None:
        raise ValueError("The SGD state has no random generator: make it with sgd_init(..., seed=...).")
    if project:  # lam, margin or the influence may have changed since the state was made
        state.radius = projection_radius(state.scale, margin, lam, influence)
        _project(state)
        st[1] = state.b
        st[2] = float(state.w @ state.w) + state.b**2
    rng = state.rng
    best = math.inf
    no_improve = 0
    converged = False
    run = 0
    for _ in range(n_passes):
        order = rng.permutation(n) if shuffle else np.arange(n)
        radius = state.radius if project else math.inf
        ym_o = ym[order]
        if k == 1 and sparse:
            obj = _sgd_pass1_csr(rows.data, rows.indices, rows.indptr, ym_o, order, state.w, P, st, float(margin),
                                 float(state.scale), float(lam), float(radius), kind,
                                 bool(fit_intercept), bool(average))
        elif k == 1:
            obj = _sgd_pass1_dense(rows.dense, ym_o, order, state.w, P, st, float(margin), float(state.scale),
                                   float(lam), float(radius), kind, bool(fit_intercept), bool(average))
        else:
            obj = _sgd_pass(rows, ym_o, order, state.w, P, st,
                            float(margin), float(state.scale), float(lam), float(radius), kind, k,
                            bool(fit_intercept), bool(average), fbuf, gbuf, sbuf)
        if not math.isfinite(obj):
            raise ValueError(
                f"Margin pursuit overflowed in SGD pass {state.passes + 1} (non-finite margins or "
                "norms). Scale the features (e.g. MinMaxScaler or StandardScaler)."
            )
        state.t = int(st[0])
        state.b = float(st[1])
        state.avg_b = float(st[3])
        state.avg_count = int(st[4])
        state.passes += 1
        run += 1
        _check_finite(state.w, state.b, f"SGD pass {state.passes}")
        mean_obj = obj / n
        state.history.append(mean_obj)
        if log is not None:
            log.info("margin pursuit SGD: pass %d, t = %d, mean objective %.6g, S = %.4g",
                     state.passes, state.t - 1, mean_obj, state.scale)
        if rescale and not state.rescaled and state.passes >= rescale_after:
            m = y * _decision(X, state.w, state.b)
            state.scale = rescaled_scale(m, sw, margin, rescale_quantile, delta, scale_factor)
            state.rescaled = True
            if project:
                state.radius = projection_radius(state.scale, margin, lam, influence)
                _project(state)
            st[1] = state.b
            st[2] = float(state.w @ state.w) + state.b**2
            if average:  # the objective changed: average only the iterates from here on
                P[:] = 0.0
                st[3] = st[4] = 0.0
                state.avg_b, state.avg_count = 0.0, 0
            best, no_improve = math.inf, 0
            if log is not None:
                log.info("margin pursuit SGD: scale re-estimated after %d passes: S = %.4g",
                         state.passes, state.scale)
            continue
        if tol is not None and state.t - 1 >= min(_MIN_STEPS_BEFORE_STOP, 50 * n):
            if mean_obj > best - tol:
                no_improve += 1
            else:
                no_improve = 0
            best = min(best, mean_obj)
            if no_improve >= n_iter_no_change:
                converged = True
                break
    return run, converged
