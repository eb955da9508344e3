"""Polling waits with a deadline, and the diagnostics a user needs when one fails.

Every wait takes a ``Kube`` (``k8s.kube``) and a ``clock`` (anything with ``.monotonic()`` and
``.sleep(seconds)``; the real ``time`` module by default, a fake one in tests). A wait prints a
line through ``out`` when what it waits for changes state, never once per poll. Timeouts and
failures raise ``WaitError``: its message says what was waited for, the last seen status, the
evidence (conditions, pod states, events, log tails), hints for the known pitfalls
(``shared/CLUSTER-PITFALLS.md``) and what to run next.

Transient API errors while polling (an API server restart, a blip under load) are retried;
only when every call has failed for ``API_GRACE_S`` does a wait give up on them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from common.errors import DistmlError
from k8s.kube import Kube, KubeError

POLL_S = 2.0  # default polling interval
STUCK_S = 60.0  # a pod in one of STUCK_REASONS for this long will not recover on its own
UNSCHEDULABLE_S = 300.0  # a worker the scheduler keeps refusing: its job cannot progress
API_GRACE_S = 30.0  # how long polls may keep failing with KubeError before a wait gives up
MISSING_GRACE_S = 30.0  # how long an awaited object may be missing before a wait gives up
EVENTS_SHOWN = 8

DEPLOYMENT_API = "apps/v1"
JOB_API = "batch/v1"
TFJOB_API = "kubeflow.org/v1"
ISVC_API = "serving.kserve.io/v1beta1"
KNATIVE_API = "serving.knative.dev/v1"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
TFJOB_LABELS = ("training.kubeflow.org/job-name", "job-name")  # v1.9 labels, then the old ones
TF_CONTAINER = "tensorflow"
PREDICTOR_CONTAINER = "kserve-container"

# Waiting reasons that do not fix themselves: fail early instead of waiting out the deadline.
STUCK_REASONS = (
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
)
# Waiting reasons of a healthy pod that is just starting.
STARTING_REASONS = ("ContainerCreating", "PodInitializing")
TFJOB_STATES = ("Created", "Running", "Restarting", "Succeeded", "Failed")
TERMINAL = ("Succeeded", "Failed")

T = TypeVar("T")


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


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


# --------------------------------------------------------------------------- object helpers


def _status(obj: dict[str, Any] | None) -> dict[str, Any]:
    return ((obj or {}).get("status")) or {}


def _name(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name", "?")


def conditions(obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list(_status(obj).get("conditions") or [])


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The last condition of ``type_`` (None when absent)."""
    found = None
    for cond in conditions(obj):
        if cond.get("type") == type_:
            found = cond
    return found


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    cond = condition(obj, type_)
    return cond is not None and str(cond.get("status")) == "True"


def format_condition(cond: dict[str, Any]) -> str:
    text = f"{cond.get('type')}={cond.get('status')}"
    reason, message = cond.get("reason"), (cond.get("message") or "").strip()
    if reason and message:
        text += f" ({reason}: {message})"
    elif reason or message:
        text += f" ({reason or message})"
    return text


def _indent(lines: Iterable[str], by: int) -> list[str]:
    pad = " " * by
    return [pad + line for line in lines]


def _conditions_lines(obj: dict[str, Any] | None) -> list[str]:
    conds = conditions(obj)
    if not conds:
        return ["conditions: none yet"]
    return ["conditions:", *_indent((format_condition(c) for c in conds), 2)]


def _container_statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    status = _status(pod)
    return list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )


