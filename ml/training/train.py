"""Train one model variant with MultiWorkerMirroredStrategy and export the chief's model.

    python -m ml train --volume V --model-type M [--profile quick|full] [--epochs N] ...

Every worker of a job runs this same command; the training operator (or the local
runtime) gives each one its TF_CONFIG. No TF_CONFIG means a one-worker job.

Writes ``V/checkpoints/M/`` (weights-only checkpoints, BackupAndRestore state),
``V/tensorboard/M/`` and, from the chief only, ``V/candidates/M/`` (SavedModel,
``metrics.json``, ``params.yaml``), replaced atomically. While it trains, it serves its
Prometheus metrics where ``DISTML_METRICS_ADDRESS`` says (``ml/training/train_metrics.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ml import contract
from ml.contract import DEFAULT_PROFILE, MODEL_TYPES, PREEMPTED_EXIT, PROFILES, step_prog
from ml.training.config import LR_SCHEDULES, ConfigError, TrainConfig, load_config_file, resolve
from ml.training.loopback import LoopbackError, check_listening, preload
from ml.training.progress import Run, emit, progress_callback
from ml.training.tf_config import ClusterSpec, parse_tf_config
from ml.training.train_metrics import ADDRESS_ENV, TrainMetrics, parse_address

# Progress line every N steps when no --log-every is given (the contract's commands pass
# contract.LOG_EVERY).
DEFAULT_LOG_EVERY = 10


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=step_prog("train"),
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--volume", required=True, help="shared volume root (the PVC mount)")
    p.add_argument("--model-type", required=True, help=f"model to train: {', '.join(MODEL_TYPES)}")
    p.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="training budget; quick = 3 x 70 steps, full = 30 full passes "
        f"(default: the --config file's, else {DEFAULT_PROFILE})",
    )
    p.add_argument("--config", help="YAML file of TrainConfig fields (applied after the profile)")
    p.add_argument("--epochs", type=int, help="override the profile's epoch count")
    p.add_argument("--steps-per-epoch", type=int, help="override the profile's steps per epoch")
    p.add_argument(
        "--batch-size-per-replica",
        type=int,
        help="override the per-replica batch (global = this x workers)",
    )
    p.add_argument("--learning-rate", type=float, help="override the base learning rate")
    p.add_argument(
        "--lr-schedule",
        choices=LR_SCHEDULES,
        help="step: base for epochs 0-2, /10 for 3-6, /100 after; constant; "
        "cosine: per-epoch cosine decay to 0",
    )
    p.add_argument("--bn-momentum", type=float, help="BatchNorm momentum (cnn_batchnorm)")
    p.add_argument("--shuffle-buffer", type=int, help="shuffle buffer size in examples")
    p.add_argument("--seed", type=int, help="random seed (same on every worker)")
    p.add_argument(
        "--steps-per-execution",
        type=int,
        help="training steps per call of the compiled step function (progress lines and "
        "the preemption check come between calls)",
    )
    p.add_argument(
        "--no-validation",
        action="store_true",
        help="skip the per-epoch evaluation on the validation split (the val_* figures of "
        "metrics.json and the training curves)",
    )
    _worker_flags(p)
    return p


def _worker_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of how this worker runs, not of what it trains (none goes in params.yaml)."""
    p = parser.add_argument_group("this worker", "what it reads, prints and listens on")
    p.add_argument(
        "--source-dir",
        help="raw Fashion-MNIST .gz files, used only when "
        "V/datasets/ has no prepared dataset (see python -m ml ingest)",
    )
    p.add_argument(
        "--log-every",
        type=int,
        default=DEFAULT_LOG_EVERY,
        help="print a progress line every N steps (at the end of the call that reaches "
        "them, with --steps-per-execution)",
    )
    p.add_argument(
        "--bind-loopback",
        action="store_true",
        help="listen on loopback only (TensorFlow's gRPC server binds every interface "
        "otherwise), for workers that all run on this machine: every TF_CONFIG address must "
        "be 127.x.x.x or localhost. Linux; builds a small bind() shim with the C compiler "
        "(ml/training/loopback.py). The local runtime sets it; pods do not",
    )


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    file_values = load_config_file(args.config) if args.config else {}
    overrides = {
        "model_type": args.model_type,
        "epochs": args.epochs,
        "steps_per_epoch": args.steps_per_epoch,
        "batch_size_per_replica": args.batch_size_per_replica,
        "learning_rate": args.learning_rate,
        "lr_schedule": args.lr_schedule,
        "bn_momentum": args.bn_momentum,
        "shuffle_buffer": args.shuffle_buffer,
        "seed": args.seed,
        "steps_per_execution": args.steps_per_execution,
        "validation": False if args.no_validation else None,
    }
    return resolve(args.profile, file_values, overrides)


