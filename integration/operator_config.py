"""The Prometheus Operator's scrape configuration for a PodMonitor or a ServiceMonitor, as the
Operator writes it into the Prometheus it runs: transcribed from v0.93.0's
``generatePodMonitorConfig`` and ``generateServiceMonitorConfig`` (``pkg/prometheus/promcfg.go``)
for the fields distml's monitors set (``k8s.monitoring.prometheus_operator``); any other field
fails, as this model does not know what the Operator does with it.

The unit tests run these relabellings on discovered pods (tests/support/relabel.py); the
kind run's second lifecycle (``integration.operator_prometheus``) loads them into a real
Prometheus set up as the Operator sets one up.
"""

from __future__ import annotations

import re
from typing import Any

#: The PodMonitor fields the model knows (spec, and each endpoint).
MODELLED_SPEC = {"selector", "podMetricsEndpoints"}
MODELLED_ENDPOINT = {"port", "portNumber", "path", "relabelings"}
#: The ServiceMonitor fields the model knows (spec, and each endpoint).
MODELLED_SERVICE_SPEC = {"selector", "endpoints"}
MODELLED_SERVICE_ENDPOINT = {"port", "path", "honorLabels"}
#: A PodMonitor relabeling's fields → Prometheus's.
_FIELDS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "replacement": "replacement",
    "action": "action",
}


def sanitize(name: str) -> str:
    """A Kubernetes label's name as a Prometheus meta label's suffix."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _selector_rules(selector: dict[str, Any], of: str = "pod") -> list[dict[str, Any]]:
    """The Operator's relabel form of a label selector (SelectorMechanism Relabel) on the
    labels of ``of``: the pod's (a PodMonitor) or the service's (a ServiceMonitor)."""
    rules: list[dict[str, Any]] = []
    for key in sorted(selector.get("matchLabels") or {}):
        rules.append({
            "action": "keep",
            "source_labels": [f"__meta_kubernetes_{of}_label_{sanitize(key)}",
                              f"__meta_kubernetes_{of}_labelpresent_{sanitize(key)}"],
            "regex": f"({selector['matchLabels'][key]});true",
        })  # fmt: skip
    for e in selector.get("matchExpressions") or []:
        present = f"__meta_kubernetes_{of}_labelpresent_{sanitize(e['key'])}"
        both = [f"__meta_kubernetes_{of}_label_{sanitize(e['key'])}", present]
        values = "|".join(e.get("values") or [])
        rules.append({
            "In": {"action": "keep", "source_labels": both, "regex": f"({values});true"},
            "NotIn": {"action": "drop", "source_labels": both, "regex": f"({values});true"},
            "Exists": {"action": "keep", "source_labels": [present], "regex": "true"},
            "DoesNotExist": {"action": "drop", "source_labels": [present], "regex": "true"},
        }[e["operator"]])  # fmt: skip
    return rules


def _keep(meta: str, regex: str) -> dict[str, Any]:
    return {"action": "keep", "source_labels": [f"__meta_kubernetes_{meta}"], "regex": regex}


def pod_monitor_relabelings(monitor: dict[str, Any], index: int = 0) -> list[dict[str, Any]]:
    """The ``relabel_configs`` of the Operator's scrape job for endpoint ``index`` of the
    PodMonitor ``monitor`` (no scrape class, no enforced namespace label, one shard)."""
    spec = monitor["spec"]
    assert set(spec) <= MODELLED_SPEC, f"not modelled: {set(spec) - MODELLED_SPEC}"
    ep = spec["podMetricsEndpoints"][index]
    assert set(ep) <= MODELLED_ENDPOINT, f"not modelled: {set(ep) - MODELLED_ENDPOINT}"
    rules: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
         "regex": "(Failed|Succeeded)"},  # filterRunning's default
        *_selector_rules(spec["selector"]),
    ]  # fmt: skip
    if ep.get("port"):
        rules.append(_keep("pod_container_port_name", ep["port"]))
    elif ep.get("portNumber"):
        rules.append(_keep("pod_container_port_number", str(ep["portNumber"])))
    for meta, label in (("namespace", "namespace"), ("pod_container_name", "container"),
                        ("pod_name", "pod")):  # fmt: skip
        rules.append({"source_labels": [f"__meta_kubernetes_{meta}"], "target_label": label})
    name = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
    rules.append({"target_label": "job", "replacement": name})
    if ep.get("port"):
        rules.append({"target_label": "endpoint", "replacement": ep["port"]})
    for given in ep.get("relabelings") or []:
        rules.append({_FIELDS[k]: v for k, v in given.items()})
    # One shard: the Operator's hashmod of __address__ into __tmp_hash, kept when 0.
    return rules


def service_monitor_relabelings(monitor: dict[str, Any], index: int = 0) -> list[dict[str, Any]]:
    """The ``relabel_configs`` of the Operator's scrape job for endpoint ``index`` of the
    ServiceMonitor ``monitor``, discovered by role ``endpoints`` (the Operator's default
    ``serviceDiscoveryRole``; no scrape class, no enforced namespace label, one shard)."""
    spec = monitor["spec"]
    assert set(spec) <= MODELLED_SERVICE_SPEC, f"not modelled: {set(spec) - MODELLED_SERVICE_SPEC}"
    ep = spec["endpoints"][index]
    assert set(ep) <= MODELLED_SERVICE_ENDPOINT, (
        f"not modelled: {set(ep) - MODELLED_SERVICE_ENDPOINT}"
    )
    target = ["__meta_kubernetes_endpoint_address_target_kind",
              "__meta_kubernetes_endpoint_address_target_name"]  # fmt: skip
    rules: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        *_selector_rules(spec["selector"], of="service"),
        _keep("endpoint_port_name", ep["port"]),
        {"source_labels": target, "separator": ";", "regex": "Node;(.*)",
         "replacement": "${1}", "target_label": "node"},
        {"source_labels": target, "separator": ";", "regex": "Pod;(.*)",
         "replacement": "${1}", "target_label": "pod"},
    ]  # fmt: skip
    for meta, label in (("namespace", "namespace"), ("service_name", "service"),
                        ("pod_name", "pod"), ("pod_container_name", "container")):  # fmt: skip
        rules.append({"source_labels": [f"__meta_kubernetes_{meta}"], "target_label": label})
    rules.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                  "regex": "(Failed|Succeeded)"})  # fmt: skip
    rules.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
                  "replacement": "${1}"})  # fmt: skip
    rules.append({"target_label": "endpoint", "replacement": ep["port"]})
    return rules


def honor_labels(monitor: dict[str, Any], index: int = 0) -> bool:
    """The scrape job's ``honor_labels`` (no ``overrideHonorLabels`` on the Prometheus)."""
    endpoints = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
    return bool(endpoints[index].get("honorLabels", False))


