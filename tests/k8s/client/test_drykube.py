"""k8s.client.drykube: ``invoke --dry`` prints what it would apply or delete, touches nothing."""

from __future__ import annotations

import yaml

from k8s.client.drykube import DryKube
from tests.support.wait_kit import NS, collect


def test_dry_kube_prints_and_touches_nothing() -> None:
    lines, out = collect()
    dry = DryKube(out=out)
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 2},
    }

    assert dry.apply(obj) is obj
    assert lines[0] == "would apply Deployment kubeflow/web"
    assert yaml.safe_load(lines[1]) == obj
    assert lines[1].index("apiVersion") < lines[1].index("spec")  # not sorted
    assert dry.get("apps/v1", "Deployment", "web", NS) is None
    assert dry.list("apps/v1", "Deployment", NS) == []
    assert dry.delete("v1", "PersistentVolumeClaim", "strategy-volume", NS) is False
    assert lines[2] == "would delete PersistentVolumeClaim kubeflow/strategy-volume"
    assert dry.logs("p", NS) == ""
    assert dry.events(NS) == []
    assert dry.apply(obj, dry_run=True) is obj  # a readiness probe: nothing to show
    assert len(lines) == 3
