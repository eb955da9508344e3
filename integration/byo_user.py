"""The namespace-only user of the bring-your-own run (``integration.byo``): the usual user
of a shared cluster, whose rights end at one namespace.

- ``add``: the admin makes namespace ``OWN_NAMESPACE``, a ServiceAccount ``alice`` there
  and a RoleBinding to the built-in ClusterRole ``admin`` in it, nothing cluster-wide; a
  kubeconfig context ``alice@byo`` with that account's token, whose server is a loopback
  proxy on a fixed port (``integration.apiproxy``) in front of the cluster's API server.
- ``check-nothing-written``: after ``up`` was refused for want of rights, no object of
  distml's is in the namespace.
- ``apply-role FILE``: the admin applies what ``invoke access-role --out FILE`` wrote.
- ``repoint``: a second cluster where alice has the same rights, and her context's CA and
  token replaced by that cluster's, behind the same URL (the proxy re-pointed): the work
  dir set up on the first refuses it, and writes nothing there; then all is put back.
- ``remove``: the proxy stopped, the kubeconfig entries deleted (teardown).
Stdlib only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from integration import byo_cluster, tenants
from integration.byo_cluster import BUDGET, CONTEXT, OWN_NAMESPACE, kubectl, run

USER = "alice"
USER_CONTEXT = f"{USER}@byo"
PROXY_CLUSTER = "byo-proxy"
PROXY_PORT = 16443
SECOND_CLUSTER = "distml-byo-2"
PART_OF = "app.kubernetes.io/part-of=distml"  # k8s.manifests.names.COMMON_LABELS
# What distml says (runtime.cluster.access_check, runtime.cluster.identity).
REFUSED_RIGHTS = "lacks the rights distml needs in namespace"
REFUSED_CLUSTER = "now points at another cluster"
ACCESS_ROLE = "distml-user"  # k8s.client.access.ROLE_NAME: each user's is distml-user-<user>
DISTML_KINDS = "all,pvc,configmaps,serviceaccounts,roles,rolebindings"


def _file(name: str) -> Path:
    return byo_cluster.workdir() / name


def cluster_entry(context: str, kubeconfig: Path | None = None) -> tuple[str, str]:
    """The API server's URL and CA (base64 PEM) that ``context`` names."""
    where = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    config = json.loads(run(["kubectl", *where, "config", "view", "--raw", "-o", "json"]))
    ctx = next(c["context"] for c in config["contexts"] if c["name"] == context)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
    return cluster["server"], cluster["certificate-authority-data"]


def host_port(server: str) -> str:
    """``https://127.0.0.1:39191`` -> ``127.0.0.1:39191``."""
    return server.split("://", 1)[-1].rstrip("/")


def grant_admin(k: list[str]) -> str:
    """In the cluster ``k`` (a kubectl command line) reaches: the namespace, the account,
    ``admin`` in that namespace alone; the account's token."""
    ns = ["-n", OWN_NAMESPACE]
    run([*k, "create", "namespace", OWN_NAMESPACE])
    run([*k, *ns, "create", "serviceaccount", USER])
    run(
        [
            *k,
            *ns,
            "create",
            "rolebinding",
            f"{USER}-admin",
            "--clusterrole=admin",
            f"--serviceaccount={OWN_NAMESPACE}:{USER}",
        ]
    )
    return run([*k, *ns, "create", "token", USER, "--duration=6h"], shown="token").strip()


def _credentials(ca_b64: str, token: str) -> None:
    """alice's context: the proxy's URL, this CA, this token."""
    ca = _file("user-ca.crt")
    ca.write_bytes(base64.b64decode(ca_b64))
    server = f"https://127.0.0.1:{PROXY_PORT}"
    run(
        [
            "kubectl",
            "config",
            "set-cluster",
            PROXY_CLUSTER,
            f"--server={server}",
            f"--certificate-authority={ca}",
            "--embed-certs=true",
        ]
    )
    run(["kubectl", "config", "set-credentials", USER_CONTEXT, f"--token={token}"], shown="token")
    run(
        [
            "kubectl",
            "config",
            "set-context",
            USER_CONTEXT,
            f"--cluster={PROXY_CLUSTER}",
            f"--user={USER_CONTEXT}",
            f"--namespace={OWN_NAMESPACE}",
        ]
    )


def _start_proxy(target: str) -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", PROXY_PORT)) == 0:
            raise SystemExit(f"port {PROXY_PORT} is in use: the user's proxy needs it")
    _file("proxy-target").write_text(target + "\n")
    log = open(_file("proxy.log"), "w")  # noqa: SIM115  (the proxy keeps it)
    proc = subprocess.Popen(
        [sys.executable, "-m", "integration.apiproxy", str(PROXY_PORT), str(_file("proxy-target"))],
        stdout=log,
        stderr=log,
        start_new_session=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    _file("proxy.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", PROXY_PORT)) == 0:
                return
        if proc.poll() is not None:
            raise SystemExit(f"the proxy exited {proc.returncode}: {_file('proxy.log')}")
        time.sleep(0.2)
    raise SystemExit(f"the proxy did not listen on 127.0.0.1:{PROXY_PORT}")


