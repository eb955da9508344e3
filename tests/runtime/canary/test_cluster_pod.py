"""runtime/canary/cluster_pod.py: the canary's own pod and Service for the time of a
canary, on a FakeKube whose kubelet makes the pod Ready: applied and stamped as this work
dir's, Ready before the block runs, deleted however the block ends (an error inside it
too); one left by a killed deploy replaced; someone else's of the same name never touched;
a pod that never gets Ready a clear error; and every way the pod can go down after it was
Ready told from a pod that is fine."""

from __future__ import annotations

import pytest

from k8s.client.ownership import stamp
from k8s.manifests import canary_pods
from k8s.manifests.names import INSTANCE_LABEL
from runtime.canary import cluster_pod
from runtime.canary.cluster_pod import Seen, trouble
from runtime.cluster.context import ClusterError
from runtime.workdir import Workdir
from tests.support.cluster_kit import controller, k3d_results, make_ctx, runtime, set_up
from tests.support.fakekube import FakeClock, FakeKube, conditions_status

NS = "kubeflow"


@pytest.fixture
def cx(tmp_path):
    fake = FakeKube(FakeClock())
    controller(fake)
    wd = Workdir.at(tmp_path / "wd")
    set_up(wd, fake)
    return runtime(make_ctx(fake, k3d_results(exists=True, imported=True)), wd, fake).cx


def kubelet(fake: FakeKube, *, ready: bool = True, room: bool = True) -> None:
    """The canary's pod, once applied, placed and Running (and Ready) at the next tick; or,
    without ``room``, left Pending as the scheduler leaves a pod no node can take."""

    def tick(_: float) -> None:
        pod = fake.obj("v1", "Pod", "tf-mnist-canary", NS)
        if pod is None or pod.get("status"):
            return
        if not room:
            why = "0/1 nodes are available: 1 Insufficient cpu."
            pod["status"] = conditions_status(("PodScheduled", "False"), phase="Pending")
            pod["status"]["conditions"][0].update(reason="Unschedulable", message=why)
            return
        pod["spec"]["nodeName"] = "node-1"
        status = conditions_status(("Ready", "True" if ready else "False"), phase="Running")
        status["containerStatuses"] = [{"name": "c", "restartCount": 0}]
        pod["status"] = status

    fake.script(tick)


def test_the_pod_is_ready_before_the_block_and_gone_after_however_it_ends(cx):
    fake, s = cx.kube, cx.settings()
    kubelet(fake)
    failed = pytest.raises(RuntimeError, match="the analysis failed")
    with failed, cluster_pod.running(cx, s) as seen:
        pod = fake.obj("v1", "Pod", canary_pods.name(s), NS)
        assert seen == Seen(pod["metadata"]["uid"], 0)
        assert pod["metadata"]["labels"][INSTANCE_LABEL] == cx.instance, "stamped as ours"
        assert fake.obj("v1", "Service", canary_pods.name(s), NS) is not None
        raise RuntimeError("the analysis failed")
    assert fake.obj("v1", "Pod", canary_pods.name(s), NS) is None
    assert fake.obj("v1", "Service", canary_pods.name(s), NS) is None


def test_one_left_by_a_killed_deploy_is_replaced(cx):
    fake, s = cx.kube, cx.settings()
    kubelet(fake)
    cx.apply(canary_pods.canary_pod(s))  # ours, from an earlier run
    old = fake.obj("v1", "Pod", canary_pods.name(s), NS)["metadata"]["uid"]
    with cluster_pod.running(cx, s) as seen:
        assert seen.uid != old


def test_on_a_shared_cluster_someone_elses_pod_of_that_name_is_never_touched(tmp_path):
    from tests.runtime.cluster.test_existing_up import CTX, existing, results

    fake = FakeKube(FakeClock())
    controller(fake)
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    wd.update_state(up=True, runtime="existing", context=CTX, instance="mine")
    cx = existing(make_ctx(fake, results()), wd, fake, []).cx
    s = cx.settings()
    for label in ("another-work-dir", "mine"):  # theirs; a copy of this work dir's label
        fake.put(stamp(canary_pods.canary_pod(s), label))
        with pytest.raises(ClusterError), cluster_pod.running(cx, s):
            pass
        pod = fake.obj("v1", "Pod", canary_pods.name(s), s.namespace)
        assert pod is not None and pod["metadata"]["labels"][INSTANCE_LABEL] == label


def test_a_pod_that_never_gets_ready_is_a_clear_error_and_is_deleted(cx, monkeypatch):
    fake, s = cx.kube, cx.settings()
    kubelet(fake, ready=False)
    monkeypatch.setattr(cluster_pod, "READY_TIMEOUT_S", 20.0)
    refused = pytest.raises(ClusterError, match=r"tf-mnist-canary is Running, not ready after 20 s")
    with refused, cluster_pod.running(cx, s):
        pass
    assert fake.obj("v1", "Pod", canary_pods.name(s), NS) is None


def test_no_node_with_room_is_said_within_seconds_with_what_to_do(cx):
    fake, s = cx.kube, cx.settings()
    kubelet(fake, room=False)
    started = fake.clock.monotonic()
    refused = pytest.raises(ClusterError, match=r"cannot be scheduled \(0/1 nodes are available: "
                            r"1 Insufficient cpu\.\): it asks what a predictor asks")  # fmt: skip
    with refused as err, cluster_pod.running(cx, s):
        pass
    assert "--max-replicas" in str(err.value)
    assert fake.clock.monotonic() - started <= cluster_pod.UNSCHEDULABLE_S + 5, "not 300 s"
    assert fake.obj("v1", "Pod", canary_pods.name(s), NS) is None, "deleted"


SEEN = Seen("uid-1", 2)


def pod(uid: str = "uid-1", restarts: int = 2, phase: str = "Running", last: dict | None = None):
    status = {"restartCount": restarts, "lastState": {"terminated": last} if last else {}}
    return {"metadata": {"uid": uid}, "status": {"phase": phase, "containerStatuses": [status]}}


@pytest.mark.parametrize(
    ("now", "says"),
    [
        (pod(), None),
        (pod(last={"reason": "Error", "exitCode": 1}), None),  # before it was Ready
        (None, "its pod is gone (deleted or evicted)"),
        (pod(uid="uid-2"), "its pod was replaced"),
        (
            pod(restarts=3, last={"reason": "OOMKilled", "exitCode": 137}),
            "its pod restarted 1 time(s) (OOMKilled, exit 137)",
        ),
        (pod(restarts=4), "its pod restarted 2 time(s)"),
        (pod(phase="Failed"), "its pod ended (Failed)"),
    ],
    ids=["fine", "old-restart", "gone", "replaced", "oom", "crash", "failed"],
)
def test_every_way_the_pod_goes_down_is_told_from_a_pod_that_is_fine(now, says):
    assert trouble(now, SEEN) == says
