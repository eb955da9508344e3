"""Reading the Kubernetes objects distml waits for: conditions, pod and container states,
a TFJob's state, and finding an object's pods.

Objects are the plain dicts ``k8s.client.kube`` returns; every accessor tolerates missing fields
(and ``None`` for an object that does not exist). Finding pods and scheduling messages
reads the cluster through a ``Kube``; nothing here waits or prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from k8s.client.kube import Kube

DEPLOYMENT_API = "apps/v1"
JOB_API = "batch/v1"
TFJOB_API = "kubeflow.org/v1"
ISVC_API = "serving.kserve.io/v1beta1"
KNATIVE_API = "serving.knative.dev/v1"
WORKFLOW_API = "argoproj.io/v1alpha1"  # Argo Workflows
WORKFLOW_KIND = "Workflow"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
TFJOB_LABELS = ("training.kubeflow.org/job-name", "job-name")  # v1.9 labels, then the old ones
TF_CONTAINER = "tensorflow"
PREDICTOR_CONTAINER = "kserve-container"

#: Builds a kubectl command line for the user to paste from its arguments, naming the
#: kubeconfig context distml used (``Provider.kubectl``: ``kubectl --context CTX ARGS``):
#: pasted, it reads the same cluster whatever kubectl's current context is by then.
Kubectl = Callable[[str], str]


def unnamed_context(args: str) -> str:
    """``kubectl ARGS``, naming no context: only for callers that do not pass the
    provider's ``kubectl`` yet (a command built so reads kubectl's current context)."""
    return f"kubectl {args}"


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
#: KServe v0.20's pod mutator skips namespaces carrying this label (its webhook's
#: namespaceSelector: ``control-plane DoesNotExist``); a full Kubeflow install sets it on
#: ``kubeflow``. There the predictor would never get the model mounted.
KSERVE_SKIPPED_NAMESPACE_LABEL = "control-plane"
TFJOB_STATES = ("Created", "Running", "Restarting", "Succeeded", "Failed")
TERMINAL = ("Succeeded", "Failed")

Obj = dict[str, Any]


# --------------------------------------------------------------------------- any object


def status_of(obj: Obj | None) -> Obj:
    return ((obj or {}).get("status")) or {}


def name_of(obj: Obj) -> str:
    return (obj.get("metadata") or {}).get("name", "?")


def conditions(obj: Obj | None) -> list[Obj]:
    return list(status_of(obj).get("conditions") or [])


def condition(obj: Obj | None, type_: str) -> Obj | None:
    """The last condition of ``type_`` (None when absent)."""
    found = None
    for cond in conditions(obj):
        if cond.get("type") == type_:
            found = cond
    return found


def is_true(obj: Obj | None, type_: str) -> bool:
    cond = condition(obj, type_)
    return cond is not None and str(cond.get("status")) == "True"


def format_condition(cond: Obj) -> str:
    text = f"{cond.get('type')}={cond.get('status')}"
    reason, message = cond.get("reason"), (cond.get("message") or "").strip()
    if reason and message:
        text += f" ({reason}: {message})"
    elif reason or message:
        text += f" ({reason or message})"
    return text


def observed(obj: Obj | None) -> bool:
    """The controller has seen the latest spec (so Ready is about it, not the last one)."""
    generation = ((obj or {}).get("metadata") or {}).get("generation")
    seen = status_of(obj).get("observedGeneration")
    return generation is None or seen is None or seen >= generation


def short(text: str, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), shortened to ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- pods


def container_statuses(pod: Obj) -> list[Obj]:
    status = status_of(pod)
    return list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )


def waiting_reasons(pod: Obj) -> list[tuple[str, str, str]]:
    """``(container, reason, message)`` for each container that is waiting."""
    found = []
    for cs in container_statuses(pod):
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


def restarts(pod: Obj) -> int:
    return sum(int(cs.get("restartCount") or 0) for cs in container_statuses(pod))


def restarts_of(pods: Iterable[Obj]) -> int:
    return sum(restarts(p) for p in pods)


def terminating(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_ready(pod: Obj) -> bool:
    """Running, condition Ready=True, and not being deleted."""
    return (
        status_of(pod).get("phase") == "Running" and is_true(pod, "Ready") and not terminating(pod)
    )


def pod_state(pod: Obj) -> str:
    """A short, stable state for progress lines: a waiting reason, else the phase."""
    reasons = [reason for _, reason, _ in waiting_reasons(pod)]
    return reasons[0] if reasons else (status_of(pod).get("phase") or "Unknown")


def _container_parts(cs: Obj) -> list[str]:
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    cname = cs.get("name", "?")
    parts = []
    if state.get("waiting"):
        waiting = state["waiting"]
        text = f"{cname}: {waiting.get('reason') or 'Waiting'}"
        if waiting.get("message"):
            text += f" ({short(waiting['message'])})"
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
    return parts


def pod_summary(pod: Obj) -> str:
    """One line: phase, unschedulable reason, container states, restarts."""
    phase = status_of(pod).get("phase") or "Unknown"
    parts = [phase + (" (terminating)" if terminating(pod) else "")]
    if phase == "Running" and not is_true(pod, "Ready"):
        parts.append("not ready")
    scheduled = condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        parts.append(f"unschedulable: {scheduled.get('message') or scheduled.get('reason')}")
    for cs in container_statuses(pod):
        parts += _container_parts(cs)
    return "; ".join(parts)


def pod_is_troubled(pod: Obj) -> bool:
    """Pending, failed, waiting for something other than a start, crashed or restarted."""
    phase = status_of(pod).get("phase")
    if phase in ("Pending", "Failed", "Unknown"):
        return True
    if any(reason not in STARTING_REASONS for _, reason, _ in waiting_reasons(pod)):
        return True
    for cs in container_statuses(pod):
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode") not in (0, None):
            return True
    return restarts(pod) > 0


def scheduling_message(kube: Kube, namespace: str, pod: Obj) -> str:
    """Why a Pending pod is not scheduled ('' when nothing says so)."""
    scheduled = condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        message = scheduled.get("message") or scheduled.get("reason") or ""
        if message:
            return short(message)
    failed = [
        e for e in kube.events(namespace, name_of(pod)) if e.get("reason") == "FailedScheduling"
    ]
    return short(failed[-1].get("message") or "") if failed else ""


# --------------------------------------------------------------------------- finding pods


def pods_matching(kube: Kube, namespace: str, selectors: Sequence[str]) -> list[Obj]:
    """Pods matching any of the selectors, each once, by name."""
    found: dict[str, Obj] = {}
    for selector in selectors:
        for pod in kube.list("v1", "Pod", namespace, label_selector=selector):
            found.setdefault(name_of(pod), pod)
    return [found[n] for n in sorted(found)]


def deployment_pods(kube: Kube, namespace: str, dep: Obj) -> list[Obj]:
    match = (((dep.get("spec") or {}).get("selector")) or {}).get("matchLabels") or {}
    if not match:
        return []
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    return kube.list("v1", "Pod", namespace, label_selector=selector)


def job_pods(kube: Kube, namespace: str, name: str) -> list[Obj]:
    """A batch/v1 Job's pods (old ``job-name`` or new ``batch.kubernetes.io`` label)."""
    return pods_matching(
        kube, namespace, (f"job-name={name}", f"batch.kubernetes.io/job-name={name}")
    )


