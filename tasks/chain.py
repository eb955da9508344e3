"""The mission's chain of tasks: up, train-all (and train), deploy, rollback, loadtest,
status, down. Thin by design: flags become a typed request, the runtime does the work."""

from __future__ import annotations

from invoke import Exit, task

from ml import contract
from runtime.cli import build_request as _request
from runtime.cli import call as _call
from runtime.cli import checked as _checked
from runtime.cli import float_flag as _float
from runtime.cli import int_flag as _int
from runtime.cli import ints_flag as _ints
from tasks.chooser import MODEL_HELP, RUNTIME_HELP
from tasks.chooser import runtime as _runtime


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
        "with-monitoring": "cluster: also install distml's Prometheus in its namespace (read "
        "by `status`; scrapes the model server) and, in standard mode, KEDA (pinned; "
        "cluster-wide: an existing cluster needs --install-operators) for `deploy "
        "--scale-metric`; kept by later `up`s, removed by `down --keep-cluster`",
        "context": "existing runtime: the kubeconfig context (default: cluster.context; "
        "the first `up` needs one named, never kubectl's current one); recorded, with the "
        "cluster behind it, for the later tasks",
        "install-operators": "existing runtime: install the operators that are missing "
        "(pinned versions); without it `up` lists them and stops",
        "storage-class": "cluster: the volume's StorageClass (default: the provider's; an "
        "existing cluster: its default class)",
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
    with_monitoring=False,
    context=None,
    install_operators=False,
    storage_class=None,
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
        with_monitoring=with_monitoring,
        install_operators=install_operators,
        storage_class=storage_class,
    )
    rt = _runtime(c, runtime, for_up=True, context=context)
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
    "see docs/cluster.md)",
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


#: The canary's tuning flags, for `deploy --canary` and `workflow --canary`.
CANARY_HELP = {
    "canary-steps": "the canary's traffic shares in percent, in order (default 10,25,50)",
    "canary-interval": "seconds between the canary's measurements (default 30)",
    "canary-failure-limit": "failed measurements tolerated before a rollback (default 0)",
}
#: The shadow phase's flags, `deploy --canary` on the local runtime only.
SHADOW_HELP = {
    "shadow": "a shadow phase before the first step: the canary answers mirrored copies of "
    "the first step's share, no user (default on; --no-shadow skips it; local runtime)",
    "shadow-interval": "seconds between the shadow phase's measurements (default 30)",
}


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
        "predictor": "kserve (default: the project's server, python -m ml serve) or tfserving "
        "(KServe's TF Serving runtime; cluster only)",
        "min-accuracy": "refuse to publish a winner below this validation accuracy (0-1)",
        "force": "publish the winner even if worse than what is serving",
        "target": "cluster: autoscaling target per replica: concurrent requests (default 1), "
        "or with --scale-metric rps requests per second (default 50)",
        "min-replicas": "cluster: minimum predictor replicas (default 1)",
        "max-replicas": "cluster: maximum predictor replicas (default 8)",
        "container-concurrency": "cluster: hard limit of requests per replica (default: none)",
        "scale-metric": "cluster, standard mode: what drives scaling: cpu (default; an HPA), "
        "concurrency (requests in flight) or rps (requests per second), both KEDA on "
        "Prometheus (`up --with-monitoring`; without it, cpu, said in one line); knative "
        "mode scales on concurrency",
        "request-logger": "cluster: log every request/response to a message-dumper pod",
        "http-port": "local runtime: the server's port on 127.0.0.1 (default 8080)",
        "canary": "release the selected version as a canary beside the serving one: it takes "
        "a share of the traffic, step by step, judged every interval on its errors, p99 and "
        "accuracy against the serving version; promoted after the last step or rolled back "
        "(Ctrl-C rolls back; docs/serving.md, Canary releases)",
        **CANARY_HELP,
        **SHADOW_HELP,
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
    scale_metric=None,
    request_logger=False,
    http_port=None,
    canary=False,
    canary_steps=None,
    canary_interval=None,
    canary_failure_limit=None,
    shadow=True,
    shadow_interval=None,
):
    """Select the most accurate model, publish it and serve it (or release it as a canary)."""
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
        scale_metric=scale_metric or None,
        request_logger=request_logger,
        http_port=_int("--http-port", http_port, int(c.config.http_port)),
        **canary_flags(canary, canary_steps, canary_interval, canary_failure_limit),
        **shadow_flags(shadow, shadow_interval),
    )
    rt = _runtime(c, runtime)
    _call(rt.deploy, _checked(rt, request, refuse=("--canary",)))


