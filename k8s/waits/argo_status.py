"""Reading an Argo Workflow's status and waiting for it: the step rows `invoke workflow
--watch` shows, the failing steps' report, and the wait (``common.poll`` with this
module's judgement, like every wait built on ``k8s.waits.cluster_poll``).

Argo's own names, as its controller writes them (``pkg/apis/workflow/v1alpha1`` and
``workflow/controller/operator.go`` at the pinned release; ``tests/k8s/waits/test_argo_status.py``
holds these against the CRD): ``status.phase`` is Pending, Running, Succeeded, Failed or
Error (the last three are final); ``status.nodes`` maps a node id to a node with
``displayName``, ``type``, ``phase`` (also Skipped, Omitted), ``message``, ``startedAt``,
``finishedAt``, ``children`` (node ids) and, for a memoized step, ``memoizationStatus``
(``hit``, ``key``, ``cacheName``). A step's node has the type of its template
(``Template.GetNodeType``): ``Pod`` for container and resource templates, but ``Retry``
for any template with a ``retryStrategy``; a Retry node's attempts are its children
``<step>(0)``, ``<step>(1)``, ... (Pod nodes flagged ``nodeFlag.retried``), and a memoized
template's cache hit is its Retry (or Pod) node itself, Succeeded, with no attempt
(``initializeCacheHitNode``). ``Steps`` and ``StepGroup`` nodes are structure. A step's pod
carries the label ``workflows.argoproj.io/workflow`` and the annotation
``workflows.argoproj.io/node-id`` (the attempt's node id); its command runs in the
container ``main``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from common.poll import Clock, Done, Pending, Verdict
from k8s.client.kube import Kube
from k8s.client.objects import WORKFLOW_API, WORKFLOW_KIND, Kubectl, Obj, name_of, status_of
from k8s.waits.cluster_poll import (
    POLL_S,
    Missing,
    Out,
    WaitError,
    fail_with,
    outcome,
    poll_cluster,
    secs,
)
from k8s.waits.diagnose import (
    indent,
    pod_report,
    safe_objects,
    tfjob_report_lines,
    with_hints,
)

POD_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_ID_ANNOTATION = "workflows.argoproj.io/node-id"
MAIN_CONTAINER = "main"
COMPLETED = ("Succeeded", "Failed", "Error")  # WorkflowPhase.Completed()
FAILED = ("Failed", "Error")  # a node's or the workflow's failed phases
RUNNING = ("Pending", "Running")  # a node not over yet
FULFILLED = (*COMPLETED, "Skipped", "Omitted")  # NodePhase.Fulfilled()
STEP_TYPES = ("Pod", "Skipped")  # a step's own work; Skipped: a step that errored unrun
RETRY_TYPE = "Retry"  # a step with a retryStrategy: its attempts are its children
LOG_TAIL = 20


@dataclass(frozen=True)
class StepRow:
    """One step of a workflow as the live lines show it."""

    name: str  # the step's name: "ingest", "train-cnn" (never an attempt's "ingest(1)")
    phase: str  # Pending, Running, Succeeded, Skipped, Failed, Error, Omitted
    message: str = ""
    cached: bool = False  # memoized: Succeeded from the cache, not run
    retries: int = 0  # attempts after the first (a Retry node's children beyond "(0)")


@dataclass(frozen=True)
class Step:
    """A step's node (a Pod node, or the Retry node wrapping its attempts) and its
    attempts, oldest first (none for a Pod node, a cache hit or a retry not started)."""

    node: Obj
    attempts: tuple[Obj, ...] = ()

    @property
    def name(self) -> str:
        n = self.node
        return n.get("displayName") or n.get("name") or n.get("id") or "?"

    @property
    def last(self) -> Obj | None:
        """The node that ran (or runs) the step's pod: the latest attempt, or the node."""
        if self.attempts:
            return self.attempts[-1]
        return self.node if self.node.get("type") != RETRY_TYPE else None

    def state(self) -> tuple[str, str]:
        """Phase and message: the Retry node's once it is over; while it is not, the
        attempt under way (a memoized Retry node stays Pending while it runs)."""
        phase = self.node.get("phase") or "Pending"
        message = self.node.get("message") or ""
        last = self.attempts[-1] if self.attempts else None
        if last is None:
            return phase, message
        last_phase, last_message = last.get("phase") or "Pending", last.get("message") or ""
        if phase in FULFILLED:
            if last_message and last_message != message:
                message = f"{message} (last attempt: {last_message})" if message else last_message
            return phase, message
        if last_phase not in FULFILLED:
            return last_phase, last_message
        # Between attempts: the last one ended and the next is not created yet.
        return phase, message or f"attempt {len(self.attempts)} {last_phase.lower()}, retrying"

    def row(self) -> StepRow:
        phase, message = self.state()
        return StepRow(
            name=self.name,
            phase=phase,
            message=message,
            cached=bool((self.node.get("memoizationStatus") or {}).get("hit")),
            retries=max(len(self.attempts) - 1, 0),
        )


def workflow_phase(wf: Obj | None) -> str:
    """The workflow's phase; Pending until the controller has written one."""
    return status_of(wf).get("phase") or "Pending"


def _nodes(wf: Obj | None) -> list[Obj]:
    return list((status_of(wf).get("nodes") or {}).values())


