"""``kernel_approximation``: the Nyström path of every kernel estimator (ODM, LDM, LS-SVM,
KM-OMD, MSVMAv).

Checked against the exact kernel path (every row a landmark gives the exact model, to the
solver's tolerance), against an independent Nyström computation (scikit-learn's ``Nystroem`` on
the same landmarks), dense = CSR, float32 input, the landmark budget of the fitted expansion,
``"auto"`` and bad values.
"""

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification
from sklearn.kernel_approximation import Nystroem
from sklearn.preprocessing import MinMaxScaler

import margindist as md
from margindist.kernels import NystroemMap, fewest_landmarks, kernel_matrix, nystroem_map, resolve_kernel

#: Kernel estimators with ``kernel_approximation`` and settings where their exact path is tight.
ESTIMATORS = {
    "ODM": lambda **kw: md.ODM(kernel="rbf", tol=1e-8, random_state=0, **kw),
    "LDM": lambda **kw: md.LDM(kernel="rbf", tol=1e-8, random_state=0, **kw),
    "LSSVM": lambda **kw: md.LSSVM(kernel="rbf", random_state=0, **kw),
    "KMOMD": lambda **kw: md.KMOMD(kernel="rbf", tol=1e-8, random_state=0, **kw),
    "MSVMAv": lambda **kw: md.MSVMAv(kernel="rbf", kernel_prox="rkhs", alpha=2.0, beta=0.5, tol=0.0, max_iter=40,
                                     random_state=0, **kw),
}


def _data(n=80, d=5, seed=0, n_classes=2):
    X, y = make_classification(n_samples=n, n_features=d, n_informative=3, n_redundant=0,
                               n_classes=n_classes, n_clusters_per_class=1, random_state=seed)
    return MinMaxScaler().fit_transform(X), y


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_row_a_landmark_is_the_exact_model(name):
    X, y = _data()
    exact = _fit(ESTIMATORS[name](), X, y)
    approx = _fit(ESTIMATORS[name](kernel_approximation=X.shape[0]), X, y)
    f, g = exact.decision_function(X), approx.decision_function(X)
    np.testing.assert_allclose(g, f, atol=1e-5 * np.abs(f).max())


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_the_model_is_an_expansion_over_the_landmarks(name):
    X, y = _data(n=120)
    est = _fit(ESTIMATORS[name](kernel_approximation=25), X, y)
    assert est.support_vectors_.shape[0] <= 25
    # the stored expansion predicts on new rows; a pickled copy predicts the same
    Xn = _data(n=30, seed=1)[0]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).decision_function(Xn), est.decision_function(Xn))
    assert est.score(X, y) > 0.8


def test_map_matches_scikit_learn_nystroem_on_the_same_landmarks():
    X, _ = _data(n=60)
    spec = resolve_kernel("rbf", X, gamma=0.7)
    nmap = nystroem_map(spec, X, 20, seed=3)
    ref = Nystroem(kernel="rbf", gamma=0.7, n_components=20).fit(X[nmap.landmarks])  # every row a component
    Z, Zr = nmap.transform(spec, X, X), ref.transform(X)
    # feature maps agree up to a rotation: compare the approximate kernels they induce
    np.testing.assert_allclose(Z @ Z.T, Zr @ Zr.T, atol=1e-8)
    # all rows as landmarks: the Gram matrix itself
    full = nystroem_map(spec, X, 10**6, seed=0)
    Zf = full.transform(spec, X, X)
    np.testing.assert_allclose(Zf @ Zf.T, np.exp(-0.7 * ((X[:, None] - X[None]) ** 2).sum(-1)), atol=1e-6)


