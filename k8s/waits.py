"""The waits (Deployments, Jobs, InferenceServices, retried calls; TFJobs in ``k8s.tfjobs``):
each is ``common.poll.poll`` with its own observation and judgement.

Every wait takes a ``Kube`` (``k8s.kube``) and a ``clock`` (anything with ``.monotonic()`` and
``.sleep(seconds)``; the real ``time`` module by default, a fake one in tests). A wait prints a
line through ``out`` when what it waits for changes state, never once per poll. Timeouts and
failures raise ``WaitError``: its message says what was waited for, the last seen status, the
evidence and hints (``k8s.diagnose``) and what to run next.

Transient API errors while polling (an API server restart, a blip under load) are retried;
only when every call has failed for ``API_GRACE_S`` does a wait give up on them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from common.errors import DistmlError
from common.poll import Clock, Done, Failed, Pending, Verdict, api_note, first_line, poll
from k8s.diagnose import (
    deployments_report,
    hints,
    isvc_failure_report,
    isvc_last_status,
    job_report,
    unschedulable,
)
from k8s.kube import Kube, KubeError
from k8s.objects import (
    DEPLOYMENT_API,
    ISVC_API,
    ISVC_LABEL,
    JOB_API,
    STUCK_REASONS,
    Obj,
    condition,
    container_statuses,
    format_condition,
    is_true,
    job_pods,
    name_of,
    observed,
    pod_state,
    predictor_pods,
    short,
    status_of,
    waiting_reasons,
)

POLL_S = 2.0  # default polling interval
STUCK_S = 60.0  # a pod in one of STUCK_REASONS for this long will not recover on its own
API_GRACE_S = 30.0  # how long polls may keep failing with KubeError before a wait gives up
MISSING_GRACE_S = 30.0  # how long an awaited object may be missing before a wait gives up
CRASHLOOP_RESTARTS = 3  # a predictor that crashed this often will not come up by itself

T = TypeVar("T")
Out = Callable[[str], Any]


class WaitError(DistmlError):
    """A wait timed out or saw a failure; the message carries the diagnostics and next step."""

    def __init__(self, message: str, diagnostics: str = "", next_step: str = "") -> None:
        self.headline = message
        self.diagnostics = diagnostics.strip("\n")
        self.next_step = next_step
        parts = [message]
        if self.diagnostics:
            parts.append(self.diagnostics)
        if next_step:
            parts.append(f"next: {next_step}")
        super().__init__("\n".join(parts))


# --------------------------------------------------------------------------- machinery


def secs(seconds: float) -> str:
    return f"{seconds:.0f}s"


def fail_with(error: WaitError) -> Failed:
    """A judgement that the wait failed, carrying the error the wait raises."""
    return Failed(error.headline, cause=error)


def poll_cluster(
    observe: Callable[[], Any],
    judge: Callable[[Any], Verdict],
    *,
    what: str,
    timeout: float,
    interval: float,
    clock: Clock,
    out: Out,
) -> Verdict:
    """``poll`` with the cluster API's blips retried for ``API_GRACE_S``."""
    return poll(
        observe,
        judge,
        timeout=timeout,
        interval=interval,
        clock=clock,
        on_change=out,
        retry_on=(KubeError,),
        retry_for=API_GRACE_S,
        what=what,
    )


def outcome(verdict: Verdict, what: str, timed_out: Callable[[Pending], WaitError]) -> Any:
    """Done → its value; Failed → its WaitError (or, when the API kept failing, one that
    says so); Pending (the deadline passed) → ``timed_out(verdict)``."""
    if isinstance(verdict, Done):
        return verdict.value
    if isinstance(verdict, Failed):
        if isinstance(verdict.cause, WaitError):
            raise verdict.cause
        raise WaitError(
            f"gave up waiting for {what}: {verdict.reason}",
            next_step="check that the cluster is up (`kubectl get nodes`); `invoke up` starts it",
        ) from verdict.cause
    raise timed_out(verdict)