def _order(node: Obj) -> tuple[str, str]:
    # A node without startedAt (not written yet) comes first.
    return (node.get("startedAt") or "", node.get("displayName") or node.get("name") or "")


def steps(wf: Obj | None) -> list[Step]:
    """The workflow's steps in the order they started: each Retry node with its attempts
    (its children flagged ``nodeFlag.retried``, as Argo's getChildNodeIdsRetried reads
    them), and each Pod or Skipped node that is not a Retry node's child."""
    nodes = _nodes(wf)
    by_id = {n.get("id"): n for n in nodes}
    retries = [n for n in nodes if n.get("type") == RETRY_TYPE]
    wrapped = {child for n in retries for child in n.get("children") or []}
    found = [
        Step(
            n,
            tuple(
                c
                for c in (by_id.get(i) for i in n.get("children") or [])
                if c is not None and (c.get("nodeFlag") or {}).get("retried")
            ),
        )
        for n in retries
    ]
    found += [Step(n) for n in nodes if n.get("type") in STEP_TYPES and n.get("id") not in wrapped]
    return sorted(found, key=lambda step: _order(step.node))


def step_rows(wf: Obj | None) -> list[StepRow]:
    """The workflow's steps in the order they started."""
    return [step.row() for step in steps(wf)]


def failed_steps(wf: Obj | None) -> list[Step]:
    """The steps that failed or errored, in the order they finished."""
    failed = [step for step in steps(wf) if step.state()[0] in FAILED]
    return sorted(failed, key=lambda step: step.node.get("finishedAt") or "")


def tfjob_steps(wf: Obj | None) -> dict[str, str]:
    """Each step that creates a TFJob (a resource template whose manifest is one), by the
    step's name: the TFJob's name. Read from the Workflow's own spec, in every steps
    template (the TFJob steps sit in a nested one)."""
    spec = (wf or {}).get("spec") or {}
    templates = {t.get("name"): t for t in spec.get("templates") or []}
    found: dict[str, str] = {}
    groups = [g for t in templates.values() for g in t.get("steps") or []]
    for group in groups:
        for step in group or []:
            resource = (templates.get(step.get("template")) or {}).get("resource") or {}
            try:
                manifest = yaml.safe_load(resource.get("manifest") or "")
            except yaml.YAMLError:
                continue
            if isinstance(manifest, dict) and manifest.get("kind") == "TFJob":
                found[step.get("name")] = name_of(manifest)
    return found


def step_pod(kube: Kube, namespace: str, workflow: str, node: Obj) -> Obj | None:
    """The pod that ran a step node (by its node-id annotation; before that annotation
    existed, the pod was named after the node id), or None when it is gone."""
    node_id = node.get("id") or ""
    selector = f"{POD_WORKFLOW_LABEL}={workflow}"
    pods = safe_objects(lambda: kube.list("v1", "Pod", namespace, selector))
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(NODE_ID_ANNOTATION, name_of(pod)) == node_id:
            return pod
    return None


def failure_report(
    kube: Kube, namespace: str, wf: Obj, tail: int = LOG_TAIL, *, kubectl: Kubectl
) -> str:
    """Why a workflow failed: its message, each failed step's message and its (last
    attempt's) pod's state, events and log tail (container ``main``); for a step that
    creates a TFJob, the TFJob's own report (conditions, worker pods, events, log tails);
    with the known pitfalls' hints."""
    name = name_of(wf)
    lines = [f"Workflow {namespace}/{name}: {workflow_phase(wf)}"]
    message = status_of(wf).get("message")
    if message:
        lines.append(f"  message: {message}")
    failed = failed_steps(wf)
    if not failed:
        lines.append("  no step failed (the workflow itself did: see its message)")
    tfjobs = tfjob_steps(wf)
    for step in failed:
        phase, why = step.state()
        lines.append(f"  step {step.name}: {phase}: {why or 'no message'}")
        ran = step.last
        pod = step_pod(kube, namespace, name, ran) if ran is not None else None
        if pod is not None:
            report = pod_report(
                kube, namespace, pod, container=MAIN_CONTAINER, tail=tail, detail=True
            )
            lines += indent(report, 4)
        elif ran is not None and ran.get("type") == "Pod":
            lines.append("    its pod is gone (podGC may have removed it)")
        if step.name in tfjobs:
            lines += indent(tfjob_report_lines(kube, namespace, tfjobs[step.name], tail), 4)
    return with_hints(lines, kubectl)


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
        kubectl: Kubectl,
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.kubectl = kubectl
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
                    next_step=f"{self.kubectl(f'-n {self.namespace} get workflows')}; "
                    "`invoke workflow` submits a new one",
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
            next_step=f"{self.kubectl(f'-n {self.namespace} get workflow {self.name} -o yaml')}; "
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
    kubectl: Kubectl,
) -> Obj:
    """Wait until the workflow's phase is final; return the workflow as last read.

    ``on_update(rows)`` is called with every step's row whenever one changed (a new step,
    a phase, a message). A workflow that stays missing past the grace (deleted) raises
    ``WaitError``; so does the deadline.
    """
    what = f"Workflow {namespace}/{name}"
    judge = _WorkflowJudge(kube, namespace, name, clock, on_update, kubectl)
    verdict = poll_cluster(
        judge.observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    return outcome(verdict, what, lambda v: judge.timed_out(timeout, what, v), kubectl=kubectl)
