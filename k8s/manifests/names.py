"""Names, labels and fixed values every distml object uses (no I/O)."""

from __future__ import annotations

import hashlib
import re

from k8s.providers.settings import Settings
from ml import contract

PART_OF = "distml"
MANAGED_BY = "distml"
PART_OF_LABEL = "app.kubernetes.io/part-of"
COMMON_LABELS = {
    PART_OF_LABEL: PART_OF,
    "app.kubernetes.io/managed-by": MANAGED_BY,
}
MODEL_LABEL = "distml/model"
# On every pod that mounts the volume: ReadWriteOnce pods are placed next to each other by it.
VOLUME_LABEL = "distml/volume"
IMAGE_ANNOTATION = "distml/image"
# Every object a work dir writes carries that work dir's instance id (``State.instance``):
# `down`, and every replace or delete, select on it, so one work dir never touches
# another's objects, nor anyone else's (stamped by ``ClusterContext.apply``).
INSTANCE_LABEL = "distml/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The component label of distml's TFJob pods (the scrape job and PodMonitor select on it).
TRAIN_COMPONENT = "train"
# The label KServe puts on every predictor pod of an InferenceService.
ISVC_POD_LABEL = "serving.kserve.io/inferenceservice"

# `cluster_objects` steps, in the order the tasks run them; "workflow" (`invoke workflow`)
# is the alternative to train-all + deploy: one Argo Workflow that runs them.
WORKFLOW_STEP = "workflow"  # `invoke workflow`: the alternative to train-all + deploy
STEPS = ("up", "train-all", "deploy", WORKFLOW_STEP)

# Object names.
LOADER_POD = "distml-data-loader"
TENSORBOARD_POD = "distml-tensorboard"  # `invoke tensorboard`, removed when it ends
INGEST_JOB = "distml-ingest"
SELECT_JOB = "distml-select"
ROLLBACK_JOB = "distml-rollback"
RUNTIME_NAME = "distml-predictor"
MESSAGE_DUMPER = "message-dumper"
# `invoke workflow`'s objects (k8s.manifests.argo_workflow and workflow_rbac).
WORKFLOW_NAME = "distml-pipeline"
WORKFLOW_SA = "distml-workflow"  # the steps' ServiceAccount / Role / RoleBinding
# The memoization ConfigMap, and the Role / RoleBinding letting Argo's controller write it:
# prefixes, each namespace's names are ``workflow_cache_name`` and ``cache_writer_name``.
WORKFLOW_CACHE = "distml-workflow-cache"
WORKFLOW_CACHE_WRITER = "distml-workflow-cache-writer"
WORKFLOW_COMPONENT = "workflow"

# Argo Workflows (`up --with-argo`): the namespace its install.yaml is applied into (the
# file names it but does not create it), and the ServiceAccount its workflow-controller
# Deployment runs as there (install.yaml at versions.ARGO_WORKFLOWS_VERSION; a test holds
# both against the file).
ARGO_NAMESPACE = "argo"
ARGO_CONTROLLER_SA = "argo"

# The project image's user (Dockerfile: useradd --uid 1000, USER 1000:1000).
PROJECT_UID = 1000
# The pod-level name of the PVC volume in every pod that mounts it.
VOLUME_NAME = "data"
# TFJob: the operator requires this container name and this port name.
TFJOB_CONTAINER = "tensorflow"
TFJOB_PORT = 2222
# A deleted worker pod (a replaced job, a drain, an eviction) gets SIGTERM, and this long
# before SIGKILL: the workers agree on a step, save it and exit (ml.training.preemption). Measured
# here from SIGTERM to exit: 0.3-1.5 s (the save itself 0.05-0.4 s), 6 workers on 2 cores
# the slowest. Not longer: until it ends, the training operator (v1.9) counts the
# terminating pod as failed and may fail the whole TFJob.
WORKER_GRACE_S = 10
TFJOB_PORT_NAME = "tfjob-port"
# Serving: KServe mounts `pvc://claim/path` here; our server polls it for new versions.
MODEL_FORMAT = "distml-savedmodel"
MODEL_FORMAT_VERSION = "1"
KSERVE_MODEL_DIR = "/mnt/models"
PREDICTOR_PORT = 8080
# The port of KServe's predictor Service ``<isvc>-predictor`` in standard mode (its
# RawDeployment Service: port 80, "http1", to the container's PREDICTOR_PORT; seen on kind).
PREDICTOR_SERVICE_PORT = 80
# Standard mode scales with an HPA on CPU: KServe's own default target, made explicit.
HPA_CPU_TARGET_PERCENT = 80
# Where `invoke up --source-dir` copies the raw Fashion-MNIST files, under the mount.
RAW_DATA_SUBDIR = contract.RAW_DATA_SUBDIR
# How long the loader pod stays up for `kubectl cp` (it then exits by itself).
LOADER_LIFETIME_S = 3600

# Knative names a revision `<service>-predictor-00001`; it must fit a 63-char label.
MAX_SERVICE_NAME = 63 - len("-predictor-00001")
K8S_NODE_PORT_RANGE = (30000, 32767)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# -- names -----------------------------------------------------------------------------


def is_dns_label(name: str, *, max_len: int = 63) -> bool:
    """True when ``name`` is a DNS-1123 label (lower-case alphanumerics and '-', no
    leading or trailing '-', at most ``max_len`` characters)."""
    return isinstance(name, str) and 0 < len(name) <= max_len and bool(_DNS_LABEL.match(name))


