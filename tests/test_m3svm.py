"""M3SVM / ISM3 (Nie, Hao, Wang 2024): objective, gradient, solvers, estimator behaviour."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from _data import topic_text
from _numdiff import central_diff
from scipy.optimize import minimize
from sklearn.datasets import load_iris, make_blobs, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC
from sklearn.utils._param_validation import InvalidParameterError

import margindist.models.m3svm as m3svm_module
from margindist.datasets import load_dataset
from margindist.losses import smooth_hinge, smooth_hinge_derivative
from margindist.models.m3svm import M3SVM
from margindist.solvers.m3svm import (
    m3svm_adam,
    m3svm_lbfgs,
    m3svm_objective,
    pairwise_penalty,
    row_space,
    row_space_pays,
)
from margindist.solvers.m3svm_newton import (
    _BinaryProblem,
    _MultiProblem,
    m3svm_lbfgs_scores,
    m3svm_newton_binary,
    m3svm_newton_multiclass,
    pcg,
)


@pytest.fixture(autouse=True, scope="module")
def _single_torch_thread():
    """The estimator's Adam runs through torch when it is installed; torch's thread pool costs
    more than it saves on these tiny problems (and a lot on a busy machine)."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            yield
            return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def naive_penalty(W, p):
    """sum_{k<l} ||w_k - w_l||^p from explicit differences, and p ||v||^(p-2) v per pair."""
    K = W.shape[0]
    R, G = 0.0, np.zeros_like(W)
    for k in range(K):
        for l in range(k + 1, K):
            v = W[k] - W[l]
            nv = np.linalg.norm(v)
            R += nv**p
            if nv > 0:
                G[k] += p * nv ** (p - 2) * v
                G[l] -= p * nv ** (p - 2) * v
    return R, G


# ----------------------------------------------------------------------------- losses
def test_smooth_hinge_bounds_and_derivative():
    t = np.linspace(-50, 50, 2001)
    for delta in (0.01, 0.1, 1.0):
        gap = smooth_hinge(t, delta) - np.maximum(0, t)
        assert np.all(gap >= 0) and np.all(gap <= delta / 2 + 1e-15)
        assert np.isclose(gap[1000], delta / 2)
        fd = (smooth_hinge(t + 1e-6, delta) - smooth_hinge(t - 1e-6, delta)) / 2e-6
        np.testing.assert_allclose(smooth_hinge_derivative(t, delta), fd, atol=1e-6)
    # no cancellation far on the negative side: g(t) ~ delta^2 / (4 |t|)
    assert np.isclose(smooth_hinge(-1e8, 0.1), 0.01 / 4e8, rtol=1e-10)


# ----------------------------------------------------------------------------- regulariser
@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
def test_pairwise_penalty_matches_explicit_differences(p):
    rng = np.random.default_rng(1)
    W = rng.normal(size=(6, 5)) * 3
    W[3] = W[1]  # zero distance
    W[4] = W[2] + 1e-10 * rng.normal(size=5)  # distance lost to cancellation in the Gram form
    R, G = pairwise_penalty(W, p)
    R0, G0 = naive_penalty(W, p)
    assert np.isclose(R, R0, rtol=1e-12)
    np.testing.assert_allclose(G, G0, rtol=1e-7, atol=1e-12 * np.abs(G0).max())


def test_pairwise_penalty_p2_is_laplacian_form():
    # Theorem 5 of the paper: sum_{k<l} ||w_k - w_l||^2 = K ||W||^2 - ||W^T 1||^2
    W = np.random.default_rng(2).normal(size=(5, 7))
    R, _ = pairwise_penalty(W, 2)
    assert np.isclose(R, 5 * np.sum(W**2) - np.sum(W.sum(0) ** 2))


def test_pairwise_penalty_at_zero_weights():
    R, G = pairwise_penalty(np.zeros((4, 3)), 1.0)
    assert R == 0 and np.all(G == 0)


# ----------------------------------------------------------------------------- gradient
@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 4.0])
@pytest.mark.parametrize("sparse", [False, True])
def test_gradient_matches_finite_differences(loss, p, sparse):
    rng = np.random.default_rng(3)
    n, d, K = 40, 6, 4
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.6)
    y = rng.integers(0, K, n)
    sw = rng.uniform(0.2, 3.0, n)
    Xf = sp.csr_matrix(X) if sparse else X
    theta = rng.normal(size=K * d + K)
    theta[d:2 * d] = theta[:d]  # w_0 == w_1: zero pairwise distance
    kw = dict(lam=0.7, p=p, delta=0.3, eps=1e-3, loss=loss, fit_intercept=True)
    f, g = m3svm_objective(theta, Xf, y, sw, K, **kw)
    fd = central_diff(lambda t: m3svm_objective(t, Xf, y, sw, K, **kw)[0], theta)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
    # an independent value: the objective written out per sample
    W, b = theta[:K * d].reshape(K, d), theta[K * d:]
    val = 0.0
    for i in range(n):
        s = W @ X[i] + b
        if loss == "softmax":
            val += sw[i] * (np.log(np.sum(np.exp(s))) - s[y[i]])
        else:
            for k in range(K):
                if k != y[i]:
                    t = 1 - (s[y[i]] - s[k])
                    val += sw[i] * (t + np.sqrt(t * t + 0.09)) / 2
    val += 0.7 * naive_penalty(W, p)[0] + 1e-3 * (np.sum(W**2) + np.sum(b**2))
    assert np.isclose(f, val, rtol=1e-12)