@pytest.mark.parametrize("name", ["ODM", "LSSVM"])
def test_dense_equals_csr_and_float32(name):
    X, y = _data(n=90)
    X[X < 0.3] = 0.0
    a = _fit(ESTIMATORS[name](kernel_approximation=30), X, y)
    b = _fit(ESTIMATORS[name](kernel_approximation=30), sp.csr_matrix(X), y)
    c = _fit(ESTIMATORS[name](kernel_approximation=30), X.astype(np.float32), y)
    f = a.decision_function(X)
    np.testing.assert_allclose(b.decision_function(sp.csr_matrix(X)), f, atol=1e-7 * np.abs(f).max())
    np.testing.assert_allclose(c.decision_function(X.astype(np.float32)), f, atol=1e-3 * np.abs(f).max())


def test_one_vs_rest_shares_one_map_and_skips_the_exact_set_up(monkeypatch):
    X, y = _data(n=150, n_classes=3)

    def no_exact_set_up(*args, **kwargs):
        raise AssertionError("the exact kernel set-up was built for a Nyström fit")

    monkeypatch.setattr(md.LDM, "_shared_setup", no_exact_set_up)
    ovr = _fit(md.LDM(kernel="rbf", multi_class="ovr", kernel_approximation=20, random_state=0), X, y)
    assert ovr.support_vectors_.shape[0] <= 20  # the three sub-problems share their landmarks
    ovo = _fit(md.ODM(kernel="rbf", kernel_approximation=20, random_state=0), X, y)
    assert 20 < ovo.support_vectors_.shape[0] <= 3 * 20  # each pair draws from its own rows
    again = _fit(md.ODM(kernel="rbf", kernel_approximation=20, random_state=0), X, y)
    np.testing.assert_array_equal(again.decision_function(X), ovo.decision_function(X))


def test_msvmav_dual_form_on_the_features_gives_the_same_model():
    X, y = _data(n=60)
    kw = dict(kernel="rbf", kernel_prox="rkhs", alpha=2.0, beta=0.5, tol=0.0, max_iter=40, random_state=0,
              kernel_approximation=15)
    primal = _fit(md.MSVMAv(**kw), X, y)
    dual = _fit(md.MSVMAv(dual=True, **kw), X, y)
    f = primal.decision_function(X)
    np.testing.assert_allclose(dual.decision_function(X), f, atol=1e-5 * np.abs(f).max())


def test_cv_with_a_fixed_seed_equals_grid_search():
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    X, y = _data(n=120)
    grid, cv = {"lam": [0.1, 10.0]}, StratifiedKFold(3, shuffle=True, random_state=0)
    ours = md.ODMCV(param_grid=grid, cv=cv, kernel="rbf", kernel_approximation=25, random_state=0).fit(X, y)
    ref = GridSearchCV(md.ODM(kernel="rbf", kernel_approximation=25, random_state=0), grid, cv=cv).fit(X, y)
    assert ours.best_params_ == ref.best_params_
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], atol=1e-9)


def test_auto_is_exact_within_the_cache_and_approximate_beyond(caplog):
    X, y = _data(n=60)
    exact = _fit(md.LSSVM(kernel="rbf"), X, y)
    within = _fit(md.LSSVM(kernel="rbf", kernel_approximation="auto"), X, y)
    np.testing.assert_array_equal(within.decision_function(X), exact.decision_function(X))
    # a Gram budget below 60 x 60 floats: Nyström with min(1000, m) landmarks, said in the log
    with caplog.at_level("INFO", logger="margindist"):
        beyond = _fit(md.LSSVM(kernel="rbf", kernel_approximation="auto", cache_size=0.01, verbose=1), X, y)
    assert "Nyström approximation with 60 landmarks" in caplog.text
    np.testing.assert_allclose(beyond.decision_function(X), exact.decision_function(X), atol=1e-6)


