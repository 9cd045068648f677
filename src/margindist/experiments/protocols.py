"""Experiment protocols: which data, how it is split, how it is preprocessed.

A :class:`Protocol` describes the outer resampling of a paper's experiment (repeated random
stratified train/test splits, fixed train/test sizes in the style of Rätsch's benchmark, or
stratified k-fold cross-validation repeated several times), the preprocessing fitted on the
training part only (min-max scaling to [0, 1] or standardisation; optionally an appended
constant feature for the bias) and how hyperparameters are chosen (k-fold CV on the training
part of every split, or the rule "CV on the first few realisations, the median of their
choices for all").

Every split is a pure function of the master seed, the dataset and the split index
(:func:`derive_seed`), never of the order in which splits are computed, so a run can be
resumed or spread over many processes and still give the same numbers.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import scipy.sparse as sp

__all__ = [
    "DatasetSpec",
    "Protocol",
    "derive_seed",
    "load_data",
    "parse_dataset",
    "preprocess",
    "stable_hash",
]

SCHEMES = ("random", "fixed", "kfold")
SCALINGS = ("minmax", "standard", None)
SELECTIONS = ("per_split", "median_first")


def _canonical(obj):
    """JSON-able canonical form (dataclasses, tuples, numpy scalars)."""
    if hasattr(obj, "to_dict"):
        return _canonical(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def stable_hash(obj, length: int = 16) -> str:
    """Hex digest of the canonical JSON of ``obj``; equal across processes and machines."""
    text = json.dumps(_canonical(obj), sort_keys=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def derive_seed(*parts) -> int:
    """A 32-bit seed from the master seed and a task's identity (strings, ints).

    It depends on the parts only, so every split / estimator gets the same random numbers
    whatever the order or the process in which it runs.
    """
    digest = hashlib.sha256(json.dumps(_canonical(list(parts))).encode()).digest()
    return int.from_bytes(digest[:4], "little")


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset of an experiment.

    Parameters
    ----------
    name : str
        Key of the dataset in tables and in the result store.
    source : str, optional
        Name (or path) given to :func:`margindist.datasets.load_dataset`; default ``name``.
    positive : tuple of str, optional
        Binarise: these labels (compared as strings) become the positive class, all others
        the negative class (a one-vs-rest task such as digits "5 vs rest").
    classes : tuple of str, optional
        Keep only the examples with these labels (compared as strings), e.g. a pair of letters
        for a one-vs-one task; applied before ``positive``.
    label : str, optional
        Display name (e.g. the paper's name, "diabetes (pima)").
    train_size, test_size : int, optional
        Per-dataset fixed sizes for ``Protocol(scheme="fixed")`` (Rätsch benchmark style).
    note : str
        Shown in the report (e.g. how the set differs from the paper's).
    """

    name: str
    source: str | None = None
    positive: tuple | None = None
    classes: tuple | None = None
    label: str | None = None
    train_size: int | None = None
    test_size: int | None = None
    note: str = ""

    @property
    def loader_name(self) -> str:
        return self.source or self.name

    @property
    def display(self) -> str:
        return self.label or self.name

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("label")  # display only: not part of the identity of results
        d.pop("note")
        d["positive"] = list(self.positive) if self.positive is not None else None
        if self.classes is None:
            d.pop("classes")  # keeps the identity of existing results unchanged
        else:
            d["classes"] = list(self.classes)
        return d


def parse_dataset(text: str) -> DatasetSpec:
    """``"name"`` or ``"name:LABELS"``, LABELS a comma-free list joined by ``+`` (positive class).

    ``"digits:5"`` is digits 5-vs-rest, ``"splice:EI+IE"`` EI and IE against N.
    """
    name, sep, pos = text.partition(":")
    if not sep:
        return DatasetSpec(name=text)
    labels = tuple(p for p in pos.split("+") if p)
    if not name or not labels:
        raise ValueError(f"bad dataset spec {text!r}: use NAME or NAME:LABEL[+LABEL...].")
    return DatasetSpec(name=text, source=name, positive=labels)