def test_gradient_without_intercept():
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(30, 4)), rng.integers(0, 3, 30)
    theta = rng.normal(size=12)
    kw = dict(lam=0.2, p=3.0, delta=0.1, eps=1e-6, loss="smooth_hinge", fit_intercept=False)
    f, g = m3svm_objective(theta, X, y, np.ones(30), 3, **kw)
    fd = central_diff(lambda t: m3svm_objective(t, X, y, np.ones(30), 3, **kw)[0], theta)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- solvers
@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
def test_lbfgs_and_adam_reach_the_same_objective(iris, loss):
    X, y = iris
    sw = np.random.default_rng(5).uniform(0.5, 2.0, y.size)
    kw = dict(lam=0.1, p=4.0, delta=0.1, eps=1e-6, loss=loss, fit_intercept=True)
    _, _, _, f_lbfgs, ok1 = m3svm_lbfgs(X, y, sw, 3, tol=1e-9, **kw)
    _, _, _, f_adam, ok2 = m3svm_adam(X, y, sw, 3, learning_rate=0.1, max_iter=3000, tol=1e-6, **kw)
    assert ok1 and ok2
    assert abs(f_adam - f_lbfgs) <= 1e-4 * abs(f_lbfgs)
    # and through the estimator (torch back end when installed, NumPy otherwise)
    est = M3SVM(loss=loss, lam=0.1, solver="adam", learning_rate=0.1, max_iter=3000, tol=1e-6)
    est.fit(X, y, sample_weight=sw)
    assert abs(est.objective_ - f_lbfgs) <= 1e-4 * abs(f_lbfgs)


def test_minibatch_adam_gets_close(iris):
    X, y = iris
    kw = dict(lam=0.1, p=4.0, delta=0.1, eps=1e-6, loss="softmax", fit_intercept=True)
    f_star = m3svm_lbfgs(X, y, np.ones(y.size), 3, tol=1e-9, **kw)[3]
    _, _, _, f1, _ = m3svm_adam(X, y, np.ones(y.size), 3, learning_rate=0.02, max_iter=400,
                                batch_size=32, random_state=0, **kw)
    _, _, _, f2, _ = m3svm_adam(X, y, np.ones(y.size), 3, learning_rate=0.02, max_iter=400,
                                batch_size=32, random_state=0, **kw)
    assert f1 == f2  # random_state makes the shuffling reproducible
    assert (f1 - f_star) <= 2e-3 * f_star


def _weston_watkins_solve(X, y, sw, K, lam_ridge, eps, delta):
    """Independent l2-regularised Weston–Watkins solve with the smoothed hinge:
    sum_i s_i sum_{k != y_i} g(1 - (w_yi - w_k) x_i - b_yi + b_k) + lam_ridge ||W||^2 + eps ||b||^2."""
    n, d = X.shape

    def fg(theta):
        W = theta[:K * d].reshape(K, d)
        b = theta[K * d:]
        f = lam_ridge * np.sum(W * W) + eps * np.sum(b * b)
        gW, gb = 2 * lam_ridge * W, 2 * eps * b
        for k in range(K):
            others = y != k
            t = 1 - (np.sum(W[y[others]] * X[others], axis=1) + b[y[others]]
                     - X[others] @ W[k] - b[k])
            r = np.sqrt(t * t + delta * delta)
            f += np.sum(sw[others] * (t + r) / 2)
            dt = sw[others] * (1 + t / r) / 2
            # d t / d w_k = +x, d t / d w_{y_i} = -x
            gW[k] += dt @ X[others]
            gb[k] += dt.sum()
            np.add.at(gW, y[others], -dt[:, None] * X[others])
            np.add.at(gb, y[others], -dt)
        return f, np.concatenate([gW.ravel(), gb])

    res = minimize(fg, np.zeros(K * d + K), jac=True, method="BFGS", options=dict(gtol=1e-10, maxiter=10000))
    return res.x[:K * d].reshape(K, d), res.x[K * d:], res.fun


