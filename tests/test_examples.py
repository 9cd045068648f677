"""The scripts in examples/ run end to end (tiny settings) and print what they promise.

The gallery scripts (``plot_*.py``) are small by design and run as they are; the docs build
renders them (tests/test_docs.py).
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(script, *args):
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow  # runs the script in a subprocess
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the torch extra")
def test_ism3_digits_example():
    out = _run("ism3_digits.py", "--seeds", "1", "--epochs", "2")
    assert "ISM3" in out and "test" in out


@pytest.mark.slow  # runs the script in a subprocess
def test_margin_pursuit_example(tmp_path):
    fig, js = tmp_path / "curves.png", tmp_path / "curves.json"
    _run("margin_pursuit_vs_pegasos.py", "--trials", "1", "--passes", "2", "--tasks", "digits",
         "--figure", str(fig), "--json", str(js))
    assert fig.stat().st_size > 0 and js.stat().st_size > 0


GALLERY = {
    "plot_margin_distributions.py": ["LinearSVC: accuracy", "MSVMAv: accuracy"],
    "plot_grid_search.py": ["best parameters", "test accuracy"],
    "plot_large_sparse.py": ["LinearSVC: test accuracy", "ODM (newton): test accuracy"],
    "plot_kernel_models.py": ["KMOMD (lam=0.1): test accuracy", "support vectors"],
    "plot_paper_table.py": ["W/T/L vs SVM", "table.md"],
    "plot_ism3_loss.py": ["ISM3 (M3SVM softmax): test accuracy"],
    "plot_out_of_core.py": ["LDM: streamed", "MarginPursuit: streamed"],
}


def test_every_gallery_script_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("plot_*.py")) == sorted(GALLERY)


@pytest.mark.slow  # runs the script in a subprocess
@pytest.mark.parametrize("script", sorted(GALLERY))
def test_gallery_example(script, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = _run(script)
    for text in GALLERY[script]:
        assert text in out, (script, text)
