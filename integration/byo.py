"""``nox -s integration -- existing``: distml on a cluster it did not create.

A user's cluster, made here the way its admin would: kind with one control-plane and two
workers (``python -m integration.byo setup``), Debian's ``docker-registry`` on this
machine as the registry (pushed to as ``localhost:5001``, which every node's containerd
maps to the registry through the kind network's gateway, as kind's local-registry guide
does), metrics-server installed by the admin (kind's kubelets serve self-signed
certificates: ``--kubelet-insecure-tls`` is the admin's call, not distml's) and an
unrelated Deployment. distml then runs on it through ``--runtime existing``; the checks
(``python -m integration.byo check-placement|check-kept``) hold the run to what it must
leave; ``teardown`` deletes the cluster and stops the registry. Stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from integration import byo_user, tenants
from integration.byo_cluster import (
    BUDGET,
    BYSTANDER,
    BYSTANDER_IMAGE,
    CERTS_D,
    CLUSTER,
    CONTEXT,
    CPU_REQUEST,
    LOCAL_PATH_CONFIG,
    METRICS_SERVER,
    NAMESPACE,
    OPERATORS,
    OWN_NAMESPACE,
    REGISTRY,
    REGISTRY_PORT,
    RWX,
    SHARED_CLASS,
    SHARED_PATH,
    kubectl,
    run,
    workdir,
)


def kind_config(shared: Path) -> str:
    """One control-plane, two workers; the same host directory at /shared in each."""
    mount = f"    extraMounts:\n      - hostPath: {shared}\n        containerPath: {SHARED_PATH}\n"
    nodes = "".join(f"  - role: {role}\n{mount}" for role in ("control-plane", "worker", "worker"))
    return f"kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n{nodes}"


def registry_config(storage: Path, address: str) -> str:
    return (
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {storage}\n"
        f"http:\n  addr: {address}\n"
    )


def hosts_toml(gateway: str) -> str:
    """A node's containerd: ``localhost:5001`` is the registry on this machine."""
    return (
        f'server = "http://{gateway}:{REGISTRY_PORT}"\n\n'
        f'[host."http://{gateway}:{REGISTRY_PORT}"]\n  capabilities = ["pull", "resolve"]\n'
    )


def _up(context: str, data_dir: str | None) -> list[str]:
    source = ["--source-dir", data_dir] if data_dir else []
    up = ["invoke", "up", "--runtime", "existing", "--context", context]
    return [*up, "--serving-mode", "standard", *source]


def steps(data_dir: str | None) -> list[list[str]]:
    """The user's commands on the cluster, with the other tenants and the checks between."""
    up = _up(CONTEXT, data_dir)  # the admin's context: cluster-admin
    user_up = _up(byo_user.USER_CONTEXT, data_dir)  # admin of OWN_NAMESPACE only
    role = str(workdir() / "distml-user-role.yaml")
    load = ["invoke", "loadtest", "--concurrency", "5", "--duration", "60s", "--expect-scale-out"]
    check = ["python", "-m", "integration.byo"]
    tenant = ["python", "-m", "integration.tenants"]
    user = ["python", "-m", "integration.byo_user"]
    copies = ["python", "-m", "integration.copies"]
    shared = f"INVOKE_CLUSTER_NAMESPACE={NAMESPACE}"
    return [
        # The base made here (no registry to pull python:3.11 from), as `nox -s image` does.
        ["invoke", "build", "--base", "local", "--push", REGISTRY],
        # The other tenants of the shared namespace: a second distml work dir (it installs
        # what is missing), then another team's TFJob train-cnn and InferenceService tf-mnist.
        [*tenants.second_env(), *up, "--install-operators"],
        [*tenant, "other-team"],
        # This work dir there: refused before any write, naming both; it follows the advice.
        [shared, *tenant, "expect-refusal", tenants.REFUSED_NAMES, "--", *up],
        # A user whose rights end at a namespace of their own (ClusterRole admin there): told
        # what to ask for before any write; the admin applies the Role distml wrote.
        [*user, "add"],
        [*tenant, "expect-refusal", byo_user.REFUSED_RIGHTS, "--", *user_up],
        [*user, "check-nothing-written"],
        ["invoke", "access-role", "--context", byo_user.USER_CONTEXT, "--out", role],
        [*user, "apply-role", role],
        user_up,  # the operators found by API discovery and a dry run, not by their namespaces
        user_up,  # finds everything: writes nothing new
        [*user, "repoint", role],  # the same context and URL, another cluster: refused
        ["invoke", "train-all", *BUDGET],  # ReadWriteOnce (kind's default class)
        [*check, "check-placement"],
        [*copies, "copied-workdir"],  # a cp -r of the work dir: refused, the original intact
        ["invoke", "deploy", "--max-replicas", "3"],
        load,
        ["invoke", "status"],
        [*copies, "down-keeps-impostor"],  # the user's down; a copied label is not proof
        [*check, "check-kept"],
        [*tenant, "check-untouched"],  # the team's objects and the second work dir's
        [*tenants.second_env(), "invoke", "down"],
        [*tenant, "check-second-gone"],
        # As the admin, with Argo: the workflow's served name taken by another team after
        # submit, refused in its serving step. ReadWriteMany: a job's two workers on the
        # two worker nodes.
        [RWX, *up, "--storage-class", SHARED_CLASS, "--install-operators", "--with-argo"],
        ["python", "-m", "integration.workflow_race", CONTEXT],
        ["invoke", "train", "--model-type", "cnn", *BUDGET],
        [*check, "check-spread"],
        ["invoke", "down"],
        [*check, "check-kept"],
    ]


