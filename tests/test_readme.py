"""The README's example runs as written, and its commands are the ones CI uses."""

import re
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(tmp_path, monkeypatch, capsys):
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "README has no python example"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "MAMC: accuracy" in out and "LSSVM: accuracy" in out
    assert (tmp_path / "margin_cdf.png").stat().st_size > 1000


def test_ci_runs_the_readme_test_command():
    root = README.parent
    script = root / ".ci" / "run"
    awk = re.search(r"cmd=\$\(awk '(.*?)' README.md\)", script.read_text()).group(1)
    cmd = subprocess.run(["awk", awk, str(README)], capture_output=True, text=True, check=True).stdout.strip()
    assert "pytest" in cmd and "pip install" in cmd
    assert cmd in README.read_text()


def test_readme_hyperparameter_table_gives_the_defaults():
    """The "Main hyperparameters" table names each estimator's parameters and their defaults as
    the estimators have them (the backticked literals of its default column)."""
    import ast

    import margindist as md

    text = README.read_text()
    table = text[text.index("## Main hyperparameters"):].split("\n\n")[2]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert len(rows) == 9
    for name, _, params, default, _ in rows:
        est = getattr(md, name.strip("`"))()
        names = re.findall(r"`([^`]*)`", params)
        values = [ast.literal_eval(v) for v in re.findall(r"`([^`]*)`", default)]
        assert len(names) == len(values), name
        got = est.get_params()
        assert {n: got[n] for n in names} == dict(zip(names, values)), name
