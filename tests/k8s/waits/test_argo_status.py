"""k8s.waits.argo_status against tests/support/fakekube.py (fake cluster, fake clock): reading a
Workflow's steps, the wait behind `invoke workflow --watch`, and the failing step's report.

The statuses scripted here are what Argo's controller writes; each is validated against
the Workflow CRD's status schema (strict), so a misspelt field the code reads fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from k8s import manifests
from k8s.client.kube import KubeError
from k8s.client.objects import TFJOB_API
from k8s.providers.settings import Settings
from k8s.waits.argo_status import (
    MAIN_CONTAINER,
    NODE_ID_ANNOTATION,
    POD_WORKFLOW_LABEL,
    WORKFLOW_API,
    StepRow,
    failed_steps,
    failure_report,
    step_rows,
    tfjob_steps,
    wait_workflow,
)
from k8s.waits.cluster_poll import WaitError
from tests.support.fakekube import FakeKube, conditions_status
from tests.support.k8s_schemas import validate
from tests.support.wait_kit import KUBECTL, NAMED, unnamed_commands

NS = "kubeflow"
WF = "distml-pipeline"


def node(
    node_id: str,
    name: str,
    phase: str,
    *,
    type: str = "Pod",
    group: int | None = 0,
    started: int | None = 0,
    finished: int | None = None,
    message: str = "",
    hit: bool | None = None,
    children: tuple[str, ...] = (),
    attempt: bool = False,
    within: str = "",
) -> dict[str, Any]:
    """A status node as Argo's initializeNode writes it (``started``/``finished``: seconds
    after 12:00; ``group``: the step group, None for the root; ``attempt``: a Retry node's
    child, flagged ``nodeFlag.retried``; ``within``: the nested steps template's node,
    "train", whose group [0] holds the TFJob steps)."""
    prefix = f"{WF}[{group}].{within}[0]." if within else f"{WF}[{group}]."
    n: dict[str, Any] = {
        "id": node_id,
        "name": WF if group is None else prefix + name,
        "displayName": name,
        "type": type,
        "phase": phase,
        "templateName": name.split("(")[0],
        "templateScope": f"local/{WF}",
    }
    if group is not None:
        n["boundaryID"] = f"{WF}-{within}" if within else WF
    if started is not None:
        n["startedAt"] = f"2026-01-01T12:{started // 60:02d}:{started % 60:02d}Z"
    if finished is not None:
        n["finishedAt"] = f"2026-01-01T12:{finished // 60:02d}:{finished % 60:02d}Z"
    if message:
        n["message"] = message
    if hit is not None:
        n["memoizationStatus"] = {"hit": hit, "key": "k", "cacheName": "distml-workflow-cache"}
    if children:
        n["children"] = list(children)
    if attempt:
        n["nodeFlag"] = {"retried": True}
    return n


def workflow(
    phase: str | None, *nodes: dict[str, Any], message: str = "", spec: dict | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"nodes": {n["id"]: n for n in nodes}}
    if phase:
        status["phase"] = phase
    if message:
        status["message"] = message
    return {
        "apiVersion": WORKFLOW_API,
        "kind": "Workflow",
        "metadata": {"name": WF, "namespace": NS},
        "spec": spec or {"entrypoint": "pipeline"},
        "status": status,
    }


# What Argo v4.1.2 writes for distml's templates: ingest has a retryStrategy and memoize,
# so its node is a Retry node (Template.GetNodeType), and a cache hit is that Retry node,
# Succeeded at once with no attempt (initializeCacheHitNode); train-* and select have no
# retryStrategy: Pod nodes; an attempt is a Retry node's child "<step>(N)".
ROOT = node(WF, WF, "Running", type="Steps", group=None, children=(f"{WF}-1",))
GROUP = node(f"{WF}-1", "[0]", "Running", type="StepGroup", children=(f"{WF}-3",))
INGEST_HIT = node(f"{WF}-3", "ingest", "Succeeded", type="Retry", finished=0, hit=True)
# The TFJob steps sit in the nested steps template "train" (its parallelism limits them).
TRAIN = node(f"{WF}-train", "train", "Running", type="Steps", group=1, started=9)
TRAIN_CNN = node(f"{WF}-4", "train-cnn", "Running", group=1, within="train", started=10)
TRAIN_BN = node(f"{WF}-5", "train-cnn-batchnorm", "Pending", group=1, within="train", started=10)


def retried(
    phase: str, *attempts: tuple[str, str], message: str = "", hit: bool | None = False
) -> list[dict[str, Any]]:
    """The memoized, retried ingest step on a cache miss: its Retry node (Pending while an
    attempt runs, as initializeCacheNode leaves it) and its attempts (phase, message)."""
    ids = tuple(f"{WF}-a{i}" for i in range(len(attempts)))
    children = [
        node(ids[i], f"ingest({i})", p, started=i * 20, message=m, attempt=True)
        for i, (p, m) in enumerate(attempts)
    ]
    wrapper = node(f"{WF}-3", "ingest", phase, type="Retry", message=message, hit=hit, children=ids)
    return [wrapper, *children]


def put(fake: FakeKube, wf: dict[str, Any]) -> None:
    fake.put(wf)


def test_the_scripted_statuses_are_what_the_crd_describes():
    failed = node(f"{WF}-6", "select", "Failed", group=2, started=30, finished=40, message="x")
    skipped = node(f"{WF}-7", "serve", "Error", type="Skipped", group=3, message="cache error")
    wf = workflow("Failed", ROOT, GROUP, INGEST_HIT, TRAIN, TRAIN_CNN, failed, skipped, message="x")
    assert validate(wf) == []
    assert (
        validate(workflow("Running", ROOT, *retried("Pending", ("Failed", "e"), ("Running", ""))))
        == []
    )


def test_a_cache_hit_is_a_retry_node_shown_as_its_step(fake):
    rows = step_rows(workflow("Running", ROOT, GROUP, TRAIN, TRAIN_BN, TRAIN_CNN, INGEST_HIT))
    assert rows == [
        StepRow("ingest", "Succeeded", cached=True),  # started (and finished) first
        StepRow("train-cnn", "Running"),
        StepRow("train-cnn-batchnorm", "Pending"),
    ]
    assert step_rows(None) == []
    assert step_rows(workflow(None)) == []


@pytest.mark.parametrize(
    ("wrapper", "attempts", "message", "row"),
    [
        # The memoized Retry node stays Pending while its first attempt runs.
        ("Pending", [("Pending", "")], "", StepRow("ingest", "Pending")),
        ("Pending", [("Running", "")], "", StepRow("ingest", "Running")),
        # Between attempts: the Retry node's own message (processNodeRetries' backoff).
        (
            "Pending",
            [("Failed", "Error (exit code 1)")],
            "Backoff for 10 seconds",
            StepRow("ingest", "Pending", "Backoff for 10 seconds"),
        ),
        (
            "Pending",
            [("Failed", "Error (exit code 1)"), ("Running", "")],
            "",
            StepRow("ingest", "Running", retries=1),
        ),
        (
            "Succeeded",
            [("Failed", "Error (exit code 1)"), ("Succeeded", "")],
            "",
            StepRow("ingest", "Succeeded", retries=1),
        ),
        # Out of retries: the Retry node's verdict, with its last attempt's message.
        (
            "Failed",
            [("Failed", "e"), ("Failed", "e"), ("Failed", "Error (exit code 1)")],
            "No more retries left",
            StepRow(
                "ingest",
                "Failed",
                "No more retries left (last attempt: Error (exit code 1))",
                retries=2,
            ),
        ),
        # Not retried (retryPolicy OnError, the attempt Failed): the attempt's message.
        (
            "Failed",
            [("Failed", "Error (exit code 1)")],
            "Error (exit code 1)",
            StepRow("ingest", "Failed", "Error (exit code 1)"),
        ),
    ],
)
def test_a_retried_step_is_one_row_named_after_the_step(wrapper, attempts, message, row):
    wf = workflow("Running", ROOT, GROUP, *retried(wrapper, *attempts, message=message))
    assert validate(wf) == []
    assert step_rows(wf) == [row]


def test_a_retry_nodes_hooked_children_are_not_attempts_and_not_steps():
    wrapper, attempt = retried("Running", ("Running", ""))
    hook = node(f"{WF}-h", "ingest.onExit", "Succeeded", started=50)
    hook["nodeFlag"] = {"hooked": True}
    wrapper["children"].append(hook["id"])
    wf = workflow("Running", ROOT, wrapper, attempt, hook)
    assert validate(wf) == []
    assert step_rows(wf) == [StepRow("ingest", "Running")]


def test_the_wait_reports_each_change_once_and_returns_the_final_workflow(fake):
    updates: list[list[StepRow]] = []
    done = node(
        f"{WF}-4", "train-cnn", "Succeeded", group=1, within="train", started=10, finished=90
    )
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
        fake,
        NS,
        WF,
        timeout=600,
        on_update=updates.append,
        clock=fake.clock,
        out=print,
        kubectl=KUBECTL,
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
    fake.put(
        workflow(
            phase,
            ROOT,
            node(f"{WF}-4", "train-cnn", "Failed", group=1, within="train", message="boom"),
        )
    )
    final = wait_workflow(
        fake, NS, WF, timeout=60, on_update=lambda rows: None, clock=fake.clock, kubectl=KUBECTL
    )
    assert final["status"]["phase"] == phase
    assert fake.clock.sleeps == []  # checked at once


def test_a_deleted_workflow_fails_the_wait_after_the_grace(fake):
    with pytest.raises(WaitError, match=r"does not exist .*`invoke workflow --stop`") as err:
        wait_workflow(
            fake,
            NS,
            WF,
            timeout=600,
            on_update=lambda rows: None,
            clock=fake.clock,
            kubectl=KUBECTL,
        )
    assert err.value.next_step.startswith(f"{NAMED}-n {NS} get workflows")
    assert 30 <= fake.clock.now < 600


def test_the_deadline_names_the_unfinished_steps(fake):
    fake.put(workflow("Running", ROOT, INGEST_HIT, TRAIN_CNN))
    with pytest.raises(
        WaitError, match=r"timed out after 100s .*unfinished steps: train-cnn\)"
    ) as err:
        wait_workflow(
            fake,
            NS,
            WF,
            timeout=100,
            on_update=lambda rows: None,
            clock=fake.clock,
            kubectl=KUBECTL,
        )
    assert err.value.next_step.startswith(f"{NAMED}-n {NS} get workflow {WF} -o yaml; ")
    assert unnamed_commands(str(err.value)) == []


def test_api_blips_are_retried(fake):
    fake.put(workflow("Succeeded", ROOT, INGEST_HIT))
    fake.fail("get", KubeError("connection refused"), times=2)
    lines: list[str] = []
    final = wait_workflow(
        fake,
        NS,
        WF,
        timeout=60,
        on_update=lambda rows: None,
        clock=fake.clock,
        out=lines.append,
        kubectl=KUBECTL,
    )
    assert final["status"]["phase"] == "Succeeded"
    assert any("retrying: connection refused" in line for line in lines)


def step_pod_of(fake: FakeKube, name: str, node_id: str, workflow_name: str = WF) -> None:
    pod = fake.add_pod(
        NS, name, {POD_WORKFLOW_LABEL: workflow_name}, phase="Failed", container=MAIN_CONTAINER
    )
    fake.obj("v1", "Pod", name, NS)["metadata"]["annotations"] = {NODE_ID_ANNOTATION: node_id}
    assert pod


def test_the_report_shows_each_failed_step_once_with_its_last_attempts_log_tail(fake):
    steps = retried(
        "Failed",
        ("Failed", "Error (exit code 2)"),
        ("Failed", "Error (exit code 1)"),
        message="No more retries left",
    )
    steps[1]["finishedAt"], steps[2]["finishedAt"] = "2026-01-01T12:00:10Z", "2026-01-01T12:00:40Z"
    steps[0]["finishedAt"] = "2026-01-01T12:00:41Z"
    select = node(f"{WF}-6", "select", "Failed", group=2, started=50, finished=60, message="x")
    wf = workflow("Failed", ROOT, *steps, select, message="child failed")
    assert validate(wf) == []
    assert [s.name for s in failed_steps(wf)] == ["ingest", "select"]
    step_pod_of(fake, f"{WF}-ingest-111", f"{WF}-a1")  # the last attempt's pod
    step_pod_of(fake, f"{WF}-ingest-000", f"{WF}-a0")  # the first attempt's
    step_pod_of(fake, f"{WF}-ingest-222", f"{WF}-a1", workflow_name="another")  # not ours
    fake.set_log(f"{WF}-ingest-111", "\n".join(f"line {i}" for i in range(50)) + "\nno space")

    report = failure_report(fake, NS, wf, tail=5, kubectl=KUBECTL)

    assert report.startswith(f"Workflow {NS}/{WF}: Failed\n  message: child failed\n")
    assert (
        "  step ingest: Failed: No more retries left (last attempt: Error (exit code 1))\n"
        f"    pod {WF}-ingest-111: Failed" in report
    )
    assert "ingest(0)" not in report and "ingest(1)" not in report
    assert "line 46\n" in report and "no space" in report and "line 45" not in report
    assert (f"{WF}-ingest-111", NS, MAIN_CONTAINER, 5) in fake.log_requests
    assert not any(r[0] in (f"{WF}-ingest-000", f"{WF}-ingest-222") for r in fake.log_requests)
    gone = "its pod is gone (podGC may have removed it)"
    assert f"  step select: Failed: x\n    {gone}" in report


def test_a_failed_train_step_reports_its_tfjob(fake):
    """The train step's pod only ran `kubectl create` and watched the TFJob: the report
    adds the TFJob's own (conditions, the failing worker's log tail), found through the
    Workflow's spec (the builder's), not a second naming rule."""
    s = Settings(image="distml:test")
    (wf_spec,) = [
        o["spec"]
        for o in manifests.workflow_objects(s, models=("cnn", "cnn_dropout"), cache_key="k")
        if o["kind"] == "Workflow"
    ]
    job = manifests.tfjob_name("cnn")
    assert tfjob_steps({"spec": wf_spec}) == {
        job: job,
        manifests.tfjob_name("cnn_dropout"): manifests.tfjob_name("cnn_dropout"),
    }
    failed = node(
        f"{WF}-4", job, "Failed", group=1, within="train", started=10, finished=90, message="cond"
    )
    wf = workflow("Failed", ROOT, INGEST_HIT, TRAIN, failed, spec=wf_spec)
    assert validate(wf) == []
    step_pod_of(fake, f"{WF}-{job}-1", f"{WF}-4")
    fake.set_log(f"{WF}-{job}-1", 'time=... msg="failure condition matched"')
    fake.set_status(
        TFJOB_API,
        "TFJob",
        NS,
        job,
        conditions_status(
            ("Created", "True"), ("Failed", "True"), replicaStatuses={"Worker": {"failed": 1}}
        ),
    )
    fake.add_pod(
        NS,
        f"{job}-worker-0",
        {"training.kubeflow.org/job-name": job},
        phase="Failed",
        container="tensorflow",
        exit_code=1,
    )
    fake.set_log(f"{job}-worker-0", "ValueError: Collective ops must be configured")

    report = failure_report(fake, NS, wf, kubectl=KUBECTL)

    assert f"  step {job}: Failed: cond\n    pod {WF}-{job}-1: Failed" in report
    assert "failure condition matched" in report  # the argoexec pod's log
    assert f"    TFJob {NS}/{job}: Failed\n" in report
    assert "      Worker: active 0, succeeded 0, failed 1" in report
    assert "ValueError: Collective ops must be configured" in report  # the worker's log
    assert report.count("hints:") <= 1


def test_a_pod_named_after_its_node_is_found_without_the_annotation(fake):
    # serve is retried (OnError): a Retry node whose one attempt failed, not retried.
    attempt = node(f"{WF}-9", "serve(0)", "Failed", group=4, started=5, message="Ready=False")
    serve = node(f"{WF}-8", "serve", "Failed", type="Retry", group=4, started=5, finished=9)
    serve["children"], serve["message"], attempt["nodeFlag"] = (
        [attempt["id"]],
        "Ready=False",
        {"retried": True},
    )
    wf = workflow("Failed", ROOT, serve, attempt)
    assert validate(wf) == []
    fake.add_pod(NS, f"{WF}-9", {POD_WORKFLOW_LABEL: WF}, phase="Failed", container="main")
    fake.set_log(f"{WF}-9", "condition not met")
    report = failure_report(fake, NS, wf, kubectl=KUBECTL)
    assert "  step serve: Failed: Ready=False\n" in report
    assert "condition not met" in report


def test_a_workflow_that_failed_before_any_step_says_so(fake):
    report = failure_report(fake, NS, workflow("Error", message="invalid spec: x"), kubectl=KUBECTL)
    assert "message: invalid spec: x" in report
    assert "no step failed" in report
