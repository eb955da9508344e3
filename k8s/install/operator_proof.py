"""How an operator is found when its namespace cannot be read: a user whose rights end at
their own namespace (ClusterRole ``admin`` through a RoleBinding) gets HTTP 403 on the
operator's Deployment. What every such user may still do proves it instead:

- API discovery (``Kube.served``; ``system:discovery`` is bound to every user): the kinds
  the operator's CRDs serve, or its aggregated API;
- a server-side dry-run create (``dryRun=All``) of one of distml's own objects, with a
  throwaway name, in the user's namespace: admitted only when the operator's admission
  webhooks answer (the training operator's for a TFJob; KServe's, served with the
  certificate cert-manager issues it, for an InferenceService); nothing is stored;
- a read of the aggregated API itself (metrics-server: PodMetrics in the namespace; the
  ``admin`` ClusterRole aggregates ``system:aggregated-metrics-reader``, which
  metrics-server's components.yaml labels ``aggregate-to-admin``).

A step none of these can prove (Istio, Knative, KEDA, Argo: their kinds have no webhook
of theirs that a dry run would reach) is never taken as found from discovery alone, nor as
missing: the caller reports it as blocked, the cluster admin's to confirm.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from k8s import manifests
from k8s.client.kube import KubeError
from k8s.providers.settings import Settings
from ml.contract import MODEL_TYPES

# The kinds whose being served says the step's CRDs (or aggregated API) are installed.
SERVED: dict[str, tuple[tuple[str, str], ...]] = {
    "training_operator": (("kubeflow.org/v1", "TFJob"),),
    "cert_manager": (("cert-manager.io/v1", "Certificate"),),
    "istio": (("networking.istio.io/v1beta1", "VirtualService"),),
    "knative": (("serving.knative.dev/v1", "Service"),),
    "metrics_server": (("metrics.k8s.io/v1beta1", "PodMetrics"),),
    "kserve": (
        ("serving.kserve.io/v1beta1", "InferenceService"),
        ("serving.kserve.io/v1alpha1", "ServingRuntime"),
    ),
    "keda": (("keda.sh/v1alpha1", "ScaledObject"),),
    "argo": (("argoproj.io/v1alpha1", "Workflow"),),
}


@dataclass(frozen=True)
class Probe:
    """What proves a step runs beyond discovery: a dry-run create of ``kind`` (``dry_run``)
    or a list of ``api_version``/``kind`` in the user's namespace (``dry_run`` False)."""

    api_version: str
    kind: str
    dry_run: bool
    says: str  # what its answer proves, for the message


_ISVC = Probe(
    "serving.kserve.io/v1beta1",
    "InferenceService",
    True,
    "KServe's webhooks answer (their certificate is cert-manager's)",
)
PROBES: dict[str, Probe] = {
    "training_operator": Probe(
        "kubeflow.org/v1", "TFJob", True, "the training operator's webhook answers"
    ),
    "cert_manager": _ISVC,
    "kserve": _ISVC,
    "metrics_server": Probe(
        "metrics.k8s.io/v1beta1", "PodMetrics", False, "metrics-server answers"
    ),
}


def discovered(kube: Any, step: str) -> tuple[bool, str]:
    """(every kind of the step served, what discovery said: ``kubeflow.org/v1 TFJob
    served``). A discovery that fails (unreachable, 5xx) raises its KubeError."""
    kinds = SERVED[step]
    missing = [(api, kind) for api, kind in kinds if not kube.served(api, kind)]
    shown = missing or list(kinds)
    said = ", ".join(f"{api} {kind}" for api, kind in shown)
    return not missing, f"{said} {'not ' if missing else ''}served"


def probe_object(kind: str, s: Settings) -> dict[str, Any]:
    """One of distml's own objects of ``kind``, as `train-all`/`deploy` would apply it in
    ``s.namespace``, under a throwaway name (``distml-probe-<hex>``)."""
    obj = manifests.tfjob(s, MODEL_TYPES[0]) if kind == "TFJob" else manifests.inference_service(s)
    meta = {**obj["metadata"], "name": f"distml-probe-{secrets.token_hex(3)}"}
    return {**obj, "metadata": meta}


def refused(kube: Any, probe: Probe, s: Settings) -> str:
    """ "" when the probe answers as it should; else the API server's answer (a webhook
    that refused or did not answer, a 4xx). No answer at all (unreachable, a timeout)
    raises: that is not a finding about the operator."""
    try:
        if probe.dry_run:
            kube.create(probe_object(probe.kind, s), dry_run=True)
        else:
            kube.list(probe.api_version, probe.kind, s.namespace)
    except KubeError as e:
        if e.status is None or (e.status >= 500 and "webhook" not in str(e)):
            raise
        return str(e)
    return ""


def prove(
    kube: Any, step: str, namespace: str, s: Settings | None, install: str
) -> tuple[str, str]:
    """(how it was found, "") or ("", why it cannot be taken as there) for ``step``,
    whose ``namespace`` answered 403. ``install``: the command that installs it by hand,
    for the admin. Never ("", "") : a forbidden namespace is never taken as missing."""
    where = f"its namespace {namespace} cannot be read"
    unread = f"{where} here (forbidden)"
    served, said = discovered(kube, step)
    if not served:
        return "", (
            f"{unread} and API discovery says {said}: it is not installed, and installing "
            f"it needs rights cluster-wide that this user lacks: the cluster's admin "
            f"installs it (`{install}`)"
        )
    probe = PROBES.get(step)
    if probe is None or s is None:
        return "", (
            f"{unread}; API discovery says {said}, but nothing a user of one namespace may "
            f"do proves it runs: the cluster's admin confirms it, or grants `get` on "
            f"deployments in {namespace}"
        )
    if probe.dry_run:
        how, answered = f"a dry-run {probe.kind}", "admitted"
    else:
        how, answered = f"a list of {probe.kind} in {s.namespace}", "answered"
    why = refused(kube, probe, s)
    if why:
        return "", f"{unread}; API discovery says {said}, but {how} was refused: {why}"
    return f"found by API discovery ({said}) and {how} {answered} ({probe.says}); {where}", ""
