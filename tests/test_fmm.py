"""FMM: accelerated margin maximisation, checked against the hard-margin SVM.

The hard-margin reference is computed twice, independently: scikit-learn's SVC with C = 1e8 on
origin-symmetric data (for every (x, y) also (-x, -y), so the optimal hyperplane passes through
the origin and SVC's unpenalised bias is 0), and the dual min_{q in simplex} ||Z^T q|| solved
by scipy's non-negative least squares.
"""

import warnings

import numpy as np
import pytest
from _data import separable as _separable
from scipy.optimize import nnls
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC

from margindist.models.fmm import FMM
from margindist.solvers.fmm import fmm


def _svc_margin(X, y):
    svc = SVC(kernel="linear", C=1e8, tol=1e-10).fit(X, y)
    assert abs(svc.intercept_[0]) < 1e-6  # symmetric data: the SVM passes through the origin
    return 1.0 / np.linalg.norm(svc.coef_)


def _dual_margin(Z):
    """min_{q in simplex} ||Z^T q|| (the hard margin of the rows z_i = y_i x_i).

    Non-negative least squares with the equality sum(q) = 1 as a heavily weighted extra row;
    q is renormalised onto the simplex afterwards, so the value is an exact ||Z^T q|| for a
    feasible q (an upper bound of the hard margin, tight to the NNLS accuracy).
    """
    n = Z.shape[0]
    M = 1e4
    q, _ = nnls(np.vstack([Z.T, M * np.ones(n)]), np.r_[np.zeros(Z.shape[1]), M], maxiter=100 * n)
    return np.linalg.norm(Z.T @ (q / q.sum()))


def test_margin_reaches_the_hard_margin_svm():
    X, y = _separable()
    gamma = _svc_margin(X, y)
    assert _dual_margin(y[:, None] * X) == pytest.approx(gamma, rel=1e-5)
    est = FMM(max_iter=4000, fit_intercept=False).fit(X, y)
    R = np.linalg.norm(X, axis=1).max()
    assert est.margin_ * R == pytest.approx(gamma, rel=2e-4)
    # a margin never exceeds the hard margin and the dual bound never falls below it (up to
    # SVC's own accuracy: C = 1e8 is not quite C = infinity)
    assert est.margin_ * R <= gamma * (1 + 1e-6)
    assert est.dual_bound_ * R >= gamma * (1 - 1e-6)
    # the library's margins() (norm of coef_, no intercept here) agree with margin_
    assert est.margins(X, y).min() == pytest.approx(est.margin_ * R, rel=1e-10)


def test_margin_with_intercept_is_the_augmented_hard_margin():
    X, y = _separable(seed=1)
    X = X + 0.5  # not symmetric about the origin any more
    est = FMM(max_iter=3000, fit_intercept=True).fit(X, y)
    Xa = np.column_stack([X, np.ones(len(y))])
    R = np.linalg.norm(Xa, axis=1).max()
    gamma = _dual_margin(y[:, None] * Xa)
    assert est.margin_ * R == pytest.approx(gamma, rel=1e-3)
    assert est.score(X, y) == 1.0


def test_accelerated_gap_shrinks_like_t_squared_faster_than_ngd():
    X, y = _separable(n=100, seed=2)
    R = np.linalg.norm(X, axis=1).max()
    gamma = _svc_margin(X, y) / R  # in the scaled units of the solver
    T = 3000
    acc = fmm(X, y, max_iter=T, fit_intercept=False)
    ngd = fmm(X, y, max_iter=T, fit_intercept=False, momentum=False)
    gap_acc, gap_ngd = gamma - acc.margins, gamma - ngd.margins
    ts = np.array([300, 1000, 3000])
    slope_acc = np.polyfit(np.log(ts), np.log(gap_acc[ts - 1]), 1)[0]
    slope_ngd = np.polyfit(np.log(ts), np.log(gap_ngd[ts - 1]), 1)[0]
    assert slope_acc < -1.6  # ~ t^-2
    assert slope_ngd > -1.2  # at best ~ t^-1
    assert gap_acc[T - 1] < gap_ngd[T - 1] / 50
    assert np.all(acc.margins <= gamma * (1 + 1e-9))


def test_non_separable_runs_T_iterations_without_guarantee():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 4))
    y = np.where(X[:, 0] + rng.normal(size=200) > 0, 1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = FMM(step=1.0, max_iter=400).fit(X, y)
    assert est.n_iter_ == 400 and est.margin_ < 0
    assert np.all(np.isfinite(est.coef_)) and est.score(X, y) > 0.7
    with pytest.warns(ConvergenceWarning, match="tol=None"):
        FMM(max_iter=50, tol=1e-3).fit(X, y)


def test_tol_stops_with_a_certified_gap():
    X, y = _separable(seed=6)
    est = FMM(max_iter=5000, tol=1e-3, fit_intercept=False).fit(X, y)
    assert est.n_iter_ < 5000
    assert est.dual_bound_ - est.margin_ <= 1e-3 * est.dual_bound_
    gamma = _svc_margin(X, y) / np.linalg.norm(X, axis=1).max()
    assert est.margin_ <= gamma * (1 + 1e-6) and gamma <= est.dual_bound_ * (1 + 1e-6)


@pytest.mark.parametrize("step", [2.0**-10, 2.0**-4, 1.0])
def test_log_sum_exp_is_stable_for_huge_scores(step):
    X, y = _separable(seed=7)
    # scores <w, z_i> reach ~ step * t^2 * gamma: exp() of them overflows without the max shift
    est = FMM(step=step, max_iter=1600, fit_intercept=False).fit(X * 1e6, y)
    ref = FMM(step=step, max_iter=1600, fit_intercept=False).fit(X, y)  # R normalises: the same
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.margin_history_))
    assert est.margin_ == pytest.approx(ref.margin_, rel=1e-9)


