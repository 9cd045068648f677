"""ODM: objective, dual, solvers and the estimator, checked against independent computations."""

import numpy as np
import pytest
import scipy.optimize as so
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import LinearSVC

from margindist.datasets import load_dataset
from margindist.models.odm import ODM
from margindist.solvers.odm import (
    newton_after,
    odm_band_loss,
    odm_band_loss_grad,
    odm_band_loss_hess,
    odm_coefficients,
    odm_dcd_kernel,
    odm_dcd_linear,
    odm_dual_objective,
    odm_dual_terms,
    odm_kernel_newton,
    odm_newton,
    odm_primal_objective,
    odm_svrg,
)

PARAMS = [(1.0, 0.8, 0.2), (10.0, 0.3, 0.5), (0.1, 1.0, 0.0), (5.0, 0.0, 0.4)]


def _data(rng, m=80, d=4, scale=1.0):
    X = rng.normal(size=(m, d)) * scale
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.7 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


def _primal(X, y, s, lam, mu, theta, bias=1.0):
    Xh = np.c_[X, np.full(X.shape[0], bias)]
    c = odm_coefficients(s, lam, theta)

    def f(v):
        return odm_primal_objective(v @ v, y * (Xh @ v), s, lam, mu, theta)

    def g(v):
        return v + Xh.T @ (y * c * odm_band_loss_grad(y * (Xh @ v), mu, theta))

    return f, g, Xh


def _lbfgs(X, y, s, lam, mu, theta):
    f, g, Xh = _primal(X, y, s, lam, mu, theta)
    res = so.minimize(f, np.zeros(Xh.shape[1]), jac=g, method="L-BFGS-B",
                      options=dict(ftol=1e-15, gtol=1e-12, maxiter=20000, maxcor=30))
    return res.x, res.fun, f


#: many small fits: one BLAS thread (see conftest.single_blas_thread)
pytestmark = pytest.mark.usefixtures("single_blas_thread")


def test_band_loss_derivatives_by_finite_differences(rng):
    z = rng.uniform(-1, 3, size=200)
    z = z[np.abs(np.abs(z - 1) - 0.3) > 1e-3]  # away from the kinks of the second derivative
    h = 1e-6
    for mu in (0.0, 0.5, 1.0):
        fd = (odm_band_loss(z + h, mu, 0.3) - odm_band_loss(z - h, mu, 0.3)) / (2 * h)
        np.testing.assert_allclose(odm_band_loss_grad(z, mu, 0.3), fd, atol=1e-6)
        fd2 = (odm_band_loss_grad(z + h, mu, 0.3) - odm_band_loss_grad(z - h, mu, 0.3)) / (2 * h)
        np.testing.assert_allclose(odm_band_loss_hess(z, mu, 0.3), fd2, atol=1e-5)
    assert np.all(odm_band_loss(np.linspace(0.71, 1.29, 7), 0.8, 0.3) == 0)


def test_libodm_convention():
    """LIBODM: primal coefficient lambda / (m (1 - theta)^2); dual diagonal m (1 - theta)^2 / (2 lambda)."""
    m, lam, mu, theta = 50, 3.0, 0.5, 0.3
    c = odm_coefficients(np.ones(m), lam, theta)
    np.testing.assert_allclose(c, lam / (m * (1 - theta) ** 2))
    n_var, D, p, U = odm_dual_terms(np.ones(m), lam, mu, theta)
    np.testing.assert_allclose(D[:m], 0.5 * m * (1 - theta) ** 2 / lam)
    np.testing.assert_allclose(D[m:], 0.5 * m * (1 - theta) ** 2 / lam / mu)
    np.testing.assert_allclose(p, np.r_[np.full(m, theta - 1), np.full(m, theta + 1)])
    assert n_var == 2 * m and np.all(np.isinf(U))


