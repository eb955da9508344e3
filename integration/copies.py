"""Copies in the bring-your-own run (``integration.byo``): what looks like this work dir's
but is not.

- ``copied-workdir``: ``cp -r`` of the user's work dir (``INVOKE_WORKDIR``); the copy's
  ``invoke down`` and ``invoke train`` are refused, and every object of the original's
  (TFJobs, Jobs, the volume, ConfigMaps, ServingRuntimes) keeps its uid and generation.
- ``down-keeps-impostor``: a teammate's ConfigMap carrying this work dir's labels (copied
  from a ``kubectl get -o yaml``, as anyone can); the user's ``invoke down`` says it kept
  it, and it is there afterwards with its uid; then the admin deletes it.
Stdlib only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from integration.byo_cluster import BUDGET, CONTEXT, OWN_NAMESPACE, kubectl, run, workdir

INSTANCE_LABEL = "distml/instance"  # k8s.manifests.names (stdlib only here)
COMMON_LABELS = {"app.kubernetes.io/part-of": "distml", "app.kubernetes.io/managed-by": "distml"}
KINDS = "tfjobs,jobs,pvc,configmaps,servingruntimes,inferenceservices"
IMPOSTOR = "distml-notes"
REFUSED_COPY = "is a copy of the work dir at"  # runtime.workdir.origin


def user_workdir() -> Path:
    return Path(os.environ["INVOKE_WORKDIR"])


def instance_of(wd: Path) -> str:
    return str(json.loads((wd / "state.json").read_text())["instance"])


def identities(instance: str) -> dict[str, tuple[str, int | None]]:
    """Every object of the work dir's in the namespace: ``Kind/name`` -> (uid, generation)."""
    out = kubectl(
        "-n", OWN_NAMESPACE, "get", KINDS, "-l", f"{INSTANCE_LABEL}={instance}", "-o", "json"
    )
    return {
        f"{o['kind']}/{o['metadata']['name']}": (
            o["metadata"]["uid"],
            o["metadata"].get("generation"),
        )
        for o in json.loads(out)["items"]
    }


def _invoke(args: list[str], wd: Path) -> tuple[int, str]:
    command = [sys.executable, "-m", "invoke", *args]
    print(f"+ INVOKE_WORKDIR={wd} " + " ".join(command), flush=True)
    env = {**os.environ, "INVOKE_WORKDIR": str(wd)}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    said = done.stdout + done.stderr
    print(said, flush=True)
    return done.returncode, said


def compare(before: dict, after: dict) -> list[str]:
    """What changed between two ``identities``: gone, replaced (another uid), or changed."""
    problems = []
    for key, (uid, generation) in sorted(before.items()):
        now = after.get(key)
        if now is None:
            problems.append(f"{key} is gone")
        elif now[0] != uid:
            problems.append(f"{key} was replaced (uid {uid} -> {now[0]})")
        elif now[1] != generation:
            problems.append(f"{key} changed (generation {generation} -> {now[1]})")
    return problems


def copied_workdir() -> None:
    original = user_workdir()
    instance = instance_of(original)
    before = identities(instance)
    if not any(k.startswith("PersistentVolumeClaim/") for k in before):
        raise SystemExit(f"the original's volume is not there to compare: {sorted(before)}")
    copy = workdir() / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(original, copy, symlinks=True)
    try:
        for args in (["down"], ["train", "--model-type", "cnn", *BUDGET]):
            code, said = _invoke(args, copy)
            if code == 0 or REFUSED_COPY not in said or str(original) not in said:
                raise SystemExit(f"the copy's `invoke {args[0]}` was not refused (exit {code})")
        problems = compare(before, identities(instance))
        if problems:
            raise SystemExit("the copy changed the original's objects:\n  " + "\n  ".join(problems))
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    print(
        f"refused: the copy's down and train; {len(before)} objects of the original "
        f"(instance {instance}) kept their uids: {', '.join(sorted(before))}"
    )


def impostor(instance: str) -> dict:
    labels = {**COMMON_LABELS, INSTANCE_LABEL: instance}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": IMPOSTOR, "namespace": OWN_NAMESPACE, "labels": labels},
        "data": {"note": "a teammate's, with labels copied from a distml object"},
    }


def _uid(name: str) -> str | None:
    out = kubectl("-n", OWN_NAMESPACE, "get", "configmaps", "-o", "json")
    found = [o for o in json.loads(out)["items"] if o["metadata"]["name"] == name]
    return found[0]["metadata"]["uid"] if found else None


def down_keeps_impostor() -> None:
    wd = user_workdir()
    made = run(
        ["kubectl", "--context", CONTEXT, "create", "-o", "json", "-f", "-"],
        stdin=json.dumps(impostor(instance_of(wd))),
    )
    uid = json.loads(made)["metadata"]["uid"]
    code, said = _invoke(["down"], wd)
    if code:
        raise SystemExit(f"invoke down exited {code}")
    kept = [line for line in said.splitlines() if line.startswith("kept: ")]
    if not any(f"ConfigMap {IMPOSTOR}" in line.split(": they carry")[0] for line in kept):
        raise SystemExit(f"down did not say it kept ConfigMap {IMPOSTOR}")
    now = _uid(IMPOSTOR)
    if now != uid:
        raise SystemExit(f"ConfigMap {IMPOSTOR} was deleted or replaced ({uid} -> {now})")
    kubectl("-n", OWN_NAMESPACE, "delete", "configmap", IMPOSTOR)
    print(f"kept by down: ConfigMap {IMPOSTOR} (uid {uid}), a copy of the label; then deleted")


def main(argv: list[str]) -> int:
    commands = {"copied-workdir": copied_workdir, "down-keeps-impostor": down_keeps_impostor}
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: python -m integration.copies {' | '.join(commands)}", file=sys.stderr)
        return 2
    commands[argv[0]]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