class Missing:
    """An awaited object that does not exist: fine for a moment, an error after a grace."""

    def __init__(self, clock: Clock, grace: float = MISSING_GRACE_S) -> None:
        self.clock, self.grace = clock, grace
        self.since: dict[str, float] = {}

    def check(self, key: str, present: bool) -> bool:
        """True when ``key`` has now been missing for longer than the grace."""
        if present:
            self.since.pop(key, None)
            return False
        now = self.clock.monotonic()
        return now - self.since.setdefault(key, now) > self.grace


class Stuck:
    """Tracks how long each pod container has been in one of STUCK_REASONS."""

    def __init__(self, clock: Clock, after: float = STUCK_S) -> None:
        self.clock, self.after = clock, after
        self.since: dict[tuple[str, str, str], float] = {}

    def update(self, pods: Iterable[Obj]) -> list[str]:
        """Descriptions of containers stuck for longer than ``after`` seconds."""
        now = self.clock.monotonic()
        seen, stuck = set(), []
        for pod in pods:
            for cname, reason, message in waiting_reasons(pod):
                if reason not in STUCK_REASONS:
                    continue
                key = (name_of(pod), cname, reason)
                seen.add(key)
                since = self.since.setdefault(key, now)
                if now - since >= self.after:
                    text = (
                        f"pod {key[0]} container {cname} has been in {reason} "
                        f"for {now - since:.0f}s"
                    )
                    stuck.append(text + (f": {short(message)}" if message else ""))
        for key in set(self.since) - seen:
            del self.since[key]
        return stuck


