"""One property table: every estimator configuration x {dense == CSR, sample weights == repeated
rows, float32 == float64 (and float32 fitted state), determinism under ``random_state``, pickle}.

A configuration is one code path: an estimator with the solver / kernel / multi-class option that
selects it. Each property of a configuration is a :class:`Spec` (its data, its parameters and the
tolerances of the comparison) or a string: the reason the configuration does not have the
property, which the table reports as a skip. The tolerances are those of the per-estimator tests
these checks came from; a new check uses the tolerance of its nearest per-estimator sibling.
"""

import functools
import pickle
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.sparse as sp
from _data import scaled
from _data import separable as _separable_data
from sklearn.datasets import load_iris, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

import margindist as md

pytestmark = pytest.mark.usefixtures("single_blas_thread")

# ---------------------------------------------------------------------------------------------
# data: each function returns a fresh (X, y); the expensive part is cached


_scaled = functools.cache(scaled)


def _zeroed(X, below):
    X = X.copy()
    X[np.abs(X) < below] = 0.0
    return X


def real(name, below=None, n=None, seed=0):
    def make():
        X, y = _scaled(name, n, seed)
        return (X.copy() if below is None else _zeroed(X, below)), y.copy()
    make.__name__ = f"{name}{'' if below is None else f'<{below}'}"
    return make


def gaussian(m, d, seed, noise, below=None):
    """y = sign(x_0 + noise e) (the KMOMD tests) or sign(x . w + noise e) with random w."""
    def make():
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(m, d))
        if noise == "w":  # the MarginPursuit tests: a random direction, noise 0.5
            w = rng.normal(size=d)
            y = np.where(X @ w + 0.5 * rng.normal(size=m) > 0, 1.0, -1.0)
        else:
            y = np.where(X[:, 0] + noise * rng.normal(size=m) > 0, 1.0, -1.0)
        return (X if below is None else _zeroed(X, below)), y
    return make


def separable(seed, below=None, n=60, d=5, gap=0.1):
    """Origin-symmetric linearly separable data (the FMM tests)."""
    def make():
        X, y = _separable_data(n=n, d=d, seed=seed, gap=gap)
        return (X if below is None else _zeroed(X, below)), y
    return make


def classification(below):
    def make():
        X, y = make_classification(n_samples=80, n_features=12, random_state=0)
        return _zeroed(X, below), y
    return make


def sparse_three_class():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(80, 10)) * (rng.random((80, 10)) < 0.3)
    return X, rng.integers(0, 3, 80)


@functools.cache
def _iris_std():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def iris_std():
    X, y = _iris_std()
    return X.copy(), y.copy()


# ---------------------------------------------------------------------------------------------
# sample weights: functions of the labels


def integers(seed, low, high):
    def make(y):
        return np.random.default_rng(seed).integers(low, high, size=len(y)).astype(float)
    return make


def first_rows_two(n=30):
    def make(y):
        w = np.ones(len(y))
        w[:n] = 2.0
        return w
    return make


# ---------------------------------------------------------------------------------------------
# the table


@dataclass(frozen=True)
class Cmp:
    """Compare ``what`` (a fitted attribute, ``"decision_function"``, or a function of the
    fitted estimator and the evaluation data) to the reference, as ``assert_allclose`` does;
    ``scaled`` multiplies ``atol`` by the reference's largest magnitude."""
    what: object
    rtol: float = 0.0
    atol: float = 0.0
    scaled: bool = False


def _value(est, what, X):
    if callable(what):
        return np.asarray(what(est, X))
    if what == "decision_function":
        return est.decision_function(X)
    return np.asarray(getattr(est, what))


def _assert_close(got_est, ref_est, cmps, X_got, X_ref, label):
    for c in cmps:
        ref = _value(ref_est, c.what, X_ref)
        got = _value(got_est, c.what, X_got)
        atol = c.atol * np.abs(ref).max() if c.scaled else c.atol
        np.testing.assert_allclose(got, ref, rtol=c.rtol, atol=atol, err_msg=f"{label}: {c.what}")


