"""The RBAC of `invoke workflow`: what the Workflow's own pods may do, and what Argo's
controller needs in the project namespace for the Workflow's memoization cache. Namespaced
Roles only: no ClusterRole, nothing beyond what is used, and ``get``/``patch`` only on the
objects the steps write (``resourceNames``; a ``create`` cannot be limited so).

- The steps' ServiceAccount (``WORKFLOW_SA``), its Role and RoleBinding: ``workflow_rbac``.
- Argo's workflow-controller (its ServiceAccount, read from its Deployment by `invoke
  workflow`: ``controller_service_account``; ``ARGO_CONTROLLER_SA`` as install.yaml names
  it when the Deployment cannot be read) keeps the ingestion step's memoization entries in
  a ConfigMap ``workflow_cache_name(namespace)`` **in its own namespace**
  (``ARGO_NAMESPACE``), not the Workflow's: v4.1.2
  workflow/controller/controller.go:235 builds its cache factory with the controller's
  namespace, and cache/cache.go:98 opens every ConfigMap cache there (seen in the first
  real run: "cannot create resource configmaps ... in the namespace argo").
  install.yaml's ``argo-cluster-role`` grants it only get/list/watch on configmaps.
  cache/configmap_cache.go GETs that ConfigMap and UPDATEs it both to save an entry
  (``save``: without the write the controller marks the step Error, operator.go:
  ``c.Save`` ... ``NodeError``) and on every cache hit (``load`` records the hit time). It
  CREATEs the ConfigMap only when it is absent, and `invoke workflow` makes it before
  every submission: no ``create`` (which a ``resourceNames`` rule could not limit
  anyway). ``cache_writer_rbac``: a Role and RoleBinding in ``ARGO_NAMESPACE``.
  Every one of those names carries the distml namespace (``per_namespace``): each
  namespace's `down` deletes its own and never another namespace's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from k8s.manifests.checks import check_models, check_settings
from k8s.manifests.inference import has_ingress, ingress_service
from k8s.manifests.names import (
    ARGO_CONTROLLER_SA,
    ARGO_NAMESPACE,
    RUNTIME_NAME,
    WORKFLOW_COMPONENT,
    WORKFLOW_SA,
    cache_writer_name,
    tfjob_name,
    workflow_cache_name,
)
from k8s.manifests.pods import meta
from k8s.providers.settings import Settings

RBAC_GROUP = "rbac.authorization.k8s.io"
# A serving step: `kubectl create` (create), then `kubectl patch <resource> <name>` (get,
# patch: kubectl's resource builder reads a named object before it visits it, cli-runtime
# v0.33.1 pkg/resource/builder.go requireObject -> RetrieveLazy; k8s.manifests.guarded).
CREATE_THEN_PATCH = ("create", "get", "patch")


def _rules(group: str, resource: str, names: Sequence[str], verbs: Sequence[str]) -> list[dict]:
    """``create`` on any name (RBAC cannot limit a create by name), the other verbs only on
    ``names``."""
    out = []
    if "create" in verbs:
        out.append({"apiGroups": [group], "resources": [resource], "verbs": ["create"]})
    named = [v for v in verbs if v != "create"]
    if named:
        out.append(
            {
                "apiGroups": [group],
                "resources": [resource],
                "resourceNames": list(names),
                "verbs": named,
            }
        )
    return out


def workflow_rules(s: Settings, models: Sequence[str]) -> list[dict[str, Any]]:
    """Exactly what the Workflow's pods do with the Kubernetes API (and nothing more):

    - every step pod: Argo's executor reports the step's result as a WorkflowTaskResult
      (create, patch; manifests/quick-start/base/executor/emissary/executor-role.yaml;
      named after the step's node, so not limited by name);
    - the TFJob steps: ``kubectl create`` (create), then the conditions are polled with
      GET (workflow/executor/resource.go: WaitResource -> checkResourceState): GET only
      the TFJobs of ``models``;
    - the serving steps: ``kubectl create`` (create), then ``kubectl patch --type json``
      by name (get, then patch: the JSON Patch that tests the object is this work dir's);
      for the InferenceService, the same GET poll; on a cluster distml made, in standard
      mode, also the ingress Service. get and patch only the objects of those names.

    No pods/log: no step reads logs (``--watch`` reads them with the user's credentials).
    """
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflowtaskresults"],
            "verbs": ["create", "patch"],
        },
        *_rules("kubeflow.org", "tfjobs", [tfjob_name(m) for m in models], ["create", "get"]),
        *_rules("serving.kserve.io", "inferenceservices", [s.service], CREATE_THEN_PATCH),
    ]
    if s.predictor == "kserve":
        rules += _rules("serving.kserve.io", "servingruntimes", [RUNTIME_NAME], CREATE_THEN_PATCH)
    if has_ingress(s):
        name = ingress_service(s)["metadata"]["name"]
        rules += _rules("", "services", [name], CREATE_THEN_PATCH)
    return rules


def _role_and_binding(
    name: str, namespace: str, rules: list[dict[str, Any]], subject: dict[str, str]
) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "Role",
            "metadata": meta(name, namespace, WORKFLOW_COMPONENT),
            "rules": rules,
        },
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "RoleBinding",
            "metadata": meta(name, namespace, WORKFLOW_COMPONENT),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", **subject}],
        },
    ]


def workflow_rbac(s: Settings, models: Sequence[str]) -> list[dict[str, Any]]:
    """The Workflow's ServiceAccount, its Role (namespaced: no ClusterRole) and the
    RoleBinding between them, in apply order, for a Workflow training ``models``."""
    check_settings(s)
    models = check_models(models)
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(WORKFLOW_SA, s.namespace, WORKFLOW_COMPONENT),
    }
    subject = {"name": WORKFLOW_SA, "namespace": s.namespace}
    return [sa, *_role_and_binding(WORKFLOW_SA, s.namespace, workflow_rules(s, models), subject)]


def controller_service_account(deployment: dict[str, Any] | None) -> str:
    """The ServiceAccount Argo's controller runs as, from its Deployment (``None``: it
    could not be read, and install.yaml's ``ARGO_CONTROLLER_SA`` is assumed). A pod
    template that names none runs as ``default``."""
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    spec = template.get("spec")
    if spec is None:
        return ARGO_CONTROLLER_SA
    return spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"


def cache_writer_rbac(s: Settings, controller_sa: str = ARGO_CONTROLLER_SA) -> list[dict[str, Any]]:
    """A Role in Argo's namespace (where the controller keeps its caches) letting Argo's
    controller (ServiceAccount ``controller_sa`` there) read and update this namespace's
    memoization ConfigMap (that one only), and its RoleBinding to that ServiceAccount."""
    check_settings(s)
    rules = [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [workflow_cache_name(s.namespace)],
            "verbs": ["get", "update"],
        }
    ]
    subject = {"name": controller_sa, "namespace": ARGO_NAMESPACE}
    return _role_and_binding(cache_writer_name(s.namespace), ARGO_NAMESPACE, rules, subject)
