"""Parameter constraints shared by the estimators (scikit-learn's parameter validation)."""

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

KERNEL = [StrOptions({"linear", "rbf", "poly", "sigmoid", "precomputed"}), callable]
GAMMA = [StrOptions({"scale", "auto"}), Interval(Real, 0, None, closed="neither")]
DEGREE = [Interval(Integral, 1, None, closed="left")]
COEF0 = [Real]
CLASS_WEIGHT = [StrOptions({"balanced"}), dict, None]
MULTI_CLASS = [StrOptions({"ovr", "ovo"})]
N_JOBS = [Integral, None]
VERBOSE = ["verbose"]
RANDOM_STATE = ["random_state"]
POSITIVE = [Interval(Real, 0, None, closed="neither")]
NON_NEGATIVE = [Interval(Real, 0, None, closed="left")]
POSITIVE_INT = [Interval(Integral, 1, None, closed="left")]
CACHE_SIZE = [Interval(Real, 0, None, closed="neither")]
#: None (exact kernel), a number of Nyström landmarks, or "auto" (see ``_base.approximation_components``).
KERNEL_APPROXIMATION = [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None]
LANDMARKS = [StrOptions({"uniform", "kmeans++"})]
#: Where kernel blocks are computed (None: NumPy; else a PyTorch device, see ``_base.kernel_device``).
DEVICE = [StrOptions({"auto", "cpu", "cuda"}), None]

#: The kernel-related constraints, for estimators that take a kernel.
KERNEL_PARAMS = {
    "kernel": KERNEL,
    "gamma": GAMMA,
    "degree": DEGREE,
    "coef0": COEF0,
    "device": DEVICE,
}

#: class_weight, multi_class, n_jobs: every binary-native estimator takes them.
MULTICLASS_PARAMS = {
    "class_weight": CLASS_WEIGHT,
    "multi_class": MULTI_CLASS,
    "n_jobs": N_JOBS,
}
