"""k8s.monitoring.operator_rbac: the Role grants exactly what Prometheus's Kubernetes discovery
lists and watches for a PodMonitor's and a ServiceMonitor's jobs (either serviceDiscoveryRole)
and nothing more, read-only; its RoleBinding names the Prometheus's ServiceAccount; both
strictly valid at the pinned Kubernetes version."""

from __future__ import annotations

from k8s.monitoring import operator_rbac
from k8s.monitoring import prometheus_operator as po
from k8s.monitoring.stack import RBAC_API
from k8s.providers.settings import Settings
from tests.support import k8s_schemas

#: What each discovery role lists and watches, by API group (Prometheus v3.16.0,
#: discovery/kubernetes/kubernetes.go): ``pod`` for a PodMonitor, ``endpoints`` or
#: ``endpointslice`` for a ServiceMonitor (the Prometheus's serviceDiscoveryRole).
DISCOVERY = {
    "pod": {("", "pods")},
    "endpoints": {("", "endpoints"), ("", "services"), ("", "pods")},
    "endpointslice": {("discovery.k8s.io", "endpointslices"), ("", "services"), ("", "pods")},
}
ACCOUNT = ("monitoring", "prometheus-k8s")


def granted(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_role_grants_what_discovery_reads_for_either_role_and_nothing_else() -> None:
    role = operator_rbac.role("team-a")
    needed = set().union(*DISCOVERY.values())
    assert granted(role) == {(g, r, v) for g, r in needed for v in ("get", "list", "watch")}
    assert all("resourceNames" not in rule and "nonResourceURLs" not in rule
               for rule in role["rules"])  # fmt: skip


def test_the_binding_gives_the_role_to_the_prometheus_s_service_account() -> None:
    binding = operator_rbac.role_binding("team-a", ("observability", "prom"))
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"] == {
        "apiGroup": RBAC_API.split("/")[0],
        "kind": "Role",
        "name": operator_rbac.NAME,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prom", "namespace": "observability"}
    ]


def test_a_role_and_binding_per_namespace_each_once_in_order() -> None:
    objs = operator_rbac.discovery_rbac(["team-a", "kubeflow", "team-a", "keda"], ACCOUNT)
    assert [(o["kind"], o["metadata"]["namespace"]) for o in objs] == [
        ("Role", "team-a"), ("RoleBinding", "team-a"), ("Role", "kubeflow"),
        ("RoleBinding", "kubeflow"), ("Role", "keda"), ("RoleBinding", "keda"),
    ]  # fmt: skip
    assert objs[0] == operator_rbac.role("team-a")
    assert objs[0]["rules"] is not operator_rbac.role("team-a")["rules"]  # fresh each time


def test_the_default_account_is_kube_prometheus_s_prometheus() -> None:
    assert operator_rbac.DEFAULT_ACCOUNT == "monitoring/prometheus-k8s"
    assert po.OperatorOptions().account == ACCOUNT


def test_every_rbac_object_is_strictly_valid() -> None:
    s = Settings(image="distml:0123456789ab", namespace="team-a", serving_mode="standard")
    rbac = [o for o in po.operator_objects(s) if o["apiVersion"] == RBAC_API]
    assert len(rbac) == 6
    for obj in rbac:
        assert k8s_schemas.validate(obj) == [], (obj["kind"], obj["metadata"]["namespace"])
