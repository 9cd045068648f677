import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, LinearSVC

from margindist import ODM
from margindist.metrics import (
    estimator_margins,
    estimator_weight_norm,
    margin_stats,
    msvmav_bound_term,
    multiclass_margins,
    normalized_margins,
    semivariance,
)

# hand-computed example: margins 1, 2, 3, 6 -> mean 3; below the mean: 1 (-2), 2 (-1);
# semi-variance = (4 + 1 + 0 + 0) / 4 = 1.25; variance = (4 + 1 + 0 + 9) / 4 = 3.5
M = np.array([1.0, 2.0, 3.0, 6.0])


def test_hand_computed_statistics():
    s = margin_stats(M, quantiles=(0.5,))
    assert s["n"] == 4
    assert s["min"] == 1.0 and s["max"] == 6.0
    assert s["mean"] == 3.0
    assert s["variance"] == 3.5
    assert s["std"] == pytest.approx(3.5**0.5)
    assert s["semivariance"] == 1.25
    assert s["bound_term"] == pytest.approx(1.25 / 9)
    assert s["frac_negative"] == 0.0
    assert s["q0.5"] == 2.5


def test_semivariance_and_bound():
    assert semivariance(M) == 1.25
    assert msvmav_bound_term(M) == pytest.approx(1.25 / 9)
    # scale invariance of SV / theta^2
    assert msvmav_bound_term(7.0 * M) == pytest.approx(msvmav_bound_term(M))
    # vacuous for a non-positive average margin
    assert msvmav_bound_term(-M) == float("inf")


def test_weights_equal_repeats():
    w = np.array([2, 1, 0, 3])
    rep = np.repeat(M, w)
    assert semivariance(M, sample_weight=w) == pytest.approx(semivariance(rep))
    s_w, s_r = margin_stats(M, sample_weight=w), margin_stats(rep)
    for key in ("mean", "variance", "semivariance", "bound_term", "frac_negative"):
        assert s_w[key] == pytest.approx(s_r[key])
    # weighted quantiles: the inverted-CDF rule, as on the repeated margins
    qs = (0.0, 0.1, 0.25, 0.5, 0.6, 0.75, 1.0)
    s_w = margin_stats(M, quantiles=qs, sample_weight=w)
    for q in qs:
        assert s_w[f"q{q:g}"] == np.quantile(rep, q, method="inverted_cdf")


def test_normalized_margins():
    f = np.array([2.0, -1.0, 0.5])
    y = np.array(["b", "a", "a"])
    np.testing.assert_allclose(normalized_margins(f, y, norm=2.0), [1.0, 0.5, -0.25])
    np.testing.assert_allclose(normalized_margins(f, np.array([1, -1, -1])), [2.0, 1.0, -0.5])
    with pytest.raises(ValueError, match="norm"):
        normalized_margins(f, y, norm=0.0)
    with pytest.raises(ValueError, match="length"):
        normalized_margins(f, y[:2])


def test_multiclass_margins():
    scores = np.array([[3.0, 1.0, 0.0], [0.0, 1.0, 2.0]])
    np.testing.assert_allclose(multiclass_margins(scores, [0, 1]), [2.0, -1.0])


def test_bad_margins():
    with pytest.raises(ValueError, match="empty"):
        margin_stats([])
    with pytest.raises(ValueError, match="NaN"):
        margin_stats([1.0, np.nan])
    with pytest.raises(ValueError, match="quantiles"):
        margin_stats(M, quantiles=(1.5,))


def test_normalized_margins_norm_by_position_and_errors():
    f, y = np.array([2.0, -1.0, 0.5]), np.array([1, -1, -1])
    np.testing.assert_allclose(normalized_margins(f, y, 2.0), [1.0, 0.5, -0.25])
    with pytest.raises(TypeError, match="both"):
        normalized_margins(f, y, 2.0, norm=2.0)
    with pytest.raises(ValueError, match="multi-class scores"):
        normalized_margins(np.ones((3, 3)), y)


# ---------------------------------------------------------------- margins of any classifier

@pytest.fixture(scope="module")
def binary_data():
    X, y = load_breast_cancer(return_X_y=True)
    X = X[::3]
    y = np.where(y[::3] == 1, "benign", "malignant")  # string labels: classes_[1] == "malignant"
    return X, y


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    return (X - X.mean(axis=0)) / X.std(axis=0), y


def _scaled(X):
    return (X - X.mean(axis=0)) / X.std(axis=0)


def _rbf_by_hand(A, B, gamma):
    sq = ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2)
    return np.exp(-gamma * sq)


def test_linear_svc_binary_margins_by_hand(binary_data):
    X, y = binary_data
    X = _scaled(X)
    svc = LinearSVC().fit(X, y)
    w, b = svc.coef_[0], svc.intercept_[0]
    y_pm = np.where(y == "malignant", 1.0, -1.0)
    expected = y_pm * (X @ w + b) / np.sqrt(np.sum(w * w))
    np.testing.assert_allclose(estimator_margins(svc, X, y), expected, rtol=1e-10)
    # the dispatching forms give the same
    np.testing.assert_allclose(normalized_margins(svc, X, y), expected, rtol=1e-10)
    assert margin_stats(svc, X, y)["mean"] == pytest.approx(expected.mean())
    assert margin_stats(svc, X, y, quantiles=(0.5,))["q0.5"] == pytest.approx(np.median(expected))


