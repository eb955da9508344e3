"""The rights a Prometheus the Prometheus Operator runs needs to discover distml's targets:
in each namespace a PodMonitor or ServiceMonitor of ``k8s.monitoring.prometheus_operator``
lives in, a Role and a RoleBinding to that Prometheus's ServiceAccount (pure builders).

Why: kube-prometheus built from its jsonnet grants its Prometheus (ServiceAccount
:data:`DEFAULT_ACCOUNT`) Roles in ``default``, ``kube-system`` and its own namespace only
(``values.prometheus.namespaces``; ``manifests/prometheus-roleSpecificNamespaces.yaml`` at
v0.18.0), and a ClusterRole with no right on pods. Elsewhere the Operator selects the
monitors and writes their scrape jobs, but discovery is forbidden and the targets never
appear. kube-prometheus-stack's ClusterRole grants these rights in every namespace: there
the Role is redundant, and harmless.

What discovery lists and watches (Prometheus v3.16.0, ``discovery/kubernetes/kubernetes.go``):
role ``pod`` (a PodMonitor) pods; role ``endpoints`` (a ServiceMonitor, by the Operator's
default ``serviceDiscoveryRole``) endpoints, services and pods; role ``endpointslice``
(``serviceDiscoveryRole: EndpointSlice``, kube-prometheus's since v0.17) endpointslices,
services and pods. The verbs are kube-prometheus's own Roles': get, list, watch.
"""

from __future__ import annotations

from typing import Any

from k8s.manifests.pods import meta
from k8s.monitoring.stack import COMPONENT, RBAC_API

#: The Role and RoleBinding's name, in every namespace they are written to.
NAME = "distml-prometheus-discovery"
#: kube-prometheus's Prometheus: ServiceAccount ``prometheus-k8s`` in ``monitoring``.
DEFAULT_ACCOUNT = "monitoring/prometheus-k8s"
RULES = (
    {
        "apiGroups": [""],
        "resources": ["pods", "services", "endpoints"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["get", "list", "watch"],
    },
)


def role(namespace: str) -> dict[str, Any]:
    """Read-only service discovery in ``namespace``."""
    return {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": meta(NAME, namespace, COMPONENT),
        "rules": [{k: list(v) for k, v in rule.items()} for rule in RULES],
    }


def role_binding(namespace: str, account: tuple[str, str]) -> dict[str, Any]:
    """:func:`role` in ``namespace`` to the ServiceAccount ``account`` (namespace, name)."""
    account_namespace, name = account
    return {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": meta(NAME, namespace, COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": account_namespace}],
    }


def discovery_rbac(namespaces: list[str], account: tuple[str, str]) -> list[dict[str, Any]]:
    """A Role and its RoleBinding in each of ``namespaces`` (each once, in their order)."""
    return [
        obj for ns in dict.fromkeys(namespaces) for obj in (role(ns), role_binding(ns, account))
    ]
