"""The local runtime: the pod contract run as processes on 127.0.0.1, no cluster.

A "TFJob" is N ``python -m ml train`` processes with the TF_CONFIG the operator would
give them; the volume is ``<workdir>/volume``; serving is ``python -m ml serve`` in the
background (``runtime.local.serving``). It never claims to autoscale: one server process
serves every request. Every process goes through one ``Executor``: with ``dry=True``
(``invoke --dry``) each command is printed and nothing is touched.

``LocalRuntime`` is the facade the tasks call; each step lives in its own module:

    up.py           preflight, the work dir, the dataset, the sample request
    training.py     a job per model, run by ``jobs.JobRunner`` (its worker processes)
    serving.py      deploy, rollback, load test against the one server process
    status.py       the status table
    down.py         stop what runs; --purge removes the work dir
    tensorboard.py  TensorBoard over the volume's runs
    executor.py     every process and step goes through it (``--dry`` prints them)
"""

from __future__ import annotations

import sys
from pathlib import Path

from common.errors import DistmlError
from ml import contract
from runtime.api import Capabilities, Unsupported
from runtime.local import down as _down
from runtime.local import serving
from runtime.local import up as _up
from runtime.local.executor import Executor, Out
from runtime.output.tables import table
from runtime.requests import (
    DeployRequest,
    DownRequest,
    LoadtestRequest,
    TensorboardRequest,
    TrainRequest,
    UpRequest,
    WorkflowRequest,
)
from runtime.workdir import Workdir


class UserError(DistmlError):
    """Something the user can fix; the message says what and how."""


class LocalRuntime:
    """``invoke`` tasks on the local runtime. Methods return an exit code or raise UserError."""

    name = "local"
    capabilities = Capabilities(local_port=True, canary=True)
    error = UserError
    python = sys.executable  # the interpreter every step runs with
    interrupt_note = "every process this task started has been stopped"

    def __init__(
        self,
        workdir: Workdir,
        service: str = contract.DEFAULT_SERVICE,
        out: Out = print,
        *,
        dry: bool = False,
    ) -> None:
        self.wd = workdir
        self.service = service
        self.out = out
        self.ex = Executor(out, dry=dry)

    @property
    def serving_dir(self) -> Path:
        return Path(contract.serving_dir(self.wd.volume, self.service))

    def require_up(self) -> None:
        if self.ex.dry:
            return  # a dry run shows what would run, set up or not
        if not self.wd.exists() or not self.wd.state().up:
            raise UserError(f"the local runtime is not set up in {self.wd.root}; run `invoke up`")

    # ------------------------------------------------------------------ up
    def up(self, request: UpRequest) -> int:
        return _up.up(self, request)

    # ------------------------------------------------------------------ train
    def train(self, request: TrainRequest) -> int:
        from runtime.local.training import train

        self.require_up()
        return train(self, request)

    # ------------------------------------------------------------------ serve
    def deploy(self, request: DeployRequest) -> int:
        self.require_up()
        if request.canary:
            from runtime.local.canary_deploy import deploy_canary

            return deploy_canary(self, request)
        return serving.deploy(self, request)

    def rollback(self) -> int:
        self.require_up()
        return serving.rollback(self)

    def canary(self, word: str) -> int:
        """End the canary release in the volume by hand: ``promote`` or ``abort``."""
        from runtime.local.canary_control import control

        self.require_up()
        return control(self, word)

    def loadtest(self, request: LoadtestRequest) -> int:
        self.require_up()
        return serving.loadtest(self, request)

    # ------------------------------------------------------------------ workflow
    def workflow(self, request: WorkflowRequest) -> int:
        """Refused: an Argo Workflow needs a cluster; there is nothing local to pretend with."""
        raise Unsupported(
            "workflows need a cluster: `invoke workflow` runs the pipeline as one Argo "
            "Workflow, which only a cluster runtime has (`invoke up --runtime k3d "
            "--with-argo`, then `invoke workflow`); on the local runtime run the task "
            "chain instead: `invoke train-all deploy`"
        )

    # ------------------------------------------------------------------ tensorboard
    def tensorboard(self, request: TensorboardRequest) -> int:
        """TensorBoard over the volume's runs on 127.0.0.1, until Ctrl-C."""
        from runtime.local.tensorboard import tensorboard

        return tensorboard(self, request)

    # ------------------------------------------------------------------ status / down
    def status(self) -> int:
        from runtime.local.status import status_rows

        self.out(table(status_rows(self)))
        self.chart()
        return 0

    def chart(self) -> None:
        from runtime.output.charts import training_curves

        chart = training_curves(self.wd.volume, self.wd.reports / "training-curves.png")
        if chart:
            self.out(f"training curves: {chart}")

    def down(self, request: DownRequest) -> int:
        return _down.down(self, request)
