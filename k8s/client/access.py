"""What distml may need to do in its namespace, and the Role that grants exactly that (no I/O).

A user of a shared cluster often holds ClusterRole ``admin`` in one namespace (through a
RoleBinding) and nothing cluster-wide. Built-in ``admin`` (the bootstrap policy,
``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``, plus every ClusterRole
labelled ``rbac.authorization.k8s.io/aggregate-to-admin``) covers pods and their
``log``/``exec``/``portforward``, Jobs, PVCs, Services, ConfigMaps, Deployments, Roles and
RoleBindings, but no custom resource unless its operator ships an aggregated ClusterRole:
training-operator v1.9.0's standalone install and KServe v0.20.0 ship none (TFJob,
InferenceService, ServingRuntime are not in ``admin``); Argo Workflows v4.1.2 ships
``argo-aggregate-to-admin`` (Workflows are). So distml asks the API what this user may do
(``runtime.cluster.access_check``) rather than assume, and names what is missing.

``needs`` is derived from what distml does: every object it writes by name
(``k8s.client.ownership.written_names``: read, server-side apply, which creates with
``create`` + ``patch``, delete), every kind `down` sweeps by label (list, delete), what the
tasks do with pods (``pods/log`` get, ``pods/exec`` create for ``kubectl cp``,
``pods/portforward`` create, ``events`` list and create (a canary's decisions), Services
get for a port-forward), and every
rule of the Roles distml writes (RBAC's escalation check: a Role is created only by who
holds all it grants).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from k8s.client.ownership import written_names
from k8s.manifests.argo_workflow import workflow_rbac
from k8s.manifests.inference import AUTOSCALER_OBJECTS
from k8s.manifests.names import labels
from k8s.monitoring import stack
from k8s.providers.settings import Settings

ROLE_NAME = "distml-user"  # the prefix: each user's Role is their own (role_name)
#: A Role's name is a DNS subdomain (253); kept short, with a hash of the whole user name.
NAME_KEPT = 40
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_API = f"{RBAC_GROUP}/v1"
AUTHZ_API = "authorization.k8s.io/v1"
AUTHN_API = "authentication.k8s.io/v1"
USER_PLACEHOLDER = "USER"  # when the API cannot say who the user is (no SelfSubjectReview)
VERB_ORDER = ("get", "list", "watch", "create", "patch", "update", "delete", "deletecollection")
WRITES = ("get", "create", "patch", "delete")  # read, server-side apply (create + patch), delete
SWEEPS = ("list", "delete")  # `down`: by label


@dataclass(frozen=True)
class Need:
    """One verb on one resource (``pods/log``: a subresource) of one API group."""

    group: str  # "" for the core group
    resource: str
    verb: str

    @property
    def resource_name(self) -> str:
        """As kubectl names it: ``pods/log``, ``tfjobs.kubeflow.org``."""
        return f"{self.resource}.{self.group}" if self.group else self.resource


def group_of(api_version: str) -> str:
    """``batch/v1`` -> ``batch``; ``v1`` -> "" (the core group)."""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def resource_of(kind: str) -> str:
    """The plural resource of a kind distml writes (each is its lowercase kind + s)."""
    return kind.lower() + "s"


def _verbs(group: str, resource: str, verbs: Iterable[str]) -> list[Need]:
    return [Need(group, resource, v) for v in verbs]


def needs(s: Settings, models: Sequence[str], swept: Iterable[tuple[str, str]]) -> list[Need]:
    """Every verb distml needs in ``s.namespace`` for ``s`` (``s.with_argo``,
    ``s.with_monitoring`` without ``s.prometheus``: distml's own Prometheus), sorted.
    ``swept``: (apiVersion, kind) of what `down` deletes by label (its ``OURS``)."""
    found = [
        Need(group_of(api), resource_of(kind), verb)
        for api, kind, _ in written_names(s, models)
        for verb in WRITES
    ]
    found += [
        Need(group_of(api), resource_of(kind), verb) for api, kind in swept for verb in SWEEPS
    ]
    found += [
        *_verbs("", "pods", ("get", "list")),
        Need("", "pods/log", "get"),
        Need("", "pods/exec", "create"),  # kubectl cp, in and out of the volume
        Need("", "pods/portforward", "create"),  # tensorboard, loadtest
        Need("", "services", "get"),  # a port-forward to svc/NAME
        Need("", "events", "list"),
        Need("", "events", "create"),  # deploy --canary: each decision on the InferenceService
    ]
    if s.image_pull_secret:
        found.append(Need("", "secrets", "get"))
    if s.serving_mode == "standard":  # deploy drops the autoscaler a redeploy moved from
        for api, kind in AUTOSCALER_OBJECTS.values():
            found += _verbs(group_of(api), resource_of(kind), ("get", "delete"))
    roles = []
    if s.with_monitoring and not s.prometheus:
        found.append(Need("", "services/proxy", "get"))  # its API, through the API server
        roles += [o for o in stack.prometheus_objects(s) if o["kind"] == "Role"]
    if s.with_argo:
        roles += [o for o in workflow_rbac(s, list(models)) if o["kind"] == "Role"]
    for role in roles:  # to create a Role, hold what it grants (RBAC's escalation check)
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups") or [""]:
                for resource in rule.get("resources") or []:
                    found += _verbs(group, resource, rule.get("verbs") or [])
    return sorted(set(found), key=_order)


def _order(n: Need) -> tuple[str, str, int]:
    rank = VERB_ORDER.index(n.verb) if n.verb in VERB_ORDER else len(VERB_ORDER)
    return (n.group, n.resource, rank)


def allows(rules: Iterable[dict[str, Any]], need: Need) -> bool:
    """Whether one of a SelfSubjectRulesReview's ``resourceRules`` grants ``need`` (RBAC's
    matching: ``*`` for any verb, group or resource, ``*/log`` for a subresource of any;
    a rule limited to ``resourceNames`` does not grant a verb on every name)."""
    sub = need.resource.partition("/")[2]
    for rule in rules:
        if rule.get("resourceNames"):
            continue
        verbs, groups = rule.get("verbs") or [], rule.get("apiGroups") or []
        resources = rule.get("resources") or []
        if not ("*" in verbs or need.verb in verbs):
            continue
        if not ("*" in groups or need.group in groups):
            continue
        if "*" in resources or need.resource in resources or (sub and f"*/{sub}" in resources):
            return True
    return False


def by_resource(wanted: Iterable[Need]) -> dict[tuple[str, str], list[str]]:
    """{(group, resource): verbs}, in ``needs``' order."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for n in sorted(set(wanted), key=_order):
        grouped.setdefault((n.group, n.resource), []).append(n.verb)
    return grouped