def test_msvmav_auto_by_default_counts_both_of_its_arrays(caplog, monkeypatch):
    """MSVMAv's exact path holds K and the inverse of diag(1/s) + K: its default "auto" leaves it
    once 16 m^2 bytes exceed cache_size (LS-SVM's single Gram matrix would still fit)."""
    import margindist._base as base

    monkeypatch.setattr(base, "AUTO_FEWER", ())  # every row a landmark beyond the budget
    X, y = _data(n=300)  # 8 m^2 = 0.69 MiB <= 1 MiB < 16 m^2 = 1.37 MiB
    make = ESTIMATORS["MSVMAv"]
    assert md.MSVMAv().kernel_approximation == "auto"
    with caplog.at_level("INFO", logger="margindist"):
        exact = _fit(make(kernel_approximation=None, verbose=1), X, y)
        within = _fit(make(cache_size=2, verbose=1), X, y)
        # cache_size=0 turns off the factorisation cache, not the exact path (the default 500 MiB)
        uncached = _fit(make(cache_size=0, verbose=1), X, y)
        beyond = _fit(make(cache_size=1, verbose=1), X, y)
        lssvm = _fit(md.LSSVM(kernel="rbf", kernel_approximation="auto", cache_size=1, verbose=1), X, y)
    # only the fit beyond the budget took the Nyström path, and said why
    assert caplog.text.count("Nyström approximation") == 1
    assert "Nyström approximation with 300 landmarks" in caplog.text
    assert "2 m x m array(s) would exceed 1 MiB" in caplog.text
    f = exact.decision_function(X)
    np.testing.assert_array_equal(within.decision_function(X), f)
    np.testing.assert_array_equal(uncached.decision_function(X), f)
    # every row a landmark: the exact model again (kernel_prox="rkhs")
    np.testing.assert_allclose(beyond.decision_function(X), f, atol=1e-5 * np.abs(f).max())
    lssvm_exact = _fit(md.LSSVM(kernel="rbf"), X, y)
    np.testing.assert_array_equal(lssvm.decision_function(X), lssvm_exact.decision_function(X))


@pytest.mark.parametrize("kernel", ["rbf", "poly"])
def test_residual_is_the_weighted_share_of_the_trace_left_out(kernel):
    """NystroemMap.residual against the Nyström approximation K_XL K_LL^+ K_LX formed whole
    (pseudo-inverse, no features): sum_i s_i (K - K~)_ii / sum_i s_i K_ii; 0 when every row is
    a landmark, smaller with more landmarks."""
    X, _ = _data(n=120, d=8)
    s = np.random.default_rng(1).uniform(0.2, 3.0, X.shape[0])
    spec = resolve_kernel(kernel, X, gamma="scale", degree=2, coef0=1.0)
    K = kernel_matrix(spec, X)
    shares = []
    for n_comp in (10, 40, 120):
        nmap = nystroem_map(spec, X, n_comp, 0)
        L = nmap.landmarks
        approx = K[:, L] @ np.linalg.pinv(K[np.ix_(L, L)], rcond=1e-12, hermitian=True) @ K[L, :]
        expected = s @ (np.diag(K) - np.diag(approx)) / (s @ np.diag(K))
        got = NystroemMap.residual(spec, X, nmap.transform(spec, X, X), s)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-10)
        shares.append(got)
    assert shares[0] > shares[1] > 0.0 and shares[2] < 1e-9


