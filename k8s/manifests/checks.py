"""Settings no cluster could run, refused with a message that says what to change."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from k8s.manifests.names import (
    K8S_NODE_PORT_RANGE,
    MAX_SERVICE_NAME,
    SYSTEM_NAMESPACES,
    is_dns_label,
    is_dns_subdomain,
)
from k8s.monitoring import prometheus
from k8s.providers.settings import (
    ACCESS_MODES,
    CLUSTER_RUNTIMES,
    PREDICTORS,
    SCALE_METRICS,
    SERVING_MODES,
    Resources,
    Settings,
    gateway_type,
)
from ml import contract
from ml.contract import MODEL_TYPES

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The Kubernetes quantity syntax (as in the CRDs' `pattern` for resources).
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


# -- validation ------------------------------------------------------------------------


def check_models(models: Iterable[str]) -> tuple[str, ...]:
    """The models as a tuple; ValueError for an unknown or repeated one, or none."""
    if isinstance(models, str):
        raise ValueError(f"models must be a list of model names, not the string {models!r}")
    models = tuple(models)
    if not models:
        raise ValueError(f"no model given; valid: {', '.join(MODEL_TYPES)}")
    unknown = [m for m in models if m not in MODEL_TYPES]
    if unknown:
        raise ValueError(
            f"unknown model type(s) {', '.join(map(repr, unknown))}; "
            f"valid: {', '.join(MODEL_TYPES)}"
        )
    repeated = sorted({m for m in models if models.count(m) > 1})
    if repeated:
        raise ValueError(f"model type(s) given twice: {', '.join(repeated)}")
    return models


def _check_choice(what: str, value: object, valid: Sequence[str]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")


def _check_quantity(what: str, value: str) -> None:
    if not isinstance(value, str) or not _QUANTITY.match(value):
        raise ValueError(
            f"{what} {value!r} is not a Kubernetes quantity (e.g. '500m', '1', '2Gi', '768Mi')"
        )


def _check_resources(what: str, r: Resources) -> None:
    _check_quantity(f"{what} cpu request", r.cpu_request)
    _check_quantity(f"{what} cpu limit", r.cpu_limit)
    _check_quantity(f"{what} memory request", r.memory_request)
    _check_quantity(f"{what} memory limit", r.memory_limit)


def _check_image(image: str) -> None:
    if not image or any(c.isspace() for c in image):
        raise ValueError(f"image {image!r} is not an image reference")
    if "@sha256:" in image:
        return
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    if not tag or tag == "latest":
        raise ValueError(
            f"image {image!r} has {'no tag' if not tag else 'the :latest tag'}: Kubernetes then "
            "pulls it on every start and fails after `k3d image import` / `kind load` "
            "(ErrImagePull). Use the content-hash tag `invoke build` prints."
        )


def check_settings(s: Settings) -> None:
    """Raise ValueError, saying what to change, for settings no cluster could run."""
    _check_choice("provider", s.provider, CLUSTER_RUNTIMES)
    _check_choice("volume access mode", s.volume_access, ACCESS_MODES)
    _check_choice("serving mode", s.serving_mode, SERVING_MODES)
    _check_choice("predictor", s.predictor, PREDICTORS)
    _check_choice("profile", s.profile, contract.PROFILES)
    _check_image(s.image)
    _check_names(s)
    _check_quantity("volume size", s.volume_size)
    _check_resources("worker", s.worker_resources)
    _check_resources("predictor", s.predictor_resources)
    _check_training(s)
    _check_serving(s)
    gateway_type(s)  # cluster.istio_gateway_type: one of GATEWAY_TYPES, or unset


def _check_names(s: Settings) -> None:
    if not is_dns_label(s.namespace):
        raise ValueError(
            f"namespace {s.namespace!r} is not a DNS-1123 label (a-z, 0-9, '-', at most 63)"
        )
    _check_not_the_operators_namespace(s)
    for what, name in (
        ("storage class", s.storage_class_name),
        ("image pull secret", s.image_pull_secret),
    ):
        if name and not is_dns_subdomain(name):
            raise ValueError(f"{what} {name!r} is not a DNS-1123 subdomain (a-z, 0-9, '-', '.')")
    if not is_dns_label(s.volume):
        raise ValueError(f"volume {s.volume!r} is not a DNS-1123 label (a-z, 0-9, '-')")
    if not (
        isinstance(s.service, str)
        and _DNS1035_LABEL.match(s.service)
        and len(s.service) <= MAX_SERVICE_NAME
    ):
        raise ValueError(
            f"service {s.service!r} must start with a letter, hold only a-z, 0-9 and '-', "
            f"and be at most {MAX_SERVICE_NAME} characters (Knative derives longer names "
            "from it)"
        )
    if not s.mount_path.startswith("/") or s.mount_path.rstrip("/") == "":
        raise ValueError(f"mount path {s.mount_path!r} must be an absolute path below /")


def _check_not_the_operators_namespace(s: Settings) -> None:
    """On a cluster distml did not create, never a system namespace (``SYSTEM_NAMESPACES``):
    a TFJob in an operator's namespace may name its ServiceAccount and run with its
    cluster-wide rights, and `invoke workflow` lets its steps create TFJobs; and nothing
    there is a team's to write or delete. (On the clusters distml makes, ``kubeflow`` is
    distml's namespace, and everything in it distml's.)"""
    whose = SYSTEM_NAMESPACES.get(s.namespace)
    if s.owns_cluster or whose is None:
        return
    raise ValueError(
        f"namespace {s.namespace} is {whose} namespace: distml does not run there on a "
        "cluster it did not create (its objects are not a team's, and a TFJob there could run "
        "as a system ServiceAccount, with its cluster-wide rights). Use a namespace of "
        "distml's own: unset cluster.namespace (the default on an existing cluster is "
        "`distml`) or `INVOKE_CLUSTER_NAMESPACE=NAME`; a work dir set up there by an older "
        "distml can be cleared with `invoke down --forget`"
    )


def _check_training(s: Settings) -> None:
    if s.workers < 1:
        raise ValueError(f"workers must be at least 1, got {s.workers}")
    if s.gpus_per_worker < 0:
        raise ValueError(f"gpus per worker must be 0 or more, got {s.gpus_per_worker}")
    if s.epochs is not None and s.epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {s.epochs}")
    if s.steps_per_epoch is not None and s.steps_per_epoch < 1:
        raise ValueError(f"steps per epoch must be at least 1, got {s.steps_per_epoch}")
    if s.max_restarts < 0:
        raise ValueError(f"max restarts must be 0 or more, got {s.max_restarts}")
    if s.train_deadline_s < 1:
        raise ValueError(f"the training deadline must be positive, got {s.train_deadline_s} s")


def _check_serving(s: Settings) -> None:
    if s.target < 1:
        raise ValueError(
            f"target must be at least 1 concurrent request per replica, got {s.target}"
        )
    if s.max_replicas < 1:
        raise ValueError(f"max replicas must be at least 1, got {s.max_replicas}")
    if s.min_replicas < 0:
        raise ValueError(f"min replicas must be 0 or more, got {s.min_replicas}")
    if s.min_replicas > s.max_replicas:
        raise ValueError(
            f"min replicas ({s.min_replicas}) is more than max replicas ({s.max_replicas})"
        )
    if s.serving_mode == "standard" and s.min_replicas < 1:
        raise ValueError(
            "standard serving mode scales with an HPA, which cannot scale to zero: "
            "use --min-replicas 1 or more (or --serving-mode knative)"
        )
    if s.container_concurrency is not None and s.container_concurrency < 0:
        raise ValueError(
            f"container concurrency must be 0 (unlimited) or more, got {s.container_concurrency}"
        )
    _check_scale_metric(s)
    low, high = K8S_NODE_PORT_RANGE
    if not low <= s.ingress_node_port <= high:
        raise ValueError(
            f"ingress node port {s.ingress_node_port} is outside Kubernetes' NodePort range "
            f"{low}-{high}"
        )


def _check_scale_metric(s: Settings) -> None:
    """A known metric; requests (concurrency, rps) only in standard mode (Knative's own
    autoscaler scales on concurrency), and with a Prometheus to read them from."""
    _check_choice("scale metric", s.scale_metric, SCALE_METRICS)
    if s.prometheus:
        prometheus.parse_ref(s.prometheus)
    if s.scale_metric == "cpu" or s.serving_mode == "standard":
        return
    raise ValueError(
        f"--scale-metric {s.scale_metric} is for standard serving mode: knative mode scales on "
        "concurrent requests per replica (Knative's autoscaler, --target)"
    )


def check_min_accuracy(min_accuracy: float) -> None:
    if not 0.0 <= min_accuracy <= 1.0:
        raise ValueError(
            f"min accuracy must be a fraction between 0 and 1, got {min_accuracy}"
            + (f" (did you mean {min_accuracy / 100:g}?)" if 1 < min_accuracy <= 100 else "")
        )
