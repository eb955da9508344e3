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

import re
from collections.abc import Iterable, Sequence
from typing import Any

from k8s import versions
from k8s.settings import (
    MODEL_TYPES,
    PREDICTORS,
    PROVIDERS,
    SERVING_MODES,
    Resources,
    Settings,
)
from ml import contract

PROFILES = contract.PROFILES

PART_OF = "distml"
MANAGED_BY = "distml"
COMMON_LABELS = {
    "app.kubernetes.io/part-of": PART_OF,
    "app.kubernetes.io/managed-by": MANAGED_BY,
}
MODEL_LABEL = "distml/model"
IMAGE_ANNOTATION = "distml/image"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The label KServe puts on every predictor pod of an InferenceService.
ISVC_POD_LABEL = "serving.kserve.io/inferenceservice"

# `cluster_objects` steps, in the order the tasks run them.
STEPS = ("up", "train-all", "deploy")

# Object names.
LOADER_POD = "distml-data-loader"
INGEST_JOB = "distml-ingest"
SELECT_JOB = "distml-select"
ROLLBACK_JOB = "distml-rollback"
RUNTIME_NAME = "distml-predictor"
MESSAGE_DUMPER = "message-dumper"

# The project image's user (Dockerfile: useradd --uid 1000, USER 1000:1000).
PROJECT_UID = 1000
# The pod-level name of the PVC volume in every pod that mounts it.
VOLUME_NAME = "data"
# TFJob: the operator requires this container name and this port name.
TFJOB_CONTAINER = "tensorflow"
TFJOB_PORT = 2222
# A deleted worker pod (a replaced job, a drain, an eviction) gets SIGTERM, and this long
# before SIGKILL: the workers agree on a step, save it and exit (ml.preemption). Measured
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
# Standard mode scales with an HPA on CPU: KServe's own default target, made explicit.
HPA_CPU_TARGET_PERCENT = 80
# Where `invoke up --source-dir` copies the raw Fashion-MNIST files, under the mount.
RAW_DATA_SUBDIR = "raw/fashion-mnist"
# How long the loader pod stays up for `kubectl cp` (it then exits by itself).
LOADER_LIFETIME_S = 3600

# Knative names a revision `<service>-predictor-00001`; it must fit a 63-char label.
MAX_SERVICE_NAME = 63 - len("-predictor-00001")
K8S_NODE_PORT_RANGE = (30000, 32767)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The Kubernetes quantity syntax (as in the CRDs' `pattern` for resources).
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


# -- names -----------------------------------------------------------------------------


def is_dns_label(name: str, *, max_len: int = 63) -> bool:
    """True when ``name`` is a DNS-1123 label (lower-case alphanumerics and '-', no
    leading or trailing '-', at most ``max_len`` characters)."""
    return isinstance(name, str) and 0 < len(name) <= max_len and bool(_DNS_LABEL.match(name))


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
    return f"{s.mount_path.rstrip('/')}/{RAW_DATA_SUBDIR}"


def storage_uri(s: Settings) -> str:
    """The InferenceService's model location: the service's folder in the PVC."""
    return f"pvc://{s.volume}/serving/{s.service}"


def labels(component: str | None = None, **extra: str) -> dict[str, str]:
    """The labels every distml object carries, plus a component and any extras."""
    out = dict(COMMON_LABELS)
    if component:
        out[COMPONENT_LABEL] = component
    out.update(extra)
    return out


def selector(component: str | None = None) -> str:
    """A label selector string matching what ``labels(component)`` puts on objects."""
    return ",".join(f"{k}={v}" for k, v in labels(component).items())


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
    _check_choice("provider", s.provider, PROVIDERS)
    _check_choice("serving mode", s.serving_mode, SERVING_MODES)
    _check_choice("predictor", s.predictor, PREDICTORS)
    _check_choice("profile", s.profile, PROFILES)
    _check_image(s.image)
    if not is_dns_label(s.namespace):
        raise ValueError(
            f"namespace {s.namespace!r} is not a DNS-1123 label (a-z, 0-9, '-', at most 63)"
        )
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
    _check_quantity("volume size", s.volume_size)
    _check_resources("worker", s.worker_resources)
    _check_resources("predictor", s.predictor_resources)
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
    low, high = K8S_NODE_PORT_RANGE
    if not low <= s.ingress_node_port <= high:
        raise ValueError(
            f"ingress node port {s.ingress_node_port} is outside Kubernetes' NodePort range "
            f"{low}-{high}"
        )


def _check_min_accuracy(min_accuracy: float) -> None:
    if not 0.0 <= min_accuracy <= 1.0:
        raise ValueError(
            f"min accuracy must be a fraction between 0 and 1, got {min_accuracy}"
            + (f" (did you mean {min_accuracy / 100:g}?)" if 1 < min_accuracy <= 100 else "")
        )


# -- shared pieces ---------------------------------------------------------------------


def _meta(
    name: str,
    namespace: str | None,
    component: str | None = None,
    *,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels(component, **(extra_labels or {}))
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def _pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": PROJECT_UID,
        "runAsGroup": PROJECT_UID,
        "fsGroup": PROJECT_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _container_security_context(run_as: int | None = None) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if run_as is not None:
        ctx.update(
            runAsNonRoot=True,
            runAsUser=run_as,
            runAsGroup=run_as,
            seccompProfile={"type": "RuntimeDefault"},
        )
    return ctx


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": str(v)} for k, v in values.items()]


def _base_env() -> dict[str, str]:
    # The image sets these too; repeating them keeps a pod right with any base image.
    return {"TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}


def _volume(s: Settings) -> dict[str, Any]:
    return {"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": s.volume}}


def _volume_mount(s: Settings) -> dict[str, Any]:
    return {"name": VOLUME_NAME, "mountPath": s.mount_path}


def _project_container(
    s: Settings,
    name: str,
    command: list[str],
    *,
    resources: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": s.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": _env(env if env is not None else _base_env()),
        "volumeMounts": [_volume_mount(s)],
        "securityContext": _container_security_context(),
    }
    if resources is not None:
        container["resources"] = resources
    return container


def _project_pod_spec(
    s: Settings, container: dict[str, Any], *, restart_policy: str | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    spec["securityContext"] = _pod_security_context()
    spec["containers"] = [container]
    spec["volumes"] = [_volume(s)]
    return spec


def _job(
    s: Settings, name: str, component: str, command: list[str], *, backoff_limit: int
) -> dict[str, Any]:
    container = _project_container(s, component, command, resources=s.worker_resources.as_dict())
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, s.namespace, component),
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": labels(component)},
                # Never: a failed attempt's pod (and its log) stays; the Job makes a new one.
                "spec": _project_pod_spec(s, container, restart_policy="Never"),
            },
        },
    }


