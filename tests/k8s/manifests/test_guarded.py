"""k8s.manifests.guarded: the JSON Patch writes distml's object over the one of its name only
when that one is this work dir's, all at once; anyone else's is left exactly as it was.
(Applied by tests/support/json_patch.py, the API server's all-or-nothing semantics.)"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from k8s import manifests as m
from k8s.manifests.guarded import NOT_APPLIED, guarded_patch, kubectl_resource, pointer
from k8s.providers.settings import Settings
from tests.support import json_patch
from tests.support.workflow_kit import IMAGE

ME, OTHER = "abcd1234", "ffff0000"
S = Settings(image=IMAGE, serving_mode="standard")


def mine(obj: dict[str, Any], instance: str | None = ME) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if instance:
        out["metadata"]["labels"][m.INSTANCE_LABEL] = instance
    return out


def live(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """``obj`` as the API server holds it: a uid, a status, ``meta`` over its metadata."""
    out = copy.deepcopy(obj)
    out["metadata"].update(uid="u-1", resourceVersion="7", **meta)
    out["status"] = {"observedGeneration": 1}
    return out


@pytest.mark.parametrize("build", [m.serving_runtime, m.inference_service, m.ingress_service])
def test_this_work_dir_s_object_becomes_exactly_what_distml_builds(build: Any) -> None:
    want = mine(build(S))
    old = live(want)
    old["spec"] = {"stale": True}
    old["metadata"]["labels"]["team.example/owner"] = "kept"
    old["metadata"]["annotations"] = {"distml/image": "distml:old", "gone": "1"}
    new = json_patch.apply(old, guarded_patch(want, ME))
    assert new["spec"] == want["spec"]
    assert new["metadata"]["labels"] == {**want["metadata"]["labels"], "team.example/owner": "kept"}
    if want["metadata"].get("annotations"):  # distml's whole map: one it dropped goes
        assert new["metadata"]["annotations"] == want["metadata"]["annotations"]
    assert (new["metadata"]["uid"], new["status"]) == ("u-1", old["status"])


@pytest.mark.parametrize(
    "labels",
    [
        {},  # made by hand: no labels at all
        {"app": "theirs"},  # labels, none of distml's
        {**m.COMMON_LABELS},  # distml's, but no instance: which work dir's is unknown
        {**m.COMMON_LABELS, m.INSTANCE_LABEL: OTHER},  # another work dir's
        {m.INSTANCE_LABEL: ME},  # the instance label copied, not distml's labels
    ],
    ids=["no labels", "theirs", "no instance", "another work dir", "instance only"],
)
def test_an_object_that_is_not_this_work_dir_s_is_left_untouched(labels: dict) -> None:
    want = mine(m.inference_service(S))
    theirs = live(m.inference_service(S), labels=labels, annotations={"x": "y"})
    theirs["spec"] = {"predictor": {"model": {"storageUri": "s3://theirs"}}}
    if not labels:
        del theirs["metadata"]["labels"]
    before = copy.deepcopy(theirs)
    with pytest.raises(json_patch.PatchRejected) as refused:
        json_patch.apply(theirs, guarded_patch(want, ME))
    assert str(refused.value) == NOT_APPLIED
    assert theirs == before


def test_the_tests_come_before_any_write() -> None:
    ops = guarded_patch(mine(m.inference_service(S)), ME)
    kinds = [op["op"] for op in ops]
    first_write = kinds.index("add")
    assert set(kinds[:first_write]) == {"test"} and "test" not in kinds[first_write:]
    tested = {op["path"]: op["value"] for op in ops if op["op"] == "test"}
    assert tested == {
        "/metadata/labels/app.kubernetes.io~1part-of": "distml",
        "/metadata/labels/app.kubernetes.io~1managed-by": "distml",
        "/metadata/labels/distml~1instance": ME,
    }
    assert ops[-1] == {"op": "replace", "path": "/spec", "value": m.inference_service(S)["spec"]}


def test_without_an_instance_distml_s_labels_are_required() -> None:
    """A work dir with no id (an old one, on a cluster distml made): any distml object
    of that name may be written, nobody else's."""
    ops = guarded_patch(m.serving_runtime(S), None)
    assert not [op for op in ops if m.INSTANCE_LABEL.replace("/", "~1") in op["path"]]
    other = live(mine(m.serving_runtime(S), OTHER))
    assert json_patch.apply(other, ops)["spec"] == m.serving_runtime(S)["spec"]
    with pytest.raises(json_patch.PatchRejected):
        json_patch.apply(live(m.serving_runtime(S), labels={}), ops)


def test_pointers_escape_tilde_and_slash() -> None:
    assert pointer("metadata", "labels", "a/b~c") == "/metadata/labels/a~1b~0c"


def test_kubectl_names_the_resource_unambiguously() -> None:
    assert kubectl_resource(m.inference_service(S)) == "inferenceservices.v1beta1.serving.kserve.io"
    assert kubectl_resource(m.serving_runtime(S)) == "servingruntimes.v1alpha1.serving.kserve.io"
    assert kubectl_resource(m.ingress_service(S)) == "services"
    with pytest.raises(ValueError, match="no known plural"):
        kubectl_resource({"apiVersion": "v1", "kind": "Endpoints"})
