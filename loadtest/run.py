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
import ast
import contextlib
import csv
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

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
CSV_PREFIX = "locust"
STATS_CSV = f"{CSV_PREFIX}_stats.csv"
HISTORY_CSV = f"{CSV_PREFIX}_stats_history.csv"
FAILURES_CSV = f"{CSV_PREFIX}_failures.csv"
EXCEPTIONS_CSV = f"{CSV_PREFIX}_exceptions.csv"
PER_SECOND_CSV = f"{CSV_PREFIX}_per_second.csv"  # written by our locustfile
LOG_FILE = "locust.log"
SUMMARY_JSON = "summary.json"
CHART_PNG = "chart.png"

PROGRESS_EVERY_S = 5.0
SAMPLE_EVERY_S = 1.0
STOP_GRACE_S = 5.0
DEFAULT_TIMEOUT_MARGIN_S = 60.0  # Locust start-up + shutdown on top of the run time
MAX_ERRORS_IN_SUMMARY = 10

_DURATION_RE = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str | int) -> int:
    """Seconds in ``"30s"``, ``"2m"``, ``"1h"``, ``"1m30s"`` or a plain ``"90"``; must be > 0."""
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}")
    s = str(text).strip().lower()
    if s.isdigit():
        seconds = int(s)
    else:
        m = _DURATION_RE.fullmatch(s)
        if not s or m is None:
            raise ValueError(
                f"invalid duration {text!r}: use seconds ('90') or a number with a unit "
                "h/m/s ('30s', '2m', '1m30s')"
            )
        h, mins, secs = (int(g or 0) for g in m.groups())
        seconds = h * 3600 + mins * 60 + secs
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be at least 1 second")
    return seconds


# --------------------------------------------------------------------------- helpers


def _num(value: str | None) -> float | None:
    """A CSV cell as a float; None for '', 'N/A' and junk."""
    try:
        x = float(value) if value not in (None, "", "N/A") else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


def _read_csv_rows(path: Path) -> list[dict[str, str]]:
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


def _history(out_dir: Path) -> list[dict[str, str]]:
    """Aggregated rows of the stats history, one per timestamp (the last one wins)."""
    by_ts: dict[float, dict[str, str]] = {}
    for row in _aggregated(_read_csv_rows(out_dir / HISTORY_CSV)):
        ts = _num(row.get("Timestamp"))
        if ts is not None:
            by_ts[ts] = row
    return [by_ts[ts] for ts in sorted(by_ts)]


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
    rows = _history(out_dir)
    if not rows:
        return f"loadtest: {elapsed:5.0f}s/{seconds}s  starting Locust...", prev
    last = rows[-1]
    ts = _num(last.get("Timestamp")) or 0.0
    count = _num(last.get("Total Request Count")) or 0.0
    failures = int(_num(last.get("Total Failure Count")) or 0)
    base = prev or (_num(rows[0].get("Timestamp")) or ts, _num(rows[0].get("Total Request Count")))
    dt = ts - base[0]
    rps = (count - (base[1] or 0.0)) / dt if dt > 0 else 0.0
    users = int(_num(last.get("User Count")) or 0)
    line = (
        f"loadtest: {elapsed:5.0f}s/{seconds}s  users {users}  requests {int(count)}  "
        f"failures {failures}  rps {rps:.1f}{replicas}"
    )
    return line, (ts, count)


# --------------------------------------------------------------------------- summary


def _unwrap_error(text: str) -> str:
    """``CatchResponseError('HTTP 500: boom')`` -> ``HTTP 500: boom`` (our own messages)."""
    m = re.fullmatch(r"CatchResponseError\((.*)\)", text, flags=re.DOTALL)
    if m:
        with contextlib.suppress(ValueError, SyntaxError):
            inner = ast.literal_eval(m.group(1))
            if isinstance(inner, str):
                return inner
    return text