def crashlooping(pods: Iterable[Obj], max_restarts: int) -> list[str]:
    found = []
    for pod in pods:
        for cs in container_statuses(pod):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            count = int(cs.get("restartCount") or 0)
            if waiting.get("reason") == "CrashLoopBackOff" and count > max_restarts:
                found.append(
                    f"pod {name_of(pod)} container {cs.get('name')} is in CrashLoopBackOff after "
                    f"{count} restarts (allowed: {max_restarts})"
                )
    return found


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
            deployments_report(kube, namespace, seen or {}),
            next_step=f"kubectl -n {namespace} get pods; kubectl -n {namespace} describe "
            f"deployment {first}".rstrip(),
        )

    verdict = poll_cluster(
        observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    if isinstance(verdict, Done):
        out(f"{namespace}: {_deployments_status(seen or {})}")
    return outcome(verdict, what, timed_out)


# --------------------------------------------------------------------------- Jobs


class _JobJudge:
    """Complete → Done(job); Failed, missing or stuck → Failed; else the pods' states."""

    def __init__(
        self, kube: Kube, namespace: str, name: str, tail: int, stuck_after: float, clock: Clock
    ) -> None:
        self.kube, self.namespace, self.name, self.tail = kube, namespace, name, tail
        self.clock, self.start = clock, clock.monotonic()
        self.stuck, self.missing = Stuck(clock, stuck_after), Missing(clock)
        self.job: Obj | None = None
        self.pods: list[Obj] = []
        self.status = "not seen yet"
        self.final = ""  # the line to print when the job ended
        self.next_step = (
            f"kubectl -n {namespace} describe job {name}; kubectl -n {namespace} logs job/{name}"
        )

    def observe(self) -> tuple[Obj | None, list[Obj]]:
        return (
            self.kube.get(JOB_API, "Job", self.name, self.namespace),
            job_pods(self.kube, self.namespace, self.name),
        )

    def report(self) -> str:
        return job_report(self.kube, self.namespace, self.name, self.job, self.pods, self.tail)

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
                    next_step=f"kubectl -n {self.namespace} get jobs",
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
) -> Obj:
    """Wait for the batch/v1 Job to be Complete; return it. Failed, stuck or timed out →
    WaitError with its conditions, pod states, events and log tail."""
    what = f"Job {namespace}/{name} to complete"
    judge = _JobJudge(kube, namespace, name, tail, stuck_after, clock)
    verdict = poll_cluster(
        judge.observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    if judge.final:
        out(judge.final)
    return outcome(verdict, what, lambda v: judge.timed_out(timeout, what, v))


# --------------------------------------------------------------------------- InferenceService


class _IsvcJudge:
    """Ready (for the latest spec) → Done(url); missing or a stuck predictor → Failed."""

    def __init__(
        self, kube: Kube, namespace: str, name: str, stuck_after: float, clock: Clock
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.clock, self.start = clock, clock.monotonic()
        self.stuck, self.missing = Stuck(clock, stuck_after), Missing(clock)
        self.status = "not seen yet"
        self.next_step = (
            f"kubectl -n {namespace} describe inferenceservice {name}; "
            f"kubectl -n {namespace} get pods -l {ISVC_LABEL}={name}"
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
                    next_step=f"kubectl -n {self.namespace} get inferenceservices; "
                    "`invoke serve` creates it",
                )
            )
        stuck = self.stuck.update(pods) + crashlooping(pods, CRASHLOOP_RESTARTS)
        if stuck:
            report = isvc_failure_report(self.kube, self.namespace, self.name)
            return fail_with(WaitError(f"{ref} is stuck: {stuck[0]}", report, self.next_step))
        self.status = _isvc_status(isvc)
        return Pending(f"InferenceService {self.name}: {self.status}")

    def timed_out(self, timeout: float, what: str, verdict: Pending) -> WaitError:
        last = isvc_last_status(self.kube, self.namespace, self.name) or self.status
        return WaitError(
            f"timed out after {secs(timeout)} waiting for {what}; last status: {last}"
            + api_note(verdict.error),
            isvc_failure_report(self.kube, self.namespace, self.name),
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
) -> str:
    """Wait for the InferenceService's condition Ready == "True"; return its ``status.url``."""
    what = f"InferenceService {namespace}/{name} to be Ready"
    judge = _IsvcJudge(kube, namespace, name, stuck_after, clock)
    verdict = poll_cluster(
        judge.observe, judge, what=what, timeout=timeout, interval=interval, clock=clock, out=out
    )
    if isinstance(verdict, Done):
        out(f"InferenceService {name}: Ready at {verdict.value}")
    return outcome(verdict, what, lambda v: judge.timed_out(timeout, what, v))


# --------------------------------------------------------------------------- retry


def retry(
    fn: Callable[[], T],
    *,
    what: str,
    timeout: float = 120.0,
    interval: float = POLL_S,
    clock: Clock = time,
    out: Out = print,
    retry_on: tuple[type[BaseException], ...] = (KubeError,),
) -> T:
    """Call ``fn`` until it does not raise one of ``retry_on`` (webhook races: cert-manager,
    the training-operator's validating webhook); one line per retry; WaitError after
    ``timeout`` with the last error. An exception with a true ``permanent`` attribute is
    raised at once: retrying cannot fix it."""
    start = clock.monotonic()
    attempts = 0
    last: BaseException | None = None

    def attempt() -> Done[T] | BaseException:
        nonlocal attempts
        attempts += 1
        try:
            return Done(fn())
        except retry_on as exc:
            if getattr(exc, "permanent", False):
                raise
            return exc

    def judge(outcome: Done[T] | BaseException) -> Verdict:
        nonlocal last
        if isinstance(outcome, Done):
            return outcome
        last = outcome
        if clock.monotonic() - start >= timeout:
            return Failed("the deadline passed", cause=outcome)  # no "retry" line for it
        return Pending(
            f"{what}: not ready yet ({first_line(outcome)}); retry {attempts} in {interval:g}s"
        )

    verdict = poll(attempt, judge, timeout=timeout, interval=interval, clock=clock, on_change=out)
    if isinstance(verdict, Done):
        return verdict.value
    raise WaitError(
        f"gave up on {what} after {secs(clock.monotonic() - start)} and {attempts} attempts; "
        f"last error: {last}",
        "\n".join(f"hint: {h}" for h in hints(str(last))),
        next_step="check the pods of the component it depends on "
        "(`kubectl get pods -A`), then re-run the same command",
    ) from last
