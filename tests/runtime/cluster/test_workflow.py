"""runtime/cluster/workflow.py: `invoke workflow` on a cluster: submit applies exactly the
builder's objects, refuses without Argo, --watch prints a line per step change and judges
the end, --stop deletes only distml's running workflows, Ctrl-C leaves the workflow running
and says how to stop it, --dry prints the objects.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from k8s import manifests
from k8s.client.kube import KubeError
from k8s.client.objects import TFJOB_API
from k8s.client.ownership import stamp
from k8s.install import capacity
from k8s.providers.settings import Settings
from k8s.waits.argo_status import (
    MAIN_CONTAINER,
    NODE_ID_ANNOTATION,
    POD_WORKFLOW_LABEL,
    WORKFLOW_API,
)
from ml import contract
from runtime.cluster import ClusterError
from runtime.cluster.workflow import STOP_WAIT_S, WATCH_GRACE_S, _stamped
from runtime.requests import WorkflowRequest
from tests.support.cluster_kit import TAG, make_ctx, node, runtime, set_up
from tests.support.fakekube import FakeKube, conditions_status
from tests.support.k8s_schemas import validate

NS = "kubeflow"


def with_argo(wd, fake) -> None:
    set_up(wd, fake)
    wd.update_state(argo=True)  # what `up --with-argo` records


def expected_objects(rt, models=contract.MODEL_TYPES, parallelism=None):
    """What the builder makes for this deployment (the settings `up` left)."""
    s = rt.cx.settings(profile=contract.DEFAULT_PROFILE)
    key = manifests.data_cache_key(s, _claim_uid(rt, s))
    objs = manifests.workflow_objects(
        s, models=models, cache_key=key, parallelism=parallelism, instance=rt.cx.instance
    )
    return [stamped(o, rt.cx.instance) for o in objs]


def stamped(obj, instance):
    """``obj`` as `invoke workflow` applies it: its instance label on it and, for the
    Workflow, on every object its steps create."""
    obj = stamp(obj, instance)
    return _stamped(obj, instance) if obj["kind"] == "Workflow" else obj


def _claim_uid(rt, s) -> str:
    """The volume claim's uid, as `invoke workflow` reads it ("" with no claim)."""
    claim = rt.cx.get("v1", "PersistentVolumeClaim", s.volume) or {}
    return claim.get("metadata", {}).get("uid", "")


def workflow_name(rt) -> str:
    return next(o for o in expected_objects(rt) if o["kind"] == "Workflow")["metadata"]["name"]


def submitted(fake) -> dict[str, Any]:
    return next(o for o in fake.applied if o["kind"] == "Workflow")