def _summarise(out_dir: Path) -> dict[str, Any]:
    """Totals from the Aggregated row of locust_stats.csv and the top failures."""
    agg = _aggregated(_read_csv_rows(out_dir / STATS_CSV))
    row = agg[-1] if agg else {}
    requests = int(_num(row.get("Request Count")) or 0)
    failures = int(_num(row.get("Failure Count")) or 0)

    def ms(column: str) -> float | None:
        x = _num(row.get(column))
        return None if x is None or requests == 0 else round(x, 2)

    errors = [
        {
            "method": r.get("Method", ""),
            "name": r.get("Name", ""),
            "error": _unwrap_error(r.get("Error", "")),
            "occurrences": int(_num(r.get("Occurrences")) or 0),
        }
        for r in _read_csv_rows(out_dir / FAILURES_CSV)
    ]
    errors.sort(key=lambda e: -e["occurrences"])
    return {
        "requests": requests,
        "failures": failures,
        "failure_ratio": round(failures / requests, 6) if requests else 0.0,
        "rps": round(_num(row.get("Requests/s")) or 0.0, 3),
        "p50_ms": ms("50%"),
        "p95_ms": ms("95%"),
        "p99_ms": ms("99%"),
        "avg_ms": ms("Average Response Time"),
        "max_ms": ms("Max Response Time"),
        "errors": errors[:MAX_ERRORS_IN_SUMMARY],
    }


def _throughput(out_dir: Path, t0: float) -> tuple[list[float], list[float], list[float]]:
    """(edges, requests/s, failures/s) for each wall-clock second, from the per-second CSV."""
    counts: dict[int, tuple[float, float]] = {}
    for row in _read_csv_rows(out_dir / PER_SECOND_CSV):
        t = _num(row.get("Timestamp"))
        if t is not None:
            counts[int(t)] = (_num(row.get("Requests")) or 0.0, _num(row.get("Failures")) or 0.0)
    if not counts:
        return [], [], []
    first, last = min(counts), max(counts)
    edges = [t - t0 for t in range(first, last + 2)]
    rps = [counts.get(t, (0.0, 0.0))[0] for t in range(first, last + 1)]
    fps = [counts.get(t, (0.0, 0.0))[1] for t in range(first, last + 1)]
    return edges, rps, fps


def _latency(history: list[dict[str, str]], t0: float) -> tuple[list[float], ...]:
    """(t, p50, p95) from the history rows; Locust writes 0/0 before it has a window."""
    t, p50, p95 = [], [], []
    for row in history:
        ts, a, b = _num(row.get("Timestamp")), _num(row.get("50%")), _num(row.get("95%"))
        if ts is None or a is None or b is None or (a == 0 and b == 0):
            continue
        t.append(ts - t0)
        p50.append(a)
        p95.append(b)
    return t, p50, p95


