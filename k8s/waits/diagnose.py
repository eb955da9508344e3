"""What a user needs when a wait fails: failure reports (conditions, pod states, events, log
tails) and hints for the known pitfalls (``shared/CLUSTER-PITFALLS.md``).

Reports read the cluster through a ``Kube`` but never raise ``KubeError``: a second API
error must not hide the problem being reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from types import MappingProxyType
from typing import TypeVar

from k8s.client.kube import Kube, KubeError, Objects
from k8s.client.objects import (
    ISVC_API,
    ISVC_LABEL,
    KNATIVE_API,
    PREDICTOR_CONTAINER,
    TF_CONTAINER,
    TFJOB_API,
    Kubectl,
    Obj,
    condition,
    conditions,
    deployment_pods,
    format_condition,
    is_true,
    name_of,
    pod_is_troubled,
    pod_ready,
    pod_summary,
    predictor_pods,
    scheduling_message,
    short,
    status_of,
    terminating,
    tfjob_pods,
    tfjob_state,
)

EVENTS_SHOWN = 8
T = TypeVar("T")

# Known pitfalls: any of these patterns in the diagnostics → what to do about it. A command
# in a hint is written `kubectl ARGS`; ``hints`` builds it with the provider's ``kubectl``.
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


_COMMAND = re.compile(r"`kubectl ([^`]+)`")


def naming_context(text: str, kubectl: Kubectl) -> str:
    """``text`` with each command in it (`kubectl ARGS`, in backticks) built by ``kubectl``:
    the provider's, so that a command pasted from it reads the cluster distml used."""
    return _COMMAND.sub(lambda m: f"`{kubectl(m[1])}`", text)


def hints(text: str, kubectl: Kubectl) -> list[str]:
    """The hints whose patterns occur in ``text`` (case-insensitive), in table order, their
    commands built by ``kubectl``."""
    low = text.lower()
    return [
        naming_context(hint, kubectl) for patterns, hint in HINTS if any(p in low for p in patterns)
    ]


def with_hints(lines: list[str], kubectl: Kubectl) -> str:
    """The lines as one text, followed by the hints they call for."""
    text = "\n".join(lines)
    found = hints(text, kubectl)
    if found:
        text += "\nhints:\n" + "\n".join(f"  - {h}" for h in found)
    return text


def safe(fn: Callable[[], T], default: T) -> T:
    """Diagnostics must never hide the original problem behind a second API error."""
    try:
        return fn()
    except KubeError:
        return default


def safe_objects(fn: Callable[[], Objects]) -> Objects:
    """:func:`safe` for a listing: none when the API errs."""
    return safe(fn, [])


def indent(lines: Iterable[str], by: int) -> list[str]:
    pad = " " * by
    return [pad + line for line in lines]


# --------------------------------------------------------------------------- evidence


def conditions_lines(obj: Obj | None) -> list[str]:
    conds = conditions(obj)
    if not conds:
        return ["conditions: none yet"]
    return ["conditions:", *indent((format_condition(c) for c in conds), 2)]


def _event_line(event: Obj) -> str:
    count = event.get("count") or 1
    line = f"{event.get('type') or 'Normal'} {event.get('reason') or '?'}: "
    line += short(event.get("message") or "")
    return line + (f" (x{count})" if count > 1 else "")


def events_lines(kube: Kube, namespace: str, name: str, limit: int = EVENTS_SHOWN) -> list[str]:
    events = safe_objects(lambda: kube.events(namespace, name))
    if not events:
        return []
    return ["events:", *indent((_event_line(e) for e in events[-limit:]), 2)]


def _log_lines(kube: Kube, pod: str, namespace: str, container: str | None, tail: int) -> list[str]:
    text = safe(lambda: kube.logs(pod, namespace, container=container, tail=tail), "")
    lines = text.rstrip("\n").splitlines()[-tail:] if text else []
    if not lines:
        return []
    return [f"log tail ({container or 'default container'}):", *indent(lines, 2)]


def pod_report(
    kube: Kube, namespace: str, pod: Obj, *, container: str | None, tail: int, detail: bool
) -> list[str]:
    """The pod's summary line; with ``detail`` its events and (once started) its log tail."""
    lines = [f"pod {name_of(pod)}: {pod_summary(pod)}"]
    if detail:
        lines += indent(events_lines(kube, namespace, name_of(pod)), 2)
        if status_of(pod).get("phase") != "Pending":
            lines += indent(_log_lines(kube, name_of(pod), namespace, container, tail), 2)
    return lines


def unschedulable(kube: Kube, namespace: str, pods: Iterable[Obj]) -> list[str]:
    """``pod X cannot be scheduled: <why>`` for each Pending pod the scheduler refused."""
    found = []
    for pod in pods:
        if status_of(pod).get("phase") != "Pending" or terminating(pod):
            continue
        message = safe(partial(scheduling_message, kube, namespace, pod), "")
        if message:
            found.append(f"pod {name_of(pod)} cannot be scheduled: {message}")
    return found


# --------------------------------------------------------------------------- reports