@dataclass(frozen=True)
class Spec:
    """One property check: data, extra estimator parameters, the comparisons and property
    specific settings (``weights``: the weight function; ``evaluate``: evaluation rows other
    than the training ones; ``dtype_attrs``: fitted attributes kept in float32;
    ``min_agreement``: the share of equal float32 / float64 predictions, on float64 and on
    float32 rows, exceeds it (1.0: every prediction equal); ``csr32``:
    also fit float32 CSR input; ``weights_matter``: the weighted model differs from the
    unweighted one)."""
    data: object
    cmp: tuple = ()
    kw: dict = field(default_factory=dict)
    weights: object = None
    evaluate: object = None
    dtype_attrs: tuple = ()
    min_agreement: float = None
    csr32: bool = False
    weights_matter: bool = False


@dataclass(frozen=True)
class Case:
    """An estimator configuration and its properties (a Spec, or the reason it lacks one).
    ``seeded``: results depend on ``random_state`` (another seed gives another model);
    ``det``: the data and parameters of the random_state and pickle checks (else those of the
    CSR check)."""
    est: object
    kw: dict
    csr: object
    weights: object
    f32: object
    seeded: bool = False
    det: object = None

    def make(self, **extra):
        return self.est(**{**self.kw, **extra})


def _coef(rtol, atol, *, intercept=True, scaled=False):
    out = (Cmp("coef_", rtol, atol, scaled),)
    return out + ((Cmp("intercept_", rtol, atol, scaled),) if intercept else ())


DEC = "decision_function"
SONAR03, HEART, HEART03 = real("sonar", 0.3), real("heart"), real("heart", 0.3)
ODM_CSR = dict(lam=5.0, tol=1e-9, random_state=0, max_iter=5000)
ODM_SW = dict(lam=5.0, tol=1e-10, random_state=0)
LDM_CSR = dict(lambda1=2**-3, lambda2=2**-4, C=10.0, tol=1e-9, max_iter=100000)
LDM_SW = dict(lambda1=0.25, lambda2=0.1, C=1.0, tol=1e-10, max_iter=100000, random_state=0)
KM_CSR, KM_SW = dict(lam=0.2, tol=1e-12), dict(lam=0.1, gamma=0.5, tol=1e-12)
KM_EVAL = np.random.default_rng(6).normal(size=(20, 3))
MP_SPARSE = gaussian(120, 8, 13, "w", below=0.8)
MSV_CSR, MSV_SW = dict(alpha=4.0, beta=0.25, tol=0.0, max_iter=50), dict(alpha=2.0, beta=0.5, tol=0.0, max_iter=60)
MSV_SPARSE, MSV_WDBC = real("australian", 0.3, n=300), real("wdbc", n=150, seed=6)
_NP_ALLCLOSE = 1e-5  # the rtol of np.allclose, which the MSVMAv tests use


def _history_bound(est, X):
    return est.history_["bound"]


def _msvmav(kw):
    """MSVMAv: dense == CSR, weights, float32 as the MSVMAv tests check them."""
    if "kernel" in kw:  # a smaller problem: the kernel rows of CSR input are the slow part
        csr = Spec(real("australian", 0.3, n=100), (Cmp(DEC, _NP_ALLCLOSE, 1e-9),), kw=MSV_CSR)
    else:
        csr = Spec(MSV_SPARSE, (Cmp("coef_", _NP_ALLCLOSE, 1e-9), Cmp("intercept_", _NP_ALLCLOSE, 1e-9),
                                Cmp(DEC, _NP_ALLCLOSE, 1e-9)), kw=MSV_CSR)
    # CG solves stop at a residual of 1e-4 of the last step (_cg.CG_FORCING), and the weighted and
    # the repeated rows' solves stop at different points within it: SV/theta^2 agree to ~4e-8
    bound_tol = 1e-6 if kw.get("update") == "cg" else 1e-8
    weights = Spec(MSV_WDBC, (Cmp(DEC, _NP_ALLCLOSE, 1e-8, scaled=True), Cmp(_history_bound, bound_tol)), kw=MSV_SW,
                   weights=integers(7, 1, 3))
    f32 = Spec(real("australian"), (Cmp("coef_", _NP_ALLCLOSE, 1e-6),) if "kernel" not in kw else
               (Cmp(DEC, 1e-3, 1e-4, scaled=True),), kw=dict(alpha=4.0, beta=0.25, max_iter=100, return_best=False),
               dtype_attrs=("coef_",) if "kernel" not in kw else (), min_agreement=1.0, csr32=True)
    return Case(md.MSVMAv, kw, csr, weights, f32)