@pytest.mark.parametrize("lam,mu,theta", PARAMS)
def test_dcd_matches_lbfgs_and_duality_gap(rng, lam, mu, theta):
    X, y = _data(rng)
    s = np.ones(X.shape[0])
    v_ref, f_ref, f = _lbfgs(X, y, s, lam, mu, theta)
    w, b, a, _ = odm_dcd_linear(X, y, s, lam, mu, theta, tol=1e-10, random_state=0)
    v = np.r_[w, b]
    assert f(v) == pytest.approx(f_ref, rel=1e-6)
    np.testing.assert_allclose(v, v_ref, atol=1e-5)
    dual = odm_dual_objective(v @ v, a, s, lam, mu, theta)
    assert f(v) + dual == pytest.approx(0.0, abs=1e-9 * max(1.0, abs(f(v))))
    if mu == 0:
        assert a.shape[0] == X.shape[0]


@pytest.mark.parametrize("lam,mu,theta", PARAMS[:3])
def test_newton_svrg_dcd_agree(rng, lam, mu, theta):
    X, y = _data(rng, m=120, d=6)
    s = rng.uniform(0.5, 2.0, size=X.shape[0])
    w1, b1, _, _ = odm_dcd_linear(X, y, s, lam, mu, theta, tol=1e-10, random_state=0)
    w2, b2, _ = odm_newton(X, y, s, lam, mu, theta, tol=1e-12)
    w3, b3, _ = odm_svrg(X, y, s, lam, mu, theta, tol=1e-10, max_iter=5000, random_state=0)
    np.testing.assert_allclose(np.r_[w2, b2], np.r_[w1, b1], atol=1e-7)
    np.testing.assert_allclose(np.r_[w3, b3], np.r_[w1, b1], atol=1e-7)


def test_svrg_divergence_raises(rng):
    X, y = _data(rng, scale=10.0)
    with pytest.raises(FloatingPointError, match="diverged"):
        odm_svrg(X, y, np.ones(X.shape[0]), 100.0, 0.8, 0.2, step=10.0, max_iter=50, random_state=0)


def test_kernel_dual_matches_primal_and_qp(rng):
    X, y = _data(rng, m=50)
    s = np.ones(50)
    lam, mu, theta = 4.0, 0.6, 0.3
    gamma = 0.5
    K = np.exp(-gamma * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    coef, b, a, _, u = odm_dcd_kernel(None, y, s, lam, mu, theta, gram=K, tol=1e-11, random_state=0)
    gam = y * coef
    Q = (y[:, None] * (K + 1.0)) * y[None, :]
    # primal value of the kernel expansion (||w||^2 = gamma^T Q gamma, margins z = Q gamma)
    z = Q @ gam
    np.testing.assert_allclose(u, z, atol=1e-10)
    primal = odm_primal_objective(gam @ Q @ gam, z, s, lam, mu, theta)
    dual = odm_dual_objective(gam @ Q @ gam, a, s, lam, mu, theta)
    assert primal + dual == pytest.approx(0.0, abs=1e-9)
    # the decision function equals the kernel expansion plus b
    np.testing.assert_allclose(y * (K @ coef + b), z, atol=1e-10)
    # the dual QP by L-BFGS-B
    _, D, p, _ = odm_dual_terms(s, lam, mu, theta)

    def f(v):
        g = v[:50] - v[50:]
        return 0.5 * g @ Q @ g + 0.5 * (D * v) @ v + p @ v

    def grad(v):
        Qg = Q @ (v[:50] - v[50:])
        return D * v + p + np.r_[Qg, -Qg]

    ref = so.minimize(f, np.zeros(100), jac=grad, bounds=[(0, None)] * 100, method="L-BFGS-B",
                      options=dict(ftol=1e-15, gtol=1e-12, maxiter=20000))
    assert f(a) == pytest.approx(ref.fun, rel=1e-6)


def _rbf_gram(X, gamma):
    return np.exp(-gamma * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))


