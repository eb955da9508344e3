"""distml tasks: from an empty laptop to an autoscaled image classifier, and back.

    invoke up train-all deploy loadtest --concurrency 5
    invoke status
    invoke down [--purge]

Thin by design: parse flags, pick the runtime, call library code in ``runtime/``.
Every config key below can be set in ``invoke.yaml`` or as ``INVOKE_<KEY>`` (for example
``INVOKE_RUNTIME=local``, ``INVOKE_WORKDIR=/tmp/distml``).
"""

from __future__ import annotations

from pathlib import Path

from invoke import Collection, Exit, task

from common.errors import DistmlError
from k8s.settings import PROVIDERS
from ml import contract
from runtime.cli import build_request as _request
from runtime.cli import call as _call
from runtime.cli import checked as _checked
from runtime.cli import cluster_config as _cluster_config
from runtime.cli import float_flag as _float
from runtime.cli import int_flag as _int
from runtime.cli import service_name as _service
from runtime.requests import DEFAULT_HTTP_PORT

ROOT = Path(__file__).resolve().parent
MODEL_HELP = ", ".join(contract.MODEL_TYPES)
RUNTIME_HELP = (
    "auto (default: k3d when Docker + k3d are there, else local), local, k3d, kind, minikube"
)


def _workdir(c):
    from runtime.workdir import Workdir

    path = Path(str(c.config.workdir)).expanduser()
    return Workdir.at(path if path.is_absolute() else ROOT / path)


def _runtime(c, requested, *, for_up=False):
    """Pick the runtime (one line says which and why) and return its implementation."""
    from runtime import select_runtime

    wd = _workdir(c)
    requested = requested or str(c.config.runtime)
    state_runtime = wd.load_state().get("runtime")
    try:
        if requested == "auto" and state_runtime and not for_up:
            name, why = state_runtime, "the runtime `invoke up` prepared"
        else:
            name, why = select_runtime(requested)
    except DistmlError as e:
        raise Exit(f"error: {e}", code=2) from e
    print(f"runtime: {name} ({why})", flush=True)
    if name in PROVIDERS:
        return _cluster_runtime(c, name, wd)
    from runtime.local import LocalRuntime

    return LocalRuntime(wd, service=_service(c), out=_out, dry=bool(c.config.run.dry))


def _cluster_runtime(c, name, wd):
    from runtime.cluster import ClusterRuntime

    cluster = _cluster_config(c)
    return ClusterRuntime(
        c,
        name,
        wd,
        ROOT,
        service=_service(c),
        namespace=str(cluster.namespace),
        cluster=str(cluster.name),
        ingress_port=int(cluster.ingress_port),
        docker=str(c.config.docker),
        out=_out,
    )


def _out(line):
    print(line, flush=True)


@task(
    help={
        "runtime": RUNTIME_HELP,
        "source-dir": "directory holding the four Fashion-MNIST .gz files (else: "
        "DISTML_DATA_DIR, Debian's dataset-fashion-mnist, ~/.keras/datasets, download); "
        "on a cluster they are copied into the volume (offline clusters)",
        "serving-mode": "cluster: knative (default; Istio + Knative, request-based "
        "autoscaling) or standard (HPA on CPU; lighter)",
        "base": "cluster: build the image's base locally ('local': debootstrap)",
        "base-image": "cluster: base image for the project image",
        "with-argo": "cluster: also install Argo Workflows (pinned; namespace argo) for "
        "`invoke workflow`; kept by later `up`s, removed by `down --keep-cluster`",
    }
)
def up(
    c,
    runtime=None,
    source_dir=None,
    serving_mode=None,
    base=None,
    base_image=None,
    with_argo=False,
):
    """Set up the runtime: cluster, operators, image, volume, dataset (idempotent)."""
    from runtime.requests import UpRequest

    request = _request(
        UpRequest,
        source_dir=source_dir or c.config.source_dir or None,
        serving_mode=serving_mode,
        base=base,
        base_image=base_image,
        with_argo=with_argo,
    )
    rt = _runtime(c, runtime, for_up=True)
    _call(rt.up, _checked(rt, request))