def _write_chart(out_dir: Path, summary: dict[str, Any], t0: float) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    edges, rps, fps = _throughput(out_dir, t0)
    lat_t, p50, p95 = _latency(_history(out_dir), t0)
    replicas = summary.get("replicas") or []
    panels = 3 if replicas else 2
    fig = Figure(figsize=(10, 2.9 * panels + 0.9), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(panels, 1, sharex=True)

    def no_data(ax) -> None:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)

    ax = axes[0]
    if edges:
        ax.stairs(rps, edges, label="requests/s", color="tab:blue", lw=1.5)
        ax.stairs(fps, edges, label="failures/s", color="tab:red", lw=1.5)
        ax.axhline(summary["rps"], ls="--", lw=1, color="tab:gray", label="mean requests/s")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    else:
        no_data(ax)
    ax.set_title("Throughput (requests completed in each second)")
    ax.set_ylabel("per second")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)

    ax = axes[1]
    if lat_t:
        ax.plot(lat_t, p50, marker=".", label="p50", color="tab:green")
        ax.plot(lat_t, p95, marker=".", label="p95", color="tab:orange")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    else:
        no_data(ax)
    ax.set_title("Latency (Locust's rolling ~10 s window)")
    ax.set_ylabel("ms")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)

    if replicas:
        ax = axes[2]
        ts = [r["t_s"] for r in replicas]
        ready = [r["ready"] for r in replicas]
        ax.step(ts, ready, where="post", marker=".", color="tab:purple", label="ready replicas")
        ax.axhline(summary["replicas_start"], ls="--", lw=1, color="tab:gray", label="at start")
        expected = summary.get("replicas_expected")
        if expected:
            ax.axhline(
                expected, ls=":", lw=1.5, color="tab:red", label="expected peak (autoscaler)"
            )
        ax.set_title(
            f"Ready replicas (start {summary['replicas_start']}, peak {summary['replicas_peak']}"
            + (f", expected {expected})" if expected else ")")
        )
        ax.set_ylabel("replicas")
        ax.set_ylim(bottom=0, top=max([*ready, expected or 0]) + 1)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
        ax.grid(alpha=0.3)

    axes[-1].set_xlabel("seconds since start")
    axes[-1].set_xlim(left=0)

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:g}"

    fig.suptitle(
        f"Load test: model {summary['model']} at {summary['url']}, "
        f"{summary['concurrency']} users, {summary['duration_s']} s\n"
        f"{summary['requests']} requests, {summary['failures']} failures, "
        f"{summary['rps']:.1f} req/s, p50 {fmt(summary['p50_ms'])} ms, "
        f"p95 {fmt(summary['p95_ms'])} ms, p99 {fmt(summary['p99_ms'])} ms"
    )
    fig.savefig(out_dir / CHART_PNG, dpi=100)


# --------------------------------------------------------------------------- runner


