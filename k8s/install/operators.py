"""Installing what the cluster needs: the training operator, cert-manager, Istio +
Knative (knative mode) or metrics-server (standard mode), KServe; Argo Workflows when
asked (``up --with-argo``), KEDA with monitoring in standard mode (``up
--with-monitoring``), and their removal (``down --keep-cluster``).

Each step first asks the cluster whether it is already there (a second ``invoke up``
reports every step as already done and changes nothing), then installs with ``kubectl``
through ``c.run`` (so ``--dry`` prints it), then waits for the component with a deadline.
Webhook races ("connection refused" / "x509" right after a Deployment turns Available)
are retried until the deadline.

On a cluster distml did not create, every step is surveyed first (read-only: ``survey``);
a blocked step, or a missing one without ``--install-operators``, stops `up` before anything
is installed. Istio's gateway is made a ClusterIP there unless asked
(``k8s.install.istio_gateway``).
"""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k8s import manifests
from k8s.client.kube import Kube, KubeError
from k8s.client.kubectl_errors import NO_MATCH_TRIES, PermanentError, classify_kubectl_error
from k8s.client.objects import is_true
from k8s.install import istio_gateway, upstream_files, versions
from k8s.install.apply_conflicts import (
    apply_unforced,
    force_flag,
    is_conflict,
    kubectl_conflict_message,
)
from k8s.install.operator_check import (
    PROBES,
    Finding,
    MissingOperators,
    blocked_message,
    found_note,
    missing_message,
)
from k8s.install.operator_check import survey as survey_step
from k8s.install.optional_operators import OptionalOperators
from k8s.providers.base import Provider
from k8s.providers.settings import EXISTING, MIRROR_SETTING, Settings, gateway_type
from k8s.waits.cluster_poll import retry
from k8s.waits.workload_waits import wait_deployments_available

# Knative resolves image tags to digests through a registry; a locally imported image
# has none, so the revision would never become ready (RevisionMissing). These registries
# are skipped ("distml:<hash>" is docker.io/library/distml:<hash>).
SKIP_TAG_RESOLVING = "kind.local,ko.local,dev.local,docker.io,index.docker.io"
# Knative's default domain (svc.cluster.local) is not served by the ingress gateway:
# a real domain makes the ISVC URL routable; requests carry it as the Host header.
KNATIVE_DOMAIN = "example.com"
ISTIOD_CONTAINER = "discovery"  # istiod's container in net-istio's Istio profile
# The last thing `up` applies for KServe (kserve-cluster-resources.yaml): its presence says
# the KServe step is complete; `--predictor tfserving` uses it.
KSERVE_TF_RUNTIME = (
    "serving.kserve.io/v1alpha1",
    "ClusterServingRuntime",
    "kserve-tensorflow-serving",
)


def components(
    provider: str, serving_mode: str, with_argo: bool = False, with_monitoring: bool = False
) -> tuple[str, ...]:
    """The install steps `up` runs, in order: ``Installer`` methods. Pure, so the capacity
    sums and the install-plan tests follow the same plan. KEDA (monitoring, standard mode)
    comes before KServe: KServe's controller watches ScaledObjects only when their CRD is
    there as it starts (it makes them all the same)."""
    steps = ["training_operator", "cert_manager"]
    if serving_mode == "knative":
        # k3d: k3s's ServiceLB gives the gateway's LoadBalancer port 80; elsewhere a NodePort.
        # An existing cluster: reached through its own ingress or a port-forward, never patched.
        node_port = provider not in ("k3d", EXISTING)
        steps += ["istio", *(["gateway_node_port"] if node_port else []), "knative"]
    else:
        if provider != "k3d":  # k3s bundles metrics-server
            steps.append("metrics_server")
        if with_monitoring:
            steps.append("keda")
    return (*steps, "kserve", *(["argo"] if with_argo else []))


def deployment_available(kube: Kube, namespace: str, name: str) -> bool:
    return is_true(kube.get("apps/v1", "Deployment", name, namespace), "Available")


