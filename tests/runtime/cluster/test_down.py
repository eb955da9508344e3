"""runtime/cluster/down.py: `invoke down` deletes the cluster, or (--keep-cluster) only what
distml applied, waiting for the volume claim and Argo's namespace to go; --purge removes
built images; a failed or stuck deletion says what to look at and keeps the state."""

from __future__ import annotations

import re

import pytest
from invoke import Result

from common.errors import DistmlError
from k8s import manifests
from runtime.cluster import ClusterError
from runtime.requests import DownRequest, TrainRequest, UpRequest, WorkflowRequest
from tests.support.argo_kit import up_with_argo
from tests.support.cluster_kit import (
    ARGO_REMOVE,
    KC,
    OK,
    TAG,
    commands,
    k3d_results,
    make_ctx,
    runtime,
    set_up,
)


def test_down_deletes_the_cluster_and_purge_removes_built_images(wd, fake):
    set_up(wd, fake)
    wd.update_state(built_images=[TAG])
    c = make_ctx(fake, {**k3d_results(exists=True, imported=True), re.compile(".*"): OK})
    lines = []
    assert runtime(c, wd, fake, lines=lines).down(DownRequest(purge=True)) == 0
    assert commands(c) == [
        "k3d cluster list -o json",
        "k3d cluster delete dist-ml",
        f"docker image rm {TAG}",
    ]
    assert not wd.root.exists()


def test_down_keep_cluster_deletes_only_what_distml_applied(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(TrainRequest(models=("cnn",)))
    c = make_ctx(fake, {})
    lines = []
    assert runtime(c, wd, fake, lines=lines).down(DownRequest(keep_cluster=True)) == 0
    assert commands(c) == []  # no cluster delete
    deleted = {(k[1], k[3]) for k in fake.deleted}
    assert {("TFJob", "train-cnn"), ("Job", "distml-ingest")} <= deleted
    assert ("PersistentVolumeClaim", "strategy-volume") in deleted
    assert not any(kind == "Namespace" for kind, _ in deleted)  # the operator lives there
    assert ("Deployment", "training-operator") not in deleted


def test_down_keep_cluster_deletes_the_workflow_its_rbac_and_its_relabelled_cache(wd, fake):
    set_up(wd, fake)
    wd.update_state(argo=True)
    runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest())
    # In Argo's namespace, where its controller keeps caches (k8s.manifests.argo_rbac),
    # named for this deployment's namespace.
    cache_name = manifests.workflow_cache_name("kubeflow")
    writer = manifests.cache_writer_name("kubeflow")
    cache = fake.obj("v1", "ConfigMap", cache_name, manifests.ARGO_NAMESPACE)
    cache["metadata"]["labels"] = dict(manifests.CACHE_LABEL)  # what Argo's controller does
    c = make_ctx(fake, {re.compile(r"^kubectl .*"): OK})  # removing Argo itself, if asked
    runtime(c, wd, fake).down(DownRequest(keep_cluster=True))
    deleted = [(k[1], k[3]) for k in fake.deleted]
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        assert (kind, manifests.WORKFLOW_SA) in deleted
    assert ("Workflow", manifests.WORKFLOW_NAME) in deleted
    in_argo = {(k[1], k[3]) for k in fake.deleted if k[2] == manifests.ARGO_NAMESPACE}
    assert in_argo >= {("ConfigMap", cache_name), ("Role", writer), ("RoleBinding", writer)}
    assert deleted.index(("Workflow", manifests.WORKFLOW_NAME)) == 0  # its TFJobs go with it


PVC = ("v1", "PersistentVolumeClaim", "kubeflow", "strategy-volume")


def test_down_keep_cluster_waits_for_the_volume_claim_to_go(wd, fake, monkeypatch):
    set_up(wd, fake)
    deletes = []

    def finalizing(api, kind, name, namespace=None, *, uid=None):  # the claim goes 5 s later
        deletes.append((api, kind, namespace, name))
        fake.at(fake.clock.now + 5, lambda: fake.remove(api, kind, name, namespace))
        return True

    monkeypatch.setattr(fake, "delete", finalizing)
    lines = []
    started = fake.clock.now
    assert (
        runtime(make_ctx(fake, {}), wd, fake, lines=lines).down(DownRequest(keep_cluster=True)) == 0
    )
    assert PVC in deletes and PVC not in fake.objects
    assert fake.clock.now - started == 5
    assert "PersistentVolumeClaim strategy-volume (its data with it)" in lines[-2]


