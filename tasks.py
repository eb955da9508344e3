"""distml tasks: from an empty laptop to an autoscaled image classifier, and back.

    invoke up train-all deploy loadtest --concurrency 5
    invoke status
    invoke down [--purge]

Thin by design: parse flags, pick the runtime, call library code in ``runtime/``.
Every config key below can be set in ``invoke.yaml`` or as ``INVOKE_<KEY>`` (for example
``INVOKE_RUNTIME=local``, ``INVOKE_WORKDIR=/tmp/distml``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Collection, Exit, task

ROOT = Path(__file__).resolve().parent
MODEL_HELP = "cnn, cnn_dropout, cnn_batchnorm"
RUNTIME_HELP = "auto (default: k3d when Docker + k3d are there, else local), local, k3d, kind"


def _workdir(c):
    from runtime.workdir import Workdir

    path = Path(str(c.config.workdir)).expanduser()
    return Workdir.at(path if path.is_absolute() else ROOT / path)


def _runtime(c, requested, *, for_up=False):
    """Pick the runtime (one line says which and why) and return its implementation."""
    from runtime import RuntimeError_, select_runtime
    from runtime.local import LocalRuntime

    wd = _workdir(c)
    requested = requested or str(c.config.runtime)
    state_runtime = wd.load_state().get("runtime")
    try:
        if requested == "auto" and state_runtime and not for_up:
            name, why = state_runtime, "the runtime `invoke up` prepared"
        else:
            name, why = select_runtime(requested)
    except RuntimeError_ as e:
        raise Exit(f"error: {e}", code=2) from e
    print(f"runtime: {name} ({why})", flush=True)
    return LocalRuntime(wd, service=str(c.config.service), out=_out)


def _out(line):
    print(line, flush=True)


def _call(fn, *args, **kwargs):
    """Run a runtime method; a UserError becomes ``error: ...`` and a non-zero exit."""
    from runtime import RuntimeError_

    try:
        code = fn(*args, **kwargs)
    except RuntimeError_ as e:
        raise Exit(f"error: {e}", code=1) from e
    except KeyboardInterrupt:
        print("\ninterrupted: every process this task started has been stopped", file=sys.stderr)
        raise Exit(code=130) from None
    if code:
        raise Exit(code=code)


def _int(flag, value, default=None):
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise Exit(f"error: {flag} must be a whole number, got {value!r}", code=2) from None


def _float(flag, value, default=None):
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise Exit(f"error: {flag} must be a number, got {value!r}", code=2) from None


@task(
    help={
        "runtime": RUNTIME_HELP,
        "source-dir": "directory holding the four Fashion-MNIST .gz files (else: "
        "DISTML_DATA_DIR, Debian's dataset-fashion-mnist, ~/.keras/datasets, download)",
        "serving-mode": "knative or standard (cluster runtimes only)",
    }
)
def up(c, runtime=None, source_dir=None, serving_mode=None):
    """Set up the runtime: work dir, volume, dataset (idempotent)."""
    rt = _runtime(c, runtime, for_up=True)
    if serving_mode:
        print("note: --serving-mode applies to cluster runtimes; the local runtime ignores it")
    _call(rt.up, source_dir=source_dir or c.config.source_dir or None)


def _train(c, runtime, models, workers, parallel, profile, epochs, steps_per_epoch, max_restarts):
    rt = _runtime(c, runtime)
    _call(
        rt.train,
        models,
        workers=_int("--workers", workers, int(c.config.workers)),
        parallel=_int("--parallel", parallel),
        profile=profile or str(c.config.profile),
        epochs=_int("--epochs", epochs),
        steps_per_epoch=_int("--steps-per-epoch", steps_per_epoch),
        max_restarts=_int("--max-restarts", max_restarts, int(c.config.max_restarts)),
    )


TRAIN_HELP = {
    "runtime": RUNTIME_HELP,
    "workers": "worker processes (TFJob Worker replicas) per job (default 2)",
    "parallel": "how many jobs run at once (default: all)",
    "profile": "quick (3 x 70 steps, default) or full",
    "epochs": "override the profile's epochs",
    "steps-per-epoch": "override the profile's steps per epoch",
    "max-restarts": "restart a job's workers together up to this many times (default 2)",
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
):
    """Train every model variant, one multi-worker job each, in parallel."""
    models = list(model_type) or MODEL_HELP.split(", ")
    _train(c, runtime, models, workers, parallel, profile, epochs, steps_per_epoch, max_restarts)


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
):
    """Train one model variant as a multi-worker job."""
    if not model_type:
        raise Exit(f"error: --model-type is required ({MODEL_HELP})", code=2)
    _train(
        c, runtime, [model_type], workers, parallel, profile, epochs, steps_per_epoch, max_restarts
    )


@task(
    help={
        "runtime": RUNTIME_HELP,
        "predictor": "kserve (default: the project's server) or tfserving (cluster only)",
        "min-accuracy": "refuse to publish a winner below this test accuracy (0-1)",
        "force": "publish the winner even if worse than what is serving",
        "target": "autoscaling target, concurrent requests per replica (cluster only)",
        "min-replicas": "minimum predictor replicas (cluster only)",
        "max-replicas": "maximum predictor replicas (cluster only)",
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
    http_port=None,
):
    """Select the most accurate model, publish it and serve it."""
    rt = _runtime(c, runtime)
    if predictor not in ("kserve", "tfserving"):
        raise Exit(f"error: --predictor must be kserve or tfserving, got {predictor!r}", code=2)
    if predictor != "kserve" or any(v is not None for v in (target, min_replicas, max_replicas)):
        print(
            "note: --predictor tfserving, --target and --min/--max-replicas apply to cluster "
            "runtimes; the local runtime serves with one ml.serve process"
        )
    _call(
        rt.deploy,
        min_accuracy=_float("--min-accuracy", min_accuracy, 0.0),
        force=force,
        http_port=_int("--http-port", http_port, int(c.config.http_port)),
    )


@task(help={"runtime": RUNTIME_HELP})
def rollback(c, runtime=None):
    """Republish the previously served model version."""
    _call(_runtime(c, runtime).rollback)


@task(
    help={
        "runtime": RUNTIME_HELP,
        "concurrency": "simultaneous Locust users, no wait time (default 5)",
        "duration": "how long, e.g. 30s, 2m (default 30s)",
        "spawn-rate": "users started per second (default: all at once)",
        "max-failure-ratio": "fail when more than this share of requests fail (default 0)",
        "expect-scale-out": "fail unless ready predictor replicas rose (cluster runtimes)",
    }
)
def loadtest(
    c,
    runtime=None,
    concurrency=5,
    duration="30s",
    spawn_rate=None,
    max_failure_ratio=None,
    expect_scale_out=False,
):
    """Load-test the served model with Locust; report and chart."""
    rt = _runtime(c, runtime)
    _call(
        rt.loadtest,
        concurrency=_int("--concurrency", concurrency, 5),
        duration=str(duration),
        spawn_rate=_float("--spawn-rate", spawn_rate),
        max_failure_ratio=_float("--max-failure-ratio", max_failure_ratio, 0.0),
        expect_scale_out=expect_scale_out,
    )


@task(help={"runtime": RUNTIME_HELP})
def status(c, runtime=None):
    """Show dataset, candidates, serving version, server and last load test."""
    _call(_runtime(c, runtime).status)


@task(
    help={
        "runtime": RUNTIME_HELP,
        "purge": "also delete the work dir (only a directory distml made)",
        "keep-cluster": "cluster runtimes: keep the cluster",
    }
)
def down(c, runtime=None, purge=False, keep_cluster=False):
    """Stop everything the runtime started; --purge also deletes the work dir."""
    _call(_runtime(c, runtime).down, purge=purge)


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


ns = Collection(up, train_all, train, deploy, rollback, loadtest, status, down, build, lock_image)
ns.configure(
    {
        "runtime": "auto",
        "workdir": ".distml",
        "service": "tf-mnist",
        "source_dir": "",
        "workers": 2,
        "profile": "quick",
        "max_restarts": 2,
        "http_port": 8080,
        "docker": "",
    }
)