@pytest.mark.parametrize("gamma", ["scale", 0.02])
def test_rbf_svc_margins_use_the_rkhs_norm(binary_data, gamma):
    X, y = binary_data
    X = 0.5 * _scaled(X)  # variance 1/4: gamma="scale" differs from 1 / n_features
    svc = SVC(kernel="rbf", gamma=gamma, C=3.0).fit(X, y)
    g = 1.0 / (X.shape[1] * X.var()) if gamma == "scale" else gamma
    Z, a = X[svc.support_], svc.dual_coef_[0]
    norm = np.sqrt(a @ _rbf_by_hand(Z, Z, g) @ a)
    f = _rbf_by_hand(X, Z, g) @ a + svc.intercept_[0]
    y_pm = np.where(y == "malignant", 1.0, -1.0)
    np.testing.assert_allclose(estimator_weight_norm(svc), [norm], rtol=1e-8)
    np.testing.assert_allclose(estimator_margins(svc, X, y), y_pm * f / norm, rtol=1e-7, atol=1e-10)
    # negative margins are exactly the training errors
    np.testing.assert_array_equal(estimator_margins(svc, X, y) < 0, svc.predict(X) != y)


def test_logistic_regression_multiclass_margins_by_hand(wine):
    X, y = wine
    lr = LogisticRegression(C=0.1, max_iter=2000).fit(X, y)
    W, b = lr.coef_, lr.intercept_
    S = (X @ W.T + b) / np.sqrt((W**2).sum(axis=1))
    expected = np.array([S[i, y[i]] - max(S[i, k] for k in range(3) if k != y[i]) for i in range(len(y))])
    np.testing.assert_allclose(estimator_margins(lr, X, y), expected, rtol=1e-10)
    np.testing.assert_allclose(estimator_weight_norm(lr), np.sqrt((W**2).sum(axis=1)))


def test_pipeline_margins_transform_then_final_step(binary_data):
    X, y = binary_data
    pipe = make_pipeline(StandardScaler(), LinearSVC()).fit(X, y)
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    w, b = pipe[-1].coef_[0], pipe[-1].intercept_[0]
    expected = np.where(y == "malignant", 1.0, -1.0) * (Z @ w + b) / np.linalg.norm(w)
    np.testing.assert_allclose(estimator_margins(pipe, X, y), expected, rtol=1e-8)
    np.testing.assert_allclose(normalized_margins(pipe, X, y), expected, rtol=1e-8)
    # a margindist model at the end of a pipeline keeps its own margins()
    odm_pipe = Pipeline([("scale", StandardScaler()), ("odm", ODM())]).fit(X, y)
    np.testing.assert_allclose(estimator_margins(odm_pipe, X, y), odm_pipe[-1].margins(Z, y), rtol=1e-10)


def test_margindist_estimator_keeps_its_own_margins(binary_data):
    X, y = binary_data
    X = _scaled(X)
    odm = ODM().fit(X, y)
    w, b = odm.coef_[0], odm.intercept_[0]
    expected = np.where(y == "malignant", 1.0, -1.0) * (X @ w + b) / np.linalg.norm(w)
    np.testing.assert_allclose(estimator_margins(odm, X, y), expected, rtol=1e-8)
    np.testing.assert_allclose(estimator_margins(odm, X, y, norm=2.0), expected * np.linalg.norm(w) / 2.0,
                               rtol=1e-8)


def test_multiclass_svc_one_vs_one_margins(wine):
    X, y = wine
    svc = SVC(kernel="linear", C=0.5).fit(X, y)
    # the pairwise RKHS norms of a linear kernel are the row norms of scikit-learn's coef_
    np.testing.assert_allclose(estimator_weight_norm(svc), np.linalg.norm(svc.coef_, axis=1), rtol=1e-8)
    # by hand: pair p = (i, j), positive side is class i; smallest margin of the pairs of y
    pairs = [(0, 1), (0, 2), (1, 2)]
    F = (X @ svc.coef_.T + svc.intercept_) / np.linalg.norm(svc.coef_, axis=1)
    expected = np.full(len(y), np.inf)
    for p, (i, j) in enumerate(pairs):
        for n in range(len(y)):
            if y[n] == i:
                expected[n] = min(expected[n], F[n, p])
            elif y[n] == j:
                expected[n] = min(expected[n], -F[n, p])
    np.testing.assert_allclose(estimator_margins(svc, X, y), expected, rtol=1e-7, atol=1e-10)
    assert svc.decision_function_shape == "ovr"  # the fitted model is left as it was


