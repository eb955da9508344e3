"""``python -m integration.recovery FAULT MODEL``: one fault in a real cluster's TFJob,
and the proof that the job still ends ``Succeeded``, resumed from its saved step.

Run by ``nox -s integration`` after ``train-all``, with the same settings (environment).
It starts ``invoke train --model MODEL`` (two epochs), waits until the job's first
epoch has ended (the chief's progress line), then injects FAULT into worker 1:

- ``delete-pod``: ``kubectl delete pod`` (what a drain, an eviction or a user does);
  training-operator v1.9.0 fails the whole job for it and ``invoke train`` resubmits it.
- ``sigterm``: SIGTERM to the worker's process inside its container (what a preempting
  node sends); the workers save the agreed step and the operator restarts them in place.

It passes when ``invoke train`` exits 0, the TFJob is ``Succeeded``, and a worker's log
has the trainer's ``resumed`` progress line. Exit 1 with what was seen otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from integration.kind_run import NAMESPACE, context
from k8s.client.objects import TFJOB_LABELS
from k8s.manifests.names import tfjob_name
from ml.contract import PROGRESS_PREFIX

FAULTS = ("delete-pod", "sigterm")
# Epoch 2 must outlast the poll that sees epoch 1 end: the fault has to land mid-run.
EPOCHS, STEPS = 2, 150
POLL_S = 2.0
SIGTERM_PID_1 = "import os, signal; os.kill(1, signal.SIGTERM)"


class RecoveryFailed(RuntimeError):
    """The fault was not recovered from; the message says what was seen."""


def progress(log: str) -> list[dict]:
    """The trainer's progress events in a worker's log, in order."""
    events = []
    for line in log.splitlines():
        if line.startswith(PROGRESS_PREFIX):
            try:
                event = json.loads(line[len(PROGRESS_PREFIX) :])
            except json.JSONDecodeError:
                continue  # a line cut by a container's end
            if isinstance(event, dict):
                events.append(event)
    return events


def fault_argv(fault: str, pod: str) -> list[str]:
    """The kubectl arguments that inject ``fault`` into ``pod``."""
    if fault == "delete-pod":
        return ["delete", "pod", pod, "--wait=false"]
    # The worker's command is python itself (ml.contract's train command, no shell, no
    # init): PID 1. The image has no kill(1) (no procps): its python sends the signal.
    return ["exec", pod, "--", "python", "-c", SIGTERM_PID_1]


class Cluster:
    """kubectl against the run's cluster and namespace."""

    def __init__(self, context: str, namespace: str = NAMESPACE) -> None:
        self.base = ["kubectl", "--context", context, "-n", namespace]
        self.stale: set[str] = set()  # uids of pods an earlier run of the job left

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            raise RecoveryFailed(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def pods(self, job: str, index: int) -> dict[str, str]:
        """uid -> name of the job's worker ``index`` pods (none while the API server does
        not answer: a busy 2-CPU control plane times out now and then; the waits retry)."""
        selector = f"{TFJOB_LABELS[0]}={job},training.kubeflow.org/replica-index={index}"
        out = self.run("get", "pods", "-l", selector, "-o", "json", check=False)
        try:
            items = json.loads(out)["items"]
        except (ValueError, KeyError):
            return {}
        return {p["metadata"]["uid"]: p["metadata"]["name"] for p in items}

    def forget_existing(self, job: str) -> None:
        """Pods there now are an earlier run's (train-all's): never read as this one's."""
        self.stale = {uid for index in (0, 1) for uid in self.pods(job, index)}

    def pod(self, job: str, index: int) -> str:
        """This run's worker ``index`` pod, or "" while it has none."""
        fresh = [n for uid, n in self.pods(job, index).items() if uid not in self.stale]
        return fresh[0] if fresh else ""

    def logs(self, pod: str) -> str:
        return self.run("logs", pod, check=False) if pod else ""

    def job_state(self, job: str) -> str:
        path = '{.status.conditions[?(@.status=="True")].type}'
        return self.run("get", "tfjob", job, "-o", f"jsonpath={path}")


def _wait(what: str, ready, deadline_s: float, train: subprocess.Popen) -> None:
    deadline = time.monotonic() + deadline_s
    while train.poll() is None and not ready():
        if time.monotonic() > deadline:
            raise RecoveryFailed(f"no {what} within {deadline_s:.0f} s")
        time.sleep(POLL_S)
    if train.returncode is not None:
        raise RecoveryFailed(f"invoke train exited {train.returncode} before {what}")


def check(fault: str, model: str, context: str, deadline_s: float = 1200) -> str:
    """Run the check; the resumed worker's progress event, as proof."""
    kube, job = Cluster(context), tfjob_name(model)
    kube.forget_existing(job)
    argv = [sys.executable, "-m", "invoke", "train", "--model-type", model, "--epochs", str(EPOCHS)]
    train = subprocess.Popen([*argv, "--steps-per-epoch", str(STEPS)])
    try:

        def first_epoch_done() -> bool:
            events = progress(kube.logs(kube.pod(job, 0)))
            return any(e.get("event") == "epoch" for e in events)

        _wait("first epoch's end", first_epoch_done, deadline_s, train)
        if _resumed(kube, job):  # the proof below must be this fault's
            raise RecoveryFailed(f"TFJob {job} resumed before any fault: stale backup?")
        target = kube.pod(job, 1)
        print(f"recovery: {fault} on {target} (epoch 1 of {EPOCHS} done)", flush=True)
        kube.run(*fault_argv(fault, target))
        code = train.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        _stop(train)
        raise RecoveryFailed(
            f"invoke train still running {deadline_s:.0f} s after {fault}"
        ) from None
    except BaseException:
        _stop(train)
        raise
    if code != 0:
        raise RecoveryFailed(f"invoke train exited {code} after {fault}")
    state = kube.job_state(job)
    if "Succeeded" not in state.split():
        raise RecoveryFailed(f"TFJob {job} ended {state!r}, not Succeeded, after {fault}")
    resumed = _resumed(kube, job)
    if not resumed:
        raise RecoveryFailed(f"TFJob {job} succeeded but no worker's log says it resumed")
    return json.dumps(resumed)


def _stop(train: subprocess.Popen, grace_s: float = 30) -> None:
    """Stop ``invoke train`` as Ctrl-C would (it deletes nothing; `down` does), then kill."""
    train.terminate()
    try:
        train.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        train.kill()
        train.wait()


def _resumed(kube: Cluster, job: str) -> dict | None:
    """A worker's last ``resumed`` progress event, if any worker has one."""
    for index in (0, 1):
        events = progress(kube.logs(kube.pod(job, index)))
        resumed = [e for e in events if e.get("event") == "resumed"]
        if resumed:
            return resumed[-1]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m integration.recovery", description=__doc__)
    parser.add_argument("fault", choices=FAULTS)
    parser.add_argument("model")
    parser.add_argument("--context", default=context(), help=f"kubeconfig context ({context()})")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        proof = check(args.fault, args.model, args.context)
    except RecoveryFailed as e:
        print(f"recovery: FAILED: {e}", file=sys.stderr)
        return 1
    took = time.monotonic() - start
    print(f"recovery: {args.fault}: TFJob Succeeded in {took:.0f} s; resumed: {proof}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
