"""A FakeKube whose batch Jobs run for real, here: on apply, the Job's one container
command runs as a process on this machine (the repository on its path, this Python), its
output becomes the pod's log, and the Job turns Complete or Failed by its exit code. With
``Settings.mount_path`` pointed at a local directory, a cluster's volume steps (the
canary's weight, its end, its labelled sample) act on real files, as their pods would.
A Pod applied is handed to ``run_pod``, if set (the canary's own server, started here),
and shown Running and Ready once it returns."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.fakekube import FakeKube, conditions_status

REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 120


class JobsRunHere(FakeKube):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ran: list[tuple[str, list[str], int]] = []  # (job, command, exit code)
        self.run_pod: Callable[[dict[str, Any]], None] | None = None

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = True) -> Any:
        applied = super().apply(obj, dry_run=dry_run, force=force)
        if obj.get("kind") == "Job" and not dry_run:
            self._run(applied)
        if obj.get("kind") == "Pod" and not dry_run and self.run_pod is not None:
            self.run_pod(applied)
            ready = {"type": "Ready", "status": "True"}
            started = {"name": "c", "ready": True, "restartCount": 0}
            status = {"phase": "Running", "conditions": [ready], "containerStatuses": [started]}
            meta = applied["metadata"]
            self.set_status("v1", "Pod", meta.get("namespace"), meta["name"], status)
            self.obj("v1", "Pod", meta["name"], meta.get("namespace"))["spec"]["nodeName"] = "here"
        return applied

    def _run(self, job: dict[str, Any]) -> None:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        (container,) = job["spec"]["template"]["spec"]["containers"]
        command = [sys.executable if c == "python" else c for c in container["command"]]
        env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.ran.append((name, container["command"], done.returncode))
        for key, obj in list(self.objects.items()):  # the earlier run's pod, as a new Job's
            if key[1] == "Pod" and obj["metadata"].get("labels", {}).get("job-name") == name:
                del self.objects[key]
        pod = f"{name}-{len(self.ran)}"
        self.add_pod(ns, pod, {"job-name": name}, phase="Succeeded", exit_code=done.returncode)
        self.set_log(pod, done.stdout + done.stderr)
        ended = ("Complete", "True") if done.returncode == 0 else ("Failed", "True")
        self.set_status("batch/v1", "Job", ns, name, conditions_status(ended))
