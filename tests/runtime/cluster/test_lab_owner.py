"""runtime/cluster/lab_owner.py: a lab cluster (k3d, kind, minikube) belongs to the work dir
that made it. `up` records that work dir on the cluster and in its state; only it deletes
the cluster (`down`, `down --purge`), removes what it installed (`down --keep-cluster`) or
sets the cluster up again; another work dir's, or a fresh one's, `up` is refused and its
`down` keeps the cluster with everything in it, saying whose it is and how to delete it."""

from __future__ import annotations

import re

import pytest
from invoke import Result

from runtime.cluster import ClusterError, lab_owner
from runtime.requests import DeployRequest, DownRequest, TrainRequest, UpRequest
from runtime.workdir import Workdir
from tests.support.cluster_kit import (
    OK,
    commands,
    k3d_results,
    kind_results,
    make_ctx,
    runtime,
    set_up,
)
from tests.support.k8s_schemas import validate

CM = ("v1", "ConfigMap", "kube-system", "distml-cluster-owner")
PVC = ("v1", "PersistentVolumeClaim", "kubeflow", "strategy-volume")
EXISTS = {**k3d_results(exists=True, imported=True), re.compile(".*"): OK}


@pytest.fixture(autouse=True)
def host(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "laptop")


@pytest.fixture
def other(tmp_path) -> Workdir:
    """A second work dir (another checkout's, or a fresh `INVOKE_WORKDIR`)."""
    return Workdir.at(tmp_path / "other")


def test_up_records_the_work_dir_that_made_the_cluster_on_it_and_in_its_state(wd, fake):
    lines = []
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    runtime(c, wd, fake, lines=lines).up(UpRequest())
    record = fake.objects[CM]
    state = wd.state()
    assert state.made_cluster is True
    assert record["data"] == {
        "cluster": "dist-ml",
        "instance": state.instance,
        "workdir": str(wd.root.resolve()),
        "host": "laptop",
    }
    assert record["metadata"]["labels"]["distml/instance"] == state.instance
    assert validate(record) == []
    # Right after the cluster, before anything is set up in it.
    assert [o["kind"] for o in fake.applied][:2] == ["ConfigMap", "Namespace"]
    recorded = "cluster dist-ml: recorded as this work dir's (ConfigMap kube-system/" + CM[3] + ")"
    creating = "cluster dist-ml: creating (one node; the PVC is ReadWriteOnce)"
    assert lines.index(recorded) == lines.index(creating) + 1


def test_the_owners_up_again_reuses_its_cluster_and_its_down_deletes_it(wd, fake):
    set_up(wd, fake)
    lines = []
    assert runtime(make_ctx(fake, EXISTS), wd, fake, lines=lines).up(UpRequest()) == 0
    assert "cluster dist-ml: already exists, reused" in lines
    c = make_ctx(fake, EXISTS)
    assert runtime(c, wd, fake).down(DownRequest()) == 0
    assert commands(c) == ["k3d cluster list -o json", "k3d cluster delete dist-ml"]
    assert wd.state().made_cluster is False


def _deployed(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(TrainRequest(models=("cnn",)))
    runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest())


@pytest.mark.parametrize("first_up", [False, True], ids=["a fresh work dir", "a refused up's"])
@pytest.mark.parametrize("request_", [DownRequest(), DownRequest(purge=True),
                                      DownRequest(keep_cluster=True)],
                         ids=["down", "down --purge", "down --keep-cluster"])  # fmt: skip
