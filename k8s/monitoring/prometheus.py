"""How distml reads a Prometheus on the cluster: which one (:func:`ref`), and its HTTP API
(``/api/v1/query``, ``/api/v1/targets``, ``/api/v1/alerts``, ``/api/v1/status/config``) read
through the API
server's service proxy, so that no port-forward is needed and nothing but the kubeconfig
distml already uses.

Which Prometheus: the user's, named by the setting ``cluster.prometheus``
("NAMESPACE/SERVICE:PORT"), else distml's own (``up --with-monitoring``: Service
:data:`OWN_SERVICE` in distml's namespace, port :data:`PORT`), else none. The queries are
``ml.contract.serving_metrics``'s; the labels they select on (``namespace``, ``isvc``, ``pod``)
are attached by the scrape config of distml's own Prometheus (``k8s.monitoring.stack``), and a
user's Prometheus must attach the same (docs/monitoring.md).

Everything Prometheus answers is outside input: :func:`parse_query`, :func:`parse_targets`
and :func:`parse_alerts` accept only what its API documents and raise
:class:`PrometheusError` for anything else.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from common.errors import DistmlError
from k8s.client.kube import Kube, KubeError, ProxyError
from k8s.client.objects import Kubectl, unnamed_context
from k8s.providers.settings import Settings

#: distml's own Prometheus (``up --with-monitoring``): its Service, in distml's namespace.
OWN_SERVICE = "distml-prometheus"
PORT = 9090
SETTING = "cluster.prometheus (INVOKE_CLUSTER_PROMETHEUS)"
QUERY_PATH = "api/v1/query"
TARGETS_PATH = "api/v1/targets"
ALERTS_PATH = "api/v1/alerts"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_REF = re.compile(rf"^(?P<ns>{_DNS_LABEL})/(?P<svc>{_DNS_LABEL}):(?P<port>[0-9]{{1,5}})$")

Sample = tuple[dict[str, str], float]


class PrometheusError(DistmlError):
    """Prometheus could not be read, or answered something distml cannot use; the message
    says which Prometheus, what went wrong and what to do."""


@dataclass(frozen=True)
class PrometheusRef:
    """A Prometheus in the cluster, reached through its Service."""

    namespace: str
    service: str
    port: int = PORT

    @property
    def address(self) -> str:
        """Its in-cluster URL (what KEDA's Prometheus trigger queries)."""
        return f"http://{self.service}.{self.namespace}.svc:{self.port}"

    @property
    def own(self) -> bool:
        """distml's own (``up --with-monitoring``), by its Service's name."""
        return self.service == OWN_SERVICE

    def __str__(self) -> str:
        return f"{self.namespace}/{self.service}:{self.port}"


def parse_ref(text: str) -> PrometheusRef:
    """``cluster.prometheus``'s value, "NAMESPACE/SERVICE:PORT"; ValueError naming the
    setting for anything else."""
    m = _REF.match(text.strip())
    port = int(m["port"]) if m else 0
    if not m or not 1 <= port <= 65535:
        raise ValueError(
            f"{SETTING} {text!r} must name a Prometheus Service as NAMESPACE/SERVICE:PORT "
            "(e.g. monitoring/prometheus-k8s:9090)"
        )
    return PrometheusRef(m["ns"], m["svc"], port)


def ref(s: Settings) -> PrometheusRef | None:
    """The Prometheus distml reads: the user's (``cluster.prometheus``), else its own when
    `up --with-monitoring` installed it, else None."""
    if s.prometheus:
        return parse_ref(s.prometheus)
    if s.with_monitoring:
        return PrometheusRef(s.namespace, OWN_SERVICE, PORT)
    return None


# --------------------------------------------------------------------------- parsing


def _fail(why: str) -> PrometheusError:
    return PrometheusError(f"not an answer of Prometheus's HTTP API: {why}")


def _document(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:
        raise _fail(f"not JSON ({str(e)[:80]})") from None


def _error_said(doc: Any) -> str | None:
    """Prometheus's own error (``{"status": "error", ...}``), as it said it; else None."""
    if not (isinstance(doc, dict) and doc.get("status") == "error"):
        return None
    kind, error = doc.get("errorType"), doc.get("error")
    return f"Prometheus answered {str(kind or 'an error')[:40]}: {str(error or 'no message')[:400]}"


def payload(body: bytes | str) -> dict[str, Any]:
    """The answer's ``data``, or its error said as Prometheus said it."""
    doc = _document(body)
    said = _error_said(doc)
    if said:
        raise PrometheusError(said)
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise _fail("no status success or error")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise _fail("no data object")
    return data


def _number(value: Any) -> float:
    """A sample's ``[timestamp, "value"]`` pair's value (Prometheus writes numbers as
    strings: "1.5", "NaN", "+Inf")."""
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str)):
        raise _fail(f"a sample value is not [time, string]: {str(value)[:80]}")
    try:
        return float(value[1])
    except ValueError:
        raise _fail(f"a sample value is not a number: {value[1][:40]!r}") from None