def test_estimator_without_norm_raises_and_norm_overrides(binary_data):
    X, y = binary_data
    gb = GradientBoostingClassifier(n_estimators=5, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match=r"GradientBoostingClassifier.*norm="):
        estimator_margins(gb, X, y)
    with pytest.raises(TypeError, match="GradientBoostingClassifier"):
        margin_stats(gb, X, y)
    y_pm = np.where(y == "malignant", 1.0, -1.0)
    np.testing.assert_allclose(estimator_margins(gb, X, y, norm=1.0), y_pm * gb.decision_function(X))
    np.testing.assert_allclose(margin_stats(gb, X, y, norm=4.0)["mean"], np.mean(y_pm * gb.decision_function(X)) / 4)
    rf = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="RandomForestClassifier has no decision_function"):
        estimator_margins(rf, X, y, norm=1.0)
    # an explicit norm also overrides a norm the model has
    svc = LinearSVC().fit(_scaled(X), y)
    np.testing.assert_allclose(estimator_margins(svc, _scaled(X), y, norm=3.0),
                               y_pm * svc.decision_function(_scaled(X)) / 3.0)
    with pytest.raises(ValueError, match="norm must be positive"):
        estimator_margins(svc, _scaled(X), y, norm=0.0)


def test_kernels_without_a_norm(binary_data):
    X, y = binary_data
    X = _scaled(X)
    G = X @ X.T
    pre = SVC(kernel="precomputed").fit(G, y)
    with pytest.raises(ValueError, match="precomputed.*norm="):
        estimator_margins(pre, G, y)
    np.testing.assert_allclose(estimator_margins(pre, G, y, norm=1.0),
                               np.where(y == "malignant", 1.0, -1.0) * pre.decision_function(G))


def test_estimator_margins_label_errors(binary_data):
    X, y = binary_data
    svc = LinearSVC().fit(_scaled(X), y)
    with pytest.raises(ValueError, match="length"):
        estimator_margins(svc, _scaled(X), y[:-1])
    with pytest.raises(ValueError, match="not seen in fit"):
        estimator_margins(svc, _scaled(X)[:2], np.array(["benign", "other"]))
    with pytest.raises(TypeError, match="norm is only for"):
        margin_stats(M, norm=2.0)


def test_multiclass_rbf_svc_pair_norms_equal_binary_fits(wine):
    # LIBSVM's one-vs-one sub-problem (i, j) is the binary SVC on classes i and j alone: its
    # RKHS norm, from an explicit kernel matrix, is the pair's norm in the multi-class model
    X, y = wine
    gamma = 0.05
    svc = SVC(kernel="rbf", gamma=gamma, C=2.0, tol=1e-10).fit(X, y)
    norms = estimator_weight_norm(svc)
    for p, (i, j) in enumerate([(0, 1), (0, 2), (1, 2)]):
        rows = (y == i) | (y == j)
        binary = SVC(kernel="rbf", gamma=gamma, C=2.0, tol=1e-10).fit(X[rows], y[rows])
        Z, a = binary.support_vectors_, binary.dual_coef_[0]
        assert norms[p] == pytest.approx(np.sqrt(a @ _rbf_by_hand(Z, Z, gamma) @ a), rel=1e-6)
    m = estimator_margins(svc, X, y)
    # a sample has a negative margin iff some pairwise classifier of its class gets it wrong
    ovo = SVC(kernel="rbf", gamma=gamma, C=2.0, tol=1e-10, decision_function_shape="ovo").fit(X, y)
    F = ovo.decision_function(X)
    wrong = np.zeros(len(y), dtype=bool)
    for p, (i, j) in enumerate([(0, 1), (0, 2), (1, 2)]):
        wrong |= ((y == i) & (F[:, p] < 0)) | ((y == j) & (F[:, p] > 0))
    np.testing.assert_array_equal(m < 0, wrong)


def test_grid_search_and_pipeline_norms(binary_data):
    from sklearn.model_selection import GridSearchCV

    X, y = binary_data
    pipe = make_pipeline(StandardScaler(), LinearSVC())
    search = GridSearchCV(pipe, {"linearsvc__C": [0.1, 1.0]}, cv=2).fit(X, y)
    best = search.best_estimator_
    np.testing.assert_allclose(estimator_weight_norm(search), [np.linalg.norm(best[-1].coef_)])
    np.testing.assert_allclose(estimator_weight_norm(best), [np.linalg.norm(best[-1].coef_)])
    np.testing.assert_allclose(estimator_margins(search, X, y), estimator_margins(best, X, y))


def test_normalized_margins_norm_types():
    f, y = np.array([2.0, -1.0]), np.array([0, 1])
    for norm in (2, np.float32(2.0), np.array(2.0), np.array([2.0])):
        np.testing.assert_allclose(normalized_margins(f, y, norm), [-1.0, -0.5])
    for bad in ("abc", [1.0, 2.0], np.inf, -1.0, 0.0):
        with pytest.raises(ValueError, match="norm must be a positive finite number"):
            normalized_margins(f, y, bad)
