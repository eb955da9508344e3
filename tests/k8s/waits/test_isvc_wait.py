"""k8s.waits.isvc_wait against tests/support/fakekube.py (fake cluster, fake clock): waiting for an
InferenceService to be Ready (of its current generation), and what a timeout or a stuck or
crashlooping predictor reports, Knative's state and hints included."""

from __future__ import annotations

import pytest

from k8s.waits.cluster_poll import WaitError
from k8s.waits.isvc_wait import wait_isvc_ready
from tests.support.fakekube import FakeKube, conditions_status
from tests.support.wait_kit import (
    INSUFFICIENT_CPU,
    KUBECTL,
    NAMED,
    NS,
    collect,
    predictor,
    unnamed_commands,
)

ISVC = "serving.kserve.io/v1beta1"
KN = "serving.knative.dev/v1"


def isvc_status(ready: str, reason: str = "", message: str = "", url: str = "") -> dict:
    conds = [
        {"type": "IngressReady", "status": ready},
        {"type": "PredictorReady", "status": ready, "reason": reason, "message": message},
        {"type": "Ready", "status": ready, "reason": reason, "message": message},
    ]
    status: dict = {"conditions": conds, "modelStatus": {"transitionStatus": "UpToDate"}}
    if url:
        status["url"] = url
    return status


def test_isvc_ready_returns_the_url_and_ignores_transition_status(fake: FakeKube) -> None:
    url = "http://tf-mnist-kubeflow.example.com"
    fake.sequence(
        ISVC,
        "InferenceService",
        NS,
        "tf-mnist",
        [
            isvc_status("Unknown"),
            # transitionStatus UpToDate alone is not readiness.
            isvc_status("False", "RevisionMissing", "Configuration is waiting"),
            isvc_status("True", url=url),
        ],
    )
    lines, out = collect()

    assert (
        wait_isvc_ready(
            fake, NS, "tf-mnist", timeout=300, clock=fake.clock, out=out, kubectl=KUBECTL
        )
        == url
    )
    assert fake.clock.now == 4
    assert lines == [
        "InferenceService tf-mnist: Ready=Unknown",
        "InferenceService tf-mnist: Ready=False (RevisionMissing)",
        f"InferenceService tf-mnist: Ready at {url}",
    ]


def test_isvc_revision_missing_times_out_with_reason_knative_state_and_hints(
    fake: FakeKube,
) -> None:
    fake.set_status(
        ISVC,
        "InferenceService",
        NS,
        "tf-mnist",
        isvc_status(
            "False",
            "RevisionMissing",
            'Configuration "tf-mnist-predictor" does not have any ready Revision.',
        ),
    )
    labels = {"serving.kserve.io/inferenceservice": "tf-mnist"}
    fake.put(
        {
            "apiVersion": KN,
            "kind": "Service",
            "metadata": {"name": "tf-mnist-predictor", "namespace": NS, "labels": labels},
            "status": conditions_status(("Ready", "False")),
        }
    )
    fake.put(
        {
            "apiVersion": KN,
            "kind": "Revision",
            "metadata": {"name": "tf-mnist-predictor-00001", "namespace": NS, "labels": labels},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "ContainerMissing",
                        "message": 'Unable to fetch image "distml:abc": failed to resolve image '
                        "to digest: GET https://index.docker.io/v2/: unexpected status 401",
                    }
                ]
            },
        }
    )
    predictor(
        fake,
        "tf-mnist-predictor-00001-deployment-x",
        phase="Pending",
        ready=False,
        unschedulable=INSUFFICIENT_CPU,
    )
    fake.add_event(
        NS, "tf-mnist-predictor-00001-deployment-x", "FailedScheduling", INSUFFICIENT_CPU
    )

    with pytest.raises(WaitError) as info:
        wait_isvc_ready(
            fake, NS, "tf-mnist", timeout=300, clock=fake.clock, out=lambda _: None, kubectl=KUBECTL
        )

    message = str(info.value)
    assert "timed out after 300s waiting for InferenceService kubeflow/tf-mnist to be Ready" in (
        message
    )
    assert "last status: Ready=False (RevisionMissing: Configuration" in info.value.headline
    assert "Knative Service kubeflow/tf-mnist-predictor:" in message
    assert "Knative Revision kubeflow/tf-mnist-predictor-00001:" in message
    assert "Ready=False (ContainerMissing: Unable to fetch image" in message
    assert "pod tf-mnist-predictor-00001-deployment-x: Pending; unschedulable" in message
    assert "Warning FailedScheduling: 0/1 nodes are available: 1 Insufficient cpu" in message
    assert "lower --workers / --max-replicas, or give Docker more CPU" in message
    assert "registries-skipping-tag-resolving" in message
    assert f"{NAMED}-n kubeflow describe inferenceservice tf-mnist" in message
    assert unnamed_commands(message) == []
    assert fake.clock.now == 300