@pytest.mark.parametrize("lam,mu,theta", PARAMS)
def test_kernel_newton_is_the_dcd_optimum(rng, lam, mu, theta):
    """The active-set Newton method ends on the optimality condition gamma = -c loss'(z), with
    the tight-tolerance DCD's solution and strong duality (primal = -dual)."""
    X, y = _data(rng, m=60)
    s = rng.uniform(0.5, 2.0, size=60)
    K = _rbf_gram(X, 0.3)
    gam, n_it = odm_kernel_newton(K, y, s, lam, mu, theta)
    assert n_it < 30
    Q = (y[:, None] * (K + 1.0)) * y[None, :]
    z = Q @ gam
    c = odm_coefficients(s, lam, theta)
    np.testing.assert_allclose(gam, -c * odm_band_loss_grad(z, mu, theta), atol=1e-12)
    coef, _, _, _, _ = odm_dcd_kernel(None, y, s, lam, mu, theta, gram=K, tol=1e-11, newton=False,
                                      max_iter=100000, random_state=0)
    np.testing.assert_allclose(Q @ gam, Q @ (y * coef), atol=1e-7)
    a_newton = np.r_[np.maximum(gam, 0), np.maximum(-gam, 0)] if mu > 0 else np.maximum(gam, 0)
    primal = odm_primal_objective(gam @ Q @ gam, z, s, lam, mu, theta)
    assert primal + odm_dual_objective(gam @ Q @ gam, a_newton, s, lam, mu, theta) == pytest.approx(0.0, abs=1e-10)


def test_kernel_newton_from_a_start_and_on_the_linear_kernel(rng):
    """From any starting point (the DCD hands over its own), and K = X X^T gives the linear
    Newton-CG solution w = Xh^T Y gamma."""
    X, y = _data(rng, m=70, d=5)
    s = np.ones(70)
    lam, mu, theta = 50.0, 0.8, 0.2
    ref, _ = odm_kernel_newton(X @ X.T, y, s, lam, mu, theta)
    start, _ = odm_kernel_newton(X @ X.T, y, s, lam, mu, theta, gamma0=rng.normal(size=70))
    Q = (y[:, None] * (X @ X.T + 1.0)) * y[None, :]
    np.testing.assert_allclose(Q @ start, Q @ ref, atol=1e-9)
    w, b, _ = odm_newton(X, y, s, lam, mu, theta, tol=1e-12, max_iter=1000)
    np.testing.assert_allclose(np.r_[w, b], np.c_[X, np.ones(70)].T @ (y * ref), atol=1e-7)


def test_kernel_newton_stops_on_an_indefinite_kernel(rng):
    """A precomputed matrix that is not a kernel makes the Newton system indefinite: the method
    stops where it is (no LinAlgError) and leaves the problem to the DCD."""
    X, y = _data(rng, m=30)
    A = rng.normal(size=(30, 30))
    K = A + A.T
    gam, n_it = odm_kernel_newton(K, y, np.ones(30), 100.0, 0.8, 0.2, gamma0=np.full(30, 0.1))
    assert n_it == 1 and np.all(gam == 0.1)


def test_kernel_dcd_hands_over_to_newton_where_it_creeps():
    """Large lam with a wide RBF kernel: plain DCD runs thousands of epochs; with the Newton
    phase the DCD stops after its hand-over budget plus a certifying epoch or two, at the same
    model."""
    X, y = _scaled("heart")
    y = np.where(y == y[0], 1.0, -1.0)
    s = np.ones(len(y))
    K = _rbf_gram(X, 1e-3)
    kw = dict(gram=K, tol=1e-6, max_iter=100000, random_state=0)
    plain = odm_dcd_kernel(None, y, s, 1000.0, 0.8, 0.8, newton=False, **kw)
    fast = odm_dcd_kernel(None, y, s, 1000.0, 0.8, 0.8, **kw)
    assert plain.n_iter > 1000 and fast.n_iter <= 25 and fast.converged
    Q = (y[:, None] * (K + 1.0)) * y[None, :]
    dual = [odm_dual_objective(r.dual_coef @ K @ r.dual_coef + r.dual_coef.sum() ** 2, r.a, s, 1000.0, 0.8, 0.8)
            for r in (plain, fast)]
    assert dual[1] <= dual[0] + 1e-9 * abs(dual[0])
    np.testing.assert_allclose(Q @ (y * fast.dual_coef), Q @ (y * plain.dual_coef), atol=1e-3)


