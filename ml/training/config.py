"""Typed training configuration: profiles, one override order, YAML round-trip.

Override order (later wins): dataclass defaults -> profile -> ``--config`` file -> flags.
The resolved config is written as ``params.yaml`` next to every exported candidate.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ml.contract import DEFAULT_PROFILE, MODEL_TYPES, PROFILES
from ml.data.dataset import SPLIT_EXAMPLES

LR_SCHEDULES: tuple[str, ...] = ("step", "constant", "cosine")

# What training runs on: the training file less the validation split (ml.data.dataset.SPLITS).
TRAIN_EXAMPLES = SPLIT_EXAMPLES["train"]


class ConfigError(ValueError):
    """A configuration value a user supplied is invalid; the message says how to fix it."""


@dataclass
class TrainConfig:
    """Everything that decides what a training run does.

    Within a profile the layer lists, ``steps_per_epoch`` and ``batch_size_per_replica``
    are fixed; learning rate, its schedule, BatchNorm momentum and the seed are tunable.
    """

    model_type: str = "cnn"
    """One of ``MODEL_TYPES``."""
    profile: str = DEFAULT_PROFILE
    """Named budget the remaining defaults came from (one of ``PROFILES``)."""
    epochs: int = 3
    """Number of epochs to train."""
    steps_per_epoch: int | None = 70
    """Global steps per epoch; ``None`` means one full pass over the training split
    (``TRAIN_EXAMPLES``: the 60,000 training images less the validation split)."""
    batch_size_per_replica: int = 64
    """Examples per replica per step; the global batch is this times the worker count."""
    shuffle_buffer: int = 10_000
    """Shuffle buffer size (examples)."""
    learning_rate: float = 1e-3
    """Base learning rate of the schedule."""
    lr_schedule: str = "step"
    """``step``: base LR for epochs 0-2, base/10 for 3-6, base/100 after (the original
    design's); ``constant``; ``cosine``: per-step cosine decay from base to 0 at the last
    step (see ``learning_rate_at``)."""
    warmup_steps: int = 0
    """Steps of linear warm-up from base/10 to base before the schedule (0: none)."""
    bn_momentum: float = 0.99
    """Momentum of BatchNormalization moving statistics (``cnn_batchnorm`` only)."""
    seed: int = 42
    """Seed for initialisers, shuffling and dropout (identical on every worker)."""
    steps_per_execution: int = 10
    """Training steps Keras runs in one call of its compiled step function
    (``compile(steps_per_execution=...)``): fewer Python round trips per step; 10 gave +12%
    examples/s with one worker and +23% with two (benchmarks/results/scaling-attempts.md).
    The last call of an epoch is cut at the epoch's end. Progress lines, the SIGTERM check
    and the epoch-end backup happen between calls, so a preemption save can land up to
    this many steps later; the model's updates are the same as with 1."""
    validation: bool = True
    """Evaluate on the validation split at the end of every epoch (the training curves'
    ``val_*`` figures); the test split is never used in training."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes carried into ``params.yaml`` (e.g. worker count, versions)."""

    def validate(self) -> None:
        """Raise ConfigError with a fix-it message on any invalid value."""
        if self.model_type not in MODEL_TYPES:
            raise ConfigError(
                f"unknown model type {self.model_type!r}; valid: {', '.join(MODEL_TYPES)}"
            )
        if self.profile not in PROFILES:
            raise ConfigError(f"unknown profile {self.profile!r}; valid: {', '.join(PROFILES)}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"unknown lr_schedule {self.lr_schedule!r}; valid: {', '.join(LR_SCHEDULES)}"
            )
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be 0 or more, got {self.warmup_steps!r}")
        positive = {
            "epochs": self.epochs,
            "batch_size_per_replica": self.batch_size_per_replica,
            "shuffle_buffer": self.shuffle_buffer,
            "steps_per_execution": self.steps_per_execution,
        }
        if self.steps_per_epoch is not None:
            positive["steps_per_epoch"] = self.steps_per_epoch
        for name, value in positive.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if not 0 < self.learning_rate < 1:
            raise ConfigError(f"learning_rate must be in (0, 1), got {self.learning_rate!r}")
        if not 0 < self.bn_momentum < 1:
            raise ConfigError(f"bn_momentum must be in (0, 1), got {self.bn_momentum!r}")

    def global_batch_size(self, num_workers: int) -> int:
        return self.batch_size_per_replica * max(1, num_workers)

    def resolved_steps_per_epoch(self, num_workers: int) -> int:
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch
        return TRAIN_EXAMPLES // self.global_batch_size(num_workers)

    def learning_rate_at(self, step: int, steps_per_epoch: int) -> float:
        """The learning rate of 0-based global ``step`` (the one definition of the schedule).

        A linear warm-up from base/10 to base over ``warmup_steps``, then ``step``: base for
        epochs 0-2, base/10 for 3-6, base/100 after; ``constant``: base; ``cosine``: a
        per-step cosine decay from base to 0 at the last step.
        """
        base, warm = self.learning_rate, self.warmup_steps
        if step < warm:
            return base / 10 + (base - base / 10) * step / warm
        if self.lr_schedule == "constant":
            return base
        if self.lr_schedule == "cosine":
            span = max(1, self.epochs * steps_per_epoch - warm)
            return base * 0.5 * (1 + math.cos(math.pi * min(step - warm, span) / span))
        epoch = step // steps_per_epoch
        return base if epoch < 3 else base / 10 if epoch < 7 else base / 100

    def learning_rates(self, steps_per_epoch: int) -> list[float]:
        """The rate of every step of the run, for the optimizer's table schedule."""
        return [
            self.learning_rate_at(s, steps_per_epoch) for s in range(self.epochs * steps_per_epoch)
        ]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# The profiles. ``quick`` is the original design's budget (64 per replica, 3 x 70 steps,
# shuffle buffer 10,000) with a tuned schedule: the original 1e-3 step schedule leaves `cnn`
# at ~84.6% and `cnn_batchnorm` at ~20% (its moving statistics do not settle in 210 steps
# at momentum 0.99). Tuning on the validation split (2 replicas of 64 in one process,
# seeds 1-3, test accuracy in brackets; every attempt is in benchmarks/results/
# accuracy-attempts.md): `cnn` per-epoch cosine from 8e-3 87.5% (87.1%); per-step cosine
# from 1.2e-2 after 20 warm-up steps 87.8% (87.4%); the same on standardised inputs
# (ml.data.preprocess.standardize) 88.4% (88.0%). `cnn_batchnorm`: constant 3e-3 77.7% (76.7%,
# spread 3.5 points); per-step cosine from 8e-3 after 20 warm-up steps 82.1% (81.5%,
# spread 0.2). ``full``: 30 passes, cosine from 3e-3 (tuned before the split: `cnn_dropout`
# 92.2% after 20 passes at batch 128 in one process, 91.7% with 2 workers, hence 30).
PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "quick": {
        "epochs": 3,
        "steps_per_epoch": 70,
        "batch_size_per_replica": 64,
        "shuffle_buffer": 10_000,
        "learning_rate": 1.2e-2,
        "lr_schedule": "cosine",
        "warmup_steps": 20,
        "bn_momentum": 0.9,
        "steps_per_execution": 10,
    },
    "full": {
        "epochs": 30,
        "steps_per_epoch": None,
        "batch_size_per_replica": 64,
        "shuffle_buffer": 60_000,
        "learning_rate": 3e-3,
        "lr_schedule": "cosine",
        "bn_momentum": 0.9,
        "steps_per_execution": 10,
    },
}

