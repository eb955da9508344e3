"""runtime/cluster/context.py: a namespace KServe will not serve from is refused by `up` and
`deploy`, with the fix; the label is the one KServe v0.20's release actually selects on."""

from __future__ import annotations

import pytest

from k8s.client.objects import KSERVE_SKIPPED_NAMESPACE_LABEL
from k8s.install import versions
from runtime.cluster import ClusterError
from runtime.requests import DeployRequest, UpRequest
from tests.support import upstream
from tests.support.cluster_kit import k3d_results, make_ctx, runtime, set_up


def kubeflow_labelled(fake) -> None:
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "kubeflow", "labels": {"control-plane": "kubeflow"}},
        }
    )


def test_the_label_is_the_one_kserves_pod_mutator_skips():
    webhooks = [
        w
        for o in upstream.objects(versions.KSERVE_URL)
        if o["kind"] == "MutatingWebhookConfiguration"
        for w in o.get("webhooks") or []
        if w["name"].endswith("pod-mutator")
    ]
    assert len(webhooks) == 1
    selector = webhooks[0]["namespaceSelector"]
    assert upstream.selector_matches(selector, {})
    assert not upstream.selector_matches(selector, {KSERVE_SKIPPED_NAMESPACE_LABEL: "kubeflow"})


def test_up_refuses_a_namespace_labelled_control_plane_before_applying_it(wd, fake):
    kubeflow_labelled(fake)
    rt = runtime(make_ctx(fake, k3d_results(exists=False, imported=False)), wd, fake)
    with pytest.raises(ClusterError, match="labelled control-plane=kubeflow") as e:
        rt.up(UpRequest())
    assert "INVOKE_CLUSTER_NAMESPACE" in str(e.value)
    assert "kubectl --context k3d-dist-ml label namespace kubeflow control-plane-" in str(e.value)
    assert not [o for o in fake.applied if o["kind"] == "Namespace"]


def test_deploy_refuses_it_when_the_label_came_after_up(wd, fake):
    set_up(wd, fake)
    kubeflow_labelled(fake)
    before = len(fake.applied)
    rt = runtime(make_ctx(fake, {}), wd, fake)
    with pytest.raises(ClusterError, match="KServe's pod mutator skips"):
        rt.deploy(DeployRequest())
    assert fake.applied[before:] == [], "nothing is selected, published or served"
