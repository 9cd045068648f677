"""The ``margindist`` command.

Commands:

* ``margindist reproduce <preset>``: re-run one of the papers' experiment tables (``--list``
  names them); ``--quick`` for the minutes-scale version;
* ``margindist bench --datasets ... --methods ... --protocol ...``: any comparison grid;
* ``margindist datasets``: what can be loaded, from where;
* ``margindist methods``: the method registry and which methods are available;
* ``margindist store export DIR FILE`` / ``margindist store import FILE --out DIR``: a run's
  result store as a text file (JSON Lines, gzip for ``.gz``) and back, merged into another
  store, so that a run moves to another machine (or survives the loss of one) without
  recomputing what it finished.

Runs store every finished task in ``<out>/results.sqlite`` at once; running the same command
again resumes (``--force`` recomputes). ``<out>/experiment.json`` fingerprints the experiment: an
``--out`` that holds a different one is refused unless ``--force``, and report files of an
earlier run that a run does not write again are removed. ``--workers N`` runs tasks on N local processes,
``--scheduler ADDRESS`` on a Dask cluster. Progress goes to stderr: a bar on a terminal,
a line every ``--log-interval`` seconds otherwise, nothing with ``--quiet``.

Exit codes: 0 success, 1 runtime failure (some task failed, or an error), 2 usage error
(unknown dataset, method, preset or a bad option; in argparse's style, naming the fix, with
"did you mean" for close names), 130 interrupted (finished work is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from . import __version__

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A bad command line: reported with exit code 2."""


def _err(msg: str) -> None:
    sys.stderr.write(f"margindist: error: {msg}\n")


def _info(args, msg: str) -> None:
    if not getattr(args, "quiet", False):
        sys.stderr.write(f"margindist: {msg}\n")


def _split_list(values) -> list:
    """Accept both ``--x a b`` and ``--x a,b``."""
    out = []
    for v in values or []:
        out += [p for p in v.split(",") if p]
    return out


# ---------------------------------------------------------------------- datasets, methods
def _cmd_datasets(args) -> int:
    from .datasets import list_datasets

    rows = list_datasets(args.data_dir)
    if args.names:
        print("\n".join(r["name"] for r in rows))
        return EXIT_OK

    def fmt(v):
        return "?" if v is None else str(v)

    header = ("name", "n", "d", "classes", "source", "location")
    table = [header] + [
        (r["name"], fmt(r["n_samples"]), fmt(r["n_features"]), fmt(r["n_classes"]), r["source"], r["location"])
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1])
    return EXIT_OK


def _cmd_methods(args) -> int:
    from .experiments.registry import method_status

    rows = method_status()
    w = max(len(r["name"]) for r in rows)
    for r in rows:
        state = "available" if r["available"] else r["status"]
        print(f"{r['name'].ljust(w)}  {r['family'].ljust(12)}  {state}  — {r['description']}")
    return EXIT_OK


# ---------------------------------------------------------------------- running
def _progress(args):
    from .experiments.progress import Progress

    return Progress(quiet=args.quiet, interval=args.log_interval)


def _check_parallel(args):
    if args.workers is not None and args.workers == 0:
        raise UsageError("--workers must be a positive number of processes (or -1 for all cores).")
    if args.scheduler is not None:
        from .experiments.parallel import dask_available

        if args.workers not in (None, 1):
            _info(args, "--scheduler given: the tasks run on the Dask cluster, --workers is ignored")

        if not dask_available():
            raise UsageError('--scheduler needs the Dask "distributed" package: pip install "margindist[dask]"')


