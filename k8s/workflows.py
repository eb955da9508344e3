"""Reading an Argo Workflow's status and waiting for it: the step rows `invoke workflow
--watch` shows, the failing steps' report, and the wait (``common.poll`` with this
module's judgement, like every wait in ``k8s.waits``).

Argo's own names, as its controller writes them (``pkg/apis/workflow/v1alpha1`` and
``workflow/common`` at the pinned release; ``tests/test_k8s_workflows.py`` holds these
against the CRD): ``status.phase`` is Pending, Running, Succeeded, Failed or Error (the
last three are final); ``status.nodes`` maps a node id to a node with ``displayName``,
``type``, ``phase`` (also Skipped, Omitted), ``message``, ``startedAt``, ``finishedAt`` and,
for a memoized step, ``memoizationStatus.hit``. A step's own work is a node of type
``Pod`` (container and resource templates alike; a cache hit is a Pod node that never
ran one); ``Steps``, ``StepGroup`` and ``Retry`` nodes are structure. A step's pod carries
the label ``workflows.argoproj.io/workflow`` and the annotation
``workflows.argoproj.io/node-id``; its command runs in the container ``main``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.poll import Clock, Done, Pending, Verdict
from k8s.diagnose import indent, pod_report, safe, with_hints
from k8s.kube import Kube
from k8s.objects import Obj, name_of, status_of
from k8s.waits import POLL_S, Missing, Out, WaitError, fail_with, outcome, poll_cluster, secs

WORKFLOW_API = "argoproj.io/v1alpha1"
WORKFLOW_KIND = "Workflow"
POD_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_ID_ANNOTATION = "workflows.argoproj.io/node-id"
MAIN_CONTAINER = "main"
COMPLETED = ("Succeeded", "Failed", "Error")  # WorkflowPhase.Completed()
FAILED = ("Failed", "Error")  # a node's or the workflow's failed phases
RUNNING = ("Pending", "Running")  # a node not over yet
STEP_TYPES = ("Pod", "Skipped")  # a step's own work; Skipped: a step that errored unrun
LOG_TAIL = 20


@dataclass(frozen=True)
class StepRow:
    """One step of a workflow as the live lines show it."""

    name: str  # Argo's displayName: "ingest", "train-cnn", a retry's "select(1)"
    phase: str  # Pending, Running, Succeeded, Skipped, Failed, Error, Omitted
    message: str = ""
    cached: bool = False  # memoized: Succeeded from the cache, not run


def workflow_phase(wf: Obj | None) -> str:
    """The workflow's phase; Pending until the controller has written one."""
    return status_of(wf).get("phase") or "Pending"


def _nodes(wf: Obj | None) -> list[Obj]:
    return list((status_of(wf).get("nodes") or {}).values())


def _order(node: Obj) -> tuple[str, str]:
    # Memoized nodes have no startedAt: they come first (they finished at once).
    return (node.get("startedAt") or "", node.get("displayName") or node.get("name") or "")


def _steps(wf: Obj | None) -> list[Obj]:
    return sorted((n for n in _nodes(wf) if n.get("type") in STEP_TYPES), key=_order)


def step_rows(wf: Obj | None) -> list[StepRow]:
    """The workflow's steps in the order they started."""
    return [
        StepRow(
            name=n.get("displayName") or n.get("name") or n.get("id") or "?",
            phase=n.get("phase") or "Pending",
            message=n.get("message") or "",
            cached=bool((n.get("memoizationStatus") or {}).get("hit")),
        )
        for n in _steps(wf)
    ]


def failed_steps(wf: Obj | None) -> list[Obj]:
    """The step nodes that failed or errored, in the order they finished."""
    failed = [n for n in _steps(wf) if n.get("phase") in FAILED]
    return sorted(failed, key=lambda n: n.get("finishedAt") or "")


