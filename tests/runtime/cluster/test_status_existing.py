"""runtime/cluster/status.py on a cluster distml did not create: only this work dir's
TFJobs and InferenceService are reported as its own (its instance label and a uid it
recorded). Another work dir's objects are left out, or named as theirs when they hold
one of this work dir's names; a copy of this work dir's label is called a copy."""

from __future__ import annotations

import re

import pytest

from k8s.client.objects import ISVC_API, TFJOB_API
from k8s.manifests.names import COMMON_LABELS, INSTANCE_LABEL
from runtime.requests import DeployRequest, TrainRequest, UpRequest
from tests.runtime.cluster.test_existing_up import (
    NS,
    kube_system,
    node,
    operators_available,
    storage_class,
)
from tests.runtime.cluster.test_tenants import run

OTHER = "0other00"  # another work dir's instance id
TFJOB = (TFJOB_API, "TFJob", "train-cnn", NS)
ISVC = (ISVC_API, "InferenceService", "tf-mnist", NS)


def put(fake, ref, labels, uid=None):
    """An object as someone else makes it (the fake gives it a new uid, unless ``uid``)."""
    api, kind, name, ns = ref
    meta = {"name": name, "namespace": ns, "labels": labels, **({"uid": uid} if uid else {})}
    fake.put({"apiVersion": api, "kind": kind, "metadata": meta})


def status(fake, wd) -> str:
    lines: list[str] = []
    assert run(fake, wd, lines).status() == 0
    return "\n".join(lines)


def shared(fake):
    """A 1-node cluster with a default class, every operator found, kube-system's uid."""
    node(fake, "node-a")
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    operators_available(fake)
    kube_system(fake)
    return fake


def deploy(fake, wd) -> None:
    """`up`, `train` of `cnn` and `deploy` of `tf-mnist` on the shared cluster ``fake``."""
    assert run(fake, wd).up(UpRequest()) == 0
    assert run(fake, wd).train(TrainRequest(models=("cnn",), epochs=1, steps_per_epoch=1)) == 0
    assert run(fake, wd).deploy(DeployRequest()) == 0


@pytest.fixture
def cluster(fake):
    return shared(fake)


@pytest.fixture
def deployed(cluster, wd):
    """This work dir set up, trained `cnn` and deployed `tf-mnist`."""
    deploy(cluster, wd)


def test_this_work_dirs_own_tfjob_and_service_are_reported(deployed, cluster, wd):
    text = status(cluster, wd)
    assert re.search(r"TFJob train-cnn +Succeeded; workers succeeded 2", text)
    assert re.search(r"InferenceService tf-mnist +Ready, http://tf-mnist-ml-team", text)
    assert re.search(r"serving model +version 2: cnn", text)


def test_another_work_dirs_tfjob_and_service_are_not_reported_as_ours(cluster, wd):
    assert run(cluster, wd).up(UpRequest()) == 0
    theirs = {**COMMON_LABELS, INSTANCE_LABEL: OTHER}
    put(cluster, TFJOB, theirs)
    put(cluster, ISVC, theirs)
    for _ in range(2):
        cluster.clock.sleep(1)  # the controllers: Succeeded, Ready
    text = status(cluster, wd)
    assert "TFJob train-cnn" not in text  # not one of this work dir's names: not its business
    assert re.search(
        rf"InferenceService tf-mnist +not this work dir's \(another distml work dir's "
        rf"\(instance {OTHER}\)\)",
        text,
    )
    assert "Ready" not in text


def test_names_this_work_dir_recorded_held_by_another_are_named_as_theirs(deployed, cluster, wd):
    """Its TFJob and service deleted and made again by another work dir: one line each,
    saying whose, and nothing of the other's service (scaling, model card) as its own."""
    theirs = {**COMMON_LABELS, INSTANCE_LABEL: OTHER}
    for ref in (TFJOB, ISVC):
        cluster.remove(*ref)
        put(cluster, ref, theirs)
    cluster.clock.sleep(1)
    text = status(cluster, wd)
    whose = rf"not this work dir's \(another distml work dir's \(instance {OTHER}\)\)"
    assert re.search(r"TFJob train-cnn +" + whose, text)
    assert re.search(r"InferenceService tf-mnist +" + whose, text)
    assert "Succeeded" not in text and "Ready" not in text
    assert "scaling" not in text and "serving model" not in text


@pytest.mark.parametrize("setup", ["up", "deployed"], ids=["never made", "made again"])
def test_a_copy_of_this_work_dirs_label_is_not_reported_as_ours(cluster, wd, request, setup):
    """An object carrying this work dir's instance label under a uid it did not record
    (a teammate's `kubectl get -o yaml | kubectl apply`): a copy of the label."""
    if setup == "deployed":  # the names recorded, their objects replaced since
        request.getfixturevalue("deployed")
    else:
        assert run(cluster, wd).up(UpRequest()) == 0
    mine = {**COMMON_LABELS, INSTANCE_LABEL: wd.state().instance}
    for ref in (TFJOB, ISVC):
        cluster.remove(*ref)
        put(cluster, ref, mine, uid="copied-uid")
    cluster.clock.sleep(1)
    text = status(cluster, wd)
    copy = (
        rf"not this work dir's \(it carries this work dir's label {INSTANCE_LABEL}="
        rf"{wd.state().instance}, but its uid copied-uid is not one this work dir recorded: "
        r"a copy of the label\)"
    )
    assert re.search(r"TFJob train-cnn +" + copy, text)
    assert re.search(r"InferenceService tf-mnist +" + copy, text)
    assert "Succeeded" not in text and "Ready" not in text
