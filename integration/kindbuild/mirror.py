"""A registry mirror for images a manifest pulls with ``imagePullPolicy: Always``.

KServe's kserve.yaml (v0.20.0) pulls its three controllers ``Always``: the kubelet asks
containerd to pull even when the image is in the node, and with no registry the pull fails
(``ErrImagePull``). So the kind nodes get a mirror for the registries those images name: a
registry container (Debian's ``docker-registry`` on the cached Debian base) on kind's Docker
network holding exactly the images built here, and a ``hosts.toml`` per registry in each
node's ``/etc/containerd/certs.d``. A name not in the mirror falls through to the real
registry, as it would without it. The manifests stay as published.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from integration.kindbuild import cache, docker, rootfs
from integration.kindbuild.run import BuildError, run

PORT = 5000
CONFIG = """version: 0.1
storage:
  filesystem:
    rootdirectory: /var/lib/registry
http:
  addr: :5000
"""
CERTS_D = "/etc/containerd/certs.d"
# kind v0.29's containerd config sets no config_path; this makes containerd read CERTS_D.
CONFIG_PATH = f'\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "{CERTS_D}"\n'


def name(cluster: str) -> str:
    return f"distml-kind-mirror-{cluster}"


def hosts_toml(registry: str, mirror: str) -> str:
    """containerd's hosts file for ``registry``: ask ``mirror`` first (plain HTTP)."""
    server = "https://registry-1.docker.io" if registry == "docker.io" else f"https://{registry}"
    return (
        f'server = "{server}"\n\n[host."http://{mirror}:{PORT}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
    )


def split(image: str) -> tuple[str, str]:
    """``quay.io/brancz/x:v1`` -> (``quay.io``, ``brancz/x:v1``); Docker Hub's short names
    (``kserve/x:v1``) -> (``docker.io``, ``kserve/x:v1``)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "docker.io", image


def _deb_version() -> str:
    out = run(["apt-cache", "policy", "docker-registry"], capture=True)
    for line in out.splitlines():
        if line.strip().startswith("Candidate:"):
            return line.split()[1]
    raise BuildError("no docker-registry package in apt's lists: apt-get update")


def image() -> tuple[str, cache.Result]:
    """``distml-kind/registry:<deb version>``: Debian's registry on the cached netbase."""
    netbase, netbase_entry = rootfs.net_base()
    version = _deb_version().replace(":", "_").replace("+", "_")
    tag = f"distml-kind/registry:{version}"

    def build(out: Path) -> None:
        run(["apt-get", "download", "docker-registry"], cwd=out)
        (deb,) = out.glob("docker-registry_*.deb")
        run(["dpkg-deb", "-x", str(deb), str(out / "pkg")])
        context = out / "context"
        context.mkdir()
        shutil.copy2(out / "pkg/usr/bin/docker-registry", context / "docker-registry")
        (context / "config.yml").write_text(CONFIG)
        (context / "Dockerfile").write_text(
            f"FROM {netbase}\nCOPY docker-registry /usr/bin/\nCOPY config.yml /etc/registry.yml\n"
            'ENTRYPOINT ["/usr/bin/docker-registry", "serve", "/etc/registry.yml"]\n'
        )
        rootfs.load(netbase, netbase_entry)
        docker.build(context, tag)
        docker.save([tag], out / "image.tar")
        shutil.rmtree(context)
        shutil.rmtree(out / "pkg")

    result = cache.cached("mirror-registry", version, build)
    docker.ensure_loaded([tag], result.path / "image.tar")
    return tag, result


def _host_port(container: str) -> str:
    out = run([docker.DOCKER, "port", container, f"{PORT}/tcp"], capture=True)
    return out.split()[0].rsplit(":", 1)[1]


def _wait(port: str, deadline_s: float = 30) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        probe = ["curl", "-fsS", f"http://127.0.0.1:{port}/v2/"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return
        time.sleep(1)
    raise BuildError(f"the mirror registry did not answer on 127.0.0.1:{port}")


def start(cluster: str) -> str:
    """The mirror for ``cluster`` on kind's network (started unless running); its name."""
    tag, _ = image()
    container = name(cluster)
    argv = [docker.DOCKER, "inspect", "-f", "{{.State.Running}}", container]
    state = subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()
    if state != "true":
        stop(cluster)
        # Not kind's own cluster label: kind would take the mirror for a node.
        where = ["--network", "kind", "-p", f"127.0.0.1::{PORT}"]
        label = f"distml.kind.mirror={cluster}"
        run(
            [docker.DOCKER, "run", "-d", "--name", container, *where, "--label", label, tag],
            capture=True,
        )
    return container


def push(container: str, images: dict[str, Path]) -> list[str]:
    """Each image (tag -> its cached archive) into the mirror, under its path without the
    registry; returns the registries they name."""
    port = _host_port(container)
    _wait(port)
    registries = []
    for tag, archive in images.items():
        docker.ensure_loaded([tag], archive)
        registry, path = split(tag)
        local = f"127.0.0.1:{port}/{path}"
        run([docker.DOCKER, "tag", tag, local])
        run([docker.DOCKER, "push", local], capture=True, heavy=True)
        run([docker.DOCKER, "rmi", local], capture=True)
        registries.append(registry)
    return sorted(set(registries))


def configure_nodes(nodes: list[str], mirror: str, registries: list[str]) -> None:
    """``hosts.toml`` for each registry in each node; containerd is restarted once to read
    them (kind's config has no config_path) and picks up later changes without one."""
    for node in nodes:
        for registry in registries:
            path = f"{CERTS_D}/{registry}/hosts.toml"
            script = f"mkdir -p {CERTS_D}/{registry} && cat > {path}"
            stdin = hosts_toml(registry, mirror).encode()
            run([docker.DOCKER, "exec", "-i", node, "sh", "-c", script], stdin=stdin)
        config = "/etc/containerd/config.toml"
        script = (
            f"grep -q config_path {config} || {{ cat >> {config}; systemctl restart containerd; }}"
        )
        run([docker.DOCKER, "exec", "-i", node, "sh", "-c", script], stdin=CONFIG_PATH.encode())


def serve(cluster: str, nodes: list[str], images: dict[str, Path]) -> dict:
    """Everything above for ``cluster``: what was mirrored, for the report."""
    container = start(cluster)
    registries = push(container, images)
    configure_nodes(nodes, container, registries)
    return {"mirror": container, "registries": registries, "images": sorted(images)}


def stop(cluster: str) -> None:
    """Remove ``cluster``'s mirror (``kind delete cluster`` does not know it)."""
    argv = [docker.DOCKER, "rm", "-f", "-v", name(cluster)]
    subprocess.run(argv, capture_output=True, check=False)