_DATA_CACHE: dict = {}
_DATA_LOCK = threading.Lock()


def load_data(spec: DatasetSpec, data_dir=None):
    """(X, y) of a dataset spec, cached per process (the arrays must not be modified).

    Binarised specs give y in {-1, +1} (+1 the ``positive`` labels). Raises
    :class:`margindist.datasets.DatasetNotFoundError` when the data is not available offline.
    """
    from ..datasets import load_dataset

    key = (spec.loader_name, spec.positive, spec.classes, None if data_dir is None else str(data_dir))
    with _DATA_LOCK:
        hit = _DATA_CACHE.get(key)
    if hit is not None:
        return hit
    X, y = load_dataset(spec.loader_name, data_dir=data_dir, allow_download=False)
    for wanted in (spec.classes, spec.positive):
        if wanted is None:
            continue
        known = set(np.unique(np.asarray(y).astype(str)))
        missing = [p for p in wanted if p not in known]
        if missing:
            raise ValueError(
                f"dataset {spec.name!r}: label(s) {missing} not in {spec.loader_name!r} "
                f"(labels: {sorted(known)[:30]})."
            )
    if spec.classes is not None:
        keep = np.isin(np.asarray(y).astype(str), list(spec.classes))
        X, y = X[keep], np.asarray(y)[keep]
    if spec.positive is not None:
        labels = np.asarray(y).astype(str)
        known = set(np.unique(labels))
        missing = [p for p in spec.positive if p not in known]
        if missing:
            raise ValueError(
                f"dataset {spec.name!r}: label(s) {missing} not in {spec.loader_name!r} "
                f"(labels: {sorted(known)[:30]})."
            )
        y = np.where(np.isin(labels, list(spec.positive)), 1, -1)
    if not sp.issparse(X):
        X = np.ascontiguousarray(X, dtype=np.float64)
        X.setflags(write=False)
    y = np.asarray(y)
    y.setflags(write=False)
    with _DATA_LOCK:
        _DATA_CACHE[key] = (X, y)
    return X, y


def _resolve_size(value, n_features: int):
    """An int, a float, None, or a string like ``"10d"`` (10 times the number of features)."""
    if isinstance(value, str):
        if value.endswith("d"):
            return int(float(value[:-1] or 1) * n_features)
        raise ValueError(f"bad size {value!r}: use an int, a fraction or 'Kd'.")
    return value