def test_a_claim_held_by_a_finalizer_fails_down_at_its_deadline_and_says_what_to_check(
    wd, fake, monkeypatch
):
    set_up(wd, fake)
    monkeypatch.setattr(fake, "delete", lambda *args, **kwargs: True)  # accepted, never gone
    started = fake.clock.now
    with pytest.raises(ClusterError) as info:
        runtime(make_ctx(fake, {}), wd, fake).down(DownRequest(keep_cluster=True))
    assert str(info.value) == (
        "PersistentVolumeClaim strategy-volume was not deleted within 300 s; check its "
        "finalizers: kubectl --context k3d-dist-ml -n kubeflow get persistentvolumeclaim "
        "strategy-volume -o yaml"
    )
    assert fake.clock.now - started == 300


ARGO_NS = ("v1", "Namespace", None, "argo")


KUBECTL_OK = {re.compile(r"^kubectl .*"): OK}


def test_down_keep_cluster_removes_argo_and_waits_for_its_namespace(wd, fake):
    up_with_argo(wd, fake)
    # The namespace terminates for 20 s (its objects are being deleted) before it goes.
    real_delete = fake.delete

    def terminating(api, kind, name, namespace=None, *, uid=None):
        if (kind, name) != ("Namespace", "argo"):
            return real_delete(api, kind, name, namespace)
        fake.deleted.append(ARGO_NS)
        start = fake.clock.now
        fake.at(start + 20, lambda: fake.remove("v1", "Namespace", "argo"))
        return True

    fake.delete = terminating
    c = make_ctx(fake, KUBECTL_OK)
    lines = []
    started = fake.clock.now
    assert runtime(c, wd, fake, lines=lines).down(DownRequest(keep_cluster=True)) == 0
    assert commands(c) == [ARGO_REMOVE]
    assert ARGO_NS in fake.deleted and fake.get("v1", "Namespace", "argo") is None
    assert fake.clock.now - started >= 20
    assert "namespace argo: terminating" in lines
    assert lines[-1] == (
        "Argo Workflows v4.1.2: removed (its CRDs, cluster roles and namespace argo)"
    )
    assert wd.state().argo is False
    # Removed for good: the next plain `up` does not bring it back.
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake).up(UpRequest()) == 0
    assert not any("argoproj" in x for x in commands(c))


def test_a_namespace_that_never_goes_fails_down_with_what_to_look_at(wd, fake):
    up_with_argo(wd, fake)
    real_delete = fake.delete
    fake.delete = lambda api, kind, name, namespace=None, uid=None: (  # stuck on a finalizer
        kind == "Namespace" or real_delete(api, kind, name, namespace)
    )
    with pytest.raises(DistmlError) as e:
        runtime(make_ctx(fake, KUBECTL_OK), wd, fake).down(DownRequest(keep_cluster=True))
    assert "timed out after 300 s waiting for namespace argo to be deleted" in str(e.value)
    assert f"{KC}get namespace argo -o yaml" in str(e.value)
    assert wd.state().argo is True  # the next `down --keep-cluster` tries again


def test_a_failed_kubectl_delete_says_so_and_keeps_the_state(wd, fake):
    up_with_argo(wd, fake)
    refused = Result(stderr="The connection to the server 127.0.0.1:6443 was refused", exited=1)
    c = make_ctx(fake, {re.compile(r".* delete .*argo.*"): refused})
    with pytest.raises(DistmlError, match=r"removing Argo Workflows v4\.1\.2: kubectl exited 1"):
        runtime(c, wd, fake).down(DownRequest(keep_cluster=True))
    assert ARGO_NS not in fake.deleted
    assert wd.state().argo is True


def test_down_without_keep_cluster_deletes_the_cluster_with_argo_in_it(wd, fake):
    up_with_argo(wd, fake)
    c = make_ctx(fake, {**k3d_results(exists=True, imported=True), re.compile(".*"): OK})
    assert runtime(c, wd, fake).down(DownRequest()) == 0
    assert commands(c) == ["k3d cluster list -o json", "k3d cluster delete dist-ml"]
    assert wd.state().argo is False


def test_dry_down_keep_cluster_prints_the_removal(wd, fake):
    up_with_argo(wd, fake)
    c = make_ctx(fake, KUBECTL_OK, dry=True)
    assert runtime(c, wd, fake).down(DownRequest(keep_cluster=True)) == 0
    assert ARGO_REMOVE in commands(c)
    assert wd.state().argo is True  # --dry touches nothing
