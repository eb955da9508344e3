"""The objects that run the pod contract: namespace, volume, loader, ingest, TFJobs and
the selection job (and the pieces their pods share)."""

from __future__ import annotations

from typing import Any

from k8s.manifests.checks import check_min_accuracy, check_models
from k8s.manifests.names import (
    INGEST_JOB,
    LOADER_LIFETIME_S,
    LOADER_POD,
    MODEL_LABEL,
    NO_ISTIO_SIDECAR,
    PROJECT_UID,
    ROLLBACK_JOB,
    SELECT_JOB,
    TENSORBOARD_POD,
    TFJOB_CONTAINER,
    TFJOB_PORT,
    TFJOB_PORT_NAME,
    TRAIN_COMPONENT,
    VOLUME_NAME,
    WORKER_GRACE_S,
    labels,
    raw_data_dir,
    tfjob_name,
)
from k8s.manifests.placement import placement, volume_labels
from k8s.providers.settings import Resources, Settings
from ml import contract
from ml.contract import training_metrics as train_metrics
from ml.contract.training_metrics import ADDRESS_ENV, JOB_ENV, LINGER_ENV

# -- shared pieces ---------------------------------------------------------------------


def meta(
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


def container_security_context(run_as: int | None = None) -> dict[str, Any]:
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


def env_list(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": str(v)} for k, v in values.items()]


def base_env() -> dict[str, str]:
    # The image sets these too; repeating them keeps a pod right with any base image.
    return {"TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}


def _volume(s: Settings, *, read_only: bool = False) -> dict[str, Any]:
    claim: dict[str, Any] = {"claimName": s.volume}
    if read_only:
        claim["readOnly"] = True
    return {"name": VOLUME_NAME, "persistentVolumeClaim": claim}


def _volume_mount(s: Settings, *, read_only: bool = False) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": VOLUME_NAME, "mountPath": s.mount_path}
    if read_only:
        mount["readOnly"] = True
    return mount


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
        "env": env_list(env if env is not None else base_env()),
        "volumeMounts": [_volume_mount(s)],
        "securityContext": container_security_context(),
    }
    if resources is not None:
        container["resources"] = resources
    return container


def _project_pod_spec(
    s: Settings,
    container: dict[str, Any],
    *,
    restart_policy: str | None,
    spread_by: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod spec that mounts the volume; its pod must carry ``volume_labels(s)``. No
    service-account token: the project's pods never call the Kubernetes API (the
    Workflow's steps, whose Argo executor does, are built from the container alone)."""
    spec: dict[str, Any] = {}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    spec["automountServiceAccountToken"] = False
    spec["securityContext"] = _pod_security_context()
    spec["containers"] = [container]
    spec["volumes"] = [_volume(s)]
    spec.update(placement(s, spread_by))
    return spec


def _job(
    s: Settings,
    name: str,
    component: str,
    command: list[str],
    *,
    backoff_limit: int,
    resources: Resources | None = None,
) -> dict[str, Any]:
    """A batch Job of the project image, the volume mounted; a worker's resources unless
    ``resources`` says less."""
    sized = (resources or s.worker_resources).as_dict()
    container = _project_container(s, component, command, resources=sized)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, s.namespace, component),
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {
                    "labels": labels(component, **volume_labels(s)),
                    # An Istio sidecar never exits: the Job would never complete.
                    "annotations": dict(NO_ISTIO_SIDECAR),
                },
                # Never: a failed attempt's pod (and its log) stays; the Job makes a new one.
                "spec": _project_pod_spec(s, container, restart_policy="Never"),
            },
        },
    }


# -- builders --------------------------------------------------------------------------