TRAIN_HELP = {
    "runtime": RUNTIME_HELP,
    "workers": "worker processes (TFJob Worker replicas) per job (default 2)",
    "parallel": "how many jobs run at once (default: all; on a cluster, all that fit the node)",
    "profile": "quick (3 x 70 steps, default) or full",
    "epochs": "override the profile's epochs",
    "steps-per-epoch": "override the profile's steps per epoch",
    "max-restarts": "restart a job's workers together up to this many times (default 2)",
    "gpus-per-worker": "cluster: nvidia.com/gpu limit per worker (needs a GPU base image: "
    "see README)",
}


def _train(c, models, runtime, **flags):
    """``train`` and ``train-all``: one implementation, the models are what differs."""
    from runtime.requests import TrainRequest

    request = _request(
        TrainRequest,
        models=tuple(models),
        workers=_int("--workers", flags["workers"], int(c.config.workers)),
        parallel=_int("--parallel", flags["parallel"]),
        profile=flags["profile"] or str(c.config.profile),
        epochs=_int("--epochs", flags["epochs"]),
        steps_per_epoch=_int("--steps-per-epoch", flags["steps_per_epoch"]),
        max_restarts=_int("--max-restarts", flags["max_restarts"], int(c.config.max_restarts)),
        gpus_per_worker=_int("--gpus-per-worker", flags["gpus_per_worker"], 0),
    )
    rt = _runtime(c, runtime)
    _call(rt.train, _checked(rt, request, refuse=("--gpus-per-worker",)))


@task(
    help={"model-type": f"train only these (repeatable): {MODEL_HELP}", **TRAIN_HELP},
    iterable=["model_type"],
)
def train_all(
    c,
    model_type=None,
    runtime=None,
    workers=None,
    parallel=None,
    profile=None,
    epochs=None,
    steps_per_epoch=None,
    max_restarts=None,
    gpus_per_worker=None,
):
    """Train every model variant, one multi-worker job each, in parallel."""
    flags = dict(locals())
    del flags["c"], flags["model_type"], flags["runtime"]
    _train(c, list(model_type) or contract.MODEL_TYPES, runtime, **flags)


@task(help={"model-type": f"the model to train: {MODEL_HELP}", **TRAIN_HELP})
def train(
    c,
    model_type=None,
    runtime=None,
    workers=None,
    parallel=None,
    profile=None,
    epochs=None,
    steps_per_epoch=None,
    max_restarts=None,
    gpus_per_worker=None,
):
    """Train one model variant as a multi-worker job."""
    if not model_type:
        raise Exit(f"error: --model-type is required ({MODEL_HELP})", code=2)
    flags = dict(locals())
    del flags["c"], flags["model_type"], flags["runtime"]
    _train(c, [model_type], runtime, **flags)


@task(
    help={
        "runtime": RUNTIME_HELP,
        "predictor": "kserve (default: the project's server, python -m ml.serve) or tfserving "
        "(KServe's TF Serving runtime; cluster only)",
        "min-accuracy": "refuse to publish a winner below this validation accuracy (0-1)",
        "force": "publish the winner even if worse than what is serving",
        "target": "cluster: autoscaling target, concurrent requests per replica (default 1)",
        "min-replicas": "cluster: minimum predictor replicas (default 1)",
        "max-replicas": "cluster: maximum predictor replicas (default 8)",
        "container-concurrency": "cluster: hard limit of requests per replica (default: none)",
        "request-logger": "cluster: log every request/response to a message-dumper pod",
        "http-port": "local runtime: the server's port on 127.0.0.1 (default 8080)",
    }
)
def deploy(
    c,
    runtime=None,
    predictor="kserve",
    min_accuracy=None,
    force=False,
    target=None,
    min_replicas=None,
    max_replicas=None,
    container_concurrency=None,
    request_logger=False,
    http_port=None,
):
    """Select the most accurate model, publish it and serve it."""
    from runtime.requests import DeployRequest

    request = _request(
        DeployRequest,
        predictor=predictor,
        min_accuracy=_float("--min-accuracy", min_accuracy, 0.0),
        force=force,
        target=_int("--target", target),
        min_replicas=_int("--min-replicas", min_replicas),
        max_replicas=_int("--max-replicas", max_replicas),
        container_concurrency=_int("--container-concurrency", container_concurrency),
        request_logger=request_logger,
        http_port=_int("--http-port", http_port, int(c.config.http_port)),
    )
    rt = _runtime(c, runtime)
    _call(rt.deploy, _checked(rt, request))


