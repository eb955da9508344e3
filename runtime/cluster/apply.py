"""Applying, replacing and running the objects distml owns in its namespace: apply and
say whether it was new, delete and wait until gone, wait for a pod to run (or be Ready),
run a batch Job and read its log."""

from __future__ import annotations

from typing import Any

from common.poll import Done, Failed, Pending, poll
from k8s.client.objects import JOB_API, pod_ready, pod_state
from k8s.waits.cluster_poll import WaitError
from k8s.waits.workload_waits import wait_job
from runtime.cluster.context import ClusterContext, ClusterError

DELETE_POLL_S = 1
POD_POLL_S = 2


def apply_reporting(cx: ClusterContext, obj: dict[str, Any], note: str = "") -> None:
    """Apply ``obj`` and say ``created`` or ``already exists`` (under --dry, DryKube says)."""
    meta = obj["metadata"]
    existing = cx.kube.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
    cx.apply(obj, current=existing)  # read once: for the report and the ownership check
    what = f"{obj['kind']} {meta['name']}"
    if cx.dry:
        return  # DryKube printed it
    if existing is not None:
        cx.out(f"{what}: already exists")
    else:
        cx.out(f"{what}: created" + (f" ({note})" if note else ""))


def delete_and_wait(
    cx: ClusterContext, api_version: str, kind: str, name: str, timeout: float = 120
) -> None:
    """Delete an object and wait until it is gone (so a same-name resubmit is clean)."""
    if cx.dry:
        cx.kube.delete(api_version, kind, name, cx.namespace)
        return
    obj = cx.get(api_version, kind, name)
    if obj is None:
        return
    cx.require_ours(obj, f"delete {kind} {name}")
    if not cx.delete_checked(api_version, obj):
        return
    verdict = poll(
        lambda: cx.get(api_version, kind, name),
        lambda obj: Done() if obj is None else Pending(),
        timeout=timeout,
        interval=DELETE_POLL_S,
        clock=cx.clock,
    )
    if not isinstance(verdict, Done):
        raise ClusterError(
            f"{kind} {name} was not deleted within {timeout:.0f} s; check its finalizers: "
            + cx.provider.kubectl(f"-n {cx.namespace} get {kind.lower()} {name} -o yaml")
        )


def wait_pod(cx: ClusterContext, name: str, *, timeout: float, ready: bool = False) -> None:
    """Wait until the pod runs (``ready``: and its readiness probe passes); a pod that
    ended, or the deadline, raises ClusterError with its state and events."""

    def judge(pod: dict[str, Any] | None) -> Done | Failed | Pending:
        phase = ((pod or {}).get("status") or {}).get("phase")
        if phase == "Running" and (not ready or pod_ready(pod or {})):
            return Done()
        if phase in ("Failed", "Succeeded"):
            return Failed(phase)
        if pod is None:
            return Pending("not created")
        return Pending("Running, not ready" if phase == "Running" else pod_state(pod))

    verdict = poll(
        lambda: cx.get("v1", "Pod", name),
        judge,
        timeout=timeout,
        interval=POD_POLL_S,
        clock=cx.clock,
    )
    if isinstance(verdict, Done):
        return
    state = (
        f"{verdict.reason} (it will not run)"
        if isinstance(verdict, Failed)
        else f"{verdict.status} after {timeout:.0f} s"
    )
    events = cx.kube.events(cx.namespace, name)
    last = "; ".join(f"{e.get('reason')}: {e.get('message')}" for e in events[-5:])
    raise ClusterError(
        f"pod {name} is {state}"
        + (f" (events: {last})" if last else "")
        + f"; check `{cx.provider.kubectl(f'-n {cx.namespace} describe pod {name}')}`"
    )


def run_job(cx: ClusterContext, job: dict[str, Any], timeout: float, what: str) -> str:
    """Replace a batch Job of the same name, wait for it, return its log tail."""
    name = job["metadata"]["name"]
    delete_and_wait(cx, JOB_API, "Job", name)
    cx.apply(job)
    if cx.dry:
        return ""
    try:
        wait_job(
            cx.kube,
            cx.namespace,
            name,
            timeout=timeout,
            clock=cx.clock,
            out=cx.out,
            kubectl=cx.provider.kubectl,
        )
    except WaitError as e:
        raise ClusterError(f"{what} failed: {e}") from e
    return job_logs(cx, name)


def job_logs(cx: ClusterContext, name: str, tail: int = 40) -> str:
    """The log tail of the Job's newest pod ("" when it has none)."""
    pods = cx.kube.list("v1", "Pod", cx.namespace, label_selector=f"job-name={name}")
    if not pods:
        return ""
    newest = max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
    return cx.kube.logs(newest["metadata"]["name"], cx.namespace, tail=tail)