def test_the_newton_budget_grows_with_the_examples():
    """The DCD's epochs before the Newton phase: twenty up to a thousand examples, then twenty
    per thousand (a Newton iteration costs about m epochs' worth of work)."""
    assert [newton_after(m) for m in (10, 1000, 1500, 4900)] == [20, 20, 30, 98]


def test_polynomial_kernel_on_unit_scaled_rows_hands_over_above_a_thousand_examples():
    """[0, 1]-scaled rows under the cubic polynomial kernel (every kernel value shares a large
    common part): the plain DCD creeps (300 epochs leave it short of the tolerance); on more
    than a thousand examples the Newton phase takes over after its budget and ends at a better
    dual objective, with the decision values of a cold active-set Newton solve."""
    X, y = make_classification(n_samples=1200, n_features=8, n_informative=4, flip_y=0.02, random_state=1)
    X = MinMaxScaler().fit_transform(X)
    y = np.where(y == 1, 1.0, -1.0)
    s = np.ones(len(y))
    K = (X @ X.T / (X.shape[1] * X.var())) ** 3  # the estimator's kernel="poly", gamma="scale"
    lam = 1200 * 0.8**2  # its lam="auto"
    kw = dict(gram=K, tol=1e-3, random_state=0)
    with pytest.warns(ConvergenceWarning, match="did not reach tol"):
        plain = odm_dcd_kernel(None, y, s, lam, max_iter=300, newton=False, **kw)
    fast = odm_dcd_kernel(None, y, s, lam, max_iter=1000, **kw)
    assert fast.converged and fast.newton
    assert fast.n_iter <= newton_after(1200) + 5
    Q = (y[:, None] * (K + 1.0)) * y[None, :]
    dual = [odm_dual_objective(r.dual_coef @ K @ r.dual_coef + r.dual_coef.sum() ** 2, r.a, s, lam, 0.8, 0.2)
            for r in (plain, fast)]
    assert dual[1] < dual[0]
    gam, n_it = odm_kernel_newton(K, y, s, lam, max_iter=200)
    assert n_it < 200
    np.testing.assert_allclose(Q @ (y * fast.dual_coef), Q @ gam, atol=1e-2 * np.abs(Q @ gam).max())


def test_a_warm_path_that_needed_newton_hands_over_soon():
    """Along growing lam with warm starts (a grid search's path), a fit warm-started from one
    that needed the Newton phase hands over to it after two DCD epochs instead of twenty and
    ends at the cold fit's model; a smaller lam (an easier problem) runs the usual DCD first."""
    X, y = _scaled("heart")
    kw = dict(kernel="rbf", gamma=1e-3, mu=0.8, theta=0.8, tol=1e-6, random_state=0)
    est = ODM(lam=300.0, warm_start=True, **kw).fit(X, y)
    assert est.n_iter_ > 20  # twenty epochs, the Newton phase, a certifying epoch or two
    est.set_params(lam=1000.0).fit(X, y)
    assert est.n_iter_ <= 5
    cold = ODM(lam=1000.0, **kw).fit(X, y)
    assert cold.n_iter_ > 20
    np.testing.assert_allclose(est.decision_function(X), cold.decision_function(X), atol=1e-8)
    est.set_params(lam=10.0).fit(X, y)
    assert est.n_iter_ > 5
    with pytest.raises(ValueError, match="newton must be"):
        odm_dcd_kernel(None, np.ones(3), np.ones(3), gram=np.eye(3), newton="later")


def test_squared_hinge_special_case_is_linearsvc():
    """theta = 0, mu = 0: kappa/m (1 - z)_+^2 is LIBLINEAR's squared hinge with C = lam / m."""
    X, y = load_dataset("australian")
    X = MinMaxScaler().fit_transform(X)
    m = X.shape[0]
    ref = LinearSVC(loss="squared_hinge", C=2.0 / m, tol=1e-10, max_iter=100000).fit(X, y)
    est = ODM(lam=2.0, mu=0.0, theta=0.0, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-7)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, atol=1e-7)