def _terminate_as_interrupt():
    """Treat SIGTERM like Ctrl-C while a run is going (a clean stop; the store is durable anyway)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, old)


# ---------------------------------------------------------------------- the output directory
#: The file in ``--out`` that says which experiment the directory holds.
IDENTITY_FILE = "experiment.json"
#: Report files that a run writes whatever its index lists (figures of datasets no longer run).
_REPORT_PATTERNS = ("margins_*.png", "train_time.png")


def _identity(description: dict, summary: str, command: str | None) -> dict:
    """What identifies an experiment in its output directory: a hash of ``description``.

    The description leaves out the number of repeats (``--repeats`` may be raised later, the
    stored splits are reused), so a resumed or extended run matches its directory.
    """
    from .experiments.protocols import stable_hash

    return {"fingerprint": stable_hash(description), "experiment": summary, "command": command}


def _protocol_identity(protocol):
    from dataclasses import replace

    return replace(protocol, n_repeats=1)


def _report_files(out_dir: Path) -> set:
    """Names of the report files of the run that wrote ``out_dir`` (from its index.md, and figures)."""
    import re

    names = set()
    index = out_dir / "index.md"
    if index.is_file():
        names |= set(re.findall(r"\]\(([^)/\\]+)\)", index.read_text(encoding="utf-8", errors="replace")))
        names.add("index.md")
    for pattern in _REPORT_PATTERNS:
        names |= {f.name for f in out_dir.glob(pattern)}
    return {n for n in names if not n.startswith(".") and not n.startswith("results.sqlite") and n != IDENTITY_FILE}


def _check_out(out_dir: Path, identity: dict, force: bool) -> set:
    """Refuse an ``--out`` that holds another experiment (unless ``force``); the old report files."""
    if not out_dir.exists():
        return set()
    if not out_dir.is_dir():
        raise UsageError(f"--out {out_dir} is a file; give a directory (a new one, or that of this experiment)")
    stored = out_dir / IDENTITY_FILE
    if stored.is_file():
        try:
            old = json.loads(stored.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        if old.get("fingerprint") != identity["fingerprint"] and not force:
            what = old.get("experiment") or "an unreadable experiment description"
            by = f", written by `{old['command']}`" if old.get("command") else ""
            raise UsageError(
                f"--out {out_dir} holds a different experiment ({what}{by}); this run is "
                f"{identity['experiment']}. Give another --out DIR, or add --force to replace that "
                "directory's report (--force also recomputes this experiment's stored results; "
                "other results stay in the store)")
    elif not (out_dir / "results.sqlite").exists() and any(out_dir.iterdir()) and not force:
        raise UsageError(f"--out {out_dir} is not empty and holds no margindist results; give a new or empty "
                         "directory, or add --force to write into it")
    return _report_files(out_dir)


def _write_identity(out_dir: Path, identity: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{IDENTITY_FILE}.tmp"
    tmp.write_text(json.dumps(identity, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / IDENTITY_FILE)


def _remove_stale(out_dir: Path, previous: set, written) -> list:
    """Delete the earlier run's report files that this run did not write again."""
    fresh = {name for name, _ in written}
    removed = []
    for name in sorted(previous - fresh):
        path = out_dir / name
        if path.is_file():
            path.unlink()
            removed.append(name)
    return removed


