"""The pod contract, written once: what each step is called with, and where it writes.

The only module under ``ml/`` the orchestration side (``runtime/``, ``k8s/``, ``tasks/``,
``loadtest/``) may import; it is light (standard library only: no TensorFlow, numpy or
kserve; a test proves it). The local runtime, the Kubernetes manifests and the ``ml/*``
argument parsers all take their names, choices, defaults and command lines from here.

Volume layout (``V`` = the volume root, the PVC mount in a pod)::

    V/raw/fashion-mnist/                 raw files `up --source-dir` copies in (a cluster)
    V/datasets/                          the prepared tfds dataset      (ml.data.ingest)
    V/candidates/<model>/                SavedModel, metrics.json, params.yaml (ml.training.train)
    V/checkpoints/<model>/               resumable training state       (ml.training.train)
    V/tensorboard/<model>/               TensorBoard event files        (ml.training.train)
                                         (`invoke tensorboard` shows V/tensorboard/)
    V/serving/<service>/<version>/       published SavedModels          (ml.selection.select)
    V/serving/<service>/<version>/publish.json   what was published, why, and what made it
    V/serving/<service>/canary/<version>/  a canary release (ml select --canary): inside
                                         the serving folder, the one a cluster's predictor
                                         mounts, so its server can load it beside the stable
    V/serving/<service>/canary/weight.json the canary's share of requests (the orchestration)
    V/rejected/<service>/<version>/      ended canaries not promoted    (canary_publish)
    V/reports/selection.json             the selection report           (ml.selection.select)
    V/reports/serving-<service>.json     the serving version's publish.json (ml.selection.select)
    V/serving/.<service>.publish.lock    held by ml.selection.select while it selects and publishes
    V/serving/.<service>.deploy.lock     held by a local `invoke deploy`/`rollback`, start to end
"""

from __future__ import annotations

import errno
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from types import MappingProxyType

MODEL_TYPES: tuple[str, ...] = ("cnn", "cnn_dropout", "cnn_batchnorm")
PROFILES: tuple[str, ...] = ("quick", "full")
DEFAULT_PROFILE = "quick"
DEFAULT_SERVICE = "tf-mnist"
DEFAULT_WORKERS = 2  # workers per job: each gets a TF_CONFIG naming all of them
DEFAULT_MAX_RESTARTS = 2  # a job's workers restart together up to this many times
LOG_EVERY = 5  # training progress line every N steps (what the tasks show live)

# The four Fashion-MNIST IDX files as published: name -> (size in bytes, SHA-256), the
# same values as tfds's ``url_checksums/fashion_mnist.txt``; this order is the download
# order. ml.data.raw checks every file against them; the Argo Workflow's ingestion cache key
# is derived from the checksums (k8s.manifests.argo_workflow.memo_key).
RAW_FILE_SPECS: Mapping[str, tuple[int, str]] = MappingProxyType(
    {
        "train-images-idx3-ubyte.gz": (
            26_421_880,
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        ),
        "train-labels-idx1-ubyte.gz": (
            29_515,
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        ),
        "t10k-images-idx3-ubyte.gz": (
            4_422_102,
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        ),
        "t10k-labels-idx1-ubyte.gz": (
            5_148,
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        ),
    }
)
RAW_FILES: tuple[str, ...] = tuple(RAW_FILE_SPECS)
RAW_SHA256: tuple[str, ...] = tuple(sha256 for _, sha256 in RAW_FILE_SPECS.values())
DATA_DIR_ENV = "DISTML_DATA_DIR"
# TensorBoard over V/tensorboard/ (`invoke tensorboard`): its own default port, and the
# names of the event files tf.summary writes (what there is to show).
TENSORBOARD_PORT = 6006
EVENT_FILE_GLOB = "events.out.tfevents.*"
#: The model server's readiness (the Open Inference Protocol's: every model loaded), what
#: the predictor's readiness probe asks; the server never counts it as a request.
READY_PATH = "/v2/health/ready"

