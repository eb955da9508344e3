"""Prometheus's relabelling, run here: what a scrape config or a PodMonitor keeps of a pod
that Kubernetes discovery finds, and with which labels.

- :func:`sd_target`: what ``role: pod`` discovery makes of one container port (Prometheus's
  ``discovery/kubernetes/pod.go``).
- :func:`relabel`: ``relabel_configs`` applied to it, for the actions distml's configs and
  the Prometheus Operator's use (keep, drop, replace), with Prometheus's defaults.
- :func:`pod_monitor_relabelings`: the ``relabel_configs`` the Prometheus Operator writes for
  one endpoint of a PodMonitor, transcribed from v0.93.0's ``generatePodMonitorConfig``
  (``pkg/prometheus/promcfg.go``) for the fields distml's PodMonitors set; any other field
  fails, as this model does not know what the Operator does with it.
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


def sd_target(
    pod: str,
    *,
    port: str = "",
    labels: dict[str, str],
    container: str = "server",
    namespace: str = "team-a",
    **meta: str,
) -> dict[str, str]:
    """One container port of one pod, as ``role: pod`` discovery labels it."""
    target = {
        "__address__": f"10.0.0.7:{port or 80}",
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_phase": meta.get("phase", "Running"),
        "__meta_kubernetes_pod_container_name": container,
        "__meta_kubernetes_pod_container_port_number": port,
        "__meta_kubernetes_pod_container_port_name": meta.get("port_name", ""),
        "__meta_kubernetes_pod_container_init": meta.get("init", "false"),
    }
    for k, v in labels.items():
        target["__meta_kubernetes_pod_label_" + sanitize(k)] = v
        target["__meta_kubernetes_pod_labelpresent_" + sanitize(k)] = "true"
    return target


def relabel(rules: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, str] | None:
    """``rules`` applied to ``labels`` (separator ';', regex '(.*)' anchored, replacement
    '$1', action replace by default); None: dropped. What is left, less the ``__`` labels."""
    labels = dict(labels)
    for rule in rules:
        value = rule.get("separator", ";").join(
            labels.get(n, "") for n in rule.get("source_labels", [])
        )
        match = re.fullmatch(str(rule.get("regex", "(.*)")), value)
        action = rule.get("action", "replace").lower()
        if action == "keep":
            if not match:
                return None
        elif action == "drop":
            if match:
                return None
        elif action == "replace":
            if match:
                replacement = re.sub(r"\$\{?(\d+)\}?", r"\\\1", rule.get("replacement", "$1"))
                labels[rule["target_label"]] = match.expand(replacement)
        else:
            raise AssertionError(f"action {action} is not modelled here")
    return {k: v for k, v in labels.items() if not k.startswith("__")}


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
