"""k8s.waits.workload_waits against tests/support/fakekube.py (fake cluster, fake clock): waiting
for Deployments to turn Available and for a Job to complete, and what a timeout, a failure or
a stuck pod reports."""

from __future__ import annotations

import pytest

from common.errors import DistmlError
from k8s.client.kube import KubeError
from k8s.waits.cluster_poll import WaitError
from k8s.waits.workload_waits import wait_deployments_available, wait_job
from tests.support.fakekube import FakeKube
from tests.support.wait_kit import INSUFFICIENT_CPU, KUBECTL, NAMED, NS, collect, unnamed_commands


def deployment(fake: FakeKube, name: str, available: str, app: str | None = None) -> None:
    fake.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS, "labels": {"part": "operator"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app or name}}},
            "status": {
                "conditions": [
                    {
                        "type": "Available",
                        "status": available,
                        "reason": "MinimumReplicasAvailable"
                        if available == "True"
                        else "MinimumReplicasUnavailable",
                        "message": "Deployment has minimum availability."
                        if available == "True"
                        else "Deployment does not have minimum availability.",
                    }
                ]
            },
        }
    )


def test_deployments_become_available(fake: FakeKube) -> None:
    deployment(fake, "training-operator", "False")
    deployment(fake, "kserve-controller-manager", "False")
    fake.at(6, lambda: deployment(fake, "training-operator", "True"))
    fake.at(10, lambda: deployment(fake, "kserve-controller-manager", "True"))
    lines, out = collect()

    names = wait_deployments_available(
        fake, NS, timeout=60, clock=fake.clock, out=out, kubectl=KUBECTL
    )

    assert names == ["kserve-controller-manager", "training-operator"]
    assert fake.clock.now == 10
    # One line per change (3 states), not one per poll (6 polls).
    assert len(lines) == 3, lines
    assert "waiting for kserve-controller-manager, training-operator" in lines[0]
    assert lines[-1] == f"{NS}: 2/2 Deployments available"


def test_deployments_by_name_and_selector(fake: FakeKube) -> None:
    deployment(fake, "a", "True")
    deployment(fake, "b", "False")
    assert wait_deployments_available(
        fake, NS, names=["a"], timeout=1, clock=fake.clock, out=lambda _: None, kubectl=KUBECTL
    ) == ["a"]
    with pytest.raises(WaitError, match="Deployments in kubeflow \\(matching part=operator\\)"):
        wait_deployments_available(
            fake,
            NS,
            label_selector="part=operator",
            timeout=4,
            clock=fake.clock,
            out=print,
            kubectl=KUBECTL,
        )


def test_deployments_timeout_names_the_deployment_and_its_image_pull_pod(
    fake: FakeKube,
) -> None:
    deployment(fake, "training-operator", "True")
    deployment(fake, "kserve-controller-manager", "False", app="kserve")
    fake.add_pod(
        NS,
        "kserve-controller-manager-7d9-x2",
        {"app": "kserve"},
        phase="Pending",
        ready=False,
        waiting_reason="ImagePullBackOff",
        waiting_message='Back-off pulling image "kserve/kserve-controller:v0.20.0"',
        container="manager",
    )
    lines, out = collect()

    with pytest.raises(WaitError) as info:
        wait_deployments_available(fake, NS, timeout=30, clock=fake.clock, out=out, kubectl=KUBECTL)

    message = str(info.value)
    assert isinstance(info.value, DistmlError)
    assert "timed out after 30s" in message
    assert "1/2 Deployments available; waiting for kserve-controller-manager" in message
    assert "Deployment kubeflow/kserve-controller-manager: 0/1 ready" in message
    assert "Available=False (MinimumReplicasUnavailable" in message
    assert "pod kserve-controller-manager-7d9-x2: Pending" in message
    assert "manager: ImagePullBackOff (Back-off pulling image" in message
    assert "re-import it into the cluster" in message  # the hint
    assert f"next: {NAMED}-n kubeflow get pods; {NAMED}-n kubeflow describe deployment" in message
    assert unnamed_commands(message) == []
    assert "training-operator:" not in info.value.diagnostics  # only the unavailable one
    assert info.value.diagnostics in message
    assert fake.clock.now == 30
    assert len(lines) == 1


def test_a_transient_api_error_is_retried_a_persistent_one_gives_up(fake: FakeKube) -> None:
    deployment(fake, "a", "True")
    fake.fail("list", KubeError("list Deployment in kubeflow failed: connection reset"))
    lines, out = collect()
    assert wait_deployments_available(
        fake, NS, timeout=60, clock=fake.clock, out=out, kubectl=KUBECTL
    ) == ["a"]
    assert "API call failed, retrying: list Deployment in kubeflow failed" in lines[0]

    fake.fail("list", KubeError("list Deployment failed: connection refused"), times=100)
    with pytest.raises(WaitError, match="the cluster API kept failing for 30s") as info:
        wait_deployments_available(
            fake, NS, timeout=600, clock=fake.clock, out=out, kubectl=KUBECTL
        )
    assert "invoke up" in str(info.value)


