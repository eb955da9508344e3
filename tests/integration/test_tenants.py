"""The other tenants of the bring-your-own-cluster run (integration/tenants.py): their
objects are valid for the real CRDs, and the checks fail on exactly what distml must never
do to them (on canned kubectl output)."""

from __future__ import annotations

import copy
import json
import sys

import pytest

from integration import byo_cluster, tenants
from tests.support.k8s_schemas import validate

TFJOB, ISVC = tenants.other_team_objects()


def listed(*objs):
    return json.dumps({"items": list(objs)})


def as_stored(obj, **meta):
    out = copy.deepcopy(obj)
    out["metadata"].update(
        {"uid": f"uid-{obj['kind']}", "generation": 1, "resourceVersion": "10", **meta}
    )
    out["metadata"]["managedFields"] = [{"manager": "kubectl-client-side-apply"}]
    return out


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    """kubectl's answers, set by each test; the snapshot in a temporary work dir."""
    answers = {"objects": []}
    monkeypatch.setattr(byo_cluster, "workdir", lambda: tmp_path)
    monkeypatch.setattr(byo_cluster, "run", lambda cmd, stdin=None: listed(*answers["objects"]))
    return answers


@pytest.mark.parametrize("obj", [TFJOB, ISVC], ids=["TFJob", "InferenceService"])
def test_the_other_teams_objects_are_valid_and_take_distmls_names(obj):
    assert validate(obj) == []
    assert obj["metadata"]["labels"] == {"team": "other"}
    assert obj["metadata"]["namespace"] == byo_cluster.NAMESPACE
    assert obj["metadata"]["name"] in ("train-cnn", "tf-mnist")


def test_untouched_passes_when_only_status_and_resource_version_moved(cluster, capsys):
    cluster["objects"] = [as_stored(TFJOB), as_stored(ISVC)]
    tenants.snapshot()
    moved = as_stored(TFJOB, resourceVersion="99")
    moved["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    cluster["objects"] = [moved, as_stored(ISVC)]
    tenants.check_untouched()
    assert "resourceVersion 10 -> 99" in capsys.readouterr().out


@pytest.mark.parametrize(
    "change",
    ["gone", "new uid", "spec", "label", "written by distml"],
)
def test_untouched_fails_on_any_change_distml_could_make(cluster, change):
    cluster["objects"] = [as_stored(TFJOB), as_stored(ISVC)]
    tenants.snapshot()
    after = as_stored(TFJOB)
    if change == "new uid":  # deleted and made again
        after["metadata"]["uid"] = "uid-again"
    elif change == "spec":
        after["spec"]["runPolicy"]["cleanPodPolicy"] = "All"
    elif change == "label":
        after["metadata"]["labels"]["distml/instance"] = "abcd1234"
    elif change == "written by distml":
        after["metadata"]["managedFields"].append({"manager": "distml-abcd1234"})
    cluster["objects"] = [as_stored(ISVC)] + ([] if change == "gone" else [after])
    with pytest.raises(SystemExit, match="TFJob/train-cnn"):
        tenants.check_untouched()


def test_controller_made_objects_are_not_compared(cluster):
    pod = {"kind": "Pod", "metadata": {"name": "p", "ownerReferences": [{"kind": "Job"}]}}
    cluster["objects"] = [as_stored(TFJOB), pod]
    tenants.snapshot()
    cluster["objects"] = [as_stored(TFJOB)]
    tenants.check_untouched()


def test_expect_refusal_fails_when_the_command_succeeds_or_says_otherwise(tmp_path, monkeypatch):
    monkeypatch.setattr(byo_cluster, "workdir", lambda: tmp_path)
    ok = [sys.executable, "-c", "print('fine')"]
    with pytest.raises(SystemExit, match="expected a refusal"):
        tenants.expect_refusal("refused", ok)
    said = [sys.executable, "-c", "import sys; sys.exit('refused, as it must')"]
    tenants.expect_refusal("refused", said)
    with pytest.raises(SystemExit, match="expected a refusal"):
        tenants.expect_refusal("another text", said)


def test_main_with_bad_arguments_prints_usage_and_returns_2(capsys):
    assert tenants.main(["nope"]) == 2
    assert "usage" in capsys.readouterr().err