def _check_payload(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"payload file not found: {path}")
    try:
        instances = json.loads(path.read_bytes())["instances"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a KServe V1 request body with 'instances' ({e})") from e
    if not isinstance(instances, list) or not instances:
        raise ValueError(f"{path}: 'instances' must be a non-empty list")


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
    seconds = parse_duration(duration)
    if isinstance(concurrency, bool) or int(concurrency) != concurrency or concurrency < 1:
        raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
    rate = float(concurrency if spawn_rate is None else spawn_rate)
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"spawn_rate must be > 0, got {spawn_rate!r}")
    url = url.strip().rstrip("/")
    if not re.match(r"https?://[^/]", url):
        raise ValueError(f"url must start with http:// or https://, got {url!r}")
    if not model_name or "/" in model_name:
        raise ValueError(f"invalid model name {model_name!r}")
    payload = Path(payload_path).resolve()
    _check_payload(payload)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    outputs = (STATS_CSV, HISTORY_CSV, FAILURES_CSV, EXCEPTIONS_CSV, PER_SECOND_CSV)
    for name in (*outputs, SUMMARY_JSON, CHART_PNG):
        (out / name).unlink(missing_ok=True)  # never report a previous run's results

    cmd = [
        sys.executable, "-m", "locust",
        "-f", str(LOCUSTFILE),
        "--headless",
        "--users", str(int(concurrency)),
        "--spawn-rate", f"{rate:g}",
        "--run-time", f"{seconds}s",
        "--host", url,
        "--csv", str(out / CSV_PREFIX),
        "--csv-full-history",  # history percentiles over a rolling window, not cumulative
        "--only-summary",
        "--exit-code-on-error", "0",  # request failures are judged by check(), not here
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    env.update(
        DISTML_LOADTEST_PAYLOAD=str(payload),
        DISTML_LOADTEST_MODEL=model_name,
        PYTHONUNBUFFERED="1",
    )
    env.pop("DISTML_LOADTEST_HOST_HEADER", None)
    if host_header:
        env["DISTML_LOADTEST_HOST_HEADER"] = host_header

    endpoint = f"{url}/v1/models/{model_name}:predict"
    log(
        f"loadtest: {concurrency} users (spawn {rate:g}/s) for {seconds}s against {endpoint}"
        + (f" (Host: {host_header})" if host_header else "")
    )
    started_at = datetime.now(UTC)
    t0 = started_at.timestamp()
    watcher = _ReplicaWatcher(replica_sampler, t0, log) if replica_sampler else None
    log_path = out / LOG_FILE
    with open(log_path, "wb") as log_file:
        if watcher:
            watcher.start()
        mono0 = time.monotonic()
        deadline = mono0 + seconds + timeout_margin_s
        next_progress = mono0 + PROGRESS_EVERY_S
        prev: tuple[float, float] | None = None
        proc: subprocess.Popen | None = None
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=out,  # not the caller's cwd: nothing there may shadow Locust's imports
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=os.name == "posix",
                creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
            )
            while True:
                try:
                    rc = proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if now >= deadline:
                    raise TimeoutError(
                        f"Locust still running {now - mono0:.0f}s after start "
                        f"(run time {seconds}s + margin {timeout_margin_s:g}s); stopped it. "
                        f"Log: {log_path}"
                    )
                if now >= next_progress:
                    next_progress += PROGRESS_EVERY_S
                    samples = watcher.samples if watcher else []
                    replicas = f"  ready replicas {samples[-1]['ready']}" if samples else ""
                    line, prev = _progress_line(out, now - mono0, seconds, prev, replicas)
                    log(line)
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

    if rc != 0 or not (out / STATS_CSV).is_file():
        raise RuntimeError(
            f"Locust failed (exit code {rc}); last lines of {log_path}:\n{_tail(log_path)}"
        )

    summary: dict[str, Any] = {
        "url": url,
        "model": model_name,
        "endpoint": endpoint,
        "host_header": host_header,
        "started_at": started_at.isoformat(timespec="seconds"),
        "duration_s": seconds,
        "elapsed_s": round(elapsed, 2),
        "concurrency": int(concurrency),
        "spawn_rate": rate,
        **_summarise(out),
    }
    samples = watcher.samples if watcher else []
    summary["replicas"] = samples
    summary["replicas_start"] = samples[0]["ready"] if samples else None
    summary["replicas_peak"] = max(s["ready"] for s in samples) if samples else None
    summary["replicas_end"] = samples[-1]["ready"] if samples else None
    summary["replicas_expected"] = expected_replicas
    summary["files"] = {
        "stats_csv": STATS_CSV,
        "history_csv": HISTORY_CSV,
        "failures_csv": FAILURES_CSV,
        "per_second_csv": PER_SECOND_CSV,
        "log": LOG_FILE,
        "chart": CHART_PNG,
    }
    (out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    _write_chart(out, summary, t0)
    log(
        f"loadtest: {summary['requests']} requests, {summary['failures']} failures, "
        f"{summary['rps']:.1f} req/s, p50/p95/p99 {summary['p50_ms']}/{summary['p95_ms']}/"
        f"{summary['p99_ms']} ms"
        + (
            f", ready replicas {summary['replicas_start']} -> peak {summary['replicas_peak']}"
            if samples
            else ""
        )
    )
    return summary


# --------------------------------------------------------------------------- verdict


def check_flags(concurrency: int, duration: str | int, max_failure_ratio: float) -> None:
    """The load test's flags, checked before anything starts: ValueError naming the flag."""
    if concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
    if not 0.0 <= max_failure_ratio <= 1.0:
        raise ValueError(f"--max-failure-ratio is between 0 and 1, got {max_failure_ratio}")
    try:
        parse_duration(duration)
    except ValueError as e:
        raise ValueError(f"--duration: {e}") from e


def check(
    summary: dict[str, Any], max_failure_ratio: float = 0.0, expect_scale_out: bool = False
) -> list[str]:
    """Problems with a run's summary (empty list = pass).

    - no requests completed;
    - failure ratio above ``max_failure_ratio``;
    - with ``expect_scale_out``: no replica samples, or peak ready replicas not above the
      starting count (and below 2: going from 0 to 1 is a cold start, not a scale-out).
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
    return problems


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
