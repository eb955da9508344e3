"""The load test's chart: throughput, latency and (when sampled) ready replicas over time;
with a server-side view, the server's latency over the run beside Locust's, and its
in-flight requests (and, on a cluster, the replicas Prometheus finds up) over time.

matplotlib is imported only when a chart is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtest.summary import CHART_PNG, PER_SECOND_CSV, history, num, read_csv_rows

LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.01, 1), "fontsize": "small"}


def throughput(out_dir: Path, t0: float) -> tuple[list[float], list[float], list[float]]:
    """(edges, requests/s, failures/s) for each wall-clock second, from the per-second CSV."""
    counts: dict[int, tuple[float, float]] = {}
    for row in read_csv_rows(out_dir / PER_SECOND_CSV):
        t = num(row.get("Timestamp"))
        if t is not None:
            counts[int(t)] = (num(row.get("Requests")) or 0.0, num(row.get("Failures")) or 0.0)
    if not counts:
        return [], [], []
    first, last = min(counts), max(counts)
    edges = [t - t0 for t in range(first, last + 2)]
    rps = [counts.get(t, (0.0, 0.0))[0] for t in range(first, last + 1)]
    fps = [counts.get(t, (0.0, 0.0))[1] for t in range(first, last + 1)]
    return edges, rps, fps


def latency(rows: list[dict[str, str]], t0: float) -> tuple[list[float], ...]:
    """(t, p50, p95) from the history rows; Locust writes 0/0 before it has a window."""
    t, p50, p95 = [], [], []
    for row in rows:
        ts, a, b = num(row.get("Timestamp")), num(row.get("50%")), num(row.get("95%"))
        if ts is None or a is None or b is None or (a == 0 and b == 0):
            continue
        t.append(ts - t0)
        p50.append(a)
        p95.append(b)
    return t, p50, p95


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def _throughput_panel(ax: Any, out_dir: Path, summary: dict[str, Any], t0: float) -> None:
    edges, rps, fps = throughput(out_dir, t0)
    if edges:
        ax.stairs(rps, edges, label="requests/s", color="tab:blue", lw=1.5)
        ax.stairs(fps, edges, label="failures/s", color="tab:red", lw=1.5)
        ax.axhline(summary["rps"], ls="--", lw=1, color="tab:gray", label="mean requests/s")
        ax.legend(**LEGEND)
    else:
        _no_data(ax)
    ax.set_title("Throughput (requests completed in each second)")
    ax.set_ylabel("per second")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


def _latency_panel(ax: Any, out_dir: Path, t0: float, server: dict[str, Any]) -> None:
    lat_t, p50, p95 = latency(history(out_dir), t0)
    if lat_t:
        ax.plot(lat_t, p50, marker=".", label="p50", color="tab:green")
        ax.plot(lat_t, p95, marker=".", label="p95", color="tab:orange")
    for key, color in (("p50_ms", "tab:green"), ("p95_ms", "tab:orange"), ("p99_ms", "tab:red")):
        if server.get(key) is not None:
            label = f"server {key[:3]} over the run"
            ax.axhline(server[key], ls=":", lw=1.5, color=color, label=label)
    if lat_t or server.get("p50_ms") is not None:
        ax.legend(**LEGEND)
    else:
        _no_data(ax)
    ax.set_title("Latency (Locust's rolling ~10 s window)")
    ax.set_ylabel("ms")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


def _replicas_panel(ax: Any, summary: dict[str, Any]) -> None:
    from matplotlib.ticker import MaxNLocator

    replicas = summary["replicas"]
    ts = [r["t_s"] for r in replicas]
    ready = [r["ready"] for r in replicas]
    ax.step(ts, ready, where="post", marker=".", color="tab:purple", label="ready replicas")
    ax.axhline(summary["replicas_start"], ls="--", lw=1, color="tab:gray", label="at start")
    expected = summary.get("replicas_expected")
    if expected:
        ax.axhline(expected, ls=":", lw=1.5, color="tab:red", label="expected peak (autoscaler)")
    ax.set_title(
        f"Ready replicas (start {summary['replicas_start']}, peak {summary['replicas_peak']}"
        + (f", expected {expected})" if expected else ")")
    )
    ax.set_ylabel("replicas")
    ax.set_ylim(bottom=0, top=max([*ready, expected or 0]) + 1)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(**LEGEND)
    ax.grid(alpha=0.3)


def _server_panel(ax: Any, server: dict[str, Any]) -> None:
    from matplotlib.ticker import MaxNLocator

    series = server["series"]
    for key, label, color in (
        ("in_flight", "in flight (server's gauge, each second)", "tab:brown"),
        ("replicas", "replicas up (Prometheus)", "tab:purple"),
    ):
        points = [(r["t_s"], r[key]) for r in series if r.get(key) is not None]
        if points:
            ts, values = zip(*points, strict=True)
            ax.step(ts, values, where="post", marker=".", color=color, label=label)
    ax.set_title(f"What the server saw ({server['source']})")
    ax.set_ylabel("requests / replicas")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(**LEGEND)
    ax.grid(alpha=0.3)


def _server_line(server: dict[str, Any]) -> str:
    if "requests" not in server:
        return "\nserver-side view: " + str(server.get("absent") or server.get("error"))[:110]
    pct = server.get("difference_pct")
    return (
        f"\nthe server counted {server['requests']} predict requests"
        + (f" ({pct:+.2f}% of Locust's)" if pct is not None else "")
        + ", server-side p50/p95/p99 "
        + "/".join("n/a" if server[k] is None else f"{server[k]:g}" for k in _QUANTILES)
        + " ms"
    )


_QUANTILES = ("p50_ms", "p95_ms", "p99_ms")


def _title(summary: dict[str, Any]) -> str:
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:g}"

    return (
        f"Load test: model {summary['model']} at {summary['url']}, "
        f"{summary['concurrency']} users, {summary['duration_s']} s\n"
        f"{summary['requests']} requests, {summary['failures']} failures, "
        f"{summary['rps']:.1f} req/s, p50 {fmt(summary['p50_ms'])} ms, "
        f"p95 {fmt(summary['p95_ms'])} ms, p99 {fmt(summary['p99_ms'])} ms"
        + (_server_line(summary["server"]) if summary.get("server") else "")
    )


def write_chart(out_dir: Path, summary: dict[str, Any], t0: float) -> None:
    """``chart.png`` in ``out_dir``: one panel each for throughput, latency, (when the
    summary has samples) ready replicas and (with a server-side series) what the server
    saw, over seconds since ``t0``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    server = summary.get("server") or {}
    panels = ["throughput", "latency"]
    panels += ["replicas"] if summary.get("replicas") else []
    panels += ["server"] if server.get("series") else []
    fig = Figure(figsize=(10, 2.9 * len(panels) + 1.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = dict(zip(panels, fig.subplots(len(panels), 1, sharex=True), strict=True))
    _throughput_panel(axes["throughput"], out_dir, summary, t0)
    _latency_panel(axes["latency"], out_dir, t0, server)
    if "replicas" in axes:
        _replicas_panel(axes["replicas"], summary)
    if "server" in axes:
        _server_panel(axes["server"], server)
    last = axes[panels[-1]]
    last.set_xlabel("seconds since start")
    last.set_xlim(left=0)
    fig.suptitle(_title(summary))
    fig.savefig(out_dir / CHART_PNG, dpi=100)
