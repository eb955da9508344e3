"""`up --with-monitoring` on a cluster distml did not create: distml's Prometheus is its own
namespaced object (made with the rest, after a check that its names are free); KEDA is
cluster-wide, surveyed like every operator: missing without --install-operators it stops
`up` before anything is written; `down` removes the Prometheus, never KEDA."""

from __future__ import annotations

import pytest

from k8s.install import versions
from k8s.install.operator_check import PROBES, MissingOperators
from k8s.install.operators import components
from k8s.manifests.names import INSTANCE_LABEL
from k8s.monitoring import stack
from runtime.cluster import ClusterError
from runtime.requests import DownRequest, UpRequest
from tests.runtime.cluster.test_existing_up import (
    NS,
    existing,
    node,
    results,
    storage_class,
)
from tests.support.cluster_kit import available, commands, make_ctx

UP = UpRequest(serving_mode="standard", with_monitoring=True)


def cluster(fake, *, keda: bool) -> None:
    node(fake, "node-a")
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    for step in components("existing", "standard", with_monitoring=keda):
        for name in PROBES[step].deployments:
            available(fake, PROBES[step].namespace, name)


def test_without_keda_up_stops_before_any_write_naming_it(wd, fake):
    cluster(fake, keda=False)
    c = make_ctx(fake, results())
    with pytest.raises(MissingOperators) as info:
        existing(c, wd, fake, []).up(UP)
    assert f"KEDA {versions.KEDA_VERSION} (no Available Deployment keda/keda-operator)" in str(
        info.value
    )
    assert fake.applied == [] and not any(" apply " in x for x in commands(c))


def test_with_keda_there_prometheus_is_made_in_the_namespace_and_down_keeps_keda(wd, fake):
    cluster(fake, keda=True)
    lines: list[str] = []
    c = make_ctx(fake, results())
    assert existing(c, wd, fake, lines).up(UP) == 0
    assert not [x for x in commands(c) if "keda" in x]  # found, used as it is
    ours = [o for o in fake.applied if o["metadata"]["name"] == stack.NAME]
    assert len(ours) == 6 and all(o["metadata"]["namespace"] == NS for o in ours)
    assert {o["metadata"]["labels"][INSTANCE_LABEL] for o in ours} == {wd.state().instance}
    assert any(line.startswith(f"KEDA {versions.KEDA_VERSION}: found") for line in lines)
    down = make_ctx(fake, results())
    assert existing(down, wd, fake, []).down(DownRequest()) == 0
    assert all(fake.obj(o["apiVersion"], o["kind"], stack.NAME, NS) is None for o in ours)
    assert not [x for x in commands(down) if "keda" in x]
    assert fake.obj("apps/v1", "Deployment", "keda-operator", "keda") is not None


def test_a_prometheus_of_that_name_not_this_work_dirs_is_refused_before_any_write(wd, fake):
    cluster(fake, keda=True)
    other = {"app.kubernetes.io/name": "prometheus"}
    meta = {"name": stack.NAME, "namespace": NS, "labels": other}
    fake.put({"apiVersion": "v1", "kind": "Service", "metadata": meta})
    with pytest.raises(ClusterError, match=r"Service ml-team/distml-prometheus: not distml's"):
        existing(make_ctx(fake, results()), wd, fake, []).up(UP)
    assert fake.applied == []
    assert wd.state().context is None  # the cluster was not even claimed
