"""The kind node image, assembled the way ``kind build node-image`` does it, minus the
registry: a container from the base image gets the Kubernetes binaries, ``/kind/version``
and kind's two manifests; containerd is started inside and every image archive built
here is imported into its ``k8s.io`` namespace; the container is committed.

The builder steps (start, import, commit) are also the offline node's
(:mod:`integration.kindbuild.stacknode`), which adds the controllers' images on top."""

from __future__ import annotations

import hashlib
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from integration.kindbuild import (
    cache,
    docker,
    images,
    kindsource,
    kubernetes,
    nodebase,
    pins,
    rootfs,
)
from integration.kindbuild.run import BuildError, run

TAG = f"distml-kind/node:{pins.KUBERNETES}"
IMPORT = [
    "ctr",
    "--namespace=k8s.io",
    "images",
    "import",
    "--all-platforms",
    "--no-unpack",
    "--digests",
    "-",
]
# What `kind create cluster` runs in a node; `docker commit` must restore it (the builder
# container ran `sleep`). The STOPSIGNAL is kind's: systemd stops cleanly on it.
ENTRYPOINT = 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]'
STOPSIGNAL = "STOPSIGNAL SIGRTMIN+3"


def exec_in(container: str, script: str) -> str:
    return run([docker.DOCKER, "exec", container, "bash", "-c", script], capture=True)


def _archives() -> list[Path]:
    """Every image archive the node needs, built (or found) first."""
    paths = [images.kube_images().path / f"{n}.tar" for n in pins.KUBERNETES_IMAGES]
    for step in (
        images.etcd,
        images.coredns,
        images.pause,
        images.kindnetd,
        images.local_path_provisioner,
        images.local_path_helper,
    ):
        paths.append(step().path / "image.tar")
    return paths


def start_containerd(container: str, deadline_s: float = 60) -> None:
    exec_in(container, "nohup containerd > /var/log/containerd-build.log 2>&1 &")
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        argv = [docker.DOCKER, "exec", container, "ctr", "version"]
        if os.system(shlex.join(argv) + " >/dev/null 2>&1") == 0:
            return
        time.sleep(1)
    raise BuildError(f"containerd did not start in {container} within {deadline_s:.0f}s")


def stop_containerd(container: str) -> None:
    exec_in(container, "pkill containerd; sleep 1; rm -f /var/log/containerd-build.log")


def import_archives(container: str, archives: list[Path]) -> list[str]:
    """Each archive into containerd's ``k8s.io`` namespace, pinned (kubelet's image GC
    leaves pinned images alone, as it does kind's own); returns every image name."""
    for archive in archives:
        run([docker.DOCKER, "exec", "-i", container, *IMPORT], stdin=archive.read_bytes())
    refs = exec_in(container, "ctr -n k8s.io images ls -q").split()
    for ref in refs:
        exec_in(container, f"ctr -n k8s.io images label {ref} io.cri-containerd.pinned=pinned")
    names = [r for r in refs if not r.startswith("sha256:")]
    print("\n".join(f"  {r}" for r in names), flush=True)
    return names


def _fill(container: str, bins: Path, archives: list[Path]) -> None:
    for name in ("kubeadm", "kubelet", "kubectl"):
        run([docker.DOCKER, "cp", str(bins / name), f"{container}:/usr/bin/{name}"])
    exec_in(container, "chown root:root /usr/bin/kube* && chmod 755 /usr/bin/kube*")
    exec_in(container, f"mkdir -p /kind/manifests && echo -n {pins.KUBERNETES} > /kind/version")
    for name, text in kindsource.manifests().items():
        argv = [docker.DOCKER, "exec", "-i", container, "tee", f"/kind/manifests/{name}"]
        run(argv, stdin=text.encode(), capture=True)
    start_containerd(container)
    import_archives(container, archives)
    stop_containerd(container)


def build_from(image: str, tag: str, out: Path, fill: Callable[[str], None]) -> None:
    """A privileged builder container from ``image``, ``fill(container)``, committed as
    ``tag`` with kind's entrypoint and stop signal, saved to ``out/image.tar``."""
    docker.check_privileged(image)
    name = f"distml-kind-nodebuild-{os.getpid()}"
    start = [docker.DOCKER, "run", "-d", "--privileged", "--name", name]
    run([*start, "--entrypoint", "sleep", image, "infinity"], capture=True)
    try:
        fill(name)
        changes = ["--change", ENTRYPOINT, "--change", "CMD []"]
        run([docker.DOCKER, "commit", *changes, name, tag + "-commit"], capture=True)
    finally:
        run([docker.DOCKER, "rm", "-f", "-v", name], capture=True)
    context = out / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {tag}-commit\n{STOPSIGNAL}\n")
    docker.build(context, tag)
    run([docker.DOCKER, "rmi", tag + "-commit"], capture=True)
    (context / "Dockerfile").unlink()
    context.rmdir()
    docker.save([tag], out / "image.tar")


def _build(out: Path, base: str, base_result: cache.Result, archives: list[Path]) -> None:
    bins = kubernetes.ensure().path / "bin"
    rootfs.load(base, base_result)
    build_from(base, TAG, out, lambda container: _fill(container, bins, archives))


def inputs_key(base: str, archives: list[Path], *code: Path) -> str:
    """What a node is made of: the base tag, every archive's build stamp (so a rebuilt
    entry at the same version changes the key) and the code that assembles it."""
    stamps = [(a.parent / cache.STAMP).read_text() for a in archives]
    sources = [p.read_text() for p in (Path(__file__), *code)]
    text = "\n".join([base, *map(str, archives), *stamps, *sources])
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def ensure() -> cache.Result:
    """``distml-kind/node:<kubernetes version>`` in the engine (and cached)."""
    base, base_result = nodebase.ensure()
    archives = _archives()
    version = f"{pins.KUBERNETES}-{inputs_key(base, archives)}"
    result = cache.cached(
        "node-image", version, lambda out: _build(out, base, base_result, archives)
    )
    docker.ensure_loaded([TAG], result.path / "image.tar")
    return result