# ---------------------------------------------------------------------- running an experiment
def _execute(args, exp, out_dir: Path, strict: bool, description: dict, what: str, warnings=()) -> int:
    from .experiments.registry import UnsupportedError
    from .experiments.reports import legend, markdown_table, skipped_lines
    from .experiments.runner import plan_experiment, run_experiment
    from .experiments.store import StoreError

    _check_parallel(args)
    if getattr(args, "test", None):
        exp.test = args.test
    argv = getattr(args, "argv", None) or []
    command = "margindist " + " ".join(shlex.quote(a) for a in argv) if argv else None
    try:  # plan before touching --out: a run that cannot start leaves no directory behind
        plan = plan_experiment(exp, args.data_dir, strict=strict)
    except UnsupportedError as exc:
        raise UsageError(str(exc)) from None
    if not plan.pairs:
        reasons = "\n".join(skipped_lines(exp, plan) or ["- no dataset and method to pair"])
        if strict:  # bench: every dataset and method is the user's choice
            raise UsageError("nothing to run (no output written); change --datasets / --methods / --kernel:\n"
                             + reasons)
        _err(f"nothing to run (no output written):\n{reasons}")
        return EXIT_FAILURE
    identity = _identity(description, what, command)
    previous = _check_out(out_dir, identity, args.force)
    for w in warnings:  # shown even with --quiet: they concern the results, not the progress
        sys.stderr.write(f"margindist: warning: {w}\n")
    _write_identity(out_dir, identity)
    if exp.quick:
        from .experiments.reports import quick_description

        _info(args, f"QUICK RUN of {exp.name}: {quick_description(exp)} (not the paper's full protocol)")
    restore = _terminate_as_interrupt()
    try:
        outcome = run_experiment(exp, out_dir, workers=args.workers or 1, scheduler=args.scheduler,
                                 force=args.force, progress=_progress(args), data_dir=args.data_dir,
                                 command=command, strict=strict)
    except UnsupportedError as exc:
        raise UsageError(str(exc)) from None
    except StoreError as exc:
        _err(str(exc))
        return EXIT_FAILURE
    finally:
        restore()
    if outcome.interrupted:
        _err(f"interrupted: {outcome.n_executed} results computed in this run are stored in "
             f"{out_dir / 'results.sqlite'}; run the same command again to resume.")
        return EXIT_INTERRUPTED
    plan = outcome.plan
    removed = _remove_stale(out_dir, previous, outcome.files)
    if removed:
        _info(args, f"removed {len(removed)} report file(s) of the earlier run in {out_dir}: {', '.join(removed)}")
    summary = outcome.summary
    title = f"{exp.name}: {exp.title}" if exp.title else exp.name
    print(f"# {title}" + (" — QUICK RUN (reduced protocol: few splits, small grids)" if exp.quick else ""))
    print()
    print(markdown_table(summary))
    print()
    print(legend(summary, exp))
    skipped = skipped_lines(exp, plan)
    if skipped:
        print("\nNot run:")
        print("\n".join(skipped))
    if outcome.failures:
        print(f"\n{len(outcome.failures)} task(s) failed, e.g. {outcome.failures[0][0]}: {outcome.failures[0][1]}")
    print(f"\n{outcome.n_planned} results ({outcome.n_executed} computed now) in {outcome.elapsed:.1f} s; "
          f"report: {out_dir / 'report.md'} (files listed in {out_dir / 'index.md'})")
    return EXIT_OK if outcome.ok else EXIT_FAILURE


def _select(items, wanted, what, key_names):
    """Filter preset items by names (case-insensitive); unknown names are a usage error."""
    if not wanted:
        return items
    chosen = []
    for w in wanted:
        hits = [it for it in items if w.lower() in {k.lower() for k in key_names(it)}]
        if not hits:
            from .experiments.registry import did_you_mean

            valid = ", ".join(sorted({key_names(it)[0] for it in items}))
            hint = did_you_mean(w, {k for it in items for k in key_names(it) if k})
            raise UsageError(f"unknown {what} {w!r}{hint} for this preset; valid {what}s: {valid}")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def _cmd_reproduce(args) -> int:
    from dataclasses import replace

    from .experiments.presets import PRESETS, UnknownPresetError, get_preset

    if args.list or not args.preset:
        for name, (_, desc) in PRESETS.items():
            print(f"{name.ljust(16)} {desc}")
        return EXIT_OK if args.list else EXIT_USAGE
    try:
        exp = get_preset(args.preset, quick=args.quick)
    except UnknownPresetError as exc:
        raise UsageError(str(exc)) from None
    exp.datasets = _select(exp.datasets, _split_list(args.datasets), "dataset",
                           lambda d: [d.name, d.loader_name, d.display])
    all_methods = exp.methods
    exp.methods = _select(exp.methods, _split_list(args.methods), "method", lambda m: [m.name, m.method])
    if args.reference is None and exp.reference and exp.reference not in [m.name for m in exp.methods]:
        exp.methods = exp.methods + [m for m in all_methods if m.name == exp.reference]
        _info(args, f"the reference method {exp.reference} of the t-tests is added to --methods")
    if args.repeats is not None:
        exp.protocol = replace(exp.protocol, n_repeats=args.repeats)
    if args.reference is not None:
        refs = [m.name for m in exp.methods]
        match = [r for r in refs if r.lower() == args.reference.lower()]
        if not match:
            from .experiments.registry import did_you_mean

            raise UsageError(f"unknown reference {args.reference!r}{did_you_mean(args.reference, refs)}; "
                             f"--reference takes a method of this run: {', '.join(refs)}")
        exp.reference = match[0]
    out = Path(args.out) if args.out else Path("margindist-results") / (exp.name + ("-quick" if exp.quick else ""))
    description, what = reproduce_description(args.preset, exp)
    return _execute(args, exp, out, strict=False, description=description, what=what)


