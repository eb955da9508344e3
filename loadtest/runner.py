"""Run the load test (``run_loadtest``): Locust headless in its own process
(``loadtest.locust_process``), the ready replicas sampled beside it
(``loadtest.replica_watch``), then a JSON summary and a chart. From the command line
(``loadtest/__main__.py``):

    python -m loadtest --url http://127.0.0.1:8080 --model fashion --payload body.json \\
        --out .distml/reports/loadtest --concurrency 5 --duration 30s

Locust (gevent) always runs in a child process of its own, in its own process group: gevent
must never share a process with TensorFlow/kserve or with the caller. On timeout or Ctrl-C
the whole group is stopped before the exception propagates, so no Locust process is left
behind.

Files in the output directory:

- ``locust_stats.csv``, ``locust_stats_history.csv``, ``locust_failures.csv``,
  ``locust_exceptions.csv``: Locust's own CSVs (history: one row a second, latency
  percentiles over a rolling ~10 s window);
- ``locust_per_second.csv``: requests and failures completed in each second (written by
  our locustfile from Locust's exact per-second counts);
- ``locust.log``: Locust's stdout and stderr;
- ``summary.json``: the numbers below (see :func:`run_loadtest`);
- ``chart.png``: throughput, latency and (when sampled) ready replicas over time; with a
  server-side view, what the server saw beside it.

With a ``server_view`` (``loadtest.server_view``), the summary's ``server`` holds what the
server itself counted over the run, next to Locust's count.

Nothing here imports Locust, matplotlib or TensorFlow at import time.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadtest.chart import write_chart
from loadtest.locust_process import run_locust, tail
from loadtest.plan import Plan, plan_run
from loadtest.replica_watch import ReplicaWatcher, Sampler
from loadtest.server_view import ServerView, line, report
from loadtest.summary import (
    CHART_PNG,
    EXCEPTIONS_CSV,
    FAILURES_CSV,
    HISTORY_CSV,
    LOG_FILE,
    PER_SECOND_CSV,
    STATS_CSV,
    SUMMARY_JSON,
    summarise,
)

DEFAULT_TIMEOUT_MARGIN_S = 60.0  # Locust start-up + shutdown on top of the run time


def _fresh_out_dir(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    outputs = (STATS_CSV, HISTORY_CSV, FAILURES_CSV, EXCEPTIONS_CSV, PER_SECOND_CSV)
    for name in (*outputs, SUMMARY_JSON, CHART_PNG):
        (out / name).unlink(missing_ok=True)  # never report a previous run's results


def run_loadtest(
    url: str,
    model_name: str,
    payload_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    concurrency: int = 5,
    duration: str | int = "30s",
    spawn_rate: float | None = None,
    host_header: str | None = None,
    replica_sampler: Callable[[], int] | None = None,
    expected_replicas: int | None = None,
    log: Callable[[str], Any] = print,
    timeout_margin_s: float = DEFAULT_TIMEOUT_MARGIN_S,
    settle_s: float = 0.0,
    server_view: ServerView | None = None,
) -> dict[str, Any]:
    """Run Locust headless against ``{url}/v1/models/{model_name}:predict``; return the summary.

    ``concurrency`` users, each with one request in flight (no wait time), spawned at
    ``spawn_rate`` users/s (default: all at once) for ``duration``. ``replica_sampler``
    (optional) returns the number of ready replicas; it is called once a second during the
    run; ``expected_replicas`` (what the autoscaler should reach) is drawn beside it. With
    ``settle_s``, sampling goes on after the load for up to that long, until ready replicas
    rise above the starting count: an autoscaler decides during the load, but the new pods
    turn ready after it (an HPA syncs every 15 s on 15 s-old metrics, then a pod starts).
    ``server_view`` (optional): what the server counted over the run (``summary["server"]``).
    Writes Locust's CSVs, ``summary.json`` and ``chart.png`` into ``out_dir``.

    Raises ``ValueError``/``FileNotFoundError`` for bad arguments, ``RuntimeError`` when
    Locust itself fails, ``TimeoutError`` when it overruns ``duration + timeout_margin_s``;
    ``KeyboardInterrupt`` is re-raised after Locust has been stopped.
    """
    plan = plan_run(
        url, model_name, payload_path, out_dir, concurrency, duration, spawn_rate, host_header
    )
    _fresh_out_dir(plan.out)
    log(
        f"loadtest: {concurrency} users (spawn {plan.rate:g}/s) for {plan.seconds}s against "
        f"{plan.endpoint}" + (f" (Host: {host_header})" if host_header else "")
    )
    viewing = server_view.begin(log) if server_view else False
    started_at = datetime.now(UTC)
    t0 = started_at.timestamp()
    watcher = ReplicaWatcher(replica_sampler, t0, log) if replica_sampler else None
    series = (
        Sampler(server_view.sample, t0, log, "server view") if server_view and viewing else None
    )
    elapsed, run_end = _run_sampled(plan, watcher, series, log, timeout_margin_s, settle_s)
    replicas = watcher.samples if watcher else []
    summary = _summary(plan, started_at, elapsed, replicas, expected_replicas)
    if server_view:
        result = server_view.finish(run_end, log)
        summary["server"] = report(server_view.source, result, series, summary["requests"])
    (plan.out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    write_chart(plan.out, summary, t0)
    for text in (_result_line(summary), *([line(summary["server"])] if server_view else [])):
        log(text)
    return summary


def _run_sampled(
    plan: Plan,
    watcher: ReplicaWatcher | None,
    series: Sampler | None,
    log: Callable[[str], Any],
    timeout_margin_s: float,
    settle_s: float,
) -> tuple[float, float]:
    """Locust's run (``run_locust``) with the server's series sampled beside it: its time
    (s) and its end (wall clock); RuntimeError when Locust failed."""
    if series:
        series.start()
    try:
        rc, elapsed = run_locust(plan, watcher, log, timeout_margin_s, settle_s)
    finally:
        if series:
            series.stop()
    log_path = plan.out / LOG_FILE
    if rc != 0 or not (plan.out / STATS_CSV).is_file():
        raise RuntimeError(
            f"Locust failed (exit code {rc}); last lines of {log_path}:\n{tail(log_path)}"
        )
    return elapsed, time.time()


def _result_line(summary: dict[str, Any]) -> str:
    return (
        f"loadtest: {summary['requests']} requests, {summary['failures']} failures, "
        f"{summary['rps']:.1f} req/s, p50/p95/p99 {summary['p50_ms']}/{summary['p95_ms']}/"
        f"{summary['p99_ms']} ms"
        + (
            f", ready replicas {summary['replicas_start']} -> peak {summary['replicas_peak']}"
            if summary["replicas"]
            else ""
        )
    )


def _summary(
    plan: Plan,
    started_at: datetime,
    elapsed: float,
    samples: list[dict[str, float | int]],
    expected_replicas: int | None,
) -> dict[str, Any]:
    """What ``summary.json`` holds: the run, Locust's totals, the replica samples, the files."""
    return {
        "url": plan.url,
        "model": plan.model,
        "endpoint": plan.endpoint,
        "host_header": plan.host_header,
        "started_at": started_at.isoformat(timespec="seconds"),
        "duration_s": plan.seconds,
        "elapsed_s": round(elapsed, 2),
        "concurrency": plan.concurrency,
        "spawn_rate": plan.rate,
        **summarise(plan.out),
        "replicas": samples,
        "replicas_start": samples[0]["ready"] if samples else None,
        "replicas_peak": max(s["ready"] for s in samples) if samples else None,
        "replicas_end": samples[-1]["ready"] if samples else None,
        "replicas_expected": expected_replicas,
        "files": {
            "stats_csv": STATS_CSV,
            "history_csv": HISTORY_CSV,
            "failures_csv": FAILURES_CSV,
            "per_second_csv": PER_SECOND_CSV,
            "log": LOG_FILE,
            "chart": CHART_PNG,
        },
    }
