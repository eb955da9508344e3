"""The admin's cluster of the bring-your-own run (``integration.byo``): its names, the
namespaces its tenants share (``integration.tenants``), and the one way the run's own
commands are run against it. Stdlib only."""

from __future__ import annotations

import subprocess
from pathlib import Path

CLUSTER = "distml-byo"
CONTEXT = f"kind-{CLUSTER}"
# The namespace distml is first pointed at, which another team and a second distml work
# dir use too (integration.tenants): distml refuses it, and the run follows its advice to
# take a namespace of its own.
NAMESPACE = "ml-team"
OWN_NAMESPACE = "ml-team-a"
REGISTRY_PORT = 5001
REGISTRY = f"localhost:{REGISTRY_PORT}"
CPU_REQUEST = "100m"
BYSTANDER = ("default", "bystander")  # an unrelated Deployment down must leave
# The pause image kind's node runs every pod sandbox from: present in every node.
BYSTANDER_IMAGE = "registry.k8s.io/pause:3.10"
OPERATORS = (  # what --install-operators installs (standard mode), kept by down
    ("kubeflow", "training-operator"),
    ("cert-manager", "cert-manager-webhook"),
    ("kserve", "kserve-controller-manager"),
)
METRICS_SERVER = "metrics-server-v0.7.2/components.yaml"  # in the manifest mirror
# A ReadWriteMany class the admin adds: one host directory mounted at /shared in every node,
# served by kind's own local-path-provisioner (v0.0.30: per-class configs keyed by class
# name, a shared path gives PVs with no node affinity). Its provisioner is kind's
# rancher.io/local-path, which distml takes as ReadWriteOnce: the run says ReadWriteMany
# through cluster.volume_access, as a user of such a class would.
SHARED_CLASS = "shared-rwx"
SHARED_PATH = "/shared"
LOCAL_PATH_CONFIG = {
    "storageClassConfigs": {
        "standard": {
            "nodePathMap": [
                {
                    "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                    "paths": ["/var/local-path-provisioner"],
                }
            ]
        },
        SHARED_CLASS: {"sharedFileSystemPath": SHARED_PATH},
    }
}
RWX = "INVOKE_CLUSTER_VOLUME_ACCESS=ReadWriteMany"  # a step's own setting (noxfile splits it)
BUDGET = ["--epochs", "1", "--steps-per-epoch", "5"]
CERTS_D = "/etc/containerd/certs.d"


def workdir() -> Path:
    return Path(__file__).resolve().parents[1] / ".distml-byo"


def run(cmd: list[str], stdin: str | None = None, shown: str | None = None) -> str:
    """Run ``cmd``, print it (``shown``: a secret in it, printed as that word) and return
    its output; a failure ends the step with the command and what it said."""
    said = f"{cmd[0]} ... [{shown}]" if shown else " ".join(cmd)
    print("+ " + said, flush=True)
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{said} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def kubectl(*args: str) -> str:
    return run(["kubectl", "--context", CONTEXT, *args])