METRICS_FILE = "metrics.json"
PARAMS_FILE = "params.yaml"
PUBLISH_FILE = "publish.json"
SELECTION_REPORT = "selection.json"

# Exit codes a step's caller acts on (status travels as an exit code or a JSON line).
PREEMPTED_EXIT = 42  # ml.training.train: stopped by SIGTERM after saving its step; restart resumes
USAGE_EXIT = 2  # ml.training.train: a usage, configuration or data error; a restart cannot fix it
# The errnos of a full disk (or quota): every step and task reports them in one line.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# ml.training.train's machine-readable progress: this prefix, then one JSON object per line.
PROGRESS_PREFIX = "DISTML_PROGRESS "

AnyPath = str | Path | PurePosixPath

# A service name becomes a directory under V/serving/, a URL path segment and, on a
# cluster, an InferenceService and Service name: a DNS-1035 label satisfies all three.
SERVICE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def check_service(name: str) -> str:
    """``name`` if it is a valid service name, else ValueError saying what one looks like."""
    if not SERVICE_NAME.fullmatch(name or ""):
        raise ValueError(
            f"service name {name!r} is not valid: use at most 63 lowercase letters, digits "
            "and '-', starting with a letter and ending with a letter or digit (a DNS "
            f"label, e.g. {DEFAULT_SERVICE})"
        )
    return name


# --------------------------------------------------------------------------- volume layout


RAW_DATA_SUBDIR = "raw/fashion-mnist"


def raw_data_dir(volume: AnyPath) -> str:
    return _p(volume, RAW_DATA_SUBDIR)


def datasets_dir(volume: AnyPath) -> str:
    return _p(volume, "datasets")


def candidates_dir(volume: AnyPath) -> str:
    return _p(volume, "candidates")


def candidate_dir(volume: AnyPath, model: str) -> str:
    return _p(volume, "candidates", model)


def metrics_path(volume: AnyPath, model: str) -> str:
    return _p(volume, "candidates", model, METRICS_FILE)


def checkpoints_dir(volume: AnyPath, model: str) -> str:
    return _p(volume, "checkpoints", model)


def tensorboard_root(volume: AnyPath) -> str:
    """Every model's TensorBoard runs: what `invoke tensorboard` shows."""
    return _p(volume, "tensorboard")


def tensorboard_dir(volume: AnyPath, model: str) -> str:
    return _p(volume, "tensorboard", model)


def has_event_files(volume: AnyPath) -> bool:
    """Whether any training run left TensorBoard event files under ``V/tensorboard``."""
    return any(Path(tensorboard_root(volume)).rglob(EVENT_FILE_GLOB))


def serving_dir(volume: AnyPath, service: str) -> str:
    return _p(volume, "serving", service)


CANARY_SUBDIR = "canary"


def canary_dir(volume: AnyPath, service: str) -> str:
    """A canary release's version (``<N>/``, serving's layout), served beside the stable.
    Inside the serving folder: a cluster's predictor mounts only that folder (its
    ``storageUri``), and a name of letters is never taken for a version there."""
    return _p(volume, "serving", service, CANARY_SUBDIR)


CANARY_WEIGHT_FILE = "weight.json"


def canary_weight_path(volume: AnyPath, service: str) -> str:
    """The percent of requests the canary answers (``{"weight": W}``; the orchestration)."""
    return _p(volume, "serving", service, CANARY_SUBDIR, CANARY_WEIGHT_FILE)


def rejected_dir(volume: AnyPath, service: str) -> str:
    """Canary versions that were rejected, each with the analysis in its publish.json."""
    return _p(volume, "rejected", service)


def selection_report(volume: AnyPath) -> str:
    return _p(volume, "reports", SELECTION_REPORT)


def serving_record(volume: AnyPath, service: str) -> str:
    """A copy of the serving version's ``publish.json`` (written on publish and rollback),
    at a fixed path so ``invoke status`` can read it without listing the versions."""
    return _p(volume, "reports", f"serving-{service}.json")


PUBLISH_LOCK = ".publish.lock"
DEPLOY_LOCK = ".deploy.lock"


