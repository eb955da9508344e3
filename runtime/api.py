"""The one interface every runtime offers ``tasks/``: the same verbs, the same requests.

A runtime returns an exit code (0 = done) or raises ``common.errors.DistmlError`` with a
message that says what is wrong and how to fix it. What it can and cannot do is in its
``capabilities``: the tasks say which flags do not apply from that, never from its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from common.errors import DistmlError
from runtime.requests import (
    DeployRequest,
    DownRequest,
    LoadtestRequest,
    TensorboardRequest,
    TrainRequest,
    UpRequest,
    WorkflowRequest,
)


class Unsupported(DistmlError):
    """A verb this runtime cannot do at all (a usage error: the task exits 2); the message
    says which runtime can."""

    exit_code = 2


@dataclass(frozen=True)
class Capabilities:
    cluster: bool = False  # a Kubernetes cluster: serving modes, base images, request logs
    scales_out: bool = False  # serving autoscales replicas (--target, --min/--max-replicas)
    gpus: bool = False  # workers can be given GPUs (--gpus-per-worker)
    predictors: bool = False  # other predictors than the project's server (--predictor)
    local_port: bool = False  # the server listens on a host port of your choice (--http-port)
    workflows: bool = False  # runs the pipeline as one Argo Workflow (`invoke workflow`)
    canary: bool = False  # a new version as a canary, judged and promoted or rolled back


class Runtime(Protocol):
    name: str
    capabilities: Capabilities
    interrupt_note: str  # what Ctrl-C leaves behind, printed by the task

    def up(self, request: UpRequest) -> int: ...

    def train(self, request: TrainRequest) -> int: ...

    def deploy(self, request: DeployRequest) -> int: ...

    def rollback(self) -> int: ...

    def canary(self, word: str) -> int: ...

    def loadtest(self, request: LoadtestRequest) -> int: ...

    def status(self) -> int: ...

    def down(self, request: DownRequest) -> int: ...

    def workflow(self, request: WorkflowRequest) -> int: ...

    def tensorboard(self, request: TensorboardRequest) -> int: ...