def split_env(step: list[str]) -> tuple[dict[str, str], list[str]]:
    """A step's own settings (leading ``NAME=value`` items) and its command."""
    own = {}
    for item in step:
        name, eq, value = item.partition("=")
        if not (eq and name.isidentifier() and name.isupper()):
            break
        own[name] = value
    return own, step[len(own) :]


def env(data_dir: str | None, manifest_mirror: str | None) -> dict[str, str]:
    out = {
        "INVOKE_RUNTIME": "existing",
        "INVOKE_WORKDIR": str(workdir() / "distml"),
        "INVOKE_CLUSTER_NAMESPACE": OWN_NAMESPACE,
        "INVOKE_CLUSTER_WORKER_CPU": CPU_REQUEST,
        "INVOKE_CLUSTER_PREDICTOR_CPU": CPU_REQUEST,
    }
    if data_dir:
        out["DISTML_DATA_DIR"] = data_dir
    if manifest_mirror:
        out["INVOKE_CLUSTER_MANIFEST_MIRROR"] = manifest_mirror
    return out


# ------------------------------------------------------------------- the admin's part


def setup(node_image: str, registry_binary: str, mirror: str) -> None:
    wd = workdir()
    (wd / "shared").mkdir(parents=True, exist_ok=True)
    (wd / "kind.yaml").write_text(kind_config(wd / "shared"))
    (wd / "node-image").write_text(node_image)  # for integration.tenants' second cluster
    run(
        [
            "kind",
            "create",
            "cluster",
            "--name",
            CLUSTER,
            "--image",
            node_image,
            "--config",
            str(wd / "kind.yaml"),
            "--wait",
            "300s",
        ]
    )
    network = json.loads(run(["docker", "network", "inspect", "kind"]))[0]
    gateway = next(c["Gateway"] for c in network["IPAM"]["Config"] if "." in c.get("Gateway", ""))
    _start_registry(registry_binary, gateway)
    nodes = run(["kind", "get", "nodes", "--name", CLUSTER]).split()
    for node in nodes:
        script = f"mkdir -p {CERTS_D}/{REGISTRY} && cat > {CERTS_D}/{REGISTRY}/hosts.toml"
        run(["docker", "exec", "-i", node, "sh", "-c", script], stdin=hosts_toml(gateway))
    from k8s.install import versions

    kubectl(
        "apply", "-f", str(Path(mirror) / METRICS_SERVER) if mirror else versions.METRICS_SERVER_URL
    )
    patch = (
        '[{"op":"add","path":"/spec/template/spec/containers/0/args/-",'
        '"value":"--kubelet-insecure-tls"}]'
    )
    kubectl(
        "-n", "kube-system", "patch", "deployment", "metrics-server", "--type", "json", "-p", patch
    )
    _shared_class()
    ns, name = BYSTANDER
    kubectl("-n", ns, "create", "deployment", name, f"--image={BYSTANDER_IMAGE}")
    kubectl("-n", ns, "rollout", "status", f"deployment/{name}", "--timeout=180s")
    kubectl("-n", "kube-system", "rollout", "status", "deployment/metrics-server", "--timeout=300s")


def _shared_class() -> None:
    """The ReadWriteMany class: local-path's config per class, the provisioner restarted
    to read it now, then the StorageClass."""
    patch = json.dumps({"data": {"config.json": json.dumps(LOCAL_PATH_CONFIG)}})
    ns = ["-n", "local-path-storage"]
    kubectl(*ns, "patch", "configmap", "local-path-config", "--type", "merge", "-p", patch)
    kubectl(*ns, "rollout", "restart", "deployment/local-path-provisioner")
    kubectl(*ns, "rollout", "status", "deployment/local-path-provisioner", "--timeout=180s")
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": SHARED_CLASS},
        "provisioner": "rancher.io/local-path",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }
    run(["kubectl", "--context", CONTEXT, "apply", "-f", "-"], stdin=json.dumps(storage_class))


