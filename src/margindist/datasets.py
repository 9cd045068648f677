"""Load the datasets of the margin-distribution literature.

:func:`load_dataset` takes a file path or a dataset name and looks, in this order:

1. a file path (``.csv``, ``.csv.gz``, LIBSVM/svmlight ``.svm``/``.libsvm``/``.svmlight``/``.txt``,
   KEEL ``.dat``, ``.arff``);
2. the data directories: the ``data_dir`` argument, then every directory of the environment
   variable ``MARGINDIST_DATA`` (``os.pathsep``-separated), for ``<name>.csv``, ``.csv.gz``,
   ``.dat``, ``.arff``, ``.svm``, ``.libsvm``, ``.svmlight``;
3. the datasets bundled with the package (the KEEL-derived sets used by the papers:
   australian, german, wdbc, pima, titanic, sonar, heart, ionosphere, haberman, banana, magic
   and more; see :func:`list_datasets`), so the main experiments run offline;
4. scikit-learn's built-ins ``breast_cancer``, ``iris``, ``wine``, ``digits``;
5. OpenML by name, cached under ``MARGINDIST_CACHE`` (default ``~/.cache/margindist``), when
   online. Offline, the error says where to put the file.

A name that is not found locally but is close to a local one (a typo such as
``"australain"``) raises :class:`DatasetNotFoundError` at once with the suggestion ("did you
mean 'australian'?"), without a network call; only names not close to any local dataset are
looked up on OpenML. The prefix ``openml:`` (``load_dataset("openml:heart-c")``) always goes to
OpenML, for OpenML datasets whose names resemble a local one.

CSV format (as in the project's data directory): a header row, numeric feature columns and
a last column ``label`` (integers or strings). Labels that are all integers load as ints.
A malformed file raises :class:`DatasetFormatError` naming the file and the line.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from ._validation import close_matches

__all__ = ["DatasetFormatError", "DatasetNotFoundError", "close_names", "data_dirs", "known_names", "list_datasets",
           "load_dataset"]

BUNDLED_DIR = Path(__file__).resolve().parent / "data"
_SKLEARN_BUILTINS = ("breast_cancer", "iris", "wine", "digits")
_NAME_EXTENSIONS = (".csv", ".csv.gz", ".dat", ".arff", ".svm", ".libsvm", ".svmlight")
_SVMLIGHT_EXT = (".svm", ".libsvm", ".svmlight", ".txt")
_OPENML_PREFIX = "openml:"
#: Similarity (difflib ratio, case-insensitive) from which a name counts as a typo of a local
#: dataset: no OpenML look-up, an immediate error with the suggestion. "australain" vs
#: "australian" is 0.9; OpenML's "heart-c" vs the bundled "heart" is 0.83 and still goes online.
_TYPO_CUTOFF = 0.85
#: Looser similarity for the suggestions added to a "not found" message.
_HINT_CUTOFF = 0.6


class DatasetFormatError(ValueError):
    """A dataset file could not be parsed; the message names the file and the line."""


class DatasetNotFoundError(FileNotFoundError):
    """No dataset of that name was found in any source."""


def data_dirs(data_dir=None) -> list[Path]:
    """The data directories searched, in order: ``data_dir`` then ``MARGINDIST_DATA``."""
    dirs = []
    if data_dir is not None:
        dirs.append(Path(data_dir).expanduser())
    for part in os.environ.get("MARGINDIST_DATA", "").split(os.pathsep):
        if part.strip():
            dirs.append(Path(part.strip()).expanduser())
    return dirs


def _cache_dir() -> Path:
    return Path(os.environ.get("MARGINDIST_CACHE", Path.home() / ".cache" / "margindist")).expanduser()


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _convert_labels(labels: list[str]) -> np.ndarray:
    arr = np.asarray(labels)
    try:
        as_int = arr.astype(np.int64)
        if np.all(as_int.astype(str) == np.char.lstrip(arr, "+")):
            return as_int
    except ValueError:
        pass
    return arr.astype(str)


def _locate_bad_row(path: Path, rows: list[str], first_line: int, n_cols: int):
    """Line number (1-based, in the file) and reason of the first unparsable feature row."""
    for r, row in enumerate(rows):
        fields = row.split(",")
        if len(fields) != n_cols:
            return first_line + r, f"expected {n_cols} feature values, found {len(fields)}"
        for c, v in enumerate(fields):
            try:
                x = float(v)
            except ValueError:
                return first_line + r, f"column {c + 1}: {v.strip()!r} is not a number"
            if not np.isfinite(x):
                return first_line + r, f"column {c + 1}: {v.strip()!r} is not finite"
    return None, "unknown parse error"


def read_csv(path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Read a CSV with a header row and the label in the last column."""
    path = Path(path)
    with _open_text(path) as fh:
        header = fh.readline()
        if not header.strip():
            raise DatasetFormatError(f"{path}: line 1: empty file (expected a header row).")
        names = [h.strip() for h in header.rstrip("\n").split(",")]
        if len(names) < 2:
            raise DatasetFormatError(f"{path}: line 1: need at least one feature column and a label column.")
        feat_rows, labels, line_no = [], [], []
        for lineno, line in enumerate(fh, start=2):
            if not line.strip():
                continue
            feats, sep, label = line.rstrip("\r\n").rpartition(",")
            if not sep or not label.strip():
                raise DatasetFormatError(f"{path}: line {lineno}: no label in the last column.")
            feat_rows.append(feats)
            labels.append(label.strip())
            line_no.append(lineno)
    if not feat_rows:
        raise DatasetFormatError(f"{path}: no data rows after the header.")
    n_cols = len(names) - 1
    try:
        X = np.loadtxt(feat_rows, delimiter=",", dtype=np.float64, ndmin=2)
        if X.shape[1] != n_cols:
            raise ValueError("column count")
        if not np.all(np.isfinite(X)):
            raise ValueError("non-finite")
    except ValueError:
        # slow path only to name the line
        bad = None
        for r, row in enumerate(feat_rows):
            ln, why = _locate_bad_row(path, [row], line_no[r], n_cols)
            if ln is not None:
                bad = (ln, why)
                break
        ln, why = bad if bad else (None, "could not parse the feature values")
        where = f"line {ln}: " if ln else ""
        raise DatasetFormatError(f"{path}: {where}{why}.") from None
    return X, _convert_labels(labels), names[:-1]


