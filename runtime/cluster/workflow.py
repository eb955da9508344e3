"""`invoke workflow` on a cluster: the whole pipeline as one Argo Workflow (ingest, the
TFJobs in parallel, selection, serving), built by ``k8s.manifests.workflow_objects`` from
the same builders as the task chain, submitted next to its ServiceAccount, Role,
RoleBinding and memoization cache; ``--watch`` follows it with a line per step change,
``--stop`` deletes distml's running workflows."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from k8s import manifests
from k8s.client.kube import KubeError
from k8s.client.objects import ISVC_API
from k8s.client.ownership import recreated, stamp
from k8s.manifests.argo_workflow import CREATE_SUFFIX, SERVING_STEPS
from k8s.manifests.guarded import NOT_APPLIED
from k8s.manifests.names import is_ours
from k8s.providers.settings import Settings
from k8s.waits.argo_status import (
    COMPLETED,
    WORKFLOW_API,
    WORKFLOW_KIND,
    StepRow,
    failed_steps,
    failure_report,
    wait_workflow,
    workflow_phase,
)
from k8s.waits.cluster_poll import WaitError
from runtime.cluster import canary_deploy
from runtime.cluster.apply import apply_reporting, delete_and_wait
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.cluster.submit import jobs_that_fit, replace_tfjob
from runtime.cluster.training import scraped_every
from runtime.output.display import ChangedRows
from runtime.requests import WorkflowRequest

WATCH_GRACE_S = 120  # beyond the workflow's activeDeadlineSeconds, for Argo to mark it
STOP_WAIT_S = 180  # for a stopped workflow to go: its TFJobs' workers save and stop first


def step_row_line(r: StepRow) -> str:
    """A workflow step's live line: its phase, a cache hit, its retries, its message (a
    serving object's create step that found it there says so: not a failure)."""
    if r.name.endswith(CREATE_SUFFIX) and r.phase == "Failed" and _exists(r.message):
        step = r.name.removesuffix(CREATE_SUFFIX)
        return f"{r.name:<26} exists: step {step} updates it only if it is this work dir's"
    note = " (from the cache, not run)" if r.cached else ""
    note += f" (retry {r.retries})" if r.retries else ""
    note += f": {r.message}" if r.message else ""
    return f"{r.name:<26} {r.phase}{note}"


def workflow(cx: ClusterContext, request: WorkflowRequest) -> int:
    if request.stop:
        return stop(cx)
    state = cx.require_up()
    if not (state.argo or cx.dry):
        raise ClusterError(
            f"Argo Workflows is not installed on the {cx.provider.name} cluster of this work "
            f"dir ({cx.wd.root}); run `invoke up --runtime {cx.provider.name} --with-argo` "
            "first (it adds Argo to the running cluster)"
        )
    # A canary: everything it is judged with checked before anything is submitted.
    canary = canary_deploy.prepare(cx, request.canary_request()) if request.canary else None
    s = scraped_every(cx, cx.settings(
        profile=request.profile, epochs=request.epochs, steps_per_epoch=request.steps_per_epoch
    ))  # fmt: skip
    cx.check_image(state, s)
    name = manifests.WORKFLOW_NAME
    _replace_finished(cx, name)
    cx.out(f"== workflow {name}: {', '.join(request.models)}, profile {request.profile}")
    # The train steps create the TFJobs train-all creates (same names): an old one goes
    # first, or its step fails on AlreadyExists (create steps are not retried).
    for model in request.models:
        replace_tfjob(cx, manifests.tfjob_name(model))
    fit = jobs_that_fit(cx, s, len(request.models))
    claim = cx.get("v1", "PersistentVolumeClaim", s.volume) or {}
    objects = manifests.workflow_objects(
        s,
        models=request.models,
        cache_key=manifests.data_cache_key(s, claim.get("metadata", {}).get("uid", "")),
        cache_max_age=request.cache_max_age,
        min_accuracy=request.min_accuracy,
        source_dir=bool(state.source_dir),
        parallelism=fit if fit < len(request.models) else None,
        controller_sa=_controller_service_account(cx),
        instance=cx.instance,
        canary=request.canary,
    )
    wf = next(o for o in objects if o["kind"] == WORKFLOW_KIND)
    _check_serving_objects(cx, s)
    for obj in objects:
        if obj is wf:
            cx.apply(_stamped(obj, cx.instance))
        elif obj["kind"] == "ConfigMap":
            _make_cache(cx, obj)
        else:
            apply_reporting(cx, obj)
    if cx.dry:
        return 0
    cx.out(f"Workflow {name}: submitted in namespace {cx.namespace}")
    if not request.watch:
        cx.out(f"follow it: `invoke workflow --watch` next time, or {_kubectl(cx, 'get', name)}")
        cx.out(f"stop it: {_kubectl(cx, 'delete', name)} or `invoke workflow --stop`")
        return 0
    code = watch(cx, name, deadline_s=wf["spec"]["activeDeadlineSeconds"])
    return code if code or canary is None else _judge_canary(cx, canary)