def canary_flags(canary, steps, interval, failure_limit) -> dict:
    """The canary flags as request fields (DeployRequest's defaults where not given): the
    same for ``deploy`` and ``workflow``."""
    from runtime.requests import DeployRequest as D

    return {
        "canary": canary,
        "canary_steps": _ints("--canary-steps", steps, D.canary_steps),
        "canary_interval": _float("--canary-interval", interval, D.canary_interval),
        "canary_failure_limit": _int(
            "--canary-failure-limit", failure_limit, D.canary_failure_limit
        ),
    }


def shadow_flags(shadow, interval) -> dict:
    """The shadow phase's flags as request fields (DeployRequest's defaults where not given)."""
    from runtime.requests import DeployRequest as D

    return {
        "canary_shadow": bool(shadow),
        "canary_shadow_interval": _float("--shadow-interval", interval, D.canary_shadow_interval),
    }


@task(help={"runtime": RUNTIME_HELP})
def rollback(c, runtime=None):
    """Republish the previously served model version."""
    rt = _runtime(c, runtime)
    _call(rt.rollback)


@task(
    help={
        "runtime": RUNTIME_HELP,
        "promote": "promote the canary now: all traffic on the new version",
        "abort": "roll the canary back now: the serving version takes all traffic again",
    }
)
def canary(c, runtime=None, promote=False, abort=False):
    """End a canary release by hand: --promote or --abort (see `deploy --canary`)."""
    if promote == abort:
        raise Exit("error: say what to do: --promote or --abort (one of them)", code=2)
    rt = _runtime(c, runtime)
    _call(rt.canary, "promote" if promote else "abort")


@task(
    help={
        "runtime": RUNTIME_HELP,
        "concurrency": "simultaneous Locust users, no wait time (default 5)",
        "duration": "how long, e.g. 30s, 2m (default 30s)",
        "spawn-rate": "users started per second (default: all at once)",
        "max-failure-ratio": "fail when more than this share of requests fail (default 0)",
        "expect-scale-out": "cluster runtimes: fail unless ready predictor replicas rose "
        "(default on; --no-expect-scale-out turns it off; the local runtime never scales)",
        "url": "cluster runtimes: the service's base URL as this machine reaches it (e.g. "
        "the cluster's ingress); default: the ingress, or a port-forward",
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
    url=None,
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
        url=url or None,
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
        "forget": "forget the cluster this work dir was set up on (a context that is gone "
        "or points elsewhere now), touching no cluster: its objects there are left as they are",
    }
)
def down(c, runtime=None, purge=False, keep_cluster=False, forget=False):
    """Remove what `up` made (the cluster); --purge also deletes built images and the work dir."""
    from runtime.requests import DownRequest

    if forget:
        from runtime.cluster.down import forget as _forget
        from tasks.chooser import out, workdir

        if purge or keep_cluster or runtime:
            raise Exit("error: --forget takes no other flag: it touches no cluster", code=2)
        _call(lambda: _forget(workdir(c), out, renew=True))
        return

    request = _request(DownRequest, purge=purge, keep_cluster=keep_cluster)
    rt = _runtime(c, runtime, for_down=True)
    _call(rt.down, _checked(rt, request))


@task
def moved(c):
    """Say this work dir is the original, moved here: it takes over its recorded place."""
    from runtime.workdir.origin import moved as _moved
    from tasks.chooser import out, workdir

    _call(_moved, workdir(c), out)