@task(help={"runtime": RUNTIME_HELP})
def rollback(c, runtime=None):
    """Republish the previously served model version."""
    rt = _runtime(c, runtime)
    _call(rt.rollback)


@task(
    help={
        "runtime": RUNTIME_HELP,
        "concurrency": "simultaneous Locust users, no wait time (default 5)",
        "duration": "how long, e.g. 30s, 2m (default 30s)",
        "spawn-rate": "users started per second (default: all at once)",
        "max-failure-ratio": "fail when more than this share of requests fail (default 0)",
        "expect-scale-out": "cluster runtimes: fail unless ready predictor replicas rose "
        "(default on; --no-expect-scale-out turns it off; the local runtime never scales)",
    }
)
def loadtest(
    c,
    runtime=None,
    concurrency=None,
    duration=None,
    spawn_rate=None,
    max_failure_ratio=None,
    expect_scale_out=True,
):
    """Load-test the served model with Locust; report and chart."""
    from runtime.requests import DEFAULT_CONCURRENCY, DEFAULT_DURATION, LoadtestRequest

    request = _request(
        LoadtestRequest,
        concurrency=_int("--concurrency", concurrency, DEFAULT_CONCURRENCY),
        duration=str(duration or DEFAULT_DURATION),
        spawn_rate=_float("--spawn-rate", spawn_rate),
        max_failure_ratio=_float("--max-failure-ratio", max_failure_ratio, 0.0),
        expect_scale_out=bool(expect_scale_out),
    )
    rt = _runtime(c, runtime)
    _call(rt.loadtest, _checked(rt, request))


@task(help={"runtime": RUNTIME_HELP})
def status(c, runtime=None):
    """Show what runs: cluster, operators, jobs, model server / ISVC, replicas, last load test."""
    rt = _runtime(c, runtime)
    _call(rt.status)


@task(
    help={
        "runtime": RUNTIME_HELP,
        "purge": "also delete the work dir (only a directory distml made) and, on a "
        "cluster runtime, the images `up` built",
        "keep-cluster": "cluster runtimes: keep the cluster",
    }
)
def down(c, runtime=None, purge=False, keep_cluster=False):
    """Remove what `up` made (the cluster); --purge also deletes built images and the work dir."""
    from runtime.requests import DownRequest

    request = _request(DownRequest, purge=purge, keep_cluster=keep_cluster)
    rt = _runtime(c, runtime)
    _call(rt.down, _checked(rt, request))


@task(
    help={
        "runtime": RUNTIME_HELP,
        "watch": "follow the workflow: a line per step phase change; exit 1 if it fails",
        "stop": "delete distml's running workflows (their pods go with them)",
        "model-type": f"train only these (repeatable; default all): {MODEL_HELP}",
        "profile": TRAIN_HELP["profile"],
        "epochs": TRAIN_HELP["epochs"],
        "steps-per-epoch": TRAIN_HELP["steps-per-epoch"],
        "min-accuracy": "the selection step refuses to publish below this validation "
        "accuracy (0-1)",
        "cache-max-age": "reuse a cached ingestion this long, e.g. 720h (default), 30m",
    },
    iterable=["model_type"],
)
def workflow(
    c,
    runtime=None,
    watch=False,
    stop=False,
    model_type=None,
    profile=None,
    epochs=None,
    steps_per_epoch=None,
    min_accuracy=None,
    cache_max_age=None,
):
    """Run the whole pipeline as one Argo Workflow (cluster; `up --with-argo` first)."""
    from k8s.manifests.argo_workflow import DEFAULT_CACHE_MAX_AGE
    from runtime.requests import WorkflowRequest

    request = _request(
        WorkflowRequest,
        models=tuple(model_type or contract.MODEL_TYPES),
        profile=profile or str(c.config.profile),
        watch=bool(watch),
        stop=bool(stop),
        epochs=_int("--epochs", epochs),
        steps_per_epoch=_int("--steps-per-epoch", steps_per_epoch),
        min_accuracy=_float("--min-accuracy", min_accuracy, 0.0),
        cache_max_age=cache_max_age or DEFAULT_CACHE_MAX_AGE,
    )
    rt = _runtime(c, runtime)
    _call(rt.workflow, _checked(rt, request))


TENSORBOARD_PORT_HELP = f"the port on 127.0.0.1 to open it at (default {contract.TENSORBOARD_PORT})"


