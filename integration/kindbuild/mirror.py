"""A registry mirror inside the offline node, for images a manifest pulls ``Always``.

KServe's kserve.yaml (v0.20.0) pulls its three controllers ``Always``: the kubelet asks
containerd to pull even when the image is in the node, and with no registry the pull fails
(``ErrImagePull``). So the offline node (:mod:`integration.kindbuild.stacknode`) carries
its own: Debian's ``docker-registry`` as a systemd unit on ``127.0.0.1:5000``, its storage
filled at build time with exactly those images, and a ``hosts.toml`` per registry in
``/etc/containerd/certs.d`` that sends containerd there first. A name not in the mirror
falls through to the real registry, as it would without it. The manifests stay as
published, and nothing runs beside the cluster: ``kind delete cluster`` removes it all.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from integration.kindbuild import cache, docker, pins
from integration.kindbuild.run import run

ADDRESS = "127.0.0.1:5000"
STORAGE = "/var/lib/distml-mirror"
BINARY = "/usr/local/bin/distml-mirror"
CONFIG_FILE = "/etc/distml-mirror.yml"
CONFIG = f"""version: 0.1
storage:
  filesystem:
    rootdirectory: {STORAGE}
http:
  addr: {ADDRESS}
"""
UNIT_NAME = "distml-mirror.service"
UNIT = f"""[Unit]
Description=distml's registry mirror: the images kind's node pulls Always, baked in
Before=containerd.service

[Service]
ExecStart={BINARY} serve {CONFIG_FILE}
Restart=always

[Install]
WantedBy=multi-user.target
"""
# What apt fetches for the binary, and its cache entry (component, version).
DEB = f"docker-registry={pins.MIRROR_REGISTRY_DEB}"
BINARY_ENTRY = ("mirror-bin", pins.MIRROR_REGISTRY_DEB.replace(":", "_").replace("+", "_"))
CERTS_D = "/etc/containerd/certs.d"
# kind v0.29's containerd config sets no config_path; this makes containerd read CERTS_D.
CONFIG_PATH = f'\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "{CERTS_D}"\n'


def hosts_toml(registry: str) -> str:
    """containerd's hosts file for ``registry``: ask the mirror first (plain HTTP)."""
    server = "https://registry-1.docker.io" if registry == "docker.io" else f"https://{registry}"
    return (
        f'server = "{server}"\n\n[host."http://{ADDRESS}"]\n  capabilities = ["pull", "resolve"]\n'
    )


def split(image: str) -> tuple[str, str]:
    """``quay.io/brancz/x:v1`` -> (``quay.io``, ``brancz/x:v1``); Docker Hub's short names
    (``kserve/x:v1``) -> (``docker.io``, ``kserve/x:v1``)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "docker.io", image


def binary() -> cache.Result:
    """``<cache>/mirror-bin-<deb version>/docker-registry``: Debian's registry at
    ``pins.MIRROR_REGISTRY_DEB`` (dynamically linked against glibc only, which kind's
    Debian node has). apt is asked only when the entry is built."""

    def build(out: Path) -> None:
        run(["apt-get", "download", DEB], cwd=out)
        (deb,) = out.glob("docker-registry_*.deb")
        run(["dpkg-deb", "-x", str(deb), str(out / "pkg")])
        shutil.copy2(out / "pkg/usr/bin/docker-registry", out / "docker-registry")
        shutil.rmtree(out / "pkg")
        deb.unlink()

    return cache.cached(*BINARY_ENTRY, build)


def bake(container: str, exec_in: Callable[[str, str], str], images: list[str]) -> None:
    """The mirror into builder ``container`` (its containerd running, ``images`` imported):
    binary, config and unit; each image pushed into the storage; containerd pointed at it."""
    files: dict[str, Path | str] = {
        BINARY: binary().path / "docker-registry",
        CONFIG_FILE: CONFIG,
        f"/etc/systemd/system/{UNIT_NAME}": UNIT,
    }
    for path, content in files.items():
        if isinstance(content, Path):
            run([docker.DOCKER, "cp", str(content), f"{container}:{path}"])
        else:
            run([docker.DOCKER, "exec", "-i", container, "tee", path], stdin=content.encode())
    wants = "/etc/systemd/system/multi-user.target.wants"
    exec_in(container, f"chmod 755 {BINARY} && ln -sf ../{UNIT_NAME} {wants}/{UNIT_NAME}")
    exec_in(container, f"nohup {BINARY} serve {CONFIG_FILE} > /tmp/mirror.log 2>&1 &")
    wait = f"for _ in $(seq 30); do curl -fs http://{ADDRESS}/v2/ && exit 0; sleep 1; done; exit 1"
    exec_in(container, wait)
    ctr = "ctr -n k8s.io images"
    for image in images:
        registry, path = split(image)
        source, local = f"{registry}/{path}", f"{ADDRESS}/{path}"
        exec_in(container, f"{ctr} tag {source} {local} && {ctr} push --plain-http {local}")
        exec_in(container, f"{ctr} rm {local}")
    for registry in sorted({split(i)[0] for i in images}):
        script = f"mkdir -p {CERTS_D}/{registry} && cat > {CERTS_D}/{registry}/hosts.toml"
        stdin = hosts_toml(registry).encode()
        run([docker.DOCKER, "exec", "-i", container, "sh", "-c", script], stdin=stdin)
    config = "/etc/containerd/config.toml"
    script = f"grep -q config_path {config} || cat >> {config}"
    run([docker.DOCKER, "exec", "-i", container, "sh", "-c", script], stdin=CONFIG_PATH.encode())
    exec_in(container, "pkill -x distml-mirror; rm -f /tmp/mirror.log")