def test_p2_matches_weston_watkins(iris):
    X, y = iris
    sw = np.random.default_rng(6).uniform(0.5, 2.0, y.size)
    lam, eps, delta = 0.3, 1e-6, 0.2
    W, b, f = _weston_watkins_solve(X, y, sw, 3, 3 * lam + eps, eps, delta)
    est = M3SVM(lam=lam, p=2, eps=eps, delta=delta, tol=1e-10).fit(X, y, sample_weight=sw)
    assert np.isclose(est.objective_, f, rtol=1e-8)
    np.testing.assert_allclose(est.coef_, W, atol=1e-5 * np.abs(W).max())
    np.testing.assert_allclose(est.intercept_, b, atol=1e-4 * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
def test_separable_data_tiny_lam_zero_training_error(loss):
    X, y = make_blobs(n_samples=200, centers=4, cluster_std=0.5, random_state=0)
    est = M3SVM(lam=1e-6, loss=loss).fit(X, y)
    assert est.score(X, y) == 1.0
    assert np.all(est.margins(X, y) > 0)


def test_common_mode_is_zero_at_the_optimum_and_invariance(iris):
    X, y = iris
    est = M3SVM(lam=0.1, tol=1e-9).fit(X, y)
    # the eps ridge pins the common mode: W^T 1 = 0, b^T 1 = 0
    assert np.abs(est.coef_.sum(0)).max() < 1e-6 * np.abs(est.coef_).max()
    assert abs(est.intercept_.sum()) < 1e-6 * max(1, np.abs(est.intercept_).max())
    pred = est.predict(X)
    theta = np.concatenate([est.coef_.ravel(), est.intercept_])
    kw = dict(lam=0.1, p=4.0, delta=0.1, eps=0.0, loss="smooth_hinge", fit_intercept=True)
    f0 = m3svm_objective(theta, X, y, np.ones(y.size), 3, **kw)[0]
    shift = np.array([3.0, -1.0, 2.0, 0.5])
    est.coef_ = est.coef_ + shift
    est.intercept_ = est.intercept_ + 7.0
    np.testing.assert_array_equal(est.predict(X), pred)
    theta2 = np.concatenate([est.coef_.ravel(), est.intercept_])
    assert np.isclose(m3svm_objective(theta2, X, y, np.ones(y.size), 3, **kw)[0], f0, rtol=1e-10)


def test_csr_is_not_densified(monkeypatch):
    rng = np.random.default_rng(8)
    X = sp.random(60, 500, density=0.02, format="csr", random_state=8)
    y = rng.integers(0, 3, 60)

    def forbid(*a, **k):
        raise AssertionError("toarray called")

    monkeypatch.setattr(sp.csr_matrix, "toarray", forbid)
    monkeypatch.setattr(sp.csr_array, "toarray", forbid, raising=False)
    M3SVM(lam=0.1).fit(X, y).predict(X)


def test_class_weight_is_a_sample_weight(iris):
    X, y = iris
    a = M3SVM(lam=0.1, tol=1e-10, class_weight={0: 3.0, 1: 1.0, 2: 0.5}).fit(X, y)
    sw = np.array([3.0, 1.0, 0.5])[y]
    b = M3SVM(lam=0.1, tol=1e-10).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-8, atol=1e-10)


def test_warm_start_continues_from_the_solution(iris):
    X, y = iris
    est = M3SVM(lam=0.1, tol=1e-8, warm_start=True).fit(X, y)
    coef, it = est.coef_.copy(), est.n_iter_
    est.fit(X, y)
    assert est.n_iter_ < max(3, it // 5)
    np.testing.assert_allclose(est.coef_, coef, atol=1e-6 * np.abs(coef).max())
    with pytest.raises(ValueError, match="warm_start"):
        est.fit(X[:, :3], y)


def test_predict_proba_only_for_softmax(iris):
    X, y = iris
    assert not hasattr(M3SVM(loss="smooth_hinge").fit(X, y), "predict_proba")
    est = M3SVM(loss="softmax", lam=0.1).fit(X, y)
    P = est.predict_proba(X)
    np.testing.assert_allclose(P.sum(1), 1.0)
    np.testing.assert_array_equal(est.classes_[P.argmax(1)], est.predict(X))
    np.testing.assert_allclose(np.log(P), est.predict_log_proba(X), atol=1e-12)


def test_binary_problem(iris):
    X, y = iris
    yb = np.where(y == 2, "b", "a")
    est = M3SVM(lam=0.1, loss="softmax").fit(X, yb)
    assert est.coef_.shape == (2, 4)
    D = est.decision_function(X)
    assert D.shape == (150,)
    np.testing.assert_allclose(D, X @ (est.coef_[1] - est.coef_[0]) + est.intercept_[1] - est.intercept_[0])
    np.testing.assert_array_equal(est.predict(X), np.where(D > 0, "b", "a"))
    assert est.score(X, yb) > 0.9
    P = est.predict_proba(X)
    np.testing.assert_allclose(P[:, 1], 1 / (1 + np.exp(-D)))
    m = est.margins(X, yb)
    w = np.linalg.norm(est.coef_[1] - est.coef_[0])
    np.testing.assert_allclose(m, np.where(yb == "b", 1, -1) * D / w)


def test_convergence_warning_names_remedy(iris):
    X, y = iris
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        M3SVM(max_iter=2).fit(X, y)
    with pytest.warns(ConvergenceWarning, match="lr_schedule"):
        M3SVM(solver="adam", lr_schedule="constant", max_iter=5, tol=1e-12).fit(X, y)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_diverging_adam_raises(iris):
    X, y = iris
    kw = dict(lam=1.0, p=8.0, delta=0.1, eps=1e-6, loss="smooth_hinge", fit_intercept=True)
    with pytest.raises(FloatingPointError, match="learning_rate"):
        m3svm_adam(X * 1e3, y, np.ones(y.size), 3, learning_rate=1e80, max_iter=50, **kw)


@pytest.mark.parametrize("params", [dict(delta=0.0), dict(p=0), dict(lam=-1.0), dict(loss="hinge"),
                                    dict(solver="sgd"), dict(device="tpu"), dict(batch_size=0)])
def test_invalid_parameters(iris, params):
    X, y = iris
    with pytest.raises(InvalidParameterError):
        M3SVM(**params).fit(X, y)


def test_numpy_adam_without_torch(iris, monkeypatch):
    X, y = iris
    monkeypatch.setattr(m3svm_module, "_torch_available", lambda: False)
    est = M3SVM(solver="adam", lam=0.1, learning_rate=0.1, max_iter=3000, tol=1e-6).fit(X, y)
    ref = M3SVM(lam=0.1, tol=1e-9).fit(X, y)
    assert abs(est.objective_ - ref.objective_) <= 1e-4 * ref.objective_
    with pytest.raises(ValueError, match="PyTorch"):
        M3SVM(solver="adam", device="cuda").fit(X, y)


@pytest.mark.slow  # a fresh interpreter (subprocess)
def test_core_works_without_torch():
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(\"No module named 'torch'\")\n"
        "sys.meta_path.insert(0, Block())\n"
        "import numpy as np, margindist\n"
        "from margindist.models.m3svm import M3SVM\n"
        "X = np.random.default_rng(0).normal(size=(40, 3)); y = np.arange(40) % 3\n"
        "M3SVM().fit(X, y); M3SVM(solver='adam', max_iter=20).fit(X, y)\n"
        "assert 'torch' not in sys.modules\n"
        "try:\n    import margindist.torch\nexcept ImportError as e:\n    assert 'PyTorch' in str(e)\n"
        "else:\n    raise SystemExit('margindist.torch imported without torch')\n"
    )
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_vehicle_accuracy_close_to_crammer_singer():
    X, y = load_dataset("vehicle")
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    sc = StandardScaler().fit(Xtr)
    Xtr, Xte = sc.transform(Xtr), sc.transform(Xte)
    ours = M3SVM().fit(Xtr, ytr).score(Xte, yte)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        cs = LinearSVC(multi_class="crammer_singer").fit(Xtr, ytr).score(Xte, yte)
    assert ours >= cs - 0.03, (ours, cs)


# ----------------------------------------------------------------------------- Newton solvers
def _binary_data(n=120, d=6, seed=10):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.7)
    y = (X[:, 0] - X[:, 1] + 0.8 * rng.normal(size=n) > 0).astype(int)
    return X, y, rng.uniform(0.2, 3.0, n)