def _flat_and_smooth(n=300):
    """Rows where the RBF kernel's spectrum is flat (30 informative standardised dimensions)
    and where it decays fast (2 dimensions)."""
    rng = np.random.default_rng(0)
    flat = rng.normal(size=(n, 30))
    smooth = rng.normal(size=(n, 2))
    y = (flat[:, 0] + smooth[:, 0] > 0).astype(int)
    return flat, smooth, y


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_auto_warns_when_its_landmarks_leave_much_of_the_trace_out(monkeypatch, caplog):
    """kernel_approximation="auto" beyond its budget: a KernelApproximationWarning where the
    landmarks leave more than WARN_RESIDUAL of the kernel's trace out, naming the share and the
    remedies; none where they capture it, and none for landmarks the user chose."""
    import margindist._base as base

    monkeypatch.setattr(base, "AUTO_COMPONENTS", 20)
    flat, smooth, y = _flat_and_smooth()
    make = lambda **kw: md.LSSVM(kernel="rbf", cache_size=0.01, **kw)  # noqa: E731
    with pytest.warns(md.exceptions.KernelApproximationWarning, match=r"20 Nyström landmarks of 300 rows.* % of"):
        make(kernel_approximation="auto").fit(flat, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", md.exceptions.KernelApproximationWarning)
        make(kernel_approximation=20).fit(flat, y)
        with caplog.at_level("INFO", logger="margindist"):
            make(kernel_approximation="auto", verbose=1).fit(smooth, y)
    share = float(caplog.text.split("leaving ")[1].split(" %")[0])
    assert 0.0 < share < 100 * base.WARN_RESIDUAL
    # one-vs-one: one warning for the fit, naming the worst of its sub-problems
    y3 = np.arange(300) % 3
    with pytest.warns(md.exceptions.KernelApproximationWarning, match="one of its 3 sub-problems") as record:
        md.MSVMAv(kernel="rbf", cache_size=0.01, max_iter=5).fit(flat, y3)
    assert sum(issubclass(w.category, md.exceptions.KernelApproximationWarning) for w in record) == 1


def test_fewest_landmarks_is_the_first_count_that_leaves_at_most_the_share_out():
    """fewest_landmarks against the shares of each count's map (nystroem_map with the same seed)
    measured on all rows: the first count at or below the share, None where none is; on more
    rows than the probe, the share on the probe rows is close to the share on all rows."""
    flat, smooth, _ = _flat_and_smooth()
    counts = (5, 10, 20, 40, 80)
    for X in (flat, smooth):
        spec = resolve_kernel("rbf", X)
        shares = [NystroemMap.residual(spec, X, nystroem_map(spec, X, k, 3).transform(spec, X, X)) for k in counts]
        assert all(a >= b for a, b in zip(shares, shares[1:]))
        for limit in (0.01, 0.05, 0.3):
            got = fewest_landmarks(spec, X, counts, limit, 3)
            passing = [k for k, share in zip(counts, shares) if share <= limit]
            if not passing:
                assert got is None
            else:
                np.testing.assert_array_equal(got.landmarks, nystroem_map(spec, X, passing[0], 3).landmarks)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 4))
    spec = resolve_kernel("rbf", X)
    nmap = nystroem_map(spec, X, 30, 0)
    share = NystroemMap.residual(spec, X, nmap.transform(spec, X, X))
    assert fewest_landmarks(spec, X, (30,), 1.1 * share, 0, probe=500) is not None
    assert fewest_landmarks(spec, X, (30,), 0.9 * share, 0, probe=500) is None


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", ["ODM", "LSSVM", "MSVMAv"])
def test_auto_takes_the_fewest_landmarks_that_capture_the_kernel(name, monkeypatch, caplog):
    """kernel_approximation="auto" beyond its budget: the fewest of AUTO_FEWER that leave at
    most AUTO_NEAR_EXACT of the trace out (the same model as that count given as an int), else
    AUTO_COMPONENTS; a sigmoid kernel (its share measures nothing) takes AUTO_COMPONENTS."""
    import margindist._base as base

    monkeypatch.setattr(base, "AUTO_FEWER", (5, 20, 40))
    monkeypatch.setattr(base, "AUTO_COMPONENTS", 60)
    flat, smooth, y = _flat_and_smooth()
    make = lambda **kw: ESTIMATORS[name](cache_size=0.01, kernel_approximation="auto").set_params(**kw)  # noqa: E731
    spec = resolve_kernel("rbf", smooth)
    seed = int(base._problem_seeds(0, 1)[0])  # the sub-problem's seed under random_state=0
    expected = fewest_landmarks(spec, smooth, (5, 20, 40), base.AUTO_NEAR_EXACT, seed)
    assert expected is not None and expected.landmarks.size in (20, 40)  # 5 leave more out, 40 do not
    for X, k in ((smooth, expected.landmarks.size), (flat, 60)):
        caplog.clear()
        with caplog.at_level("INFO", logger="margindist"):
            auto = _fit(make(verbose=1), X, y)
        assert f"Nyström approximation with {k} landmarks of 300 rows" in caplog.text
        given = _fit(make(kernel_approximation=k), X, y)
        np.testing.assert_array_equal(auto.decision_function(X), given.decision_function(X))
    # CSR rows take the same count and model (to rounding)
    f = _fit(make(), smooth, y).decision_function(smooth)
    on_csr = _fit(make(), sp.csr_matrix(smooth), y)
    assert on_csr.support_vectors_.shape[0] <= expected.landmarks.size
    np.testing.assert_allclose(on_csr.decision_function(sp.csr_matrix(smooth)), f, atol=1e-6 * np.abs(f).max())
    caplog.clear()
    with caplog.at_level("INFO", logger="margindist"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _fit(make(verbose=1, kernel="sigmoid"), smooth, y)
    assert "Nyström approximation with 60 landmarks" in caplog.text


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_msvmav_auto_takes_landmarks_that_capture_the_kernel_beyond_its_row_limit(monkeypatch, caplog):
    """MSVMAv's "auto" within its budget: beyond ``_auto_landmark_rows`` rows the model on
    AUTO_COMPONENTS landmarks where they leave at most AUTO_NEAR_EXACT of the trace out (the
    same model as that many landmarks given as an int), else the exact model; at or below the
    limit, and on few distinct rows, the exact model without trying landmarks."""
    import margindist._base as base

    monkeypatch.setattr(base, "AUTO_COMPONENTS", 60)
    monkeypatch.setattr(md.MSVMAv, "_auto_landmark_rows", 100)
    flat, smooth, y = _flat_and_smooth()
    make = lambda **kw: md.MSVMAv(**{"kernel": "rbf", "max_iter": 30, "random_state": 0, **kw})  # noqa: E731

    def same(a, b, X):
        np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))

    with caplog.at_level("INFO", logger="margindist"):
        auto = make(verbose=1).fit(smooth, y)
    assert "the landmarks capture the kernel" in caplog.text
    same(auto, make(kernel_approximation=60).fit(smooth, y), smooth)
    assert auto.support_vectors_.shape[0] <= 60
    caplog.clear()
    with caplog.at_level("INFO", logger="margindist"):
        auto = make(verbose=1).fit(flat, y)
    assert "the exact kernel path on 300 rows" in caplog.text and "Nyström approximation" not in caplog.text
    same(auto, make(kernel_approximation=None).fit(flat, y), flat)
    # at the limit, on 60 distinct (x, y) pairs of 300 rows, and with a kernel that is not
    # positive semi-definite: exact, no landmarks tried
    caplog.clear()
    rep = np.repeat(smooth[:60], 5, axis=0), np.repeat(y[:60], 5)
    made = []
    features = md.MSVMAv._nystroem_features
    monkeypatch.setattr(md.MSVMAv, "_nystroem_features", lambda self, *a: made.append(1) or features(self, *a))
    with caplog.at_level("INFO", logger="margindist"):
        same(make(verbose=1).fit(smooth[:100], y[:100]), make(kernel_approximation=None).fit(smooth[:100], y[:100]),
             smooth[:100])
        same(make(verbose=1).fit(*rep), make(kernel_approximation=None).fit(*rep), rep[0])
        sigmoid = dict(kernel="sigmoid", coef0=-1.0)
        same(make(verbose=1, **sigmoid).fit(smooth, y), make(kernel_approximation=None, **sigmoid).fit(smooth, y),
             smooth)
    assert "landmarks" not in caplog.text and not made