def slow_delete(fake: FakeKube, kind: str, gone_after: float | None) -> None:
    """Deleting a ``kind`` marks it (deletionTimestamp) as the API server does while
    dependents and finalizers hold it; it goes ``gone_after`` seconds later (None: never)."""
    delete = fake.delete

    def marking(
        api_version: str, k: str, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> bool:
        if k != kind:
            return delete(api_version, k, name, namespace)
        obj = fake.obj(api_version, k, name, namespace)
        if obj is None:
            return False
        obj["metadata"].setdefault("deletionTimestamp", fake.clock.timestamp())
        if gone_after is not None:
            fake.at(fake.clock.now + gone_after, lambda: delete(api_version, k, name, namespace))
        return True

    fake.delete = marking


def step_node(
    node_id: str, name: str, phase: str, started: int, type: str = "Pod", **extra: Any
) -> dict[str, Any]:
    """A step's node as Argo v4.1.2 writes it (``type``: Retry for a template with a
    retryStrategy, see tests/test_k8s_workflows.py)."""
    return {
        "id": node_id,
        "name": f"distml-pipeline[0].{name}",
        "displayName": name,
        "type": type,
        "phase": phase,
        "boundaryID": "distml-pipeline",
        "startedAt": f"2026-01-01T12:00:{started:02d}Z",
        **extra,
    }


def argo(fake, statuses: list[dict[str, Any]]) -> None:
    """Plays Argo's controller: once the Workflow exists, one status per fake-clock tick.
    Each status must be one the Workflow CRD's status schema accepts."""
    for s in statuses:
        wf = {"apiVersion": WORKFLOW_API, "kind": "Workflow", "metadata": {"name": "w"}}
        assert validate({**wf, "spec": {"entrypoint": "pipeline"}, "status": s}) == []
    step = 0

    def tick(_t: float) -> None:
        nonlocal step
        for (api, kind, ns, name), _obj in list(fake.objects.items()):
            if kind == "Workflow":
                fake.set_status(api, kind, ns, name, statuses[min(step, len(statuses) - 1)])
                step += 1

    fake.script(tick)


# ingest: retryStrategy + memoize, so a Retry node; a cache hit is that node, no attempt.
MEMO = {"hit": True, "key": "k", "cacheName": manifests.WORKFLOW_CACHE}
INGEST_CACHED = step_node("w-1", "ingest", "Succeeded", 0, type="Retry", memoizationStatus=MEMO)
TRAIN_RUNNING = step_node("w-2", "train-cnn", "Running", 1)
TRAIN_DONE = step_node("w-2", "train-cnn", "Succeeded", 1)
SELECT_FAILED = step_node("w-3", "select", "Failed", 2, message="Error (exit code 1)")


def status(phase: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"phase": phase, "nodes": {n["id"]: n for n in nodes}}


def test_submit_applies_exactly_the_builders_objects_and_says_how_to_follow(wd, fake):
    with_argo(wd, fake)
    fake.applied.clear()
    slept = len(fake.clock.sleeps)
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.workflow(WorkflowRequest(models=("cnn", "cnn_dropout"))) == 0
    assert fake.applied == expected_objects(rt, models=("cnn", "cnn_dropout"))
    name = submitted(fake)["metadata"]["name"]
    text = "\n".join(lines)
    assert f"Workflow {name}: submitted in namespace {NS}" in text
    assert f"`kubectl --context k3d-dist-ml -n {NS} delete workflow {name}`" in text
    assert "`invoke workflow --stop`" in text
    assert len(fake.clock.sleeps) == slept  # without --watch nothing is waited for


def test_the_submitted_cache_key_is_the_builders_key_of_the_image_and_the_checksums(wd, fake):
    with_argo(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest())
    (param,) = submitted(fake)["spec"]["arguments"]["parameters"]
    claim = fake.obj("v1", "PersistentVolumeClaim", "strategy-volume", "kubeflow")
    volume = f"kubeflow/strategy-volume@{claim['metadata']['uid']}"
    assert param["value"] == manifests.memo_key(TAG, contract.RAW_SHA256, volume=volume)


def test_a_claim_made_again_gets_a_new_cache_key(wd, fake):
    """down --keep-cluster deletes the claim; up makes an empty one: Argo's shared cache
    must not skip ingesting into it."""
    with_argo(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest())
    (first,) = submitted(fake)["spec"]["arguments"]["parameters"]
    claim = fake.obj("v1", "PersistentVolumeClaim", "strategy-volume", "kubeflow")
    claim["metadata"]["uid"] = "uid-of-the-new-claim"
    s = runtime(make_ctx(fake, {}), wd, fake).cx.settings()
    assert manifests.data_cache_key(s, "uid-of-the-new-claim") != first["value"]


def test_the_flags_reach_the_submitted_workflow(wd, fake):
    with_argo(wd, fake)
    fake.applied.clear()
    rt = runtime(make_ctx(fake, {}), wd, fake)
    request = WorkflowRequest(models=("cnn",), min_accuracy=0.85, cache_max_age="30m")
    assert rt.workflow(request) == 0
    s = rt.cx.settings(profile=contract.DEFAULT_PROFILE)
    expected = manifests.workflow_objects(
        s,
        models=("cnn",),
        cache_key=manifests.data_cache_key(s, _claim_uid(rt, s)),
        cache_max_age="30m",
        min_accuracy=0.85,
        instance=rt.cx.instance,
    )
    assert fake.applied == [stamped(o, rt.cx.instance) for o in expected]
    templates = {t["name"]: t for t in submitted(fake)["spec"]["templates"]}
    assert any(t.get("memoize", {}).get("maxAge") == "30m" for t in templates.values())
    commands = [t["container"]["command"] for t in templates.values() if "container" in t]
    assert any("--min-accuracy" in c and "0.85" in c for c in commands)


def test_submit_refuses_without_argo_and_applies_nothing(wd, fake):
    set_up(wd, fake)
    fake.applied.clear()
    with pytest.raises(ClusterError, match=r"run `invoke up --runtime k3d --with-argo` first"):
        runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest())
    assert fake.applied == []


