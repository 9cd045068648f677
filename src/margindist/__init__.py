"""margindist: margin-distribution learning.

Classifiers that optimise statistics of the whole margin distribution (mean, variance,
semi-variance, robust location, pairwise class margins), as scikit-learn estimators, and the
experimental system of the papers that introduced them.
"""

__version__ = "0.1.0"

from .datasets import list_datasets, load_dataset
from .metrics import (
    estimator_margins,
    estimator_weight_norm,
    margin_stats,
    msvmav_bound_term,
    normalized_margins,
    semivariance,
)
from .models.cv import (
    KMOMDCV,
    LDMCV,
    LSSVMCV,
    M3SVMCV,
    ODMCV,
    MarginPursuitCV,
    MSVMAvCV,
)
from .models.fmm import FMM
from .models.kmomd import KMOMD
from .models.ldm import LDM
from .models.lssvm import LSSVM
from .models.m3svm import M3SVM
from .models.mamc import MAMC
from .models.margin_pursuit import MarginPursuit
from .models.msvmav import MSVMAv
from .models.odm import ODM
from .plotting import MarginDistributionDisplay, plot_margin_cdf

__all__ = [
    "FMM",
    "KMOMD",
    "KMOMDCV",
    "LDM",
    "LDMCV",
    "LSSVM",
    "LSSVMCV",
    "M3SVM",
    "M3SVMCV",
    "MAMC",
    "ODM",
    "ODMCV",
    "MSVMAv",
    "MSVMAvCV",
    "MarginDistributionDisplay",
    "MarginPursuit",
    "MarginPursuitCV",
    "__version__",
    "estimator_margins",
    "estimator_weight_norm",
    "list_datasets",
    "load_dataset",
    "margin_stats",
    "msvmav_bound_term",
    "normalized_margins",
    "plot_margin_cdf",
    "semivariance",
]