def lock_path(volume: AnyPath, service: str, name: str) -> str:
    """A service's lock file (``PUBLISH_LOCK`` or ``DEPLOY_LOCK``), hidden beside its
    directory: the directory itself stays pure TF Serving layout."""
    return _p(volume, "serving", f".{service}{name}")


def _p(volume: AnyPath, *parts: str) -> str:
    """A path under the volume (a pod's mount path or a local directory)."""
    return str(PurePosixPath(str(volume)).joinpath(*parts))


# --------------------------------------------------------------------------- the commands


#: Every step the image runs, as ``python -m ml <step>`` (``ml/__main__.py``), and the
#: module whose ``main(argv)`` it is. The command names the step, not the module, so
#: moving a module changes no pod's command.
STEPS: Mapping[str, str] = MappingProxyType(
    {
        "ingest": "ml.data.ingest",
        "train": "ml.training.train",
        "select": "ml.selection.select",
        "serve": "ml.server.serve",
        "evaluate": "ml.selection.evaluate",
        "sample": "ml.data.sample",
        "sample_accuracy": "ml.selection.sample_accuracy",
        "canary_publish": "ml.selection.canary_publish",
        "canary_weight": "ml.selection.canary_weight",
    }
)


def step_argv(python: str, step: str) -> list[str]:
    """How every process and pod starts ``step``: ``python -m ml <step>``."""
    if step not in STEPS:
        raise ValueError(f"no step {step!r}: the steps are {', '.join(STEPS)}")
    return [python, "-m", "ml", step]