def _mp(solver, batch_size):
    kw = dict(solver=solver, batch_size=batch_size, max_iter=5 if solver == "sgd" else 200, tol=None, lam=0.01,
              random_state=0, average=solver == "sgd")
    csr = Spec(MP_SPARSE, _coef(1e-10, 1e-12))
    f32 = Spec(MP_SPARSE, (Cmp("coef_", 1e-3, 1e-4),), dtype_attrs=("coef_",))
    if solver == "sgd":
        weights = ("the SGD samples rows uniformly: a repeated row is drawn twice as often, a weight-2 row "
                   "once with a doubled step; equal in expectation only (zero weights == removed rows is "
                   "checked in test_margin_pursuit)")
    else:
        weights = Spec(gaussian(60, 4, 14, "w"), (Cmp("coef_", 1e-10), Cmp("scale_", 1e-12)),
                       kw=dict(max_iter=150), weights=integers(14, 0, 4))
    return Case(md.MarginPursuit, kw, csr, weights, f32, seeded=solver == "sgd")


def _multiclass(est, kw, cmp, f32):
    """A multi-class configuration on iris: dense == CSR and weights with the comparisons of its
    binary sibling, float32 with ``f32``."""
    return Case(est, kw, Spec(iris_std, cmp), Spec(iris_std, cmp, weights=integers(9, 1, 3)),
                Spec(iris_std, f32, dtype_attrs=("coef_",) if f32[0].what == "coef_" else ()))


_F32_DEC = (Cmp(DEC, 1e-3, 1e-3, scaled=True),)
MULTICLASS = {
    "LDM-dcd-ovr": (md.LDM, dict(solver="dcd", C=10.0, tol=1e-8, max_iter=100000, random_state=0),
                    (Cmp(DEC, 0, 1e-6),), (Cmp("coef_", 0, 1e-3),)),
    "LDM-rbf-ovr": (md.LDM, dict(kernel="rbf", gamma=1.0, C=10.0, tol=1e-8, max_iter=100000, random_state=0),
                    (Cmp(DEC, 0, 1e-6),), _F32_DEC),
    "ODM-rbf-ovr": (md.ODM, dict(kernel="rbf", lam=50.0, tol=1e-9, random_state=0), (Cmp(DEC, 0, 1e-7),), _F32_DEC),
    "KMOMD-rbf-ovo": (md.KMOMD, dict(lam=0.1, multi_class="ovo", tol=1e-12), (Cmp(DEC, 1e-9, 1e-12),), _F32_DEC),
    "LSSVM-rbf-ovr": (md.LSSVM, dict(kernel="rbf", gamma=0.5), (Cmp(DEC, 1e-8, 1e-10),), _F32_DEC),
    "MAMC-ovo": (md.MAMC, dict(multi_class="ovo"), (Cmp(DEC, 1e-8, 1e-10),), _F32_DEC),
    "FMM-ovr": (md.FMM, dict(max_iter=200), (Cmp("coef_", 1e-10, 1e-13),), (Cmp("coef_", 1e-3, 1e-5),)),
    "MarginPursuit-gd-ovr": (md.MarginPursuit, dict(solver="gd", lam=0.01, tol=None, max_iter=150),
                             (Cmp("coef_", 1e-10, 1e-12),), (Cmp("coef_", 1e-3, 1e-4),)),
    "MSVMAv-ovr": (md.MSVMAv, MSV_SW, (Cmp(DEC, _NP_ALLCLOSE, 1e-8, scaled=True),),
                   (Cmp("coef_", _NP_ALLCLOSE, 1e-6),)),
}