def steady_examples_per_second(history: list[dict[str, Any]], global_batch: int) -> float | None:
    """Examples/s over the epochs after the first one this process ran (which traces the
    step function), counting only the steps themselves (``ml.training.progress.StepClock``);
    None if fewer than two epochs ran."""
    later = [row for row in history[1:] if row.get("step_seconds")]
    seconds = sum(row["step_seconds"] for row in later)
    if not later or seconds <= 0:
        return None
    return round(sum(row["steps_run"] for row in later) * global_batch / seconds, 1)


def _swap_in(tmp: Path, target: Path) -> None:
    """Replace ``target`` by ``tmp`` with renames, so readers never see half a directory."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, old)
    os.rename(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def train(
    cfg: TrainConfig,
    volume: Path,
    spec: ClusterSpec,
    *,
    source_dir: str | None = None,
    log_every: int = DEFAULT_LOG_EVERY,
    bind_loopback: bool = False,
) -> dict[str, Any]:
    """Run one worker's part of the job; return the metrics (chief writes the candidate).
    With ``bind_loopback`` (the shim preloaded by :func:`main`), check once TensorFlow's
    server runs that every socket it listens on is on loopback."""
    import tensorflow as tf

    # Collective ops must be configured before any other TF op runs in this process.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if bind_loopback:
        check_listening()
    import tf_keras as keras

    from ml.training.preemption import backup_callback

    workers = strategy.num_replicas_in_sync
    steps = cfg.resolved_steps_per_epoch(workers)
    _announce(cfg, spec, workers, steps, tf.__version__)

    # From here on SIGTERM is a request to save and stop (ml.training.preemption), not an end.
    ckpt_dir = Path(contract.checkpoints_dir(volume, cfg.model_type))
    backup = backup_callback(keras, strategy, str(ckpt_dir / "backup"), steps)
    keras.utils.set_random_seed(cfg.seed)
    train_ds, val_ds = _datasets(cfg, volume, cfg.global_batch_size(workers), source_dir)
    with strategy.scope():
        model = _build(cfg, steps)

    state: dict[str, Any] = {}
    tm = _served_metrics(cfg, spec)
    per_worker = cfg.global_batch_size(workers) // workers
    callbacks = [
        progress_callback(keras, Run(cfg, steps, log_every, state, tm, per_worker)),  # fills logs
        *_callbacks(keras, cfg, volume),
        backup,  # last: a save on SIGTERM comes after the step's progress line
    ]
    try:
        tm.started()
        started = time.monotonic()
        model.fit(train_ds, epochs=cfg.epochs, steps_per_epoch=steps, validation_data=val_ds,
                  callbacks=callbacks, verbose=0)  # fmt: skip
        seconds = time.monotonic() - started
        tm.finished()
        metrics = _metrics(cfg, state, workers, steps, seconds)
        _export_candidate(model, cfg, metrics, volume, spec)
        emit("done", seconds=round(seconds, 3), chief=spec.is_chief)
        tm.linger()
    finally:
        tm.close()
    return metrics


def _served_metrics(cfg: TrainConfig, spec: ClusterSpec) -> TrainMetrics:
    """This worker's Prometheus metrics, served where the environment says (and said)."""
    tm = TrainMetrics(cfg.model_type, spec.task_index)
    url = tm.serve()
    if url:
        print(f"{spec.name}: metrics at {url}", flush=True)
    return tm


def _announce(
    cfg: TrainConfig, spec: ClusterSpec, workers: int, steps: int, tf_version: str
) -> None:
    """Record the run's resolved shape in ``cfg.extra`` (so in params.yaml) and print it."""
    global_batch = cfg.global_batch_size(workers)
    cfg.extra.update(
        {
            "workers": workers,
            "global_batch_size": global_batch,
            "steps_per_epoch_resolved": steps,
            "tensorflow": tf_version,
        }
    )
    print(
        f"{spec.name}: {cfg.model_type}, {workers} worker(s), global batch {global_batch}, "
        f"{cfg.epochs} epoch(s) x {steps} steps ({cfg.steps_per_execution} per call), "
        f"profile {cfg.profile}",
        flush=True,
    )


def _datasets(
    cfg: TrainConfig, volume: Path, global_batch: int, source_dir: str | None
) -> tuple[Any, Any]:
    """The training split and, with ``cfg.validation``, the validation split (else None).
    The test split is not read here: ml.selection.select scores it once, after choosing."""
    from ml.data.dataset import load_split
    from ml.data.pipeline import make_dataset

    train_ds = make_dataset(
        load_split(volume, "train", source_dir=source_dir),
        global_batch_size=global_batch,
        training=True,
        shuffle_buffer=cfg.shuffle_buffer,
        seed=cfg.seed,
    )
    val_ds = None
    if cfg.validation:
        val_ds = make_dataset(
            load_split(volume, "validation", source_dir=source_dir),
            global_batch_size=global_batch,
            training=False,
        )
    return train_ds, val_ds