@dataclass
class Installer(OptionalOperators):
    c: Any
    kube: Kube
    provider: Provider
    settings: Settings
    out: Callable[[str], None]
    clock: Any
    timeout: float = 600.0
    # False on a cluster distml did not create, unless `up --install-operators`: what is
    # missing is collected and reported (``all``), not installed.
    install_missing: bool = True
    missing: list[tuple[str, str]] = field(default_factory=list)
    blocked: list[tuple[str, str, str]] = field(default_factory=list)  # never installed over
    # A cluster distml did not create: what ``survey`` found of each step, before any install,
    # and Istio's install file with its gateway as chosen (None: as released).
    findings: dict[str, Finding] = field(default_factory=dict)
    istio_file: str | None = None

    @property
    def dry(self) -> bool:
        return bool(self.c.config.run.dry)

    @property
    def owned(self) -> bool:
        """distml made the cluster: its cluster-wide tuning (istiod's requests, Knative's
        domain and tag resolution, metrics-server's kubelet TLS) applies."""
        return self.settings.owns_cluster

    def kubectl(self, args: str, **kwargs: Any) -> Any:
        return self.c.run(self.provider.kubectl(args), **kwargs)

    def source(self, url: str, *, kustomize: bool = False) -> str:
        """What kubectl is given for a pinned upstream file: its URL (``-k`` for a kustomize
        ref), or, with ``cluster.manifest_mirror``, the verified copy there (``-f``)."""
        mirror = self.settings.manifest_mirror
        if not mirror:
            return f"{'-k' if kustomize else '-f'} {shlex.quote(url)}"
        local = upstream_files.mirrored(url, Path(mirror), MIRROR_SETTING)
        return f"-f {shlex.quote(str(local))}"

    def apply(self, url: str, what: str, flags: str = "") -> None:
        """``kubectl apply [flags]`` of a pinned upstream file, retried (``source``)."""
        self.kubectl_retrying(f"apply {flags + ' ' if flags else ''}{self.source(url)}", what)

    def kubectl_retrying(self, args: str, what: str) -> None:
        """A kubectl apply or patch, retried through webhook races (a webhook installed a
        moment ago that does not answer yet) until the deadline."""

        tries = {"no matches": 0}

        def attempt() -> None:
            result = self.kubectl(args, warn=True)
            if result.ok:
                return
            err = (result.stderr or result.stdout or "").strip()
            if not self.owned and is_conflict(err):  # never forced there: retrying cannot fix it
                raise PermanentError(kubectl_conflict_message(what, args, err))
            message = f"{what}: kubectl exited {result.exited}: {err[-400:]}"
            kind = classify_kubectl_error(err)
            if kind == "no-match":
                # CRDs applied a moment ago may not be served yet; a few tries, not forever.
                tries["no matches"] += 1
                if tries["no matches"] > NO_MATCH_TRIES:
                    raise PermanentError(message)
            elif kind == "permanent":
                raise PermanentError(message)
            raise KubeError(message)

        if self.dry:
            self.kubectl(args)
            return
        self.retry(attempt, what)

    def retry(self, fn: Callable[[], Any], what: str) -> None:
        """``fn`` until it does not raise KubeError (``k8s.waits.cluster_poll.retry``)."""
        kubectl, clock = self.provider.kubectl, self.clock
        retry(fn, what=what, timeout=self.timeout, clock=clock, out=self.out, kubectl=kubectl)

    def wait(self, namespace: str, names: list[str] | None = None) -> None:
        if not self.dry:
            wait_deployments_available(
                self.kube,
                namespace,
                names=names,
                timeout=self.timeout,
                clock=self.clock,
                out=self.out,
                kubectl=self.provider.kubectl,
            )

    def present(self, step: str, label: str, namespace: str, *deployments: str) -> bool:
        """True when there is nothing to install: every one of ``deployments`` is Available
        (on a cluster distml did not create: as ``survey`` found it), or it is missing and
        not to be installed (collected for ``all``'s report)."""
        if not self.owned:
            if step not in self.findings:
                self.survey([step])  # a step run on its own: surveyed first all the same
            if not self.findings[step].missing:
                return True  # found (said by the survey), or blocked (raised by it)
        elif all(deployment_available(self.kube, namespace, d) for d in deployments):
            self.out(f"{label}: already installed")
            return True
        if not self.install_missing:
            self.missing.append((step, label))
            return True
        self.out(f"{label}: installing")
        return False

    def survey(self, steps: Iterable[str]) -> None:
        """On a cluster distml did not create, before anything is installed: what is there
        of every step (read-only; each found one said with its version). Raises
        ``MissingOperators``, listing every blocked step and (without
        ``--install-operators``) every missing one, when anything is blocked or missing;
        else says what it is about to install."""
        to_install: list[tuple[str, str]] = []
        for step in (s for s in steps if s in PROBES):
            label = PROBES[step].label
            finding = self.findings[step] = survey_step(
                self.kube, step, self.provider.kubectl, settings=self.settings
            )
            if finding.found:
                self.out(found_note(finding, label))
            elif finding.blocked:
                self.blocked.append((step, label, finding.blocked))
            elif self.install_missing:
                to_install.append((step, label))
            else:
                self.missing.append((step, label))
        labels = [label for _, label in to_install]
        if self.blocked or self.missing:
            raise MissingOperators(self.report(labels))
        if not to_install:
            return
        self.out(
            f"installing {', '.join(labels)} from the pinned files; "
            "nothing else cluster-wide changes"
        )
        if "istio" in dict(to_install):
            self.prepare_istio()

    def report(self, to_install: list[str] | None = None) -> str:
        """Every blocked step, then every missing one with the commands that install it."""
        context = self.provider.context
        parts = [blocked_message(self.blocked, context, to_install)] if self.blocked else []
        if self.missing:
            parts.append(missing_message(self.missing, context, self.provider.kubectl))
        return "\n".join(parts)

    def prepare_istio(self) -> None:
        """Before anything is installed on a cluster distml did not create: say what Istio's
        gateway will be, and make the install file of a ClusterIP or NodePort one (from the
        verified pinned file: one that cannot be had stops `up` here)."""
        try:
            kind = gateway_type(self.settings)
        except ValueError as e:
            raise PermanentError(str(e)) from e
        self.out(istio_gateway.notice(kind))
        if kind != "LoadBalancer":
            url, mirror = versions.ISTIO_URL, self.settings.manifest_mirror
            pinned = upstream_files.local_copy(url, mirror, MIRROR_SETTING).read_text()
            self.istio_file = istio_gateway.typed(pinned, kind)

    # ------------------------------------------------------------------ steps
    def training_operator(self) -> None:
        label = PROBES["training_operator"].label
        if self.present("training_operator", label, "kubeflow", "training-operator"):
            return
        # Server-side: client-side apply fails on the CRDs ("annotations: Too long"). Forced
        # only on a cluster distml made (k8s.install.apply_conflicts): a re-run takes back
        # the fields an interrupted one left; elsewhere a conflict stops `up`, said plainly.
        source = self.source(versions.TRAINING_OPERATOR_KUSTOMIZE, kustomize=True)
        force = force_flag(self.owned)
        self.kubectl_retrying(f"apply --server-side{force} {source}", label)
        self.wait("kubeflow", ["training-operator"])
        if not self.dry:
            # Its validating webhook answers a moment after the Deployment is Available:
            # a server-side dry-run TFJob proves it admits jobs.
            probe = manifests.tfjob(self.settings, "cnn")
            self.retry(lambda: self.kube.apply(probe, dry_run=True), "the TFJob admission webhook")

    def cert_manager(self) -> None:
        label = PROBES["cert_manager"].label
        if self.present("cert_manager", label, "cert-manager", "cert-manager-webhook"):
            return
        self.apply(versions.CERT_MANAGER_URL, label, "--server-side")
        self.wait("cert-manager")

    def istio(self) -> None:
        label = PROBES["istio"].label
        installed = self.present("istio", label, "istio-system", "istiod")
        if not installed:
            self.apply_istio(label)
        if self.owned:
            self.istiod_requests()
        if not installed:
            self.wait("istio-system")

    def apply_istio(self, label: str) -> None:
        """Istio as pinned, or (``prepare_istio``) with its gateway Service's type changed,
        from a copy: no LoadBalancer is made, even for the moment before a patch."""
        if self.istio_file is None:
            self.apply(versions.ISTIO_URL, label)
            return
        with tempfile.TemporaryDirectory(prefix="distml-istio-") as tmp:
            path = Path(tmp) / "istio.yaml"
            path.write_text(self.istio_file)
            self.kubectl_retrying(f"apply -f {shlex.quote(str(path))}", label)

    def istiod_requests(self) -> None:
        """istiod asks for 500m / 2 GiB and its HPA (60% CPU) for up to 3 replicas: on one
        node, one istiod with KServe's small-cluster requests. Checked on every `up`."""
        deployment = self.kube.get("apps/v1", "Deployment", "istiod", "istio-system") or {}
        spec = (deployment.get("spec") or {}).get("template", {}).get("spec") or {}
        have = {
            c.get("name"): (c.get("resources") or {}).get("requests")
            for c in spec.get("containers") or []
        }
        if have.get(ISTIOD_CONTAINER) != versions.ISTIOD_REQUESTS:
            want = versions.ISTIOD_REQUESTS
            self.out(f"Istio: istiod requests {want['cpu']} CPU / {want['memory']} (one-node lab)")
            container = {
                "name": ISTIOD_CONTAINER,
                "resources": {"requests": versions.ISTIOD_REQUESTS},
            }
            patch = {"spec": {"template": {"spec": {"containers": [container]}}}}
            self.kubectl_retrying(
                "-n istio-system patch deployment istiod -p " + shlex.quote(json.dumps(patch)),
                "patching istiod's requests",
            )
        hpa = (
            self.kube.get("autoscaling/v2", "HorizontalPodAutoscaler", "istiod", "istio-system")
            or {}
        )
        if (hpa.get("spec") or {}).get("maxReplicas") != 1:
            self.out("Istio: istiod autoscaler capped at 1 replica (one-node lab)")
            self.kubectl_retrying(
                "-n istio-system patch hpa istiod --type merge -p "
                + shlex.quote(json.dumps({"spec": {"maxReplicas": 1}})),
                "capping istiod's autoscaler",
            )

    def gateway_node_port(self) -> None:
        """kind/minikube have no LoadBalancer: expose Istio's gateway on the node port the
        host's ingress port is mapped to (checked on every `up`: a run that stopped halfway
        must not leave it unreachable)."""
        port = self.settings.ingress_node_port
        svc = self.kube.get("v1", "Service", "istio-ingressgateway", "istio-system") or {}
        spec = svc.get("spec") or {}
        ports = {p.get("port"): p.get("nodePort") for p in spec.get("ports") or []}
        if spec.get("type") == "NodePort" and ports.get(80) == port:
            return
        patch = {"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}}
        self.out(f"Istio gateway: exposing port 80 on node port {port}")
        body = shlex.quote(json.dumps(patch))
        self.kubectl_retrying(
            f"-n istio-system patch service istio-ingressgateway -p {body}",
            "exposing the Istio gateway",
        )

    def knative(self) -> None:
        label = PROBES["knative"].label
        if not self.present("knative", label, "knative-serving", "net-istio-controller"):
            self.apply(versions.KNATIVE_SERVING_CRDS_URL, label)
            self.apply(versions.KNATIVE_SERVING_CORE_URL, label)
            self.apply(versions.NET_ISTIO_URL, label)
            self.wait("knative-serving")
        if not self.owned:
            return  # its domain and tag resolution are the cluster admin's
        self.configmap("knative-serving", "config-domain", {KNATIVE_DOMAIN: ""})
        self.configmap(
            "knative-serving",
            "config-deployment",
            {"registries-skipping-tag-resolving": SKIP_TAG_RESOLVING},
        )

    def configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Merge ``data`` into a ConfigMap unless it already holds it (so a second `up` is
        quiet, and a run that stopped halfway gets it on the next `up`)."""
        cm = self.kube.get("v1", "ConfigMap", name, namespace) or {}
        have = cm.get("data") or {}
        if all(have.get(k) == v for k, v in data.items()):
            return
        self.out(f"configuring {namespace}/{name}: {', '.join(data)}")
        patch = shlex.quote(json.dumps({"data": data}))
        self.kubectl_retrying(
            f"-n {namespace} patch configmap {name} --type merge -p {patch}",
            f"configuring {namespace}/{name}",
        )

    def metrics_server(self) -> None:
        label = PROBES["metrics_server"].label
        if self.present("metrics_server", label, "kube-system", "metrics-server"):
            return
        # minikube too: its add-on pins the image by digest and scrapes every 60 s (slower
        # than an HPA reacts); the pinned file is the one kind runs and the tests hold.
        if not self.owned:
            self.apply(versions.METRICS_SERVER_URL, label)
            self.out(
                "metrics-server: installed as released; on kubelets with self-signed "
                "certificates (kind, minikube) it stays unready until the cluster's admin "
                "adds --kubelet-insecure-tls (docs/cluster.md)"
            )
        else:
            self.apply(versions.METRICS_SERVER_URL, label)
            # kind's kubelets serve self-signed certificates. Added once, right after the
            # install (a JSON-patch "add" on every `up` would repeat the flag).
            arg = [
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/args/-",
                    "value": "--kubelet-insecure-tls",
                }
            ]
            self.kubectl_retrying(
                "-n kube-system patch deployment metrics-server --type json -p "
                + shlex.quote(json.dumps(arg)),
                "metrics-server: --kubelet-insecure-tls",
            )
        self.wait("kube-system", ["metrics-server"])

    def kserve(self) -> None:
        label = PROBES["kserve"].label
        installed = self.present("kserve", label, "kserve", "kserve-controller-manager")
        if installed and not self.owned:
            return  # its cluster resources are the admin's (only `--predictor tfserving` uses them)
        if not installed:
            # The release's kserve.yaml leaves out its Namespace (it is made for Helm-style
            # installs), and its CRDs are published on their own.
            namespace = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "kserve", "labels": manifests.labels()},
            }
            apply_unforced(self.kube, namespace, owns_cluster=self.owned, what=label)
            self.apply(versions.KSERVE_CRDS_URL, label, "--server-side")
            # cert-manager's webhook may still refuse the Certificate objects: retried.
            self.apply(versions.KSERVE_URL, label, "--server-side")
        # Checked on every `up`: a run that stopped while waiting applies them next time.
        if self.kube.get(*KSERVE_TF_RUNTIME) is not None:
            return
        # All controllers first: the cluster resources include LLMInferenceServiceConfigs,
        # which llmisvc-controller-manager's webhook admits (failurePolicy Fail).
        self.wait("kserve")
        self.apply(versions.KSERVE_CLUSTER_RESOURCES_URL, label, "--server-side")
        # No default-mode patch: every InferenceService names its mode in an annotation.

    def all(self, *, surveyed: bool = False) -> None:
        """Every step, found or installed; on a cluster distml did not create, surveyed
        first (unless ``surveyed``: the caller did, before anything else was made)."""
        s = self.settings
        steps = components(self.provider.name, s.serving_mode, s.with_argo, s.with_monitoring)
        if not self.owned and not surveyed:
            self.survey(steps)  # nothing is installed when anything is blocked or missing
        for step in steps:
            getattr(self, step)()
        if self.blocked or self.missing:
            raise MissingOperators(self.report())
