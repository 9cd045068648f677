"""The ``margindist`` command.

Exit codes: 0 success, 1 runtime failure, 2 usage error (unknown dataset, method, preset or a
bad option).
"""

from __future__ import annotations

import argparse
import sys

from . import __version__

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="margindist",
        description="Margin-distribution learning: estimators and the papers' experiments.",
    )
    parser.add_argument("--version", action="version", version=f"margindist {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("datasets", help="list the datasets that can be loaded, and from where")
    p.add_argument("--data-dir", default=None, help="extra data directory searched first")
    p.add_argument("--names", action="store_true", help="print only the names")
    p.set_defaults(func=_cmd_datasets)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
