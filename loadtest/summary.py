"""Locust's output files, read: CSV rows, the stats history, the run's totals and top
errors; and the verdict on a run's summary (``check``).

Files are read while Locust may still be writing them (a partial last line is dropped).
"""

from __future__ import annotations

import ast
import contextlib
import csv
import math
import re
from pathlib import Path
from typing import Any

CSV_PREFIX = "locust"
STATS_CSV = f"{CSV_PREFIX}_stats.csv"
HISTORY_CSV = f"{CSV_PREFIX}_stats_history.csv"
FAILURES_CSV = f"{CSV_PREFIX}_failures.csv"
EXCEPTIONS_CSV = f"{CSV_PREFIX}_exceptions.csv"
PER_SECOND_CSV = f"{CSV_PREFIX}_per_second.csv"  # written by our locustfile
LOG_FILE = "locust.log"
SUMMARY_JSON = "summary.json"
CHART_PNG = "chart.png"
MAX_ERRORS_IN_SUMMARY = 10
#: How far the server's count of the run may be from Locust's (issue 30: within 1%).
SERVER_COUNT_TOLERANCE_PCT = 1.0


# --------------------------------------------------------------------------- CSVs


def num(value: str | None) -> float | None:
    """A CSV cell as a float; None for '', 'N/A' and junk."""
    try:
        x = float(value) if value not in (None, "", "N/A") else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


def read_csv_rows(path: Path) -> list[dict[str, str]]:
    """Complete rows of a CSV file that may still be being written (partial last line dropped)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(text.splitlines()))


def _aggregated(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [r for r in rows if r.get("Name") == "Aggregated"]


def history(out_dir: Path) -> list[dict[str, str]]:
    """Aggregated rows of the stats history, one per timestamp (the last one wins)."""
    by_ts: dict[float, dict[str, str]] = {}
    for row in _aggregated(read_csv_rows(out_dir / HISTORY_CSV)):
        ts = num(row.get("Timestamp"))
        if ts is not None:
            by_ts[ts] = row
    return [by_ts[ts] for ts in sorted(by_ts)]


# --------------------------------------------------------------------------- summary


def unwrap_error(text: str) -> str:
    """``CatchResponseError('HTTP 500: boom')`` -> ``HTTP 500: boom`` (our own messages)."""
    m = re.fullmatch(r"CatchResponseError\((.*)\)", text, flags=re.DOTALL)
    if m:
        with contextlib.suppress(ValueError, SyntaxError):
            inner = ast.literal_eval(m.group(1))
            if isinstance(inner, str):
                return inner
    return text


def summarise(out_dir: Path) -> dict[str, Any]:
    """Totals from the Aggregated row of locust_stats.csv and the top failures."""
    agg = _aggregated(read_csv_rows(out_dir / STATS_CSV))
    row = agg[-1] if agg else {}
    requests = int(num(row.get("Request Count")) or 0)
    failures = int(num(row.get("Failure Count")) or 0)

    def ms(column: str) -> float | None:
        x = num(row.get(column))
        return None if x is None or requests == 0 else round(x, 2)

    errors: list[dict[str, Any]] = [
        {
            "method": r.get("Method", ""),
            "name": r.get("Name", ""),
            "error": unwrap_error(r.get("Error", "")),
            "occurrences": int(num(r.get("Occurrences")) or 0),
        }
        for r in read_csv_rows(out_dir / FAILURES_CSV)
    ]
    errors.sort(key=lambda e: -e["occurrences"])
    return {
        "requests": requests,
        "failures": failures,
        "failure_ratio": round(failures / requests, 6) if requests else 0.0,
        "rps": round(num(row.get("Requests/s")) or 0.0, 3),
        "p50_ms": ms("50%"),
        "p95_ms": ms("95%"),
        "p99_ms": ms("99%"),
        "avg_ms": ms("Average Response Time"),
        "max_ms": ms("Max Response Time"),
        "errors": errors[:MAX_ERRORS_IN_SUMMARY],
    }


# --------------------------------------------------------------------------- verdict


def check(
    summary: dict[str, Any], max_failure_ratio: float = 0.0, expect_scale_out: bool = False
) -> list[str]:
    """Problems with a run's summary (empty list = pass).

    - no requests completed;
    - failure ratio above ``max_failure_ratio``;
    - with ``expect_scale_out``: no replica samples, or peak ready replicas not above the
      starting count (and below 2: going from 0 to 1 is a cold start, not a scale-out);
    - with a server-side view (``summary["server"]``, always judged when there is one): it
      failed, or the server's count is more than ``SERVER_COUNT_TOLERANCE_PCT`` from Locust's.
    """
    problems: list[str] = []
    requests = int(summary.get("requests") or 0)
    failures = int(summary.get("failures") or 0)
    if requests == 0:
        problems.append(
            f"no requests were made against {summary.get('endpoint') or summary.get('url')} "
            f"(see {LOG_FILE})"
        )
    else:
        ratio = failures / requests
        if ratio > max_failure_ratio:
            top = (summary.get("errors") or [{}])[0].get("error")
            problems.append(
                f"{failures} of {requests} requests failed (failure ratio {ratio:.4g} > "
                f"allowed {max_failure_ratio:g})" + (f"; most common: {top}" if top else "")
            )
    if expect_scale_out:
        samples = summary.get("replicas") or []
        if not samples:
            problems.append("scale-out expected, but ready replicas were not sampled")
        else:
            start = summary.get("replicas_start", samples[0]["ready"])
            peak = summary.get("replicas_peak", max(s["ready"] for s in samples))
            if peak <= start or peak < 2:
                problems.append(
                    f"no scale-out: ready replicas peaked at {peak} (started at {start}); "
                    "check the load reaches the autoscaler (through the ingress gateway, "
                    "not a port-forward) and that new pods are not Pending for CPU"
                )
    return problems + server_problems(summary.get("server"))


def server_problems(server: dict[str, Any] | None) -> list[str]:
    """What is wrong with the server-side view of a run (none when there is no view)."""
    if not server or "absent" in server:
        return []
    if "error" in server:
        return [f"the server-side view ({server['source']}) failed: {server['error']}"]
    pct = server.get("difference_pct")
    if pct is None or abs(pct) <= SERVER_COUNT_TOLERANCE_PCT:
        return []
    notes = "".join(f"; {note}" for note in server.get("notes") or [])
    return [
        f"the server counted {server['requests']} predict requests, Locust "
        f"{server['locust_requests']}: {pct:+.2f}%, more than the "
        f"{SERVER_COUNT_TOLERANCE_PCT:g}% allowed (requests lost on the way to the server, or "
        f"counted twice, or not all of its pods scraped; source: {server['source']}){notes}"
    ]
