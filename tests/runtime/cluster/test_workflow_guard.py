"""runtime.cluster.workflow, on the serving steps' guard (k8s.manifests.guarded): a create
step that found its object says so instead of looking like a failure, and a serving step
the API server refused is explained (the server's own answer says only that it rejected
the request)."""

from __future__ import annotations

from typing import Any

from k8s.manifests import argo_workflow as wfm
from k8s.manifests.guarded import NOT_APPLIED
from k8s.providers.settings import Settings
from k8s.waits.argo_status import StepRow
from runtime.cluster.workflow import refusals, step_row_line
from tests.support.workflow_kit import IMAGE, build

ME = "abcd1234"
ALREADY = (
    "main (exit code 1): no more retries Error from server (AlreadyExists): error when creating "
    '"/tmp/manifest.yaml": inferenceservices.serving.kserve.io "tf-mnist" already exists'
)
REFUSED = f"main (exit code 1): no more retries The request is invalid: {NOT_APPLIED}"


def test_a_create_step_that_found_its_object_says_it_is_there() -> None:
    line = step_row_line(StepRow(name="serve-create", phase="Failed", message=ALREADY))
    assert line.split()[:2] == ["serve-create", "exists:"]
    assert "step serve updates it only if it is this work dir's" in line
    other = step_row_line(StepRow(name="serve-create", phase="Failed", message="forbidden"))
    assert "Failed: forbidden" in other


def with_nodes(wf: dict[str, Any], *nodes: tuple[str, str, str]) -> dict[str, Any]:
    """``wf`` with status nodes: (step, phase, message), each a Retry node and its attempt."""
    status: dict[str, Any] = {"phase": "Failed", "nodes": {}}
    for i, (name, phase, message) in enumerate(nodes):
        retry = {"id": f"r{i}", "displayName": name, "type": "Retry", "phase": phase}
        attempt = {"id": f"p{i}", "displayName": f"{name}(0)", "type": "Pod", "phase": phase}
        retry.update(message=message, children=[f"p{i}"], finishedAt=f"2026-01-01T00:0{i}:00Z")
        attempt.update(message=message, finishedAt=retry["finishedAt"])
        status["nodes"].update({retry["id"]: retry, attempt["id"]: attempt})
    return {**wf, "status": status}


def test_a_refused_serving_step_is_explained_with_the_object_and_what_to_do() -> None:
    s = Settings(image=IMAGE)
    wf = with_nodes(
        build(s, instance=ME),
        ("serve-create", "Failed", ALREADY),
        ("serve", "Failed", REFUSED),
    )
    (line,) = refusals(wf, s.namespace, ME)
    assert "step serve refused to write inferenceservices.v1beta1.serving.kserve.io" in line
    assert f"{s.namespace}/{s.service}" in line and f"distml/instance={ME}" in line
    assert "left as it is" in line and "invoke workflow" in line


def test_other_failures_of_a_serving_step_are_not_called_refusals() -> None:
    s = Settings(image=IMAGE)
    failed = "failure condition 'status.modelStatus.states.targetModelState' evaluated true"
    wf = with_nodes(build(s, instance=ME), ("serve", "Failed", failed))
    assert refusals(wf, s.namespace, ME) == []
    wf = with_nodes(build(s, instance=ME), (wfm.STEP_SELECT, "Failed", REFUSED))
    assert refusals(wf, s.namespace, ME) == [], "only the serving steps write by a guarded patch"