def tfjob_pods(kube: Kube, namespace: str, name: str) -> list[Obj]:
    """The TFJob's pods (v1.9 ``training.kubeflow.org/job-name``, or old ``job-name`` labels,
    but not a batch Job's pods)."""
    pods = pods_matching(kube, namespace, [f"{label}={name}" for label in TFJOB_LABELS])
    return [
        p
        for p in pods
        if not any(
            ref.get("kind") == "Job"
            for ref in (p.get("metadata") or {}).get("ownerReferences") or []
        )
    ]


def predictor_pods(kube: Kube, namespace: str, isvc: str) -> list[Obj]:
    return kube.list("v1", "Pod", namespace, label_selector=f"{ISVC_LABEL}={isvc}")


# --------------------------------------------------------------------------- TFJobs


def tfjob_state(job: Obj | None) -> str:
    """Succeeded/Failed when one is True, else the last True condition, else Pending."""
    if job is None:
        return "NotFound"
    true = [c.get("type") for c in conditions(job) if str(c.get("status")) == "True"]
    true = [t for t in true if t in TFJOB_STATES]
    terminal = [t for t in true if t in TERMINAL]
    if terminal:
        return str(terminal[-1])
    return str(true[-1]) if true else "Pending"


def worker_counts(job: Obj | None) -> tuple[int, int, int]:
    """The TFJob's Worker replicas: (active, succeeded, failed)."""
    worker = (status_of(job).get("replicaStatuses") or {}).get("Worker") or {}
    return (
        int(worker.get("active") or 0),
        int(worker.get("succeeded") or 0),
        int(worker.get("failed") or 0),
    )


# --------------------------------------------------------------------------- serving


class ReplicaCounter:
    """Counts the predictor pods that serve: Running, Ready=True, not being deleted."""

    def __init__(self, kube: Kube, namespace: str, isvc: str) -> None:
        self.kube, self.namespace, self.isvc = kube, namespace, isvc

    def pods(self) -> list[Obj]:
        return predictor_pods(self.kube, self.namespace, self.isvc)

    def __call__(self) -> int:
        return sum(1 for pod in self.pods() if pod_ready(pod))

    def pending(self) -> list[tuple[str, str]]:
        """``(pod name, scheduling message)`` for each Pending pod ('' when none is known)."""
        return [
            (name_of(pod), scheduling_message(self.kube, self.namespace, pod))
            for pod in self.pods()
            if status_of(pod).get("phase") == "Pending" and not terminating(pod)
        ]


def namespace_refusal(namespace: Obj | None, kubectl: Kubectl | None = None) -> str | None:
    """Why distml cannot serve from this (existing) namespace, or None; the command that
    removes the label is built with ``kubectl`` (the provider's: it names the context)."""
    kubectl = kubectl or unnamed_context
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    if KSERVE_SKIPPED_NAMESPACE_LABEL not in labels:
        return None
    name = name_of(namespace or {})
    value = labels[KSERVE_SKIPPED_NAMESPACE_LABEL]
    return (
        f"namespace {name} is labelled {KSERVE_SKIPPED_NAMESPACE_LABEL}={value} (a full Kubeflow "
        "install labels its namespace so), and KServe's pod mutator skips such namespaces: the "
        "predictor would never get the model mounted. Use another namespace "
        f"(INVOKE_CLUSTER_NAMESPACE=distml) or, if nothing else needs it, remove the label: "
        + kubectl(f"label namespace {name} {KSERVE_SKIPPED_NAMESPACE_LABEL}-")
    )
