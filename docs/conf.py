"""Sphinx configuration of the margindist documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -b html docs docs/_build/html``.
``-D plot_gallery=0`` renders the gallery without running the examples;
``MARGINDIST_DOCS_INTERSPHINX=1`` links to the NumPy, SciPy, scikit-learn and matplotlib docs
(needs the network).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "src" / "margindist").is_dir():  # a checkout: document its sources
    sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("MPLBACKEND", "Agg")

import margindist  # noqa: E402

project = "margindist"
author = "margindist developers"
copyright = "2026, margindist developers"
release = margindist.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip", "auto_examples/*.json",
                    "auto_examples/*.md5", "sg_execution_times.rst",
                    # the runs' reports are included by their reproduction pages
                    "reproductions/*/report.md"]
suppress_warnings = ["myst.header", "config.cache"]

# The optional torch back end is documented without torch installed.
autodoc_mock_imports = [] if importlib.util.find_spec("torch") else ["torch"]
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"
autosummary_generate = False

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
    "numpy": ("https://numpy.org/doc/stable/", None),
    "scipy": ("https://docs.scipy.org/doc/scipy/", None),
    "sklearn": ("https://scikit-learn.org/stable/", None),
    "matplotlib": ("https://matplotlib.org/stable/", None),
}
# Links into these projects' documentation need their inventories from the network: set
# MARGINDIST_DOCS_INTERSPHINX=1 to fetch them. The default build (and CI) works offline.
intersphinx_timeout = 5
if os.environ.get("MARGINDIST_DOCS_INTERSPHINX", "0") != "1":
    intersphinx_mapping = {}

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    # Only plot_*.py run during the build (each a few seconds); the two long scripts are shown.
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py|/_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "matplotlib_animations": False,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "min_reported_time": 10**9,
}

html_theme = "pydata_sphinx_theme"
html_title = f"margindist {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []
html_show_sourcelink = False

warnings.filterwarnings("ignore", category=UserWarning,
                        message="Matplotlib is currently using agg")
