"""The other tenants of the bring-your-own-cluster run (``integration.byo``): what a
shared cluster holds besides this work dir's objects, and the checks that distml left it.

- Another team's TFJob ``train-cnn`` and InferenceService ``tf-mnist`` (``kubectl apply``,
  label ``team=other``) in the namespace distml is first pointed at (``other-team``).
- A second distml work dir, ``up`` in that same namespace before the first one
  (``second_env``): its volume, its ingest Job.

``snapshot`` records every object of the shared namespace (uid, generation, labels, spec,
writers); ``check-untouched`` compares them after the first work dir's whole lifecycle;
``check-second-gone`` after the second work dir's ``down``. Stdlib only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from integration import byo_cluster

OTHER_TEAM = {"team": "other"}
KINDS = "tfjobs,inferenceservices,jobs,pvc,pods,configmaps,services,deployments"
INSTANCE_LABEL = "distml/instance"  # k8s.manifests.names.INSTANCE_LABEL (stdlib only here)
# What distml says when it refuses a namespace where names it writes are taken.
REFUSED_NAMES = "up refused before any write"


def second_workdir() -> Path:
    return byo_cluster.workdir() / "second"


def second_env() -> list[str]:
    """The second work dir's settings, as a step's leading ``NAME=value`` items."""
    return [
        f"INVOKE_WORKDIR={second_workdir()}",
        f"INVOKE_CLUSTER_NAMESPACE={byo_cluster.NAMESPACE}",
        f"INVOKE_CLUSTER_REGISTRY={byo_cluster.REGISTRY}",
    ]


def other_team_objects() -> list[dict]:
    """A TFJob and an InferenceService of another team, of the names distml would use."""
    container = {
        "image": byo_cluster.BYSTANDER_IMAGE,
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
    meta = {"namespace": byo_cluster.NAMESPACE, "labels": OTHER_TEAM}
    tfjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "train-cnn", **meta},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [{"name": "tensorflow", **container}]}},
                }
            },
        },
    }
    annotations = {"serving.kserve.io/deploymentMode": "Standard"}
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "tf-mnist", **meta, "annotations": annotations},
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 1,
                "containers": [{"name": "kserve-container", **container}],
            }
        },
    }
    return [tfjob, isvc]


def fingerprint(obj: dict) -> dict:
    """What distml must never change of someone else's object, and whether distml ever
    wrote it (its field manager among the writers). Its status, annotations and
    resourceVersion are its controllers' to change (the latter is shown, not compared)."""
    meta = obj.get("metadata") or {}
    writers = sorted({m.get("manager", "") for m in meta.get("managedFields") or []})
    return {
        "uid": meta.get("uid"),
        "generation": meta.get("generation"),
        "labels": meta.get("labels") or {},
        "spec": obj.get("spec"),
        # distml's field manager: "distml", or "distml-<instance>" on such a cluster
        "distml_wrote": any(w == "distml" or w.startswith("distml-") for w in writers),
    }


