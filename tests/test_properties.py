"""Property-based tests (Hypothesis) of every estimator on generated data.

Generated: data shapes, feature scales, sparsity patterns (duplicate entries, unsorted indices,
explicit zeros), label types and sample weights. Asserted:

* bad input (NaN, infinity, one class, bad class weights, mixed label types, a wrong feature
  count) ends in a ``ValueError`` naming the problem, never in a crash deep in a solver;
* on separable data a fit gives a finite model with high training accuracy, or else warns
  (``FeatureScaleWarning`` / ``DegenerateModelWarning``): never a silently useless model;
* a non-canonical CSR matrix gives the model of its canonical form, and dense input the
  model of CSR input (to the solvers' tolerance);
* a pickled model predicts as the original; a fixed ``random_state`` gives the same model.

The default profile is small (CI); ``MARGINDIST_HYPOTHESIS_PROFILE=large`` runs hundreds of
examples per test (over 10,000 in all), e.g.
``MARGINDIST_HYPOTHESIS_PROFILE=large pytest tests/test_properties.py -p no:randomly``.
"""

import os
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import margindist as md
from margindist.exceptions import DegenerateModelWarning, FeatureScaleWarning

settings.register_profile("ci", max_examples=8, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("medium", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("large", max_examples=250, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("MARGINDIST_HYPOTHESIS_PROFILE", "ci"))

#: One fast configuration per estimator family and solver kind (linear, kernel, sparse-capable).
CONFIGS = {
    "ODM": lambda: md.ODM(random_state=0),
    "ODM-rbf": lambda: md.ODM(kernel="rbf", random_state=0),
    "LDM": lambda: md.LDM(random_state=0),
    "LDM-asgd": lambda: md.LDM(solver="asgd", random_state=0),
    "MSVMAv": lambda: md.MSVMAv(),
    "MSVMAv-rbf": lambda: md.MSVMAv(kernel="rbf"),
    "M3SVM": lambda: md.M3SVM(),
    "MarginPursuit": lambda: md.MarginPursuit(random_state=0),
    "KMOMD": lambda: md.KMOMD(kernel="linear"),
    "KMOMD-rbf": lambda: md.KMOMD(),
    "MAMC": lambda: md.MAMC(kernel="linear"),
    "LSSVM": lambda: md.LSSVM(kernel="linear"),
    "LSSVM-rbf": lambda: md.LSSVM(),
    "FMM": lambda: md.FMM(),
}
NAMES = sorted(CONFIGS)
_MARGINDIST_WARNINGS = (FeatureScaleWarning, DegenerateModelWarning)


def _blobs(rng, n_per_class, d, n_classes, sep=4.0):
    """n_classes well separated Gaussian blobs (separable with high probability)."""
    centres = rng.normal(size=(n_classes, d))
    centres *= sep / max(np.min([np.linalg.norm(a - b) for i, a in enumerate(centres)
                                 for b in centres[i + 1:]]), 1e-3)
    X = np.vstack([c + 0.3 * rng.normal(size=(n_per_class, d)) for c in centres])
    y = np.repeat(np.arange(n_classes), n_per_class)
    return X, y


@st.composite
def datasets(draw, max_classes=3):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n_classes = draw(st.integers(2, max_classes))
    n_per_class = draw(st.integers(3, 25))
    d = draw(st.integers(n_classes - 1, 6))  # blob centres in general position: one-vs-rest separable
    X, y = _blobs(rng, n_per_class, d, n_classes)
    X = X - X.min(axis=0)  # non-negative, like counts or min-max data
    X /= max(X.max(), 1e-12)
    scale = 10.0 ** draw(st.sampled_from([-8, -3, 0, 0, 0, 3, 8]))
    labels = draw(st.sampled_from(["int", "str", "float"]))
    y_out = {"int": y * 3 - 1, "str": np.array(["c%d" % k for k in y]), "float": y * 2.0 - 1.0}[labels]
    weights = draw(st.sampled_from([None, "int", "float"]))
    sw = None if weights is None else (rng.integers(1, 4, size=y.size).astype(float) if weights == "int"
                                       else rng.uniform(0.2, 3.0, size=y.size))
    return X * scale, y_out, sw, scale


@st.composite
def messy_csr(draw, X):
    """X as a CSR matrix with entries split into duplicates, unsorted indices and explicit zeros."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    data, indices, indptr = [], [], [0]
    for row in X:
        cols = list(np.flatnonzero(row))
        entries = []
        for j in cols:
            parts = draw(st.integers(1, 3)) if draw(st.booleans()) else 1
            share = rng.dirichlet(np.ones(parts)) if parts > 1 else np.ones(1)
            entries += [(j, row[j] * f) for f in share]
        if draw(st.booleans()) and X.shape[1]:
            entries.append((int(rng.integers(X.shape[1])), 0.0))  # explicit zero
        rng.shuffle(entries)
        data += [v for _, v in entries]
        indices += [j for j, _ in entries]
        indptr.append(len(data))
    M = sp.csr_matrix((np.array(data, dtype=np.float64), np.array(indices, dtype=np.int32),
                       np.array(indptr)), shape=X.shape)
    return M


def _fit(est, X, y, sw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y, sample_weight=sw)
    return est, [w for w in caught if issubclass(w.category, _MARGINDIST_WARNINGS)]


# ---------------------------------------------------------------------------------------------
#: Default settings known to underfit small separable problems without any warning. Not
#: strict: other generated examples pass.
_UNDERFIT_DEFAULTS = {}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=_UNDERFIT_DEFAULTS[n], strict=False))
    if n in _UNDERFIT_DEFAULTS else n for n in NAMES])
@given(data=datasets())
def test_separable_data_gives_a_useful_model_or_a_warning(name, data):
    X, y, sw, scale = data
    est, warned = _fit(CONFIGS[name](), X, y, sw)
    D = est.decision_function(X)
    assert np.all(np.isfinite(D))
    acc = np.mean(est.predict(X) == y)
    if warned:
        return  # the user was told why the model may be poor
    assert acc >= 0.75, (name, acc, scale)


@pytest.mark.parametrize("name", NAMES)
@given(data=datasets(max_classes=2), pattern=st.data())
def test_noncanonical_csr_gives_the_canonical_model(name, data, pattern):
    X, y, sw, scale = data
    if scale != 1.0:
        X = X / scale
    messy = pattern.draw(messy_csr(X))
    canonical = sp.csr_matrix(X)
    a, _ = _fit(CONFIGS[name](), canonical, y, sw)
    b, _ = _fit(CONFIGS[name](), messy, y, sw)
    Da, Db = a.decision_function(X), b.decision_function(messy)
    np.testing.assert_allclose(Db, Da, rtol=1e-7, atol=1e-9 * max(1.0, np.abs(Da).max()))
    # and dense input gives the model of CSR input, to the solvers' tolerance
    c, _ = _fit(CONFIGS[name](), X, y, sw)
    Dc = c.decision_function(X)
    assert np.mean(np.sign(Dc) == np.sign(Da)) >= 0.9 if Da.ndim == 1 else \
        np.mean(Dc.argmax(1) == Da.argmax(1)) >= 0.9


@pytest.mark.parametrize("name", NAMES)
@given(data=datasets())
def test_pickle_round_trip_and_determinism(name, data):
    X, y, sw, scale = data
    if scale != 1.0:
        X = X / scale
    a, _ = _fit(CONFIGS[name](), X, y, sw)
    b, _ = _fit(CONFIGS[name](), X, y, sw)
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))
    restored = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(restored.decision_function(X), a.decision_function(X))
    np.testing.assert_array_equal(restored.predict(X), a.predict(X))


_BAD = st.sampled_from(["nan", "inf", "one_class", "neg_class_weight", "zero_class_weight",
                        "nan_class_weight", "mixed_labels", "neg_sample_weight", "empty", "features"])


@pytest.mark.parametrize("name", NAMES)
@given(data=datasets(), bad=_BAD)
def test_bad_input_raises_a_clear_error(name, data, bad):
    X, y, sw, scale = data
    X = X / scale
    est = CONFIGS[name]()
    kw = {"sample_weight": sw}
    expect = {"nan": "NaN", "inf": "infinity|inf", "one_class": "class", "neg_class_weight": "class_weight",
              "zero_class_weight": "class_weight", "nan_class_weight": "class_weight",
              "mixed_labels": "Mix of label input types", "neg_sample_weight": "[Nn]egative",
              "empty": "0 sample|empty|minimum", "features": "features"}[bad]
    if bad == "nan":
        X = X.copy()
        X[0, 0] = np.nan
    elif bad == "inf":
        X = X.copy()
        X[-1, -1] = np.inf
    elif bad == "one_class":
        y = np.full(y.shape, y[0])
    elif bad.endswith("class_weight"):
        value = {"neg": -1.0, "zero": 0.0, "nan": np.nan}[bad.split("_")[0]]
        est.set_params(class_weight={y[0]: value})
    elif bad == "mixed_labels":
        y = np.array([int(k) if i % 2 else str(k) for i, k in enumerate(np.unique(y, return_inverse=True)[1])],
                     dtype=object)
    elif bad == "neg_sample_weight":
        kw["sample_weight"] = -np.ones(y.size)
    elif bad == "empty":
        X, y, kw = X[:0], y[:0], {}
    if bad == "features":
        est.fit(X, y, **kw)
        with pytest.raises(ValueError, match=expect):
            est.predict(np.hstack([X, X]))
        return
    with pytest.raises(ValueError, match=expect):
        est.fit(X, y, **kw)


# ---------------------------------------------------------------------------------------------
#: Hard but valid cases the ``large`` profile found: six points of two classes each.
_FAR_BOUNDARY = np.array([[1000.0], [960.65852174], [913.59990308], [0.0], [69.23257778], [43.01197373]])
_TINY_FEATURES = np.array([[1.37855357e-05, 1.33455385e-04], [1.64683690e-04, 1.81479634e-04], [0.0, 0.0],
                           [1.0e-03, 5.64625245e-04], [8.60414114e-04, 5.43289198e-04],
                           [9.48928489e-04, 5.01171558e-04]])


def test_margin_pursuit_newton_fits_the_far_boundary():
    # a former known hard case: the projected SGD (the old default) did not reach the intercept at
    # its defaults; the Newton solver (the default now) reaches the minimiser and fits the points
    y = np.array([-1, -1, -1, 2, 2, 2])
    est, warned = _fit(CONFIGS["MarginPursuit"](), _FAR_BOUNDARY, y, None)
    assert not warned and np.mean(est.predict(_FAR_BOUNDARY) == y) == 1.0


_TINY_WEIGHTED = np.array([[9.97758193e-05, 0.0, 2.57937092e-05, 0.0, 9.24700124e-04],
                           [0.0, 7.93047900e-05, 0.0, 8.51545147e-05, 7.99862183e-04],
                           [8.71642188e-05, 4.62007639e-05, 8.68949122e-05, 1.11440658e-04, 7.88883206e-04],
                           [3.83329654e-04, 2.81659621e-04, 2.79182213e-04, 7.72806078e-04, 0.0],
                           [3.88729832e-04, 1.03007447e-04, 5.30926388e-04, 1.0e-03, 1.58953609e-04],
                           [3.37077813e-04, 7.53498899e-05, 5.11478169e-04, 8.28375382e-04, 1.00350983e-04]])
_TINY_WEIGHTS = np.array([2.69827231, 1.91840743, 2.52219715, 1.59455695, 2.13905077, 1.14927105])


@pytest.mark.parametrize("name, X, sw", [("FMM", _FAR_BOUNDARY, None), ("LDM-asgd", _FAR_BOUNDARY, None),
                                         ("LDM", _TINY_FEATURES, None), ("MSVMAv", _TINY_WEIGHTED, _TINY_WEIGHTS)])
def test_formerly_hard_cases_warn_about_the_scale(name, X, sw):
    # cases the large profile found: the method's defaults assume rows of norm about 1 and it
    # underfitted them silently; it now names the scale (docs/hyperparameters.md)
    y = np.array([-1, -1, -1, 2, 2, 2])
    with pytest.warns(FeatureScaleWarning, match="root-mean-square norm"):
        CONFIGS[name]().fit(X, y, sample_weight=sw)
    # rows of norm 1: no warning, and the training points are fitted
    Xn = X / np.sqrt(np.mean(np.sum(X**2, axis=1)))
    est, warned = _fit(CONFIGS[name](), Xn, y, sw)
    assert not warned