def _reduced_objective(v, X, y, sw, lam, p, delta, eps, loss, fit_intercept):
    """F2(u, c) of the Newton solver's docstring written out with NumPy (independent code)."""
    u, c = v[:X.shape[1]], (v[-1] if fit_intercept else 0.0)
    m = np.where(y == 1, 1.0, -1.0) * (X @ u + c)
    data = (np.logaddexp(0.0, -m) if loss == "softmax"
            else ((1 - m) + np.sqrt((1 - m) ** 2 + delta**2)) / 2)
    return sw @ data + lam * np.linalg.norm(u) ** p + eps / 2 * (u @ u + c * c)


@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 3.0, 4.0])
def test_binary_reduction_gradient_and_hessian(loss, p):
    X, y, sw = _binary_data()
    kw = {"lam": 0.3, "p": p, "delta": 0.2, "eps": 1e-3, "loss": loss, "fit_intercept": True}
    rng = np.random.default_rng(11)
    v = rng.normal(size=X.shape[1] + 1)
    for Xf in (X, sp.csr_matrix(X)):
        prob = _BinaryProblem(Xf, np.where(y == 1, 1.0, -1.0), sw, direct=False, **kw)
        f, g = prob.set_point(v.copy())
        # the reduced objective is F at W = [-u/2, u/2], b = [-c/2, c/2], and the independent F2
        u, c = v[:-1], v[-1]
        theta = np.concatenate([-u / 2, u / 2, [-c / 2, c / 2]])
        F = m3svm_objective(theta, X, y, sw, 2, **kw)[0]
        assert np.isclose(f * sw.sum(), F, rtol=1e-12)
        assert np.isclose(F, _reduced_objective(v, X, y, sw, **kw), rtol=1e-12)
        fd = central_diff(lambda t: _reduced_objective(t, X, y, sw, **kw), v) / sw.sum()
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
        # Hessian-vector products and the explicit Hessian against differences of the gradient
        w = rng.normal(size=v.size)
        h = 1e-6
        fd_hv = (prob.set_point(v + h * w)[1] - prob.set_point(v - h * w)[1]) / (2 * h)
        prob.set_point(v.copy())
        np.testing.assert_allclose(prob.hvp(w), fd_hv, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(prob._diagonal(), [prob.hvp(e)[j] for j, e in enumerate(np.eye(v.size))],
                                   rtol=1e-10)
        if not sp.issparse(Xf):
            np.testing.assert_allclose(prob._hessian() @ w, prob.hvp(w), rtol=1e-10, atol=1e-12)


def test_estimator_asks_for_continuation_where_the_regulariser_is_weak(monkeypatch):
    """M3SVM passes continuation=True to the two-class Newton solver at the default lam and up to
    CONTINUATION_MAX_LAM times its value, False above and for the softmax loss."""
    from margindist._defaults import m3svm_lam
    from margindist.solvers.m3svm_newton import CONTINUATION_MAX_LAM

    X, y, sw = _binary_data()
    X = sp.csr_matrix(X)
    seen = []
    real = m3svm_module.m3svm_newton_binary

    def spy(*args, continuation=False, **kw):
        seen.append(continuation)
        return real(*args, continuation=continuation, **kw)

    monkeypatch.setattr(m3svm_module, "m3svm_newton_binary", spy)
    auto = m3svm_lam("auto", X, np.ones(X.shape[0]), 4.0, 2, "smooth_hinge")
    for lam, loss, want in (("auto", "smooth_hinge", True), (0.9 * CONTINUATION_MAX_LAM * auto, "smooth_hinge", True),
                            (1.1 * CONTINUATION_MAX_LAM * auto, "smooth_hinge", False), ("auto", "softmax", False)):
        M3SVM(lam=lam, loss=loss, solver="newton").fit(X, y)
        assert seen.pop() is want, (lam, loss)


def test_smoothing_stages():
    from margindist.solvers.m3svm_newton import smoothing_stages

    assert smoothing_stages(0.1) == [1.0, 0.1]
    assert smoothing_stages(0.02) == [1.0, 0.1, 0.02]
    assert smoothing_stages(0.3) == [1.0, 0.3]
    assert smoothing_stages(0.5) == [0.5] and smoothing_stages(4.0) == [4.0]


@pytest.mark.parametrize("p", [1.5, 4.0])
def test_binary_newton_continuation_reaches_the_same_minimiser(p):
    """Through delta = 1 and 0.1 to delta = 0.02 (sparse rows, CG) and straight at 0.02: the same
    minimiser, checked against L-BFGS; the steps of every stage are counted."""
    X, y, sw = _binary_data()
    X = sp.csr_matrix(X)
    kw = {"lam": 0.05, "p": p, "delta": 0.02, "eps": 1e-6, "loss": "smooth_hinge", "fit_intercept": True}
    ref = m3svm_lbfgs(X, y, sw, 2, tol=1e-10, **kw)
    staged = m3svm_newton_binary(X, y, sw, tol=1e-10, continuation=True, **kw)
    plain = m3svm_newton_binary(X, y, sw, tol=1e-10, **kw)
    assert staged.converged and plain.converged
    for res in (staged, plain):
        assert abs(res.objective - ref.objective) <= 1e-10 * ref.objective
        np.testing.assert_allclose(res.coef, ref.coef, atol=1e-6 * np.abs(ref.coef).max())
    # three stages, each history with its start; p < 2 adds the steps that leave the origin
    assert staged.n_iter >= len(staged.history) - 3 and (p < 2 or staged.n_iter == len(staged.history) - 3)


@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 4.0])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_binary_newton_matches_lbfgs_and_an_independent_solve(loss, p, fit_intercept):
    X, y, sw = _binary_data()
    kw = {"lam": 0.3, "p": p, "delta": 0.2, "eps": 1e-6, "loss": loss, "fit_intercept": fit_intercept}
    ref = m3svm_lbfgs(X, y, sw, 2, tol=1e-10, **kw)
    ind = minimize(_reduced_objective, np.zeros(X.shape[1] + fit_intercept), args=(X, y, sw, *kw.values()),
                   method="BFGS", options={"gtol": 1e-9, "maxiter": 10000})
    assert np.isclose(ref.objective, ind.fun, rtol=1e-9)
    for Xf, direct in ((X, True), (X, False), (sp.csr_matrix(X), False), (X.astype(np.float32), True),
                       (sp.csr_matrix(X, dtype=np.float32), False)):
        f32 = Xf.dtype == np.float32  # gradients of float32 products: tol 1e-10 is out of reach
        res = m3svm_newton_binary(Xf, y, sw, tol=1e-6 if f32 else 1e-10, direct=direct, **kw)
        assert res.converged
        rtol = 1e-6 if f32 else 1e-10
        assert abs(res.objective - ref.objective) <= rtol * ref.objective, (direct, Xf.dtype)
        # the minimiser of the full problem is [-u/2, u/2]
        atol = 1e-3 if Xf.dtype == np.float32 else 1e-6
        np.testing.assert_allclose(res.coef, ref.coef, atol=atol * np.abs(ref.coef).max())
        np.testing.assert_allclose(res.intercept, ref.intercept, atol=atol * max(1, np.abs(ref.intercept).max()))
        np.testing.assert_allclose(res.coef[0], -res.coef[1])