def waiting_reasons(pod: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(container, reason, message)`` for each container that is waiting."""
    found = []
    for cs in _container_statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            found.append(
                (
                    cs.get("name", "?"),
                    waiting.get("reason") or "Waiting",
                    waiting.get("message") or "",
                )
            )
    return found


def restarts(pod: dict[str, Any]) -> int:
    return sum(int(cs.get("restartCount") or 0) for cs in _container_statuses(pod))


def pod_ready(pod: dict[str, Any]) -> bool:
    """Running, condition Ready=True, and not being deleted."""
    return (
        _status(pod).get("phase") == "Running"
        and is_true(pod, "Ready")
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def _terminating(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_summary(pod: dict[str, Any]) -> str:
    """One line: phase, unschedulable reason, container states, restarts."""
    phase = _status(pod).get("phase") or "Unknown"
    parts = [phase + (" (terminating)" if _terminating(pod) else "")]
    if phase == "Running" and not is_true(pod, "Ready"):
        parts.append("not ready")
    scheduled = condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        parts.append(f"unschedulable: {scheduled.get('message') or scheduled.get('reason')}")
    for cs in _container_statuses(pod):
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        cname = cs.get("name", "?")
        if state.get("waiting"):
            waiting = state["waiting"]
            text = f"{cname}: {waiting.get('reason') or 'Waiting'}"
            if waiting.get("message"):
                text += f" ({_short(waiting['message'])})"
            parts.append(text)
        elif state.get("terminated"):
            term = state["terminated"]
            code = term.get("exitCode")
            parts.append(f"{cname}: terminated ({term.get('reason') or '?'}, exit code {code})")
        if last.get("terminated"):
            term = last["terminated"]
            parts.append(
                f"{cname} last exit: {term.get('reason') or '?'}, exit code {term.get('exitCode')}"
            )
        if cs.get("restartCount"):
            parts.append(f"{cname} restarts: {cs['restartCount']}")
    return "; ".join(parts)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def scheduling_message(kube: Kube, namespace: str, pod: dict[str, Any]) -> str:
    """Why a Pending pod is not scheduled ('' when nothing says so)."""
    scheduled = condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        message = scheduled.get("message") or scheduled.get("reason") or ""
        if message:
            return _short(message)
    failed = [
        e for e in kube.events(namespace, _name(pod)) if e.get("reason") == "FailedScheduling"
    ]
    return _short(failed[-1].get("message") or "") if failed else ""


def _event_line(event: dict[str, Any]) -> str:
    count = event.get("count") or 1
    line = f"{event.get('type') or 'Normal'} {event.get('reason') or '?'}: "
    line += _short(event.get("message") or "")
    return line + (f" (x{count})" if count > 1 else "")


def _events_lines(kube: Kube, namespace: str, name: str, limit: int = EVENTS_SHOWN) -> list[str]:
    events = _safe(lambda: kube.events(namespace, name), [])
    if not events:
        return []
    return ["events:", *_indent((_event_line(e) for e in events[-limit:]), 2)]


def _log_lines(kube: Kube, pod: str, namespace: str, container: str | None, tail: int) -> list[str]:
    text = _safe(lambda: kube.logs(pod, namespace, container=container, tail=tail), "")
    lines = text.rstrip("\n").splitlines()[-tail:] if text else []
    if not lines:
        return []
    return [f"log tail ({container or 'default container'}):", *_indent(lines, 2)]


def _safe(fn: Callable[[], T], default: T) -> T:
    """Diagnostics must never hide the original problem behind a second API error."""
    try:
        return fn()
    except KubeError:
        return default


def _pod_is_troubled(pod: dict[str, Any]) -> bool:
    phase = _status(pod).get("phase")
    if phase in ("Pending", "Failed", "Unknown"):
        return True
    if any(reason not in STARTING_REASONS for _, reason, _ in waiting_reasons(pod)):
        return True
    for cs in _container_statuses(pod):
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode") not in (0, None):
            return True
    return restarts(pod) > 0


def _pod_report(
    kube: Kube,
    namespace: str,
    pod: dict[str, Any],
    *,
    container: str | None,
    tail: int,
    detail: bool,
) -> list[str]:
    lines = [f"pod {_name(pod)}: {pod_summary(pod)}"]
    if detail:
        lines += _indent(_events_lines(kube, namespace, _name(pod)), 2)
        if _status(pod).get("phase") != "Pending":
            lines += _indent(_log_lines(kube, _name(pod), namespace, container, tail), 2)
    return lines


def _pods(kube: Kube, namespace: str, selectors: Sequence[str]) -> list[dict[str, Any]]:
    """Pods matching any of the selectors, each once, by name."""
    found: dict[str, dict[str, Any]] = {}
    for selector in selectors:
        for pod in kube.list("v1", "Pod", namespace, label_selector=selector):
            found.setdefault(_name(pod), pod)
    return [found[n] for n in sorted(found)]


# Known pitfalls: any of these patterns in the diagnostics → what to do about it.
HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("insufficient cpu",),
        "not enough free CPU for a pod: lower --workers / --max-replicas, or give Docker "
        "more CPU (Docker Desktop: Settings → Resources)",
    ),
    (
        ("insufficient memory",),
        "not enough free memory for a pod: lower --workers / --max-replicas, or give Docker "
        "more memory",
    ),
    (
        ("volume node affinity conflict",),
        "the ReadWriteOnce local-path volume is pinned to the node of its first consumer: use a "
        "single-node cluster (or ReadWriteMany storage)",
    ),
    (
        ("unbound immediate persistentvolumeclaims", 'persistentvolumeclaim "'),
        "a PersistentVolumeClaim the pod mounts is missing or unbound: check it and its "
        "StorageClass (`kubectl get pvc,storageclass -A`)",
    ),
    (
        ("didn't have free ports",),
        "a host port is taken (k3s's Traefik/ServiceLB on 80/443): recreate the cluster with "
        "`invoke down` then `invoke up` (Traefik disabled)",
    ),
    (
        ("imagepullbackoff", "errimagepull", "errimageneverpull"),
        "the node cannot find the image: re-import it into the cluster (`invoke image`), never "
        "with a :latest tag (that forces a registry pull); check with "
        "`docker exec <node> crictl images`",
    ),
    (
        ("createcontainerconfigerror",),
        "a ConfigMap or Secret the pod references is missing (see the message above)",
    ),
    (
        ("resolve image to digest", "unable to fetch image"),
        "Knative cannot resolve the locally imported image to a digest: add its registry to "
        "`registries-skipping-tag-resolving` in the knative-serving config-deployment ConfigMap "
        "(or reference the image by digest)",
    ),
    (
        ("ingressnotconfigured",),
        "Knative's ingress is not configured: net-istio or the Istio ingress gateway is not ready "
        "(`kubectl -n knative-serving get pods`, `kubectl -n istio-system get pods`)",
    ),
    (
        ("exec format error",),
        "the image is built for another CPU architecture (tensorflow/serving is amd64-only): use "
        "the project's own predictor image",
    ),
    (
        ("oomkilled",),
        "a container ran out of memory: raise its memory limit or lower the batch size",
    ),
    (("crashloopbackoff",), "a container keeps crashing: its log tail above says why"),
    (
        ("connection refused", "x509"),
        "a webhook or service is not accepting connections yet: wait a moment and retry",
    ),
)


def hints(text: str) -> list[str]:
    """The hints whose patterns occur in ``text`` (case-insensitive), in table order."""
    low = text.lower()
    return [hint for patterns, hint in HINTS if any(p in low for p in patterns)]


def _with_hints(lines: list[str]) -> str:
    text = "\n".join(lines)
    found = hints(text)
    if found:
        text += "\nhints:\n" + "\n".join(f"  - {h}" for h in found)
    return text


# --------------------------------------------------------------------------- loop machinery


class _Deadline:
    def __init__(self, clock: Clock, timeout: float, interval: float) -> None:
        self.clock = clock
        self.start = clock.monotonic()
        self.end = self.start + timeout
        self.interval = interval

    def elapsed(self) -> float:
        return self.clock.monotonic() - self.start

    def expired(self) -> bool:
        return self.clock.monotonic() >= self.end

    def sleep(self) -> None:
        self.clock.sleep(max(0.0, min(self.interval, self.end - self.clock.monotonic())))


class _Progress:
    """Prints a line only when it differs from the previous one."""

    def __init__(self, out: Out) -> None:
        self.out = out
        self.last: str | None = None

    def update(self, line: str) -> None:
        if line != self.last:
            self.last = line
            self.out(line)


class _ApiErrors:
    """Tolerates KubeErrors while polling, until they have lasted ``API_GRACE_S``."""

    def __init__(self, clock: Clock, out: Out, what: str, grace: float = API_GRACE_S) -> None:
        self.clock, self.out, self.what, self.grace = clock, out, what, grace
        self.since: float | None = None
        self.last: KubeError | None = None

    def ok(self) -> None:
        self.since = None

    def failed(self, exc: KubeError) -> None:
        now = self.clock.monotonic()
        self.last = exc
        if self.since is None:
            self.since = now
            self.out(f"{self.what}: API call failed, retrying: {_first_line(exc)}")
        elif now - self.since >= self.grace:
            raise WaitError(
                f"gave up waiting for {self.what}: the cluster API kept failing for "
                f"{now - self.since:.0f}s: {exc}",
                next_step="check that the cluster is up (`kubectl get nodes`); `invoke up` "
                "starts it",
            ) from exc

    def note(self) -> str:
        return f" (last API error: {_first_line(self.last)})" if self.last else ""


class _Missing:
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


class _Stuck:
    """Tracks how long each pod container has been in one of STUCK_REASONS."""

    def __init__(self, clock: Clock, after: float = STUCK_S) -> None:
        self.clock, self.after = clock, after
        self.since: dict[tuple[str, str, str], float] = {}

    def update(self, pods: Iterable[dict[str, Any]]) -> list[str]:
        """Descriptions of containers stuck for longer than ``after`` seconds."""
        now = self.clock.monotonic()
        seen, stuck = set(), []
        for pod in pods:
            for cname, reason, message in waiting_reasons(pod):
                if reason not in STUCK_REASONS:
                    continue
                key = (_name(pod), cname, reason)
                seen.add(key)
                since = self.since.setdefault(key, now)
                if now - since >= self.after:
                    text = (
                        f"pod {key[0]} container {cname} has been in {reason} "
                        f"for {now - since:.0f}s"
                    )
                    stuck.append(text + (f": {_short(message)}" if message else ""))
        for key in set(self.since) - seen:
            del self.since[key]
        return stuck


def _first_line(exc: BaseException | None) -> str:
    text = str(exc or "").strip()
    return _short(text.splitlines()[0] if text else type(exc).__name__, 240)


def _secs(seconds: float) -> str:
    return f"{seconds:.0f}s"


# --------------------------------------------------------------------------- Deployments


def _deployment_pods(kube: Kube, namespace: str, dep: dict[str, Any]) -> list[dict[str, Any]]:
    match = (((dep.get("spec") or {}).get("selector")) or {}).get("matchLabels") or {}
    if not match:
        return []
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    return kube.list("v1", "Pod", namespace, label_selector=selector)


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
    if names:
        scope = ", ".join(names)
    elif label_selector:
        scope = f"matching {label_selector}"
    else:
        scope = "all"
    what = f"Deployments in {namespace} ({scope}) to be Available"
    deadline = _Deadline(clock, timeout, interval)
    progress, api = _Progress(out), _ApiErrors(clock, out, what)
    found: dict[str, dict[str, Any] | None] = {}
    status = "nothing seen yet"
    while True:
        try:
            if names:
                found = {n: kube.get(DEPLOYMENT_API, "Deployment", n, namespace) for n in names}
            else:
                items = kube.list(DEPLOYMENT_API, "Deployment", namespace, label_selector)
                found = {_name(d): d for d in items}
            api.ok()
        except KubeError as exc:
            api.failed(exc)
        else:
            waiting = [n for n, d in found.items() if not is_true(d, "Available")]
            if found and not waiting:
                progress.update(f"{namespace}: {len(found)}/{len(found)} Deployments available")
                return sorted(found)
            if not found:
                status = "no Deployment found yet"
            else:
                status = (
                    f"{len(found) - len(waiting)}/{len(found)} Deployments available; "
                    f"waiting for {', '.join(sorted(waiting))}"
                )
            progress.update(f"{namespace}: {status}")
        if deadline.expired():
            break
        deadline.sleep()

    lines: list[str] = []
    waiting = sorted(n for n, d in found.items() if not is_true(d, "Available"))
    for name in waiting:
        dep = found[name]
        if dep is None:
            lines.append(f"Deployment {namespace}/{name}: not found")
            continue
        st = _status(dep)
        lines.append(
            f"Deployment {namespace}/{name}: {st.get('readyReplicas') or 0}/"
            f"{(dep.get('spec') or {}).get('replicas', 1)} ready"
        )
        lines += _indent(_conditions_lines(dep), 2)
        for pod in _safe(lambda dep=dep: _deployment_pods(kube, namespace, dep), []):
            if pod_ready(pod):
                continue
            lines += _indent([f"pod {_name(pod)}: {pod_summary(pod)}"], 2)
            lines += _indent(_events_lines(kube, namespace, _name(pod), limit=4), 4)
    first = waiting[0] if waiting else ""
    raise WaitError(
        f"timed out after {_secs(timeout)} waiting for {what}; last status: {status}" + api.note(),
        _with_hints(lines),
        next_step=f"kubectl -n {namespace} get pods; kubectl -n {namespace} describe deployment "
        f"{first}".rstrip(),
    )


# --------------------------------------------------------------------------- Jobs


def _job_pods(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return _pods(kube, namespace, (f"job-name={name}", f"batch.kubernetes.io/job-name={name}"))


def _job_report(
    kube: Kube,
    namespace: str,
    name: str,
    job: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    tail: int,
) -> str:
    lines = [f"Job {namespace}/{name}:" + ("" if job else " not found")]
    if job:
        st = _status(job)
        lines += _indent(_conditions_lines(job), 2)
        lines.append(
            f"  pods: active {st.get('active') or 0}, succeeded {st.get('succeeded') or 0}, "
            f"failed {st.get('failed') or 0}"
        )
    for pod in pods:
        lines += _indent(
            _pod_report(kube, namespace, pod, container=None, tail=tail, detail=True), 2
        )
    if not pods:
        lines.append("  no pods")
    lines += _indent(_events_lines(kube, namespace, name), 2)
    return _with_hints(lines)


def _unschedulable(kube: Kube, namespace: str, pods: Iterable[dict[str, Any]]) -> list[str]:
    """``pod X cannot be scheduled: <why>`` for each Pending pod the scheduler refused."""
    found = []
    for pod in pods:
        if _status(pod).get("phase") != "Pending" or _terminating(pod):
            continue
        message = _safe(lambda pod=pod: scheduling_message(kube, namespace, pod), "")
        if message:
            found.append(f"pod {_name(pod)} cannot be scheduled: {message}")
    return found


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
) -> dict[str, Any]:
    """Wait for the batch/v1 Job to be Complete; return it. Failed, stuck or timed out →
    WaitError with its conditions, pod states, events and log tail."""
    what = f"Job {namespace}/{name} to complete"
    deadline = _Deadline(clock, timeout, interval)
    progress, api = _Progress(out), _ApiErrors(clock, out, what)
    stuck, missing = _Stuck(clock, stuck_after), _Missing(clock)
    job: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = []
    status = "not seen yet"
    next_step = (
        f"kubectl -n {namespace} describe job {name}; kubectl -n {namespace} logs job/{name}"
    )
    while True:
        try:
            job = kube.get(JOB_API, "Job", name, namespace)
            pods = _job_pods(kube, namespace, name)
            api.ok()
        except KubeError as exc:
            api.failed(exc)
        else:
            if is_true(job, "Complete"):
                progress.update(f"Job {name}: Complete")
                assert job is not None
                return job
            if is_true(job, "Failed"):
                cond = condition(job, "Failed") or {}
                progress.update(f"Job {name}: Failed")
                raise WaitError(
                    f"Job {namespace}/{name} failed: {format_condition(cond)}",
                    _job_report(kube, namespace, name, job, pods, tail),
                    next_step=next_step,
                )
            if missing.check(name, job is not None):
                raise WaitError(
                    f"Job {namespace}/{name} does not exist (waited {_secs(deadline.elapsed())})",
                    next_step=f"kubectl -n {namespace} get jobs",
                )
            stuck_now = stuck.update(pods)
            if stuck_now:
                raise WaitError(
                    f"Job {namespace}/{name} is stuck: {stuck_now[0]}",
                    _job_report(kube, namespace, name, job, pods, tail),
                    next_step=next_step,
                )
            status = _job_status(job, pods)
            progress.update(f"Job {name}: {status}")
        if deadline.expired():
            break
        deadline.sleep()

    blocked = _unschedulable(kube, namespace, pods)
    headline = f"timed out after {_secs(timeout)} waiting for {what}; last status: {status}"
    if blocked:
        headline += "\n" + "\n".join(blocked)
    raise WaitError(
        headline + api.note(),
        _job_report(kube, namespace, name, job, pods, tail),
        next_step=next_step,
    )


def _job_status(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> str:
    if job is None:
        return "not found yet"
    if not pods:
        return "no pods yet"
    return ", ".join(f"pod {_name(p)} {_pod_state(p)}" for p in pods)


def _pod_state(pod: dict[str, Any]) -> str:
    """A short, stable state for progress lines: a waiting reason, else the phase."""
    reasons = [reason for _, reason, _ in waiting_reasons(pod)]
    return reasons[0] if reasons else (_status(pod).get("phase") or "Unknown")


# --------------------------------------------------------------------------- TFJobs


@dataclass(frozen=True)
class TFJobRow:
    """One line of the live training status."""

    name: str
    state: str  # Pending (no condition yet), Created, Running, Restarting, Succeeded, Failed
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    restarts: int = 0


def tfjob_state(job: dict[str, Any] | None) -> str:
    """Succeeded/Failed when one is True, else the last True condition, else Pending."""
    if job is None:
        return "NotFound"
    true = [c.get("type") for c in conditions(job) if str(c.get("status")) == "True"]
    true = [t for t in true if t in TFJOB_STATES]
    terminal = [t for t in true if t in TERMINAL]
    if terminal:
        return str(terminal[-1])
    return str(true[-1]) if true else "Pending"


def tfjob_pods(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    """The TFJob's pods (v1.9 ``training.kubeflow.org/job-name``, or old ``job-name`` labels,
    but not a batch Job's pods)."""
    pods = _pods(kube, namespace, [f"{label}={name}" for label in TFJOB_LABELS])
    return [
        p
        for p in pods
        if not any(
            ref.get("kind") == "Job"
            for ref in (p.get("metadata") or {}).get("ownerReferences") or []
        )
    ]


def _worker_counts(job: dict[str, Any] | None) -> tuple[int, int, int]:
    worker = (_status(job).get("replicaStatuses") or {}).get("Worker") or {}
    return (
        int(worker.get("active") or 0),
        int(worker.get("succeeded") or 0),
        int(worker.get("failed") or 0),
    )


def _crashlooping(pods: Iterable[dict[str, Any]], max_restarts: int) -> list[str]:
    found = []
    for pod in pods:
        for cs in _container_statuses(pod):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            count = int(cs.get("restartCount") or 0)
            if waiting.get("reason") == "CrashLoopBackOff" and count > max_restarts:
                found.append(
                    f"pod {_name(pod)} container {cs.get('name')} is in CrashLoopBackOff after "
                    f"{count} restarts (allowed: {max_restarts})"
                )
    return found


def tfjob_failure_report(kube: Kube, namespace: str, name: str, tail: int = 40) -> str:
    """The TFJob's conditions and replica counts; for each failing or Pending pod its phase,
    container states, recent events and log tail (container ``tensorflow``); the job's events."""
    job = _safe(lambda: kube.get(TFJOB_API, "TFJob", name, namespace), None)
    lines = [f"TFJob {namespace}/{name}: {tfjob_state(job)}"]
    if job is not None:
        lines += _indent(_conditions_lines(job), 2)
        for rtype, counts in sorted((_status(job).get("replicaStatuses") or {}).items()):
            counts = counts or {}
            lines.append(
                f"  {rtype}: active {counts.get('active') or 0}, succeeded "
                f"{counts.get('succeeded') or 0}, failed {counts.get('failed') or 0}"
            )
    pods = _safe(lambda: tfjob_pods(kube, namespace, name), [])
    if not pods:
        lines.append("  no pods left (cleanPodPolicy may have removed them)")
    for pod in pods:
        lines += _indent(
            _pod_report(
                kube,
                namespace,
                pod,
                container=TF_CONTAINER,
                tail=tail,
                detail=_pod_is_troubled(pod),
            ),
            2,
        )
    job_events = _events_lines(kube, namespace, name)
    if job_events:
        lines += _indent([f"TFJob {job_events[0]}", *job_events[1:]], 2)
    return _with_hints(lines)


def wait_tfjobs(
    kube: Kube,
    namespace: str,
    names: Sequence[str],
    *,
    timeout: float = 3600.0,
    max_restarts: int = 2,
    interval: float = POLL_S,
    stuck_after: float = STUCK_S,
    clock: Clock = time,
    out: Out = print,
    on_update: Callable[[list[TFJobRow]], Any] | None = None,
    unschedulable_after: float = UNSCHEDULABLE_S,
) -> dict[str, str]:
    """Wait until every TFJob is Succeeded or Failed; return name → "Succeeded"/"Failed".

    A worker in CrashLoopBackOff with more than ``max_restarts`` restarts, stuck pulling its
    image for ``stuck_after`` seconds, or refused by the scheduler for ``unschedulable_after``
    seconds (its peers would wait for it forever), counts as its job failing. The failure
    report of each failed job is printed when it fails (before ``cleanPodPolicy`` removes
    the evidence).
    ``on_update(rows)`` is called whenever a row changed.
    """
    names = list(names)
    what = f"TFJobs {', '.join(names)} in {namespace}"
    deadline = _Deadline(clock, timeout, interval)
    api = _ApiErrors(clock, out, what)
    stuck = {n: _Stuck(clock, stuck_after) for n in names}
    refused_since: dict[str, float] = {}
    missing = _Missing(clock)
    finished: dict[str, str] = {}
    rows: dict[str, TFJobRow] = {n: TFJobRow(n, "Pending") for n in names}
    pods_by_job: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    last_rows: list[TFJobRow] | None = None
    while True:
        try:
            for name in names:
                if name in finished:
                    continue
                job = kube.get(TFJOB_API, "TFJob", name, namespace)
                pods = tfjob_pods(kube, namespace, name)
                pods_by_job[name] = pods
                if missing.check(name, job is not None):
                    raise WaitError(
                        f"TFJob {namespace}/{name} does not exist (waited "
                        f"{_secs(deadline.elapsed())}); was it deleted?",
                        next_step=f"kubectl -n {namespace} get tfjobs; `invoke train` submits it",
                    )
                state = tfjob_state(job) if job is not None else rows[name].state
                reason = ""
                if state not in TERMINAL:
                    problems = _crashlooping(pods, max_restarts) + stuck[name].update(pods)
                    refused = _unschedulable(kube, namespace, pods)
                    if not refused:
                        refused_since.pop(name, None)
                    elif (
                        clock.monotonic() - refused_since.setdefault(name, clock.monotonic())
                        >= unschedulable_after
                    ):
                        problems.append(
                            f"{refused[0]} (for {_secs(unschedulable_after)}; a TFJob needs all "
                            "its workers running at once: lower --workers, train fewer jobs "
                            "at once with --parallel, or give Docker more CPU)"
                        )
                    if problems:
                        state, reason = "Failed", problems[0]
                elif state == "Failed":
                    reason = format_condition(condition(job, "Failed") or {})
                active, succeeded, failed = _worker_counts(job)
                row = TFJobRow(name, state, active, succeeded, failed, restarts_of(pods))
                if row.state != rows[name].state:
                    out(
                        f"TFJob {name}: {row.state} (workers active {active}, succeeded "
                        f"{succeeded}, failed {failed}; restarts {row.restarts})"
                    )
                rows[name] = row
                if state in TERMINAL:
                    finished[name] = state
                    if state == "Failed":
                        if reason:
                            out(f"TFJob {name} failed: {reason}")
                        out(tfjob_failure_report(kube, namespace, name))
            api.ok()
        except KubeError as exc:
            api.failed(exc)
        current = [rows[n] for n in names]
        if on_update is not None and current != last_rows:
            on_update(current)
        last_rows = current
        if len(finished) == len(names):
            return {n: finished[n] for n in names}
        if deadline.expired():
            break
        deadline.sleep()

    unfinished = [n for n in names if n not in finished]
    summary = ", ".join(
        f"{n} ({rows[n].state}; workers active {rows[n].active}, succeeded {rows[n].succeeded})"
        for n in unfinished
    )
    blocked: list[str] = []
    for n in unfinished:
        blocked += _unschedulable(kube, namespace, pods_by_job[n])
    headline = f"timed out after {_secs(timeout)} waiting for {what}; unfinished: {summary}"
    if blocked:
        headline += (
            "\n" + "\n".join(blocked) + "\n(a Pending worker makes the others wait for it forever)"
        )
    raise WaitError(
        headline + api.note(),
        "\n".join(tfjob_failure_report(kube, namespace, n) for n in unfinished),
        next_step=f"kubectl -n {namespace} describe tfjob {unfinished[0]}; if a worker is "
        "Pending, lower --workers or give Docker more CPU",
    )


def restarts_of(pods: Iterable[dict[str, Any]]) -> int:
    return sum(restarts(p) for p in pods)


# --------------------------------------------------------------------------- InferenceService


def _predictor_pods(kube: Kube, namespace: str, isvc: str) -> list[dict[str, Any]]:
    return kube.list("v1", "Pod", namespace, label_selector=f"{ISVC_LABEL}={isvc}")


def isvc_failure_report(kube: Kube, namespace: str, name: str, tail: int = 40) -> str:
    """The InferenceService's conditions, its Knative Service and Revisions' conditions (when
    Knative runs it), its predictor pods' phases, events and log tails, and hints."""
    isvc = _safe(lambda: kube.get(ISVC_API, "InferenceService", name, namespace), None)
    lines = [f"InferenceService {namespace}/{name}:" + ("" if isvc else " not found")]
    if isvc is not None:
        lines += _indent(_conditions_lines(isvc), 2)
    selector = f"{ISVC_LABEL}={name}"
    for kind in ("Service", "Revision"):
        for obj in _safe(lambda kind=kind: kube.list(KNATIVE_API, kind, namespace, selector), []):
            lines.append(f"Knative {kind} {namespace}/{_name(obj)}:")
            lines += _indent(_conditions_lines(obj), 2)
    pods = _safe(lambda: _predictor_pods(kube, namespace, name), [])
    if not pods:
        lines.append("no predictor pods")
    for pod in pods:
        lines += _pod_report(
            kube,
            namespace,
            pod,
            container=PREDICTOR_CONTAINER,
            tail=tail,
            detail=_pod_is_troubled(pod),
        )
    lines += _events_lines(kube, namespace, name)
    return _with_hints(lines)


CRASHLOOP_RESTARTS = 3  # a predictor that crashed this often will not come up by itself


def _observed(obj: dict[str, Any] | None) -> bool:
    """The controller has seen the latest spec (so Ready is about it, not the last one)."""
    generation = ((obj or {}).get("metadata") or {}).get("generation")
    observed = _status(obj).get("observedGeneration")
    return generation is None or observed is None or observed >= generation


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
    deadline = _Deadline(clock, timeout, interval)
    progress, api = _Progress(out), _ApiErrors(clock, out, what)
    stuck, missing = _Stuck(clock, stuck_after), _Missing(clock)
    status = "not seen yet"
    next_step = (
        f"kubectl -n {namespace} describe inferenceservice {name}; "
        f"kubectl -n {namespace} get pods -l {ISVC_LABEL}={name}"
    )
    while True:
        try:
            isvc = kube.get(ISVC_API, "InferenceService", name, namespace)
            if is_true(isvc, "Ready") and _observed(isvc):
                url = str(_status(isvc).get("url") or "")
                progress.update(f"InferenceService {name}: Ready at {url}")
                return url
            if missing.check(name, isvc is not None):
                raise WaitError(
                    f"InferenceService {namespace}/{name} does not exist (waited "
                    f"{_secs(deadline.elapsed())})",
                    next_step=f"kubectl -n {namespace} get inferenceservices; `invoke serve` "
                    "creates it",
                )
            pods = _predictor_pods(kube, namespace, name)
            stuck_now = stuck.update(pods) + _crashlooping(pods, CRASHLOOP_RESTARTS)
            api.ok()
        except KubeError as exc:
            api.failed(exc)
        else:
            if stuck_now:
                raise WaitError(
                    f"InferenceService {namespace}/{name} is stuck: {stuck_now[0]}",
                    isvc_failure_report(kube, namespace, name),
                    next_step=next_step,
                )
            ready = condition(isvc, "Ready")
            if isvc is None:
                status = "not found yet"
            elif not _observed(isvc):
                status = "the controller has not reconciled the latest change yet"
            elif ready is None:
                status = "no Ready condition yet"
            else:
                status = f"Ready={ready.get('status')}" + (
                    f" ({ready.get('reason')})" if ready.get("reason") else ""
                )
            progress.update(f"InferenceService {name}: {status}")
        if deadline.expired():
            break
        deadline.sleep()

    ready = condition(
        _safe(lambda: kube.get(ISVC_API, "InferenceService", name, namespace), None), "Ready"
    )
    last = format_condition(ready) if ready else status
    raise WaitError(
        f"timed out after {_secs(timeout)} waiting for {what}; last status: {last}" + api.note(),
        isvc_failure_report(kube, namespace, name),
        next_step=next_step,
    )


class ReplicaCounter:
    """Counts the predictor pods that serve: Running, Ready=True, not being deleted."""

    def __init__(self, kube: Kube, namespace: str, isvc: str) -> None:
        self.kube, self.namespace, self.isvc = kube, namespace, isvc

    def pods(self) -> list[dict[str, Any]]:
        return _predictor_pods(self.kube, self.namespace, self.isvc)

    def __call__(self) -> int:
        return sum(1 for pod in self.pods() if pod_ready(pod))

    def pending(self) -> list[tuple[str, str]]:
        """``(pod name, scheduling message)`` for each Pending pod ('' when none is known)."""
        return [
            (_name(pod), scheduling_message(self.kube, self.namespace, pod))
            for pod in self.pods()
            if _status(pod).get("phase") == "Pending" and not _terminating(pod)
        ]


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
    deadline = _Deadline(clock, timeout, interval)
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except retry_on as exc:
            if getattr(exc, "permanent", False):
                raise
            if deadline.expired():
                raise WaitError(
                    f"gave up on {what} after {_secs(deadline.elapsed())} and {attempt} "
                    f"attempts; last error: {exc}",
                    "\n".join(f"hint: {h}" for h in hints(str(exc))),
                    next_step="check the pods of the component it depends on "
                    "(`kubectl get pods -A`), then re-run the same command",
                ) from exc
            out(f"{what}: not ready yet ({_first_line(exc)}); retry {attempt} in {interval:g}s")
        deadline.sleep()