def namespace(s: Settings) -> dict[str, Any]:
    """The namespace everything else lives in."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(s.namespace, None)}


def pvc(s: Settings) -> dict[str, Any]:
    """The shared volume (``s.volume_access``; k8s.manifests.placement places its pods).
    No class named: the cluster's default class."""
    spec: dict[str, Any] = {"accessModes": [s.volume_access]}
    if s.storage_class:
        spec["storageClassName"] = s.storage_class
    spec["resources"] = {"requests": {"storage": s.volume_size}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(s.volume, s.namespace, "storage"),
        "spec": spec,
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
        # No CPU requested (an explicit 0): `status` and `train-all` start it while the
        # predictors' peak may hold every CPU the node gives, and 10m left it Pending for
        # the autoscaler's five-minute scale-in ("Insufficient cpu", the kind runs).
        resources=Resources("0", "250m", "32Mi", "128Mi").as_dict(),
    )
    spec = _project_pod_spec(s, container, restart_policy="Never")
    # python as PID 1 ignores SIGTERM: do not make `kubectl delete` wait 30 s for nothing.
    spec["terminationGracePeriodSeconds"] = 1
    metadata = meta(
        LOADER_POD,
        s.namespace,
        "loader",
        extra_labels=volume_labels(s),
        annotations=NO_ISTIO_SIDECAR,
    )
    return _pod(metadata, spec)


def tensorboard_pod(s: Settings) -> dict[str, Any]:
    """TensorBoard over ``<mount>/tensorboard``, the volume mounted read-only (it only
    reads; training may be writing); Ready once it answers HTTP. `invoke tensorboard`
    reaches it with ``kubectl port-forward`` and deletes it when it ends."""
    command = contract.tensorboard(s.mount_path, host="0.0.0.0")  # the kubelet probes the pod IP
    container = _project_container(
        s, "tensorboard", command, resources=s.tensorboard_resources.as_dict()
    )
    container["volumeMounts"] = [_volume_mount(s, read_only=True)]
    container["ports"] = [{"containerPort": contract.TENSORBOARD_PORT, "name": "http"}]
    container["readinessProbe"] = {
        "httpGet": {"path": "/", "port": "http"},
        "periodSeconds": 2,
        "failureThreshold": 3,
    }
    spec = _project_pod_spec(s, container, restart_policy="Never")
    spec["volumes"] = [_volume(s, read_only=True)]
    spec["terminationGracePeriodSeconds"] = 5
    metadata = meta(
        TENSORBOARD_POD,
        s.namespace,
        "tensorboard",
        extra_labels=volume_labels(s),
        annotations=NO_ISTIO_SIDECAR,
    )
    return _pod(metadata, spec)