# -- builders --------------------------------------------------------------------------


def namespace(s: Settings) -> dict[str, Any]:
    """The namespace everything else lives in."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(s.namespace, None)}


def pvc(s: Settings) -> dict[str, Any]:
    """The shared volume (ReadWriteOnce: every pod that mounts it must share its node)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(s.volume, s.namespace, "storage"),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": s.storage_class,
            "resources": {"requests": {"storage": s.volume_size}},
        },
    }


def loader_pod(s: Settings) -> dict[str, Any]:
    """A pod that mounts the volume and waits (up to an hour) for `kubectl cp` of local
    Fashion-MNIST files into ``raw_data_dir(s)``; offline clusters use it."""
    target = raw_data_dir(s)
    script = (
        f"import os, time; os.makedirs({target!r}, exist_ok=True); time.sleep({LOADER_LIFETIME_S})"
    )
    container = _project_container(
        s,
        "loader",
        ["python", "-c", script],
        resources=Resources("10m", "250m", "32Mi", "128Mi").as_dict(),
    )
    spec = _project_pod_spec(s, container, restart_policy="Never")
    # python as PID 1 ignores SIGTERM: do not make `kubectl delete` wait 30 s for nothing.
    spec["terminationGracePeriodSeconds"] = 1
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(LOADER_POD, s.namespace, "loader"),
        "spec": spec,
    }


def ingest_job(s: Settings, source_dir_in_volume: str | None = None) -> dict[str, Any]:
    """``python -m ml.ingest``: prepare the dataset in ``<mount>/datasets``."""
    command = contract.ingest(s.mount_path, source_dir_in_volume)
    return _job(s, INGEST_JOB, "ingest", command, backoff_limit=2)


def train_command(s: Settings, model: str) -> list[str]:
    """The command every TFJob worker of ``model`` runs (the pod contract)."""
    return contract.train(
        s.mount_path,
        model,
        profile=s.profile,
        epochs=s.epochs,
        steps_per_epoch=s.steps_per_epoch,
    )


