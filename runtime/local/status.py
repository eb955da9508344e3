"""``invoke status`` on the local runtime: what is prepared, trained, published and served,
what training does now (its workers' ``/metrics``) and what the running server counted
(its ``/metrics``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ml import contract
from ml.contract import records
from runtime.local import canary_deploy, train_view
from runtime.local.serving import running_server, versions
from runtime.output.tables import ms

if TYPE_CHECKING:
    from runtime.local import LocalRuntime

Row = tuple[str, str]


def status_rows(rt: LocalRuntime) -> list[Row]:
    state = rt.wd.state()
    set_up = "" if state.up else " (not set up: run `invoke up`)"
    rows: list[Row] = [("item", "state"), ("runtime", f"local, work dir {rt.wd.root}{set_up}")]
    datasets = Path(contract.datasets_dir(rt.wd.volume)) / "fashion_mnist"
    rows.append(("dataset", f"prepared in {datasets}" if datasets.is_dir() else "not prepared"))
    rows += train_view.rows(state.train_metrics)  # while training runs
    rows += _candidate_rows(rt)
    served = versions(rt)
    rows.append(("serving versions", ", ".join(map(str, served)) if served else "none"))
    if served:
        rows += _serving_card(rt, served[-1])
    server = running_server(rt)
    rows.append(("model server", f"pid {server.pid}, {server.url}" if server else "not running"))
    if server:
        rows += live_rows(server.url, rt.service)
    rows += canary_deploy.status_rows(rt)
    rows.append(("last load test", _last_loadtest(state.last_loadtest)))
    return rows


def _candidate_rows(rt: LocalRuntime) -> list[Row]:
    report = records.read_selection(contract.selection_report(rt.wd.volume))
    scores = {c["model_type"]: c for c in report.get("candidates", [])}
    root = Path(contract.candidates_dir(rt.wd.volume))
    models = sorted(p.name for p in root.glob("*") if p.is_dir() and not p.name.startswith("."))
    rows = []
    for model in models:
        metrics = records.read_metrics(contract.metrics_path(rt.wd.volume, model))
        detail = "exported"
        if metrics and metrics.val_accuracy is not None:
            detail = f"last-epoch val acc {metrics.val_accuracy:.4f}"
        scored = scores.get(model, {})
        if scored.get("status") == "ok":
            detail += f", selection: val acc {scored['val_accuracy']:.4f}"
            if scored.get("test_accuracy") is not None:
                detail += f", test acc {scored['test_accuracy']:.4f}"
        rows.append((f"candidate {model}", detail))
    return rows


def _serving_card(rt: LocalRuntime, latest: int) -> list[Row]:
    """The serving version's model card (its publish.json; the serving copy ml.selection.select
    keeps, else, on a volume from before it kept one, the version's own)."""
    record = records.read_publish(contract.serving_record(rt.wd.volume, rt.service))
    if record.get("version") != latest:
        record = records.read_publish(rt.serving_dir / str(latest) / contract.PUBLISH_FILE)
    return [(f"serving {label}", text) for label, text in records.model_card(record)]


def live_rows(url: str, service: str) -> list[Row]:
    """What the running server counted since it started, from its ``/metrics``: requests
    (by code), the 5xx ratio, latency p50/p95/p99 (its histogram), requests in flight."""
    from loadtest.metrics_text import MetricsTextError
    from loadtest.server_view import MetricsEndpoint, MetricsUnavailable

    try:
        page = MetricsEndpoint(url, service).scrape()
    except (MetricsUnavailable, MetricsTextError) as e:
        return [("server metrics", f"not available: {e}")]
    counts = page.counts(service, route=None)  # every route: all the server answered
    codes = ", ".join(f"{code} {n:.0f}" for code, n in sorted(counts.by_code.items()))
    ratio = counts.error_ratio()
    quantiles = [counts.quantile(q) for q in (0.5, 0.95, 0.99)]
    in_flight = page.in_flight(service)
    return [
        ("server requests", f"{counts.total:.0f} since start" + (f" ({codes})" if codes else "")),
        ("server errors", "-" if ratio is None else f"{ratio:.2%} answered 5xx"),
        ("server latency", "p50/p95/p99 " + "/".join(_ms(x) for x in quantiles) + " ms"),
        ("server in flight", "-" if in_flight is None else f"{in_flight:.0f}"),
    ]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _last_loadtest(path: str | None) -> str:
    import json

    if not path or not Path(path).is_file():
        return "none"
    s = json.loads(Path(path).read_text())
    server = s.get("server") or {}
    counted = (
        f", the server counted {server['requests']} ({server['difference_pct']:+.2f}%)"
        if server.get("difference_pct") is not None
        else ""
    )
    return (
        f"{s['requests']} requests, {s['failures']} failed, {s['rps'] or 0:.1f} req/s, "
        f"p95 {ms(s.get('p95_ms'))} ms{counted} ({Path(path).parent})"
    )