def test_submit_refuses_before_up(wd, fake):
    with pytest.raises(ClusterError, match=r"run `invoke up --runtime k3d` first"):
        runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest())


def test_watch_prints_a_line_per_step_change_and_exits_0_on_success(wd, fake):
    with_argo(wd, fake)
    argo(
        fake,
        [
            status("Running", INGEST_CACHED),
            status("Running", INGEST_CACHED, TRAIN_RUNNING),
            status("Running", INGEST_CACHED, TRAIN_RUNNING),
            status("Running", INGEST_CACHED, TRAIN_RUNNING),
            status("Succeeded", INGEST_CACHED, TRAIN_DONE),
        ],
    )
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.workflow(WorkflowRequest(watch=True)) == 0
    steps = [line for line in lines if line.startswith("[")]
    assert [line.split("] ", 1)[1].split()[:2] for line in steps] == [
        ["ingest", "Succeeded"],
        ["train-cnn", "Running"],
        ["train-cnn", "Succeeded"],
    ]
    assert steps[0].endswith("Succeeded (from the cache, not run)")
    assert steps[0] == f"[{2:6.0f}s] {'ingest':<26} Succeeded (from the cache, not run)"
    name = submitted(fake)["metadata"]["name"]
    assert any(line.startswith(f"Workflow {name}: Succeeded in ") for line in lines)


def test_when_the_watch_ends_what_the_serving_steps_wrote_is_recorded_by_uid(wd, fake):
    with_argo(wd, fake)
    argo(fake, [status("Failed", INGEST_CACHED, TRAIN_DONE)])
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=[])
    mine = stamp(manifests.serving_runtime(rt.cx.settings()), rt.cx.instance)
    fake.put(copy.deepcopy(mine))
    theirs = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": rt.cx.settings().service, "namespace": NS, "labels": {"team": "b"}},
        "spec": {},
    }
    fake.put(theirs)
    assert rt.workflow(WorkflowRequest(watch=True)) == 1
    uids = dict(wd.state().object_uids)
    runtime_uid = fake.obj(mine["apiVersion"], "ServingRuntime", mine["metadata"]["name"], NS)
    assert (
        uids[f"ServingRuntime {NS}/{mine['metadata']['name']}"] == (runtime_uid["metadata"]["uid"])
    )
    assert not any(k.startswith("InferenceService") for k in uids)  # not this work dir's


def ingest_attempts(wrapper: str, *attempts: str, message: str = "") -> list[dict[str, Any]]:
    """The memoized ingest on a cache miss: its Retry node and its attempts "ingest(N)"."""
    ids = [f"w-1-{i}" for i in range(len(attempts))]
    miss = {**MEMO, "hit": False}
    extra: dict[str, Any] = {"message": message} if message else {}
    node = step_node("w-1", "ingest", wrapper, 0, type="Retry", memoizationStatus=miss, **extra)
    node["children"] = ids
    return [
        node,
        *(
            step_node(ids[i], f"ingest({i})", p, i * 20, nodeFlag={"retried": True})
            for i, p in enumerate(attempts)
        ),
    ]


