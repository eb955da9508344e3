"""Waiting for TFJobs: the live status rows, and the rules that fail a job early (a worker
crash-looping past its restart budget, stuck pulling its image, or never scheduled).

Two behaviours of training-operator v1.9.0 shape it (read at the tag; the fake in
``tests/support/fake_training_operator.py`` plays them):
- a Running worker pod that is deleted (a drain, an eviction, ``kubectl delete pod``) counts
  as a failed replica, and the job is Failed at once ("TFJob ns/name has failed because 1
  Worker replica(s) failed."; kubeflow/trainer#2124). Under ``restartPolicy: OnFailure`` a
  crash restarts in place and never ends that way, so the message names a deleted pod:
  ``on_deleted_pod`` lets the caller resubmit the job, which resumes from its checkpoint.
- past its backoff limit the operator deletes every pod before it marks the job Failed, so
  the log of each crashed run (``--previous``) is kept here while the pod lives, for the
  failure report.

Built like every wait (``k8s.waits.cluster_poll``): ``common.poll.poll`` with this module's
judgement.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from common.poll import Clock, Done, Pending, Verdict, api_note
from k8s.client.kube import Kube
from k8s.client.objects import (
    TERMINAL,
    TF_CONTAINER,
    TFJOB_API,
    Kubectl,
    Obj,
    condition,
    format_condition,
    name_of,
    restarts,
    restarts_of,
    tfjob_pods,
    tfjob_state,
    worker_counts,
)
from k8s.waits.cluster_poll import (
    POLL_S,
    STUCK_S,
    Missing,
    Out,
    Stuck,
    WaitError,
    crashlooping,
    fail_with,
    outcome,
    poll_cluster,
    secs,
)
from k8s.waits.diagnose import safe, tfjob_failure_report, unschedulable
from ml import contract

UNSCHEDULABLE_S = 300.0  # a worker the scheduler keeps refusing: its job cannot progress
# UpdateJobStatus's message for failed replicas (v1.9.0 tfjob_controller.go:500-507).
_REPLICAS_FAILED = re.compile(r"has failed because \d+ \w+ replica\(s\) failed")


def failed_for_a_deleted_pod(job: Obj | None) -> bool:
    """Whether the operator failed ``job`` for a worker pod deleted while running (with
    ``restartPolicy: OnFailure`` the only way to that message; a crash restarts in place)."""
    if tfjob_state(job) != "Failed":
        return False
    return bool(_REPLICAS_FAILED.search(str((condition(job, "Failed") or {}).get("message"))))


@dataclass(frozen=True)
class TFJobRow:
    """One line of the live training status."""

    name: str
    state: str  # Pending (no condition yet), Created, Running, Restarting, Succeeded, Failed
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    restarts: int = 0


@dataclass(frozen=True)
class _TFJobLimits:
    max_restarts: int
    stuck_after: float
    unschedulable_after: float


class _TFJobsJudge:
    """Judges every unfinished TFJob of a poll; Done when all are Succeeded or Failed.

    Prints each failed job's reason and report when it fails; prints each job's state
    changes unless ``on_update`` shows the rows."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        names: list[str],
        limits: _TFJobLimits,
        clock: Clock,
        out: Out,
        on_update: Callable[[list[TFJobRow]], Any] | None,
        on_deleted_pod: Callable[[str], bool] | None,
        kubectl: Kubectl,
    ) -> None:
        self.kube, self.namespace, self.names, self.limits = kube, namespace, names, limits
        self.kubectl = kubectl
        self.clock, self.out, self.on_update = clock, out, on_update
        self.on_deleted_pod = on_deleted_pod
        self.start = clock.monotonic()
        self.stuck = {n: Stuck(clock, limits.stuck_after) for n in names}
        self.refused_since: dict[str, float] = {}
        self.missing = Missing(clock)
        self.finished: dict[str, str] = {}
        self.rows = {n: TFJobRow(n, "Pending") for n in names}
        self.pods: dict[str, list[Obj]] = {n: [] for n in names}
        self.shown: list[TFJobRow] | None = None
        self.kept_logs: dict[str, dict[str, str]] = {n: {} for n in names}
        self.logged_restarts: dict[str, int] = {}

    def observe(self) -> dict[str, tuple[Obj | None, list[Obj]]]:
        return {
            name: (
                self.kube.get(TFJOB_API, "TFJob", name, self.namespace),
                tfjob_pods(self.kube, self.namespace, name),
            )
            for name in self.names
            if name not in self.finished
        }

    def __call__(self, observation: dict[str, tuple[Obj | None, list[Obj]]]) -> Verdict:
        for name, (job, pods) in observation.items():
            self.pods[name] = pods
            if self.missing.check(name, job is not None):
                waited = secs(self.clock.monotonic() - self.start)
                return fail_with(
                    WaitError(
                        f"TFJob {self.namespace}/{name} does not exist (waited {waited}); "
                        "was it deleted?",
                        next_step=f"{self.kubectl(f'-n {self.namespace} get tfjobs')}; "
                        "`invoke train` submits it",
                    )
                )
            self._judge_one(name, job, pods)
        current = [self.rows[n] for n in self.names]
        if self.on_update is not None and current != self.shown:
            self.on_update(current)
        self.shown = current
        if len(self.finished) == len(self.names):
            return Done({n: self.finished[n] for n in self.names})
        return Pending()

    def _judge_one(self, name: str, job: Obj | None, pods: list[Obj]) -> None:
        state = tfjob_state(job) if job is not None else self.rows[name].state
        reason = ""
        self._keep_crash_logs(name, pods)
        if state not in TERMINAL:
            problems = self._problems(name, pods)
            if problems:
                state, reason = "Failed", problems[0]
        elif failed_for_a_deleted_pod(job) and self.on_deleted_pod and self.on_deleted_pod(name):
            self._resubmitted(name)
            return
        elif state == "Failed":
            reason = format_condition(condition(job, "Failed") or {})
        active, succeeded, failed = worker_counts(job)
        row = TFJobRow(name, state, active, succeeded, failed, restarts_of(pods))
        if row.state != self.rows[name].state and self.on_update is None:
            self.out(
                f"TFJob {name}: {row.state} (workers active {active}, succeeded "
                f"{succeeded}, failed {failed}; restarts {row.restarts})"
            )
        self.rows[name] = row
        if state in TERMINAL:
            self.finished[name] = state
        if state == "Failed":
            if reason:
                self.out(f"TFJob {name} failed: {reason}")
            report = tfjob_failure_report(
                self.kube,
                self.namespace,
                name,
                kept_logs=self.kept_logs[name],
                kubectl=self.kubectl,
            )
            self.out(report)

    def _keep_crash_logs(self, name: str, pods: list[Obj]) -> None:
        """The log of each worker's last crashed run, fetched when its container restarts:
        the operator deletes the pods (and their logs) when it fails the job."""
        for pod in pods:
            pod_name, count = name_of(pod), restarts(pod)
            if count <= self.logged_restarts.get(pod_name, 0):
                continue
            self.logged_restarts[pod_name] = count
            fetch = partial(self.kube.logs, pod_name, self.namespace, TF_CONTAINER, previous=True)
            text = safe(fetch, "")  # an API blip costs this log, never the wait
            if text.strip():
                self.kept_logs[name][pod_name] = text

    def _resubmitted(self, name: str) -> None:
        """The caller resubmitted ``name``: watch the new job from its start."""
        self.stuck[name] = Stuck(self.clock, self.limits.stuck_after)
        self.refused_since.pop(name, None)
        self.rows[name] = TFJobRow(name, "Pending")
        for pod in self.pods[name]:
            self.logged_restarts.pop(name_of(pod), None)

    def _problems(self, name: str, pods: list[Obj]) -> list[str]:
        """Why a job that is not over yet will not succeed (crash loop, stuck, unschedulable)."""
        problems = crashlooping(pods, self.limits.max_restarts) + self.stuck[name].update(pods)
        refused = unschedulable(self.kube, self.namespace, pods)
        if not refused:
            self.refused_since.pop(name, None)
            return problems
        now = self.clock.monotonic()
        if now - self.refused_since.setdefault(name, now) >= self.limits.unschedulable_after:
            problems.append(
                f"{refused[0]} (for {secs(self.limits.unschedulable_after)}; a TFJob needs all "
                "its workers running at once: lower --workers, train fewer jobs "
                "at once with --parallel, or give Docker more CPU)"
            )
        return problems

    def timed_out(self, timeout: float, what: str, verdict: Pending) -> WaitError:
        unfinished = [n for n in self.names if n not in self.finished]
        summary = ", ".join(
            f"{n} ({self.rows[n].state}; workers active {self.rows[n].active}, succeeded "
            f"{self.rows[n].succeeded})"
            for n in unfinished
        )
        blocked = [
            b for n in unfinished for b in unschedulable(self.kube, self.namespace, self.pods[n])
        ]
        headline = f"timed out after {secs(timeout)} waiting for {what}; unfinished: {summary}"
        if blocked:
            headline += (
                "\n" + "\n".join(blocked) + "\n(a Pending worker makes the others wait for it "
                "forever)"
            )
        return WaitError(
            headline + api_note(verdict.error),
            "\n".join(
                tfjob_failure_report(self.kube, self.namespace, n, kubectl=self.kubectl)
                for n in unfinished
            ),
            next_step=f"{self.kubectl(f'-n {self.namespace} describe tfjob {unfinished[0]}')}; "
            "if a worker is Pending, lower --workers or give Docker more CPU",
        )


