"""k8s.install.istio_gateway: the pinned Istio install file with only its ingress gateway Service's
type changed (held against the real file when it can be had), a file that is not the one
pinned refused, and the line `up` says before installing: a note for a ClusterIP or
NodePort, a warning for a LoadBalancer, each naming the setting that chooses."""

from __future__ import annotations

import copy

import pytest
import yaml

from k8s.install import istio_gateway, versions
from k8s.install.upstream_files import UpstreamError
from k8s.providers.settings import GATEWAY_TYPES
from tests.support.upstream import file_of

GATEWAY = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system"},
    "spec": {"type": "LoadBalancer", "ports": [{"name": "http2", "port": 80}]},
}
OTHERS = [
    {"apiVersion": "v1", "kind": "Service",
     "metadata": {"name": "istiod", "namespace": "istio-system"},
     "spec": {"ports": [{"port": 15010}]}},
    {"apiVersion": "v1", "kind": "Service",  # the same name elsewhere: not the gateway
     "metadata": {"name": "istio-ingressgateway", "namespace": "other"},
     "spec": {"type": "LoadBalancer"}},
]  # fmt: skip


def docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("kind", GATEWAY_TYPES)
def test_only_the_gateway_services_type_changes(kind):
    text = yaml.safe_dump_all([OTHERS[0], GATEWAY, OTHERS[1]])
    out = docs(istio_gateway.typed(text, kind))
    want = copy.deepcopy(GATEWAY)
    want["spec"]["type"] = kind
    assert out == [OTHERS[0], want, OTHERS[1]]


def test_the_pinned_file_keeps_every_other_object_as_it_is():
    pinned = file_of(versions.ISTIO_URL).read_text()  # skips when it cannot be had here
    before, after = docs(pinned), docs(istio_gateway.typed(pinned, "ClusterIP"))
    assert len(before) == len(after) > 30
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    (b, a), *rest = changed
    assert rest == []
    assert (b["kind"], b["metadata"]["name"], b["spec"]["type"]) == (
        "Service",
        "istio-ingressgateway",
        "LoadBalancer",
    )
    b["spec"]["type"] = "ClusterIP"
    assert a == b


@pytest.mark.parametrize("services", [[], [GATEWAY, GATEWAY]], ids=["none", "two"])
def test_a_file_without_exactly_one_gateway_service_is_refused(services):
    with pytest.raises(UpstreamError, match=f"holds {len(services)} Service istio-system/"):
        istio_gateway.typed(yaml.safe_dump_all([OTHERS[0], *services]), "ClusterIP")


def test_a_cluster_ip_is_a_note_that_says_how_to_choose():
    line = istio_gateway.notice("ClusterIP")
    assert line.startswith(
        "note: Istio's ingress gateway Service istio-system/istio-ingressgateway"
    )
    assert "is made ClusterIP (not a LoadBalancer, as released)" in line
    assert "port-forward" in line
    assert "cluster.istio_gateway_type (INVOKE_CLUSTER_ISTIO_GATEWAY_TYPE) chooses" in line


def test_a_load_balancer_is_a_warning_about_cost_and_exposure():
    line = istio_gateway.notice("LoadBalancer")
    assert line.startswith("warning: ")
    assert "billed load balancer reachable from the internet" in line
    assert "no authentication" in line


def test_every_type_says_what_it_means():
    assert tuple(istio_gateway.MEANS) == GATEWAY_TYPES
