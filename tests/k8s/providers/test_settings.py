"""k8s.providers.settings: the TensorFlow threads a worker pod gets are its CPU limit in whole cores
(millicores rounded down, at least one), a Resources renders as the requests and limits
Kubernetes reads, with a GPU limit only when GPUs are asked for, and Istio's gateway on an
existing cluster is a ClusterIP unless another known type is asked for."""

from __future__ import annotations

import dataclasses

import pytest

from k8s.providers.settings import GATEWAY_TYPES, Resources, Settings, gateway_type


@pytest.mark.parametrize(
    ("cpu_limit", "threads"),
    [("1", 1), ("2", 2), ("4000m", 4), ("2500m", 2), ("500m", 1), ("0.5", 1)],
)
def test_threads_are_the_worker_cpu_limit_in_whole_cores(cpu_limit: str, threads: int) -> None:
    worker = dataclasses.replace(Settings(image="x:1").worker_resources, cpu_limit=cpu_limit)
    assert Settings(image="x:1", worker_resources=worker).threads == threads


def test_resources_render_requests_and_limits_and_a_gpu_only_when_asked() -> None:
    r = Resources("250m", "1", "864Mi", "2Gi")
    assert r.as_dict() == {
        "requests": {"cpu": "250m", "memory": "864Mi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    assert r.as_dict(gpus=2)["limits"] == {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "2"}
    assert r.as_dict(gpus=2)["requests"] == r.as_dict()["requests"]


def test_the_gateway_is_a_cluster_ip_unless_asked():
    assert gateway_type(Settings(image="x:1", provider="existing")) == "ClusterIP"
    for kind in GATEWAY_TYPES:
        s = Settings(image="x:1", provider="existing", istio_gateway_type=kind)
        assert gateway_type(s) == kind


@pytest.mark.parametrize("kind", ["loadbalancer", "ExternalName", "LB"])
def test_an_unknown_gateway_type_is_refused_naming_the_setting(kind):
    s = Settings(image="x:1", provider="existing", istio_gateway_type=kind)
    with pytest.raises(ValueError, match=rf"cluster\.istio_gateway_type .*'{kind}'.*ClusterIP"):
        gateway_type(s)