def _start_registry(binary: str, gateway: str) -> None:
    """The registry on this machine, for the nodes (through the gateway) and for Docker
    (as localhost): it listens on both through 0.0.0.0."""
    wd = workdir()
    config = wd / "registry.yml"
    config.write_text(registry_config(wd / "registry", f"0.0.0.0:{REGISTRY_PORT}"))
    log = open(wd / "registry.log", "w")  # noqa: SIM115  (the registry keeps it)
    proc = subprocess.Popen(
        [binary, "serve", str(config)], stdout=log, stderr=log, start_new_session=True
    )
    (wd / "registry.pid").write_text(str(proc.pid))
    for _ in range(60):
        if (
            subprocess.run(
                ["curl", "-fs", f"http://{gateway}:{REGISTRY_PORT}/v2/"], capture_output=True
            ).returncode
            == 0
        ):
            return
        if proc.poll() is not None:
            raise SystemExit(f"the registry exited {proc.returncode}: {wd / 'registry.log'}")
        time.sleep(0.5)
    raise SystemExit(f"the registry did not answer on {gateway}:{REGISTRY_PORT}")


def teardown() -> None:
    byo_user.remove()
    for name in (CLUSTER, byo_user.SECOND_CLUSTER):
        subprocess.run(["kind", "delete", "cluster", "--name", name])
    shutil.rmtree(workdir() / "shared", ignore_errors=True)
    pid_file = workdir() / "registry.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        pid_file.unlink()
    shutil.rmtree(workdir() / "registry", ignore_errors=True)  # the pushed image


# ------------------------------------------------------------------- the checks


def _pods(selector: str) -> list[dict]:
    out = kubectl("-n", OWN_NAMESPACE, "get", "pods", "-l", selector, "-o", "json")
    return json.loads(out)["items"]


def check_placement() -> None:
    """ReadWriteOnce (kind's local-path): every pod that mounted the volume ran on one
    node, a worker (the control-plane is tainted)."""
    pods = _pods("distml/volume")
    nodes = {p["spec"].get("nodeName") for p in pods}
    print(f"{len(pods)} pods mounted the volume, on nodes: {sorted(map(str, nodes))}")
    if not pods or len(nodes) != 1 or None in nodes:
        raise SystemExit("the pods that mount the ReadWriteOnce volume are not on one node")
    print("placement: ok (co-located with the ReadWriteOnce volume)")


def check_spread() -> None:
    """ReadWriteMany: train-cnn's two workers ran on two different nodes."""
    pods = _pods("distml/model=cnn,app.kubernetes.io/component=train")
    nodes = sorted(str(p["spec"].get("nodeName")) for p in pods)
    print(f"train-cnn's workers ran on: {nodes}")
    if len(pods) != 2 or len(set(nodes)) != 2:
        raise SystemExit("the ReadWriteMany job's two workers did not spread over two nodes")
    print("placement: ok (spread over nodes with the ReadWriteMany volume)")


def check_kept() -> None:
    """After `invoke down`: the cluster, its operators and the bystander are there; no
    distml object is left in the namespace."""
    for ns, name in (*OPERATORS, BYSTANDER):
        state = json.loads(kubectl("-n", ns, "get", "deployment", name, "-o", "json"))
        ready = (state.get("status") or {}).get("availableReplicas") or 0
        print(f"kept: deployment {ns}/{name}, {ready} available")
        if not ready:
            raise SystemExit(f"deployment {ns}/{name} is not available after down")
    left = kubectl(
        "-n",
        OWN_NAMESPACE,
        "get",
        "all,pvc,tfjobs,inferenceservices",
        "-l",
        "app.kubernetes.io/part-of=distml",
        "-o",
        "name",
    ).split()
    if left:
        raise SystemExit(f"down left distml objects: {left}")
    print("kept: cluster, operators and bystander; distml's objects gone")


def main(argv: list[str]) -> int:
    commands = {
        "check-placement": check_placement,
        "check-spread": check_spread,
        "check-kept": check_kept,
        "teardown": teardown,
    }
    if len(argv) == 4 and argv[0] == "setup":
        setup(*argv[1:])
        return 0
    if len(argv) != 1 or argv[0] not in commands:
        print(
            "usage: python -m integration.byo setup NODE_IMAGE REGISTRY_BIN MIRROR_OR_'' | "
            + " | ".join(commands),
            file=sys.stderr,
        )
        return 2
    commands[argv[0]]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