def wait_tfjobs(
    kube: Kube,
    namespace: str,
    names: Sequence[str],
    *,
    timeout: float = 3600.0,
    max_restarts: int = contract.DEFAULT_MAX_RESTARTS,
    interval: float = POLL_S,
    stuck_after: float = STUCK_S,
    clock: Clock = time,
    out: Out = print,
    on_update: Callable[[list[TFJobRow]], Any] | None = None,
    unschedulable_after: float = UNSCHEDULABLE_S,
    on_deleted_pod: Callable[[str], bool] | None = None,
    kubectl: Kubectl,
) -> dict[str, str]:
    """Wait until every TFJob is Succeeded or Failed; return name → "Succeeded"/"Failed".

    A worker in CrashLoopBackOff with more than ``max_restarts`` restarts, stuck pulling its
    image for ``stuck_after`` seconds, or refused by the scheduler for ``unschedulable_after``
    seconds (its peers would wait for it forever), counts as its job failing. The failure
    report of each failed job is printed when it fails (before ``cleanPodPolicy`` removes
    the evidence).
    ``on_update(rows)`` is called whenever a row changed; without it, each job's state
    changes are printed as lines instead. ``on_deleted_pod(name)``, called when the operator
    failed a job for a deleted worker pod, resubmits it and returns True (the wait goes on
    for the new job), or returns False (the job counts as Failed). ``kubectl``: the
    provider's, for the commands the reports and errors name.
    """
    names = list(names)
    what = f"TFJobs {', '.join(names)} in {namespace}"
    limits = _TFJobLimits(max_restarts, stuck_after, unschedulable_after)
    judge = _TFJobsJudge(
        kube, namespace, names, limits, clock, out, on_update, on_deleted_pod, kubectl
    )
    verdict = poll_cluster(
        judge.observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    return outcome(verdict, what, lambda v: judge.timed_out(timeout, what, v), kubectl=kubectl)