def test_linear_kernel_ignores_the_approximation():
    X, y = _data()
    a = _fit(md.ODM(random_state=0), X, y)
    b = _fit(md.ODM(kernel_approximation=5, random_state=0), X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize("bad", [0, -3, 2.5, "many"])
def test_bad_values_raise_naming_the_parameter(name, bad):
    X, y = _data(n=30)
    with pytest.raises(ValueError, match="kernel_approximation"):
        ESTIMATORS[name](kernel_approximation=bad).fit(X, y)


def test_precomputed_kernel_raises_for_landmarks_and_stays_exact_for_auto():
    X, y = _data(n=30)
    K = X @ X.T
    with pytest.raises(ValueError, match="kernel_approximation.*precomputed|precomputed.*kernel_approximation"):
        md.ODM(kernel="precomputed", kernel_approximation=10).fit(K, y)
    # "auto" (MSVMAv's default) with the user's Gram matrix: the exact model, whatever the budget
    exact = _fit(md.MSVMAv(kernel="precomputed", kernel_approximation=None), K, y)
    auto = _fit(md.MSVMAv(kernel="precomputed", cache_size=1e-6), K, y)
    np.testing.assert_array_equal(auto.decision_function(K), exact.decision_function(K))


def test_kmeanspp_landmarks_approximate_the_kernel_better_than_uniform():
    # 20 tight clusters and 20 landmarks: uniform draws miss about a third of the clusters,
    # k-means++ seeding (D^2 sampling) lands in nearly every one
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=4.0, size=(20, 3))
    X = np.vstack([c + 0.1 * rng.normal(size=(15, 3)) for c in centres])
    spec = resolve_kernel("rbf", X, gamma=1.0)
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))

    def error(kind, seed):
        nmap = nystroem_map(spec, X, 20, seed, landmarks=kind)
        Z = nmap.transform(spec, X, X)
        return np.linalg.norm(K - Z @ Z.T)

    uniform = np.mean([error("uniform", s) for s in range(10)])
    kmeans = np.mean([error("kmeans++", s) for s in range(10)])
    assert kmeans < 0.7 * uniform


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_kmeanspp_landmarks_fit_and_bad_value(name):
    X, y = _data(n=100)
    est = _fit(ESTIMATORS[name](kernel_approximation=20, landmarks="kmeans++"), X, y)
    assert est.support_vectors_.shape[0] <= 20 and est.score(X, y) > 0.8
    full = _fit(ESTIMATORS[name](kernel_approximation=100, landmarks="kmeans++"), X, y)
    exact = _fit(ESTIMATORS[name](), X, y)
    f = exact.decision_function(X)
    np.testing.assert_allclose(full.decision_function(X), f, atol=1e-5 * np.abs(f).max())
    with pytest.raises(ValueError, match="landmarks"):
        ESTIMATORS[name](kernel_approximation=20, landmarks="leverage").fit(X, y)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_model_without_support_predicts_and_warns_instead_of_crashing(name):
    """Identical rows of both classes: every landmark coefficient is 0, no support vector is
    left, and the model says it is degenerate (as the exact model does) instead of failing in
    the kernel evaluation."""
    X, y = np.zeros((30, 3)), np.array([0, 1] * 15)
    with pytest.warns(md.exceptions.DegenerateModelWarning):
        est = ESTIMATORS[name](kernel_approximation=5).fit(X, y)
    if name != "MSVMAv":  # MSVMAv keeps its unit-norm w: its landmarks stay, with equal values
        assert est.support_vectors_.shape[0] == 0
        np.testing.assert_array_equal(est.decision_function(X), est.intercept_[0])
    from margindist.kernels import kernel_decision

    spec = resolve_kernel("rbf", X, gamma=1.0)
    np.testing.assert_array_equal(kernel_decision(spec, X, X[:0], np.zeros((0, 2))), np.zeros((30, 2)))
