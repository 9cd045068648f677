"""The experimental system of the papers: protocols, CV search, statistics, a resumable result
store, reports, and parallel / Dask execution.

Quick start::

    from margindist.experiments import get_preset, run_experiment, Progress

    exp = get_preset("msvmav-linear", quick=True)
    outcome = run_experiment(exp, "results/msvmav-linear-quick", workers=2, progress=Progress())
    print(outcome.summary.cells[("australian", "SVM")].mean)

or ``margindist reproduce msvmav-linear --quick`` on the command line. A custom comparison::

    from margindist.experiments import Experiment, MethodRun, Protocol, DatasetSpec, pow2

    exp = Experiment("mine", Protocol("random", 0.8, n_repeats=10),
                     [DatasetSpec("heart"), DatasetSpec("sonar")],
                     [MethodRun("svm", grid={"C": pow2(-4, 4, 2)}), MethodRun("mamc")],
                     reference="svm")

See ``docs/experiments.md``.
"""

from ..search import Scaled, cv_search, pow2
from .parallel import dask_available, execute
from .planning import Plan, plan_experiment
from .presets import PRESETS, UnknownPresetError, get_preset, list_presets
from .progress import Progress
from .protocols import (
    DatasetSpec,
    Protocol,
    derive_seed,
    load_data,
    parse_dataset,
    preprocess,
)
from .records import Experiment, MethodRun, Task, TaskRecord
from .registry import (
    SVRClassifier,
    UnknownMethodError,
    estimator_margins,
    get_method,
    list_methods,
    method_status,
)
from .reports import (
    Summary,
    csv_table,
    latex_table,
    markdown_table,
    summarize_experiment,
    write_reports,
)
from .runner import run_experiment
from .running import RunOutcome
from .stats import PairedTest, paired_ttest, summarize, win_tie_loss
from .store import ResultStore
from .tasks import execute_task

__all__ = [
    "PRESETS",
    "DatasetSpec",
    "Experiment",
    "MethodRun",
    "PairedTest",
    "Plan",
    "Progress",
    "Protocol",
    "ResultStore",
    "RunOutcome",
    "SVRClassifier",
    "Scaled",
    "Summary",
    "Task",
    "TaskRecord",
    "UnknownMethodError",
    "UnknownPresetError",
    "csv_table",
    "cv_search",
    "dask_available",
    "derive_seed",
    "estimator_margins",
    "execute",
    "execute_task",
    "get_method",
    "get_preset",
    "latex_table",
    "list_methods",
    "list_presets",
    "load_data",
    "markdown_table",
    "method_status",
    "paired_ttest",
    "parse_dataset",
    "plan_experiment",
    "pow2",
    "preprocess",
    "run_experiment",
    "summarize",
    "summarize_experiment",
    "win_tie_loss",
    "write_reports",
]
