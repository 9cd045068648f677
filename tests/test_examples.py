"""The scripts in examples/ run end to end (tiny settings) and print what they promise."""

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


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the torch extra")
def test_ism3_digits_example():
    out = _run("ism3_digits.py", "--seeds", "1", "--epochs", "2")
    assert "ISM3" in out and "test" in out


def test_margin_pursuit_example(tmp_path):
    fig, js = tmp_path / "curves.png", tmp_path / "curves.json"
    _run("margin_pursuit_vs_pegasos.py", "--trials", "1", "--passes", "2", "--tasks", "digits",
         "--figure", str(fig), "--json", str(js))
    assert fig.stat().st_size > 0 and js.stat().st_size > 0
