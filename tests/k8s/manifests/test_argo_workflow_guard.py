"""k8s.manifests.argo_workflow's serving steps, run as Argo v4.1.2 runs them against a
stand-in API server: each ``<step>-create`` runs `kubectl create -f` (AlreadyExists fails
it: node Failed, and its ``continueOn: failed`` goes on), then ``<step>`` runs `kubectl
patch --type json --patch-file <manifest> <flags>` (workflow/executor/resource.go
getKubectlArguments) and the API server applies the JSON Patch all or nothing. Whatever
exists by then, the object is written only if it is this work dir's."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from k8s import manifests as m
from k8s.manifests import argo_workflow as wfm
from k8s.manifests.guarded import kubectl_resource
from k8s.providers.settings import Settings
from tests.support import json_patch
from tests.support.workflow_kit import IMAGE, build

ME = "abcd1234"
S = Settings(image=IMAGE, serving_mode="standard")
Key = tuple[str, str]  # (resource as kubectl names it, name)


def key_of(obj: dict[str, Any]) -> Key:
    return kubectl_resource(obj), obj["metadata"]["name"]


def run_serving_steps(wf: dict[str, Any], cluster: dict[Key, dict]) -> list[tuple[str, str]]:
    """Run the entrypoint's serving steps in order against ``cluster``: (step, phase)."""
    templates = {t["name"]: t for t in wf["spec"]["templates"]}
    out = []
    for (step,) in templates[wf["spec"]["entrypoint"]]["steps"][3:]:
        resource = templates[step["template"]]["resource"]
        if resource["action"] == "create":
            obj = yaml.safe_load(resource["manifest"])
            phase = "Failed" if key_of(obj) in cluster else "Succeeded"
            cluster.setdefault(key_of(obj), copy.deepcopy(obj))
        else:
            assert resource["action"] == "patch" and resource["mergeStrategy"] == "json"
            kind, name, flag, namespace = resource["flags"]
            assert (flag, namespace) == ("--namespace", S.namespace)
            try:
                patched = json_patch.apply(
                    cluster[kind, name], yaml.safe_load(resource["manifest"])
                )
            except json_patch.PatchRejected:
                phase = "Failed"
            else:
                cluster[kind, name], phase = patched, "Succeeded"
        out.append((step["name"], phase))
        if phase == "Failed" and not step.get("continueOn", {}).get("failed"):
            break  # the step group fails, and the workflow with it (steps.go)
    return out


def expected() -> dict[Key, dict]:
    objs = [m.serving_runtime(S), m.inference_service(S), m.ingress_service(S)]
    for obj in objs:
        obj["metadata"]["labels"][m.INSTANCE_LABEL] = ME
    return {key_of(o): o for o in objs}


def test_absent_objects_are_created_and_every_step_succeeds() -> None:
    cluster: dict[Key, dict] = {}
    phases = run_serving_steps(build(S, instance=ME), cluster)
    assert {p for _, p in phases} == {"Succeeded"}
    assert cluster == expected()


def test_this_work_dir_s_objects_are_updated_and_the_creates_go_on() -> None:
    cluster = copy.deepcopy(expected())
    for obj in cluster.values():
        obj["spec"] = {"old": True}
    phases = dict(run_serving_steps(build(S, instance=ME), cluster))
    assert phases[wfm.create_step(wfm.STEP_SERVE)] == "Failed"  # AlreadyExists: went on
    assert phases[wfm.STEP_INGRESS] == "Succeeded"
    assert cluster == expected()


@pytest.mark.parametrize("step", [wfm.STEP_RUNTIME, wfm.STEP_SERVE, wfm.STEP_INGRESS])
def test_someone_else_s_object_made_after_submit_is_refused_and_left_as_it_was(step: str) -> None:
    wf = build(S, instance=ME)
    theirs_key = next(k for k in expected() if k[1] in _names(wf, step))
    theirs = {"metadata": {"name": theirs_key[1], "labels": {"team": "b"}}, "spec": {"x": 1}}
    cluster = {theirs_key: copy.deepcopy(theirs)}
    phases = run_serving_steps(wf, cluster)
    assert phases[-1] == (step, "Failed"), "the workflow stops at the refused step"
    assert cluster[theirs_key] == theirs


def _names(wf: dict[str, Any], step: str) -> list[str]:
    (t,) = [t for t in wf["spec"]["templates"] if t["name"] == step]
    return [t["resource"]["flags"][1]]


def test_only_the_create_steps_go_on_after_failing() -> None:
    steps = build(S, instance=ME)["spec"]["templates"][0]["steps"]
    going_on = {s["name"] for (s,) in steps if s.get("continueOn")}
    assert going_on == {wfm.create_step(n) for n in wfm.serving_steps(S)}
    assert all(s["continueOn"] == {"failed": True} for (s,) in steps if s.get("continueOn"))