def step_pod(kube: Kube, namespace: str, workflow: str, node: Obj) -> Obj | None:
    """The pod that ran a step node (by its node-id annotation; before that annotation
    existed, the pod was named after the node id), or None when it is gone."""
    node_id = node.get("id") or ""
    pods = safe(lambda: kube.list("v1", "Pod", namespace, f"{POD_WORKFLOW_LABEL}={workflow}"), [])
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(NODE_ID_ANNOTATION, name_of(pod)) == node_id:
            return pod
    return None


def failure_report(kube: Kube, namespace: str, wf: Obj, tail: int = LOG_TAIL) -> str:
    """Why a workflow failed: its message, each failed step's message and its pod's state,
    events and log tail (container ``main``), with the known pitfalls' hints."""
    name = name_of(wf)
    lines = [f"Workflow {namespace}/{name}: {workflow_phase(wf)}"]
    message = status_of(wf).get("message")
    if message:
        lines.append(f"  message: {message}")
    steps = failed_steps(wf)
    if not steps:
        lines.append("  no step failed (the workflow itself did: see its message)")
    for node in steps:
        step = node.get("displayName") or node.get("name")
        lines.append(f"  step {step}: {node.get('phase')}: {node.get('message') or 'no message'}")
        pod = step_pod(kube, namespace, name, node)
        if pod is None:
            if node.get("type") == "Pod":
                lines.append("    its pod is gone (podGC may have removed it)")
            continue
        lines += indent(
            pod_report(kube, namespace, pod, container=MAIN_CONTAINER, tail=tail, detail=True),
            4,
        )
    return with_hints(lines)


class _WorkflowJudge:
    """Done (with the workflow) when its phase is final; calls ``on_update`` with the step
    rows whenever one changed."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        clock: Clock,
        on_update: Callable[[list[StepRow]], Any],
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.clock, self.on_update = clock, on_update
        self.start = clock.monotonic()
        self.missing = Missing(clock)
        self.shown: list[StepRow] | None = None
        self.last: Obj | None = None

    def observe(self) -> Obj | None:
        return self.kube.get(WORKFLOW_API, WORKFLOW_KIND, self.name, self.namespace)

    def __call__(self, wf: Obj | None) -> Verdict:
        if self.missing.check(self.name, wf is not None):
            waited = secs(self.clock.monotonic() - self.start)
            return fail_with(
                WaitError(
                    f"Workflow {self.namespace}/{self.name} does not exist (waited {waited}); "
                    "was it deleted (`invoke workflow --stop`)?",
                    next_step=f"kubectl -n {self.namespace} get workflows; `invoke workflow` "
                    "submits a new one",
                )
            )
        if wf is None:
            return Pending()
        self.last = wf
        rows = step_rows(wf)
        if rows != self.shown:
            self.shown = rows
            self.on_update(rows)
        if workflow_phase(wf) in COMPLETED:
            return Done(wf)
        return Pending()

    def timed_out(self, timeout: float, what: str, verdict: Pending) -> WaitError:
        running = [r.name for r in self.shown or [] if r.phase in RUNNING]
        return WaitError(
            f"timed out after {secs(timeout)} waiting for {what} (phase "
            f"{workflow_phase(self.last)}; unfinished steps: {', '.join(running) or 'none'})",
            next_step=f"kubectl -n {self.namespace} get workflow {self.name} -o yaml; "
            "`invoke workflow --stop` stops it",
        )


def wait_workflow(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    timeout: float,
    on_update: Callable[[list[StepRow]], Any],
    interval: float = POLL_S,
    clock: Clock = time,
    out: Out = print,
) -> Obj:
    """Wait until the workflow's phase is final; return the workflow as last read.

    ``on_update(rows)`` is called with every step's row whenever one changed (a new step,
    a phase, a message). A workflow that stays missing past the grace (deleted) raises
    ``WaitError``; so does the deadline.
    """
    what = f"Workflow {namespace}/{name}"
    judge = _WorkflowJudge(kube, namespace, name, clock, on_update)
    verdict = poll_cluster(
        judge.observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    return outcome(verdict, what, lambda v: judge.timed_out(timeout, what, v))
