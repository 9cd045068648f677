"""The shared estimator plumbing: validation, labels, weights, multi-class, margins, plots."""

import inspect

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.multiclass import OneVsOneClassifier, OneVsRestClassifier
from sklearn.preprocessing import MinMaxScaler

import margindist
from margindist import KMOMD, LDM, M3SVM, ODM, MarginPursuit
from margindist._base import BaseMarginClassifier, BinaryModel, BinaryProblem
from margindist.datasets import load_dataset
from margindist.metrics import margin_stats
from margindist.models.lssvm import LSSVM
from margindist.models.mamc import MAMC
from margindist.plotting import plot_margin_cdf


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=120, centers=4, n_features=3, random_state=0, cluster_std=2.0)
    return X, y


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("Est", [MAMC, LSSVM])
def test_bad_input_messages(Est):
    X = np.random.default_rng(0).normal(size=(10, 3))
    y = np.array([0, 1] * 5)
    bad = X.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        Est().fit(bad, y)
    bad[2, 1] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        Est().fit(bad, y)
    with pytest.raises(ValueError, match="0 sample"):
        Est().fit(np.empty((0, 3)), np.empty(0))
    with pytest.raises(ValueError, match="at least 2 classes.*only one class"):
        Est().fit(X, np.ones(10))
    est = Est().fit(X, y)
    with pytest.raises(ValueError, match="3 features"):
        est.predict(X[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        est.predict(np.full((1, 3), np.nan))
    with pytest.raises(ValueError, match="(?i)negative"):
        Est().fit(X, y, sample_weight=-np.ones(10))
    with pytest.raises(ValueError, match="at least one non-zero"):
        Est().fit(X, y, sample_weight=np.zeros(10))
    with pytest.raises(ValueError, match="kernel"):
        Est(kernel="gauss").fit(X, y)
    with pytest.raises(ValueError, match="multi_class"):
        Est(multi_class="all").fit(X, y)
    with pytest.raises(ValueError, match="square Gram matrix"):
        Est(kernel="precomputed").fit(X, y)
    with pytest.raises(ValueError, match="not seen in fit"):
        est.margins(X, np.full(10, 7))


def test_invalid_numeric_parameters():
    X, y = np.eye(4), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match="'C' parameter of LSSVM must be a float in the range \\(0"):
        LSSVM(C=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="'gamma' parameter"):
        LSSVM(kernel="rbf", gamma=0).fit(X, y)
    with pytest.raises(ValueError, match="'bias' parameter of MAMC"):
        MAMC(bias="mean").fit(X, y)


def test_precomputed_test_shape():
    X = np.random.default_rng(0).normal(size=(12, 3))
    y = np.array([0, 1] * 6)
    est = LSSVM(kernel="precomputed").fit(X @ X.T, y)
    with pytest.raises(ValueError, match="expecting 12 features"):
        est.predict(X[:3] @ X[:5].T)
    np.testing.assert_allclose(est.decision_function(X @ X.T), LSSVM().fit(X, y).decision_function(X),
                               rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------- labels and multi-class
def test_string_labels_and_classes(blobs):
    X, y = blobs
    names = np.array(["ant", "bee", "cat", "dog"])[y]
    est = LSSVM().fit(X, names)
    assert list(est.classes_) == ["ant", "bee", "cat", "dog"]
    assert set(est.predict(X)) <= set(names)
    bin_names = np.where(y < 2, "no", "yes")
    b = LSSVM().fit(X, bin_names)
    d = b.decision_function(X)
    assert d.shape == (len(y),)
    np.testing.assert_array_equal(b.predict(X), np.where(d > 0, "yes", "no"))


@pytest.mark.parametrize("strategy, Wrapper", [("ovr", OneVsRestClassifier), ("ovo", OneVsOneClassifier)])
def test_multiclass_matches_sklearn_wrappers(blobs, strategy, Wrapper):
    X, y = blobs
    ours = LSSVM(C=2.0, multi_class=strategy).fit(X, y)
    ref = Wrapper(LSSVM(C=2.0)).fit(X, y)
    D = ours.decision_function(X)
    assert D.shape == (len(y), 4)
    np.testing.assert_allclose(D, ref.decision_function(X), rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    np.testing.assert_array_equal(ours.predict(X), ours.classes_[D.argmax(axis=1)])
    n_problems = 4 if strategy == "ovr" else 6
    assert ours.coef_.shape == (n_problems, 3)


def test_parallel_subproblems_equal_serial(blobs):
    X, y = blobs
    for strategy in ("ovr", "ovo"):
        serial = LSSVM(kernel="rbf", multi_class=strategy).fit(X, y)
        parallel = LSSVM(kernel="rbf", multi_class=strategy, n_jobs=2).fit(X, y)
        np.testing.assert_allclose(parallel.decision_function(X), serial.decision_function(X), rtol=1e-12)


def test_kernel_multiclass_shares_support_vectors(blobs):
    X, y = blobs
    est = MAMC(kernel="rbf", multi_class="ovo").fit(X, y)
    assert est.dual_coef_.shape == (6, len(est.support_))
    np.testing.assert_array_equal(est.support_vectors_, X[est.support_])
    # every pairwise problem uses only the rows of its two classes
    for p, (k, l) in enumerate(est.problems_):
        rows = np.isin(y[est.support_], [k, l])
        assert np.all(est.dual_coef_[p, ~rows] == 0)
        assert est.n_support_[p] == np.count_nonzero(rows)


# ---------------------------------------------------------------- weights
def test_class_weight_is_sample_weight():
    X, y = load_dataset("haberman")
    X = MinMaxScaler().fit_transform(X)
    cw = {"negative": 1.0, "positive": 3.0}
    a = LSSVM(class_weight=cw).fit(X, y)
    b = LSSVM().fit(X, y, sample_weight=np.where(y == "positive", 3.0, 1.0))
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-10)
    balanced = LSSVM(class_weight="balanced").fit(X, y)
    y_index = (y == "positive").astype(int)
    sw = (len(y) / (2 * np.bincount(y_index)))[y_index]
    c = LSSVM().fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(balanced.decision_function(X), c.decision_function(X), rtol=1e-10)
    # the minority class is predicted more often with balanced weights
    assert np.mean(balanced.predict(X) == "positive") > np.mean(LSSVM().fit(X, y).predict(X) == "positive")


def test_zero_weight_is_absent(blobs):
    X, y = blobs
    w = np.ones(len(y))
    w[::3] = 0
    for est in (LSSVM(kernel="rbf"), MAMC(kernel="rbf"), LSSVM(multi_class="ovo")):
        a = est.fit(X, y, sample_weight=w)
        Da = a.decision_function(X)
        b = est.fit(X[w > 0], y[w > 0])
        np.testing.assert_allclose(Da, b.decision_function(X), rtol=1e-10, atol=1e-12)
    # support_ indexes the rows given to fit, also when weight-0 rows were dropped
    k = MAMC(kernel="rbf").fit(X, y, sample_weight=w)
    assert np.all(w[k.support_] > 0)


def test_float32_kept_for_linear():
    X, y = make_blobs(60, centers=2, random_state=1)
    est = LSSVM().fit(X.astype(np.float32), y)
    assert est.coef_.dtype == np.float32
    assert est.decision_function(X.astype(np.float32)).shape == (60,)


# ---------------------------------------------------------------- logging
def test_verbose_is_per_estimator(caplog):
    """verbose shows a fit's messages without changing the logging configuration."""
    import logging

    X, y = make_blobs(40, centers=2, random_state=0)

    def messages():
        out = [r.getMessage() for r in caplog.records if r.name == "margindist"]
        caplog.clear()
        return out

    LSSVM(verbose=1).fit(X, y)
    assert any("LSSVM linear primal" in m for m in messages())
    LSSVM().fit(X, y)
    MAMC().fit(X, y)
    assert messages() == []  # the earlier verbose fit left nothing switched on
    assert logging.getLogger("margindist").level == logging.NOTSET
    with caplog.at_level(logging.INFO, logger="margindist"):
        LSSVM().fit(X, y)  # verbose=0 obeys the user's configuration
    assert any("LSSVM linear primal" in m for m in messages())


def test_verbose_without_logging_configuration_goes_to_stderr():
    import subprocess
    import sys

    code = ("import numpy as np; from margindist import LSSVM; X = np.eye(4); y = [0, 1, 0, 1]; "
            "LSSVM(verbose=1).fit(X, y); LSSVM().fit(X, y)")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert err.count("[margindist] LSSVM linear") == 1


# ---------------------------------------------------------------- margins and plots
def test_margins_binary_linear_and_kernel():
    X, y = load_dataset("sonar")
    X = MinMaxScaler().fit_transform(X)
    y_pm = np.where(y == np.unique(y)[1], 1.0, -1.0)
    lin = LSSVM().fit(X, y)
    np.testing.assert_allclose(lin.margins(X, y), y_pm * lin.decision_function(X) / np.linalg.norm(lin.coef_),
                               rtol=1e-12)
    ker = LSSVM(kernel="rbf", gamma=0.1).fit(X, y)
    K = pairwise_kernels(ker.support_vectors_, metric="rbf", gamma=0.1)
    a = ker.dual_coef_[0]
    np.testing.assert_allclose(ker.margins(X, y), y_pm * ker.decision_function(X) / np.sqrt(a @ K @ a),
                               rtol=1e-10)
    stats = margin_stats(ker.margins(X, y))
    assert stats["frac_negative"] == pytest.approx(1 - ker.score(X, y))


def test_margins_multiclass(blobs):
    X, y = blobs
    ovr = LSSVM(multi_class="ovr").fit(X, y)
    S = ovr.decision_function(X) / ovr.weight_norm_
    expected = S[np.arange(len(y)), y] - np.max(np.where(np.eye(4)[y] > 0, -np.inf, S), axis=1)
    np.testing.assert_allclose(ovr.margins(X, y), expected, rtol=1e-12)
    ovo = LSSVM(multi_class="ovo").fit(X, y)
    m = ovo.margins(X, y)
    # a sample is misclassified by some pairwise classifier iff its margin is negative
    raw = ovo._raw_decision(X)
    wrong_pair = np.zeros(len(y), dtype=bool)
    for p, (k, l) in enumerate(ovo.problems_):
        wrong_pair |= ((y == l) & (raw[:, p] <= 0)) | ((y == k) & (raw[:, p] > 0))
    np.testing.assert_array_equal(m < 0, wrong_pair)


def test_plot_margin_cdf(tmp_path):
    X, y = load_dataset("australian")
    X = MinMaxScaler().fit_transform(X)
    models = {"MAMC": MAMC().fit(X, y), "LSSVM": LSSVM().fit(X, y)}
    ax = plot_margin_cdf(models, X, y, title="australian")
    assert len(ax.get_lines()) >= 2
    assert "margin" in ax.get_xlabel() and "cumulative" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("MAMC (mean")
    out = tmp_path / "cdf.png"
    ax.figure.savefig(out)
    assert out.stat().st_size > 1000
    # margins given directly
    ax2 = plot_margin_cdf({"a": [0.1, 0.2, -0.1]}, show_stats=False)
    assert [t.get_text() for t in ax2.get_legend().get_texts()] == ["a"]
    with pytest.raises(ValueError, match="X and y"):
        plot_margin_cdf(models)
    with pytest.raises(ValueError, match="2 labels for 1"):
        plot_margin_cdf([np.ones(3)], labels=["a", "b"])


# ---------------------------------------------------------------- the hooks of a method
class _Centroid(BaseMarginClassifier):
    """A minimal binary method: w = weighted mean of y x; records what its hooks receive."""

    _parameter_constraints = {"multi_class": [str], "n_jobs": [None, int], "random_state": [None, int]}  # noqa: RUF012

    def __init__(self, multi_class="ovr", n_jobs=None, random_state=None):
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.random_state = random_state

    def _prepare(self, X, y_index, sample_weight, kernel):
        self.prepared_ = getattr(self, "prepared_", 0) + 1

    def _shared_setup(self, X, sample_weight, kernel):
        return "shared"

    def _fit_binary(self, problem):
        assert isinstance(problem, BinaryProblem)
        w = np.asarray(problem.X.T @ (problem.y * problem.sample_weight)) / problem.sample_weight.sum()
        extra = {"problem": (problem.rows, problem.classes, problem.shared, problem.seed, problem.X.shape[0])}
        return BinaryModel(coef=w, intercept=0.0, extra=extra)

    def _set_extra(self, extras):
        self.seen_ = [e["problem"] for e in extras]


@pytest.mark.filterwarnings("ignore::margindist.exceptions.DegenerateModelWarning")  # no intercept
def test_fit_binary_gets_one_binary_problem_per_subproblem(blobs):
    X, y = blobs
    ovr = _Centroid(random_state=0).fit(X, y)
    assert ovr.prepared_ == 1
    assert ovr.problems_ == [(None, k) for k in range(4)]
    seeds = np.random.RandomState(0).randint(0, 2**31 - 1, size=4)
    assert [s[:4] for s in ovr.seen_] == [(None, (None, k), "shared", seeds[k]) for k in range(4)]
    ovo = _Centroid(multi_class="ovo").fit(X, y)
    assert ovo.problems_ == [(k, l) for k in range(4) for l in range(k + 1, 4)]
    for (rows, cls, shared, _, m), (k, l) in zip(ovo.seen_, ovo.problems_):
        assert cls == (k, l) and shared is None and m == rows.size
        np.testing.assert_array_equal(rows, np.flatnonzero(np.isin(y, [k, l])))
    binary = _Centroid().fit(X, y % 2)
    assert binary.problems_ == [(0, 1)] and binary.seen_[0][:3] == (None, (0, 1), None)
    parallel = _Centroid(n_jobs=2).fit(X, y)  # parallel sub-problems share no set-up
    assert [s[2] for s in parallel.seen_] == [None] * 4


def test_problems_has_one_shape_in_every_estimator(blobs):
    X, y = blobs
    assert MAMC().fit(X, y % 2).problems_ == [(0, 1)]
    assert MAMC(multi_class="ovo").fit(X, y).problems_ == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    native = M3SVM().fit(X, y)
    assert native.problems_ == [(None, k) for k in range(4)]
    assert M3SVM().fit(X, y % 2).problems_ == [(None, 0), (None, 1)]
    for est in (LDM(random_state=0, multi_class="ovr").fit(X, y),
                MarginPursuit(random_state=0, multi_class="ovr").fit(X, y)):
        assert est.problems_ == [(None, k) for k in range(4)]


def test_methods_plug_in_through_the_hooks_only():
    """No estimator overrides fit, _fit_problems or _partial_fit; the old _solve hook is gone."""
    for name, cls in inspect.getmembers(margindist, inspect.isclass):
        if issubclass(cls, BaseMarginClassifier):
            for hook in ("fit", "_fit_problems", "_partial_fit", "_solve"):
                assert hook not in vars(cls), f"{name} defines {hook}"
    assert not hasattr(BaseMarginClassifier, "_solve")


@pytest.mark.parametrize("Est", [LDM, MarginPursuit])
def test_partial_fit_is_the_shared_one(Est, blobs):
    X, y = blobs
    est = Est(random_state=0, multi_class="ovr")
    for batch in np.array_split(np.arange(len(y)), 3):
        assert est.partial_fit(X[batch], y[batch], classes=np.unique(y)) is est
    assert est.problems_ == [(None, k) for k in range(4)] and est.coef_.shape == (4, 3)
    assert est.shape_fit_ == (40, 3) and len(est._warm_state["states"]) == 4


def _blas_threads():
    from threadpoolctl import threadpool_info

    return max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=1)


def test_fits_run_with_one_blas_thread_unless_a_dense_matrix_is_large(blobs, monkeypatch):
    """The products of small problems run on one BLAS thread (threads spin and slow them down
    many times over on a busy machine); above the bound the threading is left as it was."""
    from threadpoolctl import threadpool_limits

    import margindist.solvers._threads as threads

    X, y = blobs
    seen = []

    def kernel(A, B):
        seen.append(_blas_threads())
        return A @ B.T

    with threadpool_limits(2, user_api="blas"):
        outside = _blas_threads()
        if outside < 2:
            pytest.skip("no multi-threaded BLAS here")
        LSSVM(kernel=kernel).fit(X, y)
        assert seen and set(seen) == {1}
        monkeypatch.setattr(threads, "BLAS_SINGLE_THREAD_MAX", X.shape[0] - 1)
        seen.clear()
        LSSVM(kernel=kernel).fit(X, y)
        assert set(seen) == {outside}
        assert _blas_threads() == outside  # restored after the fit
        # kernel paths on cached rows factorise nothing of order m: one thread at any size
        for est in (ODM(kernel=kernel), KMOMD(kernel=kernel), LDM(kernel=kernel, solver="bcd"),
                    LSSVM(kernel=kernel, solver="cg")):
            seen.clear()
            est.fit(X, y)
            assert set(seen) == {1}, est
        seen.clear()
        LDM(kernel=kernel, solver="dcd").fit(X, y)  # the factorised path keeps the threads
        assert set(seen) == {outside}
        seen.clear()  # a Nyström path factorises on its landmarks only
        LSSVM(kernel=kernel, kernel_approximation=X.shape[0] // 2).fit(X, y)
        assert seen and set(seen) == {1}