CASES = {
    # --- MSVMAv (the per-estimator copies live in test_msvmav.py)
    "MSVMAv-auto": _msvmav(dict(update="auto")),
    "MSVMAv-batched": _msvmav(dict(update="batched")),
    "MSVMAv-cg": _msvmav(dict(update="cg")),
    "MSVMAv-sherman-morrison": _msvmav(dict(update="sherman-morrison")),
    "MSVMAv-rbf": _msvmav(dict(kernel="rbf", gamma=0.5)),
    "MSVMAv-rbf-rkhs": _msvmav(dict(kernel="rbf", gamma=0.5, kernel_prox="rkhs")),
    "MSVMAv-nystroem": Case(md.MSVMAv, dict(kernel="rbf", gamma=0.5, kernel_approximation=50, random_state=0),
                            _msvmav(dict(kernel="rbf")).csr,
                            "the Nystroem landmarks are drawn from the rows: a repeated row is twice as likely "
                            "to be one, a weight-2 row is not",
                            Spec(real("australian"), (Cmp(DEC, 1e-3, 1e-4, scaled=True),),
                                 kw=dict(alpha=4.0, beta=0.25), min_agreement=0.98), seeded=True),
    # --- LDM
    "LDM-dcd": Case(md.LDM, dict(solver="dcd"),
                    Spec(real("sonar", 0.4), _coef(0, 1e-7, intercept=False), kw=LDM_CSR),
                    Spec(HEART, _coef(0, 1e-7, intercept=False), kw=LDM_SW, weights=integers(0, 0, 3)),
                    Spec(real("sonar", 0.4), (Cmp("coef_", 0, 1e-3),), kw=LDM_CSR, dtype_attrs=("coef_",))),
    "LDM-asgd": Case(md.LDM, dict(solver="asgd", random_state=0),
                     Spec(real("sonar", 0.4), _coef(0, 1e-10)),
                     "ASGD samples rows at random: weights equal repeated rows in expectation only",
                     Spec(real("sonar", 0.4), (Cmp("coef_", 0, 1e-3),), dtype_attrs=("coef_",)),
                     seeded=True),
    "LDM-rbf": Case(md.LDM, dict(kernel="rbf", gamma=0.3),
                    Spec(HEART03, (Cmp(DEC, 0, 1e-6),), kw=LDM_SW),
                    Spec(HEART, (Cmp(DEC, 0, 1e-6),), kw=LDM_SW, weights=integers(0, 0, 3)),
                    Spec(HEART, (Cmp(DEC, 0, 1e-3, scaled=True),), kw=LDM_SW)),
    # --- ODM
    # (not ``seeded``: at tol=1e-9 SVRG and the DCD permutations reach the seed-free optimum)
    **{f"ODM-{s}": Case(md.ODM, dict(solver=s),
                        Spec(SONAR03, _coef(0, 1e-7, intercept=False), kw=ODM_CSR),
                        Spec(HEART, _coef(0, 1e-8, intercept=False), kw=ODM_SW, weights=integers(0, 0, 3)),
                        Spec(SONAR03, (Cmp("coef_", 0, 1e-4),), kw=ODM_CSR, dtype_attrs=("coef_",)))
       for s in ("dcd", "newton", "svrg")},
    "ODM-rbf": Case(md.ODM, dict(kernel="rbf", gamma=0.5),
                    Spec(HEART03, (Cmp(DEC, 0, 1e-7),), kw=ODM_SW),
                    Spec(HEART, (Cmp(DEC, 0, 1e-7),), kw=ODM_SW, weights=integers(0, 0, 3)),
                    Spec(HEART, (Cmp(DEC, 0, 1e-3, scaled=True),), kw=ODM_SW)),
    "ODM-dcd-ovo": Case(md.ODM, dict(lam=50.0, multi_class="ovo", tol=1e-9, random_state=0),
                        Spec(iris_std, (Cmp(DEC, 0, 1e-7),)),
                        Spec(iris_std, (Cmp(DEC, 0, 1e-7),), weights=integers(9, 1, 3)),
                        Spec(iris_std, (Cmp("coef_", 0, 1e-4),), dtype_attrs=("coef_",))),
    # --- M3SVM (native multi-class)
    **{f"M3SVM-{loss}": Case(md.M3SVM, dict(loss=loss),
                             Spec(sparse_three_class, (Cmp("coef_", 0, 1e-6, scaled=True), Cmp("objective_", 1e-10),
                                                       Cmp(DEC, 0, 1e-6)), kw=dict(lam=0.05, tol=1e-10)),
                             Spec(iris_std, (Cmp("coef_", 0, 1e-5, scaled=True), Cmp("objective_", 1e-9)),
                                  kw=dict(lam=0.1, tol=1e-10), weights=integers(9, 1, 3)),
                             Spec(iris_std, (Cmp("coef_", 1e-3, 1e-3, scaled=True),), kw=dict(lam=0.1),
                                  dtype_attrs=("coef_",), min_agreement=0.98))
       for loss in ("smooth_hinge", "softmax")},
    "M3SVM-adam": Case(md.M3SVM, dict(solver="adam", lam=0.1, max_iter=300, random_state=0),
                       Spec(sparse_three_class, (Cmp("coef_", 0, 1e-6, scaled=True), Cmp(DEC, 0, 1e-6))),
                       Spec(iris_std, (Cmp("coef_", 0, 1e-5, scaled=True),), weights=integers(9, 1, 3)),
                       Spec(iris_std, (Cmp("coef_", 1e-3, 1e-3, scaled=True),), dtype_attrs=("coef_",),
                            min_agreement=0.98)),
    # --- MarginPursuit
    **{f"MarginPursuit-{s}-b{b}": _mp(s, b) for s in ("sgd", "gd") for b in (1, 4)},
    "MarginPursuit-newton": Case(md.MarginPursuit, dict(tol=1e-10),
                                 Spec(MP_SPARSE, _coef(1e-8, 1e-10)),
                                 Spec(gaussian(60, 4, 14, "w"), (Cmp("coef_", 1e-8, 1e-10), Cmp("scale_", 1e-12)),
                                      weights=integers(14, 0, 4)),
                                 Spec(MP_SPARSE, (Cmp("coef_", 1e-3, 1e-4),), dtype_attrs=("coef_",), csr32=True)),
    "MarginPursuit-sgd": Case(md.MarginPursuit, dict(solver="sgd", tol=None, max_iter=5, random_state=0),
                              Spec(MP_SPARSE, _coef(1e-10, 1e-12)), _mp("sgd", 1).weights,
                              Spec(MP_SPARSE, (Cmp("coef_", 1e-3, 1e-4),), dtype_attrs=("coef_",)), seeded=True,
                              det=Spec(gaussian(150, 5, 12, "w"), kw=dict(max_iter=3))),
    # --- KMOMD
    **{f"KMOMD-{s}": Case(md.KMOMD, dict(kernel="linear", solver=s),
                          Spec(classification(0.8), (Cmp("coef_", 1e-10, 1e-13), Cmp(DEC, 1e-10, 1e-12)),
                               kw=KM_CSR),
                          Spec(gaussian(30, 3, 17, 0.5), (Cmp(DEC, 1e-9, 1e-12),), kw=KM_SW,
                               weights=integers(5, 0, 4), evaluate=KM_EVAL),
                          Spec(gaussian(40, 3, 21, 0.5), (Cmp("coef_", 1e-3, 1e-4, scaled=True),),
                               kw=dict(lam=0.1), dtype_attrs=("coef_",)))
       for s in ("primal", "dual", "lbfgs")},
    "KMOMD-rbf": Case(md.KMOMD, dict(kernel="rbf"),
                      Spec(classification(0.8), (Cmp(DEC, 1e-10, 1e-12),), kw=dict(lam=0.2, gamma=0.1, tol=1e-12)),
                      Spec(gaussian(30, 3, 17, 0.5), (Cmp(DEC, 1e-9, 1e-12),), kw=KM_SW,
                           weights=integers(5, 0, 4), evaluate=KM_EVAL),
                      Spec(gaussian(40, 3, 21, 0.5), (Cmp(DEC, 1e-3, 1e-4, scaled=True),), kw=dict(lam=0.1))),
    # --- MAMC, LSSVM (closed forms / direct solves)
    "MAMC": Case(md.MAMC, {}, Spec(HEART03, (Cmp(DEC, 1e-8, 1e-10),)),
                 Spec(HEART, (Cmp(DEC, 1e-8, 1e-10),), weights=first_rows_two()),
                 Spec(HEART, (Cmp(DEC, 1e-4, 1e-5, scaled=True),))),
    "MAMC-zero": Case(md.MAMC, dict(bias="zero"), Spec(HEART03, (Cmp(DEC, 1e-8, 1e-10),)),
                      Spec(HEART, (Cmp(DEC, 1e-8, 1e-10),), weights=first_rows_two()),
                      Spec(HEART, (Cmp(DEC, 1e-4, 1e-5, scaled=True),))),
    "MAMC-rbf": Case(md.MAMC, dict(kernel="rbf", gamma=0.5), Spec(HEART03, (Cmp(DEC, 1e-8, 1e-10),)),
                     Spec(HEART, (Cmp(DEC, 1e-8, 1e-10),), kw=dict(gamma="scale"), weights=first_rows_two()),
                     Spec(HEART, (Cmp(DEC, 1e-4, 1e-5, scaled=True),))),
    "LSSVM-cholesky": Case(md.LSSVM, {}, Spec(HEART03, (Cmp(DEC, 1e-8, 1e-10),)),
                           Spec(HEART, (Cmp(DEC, 1e-8, 1e-10),), weights=first_rows_two()),
                           Spec(HEART, (Cmp(DEC, 1e-4, 1e-5, scaled=True),))),
    "LSSVM-cg": Case(md.LSSVM, dict(solver="cg", tol=1e-12), Spec(HEART03, (Cmp(DEC, 1e-8, 1e-10),)),
                     Spec(HEART, (Cmp(DEC, 1e-8, 1e-10),), weights=first_rows_two()),
                     Spec(HEART, (Cmp(DEC, 1e-4, 1e-5, scaled=True),))),
    "LSSVM-rbf": Case(md.LSSVM, dict(kernel="rbf", gamma=0.5), Spec(HEART03, (Cmp(DEC, 1e-8, 1e-10),)),
                      Spec(HEART, (Cmp(DEC, 1e-8, 1e-10),), kw=dict(gamma="scale"), weights=first_rows_two()),
                      Spec(HEART, (Cmp(DEC, 1e-4, 1e-5, scaled=True),))),
    # --- FMM
    **{f"FMM{'' if fi else '-no-intercept'}": Case(
        md.FMM, dict(max_iter=200, fit_intercept=fi),
        Spec(separable(3, 0.5), (Cmp("coef_", 1e-10, 1e-13), Cmp("intercept_", 0, 1e-13),
                                 Cmp("margin_history_", 1e-10))),
        Spec(separable(4), (Cmp("coef_", 1e-10, 1e-13),), kw=dict(max_iter=150), weights=integers(4, 1, 4),
             weights_matter=True),
        Spec(separable(3, 0.5), (Cmp("coef_", 1e-3, 1e-5),), dtype_attrs=("coef_",)))
       for fi in (True, False)},
    # --- multi-class wrapping (one-vs-rest / one-vs-one) where an estimator shares work between
    # the binary problems (LDM's factorisation, kernel rows) or merges their models
    **{name: _multiclass(est, kw, cmp, f32) for name, (est, kw, cmp, f32) in MULTICLASS.items()},
}
NAMES = sorted(CASES)


