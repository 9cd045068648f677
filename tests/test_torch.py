"""Optional PyTorch pieces: ISM3Loss, the differentiable pairwise penalty, the Adam back end."""

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

torch = pytest.importorskip("torch")

from margindist.models.m3svm import M3SVM
from margindist.solvers.m3svm import m3svm_adam, m3svm_lbfgs
from margindist.solvers.m3svm import pairwise_penalty as np_penalty
from margindist.torch import (
    ISM3Loss,
    m3svm_adam_torch,
    pairwise_penalty,
    resolve_device,
)


pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def broadcast_penalty(W, p):
    """The authors' form: the (K, K, d) tensor of differences, ordered pairs halved."""
    return 0.5 * torch.norm(W.unsqueeze(1) - W.unsqueeze(0), p=2, dim=2).pow(p).sum()


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 4.0, 7.0])
def test_penalty_value_and_gradient_match_broadcast_autograd(p):
    g = torch.Generator().manual_seed(0)
    W = torch.randn(6, 5, dtype=torch.float64, generator=g, requires_grad=True)
    R = pairwise_penalty(W, p)
    (gW,) = torch.autograd.grad(R, W)
    W2 = W.detach().clone().requires_grad_(True)
    R2 = broadcast_penalty(W2, p)
    (gW2,) = torch.autograd.grad(R2, W2)
    assert torch.allclose(R, R2, rtol=1e-12)
    assert torch.allclose(gW, gW2, rtol=1e-9, atol=1e-12)


def test_penalty_gradcheck():
    W = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2), requires_grad=True)
    assert torch.autograd.gradcheck(lambda w: pairwise_penalty(w, 3.0), (W,))


@pytest.mark.parametrize("p", [1.0, 1.5, 3.0])
def test_penalty_at_zero_distance_is_finite_and_matches_numpy(p):
    gen = torch.Generator().manual_seed(3)
    W = torch.randn(5, 4, dtype=torch.float64, generator=gen)
    W[2] = W[0]
    # a pair 1e-11 apart: lost to cancellation in the Gram form, recomputed exactly
    W[3] = W[1] + 1e-11
    Wr = W.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(pairwise_penalty(Wr, p), Wr)
    assert torch.all(torch.isfinite(g))
    R0, g0 = np_penalty(W.numpy(), p)
    np.testing.assert_allclose(g.numpy(), g0, rtol=1e-9, atol=1e-12)
    # central differences around the exactly coinciding pair (the function is symmetric there).
    # For p < 2 the gradient of ||v||^p changes on the scale of ||v|| itself, so a pair 1e-11
    # apart cannot be differenced with a step of 1e-6: move it apart for this part.
    if p < 2:
        W[3] = W[1] + 0.5
        Wr = W.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(pairwise_penalty(Wr, p), Wr)
    h, fd = 1e-6, np.zeros(W.numel())
    for j in range(W.numel()):
        e = torch.zeros(W.numel(), dtype=torch.float64)
        e[j] = h
        fd[j] = (pairwise_penalty(W + e.view_as(W), p) - pairwise_penalty(W - e.view_as(W), p)) / (2 * h)
    np.testing.assert_allclose(g.numpy().ravel(), fd, rtol=1e-5, atol=1e-6)


def test_penalty_rejects_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        pairwise_penalty(torch.zeros(3), 2)
    with pytest.raises(ValueError, match="p must be"):
        pairwise_penalty(torch.zeros(3, 2), 0)


