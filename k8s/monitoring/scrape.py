"""How often a Prometheus scrapes one InferenceService's predictor pods, and so which
windows its queries need (``ml.contract.serving_metrics.rate_window``: four scrapes).

distml's own Prometheus scrapes every ``SCRAPE_INTERVAL_S``; a user's scrapes as its
owner set it up (the Prometheus Operator's default is 30 s, Prometheus's own 1 m). A
window of distml's 5 s scrape at 30 s holds no two samples: ``rate`` is empty, KEDA's
Prometheus scaler reads empty as 0, and the HPA scales the predictor down under load,
saying nothing. So the interval is read, never assumed:

1. the service's own targets (``/api/v1/targets``: ``scrapeInterval``, by job), once its
   pods are up;
2. before that (the first ``deploy``), the Prometheus's ``global.scrape_interval``
   (``/api/v1/status/config``); a PodMonitor or job of its own may differ, so
   :func:`check_keda_window` checks the window against the targets once they are there.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from k8s.client.kube import Kube
from k8s.client.objects import Kubectl, unnamed_context
from k8s.monitoring import prometheus
from k8s.monitoring.prometheus import PrometheusError, PrometheusRef, Target
from ml.contract import serving_metrics

CONFIG_PATH = "api/v1/status/config"
#: Prometheus's own default ``global.scrape_interval``.
PROMETHEUS_DEFAULT_S = 60.0


@dataclass(frozen=True)
class Interval:
    """A scrape interval and how it was found (said to the user)."""

    seconds: float
    found: str
    from_targets: bool = False  # read off the service's own targets (else assumed from config)


def service_targets(targets: list[Target], namespace: str, service: str) -> list[Target]:
    """The targets that are this InferenceService's predictor pods, whatever their job: not
    its Service's probe (``k8s.monitoring.stack``: no ``pod``, scraped every 15 s, which
    would lengthen KEDA's window)."""
    return [
        t
        for t in targets
        if t.labels.get("namespace") == namespace
        and t.labels.get("isvc") == service
        and t.labels.get("pod")
    ]


def parse_config(body: bytes | str) -> float:
    """``/api/v1/status/config``'s answer: its ``global.scrape_interval`` in seconds
    (Prometheus's default when the config sets none)."""
    data = prometheus.payload(body)
    text = data.get("yaml")
    if not isinstance(text, str):
        raise PrometheusError("not an answer of Prometheus's HTTP API: its config has no yaml")
    try:
        config = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as e:
        raise PrometheusError(f"Prometheus's config is not YAML: {str(e)[:120]}") from None
    glob = (config or {}).get("global") if isinstance(config, dict) else None
    every = (glob or {}).get("scrape_interval") if isinstance(glob, dict) else None
    if every is None:
        return PROMETHEUS_DEFAULT_S
    if not isinstance(every, str):
        raise PrometheusError(f"Prometheus's global.scrape_interval is not a duration: {every!r}")
    return prometheus.parse_duration(every)


def _targets_interval(targets: list[Target]) -> float | None:
    """The longest interval among ``targets`` (None when none says): a window must hold
    four scrapes of the slowest job."""
    known = [t.scrape_interval_s for t in targets if t.scrape_interval_s]
    return max(known) if known else None


def interval(
    kube: Kube,
    ref: PrometheusRef,
    namespace: str,
    service: str,
    *,
    kubectl: Kubectl = unnamed_context,
) -> Interval:
    """How often ``ref`` scrapes the service's predictor pods (the module doc's order)."""
    mine = service_targets(prometheus.targets(kube, ref, kubectl=kubectl), namespace, service)
    every = _targets_interval(mine)
    if every:
        return Interval(every, f"its {len(mine)} target(s) of {namespace}/{service}", True)
    if ref.own:
        return Interval(float(serving_metrics.SCRAPE_INTERVAL_S), "distml's own scrape job")
    body = prometheus.get(kube, ref, CONFIG_PATH, {}, kubectl)
    try:
        every = parse_config(body)
    except PrometheusError as e:
        raise PrometheusError(f"Prometheus {ref}, its config: {e}") from None
    return Interval(every, "its global scrape_interval (no target of the service yet)")


def keda_window_problem(now: Interval, scaled_at_s: float) -> str | None:
    """Why the window KEDA's query was written with (for a scrape every ``scaled_at_s``)
    is too short for how often the service's targets are scraped ``now``; None when it
    holds, or when no target says yet."""
    if not now.from_targets or now.seconds <= scaled_at_s:
        return None
    return (
        f"Prometheus scrapes the predictor every {now.seconds:g} s, but KEDA's query was "
        f"written for a scrape every {scaled_at_s:g} s: its rate() window holds fewer than "
        "two samples, reads empty, and KEDA takes empty as 0 (the HPA scales the predictor "
        "down under load). Run `invoke deploy` again: it reads the interval off the targets"
    )
