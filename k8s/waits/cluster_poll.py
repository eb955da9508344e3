"""The machinery every cluster wait is built from: ``WaitError``, ``poll_cluster`` (the one poll
loop with the API's blips retried), ``outcome``, the ``Missing`` and ``Stuck`` trackers, and
``retry`` for calls that race a webhook. The waits themselves, beside it in ``k8s.waits``:
``workload_waits`` (Deployments, Jobs), ``isvc_wait`` (InferenceServices), ``tfjobs``,
``argo_status``; each is ``common.poll.poll`` with its own observation and judgement.

Every wait takes a ``Kube`` (``k8s.client.kube``) and a ``clock`` (anything with ``.monotonic()``
and ``.sleep(seconds)``; the real ``time`` module by default, a fake one in tests). A wait prints
a line through ``out`` when what it waits for changes state, never once per poll. Timeouts and
failures raise ``WaitError``: its message says what was waited for, the last seen status, the
evidence and hints (``k8s.waits.diagnose``) and what to run next: every command in it built by
the ``kubectl`` the wait is given (``Provider.kubectl``, which names the context).

Transient API errors while polling (an API server restart, a blip under load) are retried; only
when every call has failed for ``API_GRACE_S`` does a wait give up on them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from common.errors import DistmlError
from common.poll import Clock, Done, Failed, Pending, Verdict, first_line, poll
from k8s.client.kube import KubeError
from k8s.client.objects import (
    STUCK_REASONS,
    Kubectl,
    Obj,
    container_statuses,
    name_of,
    short,
    waiting_reasons,
)
from k8s.waits.diagnose import hints

POLL_S = 2.0  # default polling interval
STUCK_S = 60.0  # a pod in one of STUCK_REASONS for this long will not recover on its own
API_GRACE_S = 30.0  # how long polls may keep failing with KubeError before a wait gives up
MISSING_GRACE_S = 30.0  # how long an awaited object may be missing before a wait gives up

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


def outcome(
    verdict: Verdict, what: str, timed_out: Callable[[Pending], WaitError], *, kubectl: Kubectl
) -> Any:
    """Done → its value; Failed → its WaitError (or, when the API kept failing, one that
    says so); Pending (the deadline passed) → ``timed_out(verdict)``."""
    if isinstance(verdict, Done):
        return verdict.value
    if isinstance(verdict, Failed):
        if isinstance(verdict.cause, WaitError):
            raise verdict.cause
        raise WaitError(
            f"gave up waiting for {what}: {verdict.reason}",
            next_step=f"check that the cluster is up (`{kubectl('get nodes')}`); `invoke up` "
            "starts it when distml made it",
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
    kubectl: Kubectl,
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
        "\n".join(f"hint: {h}" for h in hints(str(last), kubectl)),
        next_step="check the pods of the component it depends on "
        f"(`{kubectl('get pods -A')}`), then re-run the same command",
    ) from last
