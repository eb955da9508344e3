"""k8s.client.ownership: whose an object is, the message that refuses someone else's, the names
`up` checks, and the instance label put on what a work dir writes."""

from __future__ import annotations

import pytest

from k8s.client.ownership import new_instance, owned, owner, refusal, stamp, written_names
from k8s.manifests.names import COMMON_LABELS, INSTANCE_LABEL, is_dns_label
from k8s.providers.settings import Settings
from ml.contract import MODEL_TYPES

MINE = {**COMMON_LABELS, INSTANCE_LABEL: "abcd1234"}


def obj(labels, uid="u1", managers=()):
    meta = {"name": "x", "labels": labels, "uid": uid}
    if managers:
        meta["managedFields"] = [{"manager": m} for m in managers]
    return {"kind": "TFJob", "metadata": meta}


@pytest.mark.parametrize(
    "labels, uid, volume_uid, expected",
    [
        (MINE, "u1", None, True),
        (MINE, "u1", "u1", True),
        (MINE, "u2", "u1", False),  # the claim was made again, by someone else
        ({**COMMON_LABELS, INSTANCE_LABEL: "0other00"}, "u1", None, False),
        (dict(COMMON_LABELS), "u1", None, False),  # an older distml's: no instance
        ({INSTANCE_LABEL: "abcd1234"}, "u1", None, False),  # the id alone is not distml's
        ({"team": "other"}, "u1", None, False),
    ],
)
def test_owned(labels, uid, volume_uid, expected):
    assert owned(obj(labels, uid), "abcd1234", volume_uid) is expected


def test_nothing_is_owned_by_a_work_dir_without_an_instance():
    assert not owned(obj(MINE), None)
    assert not owned(obj(MINE), "")


def test_owner_says_whose_it_looks_to_be():
    other = {**COMMON_LABELS, INSTANCE_LABEL: "0other00"}
    assert owner(obj(other)) == "another distml work dir's (instance 0other00)"
    assert owner(obj(dict(COMMON_LABELS))).startswith("an older distml's")
    theirs = owner(obj({"team": "other", "app": "x"}, managers=("helm", "kubectl")))
    assert theirs == "not distml's; labels team=other, app=x; written by helm, kubectl"
    assert owner({"metadata": {}}) == "not distml's"


def test_refusal_lists_every_object_and_the_way_forward():
    text = refusal([obj({"team": "a"}), obj(dict(COMMON_LABELS))], "ml", when="up")
    assert text.count("TFJob ml/x:") == 2
    assert "INVOKE_CLUSTER_NAMESPACE=NAME" in text and text.startswith("up:")


def test_written_names_cover_every_model_and_argo_only_when_asked():
    names = written_names(Settings(image="i"), MODEL_TYPES)
    assert {n for _, k, n in names if k == "TFJob"} == {
        "train-cnn",
        "train-cnn-dropout",
        "train-cnn-batchnorm",
    }
    assert ("serving.kserve.io/v1beta1", "InferenceService", "tf-mnist") in names
    assert not [k for _, k, _ in names if k == "Workflow"]
    with_argo = written_names(Settings(image="i", with_argo=True), MODEL_TYPES)
    assert [n for _, k, n in with_argo if k == "Workflow"] == ["distml-pipeline"]


def test_stamp_adds_the_instance_without_changing_the_object():
    o = {"kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}}
    stamped = stamp(o, "abcd1234")
    assert stamped["metadata"]["labels"] == {"a": "b", INSTANCE_LABEL: "abcd1234"}
    assert o["metadata"]["labels"] == {"a": "b"}
    assert stamp(o, None) is o


def test_new_instances_are_label_values_and_differ():
    ids = {new_instance() for _ in range(50)}
    assert len(ids) == 50 and all(is_dns_label(i) for i in ids)
