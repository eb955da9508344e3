"""`invoke status`'s alert rows: what the Prometheus distml reads (``k8s.monitoring.prometheus
.ref``) fires now about this work dir's namespace and service — the rules of
``k8s.monitoring.rules`` (docs/monitoring.md#alerts), or any rule whose labels say so.

An alert is this work dir's when its ``namespace`` label is the work dir's namespace and,
when it names an InferenceService (``isvc``), that is the work dir's service: a TFJob's
or a training worker's alert carries the namespace only. One row per firing alert, page
first; "none firing"; or one row saying why Prometheus could not be read. With distml's
own Prometheus, one more row: where its Alertmanager sends them
(``k8s.monitoring.alertmanager``), and how many notifications went and failed in the
last hour — a wrong ``cluster.alert_webhook`` shows here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from k8s.monitoring import alertmanager, prometheus
from k8s.monitoring.prometheus import Alert, PrometheusError
from runtime.cluster.context import ClusterContext
from runtime.output.tables import one_line

Row = tuple[str, str]
LABEL = "alerts"
#: Labels that say which one of several alerts of a name this is, shown beside its name.
WHICH = ("pod", "tfjob", "replica", "long", "short")
SEVERITY_ORDER = ("page", "ticket")
NOTIFICATIONS = "notifications"
#: Alertmanager's own counters (its ``notify`` package), by integration, over an hour.
SENT, FAILED = (
    f'sum(increase(alertmanager_notifications{kind}_total{{integration="webhook"}}[1h]))'
    for kind in ("", "_failed")
)


def rows(cx: ClusterContext, now: datetime | None = None) -> list[Row]:
    """The firing alerts of this work dir's namespace and service, one row each."""
    ref = prometheus.ref(cx.settings())
    if ref is None:
        return []
    if cx.dry:
        return [(LABEL, f"{ref}: not read under --dry")]
    try:
        found = prometheus.alerts(cx.kube, ref, kubectl=cx.provider.kubectl)
    except PrometheusError as e:
        return [(LABEL, f"not read: {one_line(str(e))}")]
    mine = firing_here(found, cx.namespace, cx.service)
    notified = [notifications(cx, ref)] if ref.own else []
    if not mine:
        return [(LABEL, f"none firing ({ref})"), *notified]
    when = now or datetime.now(UTC)
    return [*(row(a, when) for a in mine), *notified]


def notifications(cx: ClusterContext, ref: prometheus.PrometheusRef) -> Row:
    """Where distml's Alertmanager sends the alerts, and how that went in the last hour."""
    webhook = cx.settings().alert_webhook
    if not webhook:
        return NOTIFICATIONS, f"none sent: {alertmanager.SETTING} is not set"
    try:
        sent, failed = (
            sum(v for _, v in prometheus.instant(cx.kube, ref, q, kubectl=cx.provider.kubectl))
            for q in (SENT, FAILED)
        )
    except PrometheusError as e:
        return NOTIFICATIONS, f"to {webhook}: not read: {one_line(str(e))}"
    text = f"to {webhook}: {sent:.0f} sent, {failed:.0f} failed in the last hour"
    if failed:
        text += (
            " (Alertmanager's log says why: kubectl logs deploy/distml-prometheus -c alertmanager)"
        )
    return NOTIFICATIONS, text


def firing_here(alerts: list[Alert], namespace: str, service: str) -> list[Alert]:
    """The firing alerts about ``namespace`` (and ``service``, where one names a service),
    pages first, then the longest firing."""
    mine = [
        a
        for a in alerts
        if a.firing
        and a.labels.get("namespace") == namespace
        and a.labels.get("isvc", service) == service
    ]

    def order(a: Alert) -> tuple[int, float, str]:
        severity = a.labels.get("severity", "")
        rank = SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else 2
        return rank, a.active_at.timestamp() if a.active_at else 0.0, a.name

    return sorted(mine, key=order)


def row(a: Alert, now: datetime) -> Row:
    """``alert NAME (which)``: its severity, since when, its summary."""
    which = ", ".join(f"{k} {a.labels[k]}" for k in WHICH if a.labels.get(k))
    label = f"alert {a.name}" + (f" ({which})" if which else "")
    parts = [a.labels.get("severity") or "no severity"]
    if a.active_at:
        at = a.active_at.astimezone(UTC)
        parts.append(f"active since {at:%Y-%m-%d %H:%M:%S} UTC ({_ago(now - at)} ago)")
    summary = a.annotations.get("summary")
    text = ", ".join(parts) + (f": {summary}" if summary else "")
    return label, one_line(text)


def _ago(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