def split_step(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """A step's command as a container takes it: (``python -m ml <step>``, its flags)."""
    head, flags = list(argv[:4]), list(argv[4:])
    if head[1:3] != ["-m", "ml"] or len(head) < 4 or head[3] not in STEPS:
        raise ValueError(f"not a step's command: {list(argv)!r}")
    return head, flags


def step_prog(step: str) -> str:
    """The step's command as its ``--help`` shows it."""
    return " ".join(step_argv("python", step))


def step_mark(step: str) -> str:
    """What a running ``step``'s command line holds, whatever the interpreter (``-m ml
    serve ``, with the space that ends the step's name: ``sample`` is not
    ``sample_accuracy``). Every step is started with flags after its name."""
    return " ".join(step_argv("", step)[1:]) + " "


def ingest(volume: AnyPath, source_dir: str | None = None, *, python: str = "python") -> list[str]:
    """``ml.data.ingest``: prepare the dataset in ``V/datasets`` (idempotent)."""
    argv = [*step_argv(python, "ingest"), "--volume", str(volume)]
    return argv + (["--source-dir", str(source_dir)] if source_dir else [])


def train(
    volume: AnyPath,
    model: str,
    *,
    profile: str = DEFAULT_PROFILE,
    epochs: int | None = None,
    steps_per_epoch: int | None = None,
    seed: int | None = None,
    batch_size_per_replica: int | None = None,
    steps_per_execution: int | None = None,
    validation: bool = True,
    log_every: int = LOG_EVERY,
    bind_loopback: bool = False,
    python: str = "python",
) -> list[str]:
    """``ml.training.train``: one worker of a multi-worker job (its peers come from TF_CONFIG).
    ``bind_loopback``: the worker listens on loopback only, for a job whose workers all run
    on this machine (the local runtime); pods leave it off, their peers reach them by pod IP."""
    argv = [*step_argv(python, "train"), "--volume", str(volume), "--model-type", model]
    argv += ["--profile", profile, "--log-every", str(log_every)]
    for flag, value in (
        ("--epochs", epochs),
        ("--steps-per-epoch", steps_per_epoch),
        ("--seed", seed),
        ("--batch-size-per-replica", batch_size_per_replica),
        ("--steps-per-execution", steps_per_execution),
    ):
        if value is not None:
            argv += [flag, str(value)]
    argv += [] if validation else ["--no-validation"]
    return argv + (["--bind-loopback"] if bind_loopback else [])


def select(
    volume: AnyPath,
    service: str = DEFAULT_SERVICE,
    *,
    min_accuracy: float = 0.0,
    force: bool = False,
    rollback: bool = False,
    canary: bool = False,
    code_version: str | None = None,
    python: str = "python",
) -> list[str]:
    """``ml.selection.select``: publish the best candidate, or with ``rollback`` the previous one.
    ``code_version`` (the image tag; locally the tag this code builds to) goes into the
    published version's lineage; a rollback keeps the restored version's own. ``canary``:
    publish into :func:`canary_dir` instead, for :func:`canary_end` to promote or reject."""
    argv = [*step_argv(python, "select"), "--volume", str(volume), "--service", service]
    if rollback:
        return [*argv, "--rollback"]
    argv += ["--min-accuracy", f"{min_accuracy:g}", *(["--force"] if force else [])]
    argv += ["--canary"] if canary else []
    return argv + (["--code-version", code_version] if code_version else [])


def serve(
    model_dir: AnyPath,
    model_name: str,
    *,
    host: str,
    http_port: int,
    canary_dir: AnyPath | None = None,
    canary_elsewhere: bool = False,
    canary_host: str | None = None,
    python: str = "python",
) -> list[str]:
    """``ml.server.serve``: the model server for ``V/serving/<service>`` (V1 protocol); with
    ``canary_dir`` (:func:`canary_dir`), a canary release's version beside it, loaded in
    this process or (``canary_elsewhere``) answered by its own server, on loopback or
    ``canary_host``."""
    argv = [
        *step_argv(python, "serve"),
        "--model-dir",
        str(model_dir),
        "--model-name",
        model_name,
    ]
    argv += ["--canary-dir", str(canary_dir)] if canary_dir else []
    argv += ["--canary-elsewhere"] if canary_dir and canary_elsewhere else []
    argv += ["--canary-host", canary_host] if canary_dir and canary_host else []
    return [*argv, "--host", host, "--http-port", str(http_port)]


def tensorboard(
    volume: AnyPath, *, host: str, port: int = TENSORBOARD_PORT, python: str = "python"
) -> list[str]:
    """TensorBoard over ``V/tensorboard`` (a run per model and split) on ``host:port``; the
    local process and the cluster's pod run this same command."""
    argv = [python, "-m", "tensorboard.main", "--logdir", tensorboard_root(volume)]
    return [*argv, "--host", host, "--port", str(port)]


NO_EVENT_FILES_EXIT = 3  # has_event_files_check: nothing to show yet


def has_event_files_check(volume: AnyPath, *, python: str = "python") -> list[str]:
    """:func:`has_event_files` as a command, for a pod that mounts the volume: exits 0 when
    there are event files, ``NO_EVENT_FILES_EXIT`` when not."""
    check = f"contract.has_event_files({json.dumps(str(volume))})"
    code = f"import sys; from ml import contract; sys.exit(0 if {check} else {NO_EVENT_FILES_EXIT})"
    return [python, "-c", code]


def evaluate(volume: AnyPath, model_dirs: list[AnyPath], *, python: str = "python") -> list[str]:
    """``ml.selection.evaluate``: test accuracy of SavedModels (one JSON line each)."""
    return [*step_argv(python, "evaluate"), "--volume", str(volume), "--model-dir"] + [
        str(d) for d in model_dirs
    ]


def sample(
    out_dir: AnyPath,
    source_dir: str | None = None,
    *,
    synthetic_ok: bool = False,
    python: str = "python",
) -> list[str]:
    """``ml.data.sample``: write ``sample.png`` and ``sample-request.json`` (a V1 request body)
    into ``out_dir`` from test image 0; with ``synthetic_ok``, a drawn stand-in when no
    Fashion-MNIST files are on this machine. Prints one JSON line (``SampleWritten``)."""
    argv = [*step_argv(python, "sample"), "--out-dir", str(out_dir)]
    argv += ["--source-dir", str(source_dir)] if source_dir else []
    return argv + (["--synthetic-ok"] if synthetic_ok else [])


SAMPLE_REQUEST = "sample-request.json"
SAMPLE_PNG = "sample.png"