def _objects(context: str = byo_cluster.CONTEXT) -> dict[str, dict]:
    out = byo_cluster.run(
        ["kubectl", "--context", context, "-n", byo_cluster.NAMESPACE, "get", KINDS, "-o", "json"]
    )
    items = json.loads(out)["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in items if _lasting(o)}


def _lasting(obj: dict) -> bool:
    """Made by a person, not by a controller for another object (those it replaces and
    updates at will: a Job's pods, a predictor's Deployment)."""
    return not (obj.get("metadata") or {}).get("ownerReferences")


def _snapshot_file() -> Path:
    return byo_cluster.workdir() / "tenants-snapshot.json"


def other_team() -> None:
    byo_cluster.run(
        ["kubectl", "--context", byo_cluster.CONTEXT, "apply", "-f", "-"],
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": other_team_objects()}),
    )
    # Their controllers have taken them in (defaults, finalizers) before the snapshot.
    wait = [
        "kubectl",
        "--context",
        byo_cluster.CONTEXT,
        "-n",
        byo_cluster.NAMESPACE,
        "wait",
        "--timeout=300s",
    ]
    byo_cluster.run([*wait, "tfjob/train-cnn", "--for=condition=Created"])
    byo_cluster.run(
        [*wait, "inferenceservice/tf-mnist", "--for=jsonpath={.status.observedGeneration}=1"]
    )
    snapshot()


def snapshot() -> None:
    found = {
        key: {**fingerprint(o), "rv": o["metadata"].get("resourceVersion")}
        for key, o in _objects().items()
    }
    _snapshot_file().write_text(json.dumps(found, indent=1, sort_keys=True))
    print(f"snapshot of {byo_cluster.NAMESPACE}: {', '.join(sorted(found))}")


def check_untouched(only_other_team: bool = False) -> None:
    """Every object the snapshot holds is there with the same uid, generation, labels and
    spec, and distml never wrote it."""
    was = json.loads(_snapshot_file().read_text())
    now = {
        k: {**fingerprint(o), "rv": o["metadata"].get("resourceVersion")}
        for k, o in _objects().items()
    }
    problems = []
    for key, before in sorted(was.items()):
        if only_other_team and before["labels"] != OTHER_TEAM:
            continue
        after = now.get(key)
        if after is None:
            problems.append(f"{key} is gone")
            continue
        changed = [f for f in before if f != "rv" and before[f] != after[f]]
        if changed or after["distml_wrote"]:
            problems.append(f"{key} changed: {changed or 'written by distml'}")
        print(f"kept: {key} uid {after['uid']} resourceVersion {before['rv']} -> {after['rv']}")
    if problems:
        raise SystemExit("distml touched what is not its own:\n  " + "\n  ".join(problems))
    print(f"untouched: {len(was)} objects of others in {byo_cluster.NAMESPACE}")


def check_second_gone() -> None:
    """The second work dir's `down` removed its own objects and nothing of the other
    team's."""
    instance = json.loads((second_workdir() / "state.json").read_text())["instance"]
    left = [
        k
        for k, o in _objects().items()
        if (o["metadata"].get("labels") or {}).get(INSTANCE_LABEL) == instance
    ]
    if left:
        raise SystemExit(f"the second work dir's down left {left}")
    check_untouched(only_other_team=True)
    print(f"the second work dir's objects (instance {instance}) are gone; the team's kept")


def expect_refusal(text: str, command: list[str]) -> str:
    """Run a distml command that must refuse: a non-zero exit whose message holds ``text``
    (and, for a refused `up`, names the other team and the second work dir)."""
    if command[:1] == ["invoke"]:
        command = [sys.executable, "-m", "invoke", *command[1:]]
    print("+ (must refuse) " + " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    said = done.stdout + done.stderr
    print(said, flush=True)
    wanted = [text]
    if text == REFUSED_NAMES:
        instance = json.loads((second_workdir() / "state.json").read_text())["instance"]
        wanted += ["labels team=other", f"instance {instance}", "INVOKE_CLUSTER_NAMESPACE"]
    missing = [w for w in wanted if w not in said]
    if done.returncode == 0 or missing:
        raise SystemExit(f"expected a refusal saying {missing or wanted}; exit {done.returncode}")
    print(f"refused as it must (exit {done.returncode})")
    return said


def main(argv: list[str]) -> int:
    commands = {
        "other-team": other_team,
        "check-untouched": check_untouched,
        "check-second-gone": check_second_gone,
    }
    if len(argv) >= 4 and argv[0] == "expect-refusal" and argv[2] == "--":
        expect_refusal(argv[1], argv[3:])
        return 0
    if len(argv) != 1 or argv[0] not in commands:
        print(
            "usage: python -m integration.tenants "
            + " | ".join(commands)
            + " | expect-refusal TEXT -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    commands[argv[0]]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
