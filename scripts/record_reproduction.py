"""Copy a finished ``margindist reproduce`` run into the reproduction record of the docs.

Usage: python scripts/record_reproduction.py RUN_DIR PRESET

RUN_DIR is the ``--out`` directory of a run of PRESET whose every task finished. The report
(``report.md``), its CSVs (``table.csv``: the main table at full precision; ``summary.csv``: one
row per dataset and method; ``results.csv``: one row per split) and its PNG figures go to
``docs/reproductions/PRESET/`` (the figures as 256-colour PNGs, a third of the size); the result
store (``results.sqlite``) and the PDFs stay behind.
The page ``docs/reproductions/PRESET.md`` (the run's record, the verdict per claim of the paper)
is written by hand and includes the copied report; ``tests/test_reproductions.py`` checks that
the committed tables parse back to the numbers of the committed ``results.csv``.
"""

import argparse
import re
import shutil
from pathlib import Path

from PIL import Image

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reproductions"
FILES = ("report.md", "table.csv", "summary.csv", "results.csv")


def main(run_dir: str, preset: str) -> None:
    src = Path(run_dir)
    report = (src / "report.md").read_text(encoding="utf-8")
    if f"# {preset}:" not in report.splitlines()[0]:
        raise SystemExit(f"{src}/report.md is not a report of the preset {preset!r}")
    if "QUICK RUN" in report:
        raise SystemExit(f"{src} is a --quick run: the record keeps the papers' full protocols only")
    dst = DOCS / preset
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for name in FILES:
        shutil.copy2(src / name, dst / name)
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)
    for name in figures:
        with Image.open(src / name) as im:
            im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
                dst / name, optimize=True)
    print(f"{dst}: {len(FILES)} files and {len(figures)} figures")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("preset")
    args = parser.parse_args()
    main(args.run_dir, args.preset)