@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
def test_binary_newton_p1_finds_the_zero_solution_and_leaves_it_below_the_threshold(loss):
    """For p = 1, u = 0 is the minimiser exactly when the data gradient in u at the best
    intercept lies in the lam ball: Newton returns it (no step from the kink), and just below
    that lam it moves off the origin to the independent minimiser."""
    X, y, sw = _binary_data()
    kw = {"p": 1.0, "delta": 0.2, "eps": 1e-6, "loss": loss, "fit_intercept": True}
    z = np.where(y == 1, 1.0, -1.0)
    c = minimize(lambda t: _reduced_objective(np.append(np.zeros(X.shape[1]), t), X, y, sw, lam=0.0, **kw),
                 [0.0], method="BFGS", options={"gtol": 1e-11}).x[0]
    m = z * c
    dphi = -1 / (1 + np.exp(m)) if loss == "softmax" else -(1 + (1 - m) / np.sqrt((1 - m) ** 2 + 0.04)) / 2
    lam0 = np.linalg.norm(X.T @ (sw * dphi * z))  # the threshold: ||grad_u data(0, c*)||
    for lam in (1.5 * lam0, 0.9 * lam0):
        res = m3svm_newton_binary(X, y, sw, lam=lam, tol=1e-10, **kw)
        assert res.converged
        ind = minimize(_reduced_objective, np.append(np.full(X.shape[1], 1e-3), c), args=(X, y, sw, lam, *kw.values()),
                       method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 40000, "maxfev": 40000})
        assert res.objective <= ind.fun * (1 + 1e-9)
        if lam > lam0:
            assert not np.any(res.coef) and res.intercept[1] == pytest.approx(c / 2, rel=1e-6)
        else:
            assert np.linalg.norm(res.coef) > 0
            ref = m3svm_lbfgs(X, y, sw, 2, lam=lam, tol=1e-10, **kw)
            assert abs(res.objective - ref.objective) <= 1e-9 * ref.objective


