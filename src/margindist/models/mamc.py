"""MAMC: the maximal average margin classifier (Pelckmans, Suykens, De Moor, NIPS 2007)."""

from __future__ import annotations

from sklearn.utils._param_validation import StrOptions

from .._base import BaseMarginClassifier, BinaryModel
from .._params import KERNEL_PARAMS, MULTICLASS_PARAMS
from ..solvers.mamc import mamc_kernel, mamc_linear


class MAMC(BaseMarginClassifier):
    """Maximal average margin classifier.

    Maximises the average margin (1/m) sum_i y_i <w, phi(x_i)> subject to ||w|| <= 1. The
    solution is w proportional to sum_i y_i phi(x_i): a closed form (a Parzen-window
    classifier in the kernel case), O(m d) for the linear model, O(m^2) kernel evaluations for
    a kernel. It has no hyperparameter. The MSVMAv paper reports MAMC as usually the weakest
    method of its tables; that is expected of a classifier that ignores the margin spread.

    The average-margin objective is linear in the bias b, so it does not determine b when the
    classes are unbalanced. ``bias`` makes the choice explicit:

    * ``"midpoint"`` (default): class-balanced; w = (weighted mean of the positive class) -
      (weighted mean of the negative class), normalised, and the threshold halfway between
      the projected class means, b = -(m+ + m-) / 2 with m+, m- the class means of <w, x>;
    * ``"zero"``: the paper's w ∝ sum_i y_i phi(x_i) with b = 0.

    Sample weights enter the (class) means. With ``bias="midpoint"`` each class mean is
    normalised by its own total weight, so a class weight multiplies a class's weights by a
    constant and cancels: ``class_weight`` changes nothing there (the model is already
    class-balanced). It takes effect with ``bias="zero"``.

    Parameters
    ----------
    bias : {"midpoint", "zero"}, default="midpoint"
        Threshold: halfway between the projected class means, or zero (see above).
    kernel : {"linear", "rbf", "poly", "sigmoid", "precomputed"} or callable, default="linear"
        Kernel: scikit-learn's names and definitions, ``"precomputed"`` (X is a Gram
        matrix) or a callable ``k(X, Z)`` returning an (n, m) array.
    gamma : {"scale", "auto"} or float, default="scale"
        Kernel coefficient for rbf / poly / sigmoid (scikit-learn's definition of "scale").
    degree : int, default=3
        Degree of the ``"poly"`` kernel.
    coef0 : float, default=0.0
        Independent term of the ``"poly"`` and ``"sigmoid"`` kernels.
    class_weight : dict or "balanced", default=None
        Multiplies sample weights per class.
    multi_class : {"ovr", "ovo"}, default="ovo"
        Reduction used for more than two classes: one-vs-one (SVC's choice) or one-vs-rest. A
        centroid direction cannot put a class that lies between the others apart from "the
        rest" (three separable blobs on a line: 0.73 training accuracy one-vs-rest, 1.0
        one-vs-one); see the "Defaults" table of the hyperparameters page.
    n_jobs : int, default=None
        Parallel sub-problems (joblib) for more than two classes.
    device : {"auto", "cpu", "cuda"} or None, default=None
        Computes the kernel blocks through PyTorch on this device ("auto": the GPU when torch
        sees one, else NumPy); None: NumPy and numba. The same model to float64 rounding, with
        NumPy fitted state. See "Kernels on a GPU" on the hyperparameters page.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels.
    coef_ : ndarray of shape (n_problems, n_features)
        Weight vectors (linear kernel only). n_problems is 1 for two classes, else the number
        of one-vs-rest or one-vs-one sub-problems.
    intercept_ : ndarray of shape (n_problems,)
        The threshold b (see ``bias``).
    dual_coef_ : ndarray of shape (n_problems, n_SV)
        Kernel expansion coefficients, unit RKHS norm (kernels other than linear).
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors in the training data (kernel models).
    support_vectors_ : ndarray of shape (n_SV, n_features)
        The support vectors (kernel models; empty for ``kernel="precomputed"``).
    n_support_ : ndarray of shape (n_problems,)
        Number of support vectors of each sub-problem (kernel models).
    weight_norm_ : ndarray of shape (n_problems,)
        ||w||, the Euclidean norm of ``coef_`` or the RKHS norm of the kernel expansion; the
        normaliser of :meth:`margins`.
    n_iter_ : int or ndarray of shape (n_problems,)
        0: a closed form.
    problems_ : list of tuple
        One (negative class, positive class) pair of indices into ``classes_`` per
        sub-problem (the negative is None for "the rest" of one-vs-rest): ``[(0, 1)]`` for
        two classes, else one entry per one-vs-rest or one-vs-one sub-problem.
    n_features_in_ : int
        Number of features seen during :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during :meth:`fit` (only when X has string column names).

    See Also
    --------
    KMOMD : ``lam=1`` is the same centroid classifier; smaller ``lam`` moves to the hard margin.
    MSVMAv : Starts from the MAMC direction and lowers the margin semi-variance.
    sklearn.neighbors.NearestCentroid : The same decision rule for the Euclidean distance.

    References
    ----------
    .. [1] K. Pelckmans, J. A. K. Suykens and B. De Moor, "A risk minimization principle for a
       class of Parzen estimators", Advances in Neural Information Processing Systems 20
       (NIPS), 2007.

    Examples
    --------
    >>> from margindist import MAMC, load_dataset
    >>> X, y = load_dataset("australian")
    >>> clf = MAMC().fit(X, y)
    >>> clf.score(X, y) > 0.5
    True
    >>> float(clf.weight_norm_[0])
    1.0
    """

    _needs_psd_kernel = False

    _expected_failed_checks = {
        "check_class_weight_classifiers": (
            "bias='midpoint' is class-balanced by construction: class weights cancel inside "
            "each class mean, so they cannot move the decision towards the heavy class."
        ),
    }

    _parameter_constraints = {
        "bias": [StrOptions({"midpoint", "zero"})],
        **KERNEL_PARAMS,
        **MULTICLASS_PARAMS,
    }

    def __init__(self, bias="midpoint", kernel="linear", gamma="scale", degree=3, coef0=0.0,
                 class_weight=None, multi_class="ovo", n_jobs=None, device=None):
        self.bias = bias
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.device = device

    def _fit_binary(self, problem):
        X, y, sample_weight, kernel = problem.X, problem.y, problem.sample_weight, problem.kernel
        if kernel.is_linear:
            w, b = mamc_linear(X, y, sample_weight, self.bias)
            return BinaryModel(coef=w, intercept=b)
        a, b = mamc_kernel(kernel, X, y, sample_weight, self.bias)
        return BinaryModel(dual_coef=a, intercept=b)
