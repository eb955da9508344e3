"""`invoke down` on a cluster distml did not create: distml's labelled objects and its own
volume only, selected on this work dir's instance label; its claim by the uid `up`
recorded. Another team's and another work dir's objects stay; Argo's namespace is touched only when
this work dir used Argo; with no context recorded there is nothing to delete on a cluster.
And `train-all` on such a cluster when listing every namespace's pods is forbidden."""

from __future__ import annotations

import copy

import pytest

from k8s.client.kube import KubeError
from k8s.client.objects import TFJOB_API
from k8s.manifests.names import COMMON_LABELS, INSTANCE_LABEL, is_ours
from runtime.cluster.submit import jobs_that_fit
from runtime.requests import DownRequest
from tests.runtime.cluster.test_existing_up import CTX, NS, existing, results
from tests.support.cluster_kit import make_ctx

PVC = ("v1", "PersistentVolumeClaim", "strategy-volume", NS)


ME = "abcd1234"  # this work dir's instance id
MINE = {**COMMON_LABELS, INSTANCE_LABEL: ME}


def claim(fake, labels, uid="claim-uid"):
    meta = {"name": "strategy-volume", "namespace": NS, "labels": labels, "uid": uid}
    fake.put({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta})


@pytest.fixture
def rt(wd, fake):
    wd.create()
    wd.update_state(
        up=True,
        runtime="existing",
        context=CTX,
        volume_access="ReadWriteOnce",
        instance=ME,
        volume_uid="claim-uid",
    )
    lines: list[str] = []
    runtime = existing(make_ctx(fake, results()), wd, fake, lines)
    runtime.lines = lines
    return runtime


def test_down_keeps_a_claim_without_distmls_labels(rt, fake):
    claim(fake, {"team": "ml"})
    assert rt.down(DownRequest()) == 0
    assert fake.obj(*PVC) is not None
    assert any("not this work dir's (not distml's; labels team=ml), kept" in x for x in rt.lines)


@pytest.mark.parametrize(
    "labels, uid, whose",
    [
        ({**COMMON_LABELS, INSTANCE_LABEL: "0other00"}, "claim-uid", "instance 0other00"),
        (dict(COMMON_LABELS), "claim-uid", "an older distml's"),
        (MINE, "made-again-uid", "not this work dir's"),  # same labels, another claim
    ],
    ids=["another work dir's", "no instance label", "this label on another uid"],
)
def test_down_keeps_a_claim_this_work_dir_did_not_make(rt, fake, labels, uid, whose):
    claim(fake, labels, uid)
    assert rt.down(DownRequest()) == 0
    assert fake.obj(*PVC) is not None
    assert any(whose in line and "kept" in line for line in rt.lines)


def test_down_deletes_its_own_claim_and_clears_the_context(rt, fake, wd):
    claim(fake, MINE)
    rt.down(DownRequest())
    assert fake.obj(*PVC) is None
    state = wd.state()
    assert (state.context, state.up, state.runtime) == (None, False, "existing")
    assert (state.cluster_server, state.volume_uid, state.instance) == (None, None, ME)


def test_down_deletes_only_this_work_dirs_objects(rt, fake, wd):
    tfjob = {"apiVersion": TFJOB_API, "kind": "TFJob"}
    for name, labels in [("train-cnn", MINE), ("theirs", {"team": "other"})]:
        fake.put({**tfjob, "metadata": {"name": name, "namespace": NS, "labels": labels}})
    mine = fake.obj(TFJOB_API, "TFJob", "train-cnn", NS)["metadata"]["uid"]
    wd.update_state(object_uids=[[f"TFJob {NS}/train-cnn", mine]])  # as its apply recorded
    other = {**COMMON_LABELS, INSTANCE_LABEL: "0other00"}
    fake.put({**tfjob, "metadata": {"name": "b-cnn", "namespace": NS, "labels": other}})
    before = {k: copy.deepcopy(v) for k, v in fake.objects.items() if k[3] != "train-cnn"}
    rt.down(DownRequest())
    assert [k[3] for k in fake.deleted] == ["train-cnn"]
    assert {k: v for k, v in fake.objects.items() if k in before} == before


