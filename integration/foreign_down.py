"""``python -m integration.foreign_down``: another work dir's ``invoke down`` leaves the run's
cluster alone.

Run by ``nox -s integration`` after the first ``deploy``, with the run's settings
(environment) but a fresh, empty work dir (``INVOKE_WORKDIR`` in a temporary directory):
what a second checkout, or a mistyped ``INVOKE_WORKDIR``, would do. Every work dir names
its lab cluster alike, and only the one that made it may delete it
(runtime/cluster/lab_owner.py). It passes when that ``invoke down`` exits 0 and says it
kept the cluster, the cluster is still listed by its provider, its record still names the
run's work dir, and the InferenceService is still Ready. Exit 1 with what was seen
otherwise. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from integration.kind_run import CLUSTER, NAMESPACE, context, minikube_home, workdir

SERVICE = "tf-mnist"
RECORD = ("kube-system", "distml-cluster-owner")  # runtime.cluster.lab_owner's
TIMEOUT_S = 300


class StillThere(RuntimeError):
    """What was seen that says the cluster was touched."""


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, env=env, timeout=TIMEOUT_S
    )


def listed(provider: str) -> list[str]:
    """The command that lists ``provider``'s clusters (minikube: in the run's home)."""
    if provider == "k3d":
        return ["k3d", "cluster", "list", "-o", "json"]
    if provider == "minikube":
        home = f"MINIKUBE_HOME={minikube_home()}"
        return ["env", home, "minikube", "profile", "list", "-o", "json"]
    return ["kind", "get", "clusters"]


def is_listed(provider: str, out: str, cluster: str = CLUSTER) -> bool:
    """Whether ``listed(provider)``'s output names ``cluster``."""
    try:
        if provider == "k3d":
            return any(c.get("name") == cluster for c in json.loads(out or "[]"))
        if provider == "minikube":
            valid = json.loads(out or "{}").get("valid") or []
            return any(p.get("Name") == cluster for p in valid)
    except (ValueError, AttributeError):
        return False
    return cluster in out.split()


# What that `down` says: kind and k3d find the run's cluster and keep it; minikube's is
# not even found (it lives in the run's own MINIKUBE_HOME, not the fresh work dir's).
SAYS = {"minikube": f"cluster {CLUSTER}: not found, nothing to delete"}
KEPT = "kept, with everything in it"


def down_elsewhere(provider: str, invoke: list[str]) -> str:
    """``invoke down`` from a fresh work dir; what it said."""
    with tempfile.TemporaryDirectory(prefix="distml-foreign-") as tmp:
        env = {**os.environ, "INVOKE_WORKDIR": str(Path(tmp) / "workdir")}
        done = _run([*invoke, "down"], env)
    out = done.stdout + done.stderr
    if done.returncode != 0:
        raise StillThere(f"`invoke down` from a fresh work dir exited {done.returncode}: {out}")
    expected = SAYS.get(provider, KEPT)
    if expected not in out or "deleting cluster" in out:
        raise StillThere(f"`invoke down` from a fresh work dir did not say {expected!r}: {out}")
    return next(line for line in out.splitlines() if expected in line)


def check(provider: str, kube_context: str, invoke: list[str]) -> str:
    """Raise StillThere unless the cluster, its record and the service are as they were."""
    said = down_elsewhere(provider, invoke)
    found = _run(listed(provider))
    if found.returncode != 0 or not is_listed(provider, found.stdout):
        raise StillThere(f"cluster {CLUSTER} is gone from {provider}'s list: {found.stdout}")
    kubectl = ["kubectl", "--context", kube_context]
    ns, name = RECORD
    record = _run([*kubectl, "-n", ns, "get", "configmap", name, "-o", "jsonpath={.data.workdir}"])
    if record.stdout.strip() != str(workdir().resolve()):
        raise StillThere(
            f"ConfigMap {ns}/{name} names {record.stdout.strip()!r}, not the run's work dir "
            f"{workdir().resolve()} ({record.stderr.strip()})"
        )
    ready = '{.status.conditions[?(@.type=="Ready")].status}'
    isvc = _run(
        [*kubectl, "-n", NAMESPACE, "get", "inferenceservice", SERVICE, "-o", f"jsonpath={ready}"]
    )
    if isvc.stdout.strip() != "True":
        raise StillThere(
            f"InferenceService {SERVICE} is not Ready after another work dir's down: "
            f"{isvc.stdout.strip() or isvc.stderr.strip()}"
        )
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m integration.foreign_down", description=__doc__)
    provider = os.environ.get("INVOKE_RUNTIME") or "kind"
    parser.add_argument("--context", default=context(), help=f"kubeconfig context ({context()})")
    args = parser.parse_args(argv)
    invoke = [sys.executable, "-m", "invoke"]
    try:
        said = check(provider, args.context, invoke)
    except (StillThere, subprocess.TimeoutExpired) as e:
        print(f"foreign down: FAILED: {e}", file=sys.stderr)
        return 1
    print(f"foreign down: cluster {CLUSTER} and InferenceService {SERVICE} kept; it said: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
