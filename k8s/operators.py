"""Installing what the cluster needs: the training operator, cert-manager, Istio +
Knative (knative mode) or metrics-server (standard mode), KServe.

Each step first asks the cluster whether it is already there (a second ``invoke up``
reports every step as already done and changes nothing), then installs with ``kubectl``
through ``c.run`` (so ``--dry`` prints it), then waits for the component with a deadline.
Webhook races ("connection refused" / "x509" right after a Deployment turns Available)
are retried until the deadline.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from k8s import manifests, versions
from k8s.kube import Kube, KubeError
from k8s.providers import Provider
from k8s.settings import Settings
from k8s.waits import retry, wait_deployments_available

# Knative resolves image tags to digests through a registry; a locally imported image
# has none, so the revision would never become ready (RevisionMissing). These registries
# are skipped ("distml:<hash>" is docker.io/library/distml:<hash>).
SKIP_TAG_RESOLVING = "kind.local,ko.local,dev.local,docker.io,index.docker.io"
# Knative's default domain (svc.cluster.local) is not served by the ingress gateway:
# a real domain makes the ISVC URL routable; requests carry it as the Host header.
KNATIVE_DOMAIN = "example.com"


def deployment_available(kube: Kube, namespace: str, name: str) -> bool:
    dep = kube.get("apps/v1", "Deployment", name, namespace)
    conditions = ((dep or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)


@dataclass
class Installer:
    c: Any
    kube: Kube
    provider: Provider
    settings: Settings
    out: Callable[[str], None]
    clock: Any
    timeout: float = 600.0

    @property
    def dry(self) -> bool:
        return bool(self.c.config.run.dry)

    def kubectl(self, args: str, **kwargs: Any) -> Any:
        return self.c.run(self.provider.kubectl(args), **kwargs)

    def kubectl_retrying(self, args: str, what: str) -> None:
        """kubectl apply, retried through webhook races until the deadline."""

        def attempt() -> None:
            result = self.kubectl(args, warn=True)
            if not result.ok:
                raise KubeError(f"{what}: kubectl exited {result.exited}: {result.stderr[-300:]}")

        if self.dry:
            self.kubectl(args)
            return
        retry(attempt, what=what, timeout=self.timeout, clock=self.clock, out=self.out)

    def wait(self, namespace: str, names: list[str] | None = None) -> None:
        if not self.dry:
            wait_deployments_available(
                self.kube,
                namespace,
                names=names,
                timeout=self.timeout,
                clock=self.clock,
                out=self.out,
            )

    def present(self, label: str, namespace: str, deployment: str) -> bool:
        if deployment_available(self.kube, namespace, deployment):
            self.out(f"{label}: already installed")
            return True
        self.out(f"{label}: installing")
        return False

    # ------------------------------------------------------------------ steps
    def training_operator(self) -> None:
        label = f"Kubeflow training operator {versions.TRAINING_OPERATOR_REF}"
        if self.present(label, "kubeflow", "training-operator"):
            return
        # Server-side: client-side apply fails on the CRDs ("annotations: Too long").
        kustomization = shlex.quote(versions.TRAINING_OPERATOR_KUSTOMIZE)
        self.kubectl_retrying(f"apply --server-side --force-conflicts -k {kustomization}", label)
        self.wait("kubeflow", ["training-operator"])
        if not self.dry:
            # Its validating webhook answers a moment after the Deployment is Available:
            # a server-side dry-run TFJob proves it admits jobs.
            probe = manifests.tfjob(self.settings, "cnn")
            retry(
                lambda: self.kube.apply(probe, dry_run=True),
                what="the TFJob admission webhook",
                timeout=self.timeout,
                clock=self.clock,
                out=self.out,
            )

    def cert_manager(self) -> None:
        label = f"cert-manager {versions.CERT_MANAGER_VERSION}"
        if self.present(label, "cert-manager", "cert-manager-webhook"):
            return
        self.kubectl_retrying(f"apply --server-side -f {versions.CERT_MANAGER_URL}", label)
        self.wait("cert-manager")

    def istio(self) -> None:
        label = f"Istio (net-istio {versions.KNATIVE_VERSION})"
        if self.present(label, "istio-system", "istiod"):
            return
        url = versions.NET_ISTIO_ISTIO_URL
        self.kubectl_retrying(f"apply -l knative.dev/crd-install=true -f {url}", label)
        self.kubectl_retrying(f"apply -f {url}", label)
        self.wait("istio-system")
        if self.provider.name != "k3d":
            # No LoadBalancer on kind/minikube: expose the gateway on the node port the
            # host's ingress port is mapped to.
            port = self.settings.ingress_node_port
            patch = {"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}}
            self.kubectl(
                f"-n istio-system patch service istio-ingressgateway -p "
                f"{shlex.quote(json.dumps(patch))}"
            )

    def knative(self) -> None:
        label = f"Knative Serving {versions.KNATIVE_VERSION}"
        if self.present(label, "knative-serving", "net-istio-controller"):
            return
        self.kubectl_retrying(f"apply -f {versions.KNATIVE_SERVING_CRDS_URL}", label)
        self.kubectl_retrying(f"apply -f {versions.KNATIVE_SERVING_CORE_URL}", label)
        self.kubectl_retrying(f"apply -f {versions.NET_ISTIO_URL}", label)
        self.wait("knative-serving")
        for configmap, data in (
            ("config-domain", {KNATIVE_DOMAIN: ""}),
            ("config-deployment", {"registries-skipping-tag-resolving": SKIP_TAG_RESOLVING}),
        ):
            patch = shlex.quote(json.dumps({"data": data}))
            self.kubectl(f"-n knative-serving patch configmap {configmap} --type merge -p {patch}")

    def metrics_server(self) -> None:
        label = f"metrics-server {versions.METRICS_SERVER_VERSION}"
        if self.present(label, "kube-system", "metrics-server"):
            return
        if self.provider.name == "minikube":
            self.c.run(f"minikube -p {self.provider.cluster} addons enable metrics-server")
        else:
            self.kubectl_retrying(f"apply -f {versions.METRICS_SERVER_URL}", label)
            # kind's kubelets serve self-signed certificates.
            arg = [
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/args/-",
                    "value": "--kubelet-insecure-tls",
                }
            ]
            self.kubectl(
                "-n kube-system patch deployment metrics-server --type json -p "
                + shlex.quote(json.dumps(arg))
            )
        self.wait("kube-system", ["metrics-server"])

    def kserve(self) -> None:
        label = f"KServe {versions.KSERVE_VERSION}"
        if self.present(label, "kserve", "kserve-controller-manager"):
            return
        # cert-manager's webhook may still refuse the Certificate objects: retried.
        self.kubectl_retrying(f"apply --server-side -f {versions.KSERVE_URL}", label)
        self.wait("kserve", ["kserve-controller-manager"])
        self.kubectl_retrying(
            f"apply --server-side -f {versions.KSERVE_CLUSTER_RESOURCES_URL}", label
        )
        if self.settings.serving_mode == "standard":
            deploy = json.dumps({"defaultDeploymentMode": "Standard"})
            patch = shlex.quote(json.dumps({"data": {"deploy": deploy}}))
            self.kubectl(
                f"-n kserve patch configmap inferenceservice-config --type merge -p {patch}"
            )

    def all(self) -> None:
        self.training_operator()
        self.cert_manager()
        if self.settings.serving_mode == "knative":
            self.istio()
            self.knative()
        elif self.provider.name != "k3d":  # k3s bundles metrics-server
            self.metrics_server()
        self.kserve()