_ATTR_RE = re.compile(r"@attribute\s+('[^']*'|\"[^\"]*\"|\S+)\s+(.*)$", re.IGNORECASE)


def read_arff(path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Read a dense ARFF or KEEL ``.dat`` file (numeric and nominal attributes).

    The class is the attribute named by ``@outputs`` (KEEL) or else the last attribute.
    Nominal features with two values become one 0/1 column, with more values one-hot columns
    (the conversion used for the project's CSV files). Missing values (``?``) raise.
    """
    path = Path(path)
    attrs: list[tuple[str, list[str] | None]] = []
    outputs = None
    rows: list[tuple[int, list[str]]] = []
    in_data = False
    with _open_text(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.strip()
            if not line or line.startswith("%"):
                continue
            if not in_data:
                low = line.lower()
                if low.startswith("@attribute"):
                    m = _ATTR_RE.match(line)
                    if not m:
                        raise DatasetFormatError(f"{path}: line {lineno}: malformed @attribute.")
                    name, kind = m.group(1).strip("'\""), m.group(2).strip()
                    if kind.startswith("{"):
                        if not kind.endswith("}"):
                            raise DatasetFormatError(f"{path}: line {lineno}: unterminated nominal values.")
                        values = [v.strip().strip("'\"") for v in kind[1:-1].split(",")]
                        attrs.append((name, values))
                    elif kind.split()[0].lower() in ("real", "numeric", "integer"):
                        attrs.append((name, None))
                    else:
                        raise DatasetFormatError(f"{path}: line {lineno}: unsupported attribute type {kind!r}.")
                elif low.startswith("@outputs") or low.startswith("@output"):
                    outputs = line.split(None, 1)[1].strip()
                elif low.startswith("@data"):
                    in_data = True
                continue
            if line.startswith("{"):
                raise DatasetFormatError(f"{path}: line {lineno}: sparse ARFF rows are not supported.")
            fields = [v.strip().strip("'\"") for v in line.split(",")]
            if len(fields) != len(attrs):
                raise DatasetFormatError(
                    f"{path}: line {lineno}: expected {len(attrs)} values, found {len(fields)}."
                )
            rows.append((lineno, fields))
    if not attrs:
        raise DatasetFormatError(f"{path}: no @attribute declarations found.")
    if not rows:
        raise DatasetFormatError(f"{path}: no data rows (missing @data section?).")
    names = [a[0] for a in attrs]
    target = names.index(outputs) if outputs in names else len(attrs) - 1
    columns, feat_names = [], []
    for j, (name, values) in enumerate(attrs):
        if j == target:
            continue
        if values is None:
            col = np.empty(len(rows))
            for r, (lineno, fields) in enumerate(rows):
                try:
                    col[r] = float(fields[j])
                except ValueError:
                    what = "missing value '?'" if fields[j] == "?" else f"{fields[j]!r} is not a number"
                    raise DatasetFormatError(f"{path}: line {lineno}: attribute {name!r}: {what}.") from None
            columns.append(col[:, None])
            feat_names.append(name)
        else:
            codes = np.empty(len(rows), dtype=np.int64)
            for r, (lineno, fields) in enumerate(rows):
                if fields[j] not in values:
                    raise DatasetFormatError(
                        f"{path}: line {lineno}: attribute {name!r}: {fields[j]!r} is not one of {values}."
                    )
                codes[r] = values.index(fields[j])
            if len(values) == 2:
                columns.append(codes[:, None].astype(np.float64))
                feat_names.append(name)
            else:
                columns.append(np.eye(len(values))[codes])
                feat_names.extend(f"{name}={v}" for v in values)
    X = np.hstack(columns) if columns else np.empty((len(rows), 0))
    labels = [fields[target] for _, fields in rows]
    allowed = attrs[target][1]
    for lineno, fields in rows:
        label = fields[target]
        if label == "?":
            raise DatasetFormatError(f"{path}: line {lineno}: missing class label '?'.")
        if allowed is not None and label not in allowed:
            raise DatasetFormatError(
                f"{path}: line {lineno}: class {attrs[target][0]!r}: {label!r} is not one of {allowed}."
            )
    return X, _convert_labels(labels), feat_names


def read_svmlight(path):
    """Read a LIBSVM / svmlight file (sparse CSR features)."""
    from sklearn.datasets import load_svmlight_file

    try:
        X, y = load_svmlight_file(str(path))
    except (ValueError, RuntimeError) as exc:
        raise DatasetFormatError(f"{path}: not a valid LIBSVM/svmlight file: {exc}") from None
    if np.all(y == np.round(y)):
        y = y.astype(np.int64)
    return X, y, [f"f{j}" for j in range(X.shape[1])]


def _read_file(path: Path):
    name = path.name.lower()
    if name.endswith(".csv") or name.endswith(".csv.gz"):
        return read_csv(path)
    if name.endswith(".dat") or name.endswith(".arff"):
        return read_arff(path)
    if name.endswith(_SVMLIGHT_EXT):
        return read_svmlight(path)
    raise DatasetFormatError(
        f"{path}: unknown file type; expected .csv, .csv.gz, .dat (KEEL), .arff or LIBSVM "
        f"({', '.join(_SVMLIGHT_EXT)})."
    )


def _bundled_manifest() -> dict:
    path = BUNDLED_DIR / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _find_in_dirs(name: str, data_dir=None) -> Path | None:
    for d in data_dirs(data_dir):
        for ext in _NAME_EXTENSIONS:
            p = d / f"{name}{ext}"
            if p.is_file():
                return p
    return None


def known_names(data_dir=None) -> list[str]:
    """Names loadable without a network: data directories, bundled datasets, scikit-learn's."""
    names = set(_SKLEARN_BUILTINS)
    names.update(_bundled_manifest())
    if BUNDLED_DIR.is_dir():
        names.update(p.name[: -len(".csv.gz")] for p in BUNDLED_DIR.glob("*.csv.gz"))
    for d in data_dirs(data_dir):
        if not d.is_dir():
            continue
        for p in d.iterdir():
            ext = next((e for e in _NAME_EXTENSIONS if p.name.endswith(e)), None)
            if ext is not None:
                names.add(p.name[: -len(ext)])
    return sorted(names)


def close_names(name: str, data_dir=None, *, cutoff: float = _TYPO_CUTOFF, n: int = 3) -> list[str]:
    """Local dataset names similar to ``name`` (case-insensitive), best first.

    Uses :func:`difflib.get_close_matches` with the given ``cutoff`` (a similarity ratio in
    [0, 1]) over :func:`known_names`.
    """
    return close_matches(name, known_names(data_dir), n=n, cutoff=cutoff)


def _did_you_mean(names: list[str]) -> str:
    quoted = [repr(n) for n in names]
    if len(quoted) == 1:
        return f"did you mean {quoted[0]}?"
    return f"did you mean {', '.join(quoted[:-1])} or {quoted[-1]}?"


def _load_sklearn(name: str):
    from sklearn import datasets as skd

    loader = getattr(skd, f"load_{name}")
    b = loader()
    return np.asarray(b.data, dtype=np.float64), np.asarray(b.target), list(b.get("feature_names", []))


def _load_openml(name: str, allow_download: bool, suggestions=()):
    from sklearn.datasets import fetch_openml

    cache = _cache_dir() / "openml"
    hint = (
        f"Dataset {name!r} was not found in the data directories {[str(d) for d in data_dirs()]}, "
        "among the bundled datasets or scikit-learn's built-ins"
    )
    maybe = f" Or {_did_you_mean(list(suggestions))}" if suggestions else ""
    if not allow_download:
        raise DatasetNotFoundError(
            f"{hint}. Put {name}.csv (header row, label in the last column) into a directory and "
            f"pass data_dir=... or set MARGINDIST_DATA.{maybe}"
        )
    try:
        b = fetch_openml(name=name, data_home=str(cache), as_frame=False, parser="liac-arff")
    except Exception as exc:  # offline, unknown name, server error
        raise DatasetNotFoundError(
            f"{hint}, and fetching it from OpenML failed ({type(exc).__name__}: {exc}). "
            f"Put {name}.csv (header row, label in the last column) into a directory and pass "
            f"data_dir=... or set MARGINDIST_DATA; OpenML downloads are cached in {cache}.{maybe}"
        ) from None
    X = b.data
    if not hasattr(X, "tocsr"):
        try:
            X = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError):
            raise DatasetFormatError(
                f"OpenML dataset {name!r} has non-numeric features; convert it to a numeric CSV first."
            ) from None
    return X, _convert_labels([str(v) for v in b.target]), list(b.feature_names or [])


def load_dataset(name_or_path, data_dir=None, *, return_bunch=False, allow_download=True):
    """Load a classification dataset as (X, y).

    Parameters
    ----------
    name_or_path : str or path-like
        A file path or a dataset name (see the module docstring for the search order). A name
        close to a local dataset's but not equal to one raises :class:`DatasetNotFoundError`
        with the suggestion, without going to OpenML; ``"openml:<name>"`` fetches ``<name>``
        from OpenML whatever is local.
    data_dir : str or path-like, optional
        Directory searched first (before ``MARGINDIST_DATA``).
    return_bunch : bool, default False
        Return a :class:`sklearn.utils.Bunch` with ``data``, ``target``, ``feature_names``,
        ``name``, ``source`` (``"file"``, ``"data_dir"``, ``"bundled"``, ``"sklearn"``,
        ``"openml"``), ``location`` and ``classes`` instead of the tuple.
    allow_download : bool, default True
        Try OpenML when nothing local matches.

    Returns
    -------
    (X, y) or Bunch
        X is a float64 ndarray (a CSR matrix for LIBSVM files), y an int or str array.

    Raises
    ------
    DatasetNotFoundError
        Nothing of that name anywhere, or a near-miss of a local name ("did you mean ...?").
    DatasetFormatError
        A file that cannot be parsed (the message names the file and the line).
    """
    raw = os.fspath(name_or_path)
    path = Path(raw).expanduser()
    if raw.startswith(_OPENML_PREFIX):
        name = raw[len(_OPENML_PREFIX):].strip()
        if not name:
            raise DatasetNotFoundError("'openml:' needs a dataset name after it, e.g. 'openml:credit-g'.")
        X, y, feats = _load_openml(name, allow_download)
        source, location = "openml", str(_cache_dir() / "openml")
    elif path.is_file():
        X, y, feats = _read_file(path)
        name, source, location = re.sub(r"(\.csv)?(\.gz)?$", "", path.stem), "file", str(path)
    else:
        if os.sep in raw or raw.endswith(_NAME_EXTENSIONS + _SVMLIGHT_EXT):
            raise DatasetNotFoundError(f"No such dataset file: {raw}")
        name = raw
        found = _find_in_dirs(name, data_dir)
        if found is not None:
            (X, y, feats), source, location = _read_file(found), "data_dir", str(found)
        elif (BUNDLED_DIR / f"{name}.csv.gz").is_file():
            location = str(BUNDLED_DIR / f"{name}.csv.gz")
            (X, y, feats), source = read_csv(Path(location)), "bundled"
        elif name in _SKLEARN_BUILTINS:
            (X, y, feats), source, location = _load_sklearn(name), "sklearn", f"sklearn.datasets.load_{name}"
        else:
            typo_of = close_names(name, data_dir, cutoff=_TYPO_CUTOFF)
            if typo_of:
                raise DatasetNotFoundError(
                    f"No dataset named {name!r}; {_did_you_mean(typo_of)} (See list_datasets() for "
                    f"what is available; to fetch a dataset of exactly this name from OpenML use "
                    f"'{_OPENML_PREFIX}{name}'.)"
                )
            hints = close_names(name, data_dir, cutoff=_HINT_CUTOFF)
            X, y, feats = _load_openml(name, allow_download, hints)
            source, location = "openml", str(_cache_dir() / "openml")
    if not return_bunch:
        return X, y
    return Bunch(
        data=X,
        target=y,
        feature_names=feats,
        name=name,
        source=source,
        location=location,
        classes=np.unique(y),
        n_samples=X.shape[0],
        n_features=X.shape[1],
    )


def list_datasets(data_dir=None) -> list[dict]:
    """What can be loaded offline, and from where.

    Returns a list of dicts with ``name``, ``source`` (``"data_dir"``, ``"bundled"`` or
    ``"sklearn"``), ``location`` and, where known without reading the file (from a
    ``manifest.json`` beside it), ``n_samples``, ``n_features``, ``n_classes``. A name found in
    several places is listed once, with the source :func:`load_dataset` uses.
    """
    seen: dict[str, dict] = {}
    for d in data_dirs(data_dir):
        if not d.is_dir():
            continue
        manifest = {}
        if (d / "manifest.json").is_file():
            try:
                manifest = json.loads((d / "manifest.json").read_text())
            except json.JSONDecodeError:
                manifest = {}
        for p in sorted(d.iterdir()):
            ext = next((e for e in _NAME_EXTENSIONS if p.name.endswith(e)), None)
            if ext is None:
                continue
            name = p.name[: -len(ext)]
            if name not in seen:
                seen[name] = _entry(name, "data_dir", str(p), manifest.get(name))
    for name, meta in _bundled_manifest().items():
        if name not in seen:
            seen[name] = _entry(name, "bundled", str(BUNDLED_DIR / f"{name}.csv.gz"), meta)
    sk_meta = {
        "breast_cancer": (569, 30, 2),
        "iris": (150, 4, 3),
        "wine": (178, 13, 3),
        "digits": (1797, 64, 10),
    }
    for name, (n, d, k) in sk_meta.items():
        if name not in seen:
            seen[name] = {"name": name, "source": "sklearn", "location": f"sklearn.datasets.load_{name}",
                          "n_samples": n, "n_features": d, "n_classes": k}
    return [seen[k] for k in sorted(seen)]


def _entry(name, source, location, meta):
    out = {"name": name, "source": source, "location": location,
           "n_samples": None, "n_features": None, "n_classes": None}
    if meta:
        out.update(n_samples=meta.get("n"), n_features=meta.get("d"), n_classes=len(meta.get("classes", [])) or None)
    return out