def test_isvc_ingress_not_configured_hint(fake: FakeKube) -> None:
    fake.set_status(
        ISVC,
        "InferenceService",
        NS,
        "tf-mnist",
        isvc_status("False", "IngressNotConfigured", "Ingress has not yet been reconciled."),
    )
    with pytest.raises(WaitError) as info:
        wait_isvc_ready(
            fake, NS, "tf-mnist", timeout=20, clock=fake.clock, out=lambda _: None, kubectl=KUBECTL
        )
    assert "Ready=False (IngressNotConfigured" in info.value.headline
    assert "net-istio or the Istio ingress gateway is not ready" in str(info.value)


def test_isvc_predictor_stuck_pulling_its_image_fails_early(fake: FakeKube) -> None:
    fake.set_status(
        ISVC, "InferenceService", NS, "tf-mnist", isvc_status("Unknown", "RevisionMissing")
    )
    predictor(fake, "p-0", phase="Pending", ready=False, waiting_reason="ImagePullBackOff")

    with pytest.raises(WaitError) as info:
        wait_isvc_ready(
            fake, NS, "tf-mnist", timeout=600, clock=fake.clock, out=lambda _: None, kubectl=KUBECTL
        )

    assert info.value.headline == (
        "InferenceService kubeflow/tf-mnist is stuck: pod p-0 container kserve-container has "
        "been in ImagePullBackOff for 60s"
    )
    assert "Ready=Unknown (RevisionMissing)" in info.value.diagnostics
    assert fake.clock.now == 60


def test_isvc_ready_for_an_older_generation_is_not_ready_yet(fake: FakeKube) -> None:
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "tf-mnist", "namespace": NS, "generation": 2},
        "status": {
            "observedGeneration": 1,
            "url": "http://tf-mnist-kubeflow.example.com",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    fake.put(isvc)
    fake.at(
        20,
        lambda: fake.set_status(
            "serving.kserve.io/v1beta1",
            "InferenceService",
            NS,
            "tf-mnist",
            {**isvc["status"], "observedGeneration": 2},
        ),
    )
    url = wait_isvc_ready(
        fake, NS, "tf-mnist", timeout=60, clock=fake.clock, out=lambda _: None, kubectl=KUBECTL
    )
    assert url == "http://tf-mnist-kubeflow.example.com"
    assert fake.clock.now >= 20  # the stale Ready of generation 1 was not taken


def test_a_crashlooping_predictor_fails_the_isvc_wait_early(fake: FakeKube) -> None:
    fake.put(
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "tf-mnist", "namespace": NS},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        }
    )
    fake.add_pod(
        NS,
        "tf-mnist-predictor-1",
        {"serving.kserve.io/inferenceservice": "tf-mnist"},
        ready=False,
        waiting_reason="CrashLoopBackOff",
        restart_count=5,
        container="kserve-container",
    )
    with pytest.raises(WaitError, match="CrashLoopBackOff after 5 restarts"):
        wait_isvc_ready(
            fake, NS, "tf-mnist", timeout=600, clock=fake.clock, out=lambda _: None, kubectl=KUBECTL
        )
    assert fake.clock.now < 600