def tfjob(s: Settings, model: str) -> dict[str, Any]:
    """One multi-worker TFJob (Kubeflow training-operator v1) training ``model``."""
    check_models([model])
    env = _base_env() | {
        # Each worker's TF threads = the cores its CPU limit gives it (>= 1): workers
        # sharing a node otherwise slow each other down (measured: 0.51x vs 0.98x).
        "TF_NUM_INTRAOP_THREADS": str(s.threads),
        "TF_NUM_INTEROP_THREADS": str(s.threads),
    }
    container = _project_container(
        s,
        TFJOB_CONTAINER,
        train_command(s, model),
        resources=s.worker_resources.as_dict(s.gpus_per_worker),
        env=env,
    )
    container["ports"] = [{"containerPort": TFJOB_PORT, "name": TFJOB_PORT_NAME}]
    model_labels = {MODEL_LABEL: model}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": _meta(tfjob_name(model), s.namespace, "train", extra_labels=model_labels),
        "spec": {
            "runPolicy": {
                "activeDeadlineSeconds": s.train_deadline_s,
                "backoffLimit": s.max_restarts,
                "cleanPodPolicy": "None",
            },
            "successPolicy": "AllWorkers",
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": s.workers,
                    # OnFailure: a crashed worker is restarted in place (counted against
                    # backoffLimit = --max-restarts) and its peers, failing in their
                    # collectives, too; all resume from BackupAndRestore. A deleted pod
                    # is recreated by the operator, uncounted. Not ExitCode: it treats
                    # every exit code below 128 (a Python exception is 1) as permanent
                    # and never bounds the retries of the others.
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {
                            "labels": labels("train", **model_labels),
                            "annotations": {"sidecar.istio.io/inject": "false"},
                        },
                        # restartPolicy: the operator sets it from the replica spec.
                        "spec": {
                            **_project_pod_spec(s, container, restart_policy=None),
                            "terminationGracePeriodSeconds": WORKER_GRACE_S,
                        },
                    },
                }
            },
        },
    }


def selection_job(
    s: Settings, *, min_accuracy: float, force: bool, rollback: bool = False
) -> dict[str, Any]:
    """``python -m ml.select``: publish the best candidate (or, with ``rollback``, the
    previous version). backoffLimit 0: a refusal to publish is a verdict, not a flake."""
    if rollback:
        name, component = ROLLBACK_JOB, "rollback"
    else:
        _check_min_accuracy(min_accuracy)
        name, component = SELECT_JOB, "select"
    command = contract.select(
        s.mount_path, s.service, min_accuracy=min_accuracy, force=force, rollback=rollback
    )
    return _job(s, name, component, command, backoff_limit=0)


_SERVE = contract.serve(KSERVE_MODEL_DIR, "{{.Name}}", host="0.0.0.0", http_port=PREDICTOR_PORT)


def serving_runtime(s: Settings) -> dict[str, Any]:
    """The ServingRuntime running our own server (``python -m ml.serve``) in the project
    image; ``inference_service`` selects it for ``predictor == "kserve"``."""
    container = {
        "name": "kserve-container",
        "image": s.image,
        "imagePullPolicy": "IfNotPresent",
        # KServe replaces {{.Name}} with the InferenceService's name.
        "command": _SERVE[:3],
        "args": _SERVE[3:],
        "env": _env(_base_env()),
        "ports": [{"containerPort": PREDICTOR_PORT, "name": "http1", "protocol": "TCP"}],
        # Ready only once a model version has loaded (the server answers 503 until then):
        # without this, KServe/Knative fall back to a TCP probe and route requests to a
        # pod that is still loading the SavedModel, which fails them during scale-out.
        "readinessProbe": {
            "httpGet": {"path": f"/v1/models/{s.service}", "port": PREDICTOR_PORT},
            "periodSeconds": 2,
            "failureThreshold": 2,
            "timeoutSeconds": 2,
        },
        "resources": s.predictor_resources.as_dict(),
        # A ServingRuntime has no pod-level securityContext: all of it goes here.
        "securityContext": _container_security_context(run_as=PROJECT_UID),
    }
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": _meta(RUNTIME_NAME, s.namespace, "serve"),
        "spec": {
            "supportedModelFormats": [
                {"name": MODEL_FORMAT, "version": MODEL_FORMAT_VERSION, "autoSelect": True}
            ],
            "protocolVersions": ["v1"],
            "containers": [container],
        },
    }


