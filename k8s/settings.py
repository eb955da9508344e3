"""What the manifest builders need to know about a deployment (plain data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ml import contract

SERVING_MODES = ("knative", "standard")
PREDICTORS = ("kserve", "tfserving")
PROVIDERS = ("k3d", "kind", "minikube")
STORAGE_CLASSES = {"k3d": "local-path", "kind": "standard", "minikube": "standard"}


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
    namespace: str = "kubeflow"
    service: str = contract.DEFAULT_SERVICE
    volume: str = "strategy-volume"  # the PVC
    volume_size: str = "5Gi"
    mount_path: str = "/trained_model"
    serving_mode: str = "knative"
    with_argo: bool = False  # Argo Workflows installed too (`invoke up --with-argo`)
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
    # more than twice that room. k8s.capacity adds these up against the node.
    worker_resources: Resources = field(
        default_factory=lambda: Resources("250m", "1", "864Mi", "2Gi")
    )
    # Serving.
    predictor: str = "kserve"
    target: int = 1  # autoscaling.knative.dev/target: concurrent requests per replica
    min_replicas: int = 1
    max_replicas: int = 8
    container_concurrency: int | None = None
    request_logger: bool = False
    predictor_resources: Resources = field(
        default_factory=lambda: Resources("250m", "1", "704Mi", "1536Mi")
    )
    # `invoke tensorboard`'s pod: a viewer, requested small on purpose (docs/cluster.md, Resources).
    tensorboard_resources: Resources = field(
        default_factory=lambda: Resources("50m", "1", "256Mi", "1536Mi")
    )
    ingress_node_port: int = 31080  # kind: the node port the host's ingress port maps to

    @property
    def storage_class(self) -> str:
        return STORAGE_CLASSES[self.provider]

    @property
    def threads(self) -> int:
        """TF threads per worker pod: its CPU limit in whole cores, at least 1."""
        cpu = self.worker_resources.cpu_limit
        cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
        return max(1, int(cores))
