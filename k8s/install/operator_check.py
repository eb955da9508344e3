"""What `up` finds installed on a cluster it did not create: each operator's Deployment,
the version it runs (against the version distml pins), and, for what is missing, the
exact command that installs it.

Before ``up --install-operators`` installs anything, it surveys every step it would install
(``survey``, read-only) and installs nothing when one is blocked: a Deployment there but not
Available, or any object its install would make cluster-wide (a CRD, an admission webhook
configuration, an APIService: ``CLUSTER_WIDE``) there without its Deployment — another
install's, which applying the pinned file would take over.

The versions below are what the pinned install files deploy (the Deployment's
``app.kubernetes.io/version`` label where it has one, else its image tag), and
``CLUSTER_WIDE`` is what they make cluster-wide; ``tests/k8s/install/test_operator_check.py`` reads
both out of the pinned files (``k8s/install/upstream_files.py``, ``$DISTML_UPSTREAM_DIR``). They are
written out here because `up` must not need those files to check a cluster (the training
operator's is built by ``kubectl kustomize``, never downloaded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.errors import DistmlError
from k8s.client.kube import KubeError
from k8s.client.objects import Kubectl, is_true
from k8s.install import versions
from k8s.install.operator_proof import prove
from k8s.manifests.names import ARGO_NAMESPACE
from k8s.providers.settings import Settings

VERSION_LABEL = "app.kubernetes.io/version"


class MissingOperators(DistmlError):
    """An existing cluster lacks operators distml needs; the message says how to add them."""


@dataclass(frozen=True)
class Probe:
    """The Deployment that says an install step is there, and the version pinned."""

    namespace: str
    deployment: str
    pinned: str  # as ``found_version`` reads it from the pinned install file
    install: tuple[str, ...]  # the kubectl commands' arguments that install it by hand
    label: str  # what `up` calls it
    also: tuple[str, ...] = ()  # the install's other Deployments `up` needs Available

    @property
    def deployments(self) -> tuple[str, ...]:
        return (self.deployment, *self.also)


PROBES: dict[str, Probe] = {
    "training_operator": Probe(
        "kubeflow",
        "training-operator",
        "v1-5170a36",  # the image tag of training-operator v1.9.0's standalone overlay
        (f"apply --server-side --force-conflicts -k '{versions.TRAINING_OPERATOR_KUSTOMIZE}'",),
        f"Kubeflow training operator {versions.TRAINING_OPERATOR_REF}",
    ),
    "cert_manager": Probe(
        "cert-manager",
        "cert-manager-webhook",
        versions.CERT_MANAGER_VERSION,
        (f"apply --server-side -f {versions.CERT_MANAGER_URL}",),
        f"cert-manager {versions.CERT_MANAGER_VERSION}",
    ),
    "istio": Probe(
        "istio-system",
        "istiod",
        versions.ISTIO_VERSION,
        (f"apply -f {versions.ISTIO_URL}",),
        f"Istio {versions.ISTIO_VERSION} (net-istio {versions.KNATIVE_VERSION})",
    ),
    "knative": Probe(
        "knative-serving",
        "net-istio-controller",
        versions.KNATIVE_VERSION.removeprefix("knative-v"),
        (
            f"apply -f {versions.KNATIVE_SERVING_CRDS_URL}",
            f"apply -f {versions.KNATIVE_SERVING_CORE_URL}",
            f"apply -f {versions.NET_ISTIO_URL}",
        ),
        f"Knative Serving {versions.KNATIVE_VERSION}",
    ),
    "metrics_server": Probe(
        "kube-system",
        "metrics-server",
        versions.METRICS_SERVER_VERSION,
        (f"apply -f {versions.METRICS_SERVER_URL}",),
        f"metrics-server {versions.METRICS_SERVER_VERSION}",
    ),
    "kserve": Probe(
        "kserve",
        "kserve-controller-manager",
        versions.KSERVE_VERSION,
        (
            "create namespace kserve",
            f"apply --server-side -f {versions.KSERVE_CRDS_URL}",
            f"apply --server-side -f {versions.KSERVE_URL}",
        ),
        f"KServe {versions.KSERVE_VERSION}",
    ),
    "argo": Probe(
        ARGO_NAMESPACE,
        "workflow-controller",
        versions.ARGO_WORKFLOWS_VERSION,
        (
            f"create namespace {ARGO_NAMESPACE}",
            f"apply --server-side -n {ARGO_NAMESPACE} -f {versions.ARGO_WORKFLOWS_URL}",
        ),
        f"Argo Workflows {versions.ARGO_WORKFLOWS_VERSION}",
        also=("argo-server",),
    ),
    # `up --with-monitoring` in standard mode: KServe's `autoscalerClass: keda` hands KEDA a
    # ScaledObject. The release file holds its Namespace; its scaledjobs CRD (~330 KB) needs
    # --server-side. Its Deployments as that file names them.
    "keda": Probe(
        "keda",
        "keda-operator",
        versions.KEDA_VERSION,
        (f"apply --server-side -f {versions.KEDA_URL}",),
        f"KEDA {versions.KEDA_VERSION}",
        also=("keda-metrics-apiserver", "keda-admission"),
    ),
}

# The API version of each kind in CLUSTER_WIDE, and its name for `kubectl get`.
CLUSTER_WIDE_KINDS = {
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "crd"),
    "ValidatingWebhookConfiguration": (
        "admissionregistration.k8s.io/v1",
        "validatingwebhookconfiguration",
    ),
    "MutatingWebhookConfiguration": (
        "admissionregistration.k8s.io/v1",
        "mutatingwebhookconfiguration",
    ),
    "APIService": ("apiregistration.k8s.io/v1", "apiservice"),
}

# What each step's pinned install files make cluster-wide, by kind: every CRD (a standalone
# mpi-operator's mpijobs.kubeflow.org is also the training operator's), every admission
# webhook configuration (the training operator's is failurePolicy: Fail) and APIService.
# There without the step's Deployment, each is another install's: distml does not apply
# over it. Held against the pinned files by tests/k8s/install/test_operator_check.py.
CLUSTER_WIDE: dict[str, dict[str, tuple[str, ...]]] = {
    "training_operator": {
        "CustomResourceDefinition": (
            "jaxjobs.kubeflow.org",
            "mpijobs.kubeflow.org",
            "paddlejobs.kubeflow.org",
            "pytorchjobs.kubeflow.org",
            "tfjobs.kubeflow.org",
            "xgboostjobs.kubeflow.org",
        ),
        "ValidatingWebhookConfiguration": ("validator.training-operator.kubeflow.org",),
    },
    "cert_manager": {
        "CustomResourceDefinition": (
            "certificaterequests.cert-manager.io",
            "certificates.cert-manager.io",
            "challenges.acme.cert-manager.io",
            "clusterissuers.cert-manager.io",
            "issuers.cert-manager.io",
            "orders.acme.cert-manager.io",
        ),
        "ValidatingWebhookConfiguration": ("cert-manager-webhook",),
        "MutatingWebhookConfiguration": ("cert-manager-webhook",),
    },
    "istio": {
        "CustomResourceDefinition": (
            "authorizationpolicies.security.istio.io",
            "destinationrules.networking.istio.io",
            "envoyfilters.networking.istio.io",
            "gateways.networking.istio.io",
            "peerauthentications.security.istio.io",
            "proxyconfigs.networking.istio.io",
            "requestauthentications.security.istio.io",
            "serviceentries.networking.istio.io",
            "sidecars.networking.istio.io",
            "telemetries.telemetry.istio.io",
            "virtualservices.networking.istio.io",
            "wasmplugins.extensions.istio.io",
            "workloadentries.networking.istio.io",
            "workloadgroups.networking.istio.io",
        ),
        "ValidatingWebhookConfiguration": ("istio-validator-istio-system",),
        "MutatingWebhookConfiguration": ("istio-sidecar-injector",),
    },
    "knative": {
        "CustomResourceDefinition": (
            "certificates.networking.internal.knative.dev",
            "clusterdomainclaims.networking.internal.knative.dev",
            "configurations.serving.knative.dev",
            "domainmappings.serving.knative.dev",
            "images.caching.internal.knative.dev",
            "ingresses.networking.internal.knative.dev",
            "metrics.autoscaling.internal.knative.dev",
            "podautoscalers.autoscaling.internal.knative.dev",
            "revisions.serving.knative.dev",
            "routes.serving.knative.dev",
            "serverlessservices.networking.internal.knative.dev",
            "services.serving.knative.dev",
        ),
        "ValidatingWebhookConfiguration": (
            "config.webhook.istio.networking.internal.knative.dev",
            "config.webhook.serving.knative.dev",
            "validation.webhook.serving.knative.dev",
        ),
        "MutatingWebhookConfiguration": (
            "webhook.istio.networking.internal.knative.dev",
            "webhook.serving.knative.dev",
        ),
    },
    "metrics_server": {"APIService": ("v1beta1.metrics.k8s.io",)},
    "kserve": {
        "CustomResourceDefinition": (
            "clusterservingruntimes.serving.kserve.io",
            "clusterstoragecontainers.serving.kserve.io",
            "inferencegraphs.serving.kserve.io",
            "inferencemodelrewrites.llm-d.ai",
            "inferenceobjectives.llm-d.ai",
            "inferencepools.inference.networking.k8s.io",
            "inferencepools.inference.networking.x-k8s.io",
            "inferenceservices.serving.kserve.io",
            "llminferenceserviceconfigs.serving.kserve.io",
            "llminferenceservices.serving.kserve.io",
            "localmodelcaches.serving.kserve.io",
            "localmodelnamespacecaches.serving.kserve.io",
            "localmodelnodegroups.serving.kserve.io",
            "localmodelnodes.serving.kserve.io",
            "servingruntimes.serving.kserve.io",
            "trainedmodels.serving.kserve.io",
        ),
        "ValidatingWebhookConfiguration": (
            "clusterservingruntime.serving.kserve.io",
            "inferencegraph.serving.kserve.io",
            "inferenceservice.serving.kserve.io",
            "llminferenceservice.serving.kserve.io",
            "llminferenceserviceconfig.serving.kserve.io",
            "localmodelcache.serving.kserve.io",
            "servingruntime.serving.kserve.io",
            "trainedmodel.serving.kserve.io",
        ),
        "MutatingWebhookConfiguration": (
            "inferenceservice.serving.kserve.io",
            "llminferenceservice.serving.kserve.io",
        ),
    },
    "argo": {
        "CustomResourceDefinition": (
            "clusterworkflowtemplates.argoproj.io",
            "cronworkflows.argoproj.io",
            "workflowartifactgctasks.argoproj.io",
            "workfloweventbindings.argoproj.io",
            "workflows.argoproj.io",
            "workflowtaskresults.argoproj.io",
            "workflowtasksets.argoproj.io",
            "workflowtemplates.argoproj.io",
        ),
    },
    # KEDA serves external.metrics.k8s.io (metrics-server serves metrics.k8s.io: no clash);
    # another install's APIService for it (a prometheus-adapter, say) blocks the step.
    "keda": {
        "CustomResourceDefinition": (
            "cloudeventsources.eventing.keda.sh",
            "clustercloudeventsources.eventing.keda.sh",
            "clustertriggerauthentications.keda.sh",
            "scaledjobs.keda.sh",
            "scaledobjects.keda.sh",
            "triggerauthentications.keda.sh",
        ),
        "ValidatingWebhookConfiguration": ("keda-admission",),
        "APIService": ("v1beta1.external.metrics.k8s.io",),
    },
}


@dataclass(frozen=True)
class Finding:
    """What ``survey`` found of one install step: its Deployment, Available, or (its
    namespace forbidden) the proof of it by what a namespace user may do (``found``); a
    reason distml must not install it (``blocked``); or neither: it is missing."""

    step: str
    deployment: dict[str, Any] | None = None
    blocked: str = ""
    proof: str = ""  # how it was found without reading its namespace (operator_proof)

    @property
    def found(self) -> bool:
        return self.deployment is not None or bool(self.proof)

    @property
    def missing(self) -> bool:
        return not self.found and not self.blocked


def found_version(deployment: dict[str, Any]) -> str:
    """The version a Deployment runs: its version label, else its first image's tag
    ("" when neither says)."""
    metadata = deployment.get("metadata") or {}
    label = (metadata.get("labels") or {}).get(VERSION_LABEL)
    if label:
        return str(label)
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = spec.get("containers") or [{}]
    image = str(containers[0].get("image") or "").split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def found_note(finding: Finding, label: str) -> str:
    """One line: how a found step was found (its Deployment's version, or the proof)."""
    if finding.deployment is None:
        pinned = PROBES[finding.step].pinned
        return f"{label}: {finding.proof} (its version cannot be read; distml pins {pinned})"
    return version_note(finding.step, label, finding.deployment)


def version_note(step: str, label: str, deployment: dict[str, Any]) -> str:
    """One line: what was found, and whether it is the version distml pins."""
    probe = PROBES[step]
    have = found_version(deployment)
    where = f"{probe.namespace}/{probe.deployment}"
    if have == probe.pinned:
        return f"{label}: found ({where}, {have}), the version distml pins"
    return (
        f"{label}: found ({where}, {have or 'version unknown'}); distml pins {probe.pinned} "
        "and uses it as it is (a different version may differ in behaviour)"
    )


def cluster_wide(step: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of everything ``step``'s install makes cluster-wide."""
    return [
        (CLUSTER_WIDE_KINDS[kind][0], kind, name)
        for kind, names in CLUSTER_WIDE[step].items()
        for name in names
    ]


def survey(kube: Any, step: str, kubectl: Kubectl, *, settings: Settings | None = None) -> Finding:
    """What is there of ``step`` (read-only): its Deployments all Available (found); one of
    them there but not Available, or some missing beside the others (blocked: a broken or
    partial install, the admin's); none of them, but something its install makes
    cluster-wide there (blocked: another install's, which applying would take over); or
    nothing (missing). The commands in a reason are built by ``kubectl``.

    Its namespace forbidden (HTTP 403 only: any other failure raises), found by API
    discovery and a dry run in ``settings.namespace`` (``operator_proof``), else blocked:
    never missing (nothing is installed over it) and never found without that proof."""
    probe = PROBES[step]
    ns = probe.namespace
    try:
        have = {d: kube.get("apps/v1", "Deployment", d, ns) for d in probe.deployments}
    except KubeError as e:
        if not e.forbidden:
            raise
        install = "; ".join(kubectl(args) for args in probe.install)
        proof, blocked = prove(kube, step, ns, settings, install)
        return Finding(step, proof=proof, blocked=blocked)
    if all(is_true(d, "Available") for d in have.values()):
        return Finding(step, deployment=have[probe.deployment])
    there = [d for d, obj in have.items() if obj is not None]
    if there:
        unready = [d for d in there if not is_true(have[d], "Available")]
        if unready:
            look = kubectl(f"-n {ns} describe deployment {unready[0]}")
            why = f"Deployment {ns}/{unready[0]} is there but not Available (`{look}`)"
        else:
            absent = ", ".join(f"{ns}/{d}" for d in probe.deployments if d not in there)
            why = f"Deployment {absent} is missing beside {ns}/{there[0]}: a partial install"
        return Finding(step, blocked=why)
    taken = [(kind, name) for api, kind, name in cluster_wide(step) if kube.get(api, kind, name)]
    if not taken:
        return Finding(step)
    kind, name = taken[0]
    look = kubectl(f"get {CLUSTER_WIDE_KINDS[kind][1]} {name} -o yaml")
    return Finding(
        step,
        blocked=f"{_listed(taken)} {'is' if len(taken) == 1 else 'are'} there without "
        f"Deployment {ns}/{probe.deployment}: another install's, which installing "
        f"{probe.label} would take over (`{look}` shows its labels and field managers)",
    )


def _listed(objects: list[tuple[str, str]]) -> str:
    """``CustomResourceDefinitions a, b and ValidatingWebhookConfiguration c``."""
    kinds: dict[str, list[str]] = {}
    for kind, name in objects:
        kinds.setdefault(kind, []).append(name)
    return " and ".join(
        f"{kind}{'s' if len(names) > 1 else ''} {', '.join(names)}" for kind, names in kinds.items()
    )


def blocked_message(
    steps: list[tuple[str, str, str]], context: str, to_install: list[str] | None = None
) -> str:
    """What is there but not usable: distml leaves it to the cluster's admin, and installs
    nothing (``to_install``: the labels of what `up --install-operators` would install)."""
    lines = [f"on the cluster of context {context!r}, distml will not install over:"]
    lines += [f"  - {label}: {why}" for _, label, why in steps]
    lines.append(
        "that is the cluster admin's to sort out (docs/existing-cluster.md): a Deployment to "
        "make Available, or an operator to install where distml looks, knowing what it owns"
    )
    after = f": once that is sorted out, it installs {', '.join(to_install)}" if to_install else ""
    lines.append(f"distml installed nothing (it checks every step before installing any){after}")
    return "\n".join(lines)


def missing_message(steps: list[tuple[str, str]], context: str, kubectl: Kubectl) -> str:
    """What is missing on the cluster and how to install it: distml, asked, or by hand
    (each command built by ``kubectl``, the provider's: it names the context)."""
    lines = [f"the cluster of context {context!r} lacks what distml needs:"]
    for step, label in steps:
        probe = PROBES[step]
        by_hand = "; ".join(f"`{kubectl(args)}`" for args in probe.install)
        lines.append(
            f"  - {label} (no Available Deployment {probe.namespace}/{probe.deployment}); "
            f"by hand: {by_hand}"
        )
    lines.append(
        "install them all with `invoke up --runtime existing --install-operators` (it "
        "applies the pinned files above and changes nothing else cluster-wide), or ask the "
        "cluster's admin"
    )
    return "\n".join(lines)
