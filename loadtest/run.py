"""Run the load test: Locust headless in its own process, then a JSON summary and a chart.

    python -m loadtest.run --url http://127.0.0.1:8080 --model fashion --payload body.json \\
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
- ``chart.png``: throughput, latency and (when sampled) ready replicas over time.

Nothing here imports Locust, matplotlib or TensorFlow at import time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common.poll import Done, Pending, Verdict, poll
from loadtest.chart import write_chart
from loadtest.plan import Plan, parse_duration, plan_run
from loadtest.summary import (
    CHART_PNG,
    EXCEPTIONS_CSV,
    FAILURES_CSV,
    HISTORY_CSV,
    LOG_FILE,
    PER_SECOND_CSV,
    STATS_CSV,
    SUMMARY_JSON,
    check,
    history,
    num,
    summarise,
)

PROGRESS_EVERY_S = 5.0
SAMPLE_EVERY_S = 1.0
STOP_GRACE_S = 5.0
DEFAULT_TIMEOUT_MARGIN_S = 60.0  # Locust start-up + shutdown on top of the run time


# --------------------------------------------------------------------------- Locust process


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        if os.name == "posix":
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, SIGKILL whatever is left after a grace period."""
    try:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_GRACE_S)
    finally:  # also on a second Ctrl-C during the grace period
        if os.name == "posix":
            _signal_group(proc, signal.SIGKILL)
        elif proc.poll() is None:
            proc.kill()
        proc.wait()