def test_down_leaves_an_object_that_only_copies_this_work_dirs_label(rt, fake, wd):
    # A teammate's `kubectl get -o yaml` of this work dir's TFJob, applied under another
    # name, or a same-name TFJob made again after this work dir's was deleted: the label
    # is this work dir's, the uid is not one it recorded.
    tfjob = {"apiVersion": TFJOB_API, "kind": "TFJob"}
    fake.put({**tfjob, "metadata": {"name": "train-cnn", "namespace": NS, "labels": MINE}})
    fake.put({**tfjob, "metadata": {"name": "copied", "namespace": NS, "labels": MINE}})
    # A predictor's pod: its ReplicaSet's, never deleted here and not reported as kept.
    owner = [{"kind": "ReplicaSet", "name": "rs", "uid": "rs-uid"}]
    pod = {"name": "p-1", "namespace": NS, "labels": MINE, "ownerReferences": owner}
    fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": pod})
    # A pod already being deleted (its grace period running): going, not kept.
    going = {
        "name": "p-2",
        "namespace": NS,
        "labels": MINE,
        "deletionTimestamp": "2026-12-05T08:00:00Z",
    }
    fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": going})
    wd.update_state(object_uids=[[f"TFJob {NS}/train-cnn", "uid-deleted-long-ago"]])
    before = copy.deepcopy(fake.objects)
    assert rt.down(DownRequest()) == 0
    assert fake.deleted == [] and fake.objects == before
    said = " ".join(rt.lines)
    assert "kept: TFJob train-cnn, TFJob copied:" in said and "a copy of the label" in said
    assert "Pod" not in said.split("kept:")[1].split(":")[0]


def test_a_tfjob_that_only_copies_the_label_is_never_replaced(rt, fake, wd):
    # Applied from an `invoke --dry` print: this work dir's label, a uid it never recorded.
    from runtime.cluster import ClusterError
    from runtime.cluster.submit import replace_tfjob

    tfjob = {"apiVersion": TFJOB_API, "kind": "TFJob"}
    fake.put({**tfjob, "metadata": {"name": "train-cnn", "namespace": NS, "labels": MINE}})
    before = copy.deepcopy(fake.objects)
    with pytest.raises(ClusterError, match=r"carries this work dir's label .* a copy of the"):
        replace_tfjob(rt.cx, "train-cnn")
    assert fake.deleted == [] and fake.objects == before
    uid = fake.obj(TFJOB_API, "TFJob", "train-cnn", NS)["metadata"]["uid"]
    wd.update_state(object_uids=[[f"TFJob {NS}/train-cnn", uid]])  # as its apply recorded
    replace_tfjob(rt.cx, "train-cnn")
    assert [k[3] for k in fake.deleted] == ["train-cnn"]


def test_down_deletes_what_an_object_of_this_work_dir_owns(rt, fake, wd):
    # A Workflow's TFJobs: made by Argo, owned by the Workflow this work dir applied.
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow"}
    fake.put({**wf, "metadata": {"name": "distml-pipeline", "namespace": NS, "labels": MINE}})
    wf_uid = fake.obj(wf["apiVersion"], "Workflow", "distml-pipeline", NS)["metadata"]["uid"]
    owned_by = [{"kind": "Workflow", "name": "distml-pipeline", "uid": wf_uid}]
    meta = {"name": "train-cnn", "namespace": NS, "labels": MINE, "ownerReferences": owned_by}
    fake.put({"apiVersion": TFJOB_API, "kind": "TFJob", "metadata": meta})
    wd.update_state(object_uids=[[f"Workflow {NS}/distml-pipeline", wf_uid]])
    rt.down(DownRequest())
    assert sorted(k[3] for k in fake.deleted) == ["distml-pipeline", "train-cnn"]


def test_down_on_a_work_dir_without_an_instance_deletes_nothing(rt, fake, wd):
    # Set up by an older distml: its objects cannot be told from another work dir's.
    wd.update_state(instance=None)
    claim(fake, dict(COMMON_LABELS))
    tfjob = {"apiVersion": TFJOB_API, "kind": "TFJob"}
    meta = {"name": "train-cnn", "namespace": NS, "labels": dict(COMMON_LABELS)}
    fake.put({**tfjob, "metadata": meta})
    rt.down(DownRequest())
    assert fake.deleted == []
    assert any("no instance id" in line for line in rt.lines)


def test_down_leaves_argos_namespace_alone_unless_this_work_dir_used_argo(rt, fake, monkeypatch):
    touched = []
    real = fake.delete

    def delete(api, kind, name, namespace=None, *, uid=None):
        touched.append(namespace)
        return real(api, kind, name, namespace)

    monkeypatch.setattr(fake, "delete", delete)
    rt.down(DownRequest())
    assert "argo" not in touched  # a user whose rights end at their namespace can run it