def _build(cfg: TrainConfig, steps_per_epoch: int) -> Any:
    from ml.model.architectures import build_model

    return build_model(
        cfg.model_type,
        learning_rate=cfg.learning_rates(steps_per_epoch),
        bn_momentum=cfg.bn_momentum,
        seed=cfg.seed,
        steps_per_execution=cfg.steps_per_execution,
    )


def _callbacks(keras: Any, cfg: TrainConfig, volume: Path) -> list[Any]:
    """Checkpoints and TensorBoard (after the progress callback, which fills the logs)."""
    ckpt_dir = Path(contract.checkpoints_dir(volume, cfg.model_type))
    tb_dir = contract.tensorboard_dir(volume, cfg.model_type)
    return [
        keras.callbacks.ModelCheckpoint(
            str(ckpt_dir / "weights" / "epoch-{epoch:03d}"), save_weights_only=True
        ),
        keras.callbacks.TensorBoard(log_dir=tb_dir, write_graph=False, profile_batch=0),
    ]


def _metrics(
    cfg: TrainConfig, state: dict[str, Any], workers: int, steps: int, seconds: float
) -> dict[str, Any]:
    """What ``metrics.json`` holds: the history the progress callback kept, and throughput."""
    first_epoch, first_step = state.get("first_epoch") or 0, state.get("first_step") or 0
    steps_run = (cfg.epochs - first_epoch) * steps - first_step
    metrics = {
        "model_type": cfg.model_type,
        "profile": cfg.profile,
        "workers": workers,
        "history": state.get("history", []),
        "resumed_from_epoch": first_epoch,
        "resumed_from_step": first_step,
        "train_seconds": round(seconds, 3),
        "examples_per_second": round(steps_run * cfg.global_batch_size(workers) / seconds, 1),
        "steady_examples_per_second": steady_examples_per_second(
            state.get("history", []), cfg.global_batch_size(workers)
        ),
    }
    if metrics["history"]:
        metrics["final"] = metrics["history"][-1]
    return metrics


def _export_candidate(
    model: Any, cfg: TrainConfig, metrics: dict[str, Any], volume: Path, spec: ClusterSpec
) -> None:
    """Export SavedModel, metrics and params; the chief's copy replaces ``V/candidates/M``."""
    from ml.model.export import export_model

    # Every worker saves (TF's rule for multi-worker saving); only the chief's copy is kept.
    # The export is a plain (non-distributed) copy of the trained weights.
    plain = _build(cfg, 1)  # the optimizer is not exported: any schedule will do
    plain.set_weights(model.get_weights())
    candidates = Path(contract.candidates_dir(volume))
    target = Path(contract.candidate_dir(volume, cfg.model_type))
    if spec.is_chief:
        candidates.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cfg.model_type}.tmp-", dir=candidates))
    else:
        tmp = Path(tempfile.mkdtemp(prefix=f"distml-{cfg.model_type}-{spec.name}-"))
    try:
        export_model(plain, tmp)
        (tmp / contract.METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
        (tmp / contract.PARAMS_FILE).write_text(cfg.to_yaml())
        if spec.is_chief:
            _swap_in(tmp, target)
            print(f"exported candidate to {target}", flush=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        spec = parse_tf_config(os.environ.get("TF_CONFIG"))
        if args.log_every < 1:
            raise ConfigError("--log-every must be a positive integer")
        if os.environ.get(ADDRESS_ENV):
            parse_address(os.environ[ADDRESS_ENV])  # refused here, before TensorFlow starts
        if args.bind_loopback:
            preload(spec)  # re-executes this command with the bind() shim, before TensorFlow
    except (ConfigError, LoopbackError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return contract.USAGE_EXIT
    from ml.data.dataset import DataError
    from ml.training.preemption import Preempted

    try:
        train(
            cfg,
            Path(args.volume),
            spec,
            source_dir=args.source_dir,
            log_every=args.log_every,
            bind_loopback=args.bind_loopback,
        )
    except (DataError, LoopbackError) as e:
        print(f"error: {e}", file=sys.stderr)
        return contract.USAGE_EXIT
    except Preempted as e:
        print(f"{spec.name}: {e}; exiting {PREEMPTED_EXIT} (restart to resume)", flush=True)
        emit("preempted", epoch=e.epoch, step=e.step, save_seconds=round(e.save_s, 3))
        sys.stderr.flush()
        # The state is on disk and every peer saved the same step. TensorFlow's teardown of
        # a multi-worker runtime (threads, the coordination service's shutdown barrier)
        # took over 5 s with 6 workers on 2 cores: more than the grace a stop gives.
        os._exit(PREEMPTED_EXIT)
    return 0