def _scaled(name):
    X, y = load_dataset(name)
    return MinMaxScaler().fit_transform(X), y


def test_linear_path_equals_kernel_path():
    X, y = _scaled("heart")
    lin = ODM(lam=3.0, tol=1e-10).fit(X, y)
    pre = ODM(lam=3.0, kernel="precomputed", tol=1e-10).fit(X @ X.T, y)
    np.testing.assert_allclose(pre.decision_function(X @ X.T), lin.decision_function(X), atol=1e-7)
    call = ODM(lam=3.0, kernel=lambda A, B: A @ B.T, tol=1e-10, cache_size=1).fit(X[:100], y[:100])
    lin100 = ODM(lam=3.0, tol=1e-10).fit(X[:100], y[:100])
    np.testing.assert_allclose(call.decision_function(X), lin100.decision_function(X), atol=1e-7)


def test_estimator_solvers_agree_and_match_primal():
    X, y = _scaled("wdbc")
    kw = dict(lam=20.0, mu=0.5, theta=0.3, tol=1e-10, max_iter=10000, random_state=0)
    coefs = [ODM(solver=s, **kw).fit(X, y) for s in ("dcd", "newton", "svrg")]
    for est in coefs[1:]:
        np.testing.assert_allclose(est.coef_, coefs[0].coef_, atol=1e-6)
        np.testing.assert_allclose(est.intercept_, coefs[0].intercept_, atol=1e-6)
    yy = np.where(y == coefs[0].classes_[1], 1.0, -1.0)
    _, f_ref, f = _lbfgs(X, yy, np.ones(len(y)), 20.0, 0.5, 0.3)
    v = np.r_[coefs[0].coef_[0], coefs[0].intercept_]
    assert f(v) == pytest.approx(f_ref, rel=1e-6)


def test_warm_start_refit_takes_one_epoch():
    X, y = _scaled("australian")
    est = ODM(lam=10.0, solver="dcd", tol=1e-6, warm_start=True, random_state=0).fit(X, y)
    assert est.n_iter_ > 1
    est.fit(X, y)
    assert est.n_iter_ == 1
    newton = ODM(lam=10.0, solver="newton", tol=1e-8, warm_start=True).fit(X, y)
    newton.fit(X, y)
    assert newton.n_iter_ == 0
    rbf = ODM(lam=10.0, kernel="rbf", tol=1e-6, warm_start=True, random_state=0).fit(X, y)
    rbf.fit(X, y)
    assert rbf.n_iter_ == 1
    # a path in lam: warm starts converge to the cold solution
    cold = ODM(lam=30.0, solver="dcd", tol=1e-9).fit(X, y)
    est.set_params(lam=30.0, tol=1e-9).fit(X, y)
    np.testing.assert_allclose(est.coef_, cold.coef_, atol=1e-6)


def test_class_weight_equals_sample_weight():
    X, y = _scaled("haberman")
    classes = np.unique(y)
    cw = {classes[0]: 1.0, classes[1]: 3.0}
    a = ODM(lam=5.0, class_weight=cw, tol=1e-10).fit(X, y)
    b = ODM(lam=5.0, tol=1e-10).fit(X, y, sample_weight=np.where(y == classes[1], 3.0, 1.0))
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-9)
    base = ODM(lam=5.0, tol=1e-10).fit(X, y)
    assert np.mean(a.predict(X) == classes[1]) > np.mean(base.predict(X) == classes[1])


@pytest.mark.parametrize("multi_class", ["ovr", "ovo"])
def test_multiclass(multi_class):
    X, y = _scaled("iris")
    est = ODM(lam=50.0, multi_class=multi_class, random_state=0).fit(X, y)
    n_problems = 3
    assert est.coef_.shape == (n_problems, 4) and est.n_iter_.shape == (n_problems,)
    assert est.score(X, y) > 0.85
    rbf = ODM(lam=50.0, kernel="rbf", multi_class=multi_class, random_state=0).fit(X, y)
    assert rbf.score(X, y) > 0.9