def is_dns_subdomain(name: str) -> bool:
    """True when ``name`` is a DNS-1123 subdomain: dot-separated labels, at most 253."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= 253
        and all(is_dns_label(part) for part in name.split("."))
    )


def dns_name(text: str, *, max_len: int = 63) -> str:
    """``text`` made into a DNS-1123 label: lower case, every run of other characters
    (``_``, ``.``, spaces...) becomes one '-', no '-' at either end, cut to ``max_len``.

    >>> dns_name("cnn_batchnorm")
    'cnn-batchnorm'

    Raises ValueError when nothing usable is left (e.g. ``"__"``).
    """
    name = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    name = name[:max_len].rstrip("-")
    if not name:
        raise ValueError(f"cannot make a DNS-1123 name out of {text!r}")
    return name


def tfjob_name(model: str) -> str:
    """``train-<model>`` with '_' as '-' (TFJob names are DNS-1123 labels)."""
    return dns_name(f"train-{model}")


def raw_data_dir(s: Settings) -> str:
    """Where the loader pod receives local Fashion-MNIST files, inside the volume."""
    return contract.raw_data_dir(s.mount_path)


def storage_uri(s: Settings) -> str:
    """The InferenceService's model location: the service's folder in the PVC."""
    return "pvc://" + contract.serving_dir(s.volume, s.service)


def labels(component: str | None = None, **extra: str) -> dict[str, str]:
    """The labels every distml object carries, plus a component and any extras."""
    out = dict(COMMON_LABELS)
    if component:
        out[COMPONENT_LABEL] = component
    out.update(extra)
    return out


def is_ours(obj: dict, instance: str | None = None) -> bool:
    """The object carries the labels every distml object has (distml applied it) and,
    when ``instance`` is given, that work dir's instance label (this work dir applied it)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if instance is not None and labels.get(INSTANCE_LABEL) != instance:
        return False
    return all(labels.get(k) == v for k, v in COMMON_LABELS.items())


def selector(component: str | None = None, instance: str | None = None) -> str:
    """A label selector string matching what ``labels(component)`` puts on objects (and,
    with ``instance``, only the ones that work dir applied)."""
    extra = {INSTANCE_LABEL: instance} if instance else {}
    return ",".join(f"{k}={v}" for k, v in labels(component, **extra).items())


# -- sharing a cluster: names in Argo's namespace, the operator's namespace, sidecars ----

# Argo's controller Deployment (install.yaml, in ARGO_NAMESPACE): its pod template names the
# ServiceAccount the cache Role is bound to (a Helm install names it otherwise than
# ARGO_CONTROLLER_SA, which is only the fallback when the Deployment cannot be read).
ARGO_CONTROLLER_DEPLOYMENT = "workflow-controller"
# Where the pinned training-operator install runs the operator (and its ServiceAccount,
# which holds cluster-wide rights): a TFJob made there may run as that ServiceAccount.
TRAINING_OPERATOR_NAMESPACE = "kubeflow"
# Namespaces that are never distml's on a cluster it did not create: Kubernetes' own, and
# the operators' (their ServiceAccounts hold cluster-wide rights; their objects are not a
# team's). On the clusters distml makes, ``kubeflow`` is distml's namespace.
SYSTEM_NAMESPACES: dict[str, str] = {
    "kube-system": "Kubernetes' own",
    "kube-public": "Kubernetes' own, readable by everyone",
    "kube-node-lease": "Kubernetes' own",
    TRAINING_OPERATOR_NAMESPACE: "the training operator's own",
    "kserve": "KServe's controller's own",
    "cert-manager": "cert-manager's own",
    "istio-system": "Istio's own",
    "knative-serving": "Knative Serving's own",
    "keda": "KEDA's own",
    ARGO_NAMESPACE: "Argo Workflows' own",
}
# On every pod distml makes but the predictors: an Istio sidecar never exits, so a Job's or
# a TFJob's pod would run forever in a namespace labelled istio-injection=enabled.
NO_ISTIO_SIDECAR = {"sidecar.istio.io/inject": "false"}


def per_namespace(prefix: str, namespace: str, *, max_len: int = 63) -> str:
    """``<prefix>-<namespace>``: the name of an object distml keeps in another namespace
    (Argo's) for the deployment in ``namespace``, so that one namespace's objects there are
    never another's. A DNS-1123 label of at most ``max_len``: when too long, the namespace
    is cut and a hash of the whole of it keeps names of different namespaces apart.

    >>> per_namespace("distml-workflow-cache", "ml-team")
    'distml-workflow-cache-ml-team'
    """
    if not is_dns_label(namespace):
        raise ValueError(f"namespace {namespace!r} is not a DNS-1123 label")
    name = f"{prefix}-{namespace}"
    if len(name) <= max_len:
        return name
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:8]
    keep = max_len - len(prefix) - len(digest) - 2
    if keep < 1:
        raise ValueError(f"prefix {prefix!r} leaves no room for a namespace in {max_len}")
    return f"{prefix}-{namespace[:keep].rstrip('-')}-{digest}"


def workflow_cache_name(namespace: str) -> str:
    """The memoization ConfigMap (in ARGO_NAMESPACE) of the Workflows of ``namespace``."""
    return per_namespace(WORKFLOW_CACHE, namespace)


def cache_writer_name(namespace: str) -> str:
    """The Role and RoleBinding (in ARGO_NAMESPACE) letting Argo's controller write
    ``workflow_cache_name(namespace)`` and no other ConfigMap."""
    return per_namespace(WORKFLOW_CACHE_WRITER, namespace)