def test_ism3_loss_value_and_gradient_against_independent_computation():
    g = torch.Generator().manual_seed(1)
    n, d, K = 20, 7, 4
    feats = torch.randn(n, d, dtype=torch.float64, generator=g)
    W = torch.randn(K, d, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(K, dtype=torch.float64, generator=g, requires_grad=True)
    t = torch.randint(0, K, (n,), generator=g)
    lam, p = 0.05, 4.0
    loss = ISM3Loss(p=p, lam=lam)(feats @ W.T + b, t, W)
    gW, gb = torch.autograd.grad(loss, (W, b))
    # independent: log-sum-exp by hand and explicit pair loops
    W2, b2 = W.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    z = feats @ W2.T + b2
    ce = (torch.logsumexp(z, dim=1) - z[torch.arange(n), t]).mean()
    reg = sum(torch.linalg.vector_norm(W2[k] - W2[l]) ** p for k in range(K) for l in range(k + 1, K))
    ref = ce + lam * reg
    hW, hb = torch.autograd.grad(ref, (W2, b2))
    assert torch.allclose(loss, ref, rtol=1e-12)
    assert torch.allclose(gW, hW, rtol=1e-10, atol=1e-12)
    assert torch.allclose(gb, hb, rtol=1e-10, atol=1e-12)
    # sum reduction and lam = 0
    s = ISM3Loss(p=p, lam=lam, reduction="sum")(z.detach(), t, W.detach())
    assert torch.allclose(s, ce.detach() * n + lam * reg.detach())
    assert torch.allclose(ISM3Loss(lam=0.0)(z.detach(), t, W.detach()), ce.detach())


def test_ism3_loss_rejects_bad_arguments():
    with pytest.raises(ValueError, match="weight"):
        ISM3Loss()(torch.zeros(3, 4), torch.zeros(3, dtype=torch.long), torch.zeros(5, 2))
    for kw in (dict(p=0), dict(lam=-1), dict(reduction="none")):
        with pytest.raises(ValueError):
            ISM3Loss(**kw)


def test_ism3_loss_trains_a_linear_layer(iris):
    X, y = iris
    Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    crit = ISM3Loss(p=4, lam=1e-3)
    opt = torch.optim.Adam(layer.parameters(), lr=0.05)
    first = None
    for _ in range(200):
        loss = crit(layer(Xt), yt, layer.weight)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first
    assert (layer(Xt).argmax(1) == yt).float().mean() > 0.9


def test_resolve_device():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA"):
            assert resolve_device("cuda").type == "cpu"


@pytest.mark.parametrize("loss", ["smooth_hinge", "softmax"])
@pytest.mark.parametrize("sparse", [False, True])
def test_torch_adam_matches_numpy_adam_and_lbfgs(iris, loss, sparse):
    X, y = iris
    X = X * (np.random.default_rng(0).random(X.shape) < 0.7) if sparse else X
    Xf = sp.csr_matrix(X) if sparse else X
    sw = np.random.default_rng(1).uniform(0.5, 2.0, y.size)
    kw = dict(lam=0.1, p=4.0, delta=0.1, eps=1e-6, loss=loss, fit_intercept=True,
              learning_rate=0.1, max_iter=3000, tol=1e-6)
    Wt, bt, it_t, ft, ok_t = m3svm_adam_torch(Xf, y, sw, 3, device="cpu", **kw)
    Wn, bn, it_n, fn, ok_n = m3svm_adam(Xf, y, sw, 3, **kw)
    assert ok_t and ok_n and isinstance(Wt, np.ndarray) and Wt.dtype == np.float64
    # same iteration in float64: same path up to rounding
    assert abs(ft - fn) <= 1e-8 * fn
    kw.pop("learning_rate")
    kw["tol"] = 1e-9
    f_star = m3svm_lbfgs(Xf, y, sw, 3, **kw)[3]
    assert abs(ft - f_star) <= 1e-4 * f_star


def test_torch_adam_float32_and_minibatch_sparse(iris):
    X, y = iris
    kw = dict(lam=0.1, p=4.0, delta=0.1, eps=1e-6, loss="softmax", fit_intercept=True)
    f_star = m3svm_lbfgs(X, y, np.ones(y.size), 3, tol=1e-9, **kw)[3]
    W, b, _, f32, _ = m3svm_adam_torch(X.astype(np.float32), y, np.ones(y.size), 3, learning_rate=0.1,
                                       max_iter=3000, tol=1e-5, device="cpu", **kw)
    assert abs(f32 - f_star) <= 1e-4 * f_star
    _, _, _, fmb, _ = m3svm_adam_torch(sp.csr_matrix(X), y, np.ones(y.size), 3, learning_rate=0.02,
                                       max_iter=300, batch_size=32, random_state=0, device="cpu", **kw)
    assert fmb - f_star <= 3e-3 * f_star


def test_estimator_gpu_path_runs_and_stores_numpy(iris):
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "no CUDA device; running on the CPU"
        est = M3SVM(solver="adam", device="cuda", lam=0.1, learning_rate=0.1, max_iter=3000,
                    tol=1e-6, loss="softmax").fit(X, y)
    assert isinstance(est.coef_, np.ndarray) and isinstance(est.intercept_, np.ndarray)
    ref = M3SVM(lam=0.1, tol=1e-9, loss="softmax").fit(X, y)
    assert abs(est.objective_ - ref.objective_) <= 1e-4 * ref.objective_
    clone = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(clone.predict(X), est.predict(X))


def test_torch_smooth_hinge_agrees_with_losses():
    """The tensor restatement of the smoothed hinge equals losses.smooth_hinge(_derivative)."""
    from margindist.losses import smooth_hinge, smooth_hinge_derivative
    from margindist.torch._solver import _smooth_hinge

    t = np.r_[np.linspace(-50, 50, 401), -1e8, 0.0, 1e-12, -1e-12]
    for delta in (1e-3, 0.1, 2.0):
        g, gd = _smooth_hinge(torch.as_tensor(t, dtype=torch.float64), delta)
        np.testing.assert_allclose(g.numpy(), smooth_hinge(t, delta), rtol=1e-14, atol=0)
        np.testing.assert_allclose(gd.numpy(), smooth_hinge_derivative(t, delta), rtol=1e-14, atol=1e-300)
