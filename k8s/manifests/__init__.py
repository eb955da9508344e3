"""Pure manifest builders: every Kubernetes object distml applies, as plain dicts.

No I/O, no client, no globals changed: each builder takes a ``Settings`` (frozen) and
returns a fresh dict, so ``invoke render``, ``--dry`` and the real apply all see the same
objects. Tests validate every object these functions can produce against the pinned
Kubernetes version (core kinds) and the upstream CRDs (TFJob, ServingRuntime,
InferenceService), in strict mode, so a misspelt field fails there rather than on a
cluster.

What is deliberate (and why):
- Every object carries ``app.kubernetes.io/part-of: distml`` and
  ``app.kubernetes.io/managed-by: distml`` so ``down`` and ``status`` can find them.
- The project image is never ``:latest`` and always ``imagePullPolicy: IfNotPresent``: a
  ``:latest`` tag (or no tag) means ``Always``, i.e. ErrImagePull right after a good
  ``k3d image import`` / ``kind load``.
- Every pod running the project image runs as UID/GID 1000 (the image's user), non-root,
  no privilege escalation, no capabilities.
- TFJob pods carry ``sidecar.istio.io/inject: "false"``: an Istio sidecar never exits and
  would keep a finished worker (and so the job) running forever.
- The TFJob has no Chief, so ``successPolicy: AllWorkers`` (else the job counts as
  Succeeded when worker-0 exits, while worker-1 may still be saving) and
  ``cleanPodPolicy: None`` (finished and failed pods stay, so their logs can be read).
- The InferenceService names its deployment mode explicitly (``Knative`` or
  ``Standard``): the cluster-wide default lives in KServe's ConfigMap and differs between
  installs, and the mode cannot be changed once the service exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from k8s.manifests.argo_rbac import (
    cache_writer_rbac,
    controller_service_account,
    workflow_rbac,
)
from k8s.manifests.argo_workflow import (
    CACHE_LABEL,
    memo_key,
    workflow,
    workflow_cache,
    workflow_objects,
)
from k8s.manifests.checks import (
    check_min_accuracy,
    check_models,
    check_settings,
)
from k8s.manifests.inference import (
    has_ingress,
    inference_service,
    ingress_service,
    message_dumper,
    message_dumper_url,
    serving_runtime,
)
from k8s.manifests.names import (
    ARGO_CONTROLLER_DEPLOYMENT,
    ARGO_CONTROLLER_SA,
    ARGO_NAMESPACE,
    COMMON_LABELS,
    COMPONENT_LABEL,
    HPA_CPU_TARGET_PERCENT,
    IMAGE_ANNOTATION,
    INGEST_JOB,
    INSTANCE_LABEL,
    ISVC_POD_LABEL,
    K8S_NODE_PORT_RANGE,
    KSERVE_MODEL_DIR,
    LOADER_LIFETIME_S,
    LOADER_POD,
    MANAGED_BY,
    MAX_SERVICE_NAME,
    MESSAGE_DUMPER,
    MODEL_FORMAT,
    MODEL_FORMAT_VERSION,
    MODEL_LABEL,
    NO_ISTIO_SIDECAR,
    PART_OF,
    PREDICTOR_PORT,
    PROJECT_UID,
    RAW_DATA_SUBDIR,
    ROLLBACK_JOB,
    RUNTIME_NAME,
    SELECT_JOB,
    STEPS,
    TENSORBOARD_POD,
    TFJOB_CONTAINER,
    TFJOB_PORT,
    TFJOB_PORT_NAME,
    TRAINING_OPERATOR_NAMESPACE,
    VOLUME_NAME,
    WORKER_GRACE_S,
    WORKFLOW_CACHE,
    WORKFLOW_CACHE_WRITER,
    WORKFLOW_NAME,
    WORKFLOW_SA,
    WORKFLOW_STEP,
    cache_writer_name,
    dns_name,
    is_dns_label,
    labels,
    raw_data_dir,
    selector,
    storage_uri,
    tfjob_name,
    workflow_cache_name,
)
from k8s.manifests.pods import (
    ingest_job,
    loader_pod,
    namespace,
    pvc,
    selection_job,
    tensorboard_pod,
    tfjob,
    train_command,
)
from k8s.providers.settings import Settings
from ml import contract


def data_cache_key(s: Settings, volume_uid: str = "") -> str:
    """The Workflow's ingestion cache key for this deployment: its image (the code
    version), the dataset files' checksums (``ml.contract.RAW_SHA256``) and its volume,
    down to the claim's uid when known: a claim deleted and made again (``down
    --keep-cluster``, then ``up``) is empty, and its new uid makes a new key, so an old
    entry in Argo's shared cache never skips its ingestion."""
    volume = f"{s.namespace}/{s.volume}" + (f"@{volume_uid}" if volume_uid else "")
    return memo_key(s.image, contract.RAW_SHA256, volume=volume)


