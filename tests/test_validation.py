"""Bad and hard input, one group at a time: non-canonical CSR, class weights, callable kernels,
feature scale, degenerate models on small data, mixed label types (the result store has its own
file, test_store.py)."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification

import margindist as md
from margindist._validation import canonical_csr, feature_scale_problem
from margindist.exceptions import DegenerateModelWarning, FeatureScaleWarning

KERNEL_ESTIMATORS = [
    lambda: md.ODM(kernel="rbf", random_state=0),
    lambda: md.LDM(kernel="rbf", random_state=0),
    lambda: md.MSVMAv(kernel="rbf"),
    lambda: md.MSVMAv(kernel="rbf", kernel_approximation=40, random_state=0),
    lambda: md.KMOMD(kernel="rbf"),
    lambda: md.MAMC(kernel="rbf"),
    lambda: md.LSSVM(kernel="rbf"),
]
ALL_ESTIMATORS = [md.ODM, md.LDM, md.MSVMAv, md.M3SVM, md.MarginPursuit, md.KMOMD, md.MAMC, md.LSSVM, md.FMM]


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(160, 6, n_informative=4, random_state=0, class_sep=1.5)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    return X, y


def _duplicated_csr(X):
    """X as CSR with every entry stored twice (halves), in reversed column order."""
    data, ind, ptr = [], [], [0]
    for row in X:
        for j in np.flatnonzero(row)[::-1]:
            data += [row[j] / 2, row[j] / 2]
            ind += [j, j]
        ptr.append(len(data))
    M = sp.csr_matrix((np.array(data), np.array(ind, dtype=np.int32), np.array(ptr)), shape=X.shape)
    assert not M.has_canonical_format
    return M


# ------------------------------------------------------------------ 1. non-canonical CSR
def test_canonical_csr_copies_only_when_needed(data):
    X, _ = data
    C = sp.csr_matrix(X)
    assert canonical_csr(C) is C
    D = _duplicated_csr(X)
    fixed = canonical_csr(D)
    assert fixed is not D and fixed.has_canonical_format and not D.has_canonical_format
    np.testing.assert_allclose(fixed.toarray(), X)


@pytest.mark.parametrize("make", KERNEL_ESTIMATORS)
def test_duplicate_entries_give_the_model_of_the_canonical_matrix(make, data):
    X, y = data
    D = _duplicated_csr(X)
    canonical = make().fit(sp.csr_matrix(X), y)
    dup = make().fit(D, y)
    np.testing.assert_allclose(dup.decision_function(X), canonical.decision_function(X), rtol=1e-9, atol=1e-9)
    # a model predicting on the duplicated form gives the values of the canonical form
    np.testing.assert_allclose(canonical.decision_function(D), canonical.decision_function(X), atol=1e-9)
    assert dup.score(X, y) > 0.8


def _malformed(X, fault):
    """X as CSR with one structural fault the compiled row loops must never meet."""
    M = sp.csr_matrix(X)
    if fault == "negative index":
        M.indices[3] = -1
    elif fault == "index past the last column":
        M.indices[3] = X.shape[1]
    else:  # row pointers that decrease
        M.indptr[2], M.indptr[3] = M.indptr[3], M.indptr[2]
    return M


@pytest.mark.parametrize("E", ALL_ESTIMATORS)
@pytest.mark.parametrize("fault, message", [("negative index", "indices must be >= 0"),
                                            ("index past the last column", "indices must be < 6"),
                                            ("decreasing row pointers", "indptr must be a non-decreasing")])
def test_malformed_csr_is_rejected_in_fit_and_predict(E, fault, message, data):
    X, y = data
    with pytest.raises(ValueError, match=f"malformed sparse matrix: {message}"):
        E().fit(_malformed(X, fault), y)
    model = E().fit(sp.csr_matrix(X), y)
    with pytest.raises(ValueError, match=f"malformed sparse matrix: {message}"):
        model.predict(_malformed(X, fault))


# ------------------------------------------------------------------ 2. class weights
@pytest.mark.parametrize("E", ALL_ESTIMATORS)
@pytest.mark.parametrize("value", [-1.0, 0.0, np.nan, np.inf])
def test_bad_class_weight_is_rejected_by_name(E, value, data):
    X, y = data
    with pytest.raises(ValueError, match=r"class_weight\[0\] must be a positive finite number"):
        E(class_weight={0: value, 1: 1.0}).fit(X, y)


def test_class_weight_for_an_unknown_label_and_a_class_without_weight(data):
    X, y = data
    with pytest.raises(ValueError, match="not classes of y"):
        md.ODM(class_weight={0: 1.0, 7: 2.0}).fit(X, y)
    y3 = np.where(np.arange(y.size) < 40, 2, y)
    sw = np.where(y3 == 2, 0.0, 1.0)
    for E in (md.ODM, md.KMOMD, md.MAMC):
        with pytest.raises(ValueError, match="class 2 has zero total sample weight"):
            E().fit(X, y3, sample_weight=sw)


# ------------------------------------------------------------------ 3. callable kernels
def _wrong_shape(A, B):
    return np.ones((3, 3))


def _nan_kernel(A, B):
    return np.full((A.shape[0], B.shape[0]), np.nan)


def _asymmetric(A, B):
    return A @ B.T + np.arange(B.shape[0])[None, :]


@pytest.mark.parametrize("E", [md.ODM, md.LDM, md.MSVMAv, md.KMOMD, md.MAMC, md.LSSVM])
@pytest.mark.parametrize("kernel, message", [
    (_wrong_shape, r"'_wrong_shape' must return an array of shape \(len\(X\), len\(Z\)\)"),
    (_nan_kernel, "'_nan_kernel' returned NaN or infinite values"),
])
def test_callable_kernel_output_is_checked(E, kernel, message, data):
    X, y = data
    with pytest.raises(ValueError, match=message):
        E(kernel=kernel).fit(X, y)


def test_mamc_zero_bias_with_a_nan_kernel_is_not_accepted(data):
    X, y = data
    with pytest.raises(ValueError, match="NaN"):
        md.MAMC(kernel=_nan_kernel, bias="zero").fit(X, y)


@pytest.mark.parametrize("E", [md.ODM, md.LDM, md.MSVMAv, md.KMOMD, md.LSSVM])
def test_asymmetric_callable_kernel_is_rejected_where_the_gram_matrix_is_used(E, data):
    X, y = data
    with pytest.raises(ValueError, match="'_asymmetric' returned a non-symmetric Gram matrix"):
        E(kernel=_asymmetric).fit(X, y)


def test_a_good_callable_kernel_equals_the_named_one(data):
    X, y = data
    def rbf(A, B):
        sq = (A**2).sum(1)[:, None] + (B**2).sum(1)[None, :] - 2 * A @ B.T
        return np.exp(-0.5 * np.maximum(sq, 0))
    a = md.LSSVM(kernel=rbf).fit(X, y).decision_function(X)
    b = md.LSSVM(kernel="rbf", gamma=0.5).fit(X, y).decision_function(X)
    np.testing.assert_allclose(a, b, atol=1e-8)


# ------------------------------------------------------------------ 4. feature scale
def test_feature_scale_problem_sees_rows_and_columns(data):
    X, _ = data
    assert feature_scale_problem(X) is None
    assert feature_scale_problem(sp.csr_matrix(X)) is None
    assert "root-mean-square norm" in feature_scale_problem(X * 1e-8)
    assert "root-mean-square norm" in feature_scale_problem(sp.csr_matrix(X * 1e8))
    cols = X.copy()
    cols[:, 0] *= 1e8
    cols[:, 1] *= 1e-8
    assert "column 0" in feature_scale_problem(cols, rows=False)
    assert feature_scale_problem(X * 1e-8, rows=False) is None


@pytest.mark.parametrize("E", ALL_ESTIMATORS)
def test_extreme_scale_warns_once_with_the_remedy(E, data):
    X, y = data
    est = E(kernel="linear") if "kernel" in E().get_params() else E()
    with pytest.warns(FeatureScaleWarning, match="Standardise the features") as record:
        est.fit(X * 1e-8, y)
    assert sum(issubclass(w.category, FeatureScaleWarning) for w in record) == 1


def test_ordinary_data_and_scale_adapting_kernels_do_not_warn(data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureScaleWarning)
        warnings.simplefilter("error", DegenerateModelWarning)
        for E in ALL_ESTIMATORS:
            E().fit(X, y)
        md.ODM(kernel="rbf").fit(X * 1e-8, y)  # gamma="scale" adapts to the overall scale
        md.ODM(kernel="precomputed").fit(X @ X.T, y)


@pytest.mark.parametrize("kw, weights", [({}, None), ({}, 1e-10), ({"C": 1e-8}, None), ({"lambda1": 1e8}, None)])
@pytest.mark.parametrize("scale", [1.0, 1e8])
def test_ldm_asgd_does_not_diverge(kw, weights, scale, data):
    X, y = data
    sw = None if weights is None else np.full(y.size, weights)
    est = md.LDM(solver="asgd", random_state=0, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X * scale, y, sample_weight=sw)
    assert np.all(np.isfinite(est.coef_))
    if weights is None and scale == 1.0:  # the exact dual solution of the same problem predicts the same
        exact = md.LDM(solver="dcd", tol=1e-3, **kw).fit(X, y)
        assert np.mean(est.predict(X) == exact.predict(X)) > 0.95


def test_ldm_dcd_at_an_extreme_scale_raises_a_clear_error(data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FeatureScaleWarning)
        with pytest.raises(FloatingPointError, match="Standardise the features, or use solver='asgd'"):
            md.LDM(solver="dcd").fit(X * 1e12, y)


def test_lssvm_linear_at_a_huge_feature_scale_equals_the_rescaled_model(data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FeatureScaleWarning)
        big = md.LSSVM(kernel="linear", C=1e-16).fit(X * 1e8, y)
    small = md.LSSVM(kernel="linear", C=1.0).fit(X, y)  # C (X s)^2 = C s^2 X^2: the same problem
    np.testing.assert_allclose(big.decision_function(X * 1e8), small.decision_function(X), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("E", ALL_ESTIMATORS)
@pytest.mark.parametrize("scale", [1e100, 1e150])
def test_overflowing_feature_scale_gives_a_clear_error_or_a_warned_model(E, scale, data):
    """Features whose products overflow float64: a ValueError / FloatingPointError that says to
    scale them, or a finite model with a few warnings (the feature scale among them), never a
    crash deep in a solver or one warning per iteration."""
    X, y = data
    est = E(kernel="linear") if "kernel" in E().get_params() else E()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            est.fit(X * scale, y)
        except (ValueError, FloatingPointError) as exc:
            assert "cale the features" in str(exc) or "Standardise the features" in str(exc)
            return
    assert len(record) <= 5, [str(w.message)[:80] for w in record[:5]]
    assert any(issubclass(w.category, FeatureScaleWarning) for w in record)
    assert np.all(np.isfinite(est.decision_function(X * scale)))


def test_m3svm_on_large_features_warns_about_the_scale_only(data):
    X, y = data
    X = X - 0.5  # centred: the Newton systems' bias entry against features of 1e16 (condition ~1e16)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est = md.M3SVM().fit(X * 1e8, y)  # no LinAlgWarning from each Newton step
    assert [w.category for w in record] == [FeatureScaleWarning]
    assert est.score(X * 1e8, y) == md.M3SVM().fit(X, y).score(X, y)


def test_kmomd_linear_on_columns_of_wild_scales_warns_about_the_scale_only():
    X, y = make_classification(600, 20, n_informative=10, flip_y=0.01, random_state=3)
    X = (X - X.mean(0)) / X.std(0)
    X[:, :7] *= 1e6
    X[:, 7:14] *= 1e-6
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        md.KMOMD(kernel="linear").fit(X, y)  # its Newton systems: no LinAlgWarning
    assert [w.category for w in record] == [FeatureScaleWarning]


@pytest.mark.parametrize("E", [md.ODM, md.LDM, md.KMOMD, md.MSVMAv, md.MAMC])
@pytest.mark.parametrize("kernel, coef0", [("sigmoid", 0.0), ("poly", -1.0), ("poly", 1.0)])
def test_a_kernel_that_is_not_positive_semi_definite_is_named_at_fit(E, kernel, coef0, data):
    """Sigmoid, or poly with coef0 < 0: the methods whose problem is convex only with a positive
    semi-definite kernel warn (MAMC's closed form needs none)."""
    X, y = data
    indefinite = kernel == "sigmoid" or coef0 < 0
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            E(kernel=kernel, coef0=coef0).fit(X, y)
        except FloatingPointError:  # ODM's dual can diverge with it
            pass
    named = [w for w in record if "is not positive semi-definite" in str(w.message)]
    assert len(named) == (indefinite and E is not md.MAMC)


def test_a_diverging_fit_with_an_indefinite_kernel_names_the_kernel():
    """ODM's dual has no upper bound: with the sigmoid kernel on standardised rows it diverges,
    and the error says that the kernel, not the feature scale, is the likely cause."""
    X, y = make_classification(1000, 20, n_informative=10, flip_y=0.02, random_state=11)
    X = (X - X.mean(0)) / X.std(0)
    with pytest.raises(FloatingPointError, match="sigmoid kernel is not positive semi-definite"):
        md.ODM(kernel="sigmoid").fit(X, y)


def test_degenerate_model_warning_names_the_cause(data):
    X, y = data
    with pytest.warns(DegenerateModelWarning, match="extreme scale"):
        md.ODM(lam=1.0).fit(X * 1e-8, y)  # the paper's lam (the default "auto" adapts to the scale)


# ------------------------------------------------------------------ 5. small and odd data
def test_margin_pursuit_sgd_with_two_samples_per_class():
    X, y = make_classification(100, 10, random_state=0, class_sep=1.5)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    idx = np.r_[np.flatnonzero(y == 0)[:2], np.flatnonzero(y == 1)[:2]]
    for seed in range(30):
        est = md.MarginPursuit(random_state=seed).fit(X[idx], y[idx])
        assert est.score(X[idx], y[idx]) == 1.0, seed


def test_ldm_asgd_default_epochs_reach_the_dcd_solution_on_small_data(data):
    X, y = data
    a = md.LDM(solver="asgd", random_state=0).fit(X[:12], y[:12]).decision_function(X)
    b = md.LDM(solver="dcd", tol=1e-4).fit(X[:12], y[:12]).decision_function(X)
    assert np.mean(np.sign(a) == np.sign(b)) > 0.95
    np.testing.assert_allclose(a, b, atol=0.15)


# ------------------------------------------------------------------ 6. labels
@pytest.mark.parametrize("E", ALL_ESTIMATORS)
def test_mixed_label_types_are_named(E, data):
    X, y = data
    mixed = np.array([v if i % 2 else str(v) for i, v in enumerate(y % 3)], dtype=object)
    with pytest.raises(ValueError, match="Mix of label input types"):
        E().fit(X, mixed)


@pytest.mark.parametrize("E", [md.LDM, md.MarginPursuit])
def test_partial_fit_checks_classes_and_weights_like_fit(E, data):
    X, y = data
    with pytest.raises(ValueError, match="classes must be passed"):
        E().partial_fit(X, y)
    with pytest.raises(ValueError, match="Mix of label input types"):
        E().partial_fit(X, y, classes=np.array([0, "a"], dtype=object))
    with pytest.raises(ValueError, match="balanced"):
        E(class_weight="balanced").partial_fit(X, y, classes=[0, 1])
    with pytest.raises(ValueError, match="class_weight"):
        E(class_weight={0: -1.0, 1: 1.0}).partial_fit(X, y, classes=[0, 1])
    est = E(random_state=0).partial_fit(_duplicated_csr(X), y, classes=[0, 1])
    ref = E(random_state=0).partial_fit(sp.csr_matrix(X), y, classes=[0, 1])
    np.testing.assert_allclose(est.decision_function(X), ref.decision_function(X), atol=1e-12)
