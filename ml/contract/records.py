"""What the steps write, read back: a candidate's ``metrics.json``, ingest's result line,
a published version's ``publish.json`` and its model card, the selection report. Part of
the pod contract (``ml.contract`` names where each file lives); standard library only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ml.contract import AnyPath


@dataclass(frozen=True)
class Metrics:
    """A candidate's ``metrics.json``: per-epoch history and the last epoch's figures."""

    history: list[dict[str, Any]]
    final: dict[str, Any]

    @property
    def val_accuracy(self) -> float | None:
        value = self.final.get("val_accuracy")
        return None if value is None else float(value)

    @property
    def epochs(self) -> int:
        return len(self.history)


def read_metrics(path: AnyPath) -> Metrics | None:
    """The metrics a training run exported, or None when the file is absent or unreadable."""
    data = _read_json(Path(str(path)))
    if data is None:
        return None
    return Metrics(history=list(data.get("history") or []), final=dict(data.get("final") or {}))


@dataclass(frozen=True)
class IngestResult:
    """What ``ml.data.ingest`` did, printed as its last stdout line: one JSON object such as
    ``{"ingest": "prepared", "dataset": "V/datasets/fashion_mnist"}``."""

    PREPARED = "prepared"
    ALREADY_PREPARED = "already-prepared"

    status: str  # PREPARED or ALREADY_PREPARED
    dataset: str  # the prepared dataset's directory

    @property
    def changed(self) -> bool:
        """Whether this run prepared the dataset (False: the volume already held it)."""
        return self.status == self.PREPARED

    def line(self) -> str:
        return json.dumps({"ingest": self.status, "dataset": self.dataset})


def read_ingest_line(output: str) -> IngestResult:
    """The ``IngestResult`` in ``ml.data.ingest``'s output (its last such line).

    Raises ValueError when the output holds none (the step failed, or is not ``ml.data.ingest``).
    """
    for raw in reversed(output.splitlines()):
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("ingest") in (
            IngestResult.PREPARED,
            IngestResult.ALREADY_PREPARED,
        ):
            return IngestResult(status=data["ingest"], dataset=str(data.get("dataset", "")))
    raise ValueError("no ingest result line in the output of ml ingest")


# What every publish.json written by a selection holds: what made the model (ml.selection.select).
LINEAGE_FIELDS: tuple[str, ...] = (
    "version",
    "model_type",
    "val_accuracy",  # on the validation split: what the choice was made on
    "test_accuracy",  # on the test split: scored after the choice, reported only
    "selected_on",
    "reason",
    "code_version",  # the project image's tag (locally: the tag this code builds to)
    "dataset",  # name, the raw files' SHA-256 (each checked before use), the splits
    "params",  # the candidate's resolved params.yaml
    "published_at",
)


def read_publish(path: AnyPath) -> dict[str, Any]:
    """A ``publish.json`` (or its serving copy); ``{}`` when absent or unreadable."""
    return _read_json(Path(str(path))) or {}


def model_card(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A published version's short model card: (label, text) rows from its publish.json.
    Records from before lineage was kept show "-" for what they lack."""
    if not record:
        return [("model", "nothing published yet")]

    def acc(key: str) -> str:
        value = record.get(key)
        return "-" if value is None else f"{float(value):.4f}"

    params = record.get("params") or {}
    shape = params.get("extra") or {}
    dataset = record.get("dataset") or {}
    hashes = ", ".join(sha[:12] for sha in (dataset.get("sha256") or {}).values())
    return [
        (
            "model",
            f"version {record.get('version', '-')}: {record.get('model_type', '-')} "
            f"({record.get('source', '-')}), published {record.get('published_at', '-')}",
        ),
        (
            "accuracy",
            f"validation {acc('val_accuracy')} (chosen on), test {acc('test_accuracy')} "
            "(reported only)",
        ),
        ("code", str(record.get("code_version", "-"))),
        (
            "training",
            f"profile {params.get('profile', '-')}, {params.get('epochs', '-')} epoch(s) x "
            f"{shape.get('steps_per_epoch_resolved', '-')} steps, global batch "
            f"{shape.get('global_batch_size', '-')}, lr {params.get('learning_rate', '-')} "
            f"{params.get('lr_schedule', '-')}, seed {params.get('seed', '-')}",
        ),
        ("data", f"{dataset.get('name', '-')} (sha256 {hashes or '-'})"),
        ("reason", str(record.get("reason", "-"))),
    ]


def read_selection(path: AnyPath) -> dict[str, Any]:
    """The selection report (``{}`` when there is none yet)."""
    return _read_json(Path(str(path))) or {}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
