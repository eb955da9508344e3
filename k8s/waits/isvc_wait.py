"""The wait for a KServe InferenceService to be Ready for its latest spec (``serve``,
``deploy``): fails early on a missing service or a stuck or crash-looping predictor.
Built on ``k8s.waits.cluster_poll``."""

from __future__ import annotations

import time

from common.poll import Clock, Done, Pending, Verdict, api_note
from k8s.client.kube import Kube
from k8s.client.objects import (
    ISVC_API,
    ISVC_LABEL,
    Kubectl,
    Obj,
    condition,
    is_true,
    observed,
    predictor_pods,
    status_of,
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
from k8s.waits.diagnose import isvc_failure_report, isvc_last_status

CRASHLOOP_RESTARTS = 3  # a predictor that crashed this often will not come up by itself


class _IsvcJudge:
    """Ready (for the latest spec) → Done(url); missing or a stuck predictor → Failed."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        stuck_after: float,
        clock: Clock,
        kubectl: Kubectl,
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.kubectl = kubectl
        self.clock, self.start = clock, clock.monotonic()
        self.stuck, self.missing = Stuck(clock, stuck_after), Missing(clock)
        self.status = "not seen yet"
        self.next_step = (
            f"{kubectl(f'-n {namespace} describe inferenceservice {name}')}; "
            + kubectl(f"-n {namespace} get pods -l {ISVC_LABEL}={name}")
        )

    def observe(self) -> tuple[Obj | None, list[Obj]]:
        isvc = self.kube.get(ISVC_API, "InferenceService", self.name, self.namespace)
        if _ready(isvc):
            return isvc, []
        return isvc, predictor_pods(self.kube, self.namespace, self.name)

    def __call__(self, observation: tuple[Obj | None, list[Obj]]) -> Verdict:
        isvc, pods = observation
        ref = f"InferenceService {self.namespace}/{self.name}"
        if _ready(isvc):
            return Done(str(status_of(isvc).get("url") or ""))
        if self.missing.check(self.name, isvc is not None):
            waited = secs(self.clock.monotonic() - self.start)
            return fail_with(
                WaitError(
                    f"{ref} does not exist (waited {waited})",
                    next_step=f"{self.kubectl(f'-n {self.namespace} get inferenceservices')}; "
                    "`invoke serve` creates it",
                )
            )
        stuck = self.stuck.update(pods) + crashlooping(pods, CRASHLOOP_RESTARTS)
        if stuck:
            report = self.report()
            return fail_with(WaitError(f"{ref} is stuck: {stuck[0]}", report, self.next_step))
        self.status = _isvc_status(isvc)
        return Pending(f"InferenceService {self.name}: {self.status}")

    def report(self) -> str:
        return isvc_failure_report(self.kube, self.namespace, self.name, kubectl=self.kubectl)

    def timed_out(self, timeout: float, what: str, verdict: Pending) -> WaitError:
        last = isvc_last_status(self.kube, self.namespace, self.name) or self.status
        return WaitError(
            f"timed out after {secs(timeout)} waiting for {what}; last status: {last}"
            + api_note(verdict.error),
            self.report(),
            next_step=self.next_step,
        )


def _ready(isvc: Obj | None) -> bool:
    return is_true(isvc, "Ready") and observed(isvc)


def _isvc_status(isvc: Obj | None) -> str:
    ready = condition(isvc, "Ready")
    if isvc is None:
        return "not found yet"
    if not observed(isvc):
        return "the controller has not reconciled the latest change yet"
    if ready is None:
        return "no Ready condition yet"
    return f"Ready={ready.get('status')}" + (
        f" ({ready.get('reason')})" if ready.get("reason") else ""
    )


def wait_isvc_ready(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    timeout: float = 600.0,
    interval: float = POLL_S,
    stuck_after: float = STUCK_S,
    clock: Clock = time,
    out: Out = print,
    kubectl: Kubectl,
) -> str:
    """Wait for the InferenceService's condition Ready == "True"; return its ``status.url``.
    ``kubectl``: the provider's, for the commands the error names."""
    what = f"InferenceService {namespace}/{name} to be Ready"
    judge = _IsvcJudge(kube, namespace, name, stuck_after, clock, kubectl)
    verdict = poll_cluster(
        judge.observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    if isinstance(verdict, Done):
        out(f"InferenceService {name}: Ready at {verdict.value}")
    return outcome(verdict, what, lambda v: judge.timed_out(timeout, what, v), kubectl=kubectl)