def test_another_work_dirs_down_keeps_the_cluster_and_everything_in_it(
    wd, other, fake, first_up, request_
):
    _deployed(wd, fake)
    if first_up:
        with pytest.raises(ClusterError):
            runtime(make_ctx(fake, EXISTS), other, fake).up(UpRequest(with_argo=True))
    before, deleted = dict(fake.objects), len(fake.deleted)
    c = make_ctx(fake, EXISTS)
    lines = []
    assert runtime(c, other, fake, lines=lines).down(request_) == 0
    assert "k3d cluster delete dist-ml" not in commands(c)
    assert not any("kubectl" in x for x in commands(c))  # no Argo, no KEDA removed
    assert fake.deleted[deleted:] == [] and fake.objects.keys() == before.keys()
    assert lines[0] == (
        f"cluster dist-ml (k3d): it was made by the work dir {wd.root.resolve()} on laptop, "
        "not by this one; kept, with everything in it, and nothing deleted there. To delete "
        f"it, run `invoke down` from that work dir (INVOKE_WORKDIR={wd.root.resolve()}), or "
        "`k3d cluster delete dist-ml`"
    )
    # The owner's work dir still says its cluster is up, and its own `down` deletes it.
    assert wd.state().up and wd.state().deployed
    c = make_ctx(fake, EXISTS)
    runtime(c, wd, fake).down(DownRequest())
    assert "k3d cluster delete dist-ml" in commands(c)


def test_a_cluster_with_no_record_is_kept_with_the_command_to_delete_it(wd, fake):
    set_up(wd, fake)
    fake.remove(*CM[:2], CM[3], CM[2])  # made by an older distml, or by hand
    lines = []
    c = make_ctx(fake, EXISTS)
    assert runtime(c, wd, fake, lines=lines).down(DownRequest()) == 0
    assert commands(c) == ["k3d cluster list -o json"]
    assert lines[0] == (
        "cluster dist-ml (k3d): it has no record of the work dir that made it (an older "
        "distml made it, or it was made by hand); kept, with everything in it, and nothing "
        "deleted there. To delete it, `k3d cluster delete dist-ml`"
    )


def test_a_state_that_says_made_is_not_enough_without_the_record_naming_this_work_dir(
    wd, other, fake
):
    set_up(wd, fake)
    other.create()
    other.update_state(made_cluster=True, instance="copied0000")  # a stale or copied state
    c = make_ctx(fake, EXISTS)
    runtime(c, other, fake).down(DownRequest())
    assert commands(c) == ["k3d cluster list -o json"]


def test_a_second_work_dirs_up_is_refused_before_it_writes_anything(wd, other, fake):
    set_up(wd, fake)
    applied = len(fake.applied)
    c = make_ctx(fake, EXISTS)
    with pytest.raises(ClusterError) as info:
        runtime(c, other, fake).up(UpRequest())
    here = other.root.resolve()
    assert str(info.value) == (
        f"cluster dist-ml (k3d) was made by the work dir {wd.root.resolve()} on laptop, not "
        f"by this one ({here}); nothing was set up there: its namespace kubeflow and the "
        "objects in it are that cluster's maker's, and its `invoke down` deletes the "
        f"cluster. Either run from that work dir (INVOKE_WORKDIR={wd.root.resolve()} invoke "
        "up); or make a cluster of this work dir's own: INVOKE_CLUSTER_NAME=dist-ml-2 "
        "INVOKE_CLUSTER_INGRESS_PORT=18081 invoke up --runtime k3d; or use it as a cluster "
        "distml did not create, in a namespace of your own: invoke up --runtime existing "
        '--context k3d-dist-ml (docs/cluster.md, "Who owns a lab cluster")'
    )
    assert commands(c) == ["k3d cluster list -o json"]  # no install, no image import
    assert len(fake.applied) == applied
    assert other.state().made_cluster is False and not other.state().up


def test_an_unrecorded_cluster_is_refused_with_the_command_to_delete_it(wd, fake):
    fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    with pytest.raises(ClusterError, match=r"has no record of the work dir that made it") as e:
        runtime(make_ctx(fake, EXISTS), wd, fake).up(UpRequest())
    assert "if it is yours and holds nothing you need, `k3d cluster delete dist-ml` and " in str(
        e.value
    )


def test_the_work_dir_whose_volume_is_on_an_unrecorded_cluster_adopts_it(wd, other, fake):
    # Set up by a distml from before the record: its state says up, its volume is there.
    set_up(wd, fake)
    fake.remove(*CM[:2], CM[3], CM[2])
    wd.update_state(made_cluster=None)
    with pytest.raises(ClusterError):  # the volume is not the other work dir's
        runtime(make_ctx(fake, EXISTS), other, fake).up(UpRequest())
    lines = []
    assert runtime(make_ctx(fake, EXISTS), wd, fake, lines=lines).up(UpRequest()) == 0
    assert fake.objects[CM]["data"]["instance"] == wd.state().instance
    assert wd.state().made_cluster is True