def test_watch_shows_a_retried_step_as_one_row_with_its_retries(wd, fake):
    with_argo(wd, fake)
    argo(
        fake,
        [
            status("Running", *ingest_attempts("Pending", "Running")),
            status(
                "Running", *ingest_attempts("Pending", "Failed", message="Backoff for 10 seconds")
            ),
            status("Running", *ingest_attempts("Pending", "Failed", "Running")),
            status("Succeeded", *ingest_attempts("Succeeded", "Failed", "Succeeded")),
        ],
    )
    lines: list[str] = []
    assert (
        runtime(make_ctx(fake, {}), wd, fake, lines=lines).workflow(WorkflowRequest(watch=True))
        == 0
    )
    assert [line.split("] ", 1)[1] for line in lines if line.startswith("[")] == [
        f"{'ingest':<26} Running",
        f"{'ingest':<26} Pending: Backoff for 10 seconds",
        f"{'ingest':<26} Running (retry 1)",
        f"{'ingest':<26} Succeeded (retry 1)",
    ]


def test_watch_exits_1_with_the_failing_steps_message_and_log_tail(wd, fake):
    with_argo(wd, fake)
    argo(fake, [status("Running", INGEST_CACHED), status("Failed", INGEST_CACHED, SELECT_FAILED)])
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    name = workflow_name(rt)
    pod = fake.add_pod(
        NS,
        f"{name}-select-1",
        {POD_WORKFLOW_LABEL: name},
        phase="Failed",
        container=MAIN_CONTAINER,
        exit_code=1,
    )
    fake.obj("v1", "Pod", pod["metadata"]["name"], NS)["metadata"]["annotations"] = {
        NODE_ID_ANNOTATION: "w-3"
    }
    fake.set_log(pod["metadata"]["name"], "selection: best accuracy 0.41 < 0.80; not publishing")
    assert rt.workflow(WorkflowRequest(watch=True)) == 1
    text = "\n".join(lines)
    assert f"Workflow {name}: Failed after " in text
    assert "step select: Failed: Error (exit code 1)" in text
    assert "not publishing" in text
    assert lines[-1].startswith("next: fix the cause above, then `invoke workflow --watch`")


def test_watch_waits_for_the_workflows_own_deadline(wd, fake):
    with_argo(wd, fake)
    argo(fake, [status("Running", TRAIN_RUNNING)])
    with pytest.raises(ClusterError, match="the workflow did not finish: timed out"):
        runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest(watch=True))
    deadline = submitted(fake)["spec"]["activeDeadlineSeconds"]
    assert fake.clock.now == pytest.approx(deadline + WATCH_GRACE_S, abs=5)


def test_ctrl_c_leaves_the_workflow_running_and_says_how_to_stop_it(wd, fake):
    with_argo(wd, fake)
    argo(fake, [status("Running", TRAIN_RUNNING)])

    @fake.script
    def ctrl_c(now: float) -> None:  # pressed while the watch sleeps between polls
        if now >= 10:
            raise KeyboardInterrupt

    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    name = workflow_name(rt)
    assert rt.workflow(WorkflowRequest(watch=True)) == 130
    assert lines[-1] == (
        f"\ninterrupted: Workflow {name} keeps running in the cluster; stop it with "
        f"`kubectl --context k3d-dist-ml -n {NS} delete workflow {name}` or "
        "`invoke workflow --stop`"
    )
    assert not [k for k in fake.deleted if k[1] == "Workflow"]
    assert fake.obj(WORKFLOW_API, "Workflow", name, NS) is not None


def test_resubmitting_replaces_a_finished_run_and_refuses_a_running_one(wd, fake):
    with_argo(wd, fake)
    rt = runtime(make_ctx(fake, {}), wd, fake)
    assert rt.workflow(WorkflowRequest()) == 0
    name = submitted(fake)["metadata"]["name"]
    fake.set_status(WORKFLOW_API, "Workflow", NS, name, {"phase": "Running"})
    with pytest.raises(ClusterError, match=rf"Workflow {name} is still running.*--stop"):
        rt.workflow(WorkflowRequest())
    fake.set_status(WORKFLOW_API, "Workflow", NS, name, {"phase": "Succeeded"})
    lines: list[str] = []
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).workflow(WorkflowRequest()) == 0
    assert (WORKFLOW_API, "Workflow", NS, name) in fake.deleted
    assert f"Workflow {name}: replacing the succeeded run" in lines