def _judge_canary(cx: ClusterContext, p: canary_deploy.Prepared) -> int:
    """The Workflow's selection published a canary: the predictor pods load it by
    themselves; judge it as `deploy --canary` does."""
    cx.out("== canary: the Workflow's selection step published it; judging it from here")
    version = canary_deploy.loaded_canary(cx, p)
    if version is None:
        cx.out(canary_deploy.none_loaded(p))
        return 0
    return canary_deploy.judge(cx, p, version)


SERVING_RUNTIME_API = "serving.kserve.io/v1alpha1"


def _served(s: Settings) -> tuple[tuple[str, str, str], ...]:
    """The objects the serving steps write, by name: (apiVersion, kind, name)."""
    return (
        (ISVC_API, "InferenceService", s.service),
        (SERVING_RUNTIME_API, "ServingRuntime", manifests.RUNTIME_NAME),
    )


def _record_served(cx: ClusterContext) -> None:
    """The Workflow ended: what its serving steps wrote (each write tested this work dir's
    labels first, k8s.manifests.guarded) gets its uid recorded, as `deploy` does for what
    it applies, so that `down` and `status` prove it by uid. (Without --watch nothing is
    recorded: `down` then keeps those objects and names them.)"""
    for api, kind, name in _served(cx.settings()):
        obj = cx.get(api, kind, name)
        if obj is not None and is_ours(obj, cx.instance) and not recreated(obj, cx.uids):
            cx.remember(obj)


def _check_serving_objects(cx: ClusterContext, s: Settings) -> None:
    """The serving steps write the InferenceService and its ServingRuntime by name: one
    someone else made since `up` is refused here, before the Workflow is submitted (and
    one made after this, by the steps themselves: k8s.manifests.guarded)."""
    for api, kind, name in _served(s):
        obj = None if cx.dry else cx.get(api, kind, name)
        if obj is not None:
            cx.require_ours(obj, f"workflow: {kind} {name}")


def _stamped(wf: dict[str, Any], instance: str | None) -> dict[str, Any]:
    """The Workflow with this work dir's instance label on every object its steps create
    (its TFJobs, the selection Job, the InferenceService...), as on what the tasks apply:
    `down` finds them by it, and the next `up` knows them for this work dir's."""
    if not instance:
        return wf
    wf = copy.deepcopy(wf)
    for template in wf["spec"]["templates"]:
        resource = template.get("resource")
        if resource and "manifest" in resource and resource.get("action") != "patch":
            # A patch step's JSON Patch already tests and writes the instance label.
            obj = stamp(yaml.safe_load(resource["manifest"]), instance)
            resource["manifest"] = yaml.safe_dump(obj, sort_keys=False)
    return wf


def _controller_service_account(cx: ClusterContext) -> str:
    """The ServiceAccount Argo's controller runs as, read from its Deployment (a Helm
    install names it otherwise than install.yaml); install.yaml's when it cannot be read."""
    ns, name = manifests.ARGO_NAMESPACE, manifests.ARGO_CONTROLLER_DEPLOYMENT
    try:
        deployment = cx.kube.get("apps/v1", "Deployment", name, ns)
    except KubeError as e:
        deployment = None
        cx.out(f"note: Deployment {ns}/{name} cannot be read ({e})")
    sa = manifests.controller_service_account(deployment)
    if deployment is None and not cx.dry:
        cx.out(f"note: Argo's controller is taken to run as ServiceAccount {ns}/{sa}")
    return sa


def _make_cache(cx: ClusterContext, cache: dict) -> None:
    """The memoization ConfigMap, made when absent. One that is there is Argo's to write:
    its entries are kept, and the labels Argo set (it drops distml's) left as they are."""
    meta = cache["metadata"]
    if cx.kube.get("v1", "ConfigMap", meta["name"], meta["namespace"]) is not None:
        cx.out(f"ConfigMap {meta['namespace']}/{meta['name']}: exists (Argo's cache entries kept)")
        return
    apply_reporting(cx, cache)


def _kubectl(cx: ClusterContext, verb: str, name: str) -> str:
    return f"`{cx.provider.kubectl(f'-n {cx.namespace} {verb} workflow {name}')}`"


