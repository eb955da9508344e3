"""Set a canary release's share of requests, from inside the volume's mount.

    python -m ml canary_weight --volume V --service S --weight W [--url U] [--shadow P]

Writes ``{"weight": W}`` to ``V/serving/S/canary/weight.json`` in one rename (the model
server re-reads it at every poll, so a half-written file is never seen); with ``--url``,
the canary's own server, which the model server forwards the share to (and mirrors
``--shadow`` percent of the rest to, answers discarded: ``ml/server/canary.py``). A cluster's
orchestration runs it as a Job: the laptop does not mount the volume. The local runtime
writes the same file itself.

Exit codes: 0 written; 1 no canary version to weigh (nothing written); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ml import contract
from ml.contract import DEFAULT_SERVICE, step_prog
from ml.selection.publishing import service_arg, serving_versions, write_json_atomic


def percent(text: str) -> int:
    """A weight: ASCII digits, 0 to 100."""
    if not (text.isascii() and text.isdigit()) or int(text) > 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole percent from 0 to 100")
    return int(text)


def set_weight(
    volume: Path, service: str, weight: int, url: str | None = None, shadow: int = 0
) -> str:
    """Write the weight; the line to print. FileNotFoundError: no canary version."""
    root = Path(contract.canary_dir(volume, service))
    versions = serving_versions(root) if root.is_dir() else []
    if not versions:
        raise FileNotFoundError(
            f"no canary version in {root}: nothing to weigh (ml select --canary publishes one)"
        )
    doc: dict[str, object] = {"weight": weight, **({"url": url} if url else {})}
    doc |= {"shadow": shadow} if shadow else {}
    write_json_atomic(Path(contract.canary_weight_path(volume, service)), doc)
    mirrored = f", {shadow}% mirrored" if shadow else ""
    where = f" at {url}" if url else ""
    return f"canary version {versions[-1]}{where}: {weight}% of requests{mirrored}"


def endpoint(text: str) -> str:
    """A canary server's URL: ``http://host:port`` (the model server checks the host)."""
    if not text.startswith("http://") or len(text) > 253 or not text.isascii():
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not an http://host:port URL")
    return text


def build_parser() -> argparse.ArgumentParser:
    about = __doc__.split("\n\n")[0]
    p = argparse.ArgumentParser(prog=step_prog("canary_weight"), description=about)
    p.add_argument("--volume", required=True, help="volume root (the PVC mount)")
    p.add_argument(
        "--service", type=service_arg, default=DEFAULT_SERVICE, help="service name (a DNS label)"
    )
    p.add_argument("--weight", type=percent, required=True, help="percent of requests, 0-100")
    p.add_argument("--url", type=endpoint, help="the canary's own server (http://host:port)")
    p.add_argument(
        "--shadow", type=percent, default=0, help="percent of the rest mirrored to --url"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.shadow and not args.url:
            raise SystemExit("error: --shadow mirrors to the canary's own server: give --url")
        print(set_weight(Path(args.volume), args.service, args.weight, args.url, args.shadow))
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