def test_stop_deletes_only_distmls_running_workflows(wd, fake):
    set_up(wd, fake)
    ours = manifests.labels(**{manifests.INSTANCE_LABEL: wd.state().instance})
    for name, labels, phase in [
        ("distml-a", ours, "Running"),
        ("distml-b", ours, "Succeeded"),
        ("distml-c", ours, None),  # not picked up by the controller yet
        ("someone-else", {"app": "x"}, "Running"),
        # another work dir's, in the same namespace
        ("distml-other", manifests.labels(**{manifests.INSTANCE_LABEL: "0other00"}), "Running"),
    ]:
        wf = {
            "apiVersion": WORKFLOW_API,
            "kind": "Workflow",
            "metadata": {"name": name, "namespace": NS, "labels": copy.deepcopy(labels)},
        }
        if phase:
            wf["status"] = {"phase": phase}
        fake.put(wf)
    lines: list[str] = []
    assert (
        runtime(make_ctx(fake, {}), wd, fake, lines=lines).workflow(WorkflowRequest(stop=True)) == 0
    )
    assert [k[3] for k in fake.deleted if k[1] == "Workflow"] == ["distml-a", "distml-c"]
    assert "stopped Workflow distml-a (running): deleted, its pods and TFJobs with it" in lines
    assert "stopped Workflow distml-c (pending): deleted, its pods and TFJobs with it" in lines
    lines.clear()
    runtime(make_ctx(fake, {}), wd, fake, lines=lines).workflow(WorkflowRequest(stop=True))
    assert lines == [f"no distml workflow is running in {NS}; nothing to stop"]


def test_dry_run_prints_every_object_and_applies_nothing(wd, fake):
    lines: list[str] = []
    from runtime.cluster import ClusterRuntime
    from tests.support.cluster_kit import REPO

    c = make_ctx(fake, {}, dry=True)
    rt = ClusterRuntime(c, "k3d", wd, REPO, out=lines.append, clock=fake.clock)
    assert rt.workflow(WorkflowRequest(watch=True)) == 0
    assert fake.applied == []
    text = "\n".join(lines)
    for obj in expected_objects(rt):
        where = obj["metadata"]["namespace"]  # the cache and its Role: Argo's namespace
        assert f"would apply {obj['kind']} {where}/{obj['metadata']['name']}" in text
    assert "kind: Workflow" in text


def tfjob_left(fake, model: str, state: str | None) -> str:
    """A TFJob train-all left behind (same name as the workflow's step creates)."""
    name = manifests.tfjob_name(model)
    job = {"apiVersion": TFJOB_API, "kind": "TFJob", "metadata": {"name": name, "namespace": NS}}
    if state:
        job["status"] = conditions_status(("Created", "True"), (state, "True"))
    fake.put(job)
    return name


def test_tfjobs_left_by_train_all_go_and_are_gone_before_the_workflow_is_submitted(wd, fake):
    with_argo(wd, fake)
    done = tfjob_left(fake, "cnn", "Succeeded")
    running = tfjob_left(fake, "cnn_dropout", "Running")
    other = tfjob_left(fake, "cnn_batchnorm", "Failed")  # not requested: stays
    slow_delete(fake, "TFJob", gone_after=7)
    fake.applied.clear()
    start = len(fake.calls)
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.workflow(WorkflowRequest(models=("cnn", "cnn_dropout"))) == 0
    assert f"TFJob {done}: replacing the succeeded job" in lines
    assert (
        f"TFJob {running}: replacing the running job (its workers save the step they "
        "reached; resumed there)" in lines
    )
    assert fake.obj(TFJOB_API, "TFJob", done, NS) is None
    assert fake.obj(TFJOB_API, "TFJob", running, NS) is None
    assert fake.obj(TFJOB_API, "TFJob", other, NS) is not None
    # Each was waited for until gone (7 s apiece), and only then was anything applied.
    assert fake.clock.now >= 14
    assert lines.index(
        f"TFJob {running}: replacing the running job (its workers save the "
        "step they reached; resumed there)"
    ) < lines.index(f"Workflow {workflow_name(rt)}: submitted in namespace {NS}")
    calls = fake.calls[start:]
    first_apply = next(i for i, (m, _) in enumerate(calls) if m == "apply")
    gone = [i for i, (m, a) in enumerate(calls) if m == "delete" and a[1] == "TFJob"]
    assert len(gone) == 2 and max(gone) < first_apply
    assert fake.applied == expected_objects(rt, models=("cnn", "cnn_dropout"))


