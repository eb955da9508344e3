"""k8s.workflows against tests/fakekube.py (fake cluster, fake clock): reading a Workflow's
steps, the wait behind `invoke workflow --watch`, and the failing step's report.

The statuses scripted here are what Argo's controller writes; each is validated against
the Workflow CRD's status schema (strict), so a misspelt field the code reads fails here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from k8s.kube import KubeError
from k8s.waits import WaitError
from k8s.workflows import (
    MAIN_CONTAINER,
    NODE_ID_ANNOTATION,
    POD_WORKFLOW_LABEL,
    WORKFLOW_API,
    StepRow,
    failed_steps,
    failure_report,
    step_rows,
    wait_workflow,
)
from tests.fakekube import FakeKube
from tests.k8s_schemas import validate

NS = "kubeflow"
WF = "distml-pipeline"


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    started = time.monotonic()
    yield FakeKube()
    assert time.monotonic() - started < 1.0, "a wait took real time"


def node(
    node_id: str,
    name: str,
    phase: str,
    *,
    type: str = "Pod",
    started: int | None = 0,
    finished: int | None = None,
    message: str = "",
    hit: bool | None = None,
) -> dict[str, Any]:
    """A status node as Argo writes it (``started``/``finished``: seconds after 12:00)."""
    n: dict[str, Any] = {
        "id": node_id,
        "name": f"{WF}[0].{name}",
        "displayName": name,
        "type": type,
        "phase": phase,
    }
    if started is not None:
        n["startedAt"] = f"2026-01-01T12:{started // 60:02d}:{started % 60:02d}Z"
    if finished is not None:
        n["finishedAt"] = f"2026-01-01T12:{finished // 60:02d}:{finished % 60:02d}Z"
    if message:
        n["message"] = message
    if hit is not None:
        n["memoizationStatus"] = {"hit": hit, "key": "k", "cacheName": "distml-cache"}
    return n


def workflow(phase: str | None, *nodes: dict[str, Any], message: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"nodes": {n["id"]: n for n in nodes}}
    if phase:
        status["phase"] = phase
    if message:
        status["message"] = message
    return {
        "apiVersion": WORKFLOW_API,
        "kind": "Workflow",
        "metadata": {"name": WF, "namespace": NS},
        "spec": {"entrypoint": "pipeline"},
        "status": status,
    }


ROOT = node(WF, WF, "Running", type="Steps")
GROUP = node(f"{WF}-1", "[0]", "Running", type="StepGroup")
RETRY = node(f"{WF}-2", "select", "Running", type="Retry", started=30)
INGEST_HIT = node(f"{WF}-3", "ingest", "Succeeded", started=None, hit=True)
TRAIN_CNN = node(f"{WF}-4", "train-cnn", "Running", started=10)
TRAIN_BN = node(f"{WF}-5", "train-cnn-batchnorm", "Pending", started=10)


def put(fake: FakeKube, wf: dict[str, Any]) -> None:
    fake.put(wf)


def test_the_scripted_statuses_are_what_the_crd_describes():
    failed = node(f"{WF}-6", "select(0)", "Failed", started=30, finished=40, message="exit 3")
    skipped = node(f"{WF}-7", "serve", "Error", type="Skipped", message="cache error")
    wf = workflow("Failed", ROOT, GROUP, RETRY, INGEST_HIT, TRAIN_CNN, failed, skipped, message="x")
    assert validate(wf) == []


def test_the_steps_are_the_pod_nodes_in_the_order_they_started():
    rows = step_rows(workflow("Running", ROOT, GROUP, RETRY, TRAIN_BN, TRAIN_CNN, INGEST_HIT))
    assert rows == [
        StepRow("ingest", "Succeeded", cached=True),  # memoized: no startedAt, done at once
        StepRow("train-cnn", "Running"),
        StepRow("train-cnn-batchnorm", "Pending"),
    ]
    assert step_rows(None) == []
    assert step_rows(workflow(None)) == []


def test_the_wait_reports_each_change_once_and_returns_the_final_workflow(fake):
    updates: list[list[StepRow]] = []
    done = node(f"{WF}-4", "train-cnn", "Succeeded", started=10, finished=90)
    fake.put(workflow(None))
    statuses = [
        workflow(None)["status"],
        workflow("Running", ROOT, INGEST_HIT)["status"],
        workflow("Running", ROOT, INGEST_HIT)["status"],  # unchanged: no update
        workflow("Running", ROOT, INGEST_HIT, TRAIN_CNN)["status"],
        workflow("Running", ROOT, INGEST_HIT, TRAIN_CNN)["status"],
        workflow("Succeeded", ROOT, INGEST_HIT, done)["status"],
    ]
    fake.sequence(WORKFLOW_API, "Workflow", NS, WF, statuses)
    final = wait_workflow(
        fake, NS, WF, timeout=600, on_update=updates.append, clock=fake.clock, out=print
    )
    assert final["status"]["phase"] == "Succeeded"
    assert [[(r.name, r.phase) for r in rows] for rows in updates] == [
        [],
        [("ingest", "Succeeded")],
        [("ingest", "Succeeded"), ("train-cnn", "Running")],
        [("ingest", "Succeeded"), ("train-cnn", "Succeeded")],
    ]


@pytest.mark.parametrize("phase", ["Failed", "Error"])
def test_a_failed_workflow_ends_the_wait_it_does_not_raise(fake, phase):
    fake.put(workflow(phase, ROOT, node(f"{WF}-4", "train-cnn", "Failed", message="boom")))
    final = wait_workflow(fake, NS, WF, timeout=60, on_update=lambda rows: None, clock=fake.clock)
    assert final["status"]["phase"] == phase
    assert fake.clock.sleeps == []  # checked at once


def test_a_deleted_workflow_fails_the_wait_after_the_grace(fake):
    with pytest.raises(WaitError, match=r"does not exist .*`invoke workflow --stop`") as err:
        wait_workflow(fake, NS, WF, timeout=600, on_update=lambda rows: None, clock=fake.clock)
    assert err.value.next_step.startswith(f"kubectl -n {NS} get workflows")
    assert 30 <= fake.clock.now < 600


def test_the_deadline_names_the_unfinished_steps(fake):
    fake.put(workflow("Running", ROOT, INGEST_HIT, TRAIN_CNN))
    with pytest.raises(WaitError, match=r"timed out after 100s .*unfinished steps: train-cnn\)"):
        wait_workflow(fake, NS, WF, timeout=100, on_update=lambda rows: None, clock=fake.clock)


def test_api_blips_are_retried(fake):
    fake.put(workflow("Succeeded", ROOT, INGEST_HIT))
    fake.fail("get", KubeError("connection refused"), times=2)
    lines: list[str] = []
    final = wait_workflow(
        fake, NS, WF, timeout=60, on_update=lambda rows: None, clock=fake.clock, out=lines.append
    )
    assert final["status"]["phase"] == "Succeeded"
    assert any("retrying: connection refused" in line for line in lines)


def step_pod_of(fake: FakeKube, name: str, node_id: str, workflow_name: str = WF) -> None:
    pod = fake.add_pod(
        NS, name, {POD_WORKFLOW_LABEL: workflow_name}, phase="Failed", container=MAIN_CONTAINER
    )
    fake.obj("v1", "Pod", name, NS)["metadata"]["annotations"] = {NODE_ID_ANNOTATION: node_id}
    assert pod


def test_the_report_shows_the_failing_steps_message_and_its_pods_log_tail(fake):
    first = node(f"{WF}-6", "select(0)", "Failed", started=30, finished=40, message="exit 1")
    last = node(f"{WF}-7", "select(1)", "Failed", started=50, finished=60, message="exit 3")
    wf = workflow("Failed", ROOT, RETRY, INGEST_HIT, last, first, message="child failed")
    assert [n["displayName"] for n in failed_steps(wf)] == ["select(0)", "select(1)"]
    step_pod_of(fake, f"{WF}-select-111", f"{WF}-7")
    step_pod_of(fake, f"{WF}-select-222", f"{WF}-7", workflow_name="another")  # not ours
    fake.set_log(f"{WF}-select-111", "\n".join(f"line {i}" for i in range(50)) + "\nrefused")

    report = failure_report(fake, NS, wf, tail=5)

    assert report.startswith(f"Workflow {NS}/{WF}: Failed\n  message: child failed\n")
    gone = "its pod is gone (podGC may have removed it)"
    assert f"  step select(0): Failed: exit 1\n    {gone}" in report
    assert "  step select(1): Failed: exit 3\n" in report
    assert "line 46\n" in report and "refused" in report and "line 45" not in report
    assert (f"{WF}-select-111", NS, MAIN_CONTAINER, 5) in fake.log_requests
    assert not any(r[0] == f"{WF}-select-222" for r in fake.log_requests)


def test_a_pod_named_after_its_node_is_found_without_the_annotation(fake):
    failed = node(f"{WF}-9", "serve", "Failed", started=5, finished=9, message="Ready=False")
    fake.add_pod(NS, f"{WF}-9", {POD_WORKFLOW_LABEL: WF}, phase="Failed", container="main")
    fake.set_log(f"{WF}-9", "condition not met")
    report = failure_report(fake, NS, workflow("Failed", ROOT, failed))
    assert "condition not met" in report


def test_a_workflow_that_failed_before_any_step_says_so(fake):
    report = failure_report(fake, NS, workflow("Error", message="invalid spec: x"))
    assert "message: invalid spec: x" in report
    assert "no step failed" in report