def deployments_report(
    kube: Kube, namespace: str, found: dict[str, Obj | None], *, kubectl: Kubectl
) -> str:
    """For each Deployment that is not Available: ready replicas, conditions, and each of
    its pods that is not ready with its recent events."""
    lines: list[str] = []
    for name in sorted(n for n, d in found.items() if not is_true(d, "Available")):
        dep = found[name]
        if dep is None:
            lines.append(f"Deployment {namespace}/{name}: not found")
            continue
        lines.append(
            f"Deployment {namespace}/{name}: {status_of(dep).get('readyReplicas') or 0}/"
            f"{(dep.get('spec') or {}).get('replicas', 1)} ready"
        )
        lines += indent(conditions_lines(dep), 2)
        for pod in safe_objects(partial(deployment_pods, kube, namespace, dep)):
            if pod_ready(pod):
                continue
            lines += indent([f"pod {name_of(pod)}: {pod_summary(pod)}"], 2)
            lines += indent(events_lines(kube, namespace, name_of(pod), limit=4), 4)
    return with_hints(lines, kubectl)


def job_report(
    kube: Kube,
    namespace: str,
    name: str,
    job: Obj | None,
    pods: list[Obj],
    tail: int,
    *,
    kubectl: Kubectl,
) -> str:
    """A batch Job's conditions and pod counts; each pod's state, events and log tail."""
    lines = [f"Job {namespace}/{name}:" + ("" if job else " not found")]
    if job:
        st = status_of(job)
        lines += indent(conditions_lines(job), 2)
        lines.append(
            f"  pods: active {st.get('active') or 0}, succeeded {st.get('succeeded') or 0}, "
            f"failed {st.get('failed') or 0}"
        )
    for pod in pods:
        lines += indent(pod_report(kube, namespace, pod, container=None, tail=tail, detail=True), 2)
    if not pods:
        lines.append("  no pods")
    lines += indent(events_lines(kube, namespace, name), 2)
    return with_hints(lines, kubectl)


EMPTY: Mapping[str, str] = MappingProxyType({})


def tfjob_failure_report(
    kube: Kube,
    namespace: str,
    name: str,
    tail: int = 40,
    kept_logs: Mapping[str, str] = EMPTY,
    *,
    kubectl: Kubectl,
) -> str:
    """The TFJob's report (``tfjob_report_lines``) with the known pitfalls' hints."""
    return with_hints(tfjob_report_lines(kube, namespace, name, tail, kept_logs), kubectl)


def tfjob_report_lines(
    kube: Kube, namespace: str, name: str, tail: int = 40, kept_logs: Mapping[str, str] = EMPTY
) -> list[str]:
    """The TFJob's conditions and replica counts; for each failing or Pending pod its phase,
    container states, recent events and log tail (container ``tensorflow``); the job's events.
    ``kept_logs`` (pod → the log of its last crashed run, kept while the pod lived) stands
    in for the pods the operator deleted when it failed the job past its backoff limit."""
    job = safe(lambda: kube.get(TFJOB_API, "TFJob", name, namespace), None)
    lines = [f"TFJob {namespace}/{name}: {tfjob_state(job)}"]
    if job is not None:
        lines += indent(conditions_lines(job), 2)
        for rtype, counts in sorted((status_of(job).get("replicaStatuses") or {}).items()):
            counts = counts or {}
            lines.append(
                f"  {rtype}: active {counts.get('active') or 0}, succeeded "
                f"{counts.get('succeeded') or 0}, failed {counts.get('failed') or 0}"
            )
    pods = safe_objects(lambda: tfjob_pods(kube, namespace, name))
    if not pods:
        lines.append("  no pods left (the operator deletes them when a job is past its limits)")
    present = {name_of(p) for p in pods}
    for gone, text in sorted(kept_logs.items()):
        if gone not in present and text.strip():
            lines.append(f"  Pod {namespace}/{gone}: deleted; log of its last crashed run:")
            lines += indent(text.rstrip("\n").splitlines()[-tail:], 4)
    for pod in pods:
        report = pod_report(
            kube, namespace, pod, container=TF_CONTAINER, tail=tail, detail=pod_is_troubled(pod)
        )
        lines += indent(report, 2)
    job_events = events_lines(kube, namespace, name)
    if job_events:
        lines += indent([f"TFJob {job_events[0]}", *job_events[1:]], 2)
    return lines


def isvc_failure_report(
    kube: Kube, namespace: str, name: str, tail: int = 40, *, kubectl: Kubectl
) -> str:
    """The InferenceService's conditions, its Knative Service and Revisions' conditions (when
    Knative runs it), its predictor pods' phases, events and log tails, and hints."""
    isvc = safe(lambda: kube.get(ISVC_API, "InferenceService", name, namespace), None)
    lines = [f"InferenceService {namespace}/{name}:" + ("" if isvc else " not found")]
    if isvc is not None:
        lines += indent(conditions_lines(isvc), 2)
    selector = f"{ISVC_LABEL}={name}"
    for kind in ("Service", "Revision"):
        for obj in safe_objects(partial(kube.list, KNATIVE_API, kind, namespace, selector)):
            lines.append(f"Knative {kind} {namespace}/{name_of(obj)}:")
            lines += indent(conditions_lines(obj), 2)
    pods = safe_objects(lambda: predictor_pods(kube, namespace, name))
    if not pods:
        lines.append("no predictor pods")
    for pod in pods:
        lines += pod_report(
            kube,
            namespace,
            pod,
            container=PREDICTOR_CONTAINER,
            tail=tail,
            detail=pod_is_troubled(pod),
        )
    lines += events_lines(kube, namespace, name)
    return with_hints(lines, kubectl)


def isvc_last_status(kube: Kube, namespace: str, name: str) -> str:
    """The InferenceService's Ready condition, formatted ('' when unreadable or absent)."""
    isvc = safe(lambda: kube.get(ISVC_API, "InferenceService", name, namespace), None)
    ready = condition(isvc, "Ready")
    return format_condition(ready) if ready else ""
