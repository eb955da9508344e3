"""Prometheus's relabelling, run here: what a scrape config or a PodMonitor keeps of a pod
(a ServiceMonitor of a Service's endpoint) that Kubernetes discovery finds, and with which
labels.

- :func:`sd_target`: what ``role: pod`` discovery makes of one container port (Prometheus's
  ``discovery/kubernetes/pod.go``).
- :func:`service_sd_target`: what ``role: service`` discovery makes of one Service port
  (``discovery/kubernetes/service.go``: its address is the Service's DNS name).
- :func:`sd_endpoint_target`: what ``role: endpoints`` discovery makes of one port of a
  Service's endpoint that is a pod (``discovery/kubernetes/endpoints.go``).
- :func:`relabel`: ``relabel_configs`` applied to it, for the actions distml's configs and
  the Prometheus Operator's use (keep, drop, replace), with Prometheus's defaults.
- :func:`pod_monitor_relabelings`, :func:`service_monitor_relabelings`: the
  ``relabel_configs`` the Prometheus Operator writes for one endpoint of a PodMonitor or a
  ServiceMonitor (``integration.operator_config``, whose PodMonitor jobs the kind run loads
  into a real Prometheus too).
- :func:`scraped`: a series' labels once scraped from a target, with or without
  ``honor_labels`` (``scrape/scrape.go``'s ``mutateSampleLabels``).
"""

from __future__ import annotations

import re
from typing import Any

from integration.operator_config import (
    honor_labels,
    pod_monitor_relabelings,
    sanitize,
    service_monitor_relabelings,
)

__all__ = [
    "honor_labels",
    "pod_monitor_relabelings",
    "relabel",
    "sanitize",
    "scraped",
    "sd_endpoint_target",
    "sd_target",
    "service_monitor_relabelings",
    "service_sd_target",
]


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


def service_sd_target(
    service: str, *, port: int, labels: dict[str, str], namespace: str = "team-a"
) -> dict[str, str]:
    """One port of one Service, as ``role: service`` discovery labels it."""
    target = {
        "__address__": f"{service}.{namespace}.svc:{port}",
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_service_name": service,
        "__meta_kubernetes_service_port_number": str(port),
        "__meta_kubernetes_service_port_protocol": "TCP",
        "__meta_kubernetes_service_type": "ClusterIP",
    }
    for k, v in labels.items():
        target["__meta_kubernetes_service_label_" + sanitize(k)] = v
        target["__meta_kubernetes_service_labelpresent_" + sanitize(k)] = "true"
    return target


def sd_endpoint_target(
    service: str,
    port_name: str,
    *,
    service_labels: dict[str, str],
    pod: str,
    namespace: str,
    container: str = "manager",
) -> dict[str, str]:
    """One port of a Service's endpoint, a Running pod, as ``role: endpoints`` discovery
    labels it (the pod's own labels, which the Operator's ServiceMonitor jobs never read,
    left out)."""
    target = {
        "__address__": "10.0.0.9:8080",
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_endpoints_name": service,
        "__meta_kubernetes_service_name": service,
        "__meta_kubernetes_endpoint_port_name": port_name,
        "__meta_kubernetes_endpoint_ready": "true",
        "__meta_kubernetes_endpoint_address_target_kind": "Pod",
        "__meta_kubernetes_endpoint_address_target_name": pod,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_container_name": container,
    }
    for k, v in service_labels.items():
        target["__meta_kubernetes_service_label_" + sanitize(k)] = v
        target["__meta_kubernetes_service_labelpresent_" + sanitize(k)] = "true"
    return target


def scraped(series: dict[str, str], target: dict[str, str], honor_labels: bool) -> dict[str, str]:
    """A series' labels once scraped from a target with labels ``target``: on a clash the
    series' own value wins with ``honor_labels``; without it the target's does, and the
    series' is kept as ``exported_<name>``. Empty labels are dropped."""
    out = dict(series)
    for name, value in target.items():
        if name in out and not honor_labels:
            out["exported_" + name] = out.pop(name)
        out.setdefault(name, value)
    return {k: v for k, v in out.items() if v}


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