def _labels(metric: Any) -> dict[str, str]:
    if not isinstance(metric, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metric.items()
    ):
        raise _fail("a series' labels are not strings")
    return dict(metric)


def parse_query(body: bytes | str) -> list[Sample]:
    """An instant query's answer: (labels, value) per series; a scalar as one sample with
    no labels. A range vector or a string is refused (the queries distml runs give
    neither)."""
    data = payload(body)
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return [({}, _number(result))]
    if kind != "vector":
        raise _fail(f"result type {str(kind)[:20]!r}, not an instant vector or a scalar")
    if not isinstance(result, list):
        raise _fail("the vector is not a list")
    samples = []
    for series in result:
        if not isinstance(series, dict):
            raise _fail("a series is not an object")
        samples.append((_labels(series.get("metric", {})), _number(series.get("value"))))
    return samples


@dataclass(frozen=True)
class Target:
    """One active scrape target, as Prometheus last scraped it."""

    job: str
    labels: dict[str, str]
    health: str  # up, down, unknown
    last_error: str = ""
    scrape_url: str = ""
    scrape_interval_s: float | None = None  # how often it is scraped (its job's interval)


def parse_targets(body: bytes | str) -> list[Target]:
    """``/api/v1/targets``'s active targets."""
    active = payload(body).get("activeTargets")
    if not isinstance(active, list):
        raise _fail("no activeTargets list")
    targets = []
    for t in active:
        if not isinstance(t, dict):
            raise _fail("a target is not an object")
        labels = _labels(t.get("labels", {}))
        fields = [t.get(k, "") for k in ("health", "lastError", "scrapeUrl", "scrapePool")]
        if not all(isinstance(f, str) for f in fields):
            raise _fail("a target's health, lastError, scrapeUrl or scrapePool is not a string")
        health, error, url, pool = fields
        interval = t.get("scrapeInterval")
        if not (interval is None or isinstance(interval, str)):
            raise _fail("a target's scrapeInterval is not a string")
        every = parse_duration(interval) if interval else None
        targets.append(
            Target(labels.get("job", pool), labels, health or "unknown", error, url, every)
        )
    return targets


@dataclass(frozen=True)
class Alert:
    """One active alert (pending or firing), as Prometheus's rules evaluated it last."""

    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    state: str  # pending, firing
    active_at: datetime | None  # when its condition first held (it fires after its ``for:``)
    value: float | None = None

    @property
    def firing(self) -> bool:
        return self.state == "firing"


_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time as Prometheus writes it (nanoseconds: cut to microseconds)."""
    m = _TIME.match(text) if len(text) <= 64 else None
    if not m:
        raise _fail(f"not an RFC 3339 time: {text[:40]!r}")
    fraction = (m[2] or "")[:7]
    zone = "+00:00" if m[3] == "Z" else m[3]
    try:
        return datetime.fromisoformat(f"{m[1]}{fraction}{zone}")
    except ValueError:
        raise _fail(f"not an RFC 3339 time: {text[:40]!r}") from None


def _alert(a: Any) -> Alert:
    if not isinstance(a, dict):
        raise _fail("an alert is not an object")
    labels, annotations = _labels(a.get("labels")), _labels(a.get("annotations", {}))
    name, state = labels.get("alertname"), a.get("state")
    if not name:
        raise _fail("an alert has no alertname label")
    if not isinstance(state, str) or not state:
        raise _fail("an alert's state is not a string")
    since, value = a.get("activeAt"), a.get("value")
    if not all(f is None or isinstance(f, str) for f in (since, value)):
        raise _fail("an alert's activeAt or value is not a string")
    return Alert(
        name,
        labels,
        annotations,
        state,
        parse_time(since) if since else None,
        None if value is None else _float(value, "an alert's value"),
    )


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _fail(f"{what} is not a number: {text[:40]!r}") from None


def parse_alerts(body: bytes | str) -> list[Alert]:
    """``/api/v1/alerts``'s active alerts."""
    alerts = payload(body).get("alerts")
    if not isinstance(alerts, list):
        raise _fail("no alerts list")
    return [_alert(a) for a in alerts]