@dataclass(frozen=True)
class Protocol:
    """Outer resampling, preprocessing and model selection of an experiment.

    Parameters
    ----------
    scheme : {"random", "fixed", "kfold"}
        ``"random"``: ``n_repeats`` stratified random splits with a training fraction
        ``train_size`` (0.8: the 80/20 splits of MSVMAv; 0.5: the half/half splits of LDM).
        ``"fixed"``: stratified random subsets of fixed sizes ``train_size`` / ``test_size``
        (or the dataset's own sizes), Rätsch's benchmark style. ``"kfold"``: stratified
        ``n_folds``-fold CV repeated ``n_repeats`` times with fresh shuffles (M3SVM); split
        ``r * n_folds + f`` is fold f of run r.
    train_size, test_size : float, int or None
        Fractions for "random" (test default: the rest), counts for "fixed".
    n_repeats : int
        Random splits / realisations / k-fold runs.
    n_folds : int
        Outer folds of the "kfold" scheme.
    scaling : {"minmax", "standard", None}
        Fitted on the training part of each split only: min-max to [0, 1] (max-abs scaling
        for sparse input, which keeps it sparse) or standardisation.
    append_bias : bool
        Append a constant-1 feature after scaling (where a paper models the bias that way and
        the estimator does not do it itself).
    cv_folds : int
        Folds of the stratified inner CV on the training part that chooses hyperparameters.
    selection : {"per_split", "median_first"}
        ``"per_split"``: CV on every split. ``"median_first"``: CV on the first
        ``selection_splits`` splits, then the per-parameter median of their choices (as grid
        positions) for all splits (Aiolli et al.'s rule for the Rätsch benchmark).
    balanced : bool
        Equal class counts in training and test sets (margin pursuit): per class,
        ``floor(train_size * smallest class)`` training examples, capped by ``max_train``,
        and an equal number per class of the remaining examples for the test set.
    max_train : int or str, optional
        Cap on the training set size (a stratified subsample; ``"10d"``: 10 x features).
        The examples left out are not used.
    seed : int
        Master seed: splits, inner CV folds and estimator seeds derive from it and the task.
    warm_start : bool
        Warm-start estimators that support it along the grid during CV.
    """

    scheme: str = "random"
    train_size: float | int | None = 0.8
    test_size: float | int | None = None
    n_repeats: int = 30
    n_folds: int = 5
    scaling: str | None = "minmax"
    append_bias: bool = False
    cv_folds: int = 5
    selection: str = "per_split"
    selection_splits: int = 5
    balanced: bool = False
    max_train: int | str | None = None
    seed: int = 0
    warm_start: bool = True

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}; got {self.scheme!r}.")
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}; got {self.scaling!r}.")
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}; got {self.selection!r}.")
        if self.n_repeats < 1 or self.cv_folds < 2 or self.n_folds < 2:
            raise ValueError("n_repeats must be >= 1, cv_folds and n_folds >= 2.")

    @property
    def n_splits(self) -> int:
        return self.n_repeats * (self.n_folds if self.scheme == "kfold" else 1)

    def with_(self, **changes) -> Protocol:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        d = asdict(self)
        # number of repeats does not change any individual split: keep it out of the identity
        d.pop("n_repeats")
        if self.selection == "per_split":
            d.pop("selection_splits")
        return d

    def describe(self, datasets=(), searched: bool = True) -> str:
        """One paragraph in words, for reports."""
        if self.scheme == "random":
            tr = self.train_size if self.train_size is not None else 0.8
            te = self.test_size if self.test_size is not None else 1 - tr
            what = (f"{self.n_repeats} stratified random splits, {tr:g} of the examples for "
                    f"training and {te:g} for testing")
        elif self.scheme == "fixed":
            sizes = ", ".join(f"{d.name} {d.train_size}/{d.test_size}" for d in datasets
                              if d.train_size is not None)
            what = (f"{self.n_repeats} realisations with fixed training/test sizes"
                    + (f" ({sizes})" if sizes else f" ({self.train_size}/{self.test_size})"))
        else:
            what = f"stratified {self.n_folds}-fold cross-validation, {self.n_repeats} runs"
        if self.balanced:
            what += ", balanced classes"
        if self.max_train is not None:
            what += f", at most {self.max_train} training examples"
        prep = {"minmax": "features min-max scaled to [0, 1] on the training part",
                "standard": "features standardised on the training part",
                None: "features unscaled"}[self.scaling]
        if self.append_bias:
            prep += ", constant 1 appended"
        if not searched:
            sel = "fixed hyperparameters (no search)"
        elif self.selection == "per_split":
            sel = f"hyperparameters by stratified {self.cv_folds}-fold CV on each training part"
        else:
            sel = (f"hyperparameters by stratified {self.cv_folds}-fold CV on the first "
                   f"{self.selection_splits} realisations, the median of their choices used for all")
        return f"{what}; {prep}; {sel}; master seed {self.seed}."

    # ------------------------------------------------------------------ splits
    def split(self, y, split_index: int, dataset: DatasetSpec | str, n_features: int):
        """(train_idx, test_idx) of split ``split_index`` of a dataset with labels ``y``."""
        from sklearn.model_selection import StratifiedKFold, StratifiedShuffleSplit

        name = dataset.name if isinstance(dataset, DatasetSpec) else str(dataset)
        y = np.asarray(y)
        n = y.shape[0]
        if not 0 <= split_index < self.n_splits:
            raise ValueError(f"split {split_index} out of range 0..{self.n_splits - 1}.")
        max_train = _resolve_size(self.max_train, n_features)
        if self.scheme == "kfold":
            run, fold = divmod(split_index, self.n_folds)
            seed = derive_seed(self.seed, "kfold", name, run)
            skf = StratifiedKFold(self.n_folds, shuffle=True, random_state=seed)
            train, test = list(skf.split(np.zeros(n), y))[fold]
            return self._cap(np.sort(train), y, max_train, name, split_index), np.sort(test)
        seed = derive_seed(self.seed, "split", name, split_index)
        if self.balanced:
            return self._balanced(y, seed, max_train)
        if self.scheme == "fixed":
            tr = dataset.train_size if isinstance(dataset, DatasetSpec) and dataset.train_size else self.train_size
            te = dataset.test_size if isinstance(dataset, DatasetSpec) and dataset.test_size else self.test_size
            tr, te = int(tr), (int(te) if te is not None else n - int(tr))
            if tr + te > n:
                raise ValueError(f"{name}: train {tr} + test {te} > {n} examples.")
        else:
            tr = self.train_size if self.train_size is not None else 0.8
            te = self.test_size
        sss = StratifiedShuffleSplit(n_splits=1, train_size=tr, test_size=te, random_state=seed)
        train, test = next(sss.split(np.zeros(n), y))
        return self._cap(np.sort(train), y, max_train, name, split_index), np.sort(test)

    def _cap(self, train, y, max_train, name, split_index):
        if max_train is None or train.size <= max_train:
            return train
        from sklearn.model_selection import train_test_split

        seed = derive_seed(self.seed, "cap", name, split_index)
        kept, _ = train_test_split(train, train_size=int(max_train), stratify=y[train], random_state=seed)
        return np.sort(kept)

    def _balanced(self, y, seed, max_train):
        rng = np.random.default_rng(seed)
        classes, counts = np.unique(y, return_counts=True)
        frac = self.train_size if self.train_size is not None and self.train_size < 1 else 0.5
        per_class = int(np.floor(counts.min() * frac))
        if max_train is not None:
            per_class = min(per_class, int(max_train) // classes.size)
        if per_class < 1:
            raise ValueError("balanced split: the smallest class is too small.")
        perms = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
        test_per_class = min(p.size - per_class for p in perms)
        if self.test_size is not None and self.test_size >= 1:
            test_per_class = min(test_per_class, int(self.test_size) // classes.size)
        train = np.concatenate([p[:per_class] for p in perms])
        test = np.concatenate([p[per_class:per_class + test_per_class] for p in perms])
        return np.sort(train), np.sort(test)


def preprocess(X_train, X_test, scaling, append_bias):
    """Scale with statistics of ``X_train`` only; optionally append a constant-1 column."""
    if scaling is not None:
        from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, StandardScaler

        if scaling == "minmax":
            scaler = MaxAbsScaler() if sp.issparse(X_train) else MinMaxScaler()
        else:
            scaler = StandardScaler(with_mean=not sp.issparse(X_train))
        X_train = scaler.fit_transform(X_train)
        X_test = scaler.transform(X_test)
    if append_bias:
        if sp.issparse(X_train):
            X_train = sp.hstack([X_train, np.ones((X_train.shape[0], 1))], format="csr")
            X_test = sp.hstack([X_test, np.ones((X_test.shape[0], 1))], format="csr")
        else:
            X_train = np.hstack([X_train, np.ones((X_train.shape[0], 1))])
            X_test = np.hstack([X_test, np.ones((X_test.shape[0], 1))])
    return X_train, X_test


@dataclass
class SplitData:
    """The arrays of one split after preprocessing (used by the tasks)."""

    X_train: object
    y_train: np.ndarray
    X_test: object
    y_test: np.ndarray
    n_features: int
    meta: dict = field(default_factory=dict)


def make_split(protocol: Protocol, spec: DatasetSpec, split_index: int, data_dir=None) -> SplitData:
    X, y = load_data(spec, data_dir)
    train, test = protocol.split(y, split_index, spec, X.shape[1])
    X_train, X_test = preprocess(X[train], X[test], protocol.scaling, protocol.append_bias)
    return SplitData(X_train, y[train], X_test, y[test], X.shape[1],
                     {"n_train": int(train.size), "n_test": int(test.size)})
