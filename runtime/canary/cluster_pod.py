"""The canary's own pod on a cluster, for the time of one canary (k8s/manifests/canary_pods.py
says what it is): started and Ready before any request goes to it, watched at every
interval (a restart, an OOM kill, a replaced or vanished pod fails the analysis), and
deleted however the canary ends. ``invoke canary --abort`` and ``invoke down`` delete one
left by a ``deploy --canary`` killed outright."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from common.poll import Done, Pending, poll
from k8s.manifests import canary_pods
from k8s.providers.settings import Settings
from runtime.cluster.apply import delete_and_wait, wait_pod
from runtime.cluster.context import ClusterContext, ClusterError

#: Loading TensorFlow and the version, with the image already on the node.
READY_TIMEOUT_S = 300.0
#: How long the scheduler may find no node for it before the canary is given up: under
#: load the predictors' autoscaler holds its peak for minutes, so waiting longer only
#: delays the same answer.
UNSCHEDULABLE_S = 30.0


@dataclass(frozen=True)
class Seen:
    """The pod as it was Ready: its uid and its containers' restarts."""

    uid: str
    restarts: int


def _restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(c.get("restartCount") or 0) for c in statuses)


def _last_end(pod: dict[str, Any]) -> str:
    """How its container last ended (``OOMKilled, exit 137``), or ''."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = (c.get("lastState") or {}).get("terminated") or {}
        if ended:
            return f"{ended.get('reason') or 'ended'}, exit {ended.get('exitCode', '?')}"
    return ""


def trouble(pod: dict[str, Any] | None, seen: Seen) -> str | None:
    """What went wrong with the canary's pod since it was Ready, or None."""
    if pod is None:
        return "its pod is gone (deleted or evicted)"
    if (pod.get("metadata") or {}).get("uid") != seen.uid:
        return "its pod was replaced"
    restarts = _restarts(pod) - seen.restarts
    if restarts > 0:
        how = _last_end(pod)
        return f"its pod restarted {restarts} time(s)" + (f" ({how})" if how else "")
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Failed", "Succeeded"):
        return f"its pod ended ({phase})"
    return None


def stop(cx: ClusterContext, s: Settings) -> None:
    """Delete the canary's pod and Service, if there and ours (nothing else is touched)."""
    delete_and_wait(cx, "v1", "Pod", canary_pods.name(s))
    delete_and_wait(cx, "v1", "Service", canary_pods.name(s))


def _unschedulable(pod: dict[str, Any] | None) -> str | None:
    """The scheduler's reason when it found no node for the pod, else None."""
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or c.get("reason") or "unschedulable")
    return None


def _wait_scheduled(cx: ClusterContext, s: Settings, name: str) -> None:
    """Until the pod is on a node; a ClusterError saying what to do when the scheduler has
    found none for UNSCHEDULABLE_S."""

    def judge(pod: dict[str, Any] | None) -> Done | Pending:
        placed = ((pod or {}).get("spec") or {}).get("nodeName")
        return Done() if placed else Pending(_unschedulable(pod) or "not scheduled yet")

    verdict = poll(lambda: cx.get("v1", "Pod", name), judge, timeout=UNSCHEDULABLE_S,
                   interval=2.0, clock=cx.clock)  # fmt: skip
    why = _unschedulable(cx.get("v1", "Pod", name))
    if isinstance(verdict, Done) or why is None:
        return  # placed, or still being placed: wait_pod waits for it
    r = s.predictor_resources
    raise ClusterError(
        f"the canary's pod {name} cannot be scheduled ({why}): it asks what a predictor "
        f"asks ({r.cpu_request} CPU, {r.memory_request} memory), to be judged on equal terms. "
        "Make room: fewer predictors at peak (`invoke deploy --max-replicas N`, then the "
        "canary), or more CPU for the cluster"
    )


@contextmanager
def running(cx: ClusterContext, s: Settings) -> Iterator[Seen]:
    """The canary's pod and Service for the time of the block, the pod Ready (it loaded the
    canary version); deleted when the block ends, however it ends."""
    stop(cx, s)  # one left by a deploy --canary killed outright
    try:
        cx.apply(canary_pods.canary_service(s))
        cx.apply(canary_pods.canary_pod(s))
        name = canary_pods.name(s)
        if cx.dry:
            yield Seen("", 0)
            return
        _wait_scheduled(cx, s, name)
        wait_pod(cx, name, timeout=READY_TIMEOUT_S, ready=True)
        pod = cx.get("v1", "Pod", name) or {}
        cx.out(f"pod {name}: Ready (the canary's own server)")
        yield Seen(str((pod.get("metadata") or {}).get("uid")), _restarts(pod))
    finally:
        stop(cx, s)
