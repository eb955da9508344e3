"""The waits for built-in workloads: Deployments to be Available (``up``'s operators) and a
batch/v1 Job to complete (ingest, select). Built on ``k8s.waits.cluster_poll``; the commands their
errors print are built by the ``kubectl`` they are given (the provider's: it names the
context)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from common.poll import Clock, Done, Pending, Verdict, api_note
from k8s.client.kube import Kube
from k8s.client.objects import (
    DEPLOYMENT_API,
    JOB_API,
    Kubectl,
    Obj,
    condition,
    format_condition,
    is_true,
    job_pods,
    name_of,
    pod_state,
    unnamed_context,
)
from k8s.waits.cluster_poll import (
    POLL_S,
    STUCK_S,
    Missing,
    Out,
    Stuck,
    WaitError,
    fail_with,
    outcome,
    poll_cluster,
    secs,
)
from k8s.waits.diagnose import deployments_report, job_report, unschedulable

# --------------------------------------------------------------------------- Deployments


def _deployments_status(found: dict[str, Obj | None]) -> str:
    waiting = sorted(n for n, d in found.items() if not is_true(d, "Available"))
    if not found:
        return "no Deployment found yet"
    if not waiting:
        return f"{len(found)}/{len(found)} Deployments available"
    return (
        f"{len(found) - len(waiting)}/{len(found)} Deployments available; "
        f"waiting for {', '.join(waiting)}"
    )


def wait_deployments_available(
    kube: Kube,
    namespace: str,
    *,
    names: Sequence[str] | None = None,
    label_selector: str | None = None,
    timeout: float = 300.0,
    interval: float = POLL_S,
    clock: Clock = time,
    out: Out = print,
    kubectl: Kubectl,
) -> list[str]:
    """Wait until every Deployment (``names``, or all matching ``label_selector`` / in the
    namespace) has condition Available=True; return their names."""
    scope = ", ".join(names) if names else f"matching {label_selector}" if label_selector else "all"
    what = f"Deployments in {namespace} ({scope}) to be Available"
    seen: dict[str, Obj | None] | None = None

    def observe() -> dict[str, Obj | None]:
        if names:
            return {n: kube.get(DEPLOYMENT_API, "Deployment", n, namespace) for n in names}
        items = kube.list(DEPLOYMENT_API, "Deployment", namespace, label_selector)
        return {name_of(d): d for d in items}

    def judge(found: dict[str, Obj | None]) -> Verdict:
        nonlocal seen
        seen = found
        if found and all(is_true(d, "Available") for d in found.values()):
            return Done(sorted(found))
        return Pending(f"{namespace}: {_deployments_status(found)}")

    def timed_out(verdict: Pending) -> WaitError:
        first = min((n for n, d in (seen or {}).items() if not is_true(d, "Available")), default="")
        status = "nothing seen yet" if seen is None else _deployments_status(seen)
        return WaitError(
            f"timed out after {secs(timeout)} waiting for {what}; last status: {status}"
            + api_note(verdict.error),
            deployments_report(kube, namespace, seen or {}, kubectl=kubectl),
            next_step=f"{kubectl(f'-n {namespace} get pods')}; "
            + kubectl(f"-n {namespace} describe deployment {first}".rstrip()),
        )

    verdict = poll_cluster(
        observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    if isinstance(verdict, Done):
        out(f"{namespace}: {_deployments_status(seen or {})}")
    return outcome(verdict, what, timed_out, kubectl=kubectl)


# --------------------------------------------------------------------------- Jobs


class _JobJudge:
    """Complete → Done(job); Failed, missing or stuck → Failed; else the pods' states."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        tail: int,
        stuck_after: float,
        clock: Clock,
        kubectl: Kubectl,
    ) -> None:
        self.kube, self.namespace, self.name, self.tail = kube, namespace, name, tail
        self.kubectl = kubectl
        self.clock, self.start = clock, clock.monotonic()
        self.stuck, self.missing = Stuck(clock, stuck_after), Missing(clock)
        self.job: Obj | None = None
        self.pods: list[Obj] = []
        self.status = "not seen yet"
        self.final = ""  # the line to print when the job ended
        describe, logs = f"-n {namespace} describe job {name}", f"-n {namespace} logs job/{name}"
        self.next_step = f"{kubectl(describe)}; {kubectl(logs)}"

    def observe(self) -> tuple[Obj | None, list[Obj]]:
        return (
            self.kube.get(JOB_API, "Job", self.name, self.namespace),
            job_pods(self.kube, self.namespace, self.name),
        )

    def report(self) -> str:
        return job_report(
            self.kube,
            self.namespace,
            self.name,
            self.job,
            self.pods,
            self.tail,
            kubectl=self.kubectl,
        )

    def __call__(self, observation: tuple[Obj | None, list[Obj]]) -> Verdict:
        self.job, self.pods = job, pods = observation
        ref = f"Job {self.namespace}/{self.name}"
        if job is not None and is_true(job, "Complete"):
            self.final = f"Job {self.name}: Complete"
            return Done(job)
        if is_true(job, "Failed"):
            self.final = f"Job {self.name}: Failed"
            cond = format_condition(condition(job, "Failed") or {})
            return fail_with(WaitError(f"{ref} failed: {cond}", self.report(), self.next_step))
        if self.missing.check(self.name, job is not None):
            waited = secs(self.clock.monotonic() - self.start)
            return fail_with(
                WaitError(
                    f"{ref} does not exist (waited {waited})",
                    next_step=self.kubectl(f"-n {self.namespace} get jobs"),
                )
            )
        stuck = self.stuck.update(pods)
        if stuck:
            return fail_with(
                WaitError(f"{ref} is stuck: {stuck[0]}", self.report(), self.next_step)
            )
        self.status = _job_status(job, pods)
        return Pending(f"Job {self.name}: {self.status}")

    def timed_out(self, timeout: float, what: str, verdict: Pending) -> WaitError:
        headline = f"timed out after {secs(timeout)} waiting for {what}; last status: {self.status}"
        blocked = unschedulable(self.kube, self.namespace, self.pods)
        if blocked:
            headline += "\n" + "\n".join(blocked)
        return WaitError(headline + api_note(verdict.error), self.report(), self.next_step)


def _job_status(job: Obj | None, pods: list[Obj]) -> str:
    if job is None:
        return "not found yet"
    if not pods:
        return "no pods yet"
    return ", ".join(f"pod {name_of(p)} {pod_state(p)}" for p in pods)


def wait_job(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    timeout: float = 600.0,
    interval: float = POLL_S,
    stuck_after: float = STUCK_S,
    tail: int = 40,
    clock: Clock = time,
    out: Out = print,
    kubectl: Kubectl | None = None,
) -> Obj:
    """Wait for the batch/v1 Job to be Complete; return it. Failed, stuck or timed out →
    WaitError with its conditions, pod states, events and log tail.

    ``kubectl``: the provider's, for the commands the error names (None: commands without
    a context, for callers that do not pass it yet)."""
    what = f"Job {namespace}/{name} to complete"
    kubectl = kubectl or unnamed_context
    judge = _JobJudge(kube, namespace, name, tail, stuck_after, clock, kubectl)
    verdict = poll_cluster(
        judge.observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    if judge.final:
        out(judge.final)
    return outcome(verdict, what, lambda v: judge.timed_out(timeout, what, v), kubectl=kubectl)
