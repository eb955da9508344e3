"""``python -m loadtest``: the load test from the command line (``loadtest.runner``).

    python -m loadtest --url http://127.0.0.1:8080 --model fashion --payload body.json \\
        --out .distml/reports/loadtest --concurrency 5 --duration 30s

Exit codes: 0 when the run passed its checks, 1 when it failed them or could not run,
2 for bad arguments, 130 on Ctrl-C (after Locust has been stopped).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from loadtest.plan import parse_duration
from loadtest.runner import run_loadtest
from loadtest.server_view import MetricsEndpoint
from loadtest.summary import CHART_PNG, SUMMARY_JSON, check


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1: {text!r}")
    return value


def _duration(text: str) -> str:
    try:
        parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtest",
        description="Load-test a KServe V1 predict endpoint with Locust (headless).",
    )
    p.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--model", required=True, help="model name in /v1/models/<name>:predict")
    p.add_argument("--payload", required=True, type=Path, help="JSON request body file")
    p.add_argument("--out", required=True, type=Path, help="directory for the results")
    p.add_argument("--concurrency", type=_positive_int, default=5, help="users (default 5)")
    p.add_argument("--duration", type=_duration, default="30s", help="e.g. 30s, 2m, 90")
    p.add_argument("--spawn-rate", type=_positive_float, help="users/s (default: all at once)")
    p.add_argument("--host-header", help="Host header (for an ingress gateway)")
    p.add_argument(
        "--max-failure-ratio", type=_ratio, default=0.0, help="allowed failures (default 0)"
    )
    p.add_argument(
        "--server-metrics",
        action="store_true",
        help="also read what the server counted from URL/metrics (distml's model server), "
        "and fail when it is more than 1%% from Locust's count",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not re.match(r"https?://[^/]", args.url.strip()):
        parser.error(f"--url must start with http:// or https://: {args.url!r}")
    if not args.payload.is_file():
        parser.error(f"--payload: no such file: {args.payload}")
    try:
        summary = run_loadtest(
            args.url,
            args.model,
            args.payload,
            args.out,
            concurrency=args.concurrency,
            duration=args.duration,
            spawn_rate=args.spawn_rate,
            host_header=args.host_header,
            server_view=MetricsEndpoint(args.url, args.model) if args.server_metrics else None,
        )
    except KeyboardInterrupt:
        print("loadtest: interrupted; Locust stopped", file=sys.stderr)
        return 130
    except (ValueError, RuntimeError, TimeoutError) as e:
        print(f"loadtest: error: {e}", file=sys.stderr)
        return 1
    print(f"loadtest: results in {args.out.resolve()} ({SUMMARY_JSON}, {CHART_PNG}, CSVs)")
    problems = check(summary, max_failure_ratio=args.max_failure_ratio)
    for problem in problems:
        print(f"loadtest: FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
