"""The local runtime: the pod contract run as processes on 127.0.0.1, no cluster.

A "TFJob" is N ``python -m ml.train`` processes with the TF_CONFIG the operator would
give them; the volume is ``<workdir>/volume``; serving is ``python -m ml.serve`` in the
background (``runtime.local.serving``). It never claims to autoscale: one server process
serves every request. Every process goes through one ``Executor``: with ``dry=True``
(``invoke --dry``) each command is printed and nothing is touched.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import shutil
import sys
from pathlib import Path

from common.errors import DistmlError
from ml import contract
from runtime.api import Capabilities, Unsupported
from runtime.local import serving
from runtime.local.executor import Executor, Out
from runtime.procs import is_alive, stop_pid, stop_pids
from runtime.requests import (
    DeployRequest,
    DownRequest,
    LoadtestRequest,
    TensorboardRequest,
    TrainRequest,
    UpRequest,
    WorkflowRequest,
)
from runtime.tables import table
from runtime.workdir import MARKER, Workdir

REQUIRED_MODULES = {
    "tensorflow": "tensorflow",
    "tf_keras": "tf-keras",
    "tensorflow_datasets": "tensorflow-datasets",
    "kserve": "kserve",
    "locust": "locust",
    "matplotlib": "matplotlib",
}
MIN_FREE_BYTES = 2 * 1024**3
TRAIN_TAG = "ml.train"


class UserError(DistmlError):
    """Something the user can fix; the message says what and how."""


class LocalRuntime:
    """``invoke`` tasks on the local runtime. Methods return an exit code or raise UserError."""

    name = "local"
    capabilities = Capabilities(local_port=True)
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
    def preflight(self) -> list[str]:
        problems = []
        missing = [
            pkg for mod, pkg in REQUIRED_MODULES.items() if importlib.util.find_spec(mod) is None
        ]
        if missing:
            problems.append(
                f"missing Python packages: {', '.join(missing)}; install the project with "
                "`pip install -e .` in this environment"
            )
        probe = self.wd.root if self.wd.root.exists() else self.wd.root.parent
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < MIN_FREE_BYTES and not self.wd.exists():
            problems.append(
                f"only {free / 1024**3:.1f} GiB free under {probe}; the local runtime needs "
                f"about {MIN_FREE_BYTES / 1024**3:.0f} GiB (free space or set INVOKE_WORKDIR)"
            )
        return problems

    def up(self, request: UpRequest) -> int:
        source_dir = request.source_dir
        source = str(Path(source_dir).expanduser().resolve()) if source_dir else None
        ingest = contract.ingest(self.wd.volume, source, python=self.python)
        if not self.ex.act(f"create the work dir {self.wd.root} (volume {self.wd.volume})"):
            self.ex.step("ingest", ingest)
            return 0
        problems = self.preflight()
        if problems:
            raise UserError("preflight failed:\n  - " + "\n  - ".join(problems))
        created = self.wd.create()
        self.out(f"work dir {self.wd.root} ({'created' if created else 'exists'})")
        log = self.wd.logs / "ingest.log"
        code, output = self.ex.step("ingest", ingest, log)
        if code != 0:
            raise UserError(f"ingest failed (exit {code}); full log: {log}")
        already = not contract.read_ingest_line(output).changed
        state = self.wd.state()
        sample_existed = (self.wd.root / contract.SAMPLE_REQUEST).is_file()
        serving.write_sample(self, source_dir)
        if already and not created and state.up and sample_existed:
            self.out("local runtime already ready; nothing changed")
        else:
            self.wd.update_state(up=True, runtime="local", source_dir=source)
            self.out(f"local runtime ready: volume {self.wd.volume}")
        return 0

    # ------------------------------------------------------------------ train
    def train(self, request: TrainRequest) -> int:
        from runtime.local.training import train

        self.require_up()
        return train(self, request)

    # ------------------------------------------------------------------ serve
    def deploy(self, request: DeployRequest) -> int:
        self.require_up()
        return serving.deploy(self, request)

    def rollback(self) -> int:
        self.require_up()
        return serving.rollback(self)

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
        from runtime.charts import training_curves

        chart = training_curves(self.wd.volume, self.wd.reports / "training-curves.png")
        if chart:
            self.out(f"training curves: {chart}")

    def down(self, request: DownRequest) -> int:
        state = self.wd.state()
        server = state.server
        stopped = [p for p in state.train_pids if is_alive(p, TRAIN_TAG)]
        pid = server.pid if server else 0
        if (
            server
            and self.ex.act(f"stop the model server (pid {pid})")
            and stop_pid(pid, serving.SERVER_TAG, started=server.started)
        ):
            self.out(f"stopped the model server (pid {pid})")
        if stopped and self.ex.act(f"stop {len(stopped)} training worker(s): pids {stopped}"):
            self.out(f"stopping {len(stopped)} leftover training worker(s)…")
            stop_pids(stopped, TRAIN_TAG)
        if self.wd.exists() and not self.ex.dry:
            with contextlib.suppress(OSError):  # a full disk: they are stopped all the same
                self.wd.update_state(server=None, train_pids=None)
        if request.purge:
            self._purge()
        if not (server or stopped or request.purge):
            self.out("nothing was running")
        return 0

    def _remove_workdir(self) -> None:
        """Remove the work dir; one that is a mount point (a disk of its own) cannot be
        removed, only emptied: its contents go and the directory stays."""
        root = self.wd.root
        try:
            shutil.rmtree(root)
        except OSError as e:
            if e.errno != errno.EBUSY or not root.is_dir():
                raise
            for child in root.iterdir():  # what rmtree left: the marker, say
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            self.out(f"emptied {root} (a mount point: the directory itself stays)")
            return
        self.out(f"removed {root}")

    def _purge(self) -> None:
        if self.wd.exists():
            if self.ex.act(f"remove {self.wd.root}"):
                self._remove_workdir()
        elif self.wd.root.exists():
            raise UserError(
                f"{self.wd.root} has no {MARKER} marker, so it was not made by "
                "distml; not deleting it"
            )
        else:
            self.out(f"no work dir at {self.wd.root}; nothing to remove")