def cluster_objects(
    s: Settings,
    *,
    models: Iterable[str],
    min_accuracy: float = 0.0,
    force: bool = False,
    source_dir: bool = False,
) -> list[tuple[str, dict[str, Any]]]:
    """Every object of a whole lifecycle as ``(step, object)`` in apply order; step is
    one of ``STEPS``. ``source_dir``: the data come from local files (loader pod, and
    ingest reads them from ``raw_data_dir(s)``). Last, the ``workflow`` step: what
    `invoke workflow` applies instead of train-all + deploy (its RBAC, cache, Workflow)."""
    check_settings(s)
    models = check_models(models)
    check_min_accuracy(min_accuracy)
    out: list[tuple[str, dict[str, Any]]] = [("up", namespace(s)), ("up", pvc(s))]
    if source_dir:
        out.append(("up", loader_pod(s)))
    out.append(("up", ingest_job(s, raw_data_dir(s) if source_dir else None)))
    out += [("train-all", tfjob(s, m)) for m in models]
    out.append(("deploy", selection_job(s, min_accuracy=min_accuracy, force=force)))
    if s.request_logger:
        out += [("deploy", obj) for obj in message_dumper(s)]
    if s.predictor == "kserve":
        out.append(("deploy", serving_runtime(s)))
    out.append(("deploy", inference_service(s)))
    if has_ingress(s):
        out.append(("deploy", ingress_service(s)))
    out += [
        (WORKFLOW_STEP, obj)
        for obj in workflow_objects(
            s,
            models=models,
            cache_key=data_cache_key(s),
            min_accuracy=min_accuracy,
            source_dir=source_dir,
        )
    ]
    return out


__all__ = [
    "ARGO_CONTROLLER_DEPLOYMENT",
    "ARGO_CONTROLLER_SA",
    "ARGO_NAMESPACE",
    "CACHE_LABEL",
    "COMMON_LABELS",
    "COMPONENT_LABEL",
    "HPA_CPU_TARGET_PERCENT",
    "IMAGE_ANNOTATION",
    "INGEST_JOB",
    "INSTANCE_LABEL",
    "ISVC_POD_LABEL",
    "K8S_NODE_PORT_RANGE",
    "KSERVE_MODEL_DIR",
    "LOADER_LIFETIME_S",
    "LOADER_POD",
    "MANAGED_BY",
    "MAX_SERVICE_NAME",
    "MESSAGE_DUMPER",
    "MODEL_FORMAT",
    "MODEL_FORMAT_VERSION",
    "MODEL_LABEL",
    "NO_ISTIO_SIDECAR",
    "PART_OF",
    "PREDICTOR_PORT",
    "PROJECT_UID",
    "RAW_DATA_SUBDIR",
    "ROLLBACK_JOB",
    "RUNTIME_NAME",
    "SELECT_JOB",
    "STEPS",
    "TENSORBOARD_POD",
    "TFJOB_CONTAINER",
    "TFJOB_PORT",
    "TFJOB_PORT_NAME",
    "TRAINING_OPERATOR_NAMESPACE",
    "VOLUME_NAME",
    "WORKER_GRACE_S",
    "WORKFLOW_CACHE",
    "WORKFLOW_CACHE_WRITER",
    "WORKFLOW_NAME",
    "WORKFLOW_SA",
    "WORKFLOW_STEP",
    "cache_writer_name",
    "cache_writer_rbac",
    "check_models",
    "check_settings",
    "cluster_objects",
    "controller_service_account",
    "data_cache_key",
    "dns_name",
    "has_ingress",
    "inference_service",
    "ingest_job",
    "ingress_service",
    "is_dns_label",
    "labels",
    "loader_pod",
    "memo_key",
    "message_dumper",
    "message_dumper_url",
    "namespace",
    "pvc",
    "raw_data_dir",
    "selection_job",
    "selector",
    "serving_runtime",
    "storage_uri",
    "tensorboard_pod",
    "tfjob",
    "tfjob_name",
    "train_command",
    "workflow",
    "workflow_cache",
    "workflow_cache_name",
    "workflow_objects",
    "workflow_rbac",
]
