"""What the manifest builders need to know about a deployment (plain data, no I/O)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from ml import contract
from ml.contract import serving_metrics

SERVING_MODES = ("knative", "standard")
PREDICTORS = ("kserve", "tfserving")
# `deploy --scale-metric` (standard mode): cpu, an HPA on CPU; concurrency (requests in
# flight) or rps (requests per second), KEDA on the server's metrics through Prometheus.
SCALE_METRICS = ("cpu", "concurrency", "rps")
REQUEST_METRICS = ("concurrency", "rps")
PROVIDERS = ("k3d", "kind", "minikube")  # the clusters distml creates (and deletes)
# A cluster distml did not create, reached through a kubeconfig context: never created or
# deleted, nothing cluster-wide changed on it (docs/cluster.md, "Bring your own cluster").
EXISTING = "existing"
EXISTING_NAMESPACE = "distml"  # the default namespace on a cluster distml did not create
CLUSTER_RUNTIMES = (*PROVIDERS, EXISTING)
STORAGE_CLASSES = {"k3d": "local-path", "kind": "standard", "minikube": "standard"}
ACCESS_MODES = ("ReadWriteOnce", "ReadWriteMany")
# The CPU the scheduler counts for our pods, as cluster settings (``cluster.worker_cpu``,
# INVOKE_CLUSTER_WORKER_CPU=100m): a small cluster lowers them so the jobs fit
# (docs/cluster.md, "Resources"); each names the Settings field whose request it sets.
MIRROR_SETTING = "cluster.manifest_mirror (INVOKE_CLUSTER_MANIFEST_MIRROR)"
# The Service types Istio's ingress gateway may be given when `up --install-operators`
# installs Istio on a cluster distml did not create (``Settings.istio_gateway_type``).
GATEWAY_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
GATEWAY_SETTING = "cluster.istio_gateway_type (INVOKE_CLUSTER_ISTIO_GATEWAY_TYPE)"
CPU_REQUEST_SETTINGS = {"worker_cpu": "worker_resources", "predictor_cpu": "predictor_resources"}


_QUANTITY = re.compile(
    r"^((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(m|Ki|Mi|Gi|Ti|k|K|M|G|T)?$"
)
_FACTORS = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "K": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def quantity(text: str | int | float) -> Decimal:
    """A Kubernetes quantity ("250m", "1", "768Mi", "2G") as a number (cores or bytes)."""
    m = _QUANTITY.match(str(text).strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    try:
        return Decimal(m[1]) * _FACTORS[m[2]]
    except ArithmeticError:  # decimal.Overflow: an exponent no cluster holds ("1E1000000")
        raise ValueError(f"not a Kubernetes quantity: {text!r} is out of range") from None


@dataclass(frozen=True)
class Resources:
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str

    def as_dict(self, gpus: int = 0) -> dict:
        limits = {"cpu": self.cpu_limit, "memory": self.memory_limit}
        if gpus:
            limits["nvidia.com/gpu"] = str(gpus)
        return {
            "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
            "limits": limits,
        }


@dataclass(frozen=True)
class Settings:
    """One deployment of distml on one cluster."""

    image: str  # the project image, content-hash tag (runtime.image.image_tag), never latest
    provider: str = "k3d"
    namespace: str = "kubeflow"  # default_namespace() picks it per provider
    service: str = contract.DEFAULT_SERVICE
    volume: str = "strategy-volume"  # the PVC
    volume_size: str = "5Gi"
    # ``cluster.storage_class``: "" is the provider's (existing clusters: their default).
    storage_class_name: str = ""
    # ReadWriteOnce: every pod that mounts the volume runs on one node (pod affinity);
    # ReadWriteMany: they spread (a TFJob's workers over nodes). `up` decides
    # (k8s.providers.storage).
    volume_access: str = "ReadWriteOnce"
    # ``cluster.image_pull_secret``: a Secret in the namespace for a registry that needs one.
    image_pull_secret: str = ""
    mount_path: str = "/trained_model"
    serving_mode: str = "knative"
    with_argo: bool = False  # Argo Workflows installed too (`invoke up --with-argo`)
    # `invoke up --with-monitoring`: distml's own Prometheus in the namespace (k8s.monitoring.stack)
    # and, in standard mode, KEDA (k8s.install.operators) for `deploy --scale-metric`.
    with_monitoring: bool = False
    # ``cluster.prometheus``: a Prometheus of the user's, "NAMESPACE/SERVICE:PORT"
    # (k8s.monitoring.prometheus).
    prometheus: str = ""
    # ``cluster.alert_webhook``: where distml's Alertmanager sends the alerts, an http(s) URL
    # ("": nowhere; `status` lists them) (k8s.monitoring.alertmanager).
    alert_webhook: str = ""
    # ``cluster.watchdog_webhook``: where distml's Alertmanager sends its always-firing
    # watchdog, every minute (a dead man's switch; "": nowhere).
    watchdog_webhook: str = ""
    # Training.
    workers: int = contract.DEFAULT_WORKERS
    profile: str = contract.DEFAULT_PROFILE
    epochs: int | None = None
    steps_per_epoch: int | None = None
    max_restarts: int = contract.DEFAULT_MAX_RESTARTS
    train_deadline_s: int = 3600  # runPolicy.activeDeadlineSeconds
    gpus_per_worker: int = 0
    # Memory requests: the peak resident set measured in the image, rounded up to 32 MiB
    # (benchmarks/pod_memory.py: a worker 838-848 MiB, a predictor 681 MiB); limits leave
    # more than twice that room. k8s.install.capacity adds these up against the node.
    worker_resources: Resources = field(
        default_factory=lambda: Resources("250m", "1", "864Mi", "2Gi")
    )
    # Serving.
    predictor: str = "kserve"
    target: int = 1  # autoscaling.knative.dev/target: concurrent requests per replica
    min_replicas: int = 1
    max_replicas: int = 8
    container_concurrency: int | None = None
    # Standard mode: what drives scaling (SCALE_METRICS): cpu, KServe's HPA; concurrency or
    # rps, KEDA on a Prometheus query (``target`` is then the per-replica figure).
    scale_metric: str = "cpu"
    # How often the Prometheus KEDA queries scrapes the predictor: the window of its query
    # (four scrapes). distml's own scrapes every 5 s; a user's is read at `deploy`
    # (k8s.monitoring.scrape).
    scrape_interval_s: float = serving_metrics.SCRAPE_INTERVAL_S
    request_logger: bool = False
    predictor_resources: Resources = field(
        default_factory=lambda: Resources("250m", "1", "704Mi", "1536Mi")
    )
    # `invoke tensorboard`'s pod: a viewer, requested small on purpose (docs/cluster.md, Resources).
    tensorboard_resources: Resources = field(
        default_factory=lambda: Resources("50m", "1", "256Mi", "1536Mi")
    )
    ingress_node_port: int = 31080  # kind: the node port the host's ingress port maps to
    # ``cluster.manifest_mirror``: a directory holding the pinned install files, laid out as
    # k8s/install/upstream.lock.json names them, applied instead of their URLs (offline machines).
    manifest_mirror: str = ""
    # ``cluster.istio_gateway_type``: the type of Istio's ingress gateway Service when `up
    # --install-operators` installs Istio on a cluster distml did not create; "" is
    # ClusterIP (reached by a port-forward). As released it is a LoadBalancer: on a cloud, a
    # billed load balancer open to the internet in front of a model with no authentication,
    # so only when asked. The clusters distml makes keep their own (k8s.install.operators).
    istio_gateway_type: str = ""

    @property
    def storage_class(self) -> str:
        """The PVC's class ("": the cluster's default class)."""
        return self.storage_class_name or STORAGE_CLASSES.get(self.provider, "")

    @property
    def owns_cluster(self) -> bool:
        """distml created the cluster: it may tune what runs cluster-wide on it."""
        return self.provider != EXISTING

    @property
    def threads(self) -> int:
        """TF threads per worker pod: its CPU limit in whole cores, at least 1."""
        return max(1, int(quantity(self.worker_resources.cpu_limit)))


def gateway_type(s: Settings) -> str:
    """The type Istio's gateway Service is given on a cluster distml did not create:
    ``s.istio_gateway_type``, else ClusterIP; ValueError, naming the setting, for another."""
    if s.istio_gateway_type and s.istio_gateway_type not in GATEWAY_TYPES:
        raise ValueError(
            f"{GATEWAY_SETTING} {s.istio_gateway_type!r} is not a gateway Service type; valid: "
            f"{', '.join(GATEWAY_TYPES)}"
        )
    return s.istio_gateway_type or "ClusterIP"


def default_namespace(provider: str) -> str:
    """``cluster.namespace`` when unset: ``kubeflow`` on the clusters distml makes (as the
    lab has it); on an existing cluster a namespace of distml's own, never one shared with
    an operator or another team (``kubeflow`` holds the training operator there)."""
    return EXISTING_NAMESPACE if provider == EXISTING else "kubeflow"


def with_cpu_requests(s: Settings, requests: Mapping[str, str]) -> Settings:
    """``s`` with the CPU requests the cluster settings give (an empty one keeps the
    default); ValueError, naming the setting, for one no cluster would accept."""
    changes: dict[str, Any] = {}  # Settings fields, replaced at once
    for key, value in requests.items():
        if key not in CPU_REQUEST_SETTINGS:
            raise ValueError(
                f"unknown setting cluster.{key}; valid: {', '.join(CPU_REQUEST_SETTINGS)}"
            )
        value = value.strip()
        if not value:
            continue
        current: Resources = getattr(s, CPU_REQUEST_SETTINGS[key])
        where = f"cluster.{key} (INVOKE_CLUSTER_{key.upper()})"
        try:
            cores = quantity(value)
        except ValueError:
            raise ValueError(
                f"{where} {value!r} is not a CPU quantity (e.g. '100m', '0.5')"
            ) from None
        if not 0 < cores <= quantity(current.cpu_limit):
            raise ValueError(
                f"{where} {value!r} must be above 0 and at most the pod's CPU limit "
                f"({current.cpu_limit})"
            )
        changes[CPU_REQUEST_SETTINGS[key]] = replace(current, cpu_request=str(value))
    return replace(s, **changes)
