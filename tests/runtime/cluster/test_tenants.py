"""A shared cluster distml did not create: other teams' objects, a second distml work dir in
the same namespace, and a context whose name now points at another cluster. Played on the
fake client end to end (`up`, `train`, `down`): what is not this work dir's keeps its uid
and its every field, and every refusal comes before the first write."""

from __future__ import annotations

import copy

import pytest

from k8s.client.objects import ISVC_API, TFJOB_API
from k8s.manifests.names import INSTANCE_LABEL
from runtime.cluster import ClusterError
from runtime.requests import DownRequest, TrainRequest, UpRequest
from runtime.workdir import Workdir
from tests.runtime.cluster.test_existing_up import (
    NS,
    existing,
    kube_system,
    node,
    operators_available,
    results,
    storage_class,
)
from tests.support.cluster_kit import available, make_ctx

THEIRS = {"team": "other"}
OTHER_MANAGER = [{"manager": "kubectl-client-side-apply", "operation": "Update"}]


@pytest.fixture
def cluster(fake):
    """A 1-node cluster with a default class, every operator found, kube-system's uid."""
    node(fake, "node-a")
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    operators_available(fake)
    kube_system(fake)
    return fake


def other_teams(fake) -> None:
    """Another team's TFJob `train-cnn` and InferenceService `tf-mnist` in the namespace."""
    for api, kind, name in (
        (TFJOB_API, "TFJob", "train-cnn"),
        (ISVC_API, "InferenceService", "tf-mnist"),
    ):
        meta = {"name": name, "namespace": NS, "labels": dict(THEIRS)}
        fake.put(
            {"apiVersion": api, "kind": kind, "metadata": {**meta, "managedFields": OTHER_MANAGER}}
        )


def run(fake, wd, lines=None):
    lines = [] if lines is None else lines
    return existing(make_ctx(fake, results()), wd, fake, lines)


def snapshot(fake) -> dict:
    """Every object but its status (the fake's controllers write statuses, as real ones do)."""
    return {
        k: {f: copy.deepcopy(v) for f, v in o.items() if f != "status"}
        for k, o in fake.objects.items()
    }


def test_up_refuses_before_any_write_naming_each_owner_and_the_way_out(cluster, wd):
    other_teams(cluster)
    before = snapshot(cluster)
    with pytest.raises(ClusterError) as err:
        run(cluster, wd).up(UpRequest())
    message = str(err.value)
    assert "up refused before any write" in message
    assert f"TFJob {NS}/train-cnn: not distml's; labels team=other; written by kubectl" in message
    assert f"InferenceService {NS}/tf-mnist: not distml's" in message
    assert "INVOKE_CLUSTER_NAMESPACE=NAME" in message
    assert cluster.applied == [] and cluster.deleted == []
    assert snapshot(cluster) == before
    assert wd.state().context is None  # so this work dir's `down` has nothing to delete


def test_up_in_a_namespace_of_its_own_leaves_the_other_team_alone(cluster, tmp_path):
    other_teams(cluster)
    before = snapshot(cluster)
    wd = Workdir.at(tmp_path / "a")
    rt = existing(make_ctx(cluster, results()), wd, cluster, [], namespace="ml-a")
    assert rt.up(UpRequest()) == 0
    assert rt.train(TrainRequest(models=("cnn",), epochs=1, steps_per_epoch=1)) == 0
    assert rt.down(DownRequest()) == 0
    assert {k: v for k, v in snapshot(cluster).items() if k in before} == before


def test_a_second_work_dir_never_touches_the_firsts_objects(cluster, tmp_path):
    a, b = Workdir.at(tmp_path / "a"), Workdir.at(tmp_path / "b")
    assert run(cluster, a).up(UpRequest()) == 0
    assert run(cluster, a).train(TrainRequest(models=("cnn",), epochs=1, steps_per_epoch=1)) == 0
    firsts = snapshot(cluster)
    with pytest.raises(ClusterError, match=r"instance " + a.state().instance):
        run(cluster, b).up(UpRequest())
    deleted = len(cluster.deleted)
    assert run(cluster, b).down(DownRequest()) == 0  # as B's own error once said
    assert len(cluster.deleted) == deleted
    assert snapshot(cluster) == firsts
    # A's own down then removes A's objects and A's claim.
    assert run(cluster, a).down(DownRequest()) == 0
    left = [k for k, v in cluster.objects.items() if INSTANCE_LABEL in str(v)]
    assert left == [("v1", "Namespace", None, NS)]  # a namespace is left as it is