def test_a_tfjob_that_will_not_go_stops_the_submission(wd, fake):
    with_argo(wd, fake)
    name = tfjob_left(fake, "cnn", "Running")
    slow_delete(fake, "TFJob", gone_after=None)
    fake.applied.clear()
    with pytest.raises(ClusterError, match=rf"TFJob {name} was not deleted within .*finalizers"):
        runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest(models=("cnn",)))
    assert fake.applied == []


def test_a_small_node_runs_the_tfjob_steps_in_waves_and_says_so(wd, fake):
    with_argo(wd, fake)
    s = Settings(image=TAG, provider="k3d", serving_mode="knative")
    fake.put(node(capacity.requirement(s, 2)))  # room for two jobs' workers, not three
    fake.applied.clear()
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.workflow(WorkflowRequest(models=contract.MODEL_TYPES)) == 0
    said = [x for x in lines if x.startswith("the node offers pods")]
    assert len(said) == 1 and said[0].endswith(
        "3 TFJobs at once need "
        + str(capacity.requirement(s, 3))
        + " of requests: running 2 at a time"
    )
    assert fake.applied == expected_objects(rt, parallelism=2)
    assert fake.applied != expected_objects(rt)


def test_a_node_that_holds_every_tfjob_runs_them_all_at_once(wd, fake):
    with_argo(wd, fake)
    fake.put(node(capacity.DOCUMENTED_NODE))
    fake.applied.clear()
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.workflow(WorkflowRequest(models=contract.MODEL_TYPES)) == 0
    assert not [x for x in lines if x.startswith("the node offers pods")]
    assert fake.applied == expected_objects(rt, parallelism=None)


def stopped_workflow(wd, fake) -> str:
    """A workflow `invoke workflow --stop` just deleted: still there, being deleted."""
    with_argo(wd, fake)
    name = manifests.WORKFLOW_NAME
    fake.put(
        {
            "apiVersion": WORKFLOW_API,
            "kind": "Workflow",
            "metadata": {"name": name, "namespace": NS, "deletionTimestamp": "2026-01-01T12:00Z"},
            "status": {"phase": "Running"},
        }
    )
    return name


def test_a_resubmit_right_after_stop_waits_until_the_stopped_workflow_is_gone(wd, fake):
    name = stopped_workflow(wd, fake)
    slow_delete(fake, "Workflow", gone_after=25)
    fake.applied.clear()
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.workflow(WorkflowRequest()) == 0
    assert f"Workflow {name}: being deleted (stopped); waiting until it is gone" in lines
    assert not any("still running" in line for line in lines)
    assert 25 <= fake.clock.now < STOP_WAIT_S
    assert fake.applied == expected_objects(rt)
    assert "deletionTimestamp" not in fake.obj(WORKFLOW_API, "Workflow", name, NS)["metadata"]


def test_a_stopped_workflow_that_does_not_go_fails_clearly(wd, fake):
    name = stopped_workflow(wd, fake)
    slow_delete(fake, "Workflow", gone_after=None)
    fake.applied.clear()
    with pytest.raises(
        ClusterError, match=rf"Workflow {name} was not deleted within {STOP_WAIT_S} s; check"
    ):
        runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest())
    assert fake.applied == []
    assert fake.clock.now >= STOP_WAIT_S


