"""k8s.manifests.argo_workflow: the Workflow's resource-step conditions, judged the way
Argo v4.1.2 judges them (tests/support/argo_conditions.py) against status objects shaped the
way the training operator v1.9.0 and KServe v0.20.0 write them, and held against the CRDs'
status schemas."""

from __future__ import annotations

import importlib
import itertools
from typing import Any

import pytest
import yaml

from k8s import manifests as m
from k8s.providers.settings import Settings
from ml.contract import MODEL_TYPES, RAW_SHA256
from tests.support import argo_conditions as argo
from tests.support import k8s_schemas

wfm = importlib.import_module("k8s.manifests.argo_workflow")
IMAGE = "distml:0123456789ab"


def resource_steps(s: Settings) -> dict[str, dict[str, Any]]:
    wf = m.workflow(s, models=MODEL_TYPES, cache_key=m.memo_key(IMAGE, RAW_SHA256))
    return {t["name"]: t["resource"] for t in wf["spec"]["templates"] if "resource" in t}


def conditions(resource: dict[str, Any]) -> tuple[str, str]:
    return resource["successCondition"], resource["failureCondition"]


# -- the condition language ------------------------------------------------------------


def test_every_condition_parses_as_argo_parses_it() -> None:
    for s in (Settings(image=IMAGE), Settings(image=IMAGE, workers=3)):
        for name, resource in resource_steps(s).items():
            for text in (resource.get("successCondition"), resource.get("failureCondition")):
                if text:
                    assert argo.parse(text), name


@pytest.mark.parametrize(
    "text",
    [
        'status.conditions.#(type=="Failed").status == True',  # gjson query: not a label key
        "status.conditions.@reverse.0.type == Failed",
        "status.replicaStatuses.Worker.succeeded > two",
        "status.phase == Not Ready",
    ],
)
def test_the_parser_refuses_what_labels_parse_refuses(text: str) -> None:
    """Why the conditions cannot look a condition up by its type."""
    with pytest.raises(argo.SelectorError):
        argo.parse(text)


def status_schema(obj: dict[str, Any]) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    crd = k8s_schemas.crd(group, obj["kind"])
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