def _multi_data(n=90, d=5, K=4, seed=12):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.7)
    y = np.argmax(X[:, :K] + 0.7 * rng.normal(size=(n, K)), axis=1)
    return X, y, rng.uniform(0.2, 3.0, n)


@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
@pytest.mark.parametrize("p", [2.0, 3.0, 4.0])
@pytest.mark.parametrize("sparse", [False, True])
def test_multiclass_hessian_vector_products(loss, p, sparse):
    X, y, sw = _multi_data()
    K, d = 4, X.shape[1]
    kw = {"lam": 0.7, "p": p, "delta": 0.3, "eps": 1e-3, "loss": loss, "fit_intercept": True}
    prob = _MultiProblem(sp.csr_matrix(X) if sparse else X, y, sw, K, **kw)
    rng = np.random.default_rng(13)
    theta = prob.project(rng.normal(size=K * d + K))
    theta[d:2 * d] = theta[:d]  # w_0 == w_1: zero pairwise distance
    theta = prob.project(theta)
    v = prob.project(rng.normal(size=theta.size))
    prob.set_point(theta.copy())
    prob._curvature()
    hv, diag = prob.hvp(v), prob._diagonal()

    def grad(t):
        return m3svm_objective(t, X, y, sw, K, **kw)[1] / sw.sum()

    h = 1e-6
    fd = (grad(theta + h * v) - grad(theta - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7 * np.abs(fd).max())
    # the preconditioner is the Hessian's diagonal (every 7th entry, by differences)
    eye = np.eye(theta.size)[::7]
    cols = np.array([(grad(theta + h * e) - grad(theta - h * e)) / (2 * h) for e in eye])
    np.testing.assert_allclose(diag[::7], np.diag(cols[:, ::7]), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
@pytest.mark.parametrize("p", [2.0, 4.0])
def test_multiclass_newton_and_lbfgs_scores_match_lbfgs(loss, p):
    X, y, sw = _multi_data()
    kw = {"lam": 0.2, "p": p, "delta": 0.2, "eps": 1e-6, "loss": loss, "fit_intercept": True}
    ref = m3svm_lbfgs(X, y, sw, 4, tol=1e-10, **kw)
    for Xf in (X, sp.csr_matrix(X), sp.csr_matrix(X, dtype=np.float32)):
        f32 = Xf.dtype == np.float32
        rtol = 1e-6 if f32 else 1e-9
        for fit in (m3svm_newton_multiclass, m3svm_lbfgs_scores):
            res = fit(Xf, y, sw, 4, tol=1e-6 if f32 else 1e-10, **kw)
            assert res.converged, fit.__name__
            assert abs(res.objective - ref.objective) <= rtol * ref.objective, (fit.__name__, Xf.dtype)
            np.testing.assert_allclose(res.coef, ref.coef, atol=1e-3 * np.abs(ref.coef).max())


def test_lbfgs_scores_handles_p_below_two():
    X, y, sw = _multi_data()
    kw = {"lam": 0.2, "p": 1.0, "delta": 0.2, "eps": 1e-6, "loss": "smooth_hinge", "fit_intercept": False}
    ref = m3svm_lbfgs(X, y, sw, 4, tol=1e-9, **kw)
    res = m3svm_lbfgs_scores(X, y, sw, 4, tol=1e-9, **kw)
    assert abs(res.objective - ref.objective) <= 1e-6 * ref.objective
    with pytest.raises(ValueError, match="p >= 2"):
        m3svm_newton_multiclass(X, y, sw, 4, tol=1e-9, **kw)


def test_pcg_solves_a_positive_definite_system():
    rng = np.random.default_rng(14)
    A = rng.normal(size=(30, 30))
    H = A @ A.T + 0.1 * np.eye(30)
    g = rng.normal(size=30)
    x, k = pcg(lambda v: H @ v, g, 1.0 / np.diag(H), 1e-12, 200)
    np.testing.assert_allclose(H @ x, -g, atol=1e-9 * np.abs(g).max())
    assert k <= 200
    # a loose forcing term stops early, with the residual it promises
    x, k = pcg(lambda v: H @ v, g, 1.0 / np.diag(H), 0.5, 200)
    assert np.linalg.norm(H @ x + g) <= 0.5 * np.linalg.norm(g) and k < 30


def test_auto_solver_choice_and_same_predictions(iris):
    X, y = iris
    yb = (y == 2).astype(int)
    est = M3SVM(lam=0.1, tol=1e-9)
    assert est._resolve_solver(X, 2) == "newton"
    assert est._resolve_solver(X, 3) == "lbfgs"
    assert est._resolve_solver(sp.csr_matrix(X), 3) == "lbfgs"
    assert est._resolve_solver(sp.csr_matrix((5, 2000)), 5) == "newton"
    assert M3SVM(p=3)._resolve_solver(sp.csr_matrix((5, 2000)), 5) == "lbfgs-scores"
    assert M3SVM(p=6)._resolve_solver(sp.csr_matrix((5, 2000)), 5) == "newton"
    assert est._resolve_solver(np.zeros((5, 2000)), 5) == "lbfgs"  # the presets' solver
    assert M3SVM(p=1.5)._resolve_solver(X, 2) == "newton"
    assert M3SVM(p=1.5)._resolve_solver(X, 3) == "lbfgs" and M3SVM(p=0.5)._resolve_solver(X, 2) == "lbfgs"
    for target in (yb, y):
        for Xf in (X, sp.csr_matrix(X)):
            a = M3SVM(lam=0.1, tol=1e-9).fit(Xf, target)
            b = M3SVM(lam=0.1, tol=1e-9, solver="lbfgs").fit(Xf, target)
            assert abs(a.objective_ - b.objective_) <= 1e-8 * b.objective_
            np.testing.assert_array_equal(a.predict(Xf), b.predict(Xf))
    with pytest.raises(ValueError, match="p >= 2 with 3 classes"):
        M3SVM(p=1.5, solver="newton").fit(X, y)
    with pytest.raises(ValueError, match="p >= 1 with 2 classes"):
        M3SVM(p=0.5, solver="newton").fit(X, yb)


def test_multiclass_newton_does_not_stop_after_a_long_step(monkeypatch):
    """A weak p = 2 regulariser on tf-idf rows: the first Newton steps land where the largest
    gradient entry is already below tol but F is far above its minimum. Stopping there (the
    rule without the step-length condition, _CERTIFY_STEP = inf) left F several times too
    high; with it the run goes on and ends at the minimum of a tight L-BFGS run."""
    import margindist.solvers.m3svm_newton as newton_module

    X, y = topic_text(600, 3000, 4, seed=3)
    s = np.random.default_rng(0).uniform(0.5, 2.0, y.size)
    kw = dict(lam=2e-6, p=2.0, delta=0.1, eps=1e-6, loss="smooth_hinge", fit_intercept=True)
    ref = m3svm_lbfgs(X, y, s, 4, tol=1e-10, max_iter=20000, **kw).objective
    res = m3svm_newton_multiclass(X, y, s, 4, **kw)
    assert res.converged and res.objective == pytest.approx(ref, rel=1e-3)
    monkeypatch.setattr(newton_module, "_CERTIFY_STEP", np.inf)
    early = m3svm_newton_multiclass(X, y, s, 4, **kw)
    assert early.converged and early.objective > 1.5 * ref and early.n_iter < res.n_iter


def test_newton_warm_start(iris):
    X, y = iris
    X = X + 5.0  # the dense rows are centred for the solve: the warm start's intercepts move with them
    yb = (y == 2).astype(int)
    for target in (yb, y):
        est = M3SVM(lam=0.1, tol=1e-9, solver="newton", warm_start=True).fit(X, target)
        coef = est.coef_.copy()
        est.fit(X, target)
        assert est.n_iter_ <= 1
        np.testing.assert_allclose(est.coef_, coef, atol=1e-7 * np.abs(coef).max())


# ----------------------------------------------------------------------------- row space
@pytest.fixture(scope="module")
def wide():
    """Wide dense data: 60 rows, 400 features, 3 classes."""
    X, y = make_blobs(60, n_features=400, centers=3, cluster_std=8.0, random_state=4)
    return StandardScaler().fit_transform(X), y


def _full_dimension(monkeypatch):
    monkeypatch.setattr(m3svm_module, "row_space_pays", lambda *a, **k: False)


def _spy_row_space(monkeypatch):
    calls = []

    def spy(X):
        calls.append(X.shape)
        return row_space(X)

    monkeypatch.setattr(m3svm_module, "row_space", spy)
    return calls


def test_row_space_factorisation():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 50))
    space = row_space(X)
    np.testing.assert_allclose(space.Q.T @ space.Q, np.eye(12), atol=1e-12)
    np.testing.assert_allclose(space.Xr @ space.Q.T, X, atol=1e-12)
    W = rng.normal(size=(3, 50))
    np.testing.assert_allclose(space.Xr @ space.to_space(W).T, X @ W.T, atol=1e-10)  # same scores
    assert row_space_pays(X, 3)
    assert not row_space_pays(X.T, 3)  # tall
    assert not row_space_pays(sp.csr_matrix(X), 3)  # CSR keeps its O(nnz) products
    assert not row_space_pays(np.zeros((400, 900)), 2)  # the QR would cost ~225 iterations
    assert row_space_pays(np.zeros((400, 900)), 2, shared=True)  # paid once for a grid