@pytest.mark.slow  # n_jobs=2 starts worker processes (over 10 s on two busy cores)
@pytest.mark.parametrize("multi_class", ["ovr", "ovo"])
def test_multiclass_n_jobs_gives_the_same_model(multi_class):
    X, y = _scaled("iris")
    rbf = ODM(lam=50.0, kernel="rbf", multi_class=multi_class, random_state=0).fit(X, y)
    par = ODM(lam=50.0, kernel="rbf", multi_class=multi_class, random_state=0, n_jobs=2).fit(X, y)
    np.testing.assert_allclose(par.decision_function(X), rbf.decision_function(X), atol=1e-12)


def test_kernel_cache_budget_gives_same_model():
    X, y = _scaled("sonar")
    big = ODM(kernel="rbf", lam=20.0, tol=1e-10, random_state=0).fit(X, y)
    tiny = ODM(kernel="rbf", lam=20.0, tol=1e-10, random_state=0, cache_size=0.01).fit(X, y)
    np.testing.assert_allclose(tiny.decision_function(X), big.decision_function(X), atol=1e-8)


def test_block_sweeps_of_a_full_cache_give_the_plain_epochs_model(monkeypatch):
    """1200 rows, every kernel row cached: the DCD runs block sweeps of 320 rows (fewer sweeps
    than the plain epochs on this dense dual); the model is the plain epochs' and the kernel
    Newton solve's to the solver's tolerance."""
    from margindist.solvers import odm as odm_solvers

    rng = np.random.default_rng(0)
    X, y = _data(rng, m=1200, d=5)
    kw = dict(kernel="rbf", gamma=0.3, tol=1e-9, random_state=0)
    blocks = ODM(**kw).fit(X, y)
    monkeypatch.setattr(odm_solvers, "_KERNEL_BLOCK", None)
    plain = ODM(**kw).fit(X, y)
    assert blocks.n_iter_ < plain.n_iter_
    np.testing.assert_allclose(blocks.decision_function(X), plain.decision_function(X), atol=1e-6)
    m = X.shape[0]
    gam, _ = odm_kernel_newton(_rbf_gram(X, 0.3), y, np.ones(m), m * 0.64, 0.8, 0.2)
    np.testing.assert_allclose(blocks.dual_coef_.ravel()[np.argsort(blocks.support_)],
                               (y * gam)[np.sort(blocks.support_)], atol=1e-6)


@pytest.mark.parametrize("case", ["weights", "float64_rows", "precomputed", "callable", "small_cache", "sparse",
                                  "ovo", "warm_start"])
def test_pulled_sweeps_give_the_plain_epochs_model_on_every_input(monkeypatch, case):
    """The sweeps of pulled blocks (more than 640 rows) against the plain epochs, to a tight
    tolerance: sample and class weights, float64 rows (tol < 1e-5), a precomputed and a
    callable kernel, a cache of 50 rows, CSR rows, three classes (one-vs-one problems of 900
    rows) and a warm-started refit (without the Newton hand-over of problems of at most 1000
    rows, so that the sweeps run to the tolerance)."""
    import scipy.sparse as sp
    from sklearn.metrics.pairwise import rbf_kernel

    from margindist.solvers import odm as odm_solvers

    rng = np.random.default_rng(1)
    m = 1350 if case == "ovo" else 900
    X, y = _data(rng, m=m, d=5)
    if case == "ovo":
        y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=m), [-0.4, 0.4]).astype(float)
    kw = dict(kernel="rbf", gamma=0.3, tol=1e-8, random_state=0)
    fit = {}
    Xf = X
    if case == "weights":
        kw["class_weight"] = {-1.0: 2.0, 1.0: 0.5}
        fit["sample_weight"] = rng.uniform(0.2, 3.0, size=m)
    elif case == "float64_rows":
        kw["tol"] = 1e-9
    elif case == "precomputed":
        kw["kernel"], Xf = "precomputed", rbf_kernel(X, gamma=0.3)
    elif case == "callable":
        kw["kernel"] = lambda A, B: rbf_kernel(A, B, gamma=0.3)
    elif case == "small_cache":
        kw["cache_size"] = 50 * 8 * m / 2**20
    elif case == "sparse":
        Xf = sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))

    def model():
        est = ODM(**kw)
        if case == "warm_start":
            est.set_params(warm_start=True).fit(Xf, y)
            est.set_params(lam=est.lam_ * 1.5 if hasattr(est, "lam_") else 1000.0)
        return est.fit(Xf, y, **fit)

    monkeypatch.setattr(odm_solvers, "_KERNEL_NEWTON_MAX", 0)  # the DCD alone, to the tolerance
    pulled = model()
    monkeypatch.setattr(odm_solvers, "_KERNEL_BLOCK", None)
    plain = model()
    assert np.all(np.atleast_1d(pulled.n_iter_) < np.atleast_1d(plain.n_iter_)), (pulled.n_iter_, plain.n_iter_)
    np.testing.assert_allclose(pulled.decision_function(Xf), plain.decision_function(Xf), atol=1e-5)