def listing(wanted: Iterable[Need]) -> list[str]:
    """``tfjobs.kubeflow.org: get, list, create, patch, delete``, one line per resource."""
    return [
        f"{Need(group, resource, '').resource_name}: {', '.join(verbs)}"
        for (group, resource), verbs in by_resource(wanted).items()
    ]


def role_name(username: str) -> str:
    """``distml-user-<user>``: each user's own Role and RoleBinding, so that applying a
    second user's file never replaces the first's subjects or rules. The user name
    lower-cased, every run of other characters than [a-z0-9] a '-', cut to NAME_KEPT,
    then 8 hex of its sha256 (two names that clean alike still differ)."""
    import hashlib
    import re

    cleaned = re.sub(r"[^a-z0-9]+", "-", username.lower()).strip("-")[:NAME_KEPT].strip("-")
    digest = hashlib.sha256(username.encode()).hexdigest()[:8]
    return f"{ROLE_NAME}-{cleaned}-{digest}" if cleaned else f"{ROLE_NAME}-{digest}"


def role(namespace: str, wanted: Iterable[Need], username: str) -> dict[str, Any]:
    """The Role :func:`role_name` granting exactly ``wanted`` in ``namespace``: one rule
    per API group and verb list, its resources together."""
    rules: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), verbs in by_resource(wanted).items():
        rules.setdefault((group, tuple(verbs)), []).append(resource)
    return {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": {"name": role_name(username), "namespace": namespace, "labels": labels()},
        "rules": [
            {"apiGroups": [group], "resources": resources, "verbs": list(verbs)}
            for (group, verbs), resources in rules.items()
        ],
    }


def subject(username: str) -> dict[str, Any]:
    """The RoleBinding subject for a user name as the API says it (a ServiceAccount's is
    ``system:serviceaccount:NS:NAME``)."""
    parts = username.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return {"kind": "ServiceAccount", "name": parts[3], "namespace": parts[2]}
    return {"kind": "User", "apiGroup": RBAC_GROUP, "name": username}


def role_binding(namespace: str, username: str) -> dict[str, Any]:
    """Binds the user's own Role (:func:`role_name`) to ``username`` in ``namespace``."""
    name = role_name(username)
    return {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": labels()},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
        "subjects": [subject(username)],
    }


def access_yaml(namespace: str, wanted: Iterable[Need], username: str) -> str:
    """The Role and its RoleBinding, as one YAML stream for ``kubectl apply -f``."""
    docs = [role(namespace, wanted, username), role_binding(namespace, username)]
    return yaml.safe_dump_all(docs, sort_keys=False)


# --------------------------------------------------------------------------- reviews


def rules_review(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": AUTHZ_API,
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }


def access_review(namespace: str, need: Need) -> dict[str, Any]:
    resource, _, sub = need.resource.partition("/")
    attributes = {"namespace": namespace, "verb": need.verb, "group": need.group}
    attributes |= {"resource": resource, **({"subresource": sub} if sub else {})}
    return {
        "apiVersion": AUTHZ_API,
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }


def self_review() -> dict[str, Any]:
    return {"apiVersion": AUTHN_API, "kind": "SelfSubjectReview"}


def refusal(
    namespace: str, username: str, missing: Iterable[Need], yaml_text: str, command: str
) -> str:
    """What `up` says before any write when the user lacks some of ``needs``."""
    shown = username if username != USER_PLACEHOLDER else "this user"
    lines = [
        f"{shown} lacks the rights distml needs in namespace {namespace} (nothing was "
        "written); missing, per resource:",
        *(f"  - {line}" for line in listing(missing)),
        f"a Role {role_name(username)} granting exactly these, and its RoleBinding, for the "
        "cluster's "
        f"admin to apply (`kubectl apply -f FILE`; namespace {namespace} only, nothing "
        "cluster-wide):",
        yaml_text.rstrip("\n"),
        f"write them to a file for the admin: `{command}`",
    ]
    if username == USER_PLACEHOLDER:
        lines.append(
            f"(the API did not say who you are: replace {USER_PLACEHOLDER} with your user "
            "name as the cluster knows it)"
        )
    return "\n".join(lines)