def job_status(*conds: tuple[str, str, str, str], active: int = 0) -> dict:
    return {
        "active": active,
        "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conds],
    }


def test_job_complete(fake: FakeKube) -> None:
    fake.set_status("batch/v1", "Job", NS, "copy-model", job_status(active=1))
    fake.add_pod(NS, "copy-model-abc", {"job-name": "copy-model"}, container="copy")
    fake.at(
        8,
        lambda: fake.set_status(
            "batch/v1",
            "Job",
            NS,
            "copy-model",
            job_status(("Complete", "True", "", "")),
        ),
    )
    lines, out = collect()

    job = wait_job(fake, NS, "copy-model", timeout=60, clock=fake.clock, out=out, kubectl=KUBECTL)

    assert job["metadata"]["name"] == "copy-model"
    assert fake.clock.now == 8
    assert lines == ["Job copy-model: pod copy-model-abc Running", "Job copy-model: Complete"]


def test_job_failed_shows_conditions_events_and_log_tail(fake: FakeKube) -> None:
    fake.set_status(
        "batch/v1",
        "Job",
        NS,
        "copy-model",
        job_status(
            (
                "Failed",
                "True",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
        ),
    )
    fake.add_pod(
        NS, "copy-model-abc", {"job-name": "copy-model"}, phase="Failed", ready=False, exit_code=2
    )
    fake.add_event(NS, "copy-model-abc", "BackOff", "Back-off restarting failed container")
    fake.set_log("copy-model-abc", "\n".join(f"line {i}" for i in range(100)) + "\ncp: denied")

    with pytest.raises(WaitError) as info:
        wait_job(
            fake, NS, "copy-model", timeout=60, tail=5, clock=fake.clock, out=print, kubectl=KUBECTL
        )

    message = str(info.value)
    assert message.startswith(
        "Job kubeflow/copy-model failed: Failed=True (BackoffLimitExceeded: Job has reached"
    )
    assert "pod copy-model-abc: Failed; tensorflow: terminated (Error, exit code 2)" in message
    assert "Warning BackOff: Back-off restarting failed container" in message
    assert "log tail" in message and "cp: denied" in message and "line 96" in message
    assert "line 95" not in message  # only the tail
    assert f"{NAMED}-n kubeflow logs job/copy-model" in message
    assert unnamed_commands(message) == []
    assert fake.clock.now == 0


def test_job_timeout_names_the_scheduling_problem(fake: FakeKube) -> None:
    fake.set_status("batch/v1", "Job", NS, "copy-model", job_status(active=1))
    fake.add_pod(
        NS,
        "copy-model-abc",
        {"batch.kubernetes.io/job-name": "copy-model"},
        phase="Pending",
        ready=False,
    )
    fake.add_event(NS, "copy-model-abc", "FailedScheduling", INSUFFICIENT_CPU)

    with pytest.raises(WaitError) as info:
        wait_job(
            fake,
            NS,
            "copy-model",
            timeout=120,
            clock=fake.clock,
            out=lambda _: None,
            kubectl=KUBECTL,
        )

    headline = info.value.headline
    assert "timed out after 120s waiting for Job kubeflow/copy-model to complete" in headline
    assert (
        "pod copy-model-abc cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu"
        in (headline)
    )
    assert "give Docker more CPU" in str(info.value)
    assert fake.clock.now == 120


def test_job_stuck_in_image_pull_fails_early(fake: FakeKube) -> None:
    fake.set_status("batch/v1", "Job", NS, "copy-model", job_status(active=1))
    fake.add_pod(
        NS,
        "copy-model-abc",
        {"job-name": "copy-model"},
        phase="Pending",
        ready=False,
        waiting_reason="ErrImageNeverPull",
        waiting_message='Container image "distml:abc" is not present with pull policy of Never',
    )

    with pytest.raises(WaitError) as info:
        wait_job(
            fake,
            NS,
            "copy-model",
            timeout=600,
            clock=fake.clock,
            out=lambda _: None,
            kubectl=KUBECTL,
        )

    assert info.value.headline.startswith(
        "Job kubeflow/copy-model is stuck: pod copy-model-abc container tensorflow has been in "
        "ErrImageNeverPull for 60s"
    )
    assert "re-import it" in str(info.value)
    assert fake.clock.now == 60