def reproduce_description(preset: str, exp) -> tuple[dict, str]:
    """What identifies a ``reproduce`` run in its output directory, and its summary. The preset
    is the experiment; --datasets / --methods / --reference / --repeats choose what of it a run
    computes and shows, so they do not make the directory another experiment's."""
    description = {"command": "reproduce", "preset": preset, "quick": exp.quick,
                   "protocol": _protocol_identity(exp.protocol)}
    return description, f"reproduce {preset}{' --quick' if exp.quick else ''}"


# ---------------------------------------------------------------------- store export / import
def _store_dir(path: str) -> Path:
    out = Path(path)
    if not (out / "results.sqlite").is_file():
        raise UsageError(f"{out} holds no result store (results.sqlite); give the --out directory of a run")
    return out


def _read_identity(out_dir: Path) -> dict | None:
    try:
        return json.loads((out_dir / IDENTITY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _cmd_store_export(args) -> int:
    from .experiments.store import ResultStore, write_export

    out_dir = _store_dir(args.dir)
    with ResultStore(out_dir / "results.sqlite") as store:  # not exclusive: a run may be writing
        records = store.all_records()
    n = write_export(args.file, records, identity=_read_identity(out_dir))
    n_ok = sum(r["status"] == "ok" for r in records)
    _info(args, f"exported {n} records ({n_ok} ok, {n - n_ok} failed) of {out_dir} to {args.file}")
    return EXIT_OK


def _check_import_target(out_dir: Path, identity: dict | None, force: bool) -> None:
    """Refuse an --out that holds another experiment than the export's, or files that are not a
    run's (unless ``force``)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir} is a file; give a run's output directory or a new one")
    held = _read_identity(out_dir) if out_dir.is_dir() else None
    if force or not out_dir.is_dir():
        return
    if held and identity and held.get("fingerprint") != identity.get("fingerprint"):
        raise UsageError(f"--out {out_dir} holds a different experiment ({held.get('experiment')}) than the "
                         f"export ({identity.get('experiment')}); give another --out, or add --force to merge "
                         "the records anyway")
    if held is None and not (out_dir / "results.sqlite").exists() and any(out_dir.iterdir()):
        raise UsageError(f"--out {out_dir} is not empty and holds no margindist results; give a new or empty "
                         "directory, or add --force")


def _cmd_store_import(args) -> int:
    from .experiments.store import ResultStore, StoreError, read_export

    out_dir = Path(args.out)
    try:
        header, records = read_export(args.file)
    except ValueError as exc:
        _err(str(exc))
        return EXIT_FAILURE
    identity = header.get("identity")
    _check_import_target(out_dir, identity, args.force)
    try:
        with ResultStore(out_dir / "results.sqlite", exclusive=True) as store:
            written, kept = store.merge(records, replace=args.replace)
    except StoreError as exc:
        _err(str(exc))
        return EXIT_FAILURE
    if identity and _read_identity(out_dir) is None:
        _write_identity(out_dir, identity)
    what = f" of {identity['experiment']}" if identity and identity.get("experiment") else ""
    kept_note = f"; {kept} already stored were kept (--replace overwrites them)" if kept and not args.replace else ""
    _info(args, f"imported {written} records{what} into {out_dir / 'results.sqlite'}{kept_note}")
    return EXIT_OK


# ---------------------------------------------------------------------- bench
def _parse_protocol(text: str, args):
    from dataclasses import replace

    from .experiments.presets import PRESETS, get_preset
    from .experiments.protocols import Protocol
    from .experiments.registry import did_you_mean

    kw = {}
    if args.scaling is not None:
        kw["scaling"] = None if args.scaling == "none" else args.scaling
    if args.cv is not None:
        kw["cv_folds"] = args.cv
    if args.seed is not None:
        kw["seed"] = args.seed
    if args.bias:
        kw["append_bias"] = True
    if args.repeats is not None:
        kw["n_repeats"] = args.repeats
    if text in PRESETS:
        return replace(get_preset(text).protocol, **kw)
    parts = text.split(":")
    kw.setdefault("n_repeats", 10)
    try:
        if parts[0] == "random" and len(parts) <= 2:
            return Protocol("random", float(parts[1]) if len(parts) == 2 else 0.8, **kw)
        if parts[0] == "half" and len(parts) == 1:
            return Protocol("random", 0.5, **kw)
        if parts[0] == "fixed" and len(parts) == 3:
            return Protocol("fixed", int(parts[1]), int(parts[2]), **kw)
        if parts[0] == "kfold" and len(parts) <= 2:
            return Protocol("kfold", n_folds=int(parts[1]) if len(parts) == 2 else 5, **kw)
    except ValueError as exc:
        raise UsageError(f"bad --protocol {text!r}: {exc}") from None
    hint = did_you_mean(text, ["random", "half", "fixed", "kfold", *PRESETS])
    raise UsageError(f"unknown --protocol {text!r}{hint}; use random[:TRAIN_FRACTION], half, fixed:N_TRAIN:N_TEST, "
                     f"kfold[:K] or a preset name ({', '.join(PRESETS)})")


def _grid_values(method, key, v):
    from .search import Scaled, pow2

    if isinstance(v, list):
        return tuple(v)
    if isinstance(v, dict) and "scaled" in v:
        return Scaled(tuple(v["factors"]), v["scaled"])
    if isinstance(v, str) and v.startswith("pow2:"):
        nums = [int(x) for x in v.split(":")[1:]]
        if len(nums) not in (2, 3):
            raise UsageError(f"{method}.{key}: use 'pow2:LO:HI[:STEP]'")
        return pow2(*nums)
    return (v,)


def _parse_grid(text, methods):
    from .experiments.registry import did_you_mean

    if not text:
        return {}
    try:
        grid = json.loads(Path(text[1:]).read_text() if text.startswith("@") else text)
    except (json.JSONDecodeError, OSError) as exc:
        raise UsageError(f"--param-grid is not valid JSON (or @FILE, or preset:NAME): {exc}") from None
    if not isinstance(grid, dict):
        raise UsageError("--param-grid must be a JSON object: {\"method\": {\"param\": values}} or {\"param\": values}")
    per_method = bool(grid) and all(isinstance(v, dict) and "scaled" not in v for v in grid.values())
    if per_method:
        for k in grid:
            if k not in methods:
                raise UsageError(f"--param-grid has a grid for {k!r}{did_you_mean(k, methods)}, which is not one of "
                                 f"--methods ({', '.join(methods)}); key the grids by those names")
    out = {}
    for m in methods:
        g = grid.get(m, {}) if per_method else grid
        out[m] = {k: _grid_values(m, k, v) for k, v in g.items()}
    return out


def _preset_grids(name, methods, kernel):
    """``--param-grid preset:NAME``: the grid of each method that the preset runs, and the kernel."""
    from .experiments.presets import UnknownPresetError, get_preset, preset_method_run

    try:
        preset = get_preset(name)
    except UnknownPresetError as exc:
        raise UsageError(f"--param-grid preset:{name}: {exc}") from None
    runs = {m: preset_method_run(name, m) for m in methods}
    runs = {m: r for m, r in runs.items() if r is not None}
    if not runs:
        have = ", ".join(sorted({r.method for r in preset.methods}))
        raise UsageError(f"--param-grid preset:{name} has no grid for any of --methods ({', '.join(methods)}); "
                         f"the preset runs {have}")
    kernels = sorted({r.kernel for r in runs.values()})
    if kernel is None and len(kernels) == 1:
        kernel = kernels[0]
    bad = [m for m, r in runs.items() if r.kernel != (kernel or "linear")]
    if bad:
        want = runs[bad[0]].kernel
        raise UsageError(f"--param-grid preset:{name} has {want}-kernel grids ({', '.join(bad)}) but this run uses "
                         f"--kernel {kernel or 'linear'}; add --kernel {want}, or use a preset of the "
                         f"{kernel or 'linear'} kernel")
    return {m: dict(r.grid) for m, r in runs.items()}, kernel or "linear"


def _bench_grids(args, methods):
    """(kernel, grids, notes per method, warnings): where each method's grid comes from.

    ``--param-grid`` JSON / @FILE / ``preset:NAME``; with ``--cv K``, a method left without a
    grid searches its paper grid (:func:`margindist.experiments.presets.paper_grid`); else no
    search, with a warning for the methods that have something to tune.
    """
    from .experiments.presets import paper_grid, paper_grid_source

    text, kernel = args.param_grid, args.kernel
    notes, warns = {}, []
    if text and text.startswith("preset:"):
        name = text.split(":", 1)[1]
        grids, kernel = _preset_grids(name, methods, kernel)
        for m in grids:
            notes[m] = f"Grid of preset {name}"
        source = f"preset {name}"
    elif text:
        grids = _parse_grid(text, methods)
        source = "--param-grid"
    else:
        grids, source = {}, None
    kernel = kernel or "linear"
    if args.cv is not None:
        for m in methods:
            if not grids.get(m):
                grids[m] = paper_grid(m, kernel)
                if grids[m]:
                    notes[m] = f"Paper grid (preset {paper_grid_source(m, kernel)}), chosen by {args.cv}-fold CV"
    untuned = [m for m in methods if not grids.get(m) and paper_grid(m, kernel)]
    for m in untuned:
        notes[m] = "Untuned: the estimator's default hyperparameters"
    if untuned:
        where = f" ({source} has no grid for {'it' if len(untuned) == 1 else 'them'})" if source else ""
        warns.append(f"{', '.join(untuned)} {'runs' if len(untuned) == 1 else 'run'} untuned, with default "
                     f"hyperparameters{where}: the comparison may not be fair. To tune, add --cv K (a method "
                     "without a grid then searches its paper grid), or give grids with --param-grid preset:NAME "
                     "(a paper's grids) or --param-grid JSON")
    if args.cv is not None and not any(_n_points(g) > 1 for g in grids.values()):
        warns.append(f"--cv {args.cv} has no effect: no method has a grid to search")
    return kernel, grids, notes, warns


def _n_points(grid) -> int:
    from .search import Scaled

    n = 1
    for v in grid.values():
        n *= len(v.factors) if isinstance(v, Scaled) else len(v)
    return n


def _bench_datasets(names, data_dir):
    from .datasets import list_datasets
    from .experiments.protocols import parse_dataset
    from .experiments.registry import did_you_mean

    valid = {r["name"] for r in list_datasets(data_dir)}
    specs = []
    for text in names:
        try:
            spec = parse_dataset(text)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if spec.loader_name not in valid and not Path(spec.loader_name).is_file():
            raise UsageError(f"unknown dataset {spec.loader_name!r}{did_you_mean(spec.loader_name, valid)}; valid "
                             f"datasets: {', '.join(sorted(valid))} (or a file path; NAME:LABEL[+LABEL] for a "
                             "one-vs-rest task)")
        specs.append(spec)
    return specs


def _cmd_bench(args) -> int:
    from .experiments.records import Experiment, MethodRun
    from .experiments.registry import UnknownMethodError, did_you_mean, get_method

    dataset_names, methods = _split_list(args.datasets), _split_list(args.methods)
    if not dataset_names:
        raise UsageError("--datasets is required: name the datasets to compare on, e.g. --datasets heart sonar "
                         "(`margindist datasets --names` lists them)")
    if not methods:
        raise UsageError("--methods is required: name the methods to compare, e.g. --methods svm lssvm odm "
                         "(`margindist methods` lists them)")
    datasets = _bench_datasets(dataset_names, args.data_dir)
    for m in methods:
        try:
            get_method(m)
        except UnknownMethodError as exc:
            raise UsageError(str(exc)) from None
    twice = sorted({m for m in methods if methods.count(m) > 1})
    if twice:
        raise UsageError(f"{', '.join(twice)} listed twice in --methods; list each method once")
    protocol = _parse_protocol(args.protocol, args)
    kernel, grids, notes, warns = _bench_grids(args, methods)
    runs = [MethodRun(m, m, kernel, grids.get(m, {}), note=notes.get(m, "")) for m in methods]
    ref = args.reference
    if ref is not None and ref not in methods:
        raise UsageError(f"--reference {ref!r}{did_you_mean(ref, methods)} is not one of --methods "
                         f"({', '.join(methods)}); give one of them")
    exp = Experiment(name=args.name, protocol=protocol, datasets=datasets, methods=runs,
                     title="custom comparison", reference=ref if ref is not None else methods[0],
                     metric=args.metric, notes=list(warns))
    out = Path(args.out) if args.out else Path("margindist-results") / args.name
    # what gets computed: datasets, methods with their grids, protocol; not the number of repeats
    # (which may be raised later), the order, the reference or the metric (ways of showing the results)
    description = {"command": "bench", "name": exp.name, "protocol": _protocol_identity(protocol),
                   "datasets": sorted(exp.datasets, key=lambda d: d.name),
                   "methods": sorted((r.to_dict("") for r in runs), key=lambda r: r["label"])}
    what = (f"bench {exp.name!r}: {', '.join(methods)} ({kernel}) on {', '.join(d.name for d in datasets)}, "
            f"protocol {args.protocol}")
    return _execute(args, exp, out, strict=True, description=description, what=what, warnings=warns)


# ---------------------------------------------------------------------- parser
def _int_option(ok, requirement):
    """An argparse type: an integer for which ``ok(v)`` holds, else the ``requirement`` message."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(requirement.format(text=repr(text)))
        return v
    return parse


_positive_int = _int_option(lambda v: v >= 1, "{text} must be >= 1")
_cv_folds = _int_option(lambda v: v >= 2, "{text}: inner CV needs at least 2 folds")
_workers = _int_option(lambda v: v >= 1 or v == -1, "must be a positive number of processes, or -1 for all cores")


def _add_run_options(p):
    p.add_argument("--datasets", nargs="+", metavar="NAME", help="datasets (space- or comma-separated)")
    p.add_argument("--methods", nargs="+", metavar="NAME", help="methods (space- or comma-separated)")
    p.add_argument("--repeats", type=_positive_int, default=None, metavar="N",
                   help="number of random splits / realisations / k-fold runs")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output directory (result store + reports); the same DIR resumes a run")
    p.add_argument("--force", action="store_true", help="recompute results already in the store")
    p.add_argument("--workers", type=_workers, default=1, metavar="N",
                   help="local worker processes (default 1; -1: all cores)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="Dask scheduler address (tcp://host:8786): run the tasks on that cluster")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--log-interval", type=float, default=30.0, metavar="S",
                   help="seconds between progress lines when stderr is not a terminal (default 30)")
    p.add_argument("--data-dir", default=None, metavar="DIR", help="extra data directory searched first")
    p.add_argument("--reference", default=None, metavar="METHOD", help="reference method of the t-tests")
    p.add_argument("--test", choices=["paired-t", "corrected-t"], default=None,
                   help="test against the reference on each dataset: the papers' paired t-test (default) or "
                        "the Nadeau-Bengio corrected resampled t-test")


_OUT_EPILOG = ("The same --out resumes the run. An --out that holds a different experiment is refused; --force "
               "replaces its report (and recomputes this experiment's stored results). Report files of the earlier "
               "run that this run does not write again (figures of datasets no longer run) are removed.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="margindist",
        description="Margin-distribution learning: estimators and the papers' experiments.",
        epilog="Exit codes: 0 ok, 1 failures, 2 usage error, 130 interrupted (finished work is kept).",
    )
    parser.add_argument("--version", action="version", version=f"margindist {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("datasets", help="list the datasets that can be loaded, and from where")
    p.add_argument("--data-dir", default=None, help="extra data directory searched first")
    p.add_argument("--names", action="store_true", help="print only the names")
    p.set_defaults(func=_cmd_datasets)

    p = sub.add_parser("methods", help="list the methods of the registry and whether they are available")
    p.set_defaults(func=_cmd_methods)

    p = sub.add_parser(
        "reproduce", help="re-run one of the papers' experiment tables",
        description="Re-run a paper's table (see --list) on the datasets available offline; writes Markdown, "
                    "CSV and LaTeX tables and figures to --out and prints the table beside the paper's numbers.",
        epilog=_OUT_EPILOG,
    )
    p.add_argument("preset", nargs="?", help="preset name (see --list)")
    p.add_argument("--list", action="store_true", help="list the presets")
    p.add_argument("--quick", action="store_true",
                   help="minutes-scale version: few splits, small grids, the main bundled datasets")
    _add_run_options(p)
    p.set_defaults(func=_cmd_reproduce, _parser=p)

    p = sub.add_parser(
        "bench", help="compare any methods on any datasets under a protocol",
        description="Any comparison grid. Example: margindist bench --datasets heart sonar --methods svm lssvm "
                    "mamc --protocol random:0.8 --repeats 10 --param-grid '{\"svm\": {\"C\": \"pow2:-4:4:2\"}, "
                    "\"lssvm\": {\"C\": [0.1, 1, 10]}}'",
        epilog=_OUT_EPILOG,
    )
    _add_run_options(p)
    p.add_argument("--protocol", default="random",
                   help="random[:TRAIN_FRACTION] (default 0.8), half, fixed:N_TRAIN:N_TEST, kfold[:K], "
                        "or a preset name to use its protocol")
    p.add_argument("--kernel", default=None,
                   help="kernel for every method (linear, rbf, ...; default linear, or the kernel of "
                        "--param-grid preset:NAME)")
    p.add_argument("--scaling", choices=["minmax", "standard", "none"], default=None,
                   help="preprocessing fitted on the training part (default minmax)")
    p.add_argument("--bias", action="store_true", help="append a constant-1 feature after scaling")
    p.add_argument("--cv", type=_cv_folds, default=None, metavar="K",
                   help="inner CV folds (default 5); without --param-grid, each method's paper grid is searched")
    p.add_argument("--seed", type=int, default=None, help="master seed (default 0)")
    p.add_argument("--param-grid", default=None, metavar="JSON",
                   help="grids: {\"method\": {\"param\": [values] | \"pow2:LO:HI[:STEP]\"}} or one "
                        "{\"param\": ...} for all methods; @FILE reads the JSON from a file; preset:NAME takes "
                        "the grids of a reproduce preset for the methods it runs")
    p.add_argument("--metric", choices=["accuracy", "error"], default="accuracy", help="table metric")
    p.add_argument("--name", default="bench", help="name of the experiment (title, default output dir)")
    p.set_defaults(func=_cmd_bench, _parser=p)

    p = sub.add_parser("store", help="a run's result store as a text file, and back",
                       description="Carry finished results between machines: export a run's store (while it "
                                   "runs, too) and import it into another run's --out, which then resumes "
                                   "instead of recomputing them.")
    store_sub = p.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    q = store_sub.add_parser("export", help="write DIR's results to FILE (JSON Lines; gzip for a .gz name)")
    q.add_argument("dir", metavar="DIR", help="the --out directory of a run")
    q.add_argument("file", metavar="FILE", help="the file to write (e.g. results.jsonl.gz)")
    q.add_argument("--quiet", action="store_true", help="no summary line")
    q.set_defaults(func=_cmd_store_export, _parser=q)
    q = store_sub.add_parser("import", help="merge the results of FILE into the store of --out DIR")
    q.add_argument("file", metavar="FILE", help="a file written by `margindist store export`")
    q.add_argument("--out", required=True, metavar="DIR", help="the run's output directory (created if new)")
    q.add_argument("--replace", action="store_true", help="the file's record wins where a key is already stored")
    q.add_argument("--force", action="store_true",
                   help="merge into a directory of another experiment, or one with other files")
    q.add_argument("--quiet", action="store_true", help="no summary line")
    q.set_defaults(func=_cmd_store_import, _parser=q)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 0 for --help / --version, 2 for usage errors
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return args.func(args)
    except UsageError as exc:
        sub = getattr(args, "_parser", None)
        if sub is None:
            _err(str(exc))
        else:  # argparse's own style: the command's usage, then "margindist bench: error: ..."
            sub.print_usage(sys.stderr)
            sys.stderr.write(f"{sub.prog}: error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted.")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`margindist datasets | head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout at exit
        return 0
    except Exception as exc:  # noqa: BLE001 - a clean message and exit code 1 for scripts
        _err(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