class _ReplicaWatcher:
    """Calls ``sampler()`` once a second in a thread, recording (seconds since t0, ready)."""

    def __init__(self, sampler: Callable[[], int], t0: float, log: Callable[[str], Any]):
        self._sampler = sampler
        self._t0 = t0
        self._log = log
        self._stop = threading.Event()
        self._lock = threading.Condition()
        self._samples: list[dict[str, float | int]] = []
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="replica-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def samples(self) -> list[dict[str, float | int]]:
        with self._lock:
            return list(self._samples)

    def wait_for_scale_out(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a sample above the first; True when one came."""

        def risen() -> bool:
            ready = [x["ready"] for x in self._samples]
            return bool(ready) and max(ready) > ready[0]

        with self._lock:
            return self._lock.wait_for(risen, timeout=timeout)

    def _run(self) -> None:
        while True:
            t = time.time() - self._t0
            try:
                ready = int(self._sampler())
            except Exception as e:  # a flaky API call must not end the load test
                if not self._warned:
                    self._log(f"loadtest: replica sampler failed: {e!r} (not reported again)")
                    self._warned = True
            else:
                with self._lock:
                    self._samples.append({"t_s": round(t, 2), "ready": ready})
                    self._lock.notify_all()
            if self._stop.wait(SAMPLE_EVERY_S):
                return


def _progress_line(
    out_dir: Path, elapsed: float, seconds: int, prev: tuple[float, float] | None, replicas: str
) -> tuple[str, tuple[float, float] | None]:
    rows = history(out_dir)
    if not rows:
        return f"loadtest: {elapsed:5.0f}s/{seconds}s  starting Locust...", prev
    last = rows[-1]
    ts = num(last.get("Timestamp")) or 0.0
    count = num(last.get("Total Request Count")) or 0.0
    failures = int(num(last.get("Total Failure Count")) or 0)
    base = prev or (num(rows[0].get("Timestamp")) or ts, num(rows[0].get("Total Request Count")))
    dt = ts - base[0]
    rps = (count - (base[1] or 0.0)) / dt if dt > 0 else 0.0
    users = int(num(last.get("User Count")) or 0)
    line = (
        f"loadtest: {elapsed:5.0f}s/{seconds}s  users {users}  requests {int(count)}  "
        f"failures {failures}  rps {rps:.1f}{replicas}"
    )
    return line, (ts, count)


# --------------------------------------------------------------------------- runner


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
) -> dict[str, Any]:
    """Run Locust headless against ``{url}/v1/models/{model_name}:predict``; return the summary.

    ``concurrency`` users, each with one request in flight (no wait time), spawned at
    ``spawn_rate`` users/s (default: all at once) for ``duration``. ``replica_sampler``
    (optional) returns the number of ready replicas; it is called once a second during the
    run; ``expected_replicas`` (what the autoscaler should reach) is drawn beside it. With
    ``settle_s``, sampling goes on after the load for up to that long, until ready replicas
    rise above the starting count: an autoscaler decides during the load, but the new pods
    turn ready after it (an HPA syncs every 15 s on 15 s-old metrics, then a pod starts).
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
    started_at = datetime.now(UTC)
    t0 = started_at.timestamp()
    watcher = _ReplicaWatcher(replica_sampler, t0, log) if replica_sampler else None
    rc, elapsed = _run_locust(plan, watcher, log, timeout_margin_s, settle_s)
    log_path = plan.out / LOG_FILE
    if rc != 0 or not (plan.out / STATS_CSV).is_file():
        raise RuntimeError(
            f"Locust failed (exit code {rc}); last lines of {log_path}:\n{_tail(log_path)}"
        )
    samples = watcher.samples if watcher else []
    summary = _summary(plan, started_at, elapsed, samples, expected_replicas)
    (plan.out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    write_chart(plan.out, summary, t0)
    log(_result_line(summary))
    return summary


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


def _run_locust(
    plan: Plan,
    watcher: _ReplicaWatcher | None,
    log: Callable[[str], Any],
    timeout_margin_s: float,
    settle_s: float,
) -> tuple[int, float]:
    """Locust's exit code and run time (s); with ``settle_s``, the replicas watched after the
    load. Locust's whole process group is stopped on any exception, then re-raised."""
    with open(plan.out / LOG_FILE, "wb") as log_file:
        if watcher:
            watcher.start()
        mono0 = time.monotonic()
        proc: subprocess.Popen | None = None
        try:
            proc = subprocess.Popen(
                plan.command(),
                cwd=plan.out,  # not the caller's cwd: nothing there may shadow Locust's imports
                env=plan.env(),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=os.name == "posix",
                creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
            )
            rc = _wait_for_locust(proc, plan, mono0, watcher, log, timeout_margin_s)
            elapsed = time.monotonic() - mono0
            if watcher and settle_s > 0 and rc == 0 and not watcher.wait_for_scale_out(0):
                log(
                    f"loadtest: load done; watching ready replicas up to {settle_s:.0f} s more "
                    "(pods the autoscaler asked for may still be starting)"
                )
                watcher.wait_for_scale_out(settle_s)
        except BaseException:
            if proc is not None:
                _stop_process_group(proc)
            raise
        finally:
            if watcher:
                watcher.stop()
        _signal_group(proc, signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
    return rc, elapsed


class _Progress:
    """Judges Locust's exit code: Done(code), else a progress line every PROGRESS_EVERY_S."""

    def __init__(self, plan: Plan, mono0: float, deadline: float, watcher: Any) -> None:
        self.plan, self.mono0, self.deadline, self.watcher = plan, mono0, deadline, watcher
        self.next = mono0 + PROGRESS_EVERY_S
        self.line = ""
        self.prev: tuple[float, float] | None = None

    def __call__(self, rc: int | None) -> Verdict:
        if rc is not None:
            return Done(rc)
        now = time.monotonic()
        if self.next <= now < self.deadline:
            self.next += PROGRESS_EVERY_S
            samples = self.watcher.samples if self.watcher else []
            replicas = f"  ready replicas {samples[-1]['ready']}" if samples else ""
            self.line, self.prev = _progress_line(
                self.plan.out, now - self.mono0, self.plan.seconds, self.prev, replicas
            )
        return Pending(self.line)


def _wait_for_locust(
    proc: subprocess.Popen,
    plan: Plan,
    mono0: float,
    watcher: _ReplicaWatcher | None,
    log: Callable[[str], Any],
    timeout_margin_s: float,
) -> int:
    """Locust's exit code; TimeoutError when it runs past its run time + the margin."""
    deadline = mono0 + plan.seconds + timeout_margin_s
    verdict = poll(
        proc.poll,
        _Progress(plan, mono0, deadline, watcher),
        timeout=max(0.0, deadline - time.monotonic()),
        interval=0.2,
        on_change=log,
    )
    if isinstance(verdict, Done):
        return verdict.value
    raise TimeoutError(
        f"Locust still running {time.monotonic() - mono0:.0f}s after start "
        f"(run time {plan.seconds}s + margin {timeout_margin_s:g}s); stopped it. "
        f"Log: {plan.out / LOG_FILE}"
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


# --------------------------------------------------------------------------- CLI


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
        prog="python -m loadtest.run",
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