def test_a_second_down_has_nothing_to_delete_on_a_cluster(wd, fake):
    wd.create()
    wd.update_state(runtime="existing")  # a first down cleared the context
    lines: list[str] = []
    rt = existing(make_ctx(fake, results()), wd, fake, lines)
    rt.cx.provider.kube_context = ""  # what tasks.chooser gives `down` with none recorded
    assert rt.down(DownRequest()) == 0
    assert "nothing to delete there" in " ".join(lines)


def test_capacity_unknown_when_pods_cannot_be_listed_submits_every_job(rt, fake, monkeypatch):
    fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}})
    fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}})
    real = fake.list

    def listing(api, kind, namespace=None, label_selector=None):
        if kind == "Pod" and namespace is None:
            raise KubeError(
                "pods is forbidden: cannot list resource pods at the cluster scope", status=403
            )
        return real(api, kind, namespace, label_selector=label_selector)

    monkeypatch.setattr(fake, "list", listing)
    assert jobs_that_fit(rt.cx, rt.cx.settings(), 3) == 3
    assert any("room is unknown" in line for line in rt.lines)


def test_nodes_that_cannot_be_listed_submit_every_job_and_say_why(rt, fake):
    forbidden = KubeError("nodes is forbidden: User cannot list resource nodes", status=403)
    fake.fail("list", forbidden)
    assert jobs_that_fit(rt.cx, rt.cx.settings(), 3) == 3
    assert any("nodes cannot be listed" in line for line in rt.lines)
    fake.fail("list", KubeError("timeout", status=None))  # not a 403: no guess
    with pytest.raises(KubeError):
        jobs_that_fit(rt.cx, rt.cx.settings(), 3)


def test_is_ours_needs_every_common_label():
    assert is_ours({"metadata": {"labels": dict(COMMON_LABELS)}})
    assert not is_ours({"metadata": {"labels": {"app.kubernetes.io/part-of": "distml"}}})
    assert not is_ours({"metadata": {}})


def test_a_bound_readwriteonce_volume_plans_on_its_own_node_not_the_roomiest(rt, fake):
    def node(name, cpu):
        status = {"allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "110"}}
        fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status})

    node("roomy", "64")
    node("small", "600m")  # one 2-worker job of 250m each, not two
    s = rt.cx.settings()
    assert jobs_that_fit(rt.cx, s, 3) == 3  # not bound yet: the roomiest node can take all
    claim(fake, MINE)
    annotations = {"volume.kubernetes.io/selected-node": "small"}
    fake.obj(*PVC)["metadata"]["annotations"] = annotations
    assert jobs_that_fit(rt.cx, s, 3) == 1
    assert any("on the volume's node small (ReadWriteOnce)" in line for line in rt.lines)


@pytest.mark.parametrize("ours", [True, False], ids=["this work dir's", "not this work dir's"])
def test_down_deletes_argos_cache_of_its_namespace_only_with_its_own_role(rt, fake, wd, ours):
    from k8s import manifests

    wd.update_state(argo=True)
    argo = manifests.ARGO_NAMESPACE
    labels = MINE if ours else {"team": "other"}

    def put(kind, name, labels, api="rbac.authorization.k8s.io/v1"):
        meta = {"name": name, "namespace": argo, "labels": dict(labels)}
        fake.put({"apiVersion": api, "kind": kind, "metadata": meta})

    for ns, their_labels in ((NS, labels), ("elsewhere", {**COMMON_LABELS, INSTANCE_LABEL: "x"})):
        writer = manifests.cache_writer_name(ns)
        put("Role", writer, their_labels)
        put("RoleBinding", writer, their_labels)
        put("ConfigMap", manifests.workflow_cache_name(ns), manifests.CACHE_LABEL, api="v1")
    writer = manifests.cache_writer_name(NS)
    recorded = [  # as `invoke workflow`'s apply recorded them
        [
            f"{kind} {argo}/{writer}",
            fake.obj("rbac.authorization.k8s.io/v1", kind, writer, argo)["metadata"]["uid"],
        ]
        for kind in ("Role", "RoleBinding")
    ]
    wd.update_state(object_uids=recorded)
    rt.down(DownRequest())
    in_argo = sorted((k[1], k[3]) for k in fake.deleted if k[2] == argo)
    mine = manifests.cache_writer_name(NS)
    expected = [
        ("ConfigMap", manifests.workflow_cache_name(NS)),
        ("Role", mine),
        ("RoleBinding", mine),
    ]
    assert in_argo == (expected if ours else [])
