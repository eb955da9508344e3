"""k8s.install.capacity: the pinned figures of the stack are what the real upstream files schedule
once `up` has patched them (the ``plan`` fixture, tests/k8s/conftest.py), the default plan
fits the documented 4-CPU / 8 GiB engine in every provider and mode, with or without Argo,
the release Istio profile would not, and docs/cluster.md's resource table is what
``capacity.table()`` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from k8s.install import capacity, operators, optional_operators, versions
from k8s.install.capacity import Need
from ml.contract import MODEL_TYPES
from tests.support.install_plan import PLANS, settings
from tests.support.upstream import NODE_LABELS, PlanCluster, index, objects, pod_spec

CLUSTER_DOC = (Path(__file__).resolve().parents[3] / "docs" / "cluster.md").read_text()


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


def _pod_need(spec: dict[str, Any]) -> Need:
    total = Need()
    for c in spec.get("containers") or []:
        total += Need.of((c.get("resources") or {}).get("requests"))
    for c in spec.get("initContainers") or []:  # init containers run one at a time, first
        init = Need.of((c.get("resources") or {}).get("requests"))
        total = Need(max(total.cpu_m, init.cpu_m), max(total.memory_mi, init.memory_mi))
    return total


def scheduled(objs: list[dict[str, Any]]) -> dict[str, tuple[Need, int]]:
    """namespace/name -> (requests of one pod, pods on one node) for upstream workloads."""
    hpa_min = {
        (o["metadata"].get("namespace"), o["spec"]["scaleTargetRef"]["name"]): o["spec"].get(
            "minReplicas", 1
        )
        for o in objs
        if o["kind"] == "HorizontalPodAutoscaler"
    }
    out = {}
    for o in objs:
        if o["kind"] not in WORKLOADS:
            continue
        spec, ns, name = pod_spec(o), o["metadata"].get("namespace"), o["metadata"]["name"]
        if o["kind"] == "DaemonSet":
            count = int(
                all(NODE_LABELS.get(k) == v for k, v in spec.get("nodeSelector", {}).items())
            )
        else:
            count = max(o["spec"].get("replicas", 1), hpa_min.get((ns, name), 0))
        if count:
            out[f"{ns}/{name}"] = (_pod_need(spec), count)
    return out


def test_pinned_stack_figures_are_the_upstream_files_after_ups_patches(plan: PlanCluster):
    """Findings 2 and 3 in one: what k8s.install.capacity adds up is what the files schedule once
    `up` has patched them (a pin that moves without its figures fails here)."""
    applied = [o for s in plan.steps if s.what == "apply" for o in s.objects]
    keys = {_key(o) for o in applied}
    derived = scheduled([o for o in plan.all() if _key(o) in keys])
    pinned = {
        p.name: (p.need, p.count)
        for step in operators.components(
            plan.provider, plan.mode, plan.with_argo, plan.with_monitoring
        )
        for p in capacity.STACK[step]
    }
    assert pinned == derived


def _key(obj: dict[str, Any]) -> tuple[str, str | None, str]:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


@pytest.mark.parametrize("provider,mode", PLANS)
def test_the_default_plan_fits_a_4_cpu_8_gib_engine_at_peak(provider, mode):
    s = settings(provider, mode)
    need = capacity.requirement(s, len(MODEL_TYPES))
    assert need.fits(capacity.DOCUMENTED_NODE), f"{provider}/{mode} needs {need}"
    assert capacity.jobs_at_once(capacity.DOCUMENTED_NODE, s) == len(MODEL_TYPES)


@pytest.mark.parametrize("provider,mode", PLANS)
def test_argo_adds_nothing_to_the_requests_so_the_documented_table_holds_with_it(provider, mode):
    """Argo's two pods request nothing (install.yaml sets no resources; held to the file by
    the pinned-figures test above): docs/cluster.md's table is the same with --with-argo."""
    without, with_argo = settings(provider, mode), settings(provider, mode, with_argo=True)
    assert capacity.requirement(with_argo) == capacity.requirement(without)
    argo_pods = capacity.stack_pods(provider, mode, True)[
        len(capacity.stack_pods(provider, mode)) :
    ]
    assert [p.name for p in argo_pods] == [
        f"{optional_operators.ARGO_NAMESPACE}/{d}" for d in optional_operators.ARGO_DEPLOYMENTS
    ]


def test_the_release_istio_profile_would_not_fit():
    """Finding 2: the release istio.yaml (Knative's CI profile) alone asks for more than
    the documented node's CPUs once the rest is there."""
    release = next(u for u in index() if u.endswith("/knative-v1.21.1/istio.yaml"))
    ci = sum((need * n for need, n in scheduled(objects(release)).values()), Need())
    assert ci.cpu_m >= 3000 and ci.memory_mi >= 5 * 1024, ci
    small = sum((need * n for need, n in scheduled(objects(versions.ISTIO_URL)).values()), Need())
    assert small.memory_mi < ci.memory_mi
    s = settings("kind", "knative")
    istio_pinned = sum((p.total for p in capacity.STACK["istio"]), Need())
    with_ci = capacity.requirement(s) + ci + Need(-istio_pinned.cpu_m, -istio_pinned.memory_mi)
    assert not with_ci.fits(capacity.DOCUMENTED_NODE)


def test_the_documented_resource_table_is_what_the_capacity_function_computes():
    assert capacity.table() in CLUSTER_DOC, (
        "paste `python -m k8s.install.capacity` into docs/cluster.md"
    )


@pytest.mark.parametrize("provider,mode", PLANS)
def test_monitoring_adds_prometheus_and_in_standard_mode_keda_and_still_fits(provider, mode):
    without = settings(provider, mode)
    with_monitoring = settings(provider, mode, with_monitoring=True)
    added = capacity.stack_pods(provider, mode, with_monitoring=True)
    extra = [p for p in added if p not in capacity.stack_pods(provider, mode)]
    keda = list(capacity.STACK["keda"]) if mode == "standard" else []
    assert extra == keda + list(capacity.monitoring_pods())
    before, after = capacity.requirement(without), capacity.requirement(with_monitoring)
    need = Need(after.cpu_m - before.cpu_m, after.memory_mi - before.memory_mi)
    assert need == sum((p.total for p in extra), Need())
    # Prometheus 40m/128Mi and Alertmanager 10m/32Mi (one pod: 50m, as Prometheus alone
    # was); KEDA in standard mode.
    assert (need.cpu_m, need.memory_mi) == ((350, 460) if mode == "standard" else (50, 160))
    # The documented engine holds `up` and a job beside the predictor everywhere, and all
    # three jobs at once but on kind in knative mode: 66 MiB short there, so `train-all`
    # runs two at a time (docs/monitoring.md says so).
    assert capacity.requirement(with_monitoring, 1).fits(capacity.DOCUMENTED_NODE)
    at_once = capacity.jobs_at_once(capacity.DOCUMENTED_NODE, with_monitoring)
    assert at_once == (2 if (provider, mode) == ("kind", "knative") else len(MODEL_TYPES))