def _skip_unless(prop):
    """The parameters of a property test: every configuration, a reasoned skip where it lacks the
    property."""
    out = []
    for name in NAMES:
        spec = getattr(CASES[name], prop)
        out.append(pytest.param(name, marks=pytest.mark.skip(reason=spec)) if isinstance(spec, str) else name)
    return out


def _fit(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, **kw)


# ---------------------------------------------------------------------------------------------
# the properties


@pytest.mark.parametrize("name", _skip_unless("csr"))
def test_dense_equals_csr(name):
    case = CASES[name]
    spec = case.csr
    X, y = spec.data()
    Xs = sp.csr_matrix(X)
    dense = _fit(case.make(**spec.kw), X, y)
    csr = _fit(case.make(**spec.kw), Xs, y)
    _assert_close(csr, dense, spec.cmp, Xs, X, name)


@pytest.mark.parametrize("name", _skip_unless("weights"))
def test_sample_weights_equal_repeated_rows(name):
    case = CASES[name]
    spec = case.weights
    X, y = spec.data()
    w = spec.weights(y)
    rep = np.repeat(np.arange(len(y)), w.astype(int))
    weighted = _fit(case.make(**spec.kw), X, y, sample_weight=w)
    repeated = _fit(case.make(**spec.kw), X[rep], y[rep])
    Xe = X if spec.evaluate is None else spec.evaluate
    _assert_close(weighted, repeated, spec.cmp, Xe, Xe, name)
    if spec.weights_matter:  # the weights change the model
        plain = _fit(case.make(**spec.kw), X, y)
        assert not np.allclose(weighted.coef_, plain.coef_)


