"""The command line of a file generated from code and committed (the Grafana dashboard, the
alerting rules): write it, or with ``--check`` exit 1 when the committed copy differs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def main(path: Path, text: str, prog: str, doc: str | None, argv: Sequence[str] | None) -> int:
    """Write ``text`` to ``path``, or (``--check``) compare them; ``prog`` rewrites it."""
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    if args.check:
        if (path.read_text() if path.is_file() else "") != text:
            print(f"{path} is stale: run `{prog}`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0