def test_train_refuses_to_replace_a_tfjob_made_after_up_by_someone_else(cluster, wd):
    assert run(cluster, wd).up(UpRequest()) == 0
    other_teams(cluster)  # created after distml's up: a race with the other team
    before = snapshot(cluster)
    with pytest.raises(ClusterError, match=f"TFJob {NS}/train-cnn: not distml's"):
        run(cluster, wd).train(TrainRequest(models=("cnn",), epochs=1, steps_per_epoch=1))
    assert (
        cluster.objects[(TFJOB_API, "TFJob", NS, "train-cnn")]
        == before[(TFJOB_API, "TFJob", NS, "train-cnn")]
    )


def test_writes_never_force_conflicts_on_a_cluster_distml_did_not_create(cluster, wd):
    assert run(cluster, wd).up(UpRequest()) == 0
    assert cluster.forced and not any(cluster.forced)
    assert all(
        o["metadata"]["labels"][INSTANCE_LABEL] == wd.state().instance for o in cluster.applied
    )


@pytest.mark.parametrize(
    "change",
    ["server", "uid"],
    ids=["the context names another API server", "the same URL, another cluster"],
)
def test_a_context_that_now_names_another_cluster_is_refused(cluster, wd, change):
    assert run(cluster, wd).up(UpRequest()) == 0
    if change == "server":
        cluster.server_url = "https://10.0.0.9:6443"
    else:
        cluster.obj("v1", "Namespace", "kube-system")["metadata"]["uid"] = "another-cluster"
    before = snapshot(cluster)
    for task in (
        lambda rt: rt.train(TrainRequest(models=("cnn",), epochs=1, steps_per_epoch=1)),
        lambda rt: rt.down(DownRequest()),
        lambda rt: rt.up(UpRequest()),
    ):
        with pytest.raises(ClusterError, match="now points at another cluster") as err:
            task(run(cluster, wd))
        assert "invoke down --forget" in str(err.value)
    assert snapshot(cluster) == before


def test_down_forget_clears_the_record_and_touches_no_cluster(cluster, wd):
    from runtime.cluster.down import forget

    assert run(cluster, wd).up(UpRequest()) == 0
    before, calls = snapshot(cluster), len(cluster.calls)
    lines: list[str] = []
    assert forget(wd, lines.append) == 0
    assert snapshot(cluster) == before
    assert len(cluster.calls) == calls
    state = wd.state()
    assert (state.context, state.cluster_server, state.runtime, state.up) == (
        None,
        None,
        None,
        False,
    )
    assert f"{INSTANCE_LABEL}={state.instance}" in lines[0]


def test_the_clusters_distml_makes_keep_forcing_conflicts(fake, wd):
    from runtime.cluster import ClusterRuntime
    from tests.support.cluster_kit import REPO

    wd.create()
    wd.update_state(instance="abcd1234")
    rt = ClusterRuntime(make_ctx(fake, {}), "kind", wd, REPO, kube=fake, out=print)
    theirs = {"name": "x", "namespace": NS, "labels": dict(THEIRS)}
    fake.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": theirs})
    rt.cx.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NS}}
    )
    assert fake.forced == [True]  # every object on a cluster distml made is distml's


def test_workflow_refuses_a_served_name_someone_took_after_up(cluster, wd):
    available(cluster, "argo", "workflow-controller")
    available(cluster, "argo", "argo-server")
    assert run(cluster, wd).up(UpRequest(with_argo=True)) == 0
    meta = {"name": "tf-mnist", "namespace": NS, "labels": THEIRS}
    cluster.put({"apiVersion": ISVC_API, "kind": "InferenceService", "metadata": meta})
    before = snapshot(cluster)
    from runtime.requests import WorkflowRequest

    with pytest.raises(ClusterError, match=r"InferenceService .*tf-mnist: not distml's"):
        run(cluster, wd).workflow(WorkflowRequest())
    assert snapshot(cluster) == before


def test_a_work_dir_set_up_by_an_older_distml_must_run_up_again(cluster, wd):
    assert run(cluster, wd).up(UpRequest()) == 0
    wd.update_state(cluster_server=None, cluster_uid=None)  # what an older distml wrote
    with pytest.raises(ClusterError, match=r"older distml.*`invoke up` again"):
        run(cluster, wd).train(TrainRequest(models=("cnn",), epochs=1, steps_per_epoch=1))


def test_each_work_dir_writes_as_its_own_field_manager(cluster, wd):
    assert run(cluster, wd).up(UpRequest()) == 0
    rt = run(cluster, wd)
    assert rt.cx.field_manager == f"distml-{wd.state().instance}"


def test_status_shows_this_work_dirs_tfjobs_not_the_other_teams(cluster, wd, capsys):
    assert run(cluster, wd).up(UpRequest()) == 0
    other_teams(cluster)
    lines: list[str] = []
    run(cluster, wd, lines).status()
    shown = capsys.readouterr().out + "\n".join(lines)
    assert "TFJob train-cnn" not in shown