# -- Argo's namespace is shared: this namespace's cache, Argo's own service account -------

# What `invoke workflow` keeps in Argo's namespace: each name is suffixed with the namespace.
IN_ARGO = [
    ("ConfigMap", "distml-workflow-cache"),
    ("Role", "distml-workflow-cache-writer"),
    ("RoleBinding", "distml-workflow-cache-writer"),
]
CACHE = {"workflows.argoproj.io/configmap-type": "Cache"}  # all Argo leaves on its cache


def controller(fake, sa: str | None) -> None:
    """Argo's controller Deployment as an install made it (``sa`` None: names none)."""
    spec: dict[str, Any] = {"containers": [{"name": "workflow-controller", "image": "x"}]}
    if sa is not None:
        spec["serviceAccountName"] = sa
    meta = {"name": manifests.ARGO_CONTROLLER_DEPLOYMENT, "namespace": manifests.ARGO_NAMESPACE}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta}
    fake.put({**deployment, "spec": {"template": {"spec": spec}}})


def cache_binding(fake) -> dict[str, Any]:
    name = manifests.cache_writer_name(NS)
    return fake.obj("rbac.authorization.k8s.io/v1", "RoleBinding", name, manifests.ARGO_NAMESPACE)


@pytest.mark.parametrize(
    ("sa", "bound"),
    [
        ("argo-workflows-workflow-controller", "argo-workflows-workflow-controller"),
        (None, "default"),
    ],
    ids=["a Helm install's", "none named"],
)
def test_the_cache_role_is_bound_to_the_service_account_argo_runs_as(wd, fake, sa, bound):
    with_argo(wd, fake)
    controller(fake, sa)
    assert runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest()) == 0
    subject = {"kind": "ServiceAccount", "name": bound, "namespace": manifests.ARGO_NAMESPACE}
    assert cache_binding(fake)["subjects"] == [subject]


def test_an_unreadable_controller_deployment_falls_back_to_install_yamls_account(wd, fake):
    with_argo(wd, fake)
    controller(fake, "argo-workflows-workflow-controller")
    real = fake.get

    def forbidden(api, kind, name, namespace=None, *, uid=None):
        if kind == "Deployment" and namespace == manifests.ARGO_NAMESPACE:
            raise KubeError(f"deployments.apps {name} is forbidden", status=403)
        return real(api, kind, name, namespace)

    fake.get = forbidden
    lines: list[str] = []
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).workflow(WorkflowRequest()) == 0
    (subject,) = cache_binding(fake)["subjects"]
    assert subject["name"] == manifests.ARGO_CONTROLLER_SA
    assert any(
        "workflow-controller cannot be read" in line and "forbidden" in line for line in lines
    )
    assert "note: Argo's controller is taken to run as ServiceAccount argo/argo" in lines


def test_argos_namespace_holds_this_namespaces_cache_and_role_by_name(wd, fake):
    """`down` in another namespace deletes its own names, never these."""
    with_argo(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).workflow(WorkflowRequest())
    in_argo = sorted(
        (kind, name) for (_, kind, ns, name) in fake.objects if ns == manifests.ARGO_NAMESPACE
    )
    mine = [(kind, f"{prefix}-{NS}") for kind, prefix in IN_ARGO]
    assert [o for o in in_argo if o[0] != "Deployment"] == sorted(mine)
    wf = submitted(fake)
    (ingest,) = [t for t in wf["spec"]["templates"] if "memoize" in t]
    assert ingest["memoize"]["cache"]["configMap"]["name"] == f"distml-workflow-cache-{NS}"