@task(help={"runtime": RUNTIME_HELP, "port": TENSORBOARD_PORT_HELP})
def tensorboard(c, runtime=None, port=None):
    """TensorBoard over every training run, on 127.0.0.1 until Ctrl-C (cluster: a pod)."""
    from runtime.requests import TensorboardRequest

    port = _int("--port", port, int(c.config.tensorboard_port))
    request = _request(TensorboardRequest, port=port)  # a bad flag stops before anything
    _call(_runtime(c, runtime).tensorboard, request)


@task(
    help={
        "runtime": "k3d (default), kind or minikube: the cluster to render for",
        "out": "directory to write the YAML files into (default: <workdir>/manifests)",
        "model-type": f"models to render TFJobs for (repeatable; default all: {MODEL_HELP})",
        "serving-mode": "knative (default) or standard",
        "predictor": "kserve (default) or tfserving",
        "source-dir": "render the loader pod and the offline ingest (as `up --source-dir`)",
    },
    iterable=["model_type"],
)
def render(
    c,
    runtime=None,
    out=None,
    model_type=None,
    serving_mode=None,
    predictor="kserve",
    source_dir=False,
):
    """Write every manifest up/train-all/deploy/workflow apply, as YAML, in order (no cluster)."""
    name = runtime or str(c.config.runtime)
    name = "k3d" if name in ("auto", "local") else name
    if name not in PROVIDERS:
        raise Exit(f"error: --runtime must be one of {', '.join(PROVIDERS)}", code=2)
    wd = _workdir(c)
    rt = _cluster_runtime(c, name, wd)
    target = Path(out) if out else wd.root / "manifests"
    try:
        written = rt.render(
            target,
            models=list(model_type) or list(contract.MODEL_TYPES),
            serving_mode=serving_mode or "knative",
            predictor=predictor,
            source_dir=bool(source_dir),
        )
    except DistmlError as e:
        raise Exit(f"error: {e}", code=2) from e
    for path in written:
        print(path)
    print(
        f"{len(written)} files in {target} ({name}); apply order = file order; "
        "workflow/ holds what `invoke workflow` applies instead of train-all + deploy"
    )


def _image_call(fn, *args, **kwargs):
    from runtime.image import ImageError

    try:
        return fn(*args, **kwargs)
    except ImageError as e:
        raise Exit(f"error: {e}", code=1) from e


@task(
    help={
        "base-image": "base image with Python 3.11 (default python:3.11-slim-bookworm)",
        "base": "'local': make the base from Debian packages (debootstrap + docker import; "
        "root, no registry needed), reused when present",
        "docker": "Docker client to use (default: the first that can do BuildKit builds)",
    }
)
def build(c, base_image=None, base=None, docker=None):
    """Build the project image (content-hash tag), print tag and size."""
    from runtime.image import build as build_image

    tag = _image_call(
        build_image,
        c,
        ROOT,
        _workdir(c).root / "build",
        base_image=base_image,
        base=base,
        docker=docker or str(c.config.docker),
        out=_out,
    )
    print(tag)


@task(help={"base-image": "image to resolve in (default: the local base)"})
def lock_image(c, base_image=None):
    """Re-pin requirements-image.txt from requirements-image.in (in the image's Python)."""
    from runtime.image import lock as lock_requirements

    _image_call(
        lock_requirements,
        c,
        ROOT,
        _workdir(c).root / "build",
        base_image=base_image,
        docker=str(c.config.docker),
        out=_out,
    )


ns = Collection(
    up,
    train_all,
    train,
    deploy,
    rollback,
    loadtest,
    status,
    down,
    workflow,
    tensorboard,
    render,
    build,
    lock_image,
)
ns.configure(
    {
        "runtime": "auto",
        "workdir": ".distml",
        "service": contract.DEFAULT_SERVICE,
        "source_dir": "",
        "workers": contract.DEFAULT_WORKERS,
        "profile": contract.DEFAULT_PROFILE,
        "max_restarts": contract.DEFAULT_MAX_RESTARTS,
        "http_port": DEFAULT_HTTP_PORT,
        "tensorboard_port": contract.TENSORBOARD_PORT,
        "docker": "",
        # Cluster runtimes: INVOKE_CLUSTER_NAME, INVOKE_CLUSTER_NAMESPACE, ...
        "cluster": {"name": "dist-ml", "namespace": "kubeflow", "ingress_port": 8080},
    }
)
