"""What `up` finds installed on a cluster it did not create: each operator's Deployment,
the version it runs (against the version distml pins), and, for what is missing, the
exact command that installs it.

The versions below are what the pinned install files deploy (the Deployment's
``app.kubernetes.io/version`` label where it has one, else its image tag);
``tests/k8s/test_operator_check.py`` reads them out of ``../shared/k8s-upstream``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.errors import DistmlError
from k8s import versions
from k8s.manifests.names import ARGO_NAMESPACE
from k8s.objects import Kubectl

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
    # What its install leaves cluster-wide (a CRD, an APIService): present without the
    # Deployment above, it is installed some other way, and distml does not install over it.
    marker: tuple[str, str, str] = ("", "", "")


CRD = "apiextensions.k8s.io/v1", "CustomResourceDefinition"


PROBES: dict[str, Probe] = {
    "training_operator": Probe(
        "kubeflow",
        "training-operator",
        "v1-5170a36",  # the image tag of training-operator v1.9.0's standalone overlay
        (f"apply --server-side --force-conflicts -k '{versions.TRAINING_OPERATOR_KUSTOMIZE}'",),
        marker=(*CRD, "tfjobs.kubeflow.org"),
    ),
    "cert_manager": Probe(
        "cert-manager",
        "cert-manager-webhook",
        versions.CERT_MANAGER_VERSION,
        (f"apply --server-side -f {versions.CERT_MANAGER_URL}",),
        marker=(*CRD, "certificates.cert-manager.io"),
    ),
    "istio": Probe(
        "istio-system",
        "istiod",
        versions.ISTIO_VERSION,
        (f"apply -f {versions.ISTIO_URL}",),
        marker=(*CRD, "gateways.networking.istio.io"),
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
        marker=(*CRD, "services.serving.knative.dev"),
    ),
    "metrics_server": Probe(
        "kube-system",
        "metrics-server",
        versions.METRICS_SERVER_VERSION,
        (f"apply -f {versions.METRICS_SERVER_URL}",),
        marker=("apiregistration.k8s.io/v1", "APIService", "v1beta1.metrics.k8s.io"),
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
        marker=(*CRD, "inferenceservices.serving.kserve.io"),
    ),
    "argo": Probe(
        ARGO_NAMESPACE,
        "workflow-controller",
        versions.ARGO_WORKFLOWS_VERSION,
        (
            f"create namespace {ARGO_NAMESPACE}",
            f"apply --server-side -n {ARGO_NAMESPACE} -f {versions.ARGO_WORKFLOWS_URL}",
        ),
        marker=(*CRD, "workflows.argoproj.io"),
    ),
}


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


def blocked_reason(kube: Any, step: str, kubectl: Kubectl) -> str | None:
    """Why distml must not install ``step`` although its Deployment is not Available:
    the Deployment is there but not Available, or the install's CRD / APIService is there
    (installed another way, or under other names). None: it is simply absent. The command
    in a reason is built by ``kubectl`` (the provider's: it names the context)."""
    probe = PROBES[step]
    where = f"{probe.namespace}/{probe.deployment}"
    if kube.get("apps/v1", "Deployment", probe.deployment, probe.namespace) is not None:
        look = f"`{kubectl(f'-n {probe.namespace} describe deployment {probe.deployment}')}`"
        return f"Deployment {where} is there but not Available ({look})"
    api_version, kind, name = probe.marker
    if name and kube.get(api_version, kind, name) is not None:
        return f"{kind} {name} is there without Deployment {where}: installed some other way"
    return None


def blocked_message(steps: list[tuple[str, str, str]], context: str) -> str:
    """What is there but not usable: distml leaves it to the cluster's admin."""
    lines = [f"on the cluster of context {context!r}, distml will not install over:"]
    lines += [f"  - {label}: {why}" for _, label, why in steps]
    lines.append(
        "ask the cluster's admin to make it Available (or to install it where distml looks: "
        "docs/existing-cluster.md)"
    )
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
