"""k8s.install.operators' KEDA step (``up --with-monitoring``, standard mode), held against its
pinned release file: applied server-side before KServe, every Deployment of the file waited
for, then the APIService the HPA reads external metrics through; its wait fails fast and
says what to look at; ``down --keep-cluster`` removes its CRDs while its operator still runs
(ScaledObjects' finalizers are the operator's), then the rest, and waits for its
namespace; on a cluster distml did not create, a missing KEDA is reported, not installed."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
from invoke import Config, MockContext, Result

from k8s.install import operators, optional_operators, versions
from k8s.install.operator_check import CLUSTER_WIDE, PROBES, MissingOperators
from k8s.install.operators import Installer, components
from k8s.install.optional_operators import (
    KEDA_APISERVICE,
    KEDA_DEPLOYMENTS,
    KEDA_NAMESPACE,
    wait_apiservice_available,
)
from k8s.providers import provider as make_provider
from k8s.providers.settings import Settings
from k8s.waits.cluster_poll import WaitError
from tests.support.fakekube import FakeKube, conditions_status
from tests.support.upstream import PlanCluster, objects

KC = "kubectl --context kind-dist-ml "


def with_keda(plan: PlanCluster) -> bool:
    return plan.with_monitoring and plan.mode == "standard"


# ------------------------------------------------------------------ the install plan
def test_keda_is_a_step_only_with_monitoring_in_standard_mode() -> None:
    for provider in ("k3d", "kind", "minikube", "existing"):
        assert "keda" not in components(provider, "standard")
        assert "keda" not in components(provider, "knative", with_monitoring=True)
        steps = components(provider, "standard", True, with_monitoring=True)
        assert steps.index("keda") < steps.index("kserve") < steps.index("argo")


def test_keda_is_applied_server_side_then_its_deployments_then_its_apiservice(
    plan: PlanCluster,
) -> None:
    applies = [s for s in plan.steps if s.url == versions.KEDA_URL]
    if not with_keda(plan):
        assert not applies and not [s for s in plan.steps if s.what == "apiservice"]
        return
    (apply,) = applies
    at = plan.steps.index(apply)
    assert "--server-side" in shlex.split(apply.command)
    # Its CRD of ScaledJobs is what needs it: above client-side apply's 256 KiB annotation.
    crd = next(o for o in apply.objects if o["metadata"]["name"] == "scaledjobs.keda.sh")
    assert len(str(crd)) > 256 * 1024
    # The file holds its Namespace, before everything in it.
    assert apply.objects[0]["kind"] == "Namespace"
    assert apply.objects[0]["metadata"]["name"] == KEDA_NAMESPACE
    wait, api_wait = plan.steps[at + 1], plan.steps[at + 2]
    in_file = {
        o["metadata"]["name"]
        for o in apply.objects
        if o["kind"] == "Deployment" and o["metadata"]["namespace"] == KEDA_NAMESPACE
    }
    assert wait.what == "wait" and wait.namespace == KEDA_NAMESPACE
    assert set(wait.names or []) == in_file == set(KEDA_DEPLOYMENTS)
    assert api_wait.what == "apiservice" and api_wait.names == [KEDA_APISERVICE]
    kserve = next(s for s in plan.steps if s.url == versions.KSERVE_URL)
    assert plan.steps.index(kserve) > at + 2


def test_the_apiservice_waited_for_is_served_by_a_deployment_waited_for_before_it() -> None:
    objs = objects(versions.KEDA_URL)
    (api,) = [o for o in objs if o["kind"] == "APIService"]
    assert api["metadata"]["name"] == KEDA_APISERVICE
    ref = api["spec"]["service"]
    service = next(
        o
        for o in objs
        if o["kind"] == "Service"
        and (o["metadata"]["namespace"], o["metadata"]["name"]) == (ref["namespace"], ref["name"])
    )
    served_by = [
        o["metadata"]["name"]
        for o in objs
        if o["kind"] == "Deployment"
        and all(
            (o["spec"]["template"]["metadata"].get("labels") or {}).get(k) == v
            for k, v in service["spec"]["selector"].items()
        )
    ]
    assert served_by and set(served_by) <= set(KEDA_DEPLOYMENTS)
    # It serves external.metrics.k8s.io: metrics-server's metrics.k8s.io is another group.
    assert api["spec"]["group"] == "external.metrics.k8s.io"
    assert CLUSTER_WIDE["metrics_server"]["APIService"] != CLUSTER_WIDE["keda"]["APIService"]


# ------------------------------------------------------------------ the APIService wait
def apiservice(fake: FakeKube, status: str, reason: str = "", message: str = "") -> None:
    cond = {"type": "Available", "status": status, "reason": reason, "message": message}
    fake.put(
        {
            "apiVersion": optional_operators.APISERVICE_API,
            "kind": "APIService",
            "metadata": {"name": KEDA_APISERVICE},
            "status": {"conditions": [cond]},
        }
    )


def wait(fake: FakeKube, timeout: float = 120) -> list[str]:
    lines: list[str] = []
    wait_apiservice_available(
        fake,
        KEDA_APISERVICE,
        timeout=timeout,
        clock=fake.clock,
        out=lines.append,
        kubectl=lambda a: KC + a,
    )
    return lines


def test_the_apiservice_wait_ends_when_it_turns_available(fake: FakeKube) -> None:
    apiservice(fake, "False", "MissingEndpoints", "endpoints for service/keda-metrics-apiserver")
    fake.at(30, lambda: apiservice(fake, "True", "Passed", "all checks passed"))
    lines = wait(fake)
    assert 30 <= fake.clock.now < 40
    assert any("MissingEndpoints" in line for line in lines)


def test_an_apiservice_that_never_answers_fails_at_the_deadline_saying_where_to_look(
    fake: FakeKube,
) -> None:
    apiservice(fake, "False", "FailedDiscoveryCheck", "failing or missing response")
    with pytest.raises(WaitError) as info:
        wait(fake, timeout=60)
    message = str(info.value)
    assert 60 <= fake.clock.now < 70
    assert "timed out after 60 s waiting for APIService v1beta1.external.metrics.k8s.io" in message
    assert "FailedDiscoveryCheck" in message
    assert f"{KC}get apiservice {KEDA_APISERVICE} -o yaml" in message
    assert f"{KC}-n keda logs deployment/keda-metrics-apiserver" in message


# ------------------------------------------------------------------ removal
def keda_installer(fake: FakeKube, results: dict[Any, Result]) -> tuple[Installer, MockContext]:
    c = MockContext(config=Config(overrides={"run": {"dry": False}}), run=results, repeat=True)
    s = Settings(
        image="distml:0123456789ab", provider="kind", serving_mode="standard", with_monitoring=True
    )
    return Installer(c, fake, make_provider("kind"), s, lambda _: None, fake.clock), c


def test_removal_deletes_the_crds_first_then_the_file_and_waits_for_the_namespace(
    fake: FakeKube,
) -> None:
    fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KEDA_NAMESPACE}})
    fake.at(12, lambda: fake.remove("v1", "Namespace", KEDA_NAMESPACE))
    inst, c = keda_installer(fake, {re.compile("^kubectl .*"): Result(exited=0)})
    inst.remove_keda()
    ran = [call.args[0] for call in c.run.call_args_list]
    crds = " ".join(CLUSTER_WIDE["keda"]["CustomResourceDefinition"])
    assert ran == [
        f"{KC}delete crd {crds} --ignore-not-found --timeout 300s",
        f"{KC}delete -f {versions.KEDA_URL} --ignore-not-found --timeout 300s",
    ]
    assert fake.clock.now >= 12 and fake.get("v1", "Namespace", KEDA_NAMESPACE) is None


def test_a_failed_removal_says_what_is_left_and_what_to_run(fake: FakeKube) -> None:
    refused = Result(stderr="error: the server doesn't have a resource type", exited=1)
    inst, c = keda_installer(fake, {re.compile("^kubectl .*"): refused})
    with pytest.raises(operators.KubeError) as info:
        inst.remove_keda()
    assert f"removing {PROBES['keda'].label}: kubectl exited 1" in str(info.value)
    assert f"`{KC}get crd | grep keda`" in str(info.value)
    assert len(c.run.call_args_list) == 1  # nothing after the CRDs' deletion failed


# ------------------------------------------------------------------ a cluster not ours
def test_on_an_existing_cluster_a_missing_keda_is_reported_with_its_install_command() -> None:
    fake = FakeKube()
    for step in components("existing", "standard"):
        probe = PROBES[step]
        for name in probe.deployments:
            fake.put(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": name, "namespace": probe.namespace},
                    "status": conditions_status(("Available", "True")),
                }
            )
    c = MockContext(config=Config(overrides={"run": {"dry": False}}))
    s = Settings(
        image="r/distml:0123456789ab",
        provider="existing",
        namespace="team-a",
        serving_mode="standard",
        with_monitoring=True,
    )
    p = make_provider("existing", kube_context="team")
    inst = Installer(c, fake, p, s, lambda _: None, fake.clock, install_missing=False)
    with pytest.raises(MissingOperators) as info:
        inst.all()
    message = str(info.value)
    assert f"KEDA {versions.KEDA_VERSION} (no Available Deployment keda/keda-operator)" in message
    assert f"`kubectl --context team apply --server-side -f {versions.KEDA_URL}`" in message
    assert not [o for o in fake.applied]  # nothing was installed


@pytest.mark.parametrize("provider", ["k3d", "kind", "minikube"])
def test_invoke_dry_up_with_monitoring_applies_keda_and_only_indexed_urls(provider, tmp_path):
    from k8s.install.preflight import Preflight
    from runtime.cluster import ClusterRuntime
    from runtime.requests import UpRequest
    from runtime.workdir import Workdir
    from tests.support.fakekube import FakeClock
    from tests.support.upstream import index

    c = MockContext(
        config=Config(overrides={"run": {"dry": True}}), run={re.compile(".*"): Result("")}
    )
    lines: list[str] = []
    rt = ClusterRuntime(
        c,
        provider,
        Workdir.at(tmp_path / "wd"),
        tmp_path,
        out=lines.append,
        clock=FakeClock(),
        preflight=lambda *a, **k: Preflight(),
    )
    rt.__dict__["image"] = "distml:0123456789ab"  # no image hash of a tmp dir
    assert rt.up(UpRequest(serving_mode="standard", with_monitoring=True)) == 0
    urls = []
    for call in c.run.call_args_list:
        words = call.args[0].split()
        if "apply" in words and "-f" in words:
            urls.append(words[words.index("-f") + 1].strip("'"))
    assert versions.KEDA_URL in urls and all(u in index() for u in urls)
    assert "would apply Deployment kubeflow/distml-prometheus" in lines
