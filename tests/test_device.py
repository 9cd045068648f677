"""Kernel blocks through PyTorch (the kernel estimators' ``device``): the same numbers as the
NumPy path, dense and CSR, in the Gram blocks, the row cache, the Nyström map and every kernel
estimator; a GPU where there is one (the CUDA tests run only there)."""

import pickle
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification

torch = pytest.importorskip("torch")

import margindist as md
from margindist.kernels import (
    KernelRowCache,
    KernelSpec,
    kernel_decision,
    kernel_matrix,
    nystroem_map,
)

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device")

SPECS = [KernelSpec("rbf", gamma=0.7), KernelSpec("poly", gamma=0.5, degree=3, coef0=1.0),
         KernelSpec("sigmoid", gamma=0.1, coef0=-0.5), KernelSpec("linear")]


pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(300, 8, random_state=0)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    return X, y


def _on(spec, device="cpu"):
    return KernelSpec(spec.kind, spec.gamma, spec.degree, spec.coef0, device=device)


def _sparse(X):
    S = X.copy()
    S[S < 0.4] = 0.0  # a CSR matrix with explicit structure
    return S, sp.csr_matrix(S)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
@pytest.mark.parametrize("sparse", [False, True])
def test_gram_blocks_and_products_equal_numpy(spec, sparse, data):
    X, _ = data
    Xd, Xs = _sparse(X)
    A = Xs if sparse else Xd
    coef = np.random.default_rng(0).normal(size=(X.shape[0], 3))
    # a budget of a few rows per block: the blocks are stitched together correctly
    np.testing.assert_allclose(kernel_matrix(_on(spec), A, A[:50], max_bytes=4000),
                               kernel_matrix(spec, Xd, Xd[:50]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kernel_decision(_on(spec), A, A, coef, max_bytes=4000),
                               kernel_decision(spec, Xd, Xd, coef), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(_on(spec)(A[:7], A), spec(Xd[:7], Xd), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", SPECS[:2], ids=lambda s: s.kind)
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_row_cache_fill_and_dot_equal_numpy(spec, sparse, dtype, data):
    X, _ = data
    Xd, Xs = _sparse(X)
    A = Xs if sparse else Xd
    ref = KernelRowCache(spec, Xd, dtype=dtype)
    dev = KernelRowCache(_on(spec), A, dtype=dtype)
    # float32 storage: the device's float64 values rounded; NumPy's RBF rows are computed in
    # float32 (margindist._rbf32, within about 1.2e-7 of the float64 kernel), its other rows rounded
    f32_arith = dtype == np.float32 and spec.kind == "rbf"
    np.testing.assert_allclose(dev.fill(block_bytes=20000), ref.fill(block_bytes=20000),
                               rtol=1e-13 if dtype == np.float64 else 6e-8, atol=2.5e-7 if f32_arith else 1e-13)
    v = np.random.default_rng(1).normal(size=X.shape[0])
    part = KernelRowCache(_on(spec), A, max_bytes=40 * X.shape[0] * 8)  # 40 rows cached, the rest computed
    for i in range(0, X.shape[0], 9):
        part.row(i)
    np.testing.assert_allclose(part.dot(v), kernel_matrix(spec, Xd) @ v, rtol=1e-11, atol=1e-11)


def test_nystroem_features_equal_numpy(data):
    X, _ = data
    spec = KernelSpec("rbf", gamma=0.7)
    nmap = nystroem_map(spec, X, 40, 0)
    np.testing.assert_allclose(nmap.transform(_on(spec), X, X, max_bytes=3000), nmap.transform(spec, X, X),
                               rtol=1e-11, atol=1e-11)


KERNEL_ESTIMATORS = [
    (md.ODM, {}), (md.LDM, {"tol": 1e-9}), (md.LDM, {"solver": "dcd", "tol": 1e-9}), (md.MSVMAv, {}),
    (md.KMOMD, {"tol": 1e-9}), (md.LSSVM, {}), (md.LSSVM, {"solver": "cg"}), (md.MAMC, {}),
    (md.ODM, {"kernel_approximation": 60, "random_state": 0, "tol": 1e-8}), (md.KMOMD, {"kernel": "poly", "tol": 1e-9}),
]


@pytest.mark.parametrize("E, kw", KERNEL_ESTIMATORS, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_estimators_on_the_device_fit_the_numpy_model(E, kw, data):
    X, y = data
    kw = {"kernel": "rbf", **kw}
    ref = E(**kw).fit(X, y)
    scale = np.max(np.abs(ref.decision_function(X)))
    # ODM at its tol stores float32 rows, which NumPy computes in float32 for the RBF kernel
    # (within about 1.2e-7 of the device's rounded float64 values): the same model to that
    atol = 2e-6 if E is md.ODM and "tol" not in kw else 1e-7
    for A in (X, sp.csr_matrix(X)):
        est = E(**kw, device="cpu").fit(A, y)
        np.testing.assert_allclose(est.decision_function(A) / scale, ref.decision_function(X) / scale, atol=atol)
    fitted = [v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")]
    assert not any(isinstance(v, torch.Tensor) for v in fitted)  # fitted state is NumPy


def test_multiclass_and_pickle_on_the_device(data):
    X, _ = data
    y3 = np.digitize(X[:, 0], [0.33, 0.66])
    ref = md.ODM(kernel="rbf").fit(X, y3)
    est = pickle.loads(pickle.dumps(md.ODM(kernel="rbf", device="cpu").fit(X, y3)))
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))


def test_auto_is_numpy_without_a_gpu_and_cuda_warns(data):
    X, _ = data
    est = md.ODM(kernel="rbf", device="auto")
    assert est._kernel_spec(X).device == ("cuda" if CUDA else None)
    if not CUDA:
        with pytest.warns(UserWarning, match="no CUDA device; running on the CPU"):
            assert md.ODM(kernel="rbf", device="cuda")._kernel_spec(X).device == "cpu"


def test_without_torch_a_device_is_a_clear_error_and_a_fitted_model_predicts(monkeypatch, data):
    X, y = data
    fitted = md.ODM(kernel="rbf", device="cpu").fit(X, y)
    expected = fitted.decision_function(X)
    monkeypatch.setitem(sys.modules, "margindist.torch", None)
    monkeypatch.setitem(sys.modules, "margindist.torch._kernels", None)
    with pytest.raises(ImportError, match=r"ODM\(device='cpu'\) computes its kernel blocks through PyTorch"):
        md.ODM(kernel="rbf", device="cpu").fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert md.ODM(kernel="rbf", device="auto").fit(X, y)._kernel_spec(X).device is None
    np.testing.assert_allclose(fitted.decision_function(X), expected, rtol=1e-12)  # NumPy in its place


@needs_cuda
@pytest.mark.parametrize("E", [md.ODM, md.KMOMD, md.LSSVM, md.MSVMAv])
def test_cuda_fits_the_numpy_model(E, data):
    X, y = data
    ref = E(kernel="rbf").fit(X, y)
    est = E(kernel="rbf", device="cuda").fit(X, y)
    scale = np.max(np.abs(ref.decision_function(X)))
    np.testing.assert_allclose(est.decision_function(X) / scale, ref.decision_function(X) / scale, atol=1e-7)
