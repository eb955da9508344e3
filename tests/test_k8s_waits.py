"""The waits (k8s.cluster_poll, k8s.workload_waits, k8s.isvc_wait, k8s.tfjobs) against
tests/support/fakekube.py (fake cluster, fake clock), and k8s.kube's ApiKube / DryKube (ApiKube
against a loopback stand-in for the API server: no cluster needed)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from common.errors import DistmlError
from k8s.cluster_poll import WaitError, retry
from k8s.diagnose import tfjob_failure_report
from k8s.isvc_wait import wait_isvc_ready
from k8s.kube import ApiKube, DryKube, KubeError
from k8s.objects import ReplicaCounter
from k8s.tfjobs import TFJobRow, wait_tfjobs
from k8s.workload_waits import wait_deployments_available, wait_job
from tests.support.fakekube import FakeKube, conditions_status

NS = "kubeflow"
TF = "kubeflow.org/v1"
ISVC = "serving.kserve.io/v1beta1"
KN = "serving.knative.dev/v1"
INSUFFICIENT_CPU = (
    "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available"
)


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    """A fake cluster on a fake clock: a test using it must not take real time."""
    started = time.monotonic()
    yield FakeKube()
    assert time.monotonic() - started < 1.0, "a wait took real time"


def collect() -> tuple[list[str], Callable[[str], None]]:
    """The lines a wait prints, and the ``out`` that collects them."""
    lines: list[str] = []
    return lines, lines.append


# --------------------------------------------------------------------------- Deployments


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

    names = wait_deployments_available(fake, NS, timeout=60, clock=fake.clock, out=out)

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
        fake, NS, names=["a"], timeout=1, clock=fake.clock, out=lambda _: None
    ) == ["a"]
    with pytest.raises(WaitError, match="Deployments in kubeflow \\(matching part=operator\\)"):
        wait_deployments_available(
            fake, NS, label_selector="part=operator", timeout=4, clock=fake.clock, out=print
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
        wait_deployments_available(fake, NS, timeout=30, clock=fake.clock, out=out)

    message = str(info.value)
    assert isinstance(info.value, DistmlError)
    assert "timed out after 30s" in message
    assert "1/2 Deployments available; waiting for kserve-controller-manager" in message
    assert "Deployment kubeflow/kserve-controller-manager: 0/1 ready" in message
    assert "Available=False (MinimumReplicasUnavailable" in message
    assert "pod kserve-controller-manager-7d9-x2: Pending" in message
    assert "manager: ImagePullBackOff (Back-off pulling image" in message
    assert "re-import it into the cluster" in message  # the hint
    assert "next: kubectl -n kubeflow get pods" in message
    assert "training-operator:" not in info.value.diagnostics  # only the unavailable one
    assert info.value.diagnostics in message
    assert fake.clock.now == 30
    assert len(lines) == 1


def test_a_transient_api_error_is_retried_a_persistent_one_gives_up(fake: FakeKube) -> None:
    deployment(fake, "a", "True")
    fake.fail("list", KubeError("list Deployment in kubeflow failed: connection reset"))
    lines, out = collect()
    assert wait_deployments_available(fake, NS, timeout=60, clock=fake.clock, out=out) == ["a"]
    assert "API call failed, retrying: list Deployment in kubeflow failed" in lines[0]

    fake.fail("list", KubeError("list Deployment failed: connection refused"), times=100)
    with pytest.raises(WaitError, match="the cluster API kept failing for 30s") as info:
        wait_deployments_available(fake, NS, timeout=600, clock=fake.clock, out=out)
    assert "invoke up" in str(info.value)


# --------------------------------------------------------------------------- Jobs


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

    job = wait_job(fake, NS, "copy-model", timeout=60, clock=fake.clock, out=out)

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
        wait_job(fake, NS, "copy-model", timeout=60, tail=5, clock=fake.clock, out=print)

    message = str(info.value)
    assert message.startswith(
        "Job kubeflow/copy-model failed: Failed=True (BackoffLimitExceeded: Job has reached"
    )
    assert "pod copy-model-abc: Failed; tensorflow: terminated (Error, exit code 2)" in message
    assert "Warning BackOff: Back-off restarting failed container" in message
    assert "log tail" in message and "cp: denied" in message and "line 96" in message
    assert "line 95" not in message  # only the tail
    assert "kubectl -n kubeflow logs job/copy-model" in message
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
        wait_job(fake, NS, "copy-model", timeout=120, clock=fake.clock, out=lambda _: None)

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
        wait_job(fake, NS, "copy-model", timeout=600, clock=fake.clock, out=lambda _: None)

    assert info.value.headline.startswith(
        "Job kubeflow/copy-model is stuck: pod copy-model-abc container tensorflow has been in "
        "ErrImageNeverPull for 60s"
    )
    assert "re-import it" in str(info.value)
    assert fake.clock.now == 60


# --------------------------------------------------------------------------- TFJobs


def tfjob_status(*types: str, active=0, succeeded=0, failed=0, message: str = "") -> dict:
    """Conditions in order; all True except that a later terminal one turns Running False."""
    conds = []
    for t in types:
        for c in conds:
            if t in ("Succeeded", "Failed") and c["type"] == "Running":
                c["status"] = "False"
        conds.append(
            {"type": t, "status": "True", "reason": f"TFJob{t}", "message": message or f"is {t}"}
        )
    return {
        "conditions": conds,
        "replicaStatuses": {"Worker": {"active": active, "succeeded": succeeded, "failed": failed}},
    }


def worker(fake: FakeKube, job: str, i: int, **kwargs) -> dict:
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(i),
    }
    return fake.add_pod(NS, f"{job}-worker-{i}", labels, **kwargs)


def two_succeeding_tfjobs(fake: FakeKube) -> None:
    for job in ("cnn", "cnn-dropout"):
        fake.sequence(
            TF,
            "TFJob",
            NS,
            job,
            [
                {},
                tfjob_status("Created"),
                tfjob_status("Created", "Running", active=2),
                tfjob_status("Created", "Running", "Succeeded", succeeded=2),
            ],
        )
        worker(fake, job, 0)
        worker(fake, job, 1, restart_count=1)


def test_tfjobs_all_succeed_with_live_rows_and_no_state_lines(fake: FakeKube) -> None:
    two_succeeding_tfjobs(fake)
    updates: list[list[TFJobRow]] = []
    lines, out = collect()

    result = wait_tfjobs(
        fake,
        NS,
        ["cnn", "cnn-dropout"],
        timeout=600,
        clock=fake.clock,
        out=out,
        on_update=updates.append,
    )

    assert result == {"cnn": "Succeeded", "cnn-dropout": "Succeeded"}
    assert fake.clock.now == 6
    assert [[r.state for r in rows] for rows in updates] == [
        ["Pending", "Pending"],
        ["Created", "Created"],
        ["Running", "Running"],
        ["Succeeded", "Succeeded"],
    ]
    assert updates[2][0] == TFJobRow("cnn", "Running", active=2, restarts=1)
    assert updates[-1][1] == TFJobRow("cnn-dropout", "Succeeded", succeeded=2, restarts=1)
    assert lines == []  # the rows show the states: no line repeats them


def test_tfjobs_without_on_update_print_each_state_change(fake: FakeKube) -> None:
    two_succeeding_tfjobs(fake)
    lines, out = collect()

    result = wait_tfjobs(fake, NS, ["cnn", "cnn-dropout"], timeout=600, clock=fake.clock, out=out)

    assert result == {"cnn": "Succeeded", "cnn-dropout": "Succeeded"}
    assert [line.split(" (")[0] for line in lines] == [
        "TFJob cnn: Created",
        "TFJob cnn-dropout: Created",
        "TFJob cnn: Running",
        "TFJob cnn-dropout: Running",
        "TFJob cnn: Succeeded",
        "TFJob cnn-dropout: Succeeded",
    ]
    assert "TFJob cnn: Running (workers active 2, succeeded 0, failed 0; restarts 1)" in lines


def test_tfjob_failed_reports_conditions_events_and_tensorflow_log(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "good", tfjob_status("Created", "Running", active=2))
    fake.at(4, lambda: fake.set_status(TF, "TFJob", NS, "good", tfjob_status("Succeeded")))
    fake.set_status(TF, "TFJob", NS, "bad", tfjob_status("Created", "Running", active=2))
    worker(fake, "bad", 0)
    worker(fake, "bad", 1)

    def fail() -> None:
        fake.set_status(
            TF,
            "TFJob",
            NS,
            "bad",
            tfjob_status(
                "Created",
                "Running",
                "Failed",
                failed=1,
                active=1,
                message="TFJob kubeflow/bad has failed because 1 Worker replica(s) failed.",
            ),
        )
        fake.remove("v1", "Pod", "bad-worker-1")
        worker(fake, "bad", 1, phase="Failed", ready=False, exit_code=1)
        fake.add_event(NS, "bad-worker-1", "BackOff", "Back-off restarting failed container")
        fake.add_event(NS, "bad", "TFJobFailed", "1 Worker replica(s) failed", kind="TFJob")
        fake.set_log(
            "bad-worker-1",
            "Traceback (most recent call last):\nValueError: Collective ops must be configured "
            "at program startup",
            container="tensorflow",
        )
        fake.set_log("bad-worker-1", "sidecar noise", container="istio-proxy")

    fake.at(2, fail)
    lines, out = collect()

    result = wait_tfjobs(fake, NS, ["good", "bad"], timeout=600, clock=fake.clock, out=out)

    assert result == {"good": "Succeeded", "bad": "Failed"}
    report = "\n".join(lines)
    assert "TFJob bad failed: Failed=True (TFJobFailed: TFJob kubeflow/bad has failed" in report
    assert "TFJob kubeflow/bad: Failed" in report
    assert "Running=False" in report
    assert "Worker: active 1, succeeded 0, failed 1" in report
    assert "pod bad-worker-1: Failed; tensorflow: terminated (Error, exit code 1)" in report
    assert "Warning BackOff: Back-off restarting failed container" in report
    assert "TFJob events:" in report and "TFJobFailed: 1 Worker replica(s) failed" in report
    assert "log tail (tensorflow):" in report
    assert "ValueError: Collective ops must be configured at program startup" in report
    assert "sidecar noise" not in report
    assert ("bad-worker-1", NS, "tensorflow", 40) in fake.log_requests
    # The healthy worker is one summary line, no log fetched.
    assert "pod bad-worker-0: Running" in report
    assert not any(r[0] == "bad-worker-0" for r in fake.log_requests)

    # The report function on its own says the same.
    assert "ValueError: Collective ops" in tfjob_failure_report(fake, NS, "bad", tail=5)


def test_tfjobs_timeout_shows_the_pending_worker(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", active=1))
    worker(fake, "cnn", 0)
    worker(fake, "cnn", 1, phase="Pending", ready=False, unschedulable=INSUFFICIENT_CPU)
    fake.add_event(NS, "cnn-worker-1", "FailedScheduling", INSUFFICIENT_CPU)
    fake.set_log("cnn-worker-0", "Waiting for the cluster, timeout = inf")

    with pytest.raises(WaitError) as info:
        wait_tfjobs(
            fake,
            NS,
            ["cnn"],
            timeout=300,
            clock=fake.clock,
            out=lambda _: None,
            unschedulable_after=10_000,
        )

    message = str(info.value)
    assert "timed out after 300s waiting for TFJobs cnn in kubeflow" in message
    assert "unfinished: cnn (Running; workers active 1, succeeded 0)" in message
    assert "pod cnn-worker-1 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu" in (
        info.value.headline
    )
    assert "the others wait for it forever" in info.value.headline
    assert "pod cnn-worker-1: Pending; unschedulable: 0/1 nodes" in info.value.diagnostics
    assert "Warning FailedScheduling: 0/1 nodes are available" in info.value.diagnostics
    assert "lower --workers or give Docker more CPU" in message
    assert fake.clock.now == 300


def test_a_worker_the_scheduler_keeps_refusing_fails_its_job_early(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", active=1))
    worker(fake, "cnn", 0)
    worker(fake, "cnn", 1, phase="Pending", ready=False, unschedulable=INSUFFICIENT_CPU)
    fake.add_event(NS, "cnn-worker-1", "FailedScheduling", INSUFFICIENT_CPU)
    lines: list[str] = []
    result = wait_tfjobs(
        fake,
        NS,
        ["cnn"],
        timeout=3600,
        clock=fake.clock,
        out=lines.append,
        unschedulable_after=120,
    )
    assert result == {"cnn": "Failed"}
    assert 120 <= fake.clock.now < 130  # not the hour-long deadline
    text = "\n".join(lines)
    assert "pod cnn-worker-1 cannot be scheduled: 0/1 nodes are available" in text
    assert "needs all its workers running at once" in text


def test_tfjob_crashloop_past_max_restarts_counts_as_failed(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", active=2))
    worker(fake, "cnn", 0)
    worker(fake, "cnn", 1, waiting_reason="CrashLoopBackOff", restart_count=2, ready=False)
    fake.at(
        10,
        lambda: (
            fake.remove("v1", "Pod", "cnn-worker-1"),
            worker(fake, "cnn", 1, waiting_reason="CrashLoopBackOff", restart_count=3, ready=False),
        ),
    )
    fake.set_log("cnn-worker-1", "OSError: /trained_model is not writable")
    lines, out = collect()
    updates: list[list[TFJobRow]] = []

    result = wait_tfjobs(
        fake,
        NS,
        ["cnn"],
        timeout=600,
        max_restarts=2,
        clock=fake.clock,
        out=out,
        on_update=updates.append,
    )

    assert result == {"cnn": "Failed"}
    assert fake.clock.now == 10
    assert updates[-1] == [TFJobRow("cnn", "Failed", active=2, restarts=3)]
    text = "\n".join(lines)
    assert (
        "TFJob cnn failed: pod cnn-worker-1 container tensorflow is in CrashLoopBackOff after "
        "3 restarts (allowed: 2)"
    ) in text
    assert "OSError: /trained_model is not writable" in text
    assert "a container keeps crashing" in text


def test_tfjob_crashloop_within_the_budget_keeps_waiting(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", active=2))
    worker(fake, "cnn", 0)
    worker(fake, "cnn", 1, waiting_reason="CrashLoopBackOff", restart_count=2, ready=False)
    fake.at(
        40,
        lambda: fake.set_status(
            TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", "Succeeded", succeeded=2)
        ),
    )

    result = wait_tfjobs(
        fake, NS, ["cnn"], timeout=600, max_restarts=2, clock=fake.clock, out=lambda _: None
    )

    assert result == {"cnn": "Succeeded"}
    assert fake.clock.now == 40


def test_tfjob_worker_stuck_pulling_its_image_fails_that_job_only(fake: FakeKube) -> None:
    for job in ("cnn", "cnn-dropout"):
        fake.set_status(TF, "TFJob", NS, job, tfjob_status("Created", "Running", active=1))
        worker(fake, job, 0)
    worker(fake, "cnn", 1, phase="Pending", ready=False, waiting_reason="ErrImagePull")
    fake.at(
        100,
        lambda: fake.set_status(
            TF, "TFJob", NS, "cnn-dropout", tfjob_status("Running", "Succeeded", succeeded=2)
        ),
    )
    lines, out = collect()

    result = wait_tfjobs(fake, NS, ["cnn", "cnn-dropout"], timeout=600, clock=fake.clock, out=out)

    assert result == {"cnn": "Failed", "cnn-dropout": "Succeeded"}
    assert fake.clock.now == 100
    text = "\n".join(lines)
    assert "TFJob cnn failed: pod cnn-worker-1 container tensorflow has been in ErrImagePull" in (
        text
    )
    assert "re-import it into the cluster" in text
    failed = "TFJob cnn: Failed (workers active 1, succeeded 0, failed 0; restarts 0)"
    succeeded = "TFJob cnn-dropout: Succeeded (workers active 0, succeeded 2, failed 0; restarts 0)"
    assert lines.index(failed) < lines.index(succeeded)


def test_tfjob_pods_also_found_by_the_old_job_name_label(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", "Failed"))
    fake.add_pod(NS, "cnn-worker-0", {"job-name": "cnn"}, phase="Failed", exit_code=1)
    fake.add_pod(NS, "cnn-copy", {"job-name": "cnn"}, owner_kind="Job")  # a batch Job's pod
    report = tfjob_failure_report(fake, NS, "cnn")
    assert "pod cnn-worker-0: Failed" in report
    assert "cnn-copy" not in report


def test_tfjob_that_never_appears_is_an_error(fake: FakeKube) -> None:
    with pytest.raises(WaitError, match="TFJob kubeflow/cnn does not exist"):
        wait_tfjobs(fake, NS, ["cnn"], timeout=600, clock=fake.clock, out=lambda _: None)
    assert fake.clock.now <= 40


# --------------------------------------------------------------------------- InferenceService


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


def predictor(fake: FakeKube, name: str, isvc: str = "tf-mnist", **kwargs) -> dict:
    labels = {"serving.kserve.io/inferenceservice": isvc, "component": "predictor"}
    return fake.add_pod(NS, name, labels, container="kserve-container", **kwargs)


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

    assert wait_isvc_ready(fake, NS, "tf-mnist", timeout=300, clock=fake.clock, out=out) == url
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
        wait_isvc_ready(fake, NS, "tf-mnist", timeout=300, clock=fake.clock, out=lambda _: None)

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
    assert "kubectl -n kubeflow describe inferenceservice tf-mnist" in message
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
        wait_isvc_ready(fake, NS, "tf-mnist", timeout=20, clock=fake.clock, out=lambda _: None)
    assert "Ready=False (IngressNotConfigured" in info.value.headline
    assert "net-istio or the Istio ingress gateway is not ready" in str(info.value)


def test_isvc_predictor_stuck_pulling_its_image_fails_early(fake: FakeKube) -> None:
    fake.set_status(
        ISVC, "InferenceService", NS, "tf-mnist", isvc_status("Unknown", "RevisionMissing")
    )
    predictor(fake, "p-0", phase="Pending", ready=False, waiting_reason="ImagePullBackOff")

    with pytest.raises(WaitError) as info:
        wait_isvc_ready(fake, NS, "tf-mnist", timeout=600, clock=fake.clock, out=lambda _: None)

    assert info.value.headline == (
        "InferenceService kubeflow/tf-mnist is stuck: pod p-0 container kserve-container has "
        "been in ImagePullBackOff for 60s"
    )
    assert "Ready=Unknown (RevisionMissing)" in info.value.diagnostics
    assert fake.clock.now == 60


# --------------------------------------------------------------------------- ReplicaCounter


def test_replica_counter_counts_only_ready_running_pods(fake: FakeKube) -> None:
    predictor(fake, "p-ready")
    predictor(fake, "p-not-ready", ready=False)
    predictor(fake, "p-pending", phase="Pending", ready=False, unschedulable=INSUFFICIENT_CPU)
    predictor(fake, "p-terminating", deleting=True)
    predictor(fake, "other-ready", isvc="other")
    count = ReplicaCounter(fake, NS, "tf-mnist")

    assert count() == 1
    assert count.pending() == [("p-pending", INSUFFICIENT_CPU)]


def test_replica_counter_rises_over_time_and_can_stay_at_one(fake: FakeKube) -> None:
    predictor(fake, "p-0")
    count = ReplicaCounter(fake, NS, "tf-mnist")
    stay = ReplicaCounter(fake, NS, "other")
    predictor(fake, "o-0", isvc="other")
    fake.at(5, lambda: predictor(fake, "p-1"))
    fake.at(9, lambda: predictor(fake, "p-2"))

    seen, stayed = [], []
    for _ in range(7):
        seen.append(count())
        stayed.append(stay())
        fake.clock.sleep(2)

    assert seen == [1, 1, 1, 2, 2, 3, 3]
    assert stayed == [1] * 7


def test_pending_names_pods_with_the_event_message_when_no_condition_says(fake: FakeKube) -> None:
    predictor(fake, "p-0")
    predictor(fake, "p-1", phase="Pending", ready=False)
    fake.add_event(NS, "p-1", "FailedScheduling", INSUFFICIENT_CPU)
    predictor(fake, "p-2", phase="Pending", ready=False)
    assert ReplicaCounter(fake, NS, "tf-mnist").pending() == [
        ("p-1", INSUFFICIENT_CPU),
        ("p-2", ""),
    ]


# --------------------------------------------------------------------------- retry


def test_retry_succeeds_after_two_webhook_errors(fake: FakeKube) -> None:
    tfjob = {"apiVersion": TF, "kind": "TFJob", "metadata": {"name": "cnn", "namespace": NS}}
    webhook = KubeError(
        "apply (dry run) TFJob kubeflow/cnn failed: Internal error occurred: failed calling "
        'webhook "validator.tfjob.training-operator.kubeflow.org": dial tcp 10.43.0.9:443: '
        "connect: connection refused"
    )
    fake.fail("apply", webhook, times=2)
    lines, out = collect()

    result = retry(
        lambda: fake.apply(tfjob, dry_run=True),
        what="training-operator webhook",
        timeout=60,
        clock=fake.clock,
        out=out,
    )

    assert result == tfjob
    assert len(lines) == 2
    assert lines[0].startswith("training-operator webhook: not ready yet (apply (dry run) TFJob")
    assert "retry 1 in 2s" in lines[0] and "retry 2 in 2s" in lines[1]
    assert fake.clock.now == 4
    assert fake.dry_runs == [tfjob] and fake.applied == []


def test_retry_gives_up_at_the_deadline_with_the_last_error(fake: FakeKube) -> None:
    calls = []

    def apply() -> None:
        calls.append(fake.clock.now)
        raise KubeError(f"x509: certificate signed by unknown authority (call {len(calls)})")

    with pytest.raises(WaitError) as info:
        retry(apply, what="cert-manager webhook", timeout=10, clock=fake.clock, out=lambda _: 0)

    assert "gave up on cert-manager webhook after 10s and 6 attempts" in str(info.value)
    assert "last error: x509: certificate signed by unknown authority (call 6)" in str(info.value)
    assert calls == [0, 2, 4, 6, 8, 10]
    assert isinstance(info.value.__cause__, KubeError)


def test_retry_does_not_swallow_other_errors(fake: FakeKube) -> None:
    def broken() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        retry(broken, what="x", timeout=60, clock=fake.clock, out=print)
    assert fake.clock.now == 0


# --------------------------------------------------------------------------- DryKube


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


# --------------------------------------------------------------------------- ApiKube


def test_constructing_api_kube_imports_and_loads_nothing(tmp_path: Path) -> None:
    code = (
        "import sys, k8s.kube as k; kube = k.ApiKube('k3d-distml'); "
        "print(sorted(m for m in sys.modules if m.startswith(('kubernetes', 'urllib3'))))"
    )
    env = {"KUBECONFIG": str(tmp_path / "does-not-exist"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def write_kubeconfig(path: Path, server: str, context: str = "k3d-other") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
                "current-context": context,
            }
        )
    )
    return path


@pytest.mark.parametrize("kubeconfig", ["missing-file", "other-context"])
def test_api_kube_without_the_context_says_run_invoke_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubeconfig: str
) -> None:
    path = tmp_path / "config"
    if kubeconfig == "other-context":
        write_kubeconfig(path, "https://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", str(path))
    kube = ApiKube("k3d-distml")

    with pytest.raises(KubeError, match="no kubeconfig context k3d-distml; run `invoke up` first"):
        kube.get("v1", "Pod", "p", NS)


# A loopback stand-in for the API server: just enough discovery and endpoints to check that
# ApiKube sends what a real server expects and maps its answers.
DISCOVERY = {
    "/version": {"major": "1", "minor": "31", "gitVersion": "v1.31.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "apps",
                "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
            }
        ],
    },
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": "pods",
                "singularName": "pod",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["get", "list", "delete", "patch"],
            },
            {
                "name": "pods/log",
                "singularName": "",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["get"],
            },
            {
                "name": "events",
                "singularName": "event",
                "namespaced": True,
                "kind": "Event",
                "verbs": ["get", "list"],
            },
        ],
    },
    "/apis/apps/v1": {
        "kind": "APIResourceList",
        "groupVersion": "apps/v1",
        "resources": [
            {
                "name": "deployments",
                "singularName": "deployment",
                "namespaced": True,
                "kind": "Deployment",
                "verbs": ["get", "list", "delete", "patch"],
            },
        ],
    },
}


def status_body(code: int, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "code": code,
    }


class FakeApiServer(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[dict]] = []

    def log_message(self, *args) -> None:
        pass

    def answer(self, code: int, body: object, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def record(self) -> tuple[str, dict[str, list[str]], bytes]:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": parse_qs(url.query),
                "content_type": self.headers.get("Content-Type"),
                "body": body,
            }
        )
        return url.path, parse_qs(url.query), body

    def do_GET(self) -> None:
        path, query, _ = self.record()
        deployments = "/apis/apps/v1/namespaces/kubeflow/deployments"
        if path in DISCOVERY:
            self.answer(200, DISCOVERY[path])
        elif path == f"{deployments}/web":
            self.answer(
                200,
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": NS},
                },
            )
        elif path == deployments:
            self.answer(
                200,
                {
                    "apiVersion": "apps/v1",
                    "kind": "DeploymentList",
                    "items": [{"metadata": {"name": "web", "namespace": NS}}],
                },
            )
        elif path.startswith(deployments):
            self.answer(404, status_body(404, 'deployments.apps "gone" not found'))
        elif path == "/api/v1/namespaces/kubeflow/pods/w-0/log":
            lines = [f"line {i}" for i in range(10)]
            self.answer(200, "\n".join(lines[-int(query["tailLines"][0]) :]), "text/plain")
        elif path == "/api/v1/namespaces/kubeflow/pods/starting/log":
            self.answer(400, status_body(400, 'container "tensorflow" is waiting to start'))
        elif path == "/api/v1/namespaces/kubeflow/events":
            self.answer(
                200,
                {
                    "apiVersion": "v1",
                    "kind": "EventList",
                    "items": [
                        event("b", "2026-01-01T00:00:09Z"),
                        event("a", "2026-01-01T00:00:01Z"),
                    ],
                },
            )
        else:
            self.answer(500, status_body(500, f"unexpected {path}"))

    def do_PATCH(self) -> None:
        path, _, body = self.record()
        if path.endswith("/broken"):
            self.answer(
                500,
                status_body(
                    500,
                    'Internal error occurred: failed calling webhook "validator.'
                    'tfjob.training-operator.kubeflow.org": connect: connection refused',
                ),
            )
        else:
            self.answer(200, json.loads(body))

    def do_DELETE(self) -> None:
        path, _, _ = self.record()
        if path.endswith("/web"):
            self.answer(200, status_body(200, "deleted") | {"status": "Success"})
        else:
            self.answer(404, status_body(404, "not found"))


def event(reason: str, stamp: str) -> dict:
    return {
        "metadata": {"name": f"w-0.{reason}", "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": "w-0", "namespace": NS},
        "reason": reason,
        "message": f"event {reason}",
        "type": "Warning",
        "lastTimestamp": stamp,
    }


@pytest.fixture
def api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    FakeApiServer.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config", url)))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the discovery cache file
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def test_api_kube_against_a_stand_in_api_server(api_server: str) -> None:
    kube = ApiKube("k3d-other")
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 1},
    }

    assert kube.apply(dep) == dep
    assert kube.apply(dep, dry_run=True) == dep
    patches = [r for r in FakeApiServer.requests if r["method"] == "PATCH"]
    assert patches[0]["path"] == "/apis/apps/v1/namespaces/kubeflow/deployments/web"
    assert patches[0]["content_type"] == "application/apply-patch+yaml"
    assert patches[0]["query"] == {"fieldManager": ["distml"], "force": ["true"]}
    assert patches[1]["query"]["dryRun"] == ["All"]
    assert json.loads(patches[0]["body"]) == dep

    assert kube.get("apps/v1", "Deployment", "web", NS)["metadata"]["name"] == "web"
    assert kube.get("apps/v1", "Deployment", "gone", NS) is None
    assert [d["metadata"]["name"] for d in kube.list("apps/v1", "Deployment", NS)] == ["web"]
    assert kube.list(TF, "TFJob", NS) == []  # kind not installed
    assert kube.get(TF, "TFJob", "cnn", NS) is None

    assert kube.delete("apps/v1", "Deployment", "web", NS) is True
    assert kube.delete("apps/v1", "Deployment", "gone", NS) is False
    delete = next(r for r in FakeApiServer.requests if r["method"] == "DELETE")
    assert delete["query"]["propagationPolicy"] == ["Foreground"]

    assert kube.logs("w-0", NS, container="tensorflow", tail=3) == "line 7\nline 8\nline 9"
    log_call = next(r for r in FakeApiServer.requests if r["path"].endswith("w-0/log"))
    assert log_call["query"] == {"container": ["tensorflow"], "tailLines": ["3"]}
    kube.logs("w-0", NS, container="tensorflow", tail=3, previous=True)
    log_call = [r for r in FakeApiServer.requests if r["path"].endswith("w-0/log")][-1]
    assert log_call["query"]["previous"] == ["true"]  # the crashed run's log
    assert kube.logs("starting", NS, container="tensorflow") == ""

    events = kube.events(NS, "w-0")
    assert [e["reason"] for e in events] == ["a", "b"]  # oldest first
    assert events[0]["involvedObject"]["name"] == "w-0"
    assert "lastTimestamp" in events[0]
    event_call = next(r for r in FakeApiServer.requests if r["path"].endswith("/events"))
    assert event_call["query"]["fieldSelector"] == ["involvedObject.name=w-0"]

    broken = dict(dep, metadata={"name": "broken", "namespace": NS})
    with pytest.raises(KubeError) as info:
        kube.apply(broken)
    assert str(info.value).startswith("apply Deployment kubeflow/broken failed: Internal error")
    assert "connection refused" in str(info.value)
    with pytest.raises(KubeError, match="apply TFJob kubeflow/cnn failed: the kind TFJob"):
        kube.apply(
            {"apiVersion": TF, "kind": "TFJob", "metadata": {"name": "cnn", "namespace": NS}}
        )


def test_api_kube_unreachable_server_is_a_kube_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(
        "KUBECONFIG", str(write_kubeconfig(tmp_path / "c", f"http://127.0.0.1:{port}"))
    )
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kube = ApiKube("k3d-other")
    with pytest.raises(
        KubeError, match="cannot reach the API server of kubeconfig context k3d-other"
    ):
        kube.list("v1", "Pod", NS)


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
    url = wait_isvc_ready(fake, NS, "tf-mnist", timeout=60, clock=fake.clock, out=lambda _: None)
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
        wait_isvc_ready(fake, NS, "tf-mnist", timeout=600, clock=fake.clock, out=lambda _: None)
    assert fake.clock.now < 600