def test_a_cache_argo_has_written_is_kept_as_argo_left_it(wd, fake):
    """Argo relabels its cache when it saves an entry (only its own label is left): the
    next submission neither rewrites it nor, on a cluster distml did not create, takes
    it for someone else's object."""
    with_argo(wd, fake)
    name = manifests.workflow_cache_name(NS)
    argos = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": manifests.ARGO_NAMESPACE, "labels": CACHE},
        "data": {"ingest-abc": '{"nodeID": "w-1"}'},
    }
    fake.put(argos)
    fake.applied.clear()
    lines: list[str] = []
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).workflow(WorkflowRequest()) == 0
    assert "ConfigMap" not in [o["kind"] for o in fake.applied]
    kept = fake.obj("v1", "ConfigMap", name, manifests.ARGO_NAMESPACE)
    assert kept["data"] == argos["data"] and kept["metadata"]["labels"] == CACHE
    assert f"ConfigMap argo/{name}: exists (Argo's cache entries kept)" in lines


def test_every_object_the_steps_create_carries_the_instance_label(wd, fake):
    with_argo(wd, fake)
    rt = runtime(make_ctx(fake, {}), wd, fake)
    assert rt.workflow(WorkflowRequest()) == 0
    instance = wd.state().instance
    resources = [t["resource"] for t in submitted(fake)["spec"]["templates"] if "resource" in t]
    manifests_in = [yaml.safe_load(r["manifest"]) for r in resources if r["action"] != "patch"]
    assert {m["kind"] for m in manifests_in} >= {"TFJob", "InferenceService", "ServingRuntime"}
    for m in manifests_in:
        assert m["metadata"]["labels"][manifests.INSTANCE_LABEL] == instance, m["kind"]
    # The serving steps' patches require it of what they write, and keep it there.
    patches = [yaml.safe_load(r["manifest"]) for r in resources if r["action"] == "patch"]
    assert patches
    label = "/metadata/labels/distml~1instance"
    for ops in patches:
        assert {"op": "test", "path": label, "value": instance} in ops
        assert {"op": "add", "path": label, "value": instance} in ops


def test_a_canary_workflow_is_checked_first_then_judged_after_it_succeeds(wd, fake, monkeypatch):
    # The analysis itself (the pods, Prometheus, the Jobs): test_canary_deploy.py. Here:
    # the order, and that its Workflow selects into the canary and serves nothing.
    from runtime.cluster import canary_deploy

    with_argo(wd, fake)
    argo(fake, [status("Succeeded", INGEST_CACHED, TRAIN_DONE)])
    calls: list[str] = []
    asked: list = []
    monkeypatch.setattr(
        canary_deploy, "prepare", lambda cx, r: asked.append(r) or calls.append("prepare") or "p"
    )
    monkeypatch.setattr(canary_deploy, "loaded_canary", lambda cx, p: calls.append(p) or 7)
    monkeypatch.setattr(
        canary_deploy, "judge", lambda cx, p, version: calls.append(f"judge {version}") or 1
    )
    rt = runtime(make_ctx(fake, {}), wd, fake)
    request = WorkflowRequest(watch=True, canary=True, canary_steps=(20, 50), canary_interval=40)
    assert rt.workflow(request) == 1, "the canary's verdict"
    assert calls == ["prepare", "p", "judge 7"]
    (policy,) = [r.canary_policy() for r in asked]  # the flags reach the analysis
    assert (policy.steps, policy.interval_s, policy.failure_limit) == ((20, 50), 40, 0)
    wf = submitted(fake)
    select = next(t for t in wf["spec"]["templates"] if t["name"] == "select")
    assert "--canary" in select["container"]["command"]
    assert not any(t["name"].startswith("serve") for t in wf["spec"]["templates"])


def test_a_canary_that_fails_its_checks_submits_nothing(wd, fake, monkeypatch):
    from runtime.cluster import canary_deploy

    with_argo(wd, fake)

    def refuse(cx, request):
        raise ClusterError("a canary on a cluster is judged from Prometheus, and there is none")

    monkeypatch.setattr(canary_deploy, "prepare", refuse)
    rt = runtime(make_ctx(fake, {}), wd, fake)
    with pytest.raises(ClusterError, match="judged from Prometheus"):
        rt.workflow(WorkflowRequest(watch=True, canary=True))
    assert "Workflow" not in [o["kind"] for o in fake.applied]
