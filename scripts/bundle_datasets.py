"""Copy the KEEL-derived CSVs of a data directory into the package, gzip-compressed.

Usage: python scripts/bundle_datasets.py DATA_DIR

DATA_DIR holds the CSV files and their manifest.json.

The three files that come from the M3SVM authors' code (glass, dermatology, cornell) are
never bundled: they are read from a data directory only.
"""

import argparse
import gzip
import json
from pathlib import Path

NOT_BUNDLED = {"glass", "dermatology", "cornell"}


def main(src: str) -> None:
    src_dir = Path(src)
    dest = Path(__file__).resolve().parents[1] / "src" / "margindist" / "data"
    dest.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((src_dir / "manifest.json").read_text())
    kept = {}
    for name, meta in sorted(manifest.items()):
        if name in NOT_BUNDLED or "keel_group" not in meta:
            continue
        raw = (src_dir / f"{name}.csv").read_bytes()
        # mtime=0: the same input always gives the same bytes
        with open(dest / f"{name}.csv.gz", "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=9, mtime=0) as gz:
            gz.write(raw)
        kept[name] = meta
    (dest / "manifest.json").write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    print(f"bundled {len(kept)} datasets into {dest}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir", metavar="DATA_DIR", help="directory with the CSV files and their manifest.json")
    main(ap.parse_args().data_dir)
