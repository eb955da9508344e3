"""The Prometheus Operator's scrape configuration for a PodMonitor, as the Operator writes it
into the Prometheus it runs: transcribed from v0.93.0's ``generatePodMonitorConfig``
(``pkg/prometheus/promcfg.go``) for the fields distml's PodMonitors set
(``k8s.monitoring.prometheus_operator``); any other field fails, as this model does not
know what the Operator does with it.

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


def _selector_rules(selector: dict[str, Any]) -> list[dict[str, Any]]:
    """The Operator's relabel form of a label selector (SelectorMechanism Relabel)."""
    rules: list[dict[str, Any]] = []
    for key in sorted(selector.get("matchLabels") or {}):
        rules.append({
            "action": "keep",
            "source_labels": [f"__meta_kubernetes_pod_label_{sanitize(key)}",
                              f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"],
            "regex": f"({selector['matchLabels'][key]});true",
        })  # fmt: skip
    for e in selector.get("matchExpressions") or []:
        present = f"__meta_kubernetes_pod_labelpresent_{sanitize(e['key'])}"
        both = [f"__meta_kubernetes_pod_label_{sanitize(e['key'])}", present]
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


def job_name(monitor: dict[str, Any], index: int = 0) -> str:
    """The Operator's scrape job name for endpoint ``index`` (its ``job`` label differs:
    ``<namespace>/<name>``)."""
    meta = monitor["metadata"]
    return f"podMonitor/{meta['namespace']}/{meta['name']}/{index}"


def scrape_config(monitor: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The whole scrape job for endpoint ``index``: discovery in the PodMonitor's own
    namespace (no namespaceSelector), the endpoint's path, no interval of its own (the
    Prometheus's global one applies), and :func:`pod_monitor_relabelings`."""
    ep = monitor["spec"]["podMetricsEndpoints"][index]
    return {
        "job_name": job_name(monitor, index),
        "honor_labels": False,
        "kubernetes_sd_configs": [
            {"role": "pod", "namespaces": {"names": [monitor["metadata"]["namespace"]]}}
        ],
        "metrics_path": ep.get("path", "/metrics"),
        "relabel_configs": pod_monitor_relabelings(monitor, index),
    }