def inference_service(s: Settings) -> dict[str, Any]:
    """The KServe InferenceService serving ``pvc://<volume>/serving/<service>``."""
    if s.serving_mode == "knative":
        annotations = {
            # The project image: a new build changes this, which rolls the predictor (the
            # ServingRuntime's image alone does not).
            IMAGE_ANNOTATION: s.image,
            "serving.kserve.io/deploymentMode": "Knative",
            # Knative's KPA: concurrent requests per replica before it adds one.
            "autoscaling.knative.dev/target": str(s.target),
        }
    else:
        annotations = {
            IMAGE_ANNOTATION: s.image,
            "serving.kserve.io/deploymentMode": "Standard",
            # KServe's webhook checks scaleMetric/scaleTarget against the HPA rules only
            # with this class named explicitly (else it applies Knative's, refusing cpu).
            "serving.kserve.io/autoscalerClass": "hpa",
        }
    model: dict[str, Any]
    if s.predictor == "kserve":
        model = {
            "modelFormat": {"name": MODEL_FORMAT, "version": MODEL_FORMAT_VERSION},
            "runtime": RUNTIME_NAME,
            "protocolVersion": "v1",
            "storageUri": storage_uri(s),
            "resources": s.predictor_resources.as_dict(),
        }
    else:
        # KServe's built-in TF Serving runtime, its image tag pinned. That runtime asks
        # for 1 CPU / 2Gi per replica by default; ours (predictor_resources) is smaller
        # so that several replicas fit a laptop cluster.
        model = {
            "modelFormat": {"name": "tensorflow"},
            "runtimeVersion": versions.TFSERVING_RUNTIME_VERSION,
            "storageUri": storage_uri(s),
            "resources": s.predictor_resources.as_dict(),
        }
    predictor: dict[str, Any] = {
        "minReplicas": s.min_replicas,
        "maxReplicas": s.max_replicas,
    }
    if s.serving_mode == "standard":
        predictor["scaleMetric"] = "cpu"
        predictor["scaleTarget"] = HPA_CPU_TARGET_PERCENT
    if s.container_concurrency is not None:
        predictor["containerConcurrency"] = s.container_concurrency
    if s.request_logger:
        predictor["logger"] = {"mode": "all", "url": message_dumper_url(s)}
    predictor["model"] = model
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": _meta(s.service, s.namespace, "serve", annotations=annotations),
        "spec": {"predictor": predictor},
    }


def message_dumper_url(s: Settings) -> str:
    """Where the predictor's request logger sends its CloudEvents."""
    return f"http://{MESSAGE_DUMPER}.{s.namespace}.svc.cluster.local"


def message_dumper(s: Settings) -> list[dict[str, Any]]:
    """A Deployment + Service printing every request/response the logger sends."""
    pod_labels = labels("request-logger", **{"app.kubernetes.io/name": MESSAGE_DUMPER})
    match = {"app.kubernetes.io/name": MESSAGE_DUMPER, COMPONENT_LABEL: "request-logger"}
    container = {
        "name": MESSAGE_DUMPER,
        "image": versions.MESSAGE_DUMPER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": Resources("10m", "100m", "32Mi", "64Mi").as_dict(),
        # ko-built image: its user is 65532 (nonroot); named here so the check can pass.
        "securityContext": _container_security_context(run_as=65532),
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(MESSAGE_DUMPER, s.namespace, "request-logger"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": match},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [container]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(MESSAGE_DUMPER, s.namespace, "request-logger"),
        "spec": {
            "selector": dict(match),
            # Port 80, so the logger URL needs no port.
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def ingress_service(s: Settings) -> dict[str, Any]:
    """Standard mode's way in from the host: a Service in front of the predictor pods.

    k3d: LoadBalancer (k3s's ServiceLB takes the port k3d maps to the host); kind and
    minikube: NodePort ``s.ingress_node_port`` (the port the cluster maps to the host).
    In Knative mode the Istio ingress gateway is the way in instead.
    """
    port: dict[str, Any] = {
        "name": "http",
        "port": 80,
        "targetPort": PREDICTOR_PORT,
        "protocol": "TCP",
    }
    if s.provider == "k3d":
        service_type = "LoadBalancer"
    else:
        service_type = "NodePort"
        port["nodePort"] = s.ingress_node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(f"{s.service}-ingress", s.namespace, "ingress"),
        "spec": {
            "type": service_type,
            "selector": {ISVC_POD_LABEL: s.service},
            "ports": [port],
        },
    }


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
    ingest reads them from ``raw_data_dir(s)``)."""
    check_settings(s)
    models = check_models(models)
    _check_min_accuracy(min_accuracy)
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
    if s.serving_mode == "standard":
        out.append(("deploy", ingress_service(s)))
    return out