_DURATION = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$"
)
_UNIT_S = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def parse_duration(text: str) -> float:
    """A Prometheus duration ("30s", "1m30s", "500ms": units y w d h m s ms, largest
    first) in seconds."""
    if text == "0":
        return 0.0
    m = _DURATION.match(text) if len(text) <= 64 else None
    if not (m and any(m.groups())):
        raise _fail(f"not a duration: {text[:40]!r}")
    return float(sum(int(n) * unit for n, unit in zip(m.groups(), _UNIT_S, strict=True) if n))


# --------------------------------------------------------------------------- reading


def get(kube: Kube, r: PrometheusRef, path: str, params: dict[str, str], kubectl: Kubectl) -> bytes:
    try:
        return kube.proxy_get(r.namespace, r.service, r.port, path, params)
    except ProxyError as e:
        raise PrometheusError(_refusal(r, e, kubectl)) from e
    except KubeError as e:
        raise PrometheusError(f"Prometheus {r}: not read: {e}") from e


def _refusal(r: PrometheusRef, e: ProxyError, kubectl: Kubectl) -> str:
    """What an error answer means, and what to do about it."""
    try:
        said = _error_said(json.loads(e.body))
    except (ValueError, RecursionError):
        said = None
    if said:  # the API server passed Prometheus's own error answer on
        return f"Prometheus {r}: {said}"
    where = f"Service {r.namespace}/{r.service}"
    fix = "`invoke up --with-monitoring` installs distml's own" if r.own else f"check {SETTING}"
    if e.status == 404:
        return f"Prometheus {r}: {where} is not there ({e}); {fix}"
    if e.status == 503:
        look = kubectl(f"-n {r.namespace} get pods,endpoints")
        return f"Prometheus {r}: no ready pod behind {where} ({e}); see `{look}`"
    if e.status in (401, 403):
        return (
            f"Prometheus {r}: not allowed to read {where} through the API server's proxy "
            f"({e}): reading it needs `get` on `services/proxy` in namespace {r.namespace} "
            "(ask the cluster's admin)"
        )
    return f"Prometheus {r}: {e}"


def instant(
    kube: Kube,
    r: PrometheusRef,
    promql: str,
    *,
    kubectl: Kubectl = unnamed_context,
    at: float | None = None,
) -> list[Sample]:
    """An instant query, now (or ``at``, seconds since the epoch): (labels, value) per
    series."""
    params = {"query": promql} if at is None else {"query": promql, "time": f"{at:.3f}"}
    body = get(kube, r, QUERY_PATH, params, kubectl)
    try:
        return parse_query(body)
    except PrometheusError as e:
        raise PrometheusError(f"Prometheus {r}, query {promql}: {e}") from None


def scalar(
    kube: Kube, r: PrometheusRef, promql: str, *, kubectl: Kubectl = unnamed_context
) -> float | None:
    """A query that gives one number: None when it gives none (no series; NaN, as a
    quantile over no requests is). More than one series is a PrometheusError: the query
    must aggregate."""
    samples = instant(kube, r, promql, kubectl=kubectl)
    if len(samples) > 1:
        raise PrometheusError(
            f"Prometheus {r}, query {promql}: {len(samples)} series, expected one "
            "(aggregate it: sum(...))"
        )
    if not samples or math.isnan(samples[0][1]):
        return None
    return samples[0][1]


def targets(kube: Kube, r: PrometheusRef, *, kubectl: Kubectl = unnamed_context) -> list[Target]:
    """The active scrape targets, with their health (for checks and diagnostics)."""
    body = get(kube, r, TARGETS_PATH, {"state": "active"}, kubectl)
    try:
        return parse_targets(body)
    except PrometheusError as e:
        raise PrometheusError(f"Prometheus {r}, its targets: {e}") from None


def alerts(kube: Kube, r: PrometheusRef, *, kubectl: Kubectl = unnamed_context) -> list[Alert]:
    """The alerts active now (pending and firing), as its rules last evaluated them."""
    body = get(kube, r, ALERTS_PATH, {}, kubectl)
    try:
        return parse_alerts(body)
    except PrometheusError as e:
        raise PrometheusError(f"Prometheus {r}, its alerts: {e}") from None