@pytest.mark.parametrize("solver, loss, p", [("lbfgs", "smooth_hinge", 1.0), ("lbfgs", "softmax", 4.0),
                                             ("lbfgs-scores", "smooth_hinge", 4.0), ("newton", "smooth_hinge", 2.0)])
def test_row_space_fit_equals_the_full_dimension_fit(wide, monkeypatch, solver, loss, p):
    """Solved in the row space (QR of X^T), the model is the full-dimension model: the same
    objective, weights and predictions, and W in the row space of X."""
    X, y = wide
    kw = dict(lam=0.05, p=p, loss=loss, solver=solver, tol=1e-10)
    calls = _spy_row_space(monkeypatch)
    ours = M3SVM(**kw).fit(X, y)
    assert calls == [X.shape]
    _full_dimension(monkeypatch)
    ref = M3SVM(**kw).fit(X, y)
    assert abs(ours.objective_ - ref.objective_) <= 1e-9 * ref.objective_
    scale = np.abs(ref.coef_).max()  # flat directions: the weights agree less closely than F
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-4 * scale)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-4 * scale)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    Q = np.linalg.qr(X.T)[0]
    np.testing.assert_allclose(ours.coef_ - ours.coef_ @ Q @ Q.T, 0.0, atol=1e-10)


def test_row_space_binary_newton_and_float32(wide, monkeypatch):
    X, y = wide
    yb = (y == 0).astype(int)
    kw = dict(lam=0.05, tol=1e-10)
    ours = M3SVM(**kw).fit(X.astype(np.float32), yb)
    assert ours.coef_.dtype == np.float32
    _full_dimension(monkeypatch)
    ref = M3SVM(**kw).fit(X.astype(np.float32), yb)
    assert abs(ours.objective_ - ref.objective_) <= 1e-6 * ref.objective_
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))