def test_no_intercept_and_parameter_errors():
    X, y = _scaled("heart")
    est = ODM(fit_intercept=False).fit(X, y)
    assert np.all(est.intercept_ == 0)
    with pytest.raises(ValueError, match="linear primal"):
        ODM(kernel="rbf", solver="newton").fit(X, y)
    with pytest.raises(ValueError, match="mu"):
        ODM(mu=1.5).fit(X, y)
    with pytest.raises(ValueError, match="theta"):
        ODM(theta=1.0).fit(X, y)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        ODM(max_iter=1, tol=1e-12).fit(X, y)


def test_clone_and_accuracy_sanity():
    X, y = _scaled("australian")
    est = clone(ODM(lam=100.0)).fit(X[::2], y[::2])
    assert est.score(X[1::2], y[1::2]) > 0.8


def test_float32_kernel_rows_match_float64():
    """Default tol: kernel rows in float32; the model equals the float64 one to the rounding."""
    X, y = _scaled("ionosphere")
    kw = dict(kernel="rbf", lam=30.0, random_state=0)
    f32 = ODM(tol=1e-4, **kw).fit(X, y)
    f64 = ODM(tol=1e-6, **kw).fit(X, y)  # below 1e-5: float64 rows
    exact = ODM(tol=1e-10, **kw).fit(X, y)
    scale = np.abs(exact.decision_function(X)).max()
    np.testing.assert_allclose(f64.decision_function(X), exact.decision_function(X), atol=1e-5 * scale)
    np.testing.assert_allclose(f32.decision_function(X), exact.decision_function(X), atol=1e-3 * scale)
    # the LRU path (rows on demand) and the filled matrix agree
    small = ODM(tol=1e-4, cache_size=0.05, **kw).fit(X, y)
    np.testing.assert_allclose(small.decision_function(X), f32.decision_function(X), atol=1e-3 * scale)


def test_weight_norm_from_the_solver_equals_the_kernel_norm():
    X, y = _scaled("heart")
    for kw in (dict(kernel="rbf", gamma=0.3), dict(kernel="poly", degree=2)):
        est = ODM(lam=10.0, tol=1e-8, **kw).fit(X, y)
        spec = est._kernel_fit_
        K = spec(est.support_vectors_)
        c = est.dual_coef_[0]
        assert est.weight_norm_[0] == pytest.approx(np.sqrt(c @ K @ c), rel=1e-9)
    ovr = ODM(lam=10.0, kernel="rbf").fit(*_scaled("iris"))  # float32 rows: to their rounding
    K = ovr._kernel_fit_(ovr.support_vectors_)
    np.testing.assert_allclose(ovr.weight_norm_, np.sqrt(np.einsum("pi,ij,pj->p", ovr.dual_coef_, K, ovr.dual_coef_)),
                               rtol=1e-5)
