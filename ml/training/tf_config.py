"""TF_CONFIG: what the training operator (or the local runtime) tells each worker."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ml.training.config import ConfigError

_TASK_TYPES = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True)
class ClusterSpec:
    """This worker's view of the job. No TF_CONFIG means a one-worker job."""

    cluster: dict[str, list[str]] = field(default_factory=dict)
    task_type: str = "worker"
    task_index: int = 0

    @property
    def num_workers(self) -> int:
        return max(1, len(self.cluster.get("chief", [])) + len(self.cluster.get("worker", [])))

    @property
    def is_chief(self) -> bool:
        if self.task_type == "chief":
            return True
        return self.task_type == "worker" and self.task_index == 0 and "chief" not in self.cluster

    @property
    def name(self) -> str:
        return f"{self.task_type}-{self.task_index}"


def parse_tf_config(raw: str | None) -> ClusterSpec:
    """Parse and check TF_CONFIG; raise ConfigError saying what is wrong with it."""
    if raw is None or not raw.strip():
        return ClusterSpec()
    hint = (
        'expected e.g. {"cluster": {"worker": ["host0:2222", "host1:2222"]}, '
        '"task": {"type": "worker", "index": 0}}'
    )
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({e}); {hint}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"TF_CONFIG must be a JSON object; {hint}")
    cluster, task = data.get("cluster"), data.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigError(f"TF_CONFIG has no 'cluster' mapping; {hint}")
    for role, addresses in cluster.items():
        if role not in _TASK_TYPES:
            raise ConfigError(f"TF_CONFIG cluster has unknown role {role!r}; valid: {_TASK_TYPES}")
        if not isinstance(addresses, list) or not addresses:
            raise ConfigError(f"TF_CONFIG cluster.{role} must be a non-empty list of host:port")
        for address in addresses:
            host, _, port = str(address).rpartition(":")
            if not host or not (port.isascii() and port.isdigit()):
                raise ConfigError(
                    f"TF_CONFIG cluster.{role} entry {address!r} is not host:port; {hint}"
                )
    if not isinstance(task, dict):
        raise ConfigError(f"TF_CONFIG has no 'task' object; {hint}")
    task_type, task_index = task.get("type"), task.get("index")
    # The roles are JSON object keys, so a task.type in the cluster is a str.
    if task_type not in cluster or not isinstance(task_type, str):
        raise ConfigError(
            f"TF_CONFIG task.type {task_type!r} is not a role in the cluster {sorted(cluster)}"
        )
    if not isinstance(task_index, int) or not 0 <= task_index < len(cluster[task_type]):
        raise ConfigError(
            f"TF_CONFIG task.index {task_index!r} is out of range for "
            f"{len(cluster[task_type])} {task_type} address(es)"
        )
    if "ps" in cluster:
        raise ConfigError("TF_CONFIG names parameter servers; MultiWorkerMirroredStrategy has none")
    return ClusterSpec(
        cluster={k: list(v) for k, v in cluster.items()}, task_type=task_type, task_index=task_index
    )