def test_row_space_weights_equal_copies(monkeypatch):
    """Integer sample weights equal copied rows in the row space (the weighted fit) and in the
    full dimension (the copies are too many rows for the row space): the same objective."""
    rng = np.random.default_rng(42)
    X, y, sw = rng.random((15, 30)), rng.integers(0, 3, 15), rng.integers(0, 5, 15)
    calls = _spy_row_space(monkeypatch)
    weighted = M3SVM(lam=0.1, tol=1e-11).fit(X, y, sample_weight=sw)
    copies = M3SVM(lam=0.1, tol=1e-11).fit(np.repeat(X, sw, axis=0), np.repeat(y, sw))
    assert calls == [(np.count_nonzero(sw), 30)]
    assert abs(weighted.objective_ - copies.objective_) <= 1e-9 * copies.objective_
    np.testing.assert_allclose(weighted.decision_function(X), copies.decision_function(X), atol=1e-4)


def test_row_space_warm_start_from_outside_the_space(wide, monkeypatch):
    """A warm start from weights with a component outside the row space (a fit on other rows)
    reaches the cold fit's model: the start is projected, the minimiser lies in the space."""
    X, y = wide
    est = M3SVM(lam=0.05, tol=1e-10, warm_start=True).fit(X[::-1][:40], y[::-1][:40])
    est.fit(X, y)
    cold = M3SVM(lam=0.05, tol=1e-10).fit(X, y)
    assert abs(est.objective_ - cold.objective_) <= 1e-9 * cold.objective_
    np.testing.assert_allclose(est.coef_, cold.coef_, atol=1e-4 * np.abs(cold.coef_).max())


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # 5 Adam epochs
def test_row_space_not_used_by_adam_sparse_or_tall_data(wide, iris, monkeypatch):
    X, y = wide
    calls = _spy_row_space(monkeypatch)
    M3SVM(solver="adam", max_iter=5).fit(X, y)
    M3SVM(lam=0.1).fit(sp.csr_matrix(X), y)
    M3SVM(lam=0.1).fit(*iris)
    assert calls == []


def test_row_space_made_once_per_fold_of_a_search(wide, monkeypatch):
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    from margindist import M3SVMCV

    X, y = wide
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    grid = {"lam": [1e-3, 1e-2, 1e-1], "p": [2, 4]}
    calls = _spy_row_space(monkeypatch)
    ours = M3SVMCV(grid, cv=folds, refit=False).fit(X, y)
    assert len(calls) == len(folds)
    _full_dimension(monkeypatch)
    ref = GridSearchCV(M3SVM(), grid, cv=folds, refit=False).fit(X, y)
    assert ours.best_params_ == ref.best_params_
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], atol=1e-9)



def test_search_over_weights_on_off_centre_rows(wide, monkeypatch):
    """Off-centre rows are centred around their weighted mean, which moves with the class
    weights: the centred rows and their row space are made for each centre (once per fold for a
    grid that leaves the weights alone), so a search over class_weight gives the models of
    separate fits (scored here by their decision values)."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    from margindist import M3SVMCV

    X, y = wide
    X = X + 5.0
    y = np.where(y == 2, 1, y)  # unequal classes: 'balanced' moves the weighted mean

    def decisions(est, Xv, yv):
        return float(np.sum(np.abs(est.decision_function(Xv))))

    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    grid = {"class_weight": [None, "balanced"], "lam": [1e-2]}
    ours = M3SVMCV(grid, cv=folds, refit=False, scoring=decisions).fit(X, y)
    ref = GridSearchCV(M3SVM(), grid, cv=folds, refit=False, scoring=decisions).fit(X, y)
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-6)
    calls = _spy_row_space(monkeypatch)
    M3SVMCV({"lam": [1e-3, 1e-2, 1e-1]}, cv=folds, refit=False).fit(X, y)
    assert len(calls) == len(folds)


def test_convergence_warning_advises_standardising_dense_rows_only():
    X, y = make_classification(300, 8, n_informative=5, n_classes=3, random_state=2)
    for rows, advice in ((X, True), (sp.csr_matrix(np.abs(X)), False)):
        with pytest.warns(ConvergenceWarning) as record:
            M3SVM(max_iter=2).fit(rows, y)
        messages = [str(w.message) for w in record if issubclass(w.category, ConvergenceWarning)]
        assert any(("standardise" in m) == advice for m in messages)
        assert all(("standardise" in m) == advice for m in messages)