def job_name(monitor: dict[str, Any], index: int = 0) -> str:
    """The Operator's scrape job name for endpoint ``index`` (its ``job`` label differs:
    ``<namespace>/<name>`` of a PodMonitor, the Service's name of a ServiceMonitor)."""
    meta, kind = monitor["metadata"], monitor["kind"][0].lower() + monitor["kind"][1:]
    return f"{kind}/{meta['namespace']}/{meta['name']}/{index}"


def scrape_config(monitor: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The whole scrape job for endpoint ``index`` of a PodMonitor or a ServiceMonitor:
    discovery (role pod, or endpoints) in the monitor's own namespace (no
    namespaceSelector), the endpoint's path, no interval of its own (the Prometheus's
    global one applies), its ``honorLabels``, and the Operator's relabelling."""
    service = monitor["kind"] == "ServiceMonitor"
    spec = monitor["spec"]
    ep = (spec["endpoints"] if service else spec["podMetricsEndpoints"])[index]
    relabel = service_monitor_relabelings if service else pod_monitor_relabelings
    return {
        "job_name": job_name(monitor, index),
        "honor_labels": honor_labels(monitor, index),
        "kubernetes_sd_configs": [
            {
                "role": "endpoints" if service else "pod",
                "namespaces": {"names": [monitor["metadata"]["namespace"]]},
            }
        ],
        "metrics_path": ep.get("path", "/metrics"),
        "relabel_configs": relabel(monitor, index),
    }