@pytest.mark.parametrize("name", _skip_unless("f32"))
def test_float32_equals_float64(name):
    case = CASES[name]
    spec = case.f32
    X, y = spec.data()
    X32 = X.astype(np.float32)
    f64 = _fit(case.make(**spec.kw), X, y)
    fits = [(_fit(case.make(**spec.kw), X32, y), X32)]
    if spec.csr32:
        fits.append((_fit(case.make(**spec.kw), sp.csr_matrix(X32), y), sp.csr_matrix(X32)))
    for f32, X_in in fits:
        for attr in spec.dtype_attrs:
            assert getattr(f32, attr).dtype == np.float32, attr
        _assert_close(f32, f64, spec.cmp, X, X, name)
        if spec.min_agreement is not None:
            for X_eval in (X, X_in):
                agreement = np.mean(f32.predict(X_eval) == f64.predict(X_eval))
                assert agreement == 1.0 if spec.min_agreement == 1.0 else agreement > spec.min_agreement


def _fitted_state(est):
    return {k: v for k, v in vars(est).items() if k.endswith("_") and isinstance(v, np.ndarray)}


def _assert_same_model(a, b, X):
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    state_a, state_b = _fitted_state(a), _fitted_state(b)
    assert state_a.keys() == state_b.keys()
    for k in state_a:
        np.testing.assert_array_equal(state_a[k], state_b[k], err_msg=k)


def _det_data(case):
    spec = next(s for s in (case.det, case.csr, case.weights) if isinstance(s, Spec))
    X, y = spec.data()
    return X, y, spec.kw


@pytest.mark.parametrize("name", NAMES)
def test_fixed_random_state_gives_the_same_model(name):
    case = CASES[name]
    X, y, kw = _det_data(case)
    params = case.make(**kw).get_params()
    seed = {"random_state": 3} if "random_state" in params else {}
    a = _fit(case.make(**{**kw, **seed}), X, y)
    b = _fit(case.make(**{**kw, **seed}), X, y)
    _assert_same_model(a, b, X)
    if case.seeded:  # another seed gives another model
        c = _fit(case.make(**{**kw, "random_state": 4}), X, y)
        what = "coef_" if hasattr(a, "coef_") else DEC
        assert not np.allclose(_value(a, what, X), _value(c, what, X))


@pytest.mark.parametrize("name", NAMES)
def test_pickle_round_trip(name):
    case = CASES[name]
    X, y, kw = _det_data(case)
    est = _fit(case.make(**kw), X, y)
    _assert_same_model(pickle.loads(pickle.dumps(est)), est, X)