# Per-model tuning inside a profile (applied after the profile's values): the deeper
# models are unstable at `cnn`'s rate in 210 steps (`cnn_batchnorm` collapsed to 10% for one
# seed at cosine 8e-3 without warm-up); with warm-up 8e-3 holds (see above).
MODEL_OVERRIDES: dict[str, dict[str, dict[str, Any]]] = {
    "quick": {
        "cnn_dropout": {"learning_rate": 8e-3},
        "cnn_batchnorm": {"learning_rate": 8e-3},
    },
    "full": {},
}

_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping of TrainConfig fields; unknown keys are an error."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {p} is not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {p} must hold a mapping of fields, got {type(data).__name__}"
        )
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise ConfigError(
            f"config file {p} has unknown keys {unknown}; valid keys: {sorted(_FIELDS)}"
        )
    return data


def resolve(
    profile: str | None = None,
    file_values: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> TrainConfig:
    """defaults -> profile -> the profile's per-model tuning -> file -> overrides.

    ``None`` values in overrides are ignored.

    The profile is the one passed, else the file's ``profile`` key, else ``DEFAULT_PROFILE``.
    """
    file_values = dict(file_values or {})
    profile = profile or file_values.pop("profile", None) or DEFAULT_PROFILE
    if profile not in PROFILE_DEFAULTS:
        raise ConfigError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    values: dict[str, Any] = {"profile": profile, **PROFILE_DEFAULTS[profile]}
    model = (overrides or {}).get("model_type") or file_values.get("model_type") or "cnn"
    values.update(MODEL_OVERRIDES[profile].get(model, {}))
    values.update({k: v for k, v in file_values.items() if k != "profile"})
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    cfg = TrainConfig(**values)
    cfg.validate()
    return cfg


def from_yaml(text: str) -> TrainConfig:
    """Inverse of ``TrainConfig.to_yaml`` (used to read ``params.yaml`` back)."""
    data = yaml.safe_load(text) or {}
    return TrainConfig(**{k: v for k, v in data.items() if k in _FIELDS})