def schema_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node a gjson path reaches; KeyError when the CRD has no such field."""
    node = schema
    for part in path.split("."):
        if part.isdigit() and node.get("type") == "array":
            node = node["items"]
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]  # a map, e.g. replicaStatuses.<type>
        else:
            raise KeyError(f"{path}: no field {part!r}")
    return node


@pytest.mark.parametrize("workers", [1, 2])
def test_conditions_name_real_status_fields_and_values(workers: int) -> None:
    s = Settings(image=IMAGE, workers=workers)
    steps = resource_steps(s)
    for name, resource in steps.items():
        obj = yaml.safe_load(resource["manifest"])
        if resource["action"] == "patch":  # a guarded patch: its object is the create's
            obj = yaml.safe_load(steps[wfm.create_step(name)]["manifest"])
        for text in filter(
            None, (resource.get("successCondition"), resource.get("failureCondition"))
        ):
            for req in argo.parse(text):
                leaf = schema_at(status_schema(obj), req.key)
                assert leaf.get("type") in ("string", "integer"), (name, req.key)
                for value in req.values:
                    assert value in leaf.get("enum", [value]), (name, req.key, value)
    for model in MODEL_TYPES:
        job = yaml.safe_load(steps[m.tfjob_name(model)]["manifest"])
        assert job["spec"]["successPolicy"] == "AllWorkers", "success reads all workers"
        assert f"succeeded == {workers}" in steps[m.tfjob_name(model)]["successCondition"]


# -- TFJob: statuses as the training operator writes them ------------------------------


def set_condition(status: dict[str, Any], ctype: str, value: str = "True") -> None:
    """The training operator's setCondition (v1.9.0 pkg/util/status.go): nothing after a
    Failed condition; the old condition of the type (and Running <-> Restarting) removed,
    Running set False on Succeeded/Failed, the new one appended."""
    conds = status.setdefault("conditions", [])
    if any(c["type"] == "Failed" and c["status"] == "True" for c in conds):
        return
    kept = []
    for c in conds:
        if c["type"] == ctype or {c["type"], ctype} == {"Running", "Restarting"}:
            continue
        if ctype in ("Succeeded", "Failed") and c["type"] == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    status["conditions"] = [*kept, {"type": ctype, "status": value, "reason": f"TFJob{ctype}"}]


def run(*events: str | dict[str, int], workers: int = 2) -> list[dict[str, Any]]:
    """The TFJob object after each event (a condition type, or Worker counts)."""
    status: dict[str, Any] = {}
    seen = []
    for event in events:
        if isinstance(event, dict):
            status["replicaStatuses"] = {"Worker": dict(event)}
        else:
            set_condition(status, event)
        seen.append({"kind": "TFJob", "status": yaml.safe_load(yaml.safe_dump(status))})
    return seen


TFJOB_RUNS = {
    "success": (
        [
            "Created",
            {"active": 2},
            "Running",
            {"active": 1, "succeeded": 1},
            {"succeeded": 2},
            "Succeeded",
        ],
        "succeeded",
    ),
    "restarts, then fails": (
        ["Created", "Running", "Restarting", "Running", {"active": 1, "failed": 1}, "Failed"],
        "failed",
    ),
    "deadline before any pod ran": (["Created", "Failed"], "failed"),
    "fails while restarting": (["Created", "Restarting", "Failed"], "failed"),
    "fails with one worker done": (
        ["Created", "Running", {"succeeded": 1, "failed": 1}, "Failed"],
        "failed",
    ),
    "failed after succeeded": (["Created", "Running", "Succeeded", "Failed"], "failed"),
    "still running": (["Created", "Running", {"active": 1, "succeeded": 1}], "waiting"),
    "no status yet": ([{}], "waiting"),
}


@pytest.mark.parametrize("events, verdict", TFJOB_RUNS.values(), ids=TFJOB_RUNS.keys())
def test_a_tfjob_step_ends_as_the_tfjob_does(events: list, verdict: str) -> None:
    success, failure = conditions(resource_steps(Settings(image=IMAGE))["train-cnn"])
    history = run(*events)
    assert argo.judge(history[-1], success, failure) == verdict
    # Before its last event the step was never decided differently.
    for earlier in history[:-1]:
        assert argo.judge(earlier, success, failure) in ("waiting", verdict)


# The training operator v1.9.0's job condition types, pinned here independently of the
# code (pkg/apis/kubeflow.org/v1/common_types.go:135-159: JobCreated, JobRunning,
# JobRestarting, JobSucceeded, JobSuspended, JobFailed); the CRD's schema leaves
# status.conditions[].type a free string.
TRAINING_OPERATOR_V1_9_CONDITION_TYPES = (
    "Created",
    "Running",
    "Restarting",
    "Succeeded",
    "Suspended",
    "Failed",
)


def test_the_failure_condition_reaches_every_position_failed_can_hold() -> None:
    """Each condition type appears once, and nothing follows Failed: every history of
    the other types (in any order), then Failed, is judged failed."""
    success, failure = conditions(resource_steps(Settings(image=IMAGE))["train-cnn"])
    others = [t for t in TRAINING_OPERATOR_V1_9_CONDITION_TYPES if t != "Failed"]
    for n in range(len(others) + 1):
        for before in itertools.permutations(others, n):
            conds = [{"type": ctype, "status": "True"} for ctype in [*before, "Failed"]]
            job = {"kind": "TFJob", "status": {"conditions": conds}}
            assert argo.judge(job, success, failure) == "failed", before
    # No further than that: a seventh position is one Failed can never hold.
    padding = [{"type": "Other", "status": "True"}] * len(TRAINING_OPERATOR_V1_9_CONDITION_TYPES)
    beyond = {"kind": "TFJob", "status": {"conditions": [*padding, {"type": "Failed"}]}}
    assert argo.judge(beyond, success, failure) == "waiting"


# -- InferenceService: statuses as KServe writes them ----------------------------------


def isvc(target: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "Unknown"}]}
    if target is not None:
        status["modelStatus"] = {
            "transitionStatus": "InProgress",
            "states": {"targetModelState": target},
        }
    return {"kind": "InferenceService", "status": status}


@pytest.mark.parametrize(
    "target, verdict",
    [
        (None, "waiting"),
        ("Pending", "waiting"),
        ("Loading", "waiting"),
        ("Loaded", "succeeded"),  # KServe: only once Ready is True (PropagateModelStatus)
        ("FailedToLoad", "failed"),  # a model that cannot load, or an invalid spec
    ],
)
def test_the_serve_step_ends_as_the_service_does(target: str | None, verdict: str) -> None:
    success, failure = conditions(resource_steps(Settings(image=IMAGE))[wfm.STEP_SERVE])
    assert argo.judge(isvc(target), success, failure) == verdict


def test_the_serving_runtime_step_waits_for_nothing() -> None:
    runtime = resource_steps(Settings(image=IMAGE))[wfm.STEP_RUNTIME]
    assert runtime["action"] == "patch"
    assert "successCondition" not in runtime and "failureCondition" not in runtime