def add() -> None:
    token = grant_admin(["kubectl", "--context", CONTEXT])
    server, ca = cluster_entry(CONTEXT)
    _start_proxy(host_port(server))
    _credentials(ca, token)
    _file("user-token").write_text(token)
    _file("user-token").chmod(0o600)
    who = run(["kubectl", "--context", USER_CONTEXT, "auth", "whoami", "-o", "json"])
    print(f"user: {json.loads(who)['status']['userInfo']['username']} at {USER_CONTEXT}")
    # A namespace's own object is authorized in that namespace: ask in kube-system.
    for verb, what in (("list", "nodes"), ("get", "namespaces/kube-system")):
        allowed = subprocess.run(
            [
                "kubectl",
                "--context",
                USER_CONTEXT,
                "-n",
                "kube-system",
                "auth",
                "can-i",
                verb,
                what,
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if allowed != "no":
            raise SystemExit(f"{USER} may {verb} {what}: the user is not namespace-only")
    print(f"{USER}: admin in {OWN_NAMESPACE} only (no nodes, no kube-system)")


def distml_objects(k: list[str]) -> list[str]:
    """distml's objects in the namespace, but the Role and RoleBinding the admin applied
    from `invoke access-role` (labelled distml's too)."""
    out = run([*k, "-n", OWN_NAMESPACE, "get", DISTML_KINDS, "-l", PART_OF, "-o", "name"])
    return [o for o in out.split() if not o.rpartition("/")[2].startswith(f"{ACCESS_ROLE}-")]


def check_nothing_written() -> None:
    left = distml_objects(["kubectl", "--context", CONTEXT])
    if left:
        raise SystemExit(f"a refused up wrote: {left}")
    print(f"nothing of distml's in {OWN_NAMESPACE}: the refusal came before any write")


def apply_role(path: str) -> None:
    text = Path(path).read_text()
    print(text)
    kubectl("-n", OWN_NAMESPACE, "apply", "-f", path)
    print(f"the admin applied {path} in {OWN_NAMESPACE}")


def repoint(role_file: str) -> None:
    config = _file("second-kubeconfig")
    node_image = _file("node-image").read_text().strip()
    run(
        [
            "kind",
            "create",
            "cluster",
            "--name",
            SECOND_CLUSTER,
            "--image",
            node_image,
            "--kubeconfig",
            str(config),
            "--wait",
            "300s",
        ]
    )
    try:
        k2 = ["kubectl", "--kubeconfig", str(config)]
        token2 = grant_admin(k2)
        run([*k2, "-n", OWN_NAMESPACE, "apply", "-f", role_file])  # the same rights there
        server2, ca2 = cluster_entry(f"kind-{SECOND_CLUSTER}", config)
        _file("proxy-target").write_text(host_port(server2) + "\n")
        _credentials(ca2, token2)
        command = [sys.executable, "-m", "invoke", "train-all", *BUDGET]
        said = tenants.expect_refusal(REFUSED_CLUSTER, command)
        left = distml_objects(k2)
        if left:
            raise SystemExit(f"distml wrote to the other cluster: {left}")
        print(
            f"refused: https://127.0.0.1:{PROXY_PORT} now reaches {SECOND_CLUSTER}, its CA "
            f"differs; nothing written there ({len(said.splitlines())} lines said)"
        )
    finally:
        server, ca = cluster_entry(CONTEXT)
        _file("proxy-target").write_text(host_port(server) + "\n")
        _credentials(ca, _file("user-token").read_text())
        subprocess.run(
            ["kind", "delete", "cluster", "--name", SECOND_CLUSTER, "--kubeconfig", str(config)]
        )


def remove() -> None:
    pid_file = _file("proxy.pid")
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        pid_file.unlink()
    for args in (
        ["delete-context", USER_CONTEXT],
        ["delete-cluster", PROXY_CLUSTER],
        ["delete-user", USER_CONTEXT],
    ):
        subprocess.run(["kubectl", "config", *args], capture_output=True)
    for name in ("user-token", "user-ca.crt"):
        _file(name).unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    commands = {"add": add, "check-nothing-written": check_nothing_written, "remove": remove}
    if len(argv) == 2 and argv[0] in ("apply-role", "repoint"):
        (apply_role if argv[0] == "apply-role" else repoint)(argv[1])
        return 0
    if len(argv) != 1 or argv[0] not in commands:
        usage = " | ".join([*commands, "apply-role FILE", "repoint ROLE_FILE"])
        print(f"usage: python -m integration.byo_user {usage}", file=sys.stderr)
        return 2
    commands[argv[0]]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
