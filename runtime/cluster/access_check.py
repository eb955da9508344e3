"""Before `up` writes anything on a cluster distml did not create: ask the API what this
user may do in the namespace (``k8s.client.access`` says what distml needs), and refuse,
naming every missing verb on every resource, with the Role and RoleBinding that grant
exactly those for the cluster's admin to apply (`invoke access-role` writes them to a file).

The question is asked with a ``SelfSubjectRulesReview`` (every authenticated user may
create one). Its rules are additive: a rule listed is granted even when the list is
``incomplete`` (an authorizer that cannot list its rules, e.g. a webhook authorizer, said
in ``evaluationError``; kubernetes.io, SubjectRulesReviewStatus). So what the rules grant
is taken as granted; when the review is incomplete (or not served), every verb it does
not grant is asked one by one with a ``SelfSubjectAccessReview``, whose answer is final.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from k8s.client import access
from k8s.client.access import Need
from k8s.client.kube import KubeError
from k8s.providers.settings import Settings
from ml.contract import MODEL_TYPES
from runtime.cluster.cluster_error import ClusterError
from runtime.cluster.down import swept

TASK = "access-role"


@dataclass(frozen=True)
class Review:
    """What the API said: the needed verbs this user lacks, and how it was asked."""

    missing: tuple[Need, ...]
    how: str


def wanted(s: Settings, models: Sequence[str] = MODEL_TYPES) -> list[Need]:
    return access.needs(s, models, swept(s))


def review(kube: Any, namespace: str, needs: Sequence[Need]) -> Review:
    """Ask the API which of ``needs`` this user lacks in ``namespace``. An unreachable API
    server, a timeout or a 5xx raises its KubeError: never taken as granted or refused."""
    rules: list[dict[str, Any]] = []
    incomplete, why = True, ""
    try:
        status = kube.create(access.rules_review(namespace)).get("status") or {}
    except KubeError as e:
        if e.status not in (403, 404):
            raise
        why = f"no SelfSubjectRulesReview here ({e})"
    else:
        rules = list(status.get("resourceRules") or [])
        incomplete = bool(status.get("incomplete"))
        why = str(status.get("evaluationError") or "")
    left = [n for n in needs if not access.allows(rules, n)]
    if not incomplete:
        return Review(tuple(left), "SelfSubjectRulesReview")
    missing = tuple(n for n in left if not _allowed(kube, namespace, n))
    how = f"SelfSubjectRulesReview incomplete{f' ({why})' if why else ''}; "
    return Review(missing, how + f"{len(left)} verb(s) asked by SelfSubjectAccessReview")


def _allowed(kube: Any, namespace: str, need: Need) -> bool:
    status = kube.create(access.access_review(namespace, need)).get("status") or {}
    return bool(status.get("allowed"))


def user_name(kube: Any) -> str:
    """Who the API says this user is (``SelfSubjectReview``, authentication.k8s.io/v1,
    Kubernetes 1.28+); ``access.USER_PLACEHOLDER`` when it is not served or not allowed."""
    try:
        status = kube.create(access.self_review()).get("status") or {}
    except KubeError as e:
        if e.status is None or e.status >= 500:
            raise
        return access.USER_PLACEHOLDER
    name = (status.get("userInfo") or {}).get("username")
    return str(name) if name else access.USER_PLACEHOLDER


def command(context: str, s: Settings) -> str:
    """The task that writes the Role and RoleBinding to a file, as this `up` would ask."""
    flags = [f"--context {context}"] if context else []
    flags += ["--with-argo"] * s.with_argo + ["--with-monitoring"] * s.with_monitoring
    out = f"distml-access-{s.namespace}.yaml"
    return " ".join(["invoke", TASK, *flags, "--out", out])


def require(cx: Any, s: Settings) -> None:
    """`up` on a cluster distml did not create, before its first write: refuse, saying what
    is missing and how to get it, unless this user may do all distml needs. Skipped on a
    cluster distml made (its creator is its admin) and under --dry (nothing is asked)."""
    if s.owns_cluster or cx.dry:
        return
    found = review(cx.kube, s.namespace, wanted(s))
    if found.missing:
        name = user_name(cx.kube)
        text = access.access_yaml(s.namespace, found.missing, name)
        raise ClusterError(
            access.refusal(s.namespace, name, found.missing, text, command(cx.provider.context, s))
        )
    cx.out(f"access: every right distml needs in namespace {s.namespace} ({found.how})")


def role_yaml(cx: Any, s: Settings, *, everything: bool = False) -> tuple[str, list[Need]]:
    """(the Role and RoleBinding as YAML, the verbs it grants): what this user lacks of
    what distml needs in ``s.namespace`` (``everything``: all of it, asked of no one)."""
    needs = wanted(s)
    grant = needs if everything else list(review(cx.kube, s.namespace, needs).missing)
    return access.access_yaml(s.namespace, grant, user_name(cx.kube)), grant