def _pod(metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """A bare Pod object (the loader and TensorBoard pods)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def ingest_job(s: Settings, source_dir_in_volume: str | None = None) -> dict[str, Any]:
    """``python -m ml ingest``: prepare the dataset in ``<mount>/datasets``."""
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


#: How many scrapes a worker keeps serving /metrics for after its last step
#: (ml/training/train_metrics.py), so that Prometheus sees the job's final figures.
LINGER_SCRAPES = 3


def metrics_linger_s(s: Settings) -> float:
    """Seconds a worker lingers: :data:`LINGER_SCRAPES` of the Prometheus that scrapes it
    (``s.scrape_interval_s``: distml's own 5 s, or what `train` read of a user's)."""
    return LINGER_SCRAPES * s.scrape_interval_s


def _metrics_env(job: str, s: Settings) -> list[dict[str, Any]]:
    """A worker's metrics: served on its pod's IP (the downward API), named by its TFJob."""
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    return [
        pod_ip,  # before the variable that refers to it: the kubelet expands in order
        *env_list({
            ADDRESS_ENV: f"$(POD_IP):{train_metrics.METRICS_PORT}",
            JOB_ENV: job,
            LINGER_ENV: f"{metrics_linger_s(s):g}",
        }),
    ]  # fmt: skip


def _tfjob_container(s: Settings, model: str) -> dict[str, Any]:
    """A TFJob worker's container: the training command, its threads, its metrics."""
    env = base_env() | {
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
    container["env"] += _metrics_env(tfjob_name(model), s)
    container["ports"] = [
        {"containerPort": TFJOB_PORT, "name": TFJOB_PORT_NAME},
        {"containerPort": train_metrics.METRICS_PORT, "name": train_metrics.PORT_NAME},
    ]
    return container


def tfjob(s: Settings, model: str) -> dict[str, Any]:
    """One multi-worker TFJob (Kubeflow training-operator v1) training ``model``."""
    check_models([model])
    container = _tfjob_container(s, model)
    model_labels = {MODEL_LABEL: model}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": meta(
            tfjob_name(model), s.namespace, TRAIN_COMPONENT, extra_labels=model_labels
        ),
        "spec": {
            "runPolicy": {
                "activeDeadlineSeconds": s.train_deadline_s,
                "backoffLimit": tfjob_backoff_limit(s.max_restarts, s.workers),
                "cleanPodPolicy": "None",
            },
            "successPolicy": "AllWorkers",
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": s.workers,
                    # OnFailure: a crashed worker is restarted in place and its peers,
                    # failing in their collectives, too (tfjob_backoff_limit counts them);
                    # all resume from BackupAndRestore. A deleted Running pod fails the
                    # whole job in v1.9 (k8s.waits.tfjobs resubmits it). Not ExitCode: it treats
                    # every exit code below 128 (a Python exception is 1) as permanent
                    # and never bounds the retries of the others.
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {
                            "labels": labels(TRAIN_COMPONENT, **model_labels, **volume_labels(s)),
                            "annotations": dict(NO_ISTIO_SIDECAR),
                        },
                        # restartPolicy: the operator sets it from the replica spec.
                        "spec": {
                            **_project_pod_spec(
                                s,
                                container,
                                restart_policy=None,
                                spread_by=labels(TRAIN_COMPONENT, **model_labels),
                            ),
                            "terminationGracePeriodSeconds": WORKER_GRACE_S,
                        },
                    },
                }
            },
        },
    }


def tfjob_backoff_limit(max_restarts: int, workers: int) -> int:
    """The TFJob's ``runPolicy.backoffLimit`` that lets the job's workers restart together
    ``max_restarts`` times, and fails it at the next fault.

    training-operator v1.9.0's ``PastBackoffLimit`` (pkg/core/job.go:95-133) sums the
    ``restartCount`` of every container of every Running pod and fails the job when the sum
    reaches the limit. One fault of a ``workers``-worker job restarts every worker (its
    peers fail in their collectives): ``workers`` counts. After ``max_restarts`` faults the
    sum is ``max_restarts * workers``, one below this limit; the next restart reaches it.
    """
    return max_restarts * workers + 1


def volume_job(
    s: Settings, name: str, component: str, command: list[str], resources: Resources
) -> dict[str, Any]:
    """A short Job of the project image on the volume (the canary's weight, its end, its
    labelled sample): no retry (its caller decides), and small, so that it is scheduled
    beside a full set of predictors."""
    return _job(s, name, component, command, backoff_limit=0, resources=resources)


def selection_job(
    s: Settings, *, min_accuracy: float, force: bool, rollback: bool = False, canary: bool = False
) -> dict[str, Any]:
    """``python -m ml select``: publish the best candidate (or, with ``rollback``, the
    previous version). backoffLimit 0: a refusal to publish is a verdict, not a flake.
    The image the pods run (``s.image``, the content-hash tag) is the published version's
    code version."""
    if rollback:
        name, component = ROLLBACK_JOB, "rollback"
    else:
        check_min_accuracy(min_accuracy)
        name, component = SELECT_JOB, "select"
    command = contract.select(
        s.mount_path,
        s.service,
        min_accuracy=min_accuracy,
        force=force,
        rollback=rollback,
        canary=canary,
        code_version=s.image,
    )
    return _job(s, name, component, command, backoff_limit=0)
