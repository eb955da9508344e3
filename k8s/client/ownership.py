"""Whose an object is, told from what it carries (no I/O).

Every object a work dir writes carries that work dir's instance label
(``names.INSTANCE_LABEL``). On a cluster distml did not create, an object of a name distml
would write is this work dir's only when it carries this work dir's instance id (and, for
the volume, has the uid ``up`` recorded); anything else — another team's, another work
dir's — is never changed or deleted: distml refuses, saying whose it is and what to do.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from k8s.client.objects import ISVC_API, JOB_API, TFJOB_API
from k8s.manifests import canary_pods
from k8s.manifests.canary_jobs import END_JOB, SAMPLE_JOB, WEIGHT_JOB
from k8s.manifests.names import (
    COMMON_LABELS,
    INGEST_JOB,
    INSTANCE_LABEL,
    LOADER_POD,
    ROLLBACK_JOB,
    RUNTIME_NAME,
    SELECT_JOB,
    TENSORBOARD_POD,
    WORKFLOW_NAME,
    WORKFLOW_SA,
    is_ours,
    tfjob_name,
)
from k8s.monitoring import stack
from k8s.providers.settings import Settings

RBAC_API = "rbac.authorization.k8s.io/v1"
WORKFLOW_API = "argoproj.io/v1alpha1"
Ref = tuple[str, str, str]  # apiVersion, kind, name


def new_instance() -> str:
    """A new work dir's id: 8 hex digits, a valid label value."""
    return secrets.token_hex(4)


def stamp(obj: dict[str, Any], instance: str | None) -> dict[str, Any]:
    """``obj`` with the work dir's instance label added (a copy; unchanged without one)."""
    if not instance:
        return obj
    meta = obj["metadata"]
    labels = {**(meta.get("labels") or {}), INSTANCE_LABEL: instance}
    return {**obj, "metadata": {**meta, "labels": labels}}


def written_names(s: Settings, models: Iterable[str]) -> list[Ref]:
    """Every object distml writes by name in its namespace: `up` checks them all before
    its first write, so that no later task finds one taken."""
    refs: list[Ref] = [
        ("v1", "PersistentVolumeClaim", s.volume),
        ("v1", "Pod", LOADER_POD),
        ("v1", "Pod", TENSORBOARD_POD),
        (JOB_API, "Job", INGEST_JOB),
        (JOB_API, "Job", SELECT_JOB),
        (JOB_API, "Job", ROLLBACK_JOB),
        *((TFJOB_API, "TFJob", tfjob_name(m)) for m in models),
        (ISVC_API, "InferenceService", s.service),
        ("serving.kserve.io/v1alpha1", "ServingRuntime", RUNTIME_NAME),
        # deploy --canary: the canary's own pod and Service, and its Jobs
        ("v1", "Pod", canary_pods.name(s)),
        ("v1", "Service", canary_pods.name(s)),
        *((JOB_API, "Job", job) for job in (WEIGHT_JOB, SAMPLE_JOB, END_JOB)),
    ]
    if s.with_argo:
        refs += [
            (WORKFLOW_API, "Workflow", WORKFLOW_NAME),
            ("v1", "ServiceAccount", WORKFLOW_SA),
            (RBAC_API, "Role", WORKFLOW_SA),
            (RBAC_API, "RoleBinding", WORKFLOW_SA),
        ]
    if s.with_monitoring and not s.prometheus:  # distml's own Prometheus
        refs += stack.written_names()
    return refs


def owned(obj: dict[str, Any], instance: str | None, volume_uid: str | None = None) -> bool:
    """``obj`` is this work dir's: it carries the instance label ``instance`` (and, when
    ``volume_uid`` is given, has that uid: a claim made again by someone else is not)."""
    if not instance or not is_ours(obj, instance):
        return False
    uid = (obj.get("metadata") or {}).get("uid")
    return volume_uid is None or uid == volume_uid


def uid_key(kind: str, name: str, namespace: str | None) -> str:
    """How the state keys an object's recorded uid: ``Kind namespace/name``."""
    return f"{kind} {namespace or ''}/{name}"


def uid_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def recreated(obj: dict[str, Any], uids: Mapping[str, str]) -> bool:
    """``obj`` has a name this work dir wrote, but not the uid it recorded: someone made
    it again (a copy of the label proves nothing)."""
    meta = obj.get("metadata") or {}
    was = uids.get(uid_key(str(obj.get("kind")), meta.get("name", ""), meta.get("namespace")))
    return bool(was) and was != meta.get("uid")


def proven(obj: dict[str, Any], instance: str | None, uids: Mapping[str, str]) -> bool:
    """``obj`` is this work dir's beyond its label: it carries the instance label and its
    uid is one this work dir recorded when it wrote it, or an object of a recorded uid
    owns it (a TFJob's pods, a Workflow's TFJobs). What only carries the label may be
    anyone's copy: `down` leaves it."""
    if not owned(obj, instance):
        return False
    mine = set(uids.values())
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return uid_of(obj) in mine or any(ref.get("uid") in mine for ref in refs)


def owner(obj: dict[str, Any]) -> str:
    """Whose ``obj`` looks to be, in a few words: another distml work dir (its instance
    id), or not distml's (its labels and the managers that wrote it)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if is_ours(obj):
        instance = labels.get(INSTANCE_LABEL)
        return (
            f"another distml work dir's (instance {instance})"
            if instance
            else ("an older distml's (no instance label: made before distml told work dirs apart)")
        )
    shown = [f"{k}={v}" for k, v in labels.items() if k not in COMMON_LABELS][:4]
    managers = sorted({m.get("manager", "?") for m in meta.get("managedFields") or []})
    parts = ["not distml's"]
    if shown:
        parts.append("labels " + ", ".join(shown))
    if managers:
        parts.append("written by " + ", ".join(managers))
    return "; ".join(parts)


def refusal(taken: list[dict[str, Any]], namespace: str, *, when: str) -> str:
    """The message for objects distml would write whose names are taken by others."""
    lines = [
        f"{o.get('kind')} {namespace}/{(o.get('metadata') or {}).get('name')}: {owner(o)}"
        for o in taken
    ]
    return (
        f"{when}: namespace {namespace} already holds objects distml would write, and they "
        "are not this work dir's; distml never changes or deletes them:\n  "
        + "\n  ".join(lines)
        + "\nUse a namespace of this work dir's own: `INVOKE_CLUSTER_NAMESPACE=NAME invoke up"
        " ...` (distml makes it; on a cluster it did not create the default is `distml`)"
    )


def label_copy_refusal(obj: dict[str, Any], namespace: str, *, when: str) -> str:
    """The message for an object that carries this work dir's instance label but not a uid
    it recorded: anyone's copy of the label, or what a Workflow wrote that no `--watch`
    saw end."""
    meta = obj.get("metadata") or {}
    return (
        f"{when}: {obj.get('kind')} {namespace}/{meta.get('name')} carries this work dir's "
        f"label {INSTANCE_LABEL}={(meta.get('labels') or {}).get(INSTANCE_LABEL)} but is not "
        f"an object it made (uid {meta.get('uid')} is not one it recorded): a copy of the "
        "label proves nothing, so distml leaves it as it is. If it is yours (an `invoke "
        "workflow` run not followed with --watch writes its service so), delete it and run "
        f"the task again: kubectl -n {namespace} delete {str(obj.get('kind')).lower()} "
        f"{meta.get('name')}"
    )
