"""What the tests of `up`'s install plan share (tests/k8s/install/test_operators.py,
tests/k8s/install/test_capacity.py, the ``plan`` fixture in tests/k8s/conftest.py): every provider x
serving mode with and without Argo, the settings of one, and the plan run against a cluster
made of the real upstream files (tests/support/upstream.py) with what `up`, `train-all` and
`deploy` create added."""

from __future__ import annotations

from typing import Any

import pytest

from k8s import manifests
from k8s.install import operators, optional_operators
from k8s.install.operators import Installer
from k8s.providers import provider as make_provider
from k8s.providers.settings import PROVIDERS, SERVING_MODES, Settings
from ml.contract import MODEL_TYPES
from tests.support.fakekube import FakeClock
from tests.support.upstream import PlanCluster, Step, baseline, plan_context

PLANS = [(p, m) for p in PROVIDERS for m in SERVING_MODES]
ARGO_PLANS = [(p, m, argo) for p, m in PLANS for argo in (False, True)]
# `up --with-monitoring`: KEDA is an install step in standard mode (with Argo too, to hold
# the order of every step); in knative mode monitoring installs no operator.
MONITORING_PLANS = [(p, "standard", True) for p in PROVIDERS]
# (provider, mode, with_argo, with_monitoring): every plan the ``plan`` fixture runs.
ALL_PLANS = [(*plan, False) for plan in ARGO_PLANS] + [(*plan, True) for plan in MONITORING_PLANS]


def settings(
    provider: str, mode: str, with_argo: bool = False, with_monitoring: bool = False
) -> Settings:
    return Settings(
        image="distml:0123456789ab",
        provider=provider,
        serving_mode=mode,
        with_argo=with_argo,
        with_monitoring=with_monitoring,
    )


def our_pods(s: Settings, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods our Jobs and TFJobs make, and a predictor pod as KServe makes it."""
    pods = []
    for obj in objs:
        templates = []
        if obj["kind"] == "Job":
            templates = [obj["spec"]["template"]]
        elif obj["kind"] == "TFJob":
            templates = [r["template"] for r in obj["spec"]["tfReplicaSpecs"].values()]
        for t in templates:
            meta = {"name": f"{obj['metadata']['name']}-pod", "namespace": s.namespace}
            meta["labels"] = (t.get("metadata") or {}).get("labels") or {}
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta})
    labels = {"serving.kserve.io/inferenceservice": s.service}
    meta = {"name": f"{s.service}-predictor", "namespace": s.namespace, "labels": labels}
    return [*pods, {"apiVersion": "v1", "kind": "Pod", "metadata": meta}]


def run_plan(
    provider: str,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    with_argo: bool = False,
    with_monitoring: bool = False,
) -> PlanCluster:
    """Run the installer's plan, then add what `up`, `train-all` and `deploy` create."""
    cluster = PlanCluster(provider, baseline(provider))
    monkeypatch.setattr(operators, "wait_deployments_available", cluster.wait)
    monkeypatch.setattr(optional_operators, "wait_apiservice_available", _apiservice_wait(cluster))
    s = settings(provider, mode, with_argo, with_monitoring)
    p = make_provider(provider)
    Installer(plan_context(cluster), cluster.kube, p, s, lambda _: None, FakeClock()).all()
    # `invoke workflow` runs only after `up --with-argo` (its objects need Argo's namespace).
    lifecycle = manifests.cluster_objects(s, models=MODEL_TYPES, source_dir=True)
    ours = [o for step, o in lifecycle if with_argo or step != manifests.WORKFLOW_STEP]
    cluster.ours(ours + our_pods(s, ours), "up, train-all, deploy")
    cluster.mode, cluster.with_argo = mode, with_argo
    cluster.with_monitoring = with_monitoring  # type: ignore[attr-defined]
    return cluster


def _apiservice_wait(cluster: PlanCluster) -> Any:
    """Records a wait for an APIService as a plan step (``apiservice``, its name)."""

    def wait(kube: Any, name: str, **_: Any) -> None:
        cluster.steps.append(Step("apiservice", names=[name]))

    return wait