def _replace_finished(cx: ClusterContext, name: str) -> None:
    """A finished workflow of the same name goes first (its cache entries stay, so
    ingestion is skipped when nothing changed); one being deleted (`--stop`) is waited
    for until gone; a running one is not replaced silently."""
    old = cx.get(WORKFLOW_API, WORKFLOW_KIND, name)
    if old is None:
        return
    if (old.get("metadata") or {}).get("deletionTimestamp"):
        # Deleted in the foreground: it goes once its pods and TFJobs are gone.
        cx.out(f"Workflow {name}: being deleted (stopped); waiting until it is gone")
        delete_and_wait(cx, WORKFLOW_API, WORKFLOW_KIND, name, timeout=STOP_WAIT_S)
        return
    phase = workflow_phase(old)
    if phase not in COMPLETED:
        raise ClusterError(
            f"Workflow {name} is still {phase.lower()}; follow it with "
            f"{_kubectl(cx, 'get', name)}, or stop it first: `invoke workflow --stop`"
        )
    cx.out(f"Workflow {name}: replacing the {phase.lower()} run")
    delete_and_wait(cx, WORKFLOW_API, WORKFLOW_KIND, name)


def watch(cx: ClusterContext, name: str, *, deadline_s: float) -> int:
    """Follow the workflow until it ends: 0 when it Succeeded; 1 with the failing steps'
    messages and log tails otherwise; Ctrl-C leaves it running and says how to stop it."""
    lines = ChangedRows(cx.out, cx.clock, step_row_line)
    try:
        final = wait_workflow(
            cx.kube,
            cx.namespace,
            name,
            timeout=deadline_s + WATCH_GRACE_S,
            on_update=lines,
            clock=cx.clock,
            out=cx.out,
            kubectl=cx.provider.kubectl,
        )
    except WaitError as e:
        raise ClusterError(f"the workflow did not finish: {e}") from e
    except KeyboardInterrupt:
        cx.out(
            f"\ninterrupted: Workflow {name} keeps running in the cluster; stop it with "
            f"{_kubectl(cx, 'delete', name)} or `invoke workflow --stop`"
        )
        return 130
    phase = workflow_phase(final)
    _record_served(cx)
    if phase == "Succeeded":
        cx.out(f"Workflow {name}: Succeeded in {lines.elapsed():.0f} s")
        cx.out("next: invoke status, then invoke loadtest")
        return 0
    cx.out(f"Workflow {name}: {phase} after {lines.elapsed():.0f} s")
    cx.out(failure_report(cx.kube, cx.namespace, final, kubectl=cx.provider.kubectl))
    for line in refusals(final, cx.namespace, cx.instance):
        cx.out(line)
    cx.out("next: fix the cause above, then `invoke workflow --watch` (a cached ingest is skipped)")
    return 1


def _exists(message: str) -> bool:
    return "AlreadyExists" in message or "already exists" in message


def refusals(wf: dict[str, Any], namespace: str, instance: str | None) -> list[str]:
    """What a serving step that failed on its guard means (the API server's answer to a
    JSON Patch whose test failed says only that it rejected the request): the object of
    that name is not this work dir's, so the step wrote nothing to it."""
    objects = {
        t["name"]: t["resource"]["flags"][:2]
        for t in (wf.get("spec") or {}).get("templates") or []
        if t.get("name") in SERVING_STEPS and "flags" in (t.get("resource") or {})
    }
    out = []
    for step in failed_steps(wf):
        if step.name not in objects or NOT_APPLIED not in step.state()[1]:
            continue
        resource, name = objects[step.name]
        whose = (
            f"this work dir's instance label (distml/instance={instance})"
            if instance
            else ("distml's labels")
        )
        out.append(
            f"step {step.name} refused to write {resource} {namespace}/{name}: it does not "
            f"carry {whose}, so it is someone else's (made after `invoke workflow` checked "
            "the name) and was left as it is. Ask whoever made it, or choose another name "
            "(INVOKE_SERVICE, or service in invoke.yaml), then run `invoke workflow` again; "
            "see it: "
            f"kubectl -n {namespace} get {resource} {name} -o yaml"
        )
    return out


def stop(cx: ClusterContext) -> int:
    """Delete distml's workflows that have not finished (label-selected); say which."""
    cx.require_up()
    mine = manifests.selector(instance=cx.instance)
    found = cx.kube.list(WORKFLOW_API, WORKFLOW_KIND, cx.namespace, mine)
    running = [w for w in found if workflow_phase(w) not in COMPLETED]
    if not running:
        cx.out(f"no distml workflow is running in {cx.namespace}; nothing to stop")
        return 0
    for wf in running:
        name = wf["metadata"]["name"]
        if cx.delete_ours(WORKFLOW_API, WORKFLOW_KIND, name):
            # Its pods and TFJobs carry owner references to it; the serving objects do not
            # (k8s.manifests.argo_workflow): what serves keeps serving.
            cx.out(
                f"stopped Workflow {name} ({workflow_phase(wf).lower()}): deleted, its pods "
                "and TFJobs with it"
            )
    return 0
