"""The tasks around the chain: the whole pipeline as an Argo Workflow, TensorBoard, the
manifests as files, and the project image (build, re-pin its requirements)."""

from __future__ import annotations

from pathlib import Path

from invoke import Exit, task

from common.errors import DistmlError
from k8s.monitoring.operator_rbac import DEFAULT_ACCOUNT
from k8s.providers.settings import PROVIDERS
from ml import contract
from runtime.cli import build_request as _request
from runtime.cli import call as _call
from runtime.cli import checked as _checked
from runtime.cli import float_flag as _float
from runtime.cli import int_flag as _int
from tasks.chain import CANARY_HELP, TRAIN_HELP, canary_flags
from tasks.chooser import MODEL_HELP, ROOT, RUNTIME_HELP
from tasks.chooser import cluster_runtime as _cluster_runtime
from tasks.chooser import out as _out
from tasks.chooser import runtime as _runtime
from tasks.chooser import workdir as _workdir


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
        "canary": "end with a canary release of the selected version, judged and promoted or "
        "rolled back as `deploy --canary` does (needs --watch)",
        **CANARY_HELP,
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
    canary=False,
    canary_steps=None,
    canary_interval=None,
    canary_failure_limit=None,
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
        **canary_flags(bool(canary), canary_steps, canary_interval, canary_failure_limit),
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


OPERATOR_HELP = {
    "prometheus-sa": "NAMESPACE/NAME: the ServiceAccount of the Operator's Prometheus, which "
    f"the Roles are bound to (default {DEFAULT_ACCOUNT}, kube-prometheus's)",
    "release": "NAME of kube-prometheus-stack's Helm release: label the monitors and the "
    "rule release=NAME, which its default selectors require",
    "namespace-only": "write only what lives in distml's namespace, and no alert on other "
    "namespaces' series (a Prometheus with enforcedNamespaceLabel, e.g. OpenShift's "
    "user-workload monitoring)",
}


def _operator_options(wanted, prometheus_sa, release, namespace_only):
    """`render`'s Prometheus Operator flags, checked (exit 2: a flag without
    --prometheus-operator, or a value that cannot be used); None without them."""
    from k8s.monitoring.prometheus_operator import OperatorOptions

    given = {"prometheus_sa": prometheus_sa, "release": release}
    given = {k: str(v) for k, v in given.items() if v is not None}
    if namespace_only:
        given["namespace_only"] = True
    if not wanted:
        if given:
            flags = ["--" + k.replace("_", "-") for k in given]
            verb = "needs" if len(flags) == 1 else "need"
            raise Exit(f"error: {', '.join(flags)} {verb} --prometheus-operator", code=2)
        return None
    return _request(OperatorOptions, **given)


@task(
    help={
        "runtime": "k3d (default), kind or minikube: the cluster to render for",
        "out": "directory to write the YAML files into (default: <workdir>/manifests)",
        "model-type": f"models to render TFJobs for (repeatable; default all: {MODEL_HELP})",
        "serving-mode": "knative (default) or standard",
        "predictor": "kserve (default) or tfserving",
        "source-dir": "render the loader pod and the offline ingest (as `up --source-dir`)",
        "with-monitoring": "render distml's own Prometheus too (as `up --with-monitoring`)",
        "prometheus-operator": "also write, in prometheus-operator/, for a Prometheus the "
        "Prometheus Operator runs: PodMonitors, ServiceMonitors for the training operator and "
        "KEDA, the Roles its discovery needs, a PrometheusRule (you apply them)",
        **OPERATOR_HELP,
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
    with_monitoring=False,
    prometheus_operator=False,
    prometheus_sa=None,
    release=None,
    namespace_only=False,
):
    """Write every manifest up/train-all/deploy/workflow apply, as YAML, in order (no cluster)."""
    name = runtime or str(c.config.runtime)
    name = "k3d" if name in ("auto", "local") else name
    if name not in PROVIDERS:
        raise Exit(f"error: --runtime must be one of {', '.join(PROVIDERS)}", code=2)
    options = _operator_options(prometheus_operator, prometheus_sa, release, namespace_only)
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
            with_monitoring=bool(with_monitoring),
            prometheus_operator=bool(prometheus_operator),
            operator_options=options,
        )
    except DistmlError as e:
        raise Exit(f"error: {e}", code=2) from e
    for path in written:
        print(path)
    note = "workflow/ holds what `invoke workflow` applies instead of train-all + deploy"
    if prometheus_operator:
        note += "; prometheus-operator/ what you apply where the Prometheus Operator runs"
    print(f"{len(written)} files in {target} ({name}); apply order = file order; {note}")


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
        "push": "REGISTRY[/REPO]: also push the image there (e.g. localhost:5001); "
        "`--runtime existing` pods then run the pushed name",
    }
)
def build(c, base_image=None, base=None, docker=None, push=None):
    """Build the project image (content-hash tag), print tag and size; --push pushes it."""
    from runtime.image import build as build_image

    registry = _push_registry(push)
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
    if registry:
        from runtime.registry import push as push_image

        docker = docker or str(c.config.docker) or "docker"
        tag = _image_call(push_image, c, docker, tag, registry, _out)
        wd = _workdir(c)
        if not c.config.run.dry:
            wd.create()
            wd.update_state(registry=registry)
        _out(f"recorded: `--runtime existing` pods in {wd.root} run {tag}")
    print(tag)


def _push_registry(value):
    """``build --push``'s REGISTRY[/REPO], checked before the build (exit 2 when bad)."""
    if not value:  # invoke itself refuses a bare --push (it takes a value)
        return ""
    from runtime.registry import check_registry

    try:
        return check_registry(str(value))
    except ValueError as e:
        raise Exit(f"error: --push: {e}", code=2) from e


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