def test_multiclass_and_errors():
    X, y = load_iris(return_X_y=True)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    for mc in ("ovr", "ovo"):
        est = FMM(multi_class=mc, max_iter=400).fit(X, y)
        assert est.score(X, y) > 0.85
        assert est.margin_.shape == (3,) and len(est.margin_history_) == 3
    for bad in (dict(step=0.0), dict(max_iter=0), dict(tol=-1.0)):
        with pytest.raises(ValueError):
            FMM(**bad).fit(X, y)


# ----------------------------------------------------------------------------- fused pass


def _nonseparable(n=300, d=7, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = np.where(X[:, 0] - X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _assert_same_run(a, b, rtol=1e-10):
    wa, wb = np.r_[a.w, a.b], np.r_[b.w, b.b]
    assert a.n_iter == b.n_iter and a.converged == b.converged
    assert np.linalg.norm(wa - wb) <= rtol * np.linalg.norm(wb)
    np.testing.assert_allclose(a.margins, b.margins, rtol=0, atol=rtol * np.abs(b.margins).max())
    np.testing.assert_allclose(a.dual, b.dual, rtol=rtol)


@pytest.mark.parametrize("fmt", ["dense", "csr", "float32", "fortran"])
@pytest.mark.parametrize("kw", [{}, {"fit_intercept": False}, {"momentum": False}, {"step": 2.0**-6}])
def test_fused_pass_gives_the_two_pass_iterates(fmt, kw):
    X, y = _nonseparable()
    import scipy.sparse as sp
    Xf = {"dense": X, "csr": sp.csr_matrix(X), "float32": X.astype(np.float32), "fortran": np.asfortranarray(X)}[fmt]
    a = fmm(Xf, y, max_iter=400, method="fused", **kw)
    b = fmm(Xf, y, max_iter=400, method="two_pass", **kw)
    _assert_same_run(a, b)
    assert a.margins[-1] < 0  # non-separable: the scores spread, q is far from uniform


def test_fused_pass_with_weights_and_a_zero_weight_first_row():
    X, y = _nonseparable(seed=1)
    sw = np.random.default_rng(1).uniform(0.1, 3.0, size=len(y))
    sw[0] = 0.0  # log-weight -inf on the first row read: must give q_0 = 0, not nan
    import scipy.sparse as sp
    for Xf in (X, sp.csr_matrix(X)):
        a = fmm(Xf, y, sw, max_iter=300, method="fused")
        _assert_same_run(a, fmm(Xf, y, sw, max_iter=300, method="two_pass"))
        assert np.all(np.isfinite(a.w))
    # integer weights = repeated rows, through the fused pass
    k = np.arange(len(y)) % 3 + 1
    rep = fmm(np.repeat(X, k, axis=0), np.repeat(y, k), max_iter=300)
    _assert_same_run(fmm(X, y, k.astype(float), max_iter=300), rep, rtol=1e-9)


def test_fused_pass_rescales_when_the_shift_rises():
    # rows sorted by decreasing log-weight a_i = -<w, z_i>: every row raises the running max,
    # so each one rescales the partial sums; the result must still be the max-shifted softmax
    X, y = _nonseparable(seed=2)
    w0 = fmm(X, y, max_iter=50).w
    order = np.argsort(y * (X @ w0))[::-1]
    Xs, ys = X[order], y[order]
    import scipy.sparse as sp
    for Xf in (Xs, sp.csr_matrix(Xs)):  # CSR: by blocks of 64 rows, each block raising the shift
        _assert_same_run(fmm(Xf, ys, max_iter=200, method="fused"), fmm(Xf, ys, max_iter=200, method="two_pass"))


def test_fused_pass_tol_stop_matches():
    X, y = _separable(seed=6)
    a = fmm(X, y, max_iter=5000, tol=1e-3, fit_intercept=False, method="fused")
    b = fmm(X, y, max_iter=5000, tol=1e-3, fit_intercept=False, method="two_pass")
    assert a.converged and a.n_iter < 5000
    _assert_same_run(a, b, rtol=1e-9)


def test_estimator_solvers_agree_and_auto_is_fused():
    X, y = _nonseparable(seed=3)
    auto = FMM(max_iter=300).fit(X, y)
    fused = FMM(max_iter=300, solver="fused").fit(X, y)
    assert auto._method(X) == "fused"
    import scipy.sparse as sp
    assert auto._method(sp.csr_matrix(X)) == "fused"  # by blocks of rows: faster than SciPy's two products
    np.testing.assert_array_equal(FMM(max_iter=300).fit(sp.csr_matrix(X), y).coef_,
                                  FMM(max_iter=300, solver="fused").fit(sp.csr_matrix(X), y).coef_)
    old = FMM(max_iter=300, solver="two_pass").fit(X, y)
    np.testing.assert_array_equal(auto.coef_, fused.coef_)
    np.testing.assert_allclose(old.coef_, fused.coef_, rtol=1e-10, atol=1e-12)
    assert old.margin_ == pytest.approx(fused.margin_, rel=1e-9)
    with pytest.raises(ValueError):
        FMM(solver="newton").fit(X, y)
    with pytest.raises(ValueError, match="method"):
        fmm(X, y, method="bogus")