def test_kind_is_covered_by_the_same_rule(wd, other, fake):
    c = make_ctx(fake, kind_results())
    runtime(c, wd, fake, provider="kind").up(UpRequest())
    assert fake.objects[CM]["data"]["instance"] == wd.state().instance
    lines = []
    c = make_ctx(fake, kind_results("dist-ml\n"))
    runtime(c, other, fake, provider="kind", lines=lines).down(DownRequest())
    assert "kind delete cluster --name dist-ml" not in commands(c)
    assert lines[0].endswith("or `kind delete cluster --name dist-ml`")


def test_minikube_clusters_live_in_their_work_dirs_home_and_follow_the_same_rule(
    wd, other, fake, monkeypatch
):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    mine = f"MINIKUBE_HOME={wd.root.resolve()}/minikube minikube"
    theirs = f"MINIKUBE_HOME={other.root.resolve()}/minikube minikube"
    results = {
        f"{mine} profile list -o json": OK,
        re.compile(r"^(MINIKUBE_HOME=|kubectl|docker|rm -f).*"): OK,
    }
    runtime(make_ctx(fake, results), wd, fake, provider="minikube").up(UpRequest())
    assert fake.objects[CM]["data"]["instance"] == wd.state().instance
    # Another work dir asks its own home, which holds no profile: nothing of this one's.
    listed = {f"{mine} profile list -o json": Result('{"valid": [{"Name": "dist-ml"}]}'),
              f"{theirs} profile list -o json": Result('{"valid": []}'),
              re.compile(".*"): OK}  # fmt: skip
    c = make_ctx(fake, listed)
    lines = []
    runtime(c, other, fake, provider="minikube", lines=lines).down(DownRequest())
    assert commands(c) == [f"{theirs} profile list -o json"]
    assert lines[0] == "cluster dist-ml: not found, nothing to delete"
    c = make_ctx(fake, listed)
    runtime(c, wd, fake, provider="minikube").down(DownRequest())
    assert commands(c)[-1] == f"{mine} delete -p dist-ml"


def test_status_from_another_work_dir_says_whose_the_cluster_is(wd, other, fake):
    _deployed(wd, fake)
    lines = []
    runtime(make_ctx(fake, EXISTS), other, fake, lines=lines).status()
    text = "\n".join(lines)
    assert re.search(
        r"cluster +dist-ml \(k3d, context k3d-dist-ml\): running, not this work dir's: made "
        rf"by the work dir {re.escape(str(wd.root.resolve()))} on laptop",
        text,
    )
    lines = []
    runtime(make_ctx(fake, EXISTS), wd, fake, lines=lines).status()
    (row,) = [line for line in lines if line.startswith("cluster ")]
    assert re.fullmatch(r"cluster +dist-ml \(k3d, context k3d-dist-ml\): running", row.strip())


def test_dry_down_from_another_work_dir_prints_no_deletion(wd, other, fake):
    set_up(wd, fake)
    c = make_ctx(fake, EXISTS, dry=True)
    lines = []
    runtime(c, other, fake, lines=lines).down(DownRequest())
    assert commands(c) == ["k3d cluster list -o json"]
    assert lines[0].startswith(
        "cluster dist-ml (k3d): this work dir did not make it (a real run also reads the "
        "cluster's record); kept"
    )


def test_the_record_names_no_one_without_an_instance():
    assert lab_owner.parse(None) is None
    assert lab_owner.parse({"data": {"workdir": "/x"}}) is None
    owner = lab_owner.parse({"data": {"instance": "ab12", "workdir": "/w", "host": "h"}})
    assert owner == lab_owner.Owner("ab12", "/w", "h")
    assert owner.describe() == "the work dir /w on h"
