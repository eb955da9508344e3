"""The kind node image, assembled the way ``kind build node-image`` does it, minus the
registry: a container from the base image gets the Kubernetes binaries, ``/kind/version``
and kind's two manifests; containerd is started inside and every image archive built
here is imported into its ``k8s.io`` namespace; the container is committed."""

from __future__ import annotations

import hashlib
import os
import shlex
import time
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


def _exec(container: str, script: str) -> str:
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


def _wait_containerd(container: str, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        argv = [docker.DOCKER, "exec", container, "ctr", "version"]
        if os.system(shlex.join(argv) + " >/dev/null 2>&1") == 0:
            return
        time.sleep(1)
    raise BuildError(f"containerd did not start in {container} within {deadline_s:.0f}s")


def _fill(container: str, bins: Path, archives: list[Path]) -> None:
    for name in ("kubeadm", "kubelet", "kubectl"):
        run([docker.DOCKER, "cp", str(bins / name), f"{container}:/usr/bin/{name}"])
    _exec(container, "chown root:root /usr/bin/kube* && chmod 755 /usr/bin/kube*")
    _exec(container, f"mkdir -p /kind/manifests && echo -n {pins.KUBERNETES} > /kind/version")
    for name, text in kindsource.manifests().items():
        argv = [docker.DOCKER, "exec", "-i", container, "tee", f"/kind/manifests/{name}"]
        run(argv, stdin=text.encode(), capture=True)
    _exec(container, "nohup containerd > /var/log/containerd-build.log 2>&1 &")
    _wait_containerd(container)
    for archive in archives:
        run([docker.DOCKER, "exec", "-i", container, *IMPORT], stdin=archive.read_bytes())
    refs = _exec(container, "ctr -n k8s.io images ls -q").split()
    for ref in refs:
        _exec(container, f"ctr -n k8s.io images label {ref} io.cri-containerd.pinned=pinned")
    _exec(container, "pkill containerd; sleep 1; rm -f /var/log/containerd-build.log")
    print("\n".join(f"  {r}" for r in refs if not r.startswith("sha256:")), flush=True)


def _build(out: Path, base: str, base_result: cache.Result, archives: list[Path]) -> None:
    bins = kubernetes.ensure().path / "bin"
    rootfs.load(base, base_result)
    docker.check_privileged(base)
    name = f"distml-kind-nodebuild-{os.getpid()}"
    run(
        [
            docker.DOCKER,
            "run",
            "-d",
            "--privileged",
            "--name",
            name,
            "--entrypoint",
            "sleep",
            base,
            "infinity",
        ],
        capture=True,
    )
    try:
        _fill(name, bins, archives)
        run(
            [
                docker.DOCKER,
                "commit",
                "--change",
                'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]',
                "--change",
                "CMD []",
                name,
                TAG + "-commit",
            ],
            capture=True,
        )
    finally:
        run([docker.DOCKER, "rm", "-f", "-v", name], capture=True)
    context = out / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {TAG}-commit\nSTOPSIGNAL SIGRTMIN+3\n")
    docker.build(context, TAG)
    run([docker.DOCKER, "rmi", TAG + "-commit"], capture=True)
    (context / "Dockerfile").unlink()
    context.rmdir()
    docker.save([TAG], out / "image.tar")


def inputs_key(base: str, archives: list[Path]) -> str:
    """What the node is made of: the base tag, every archive's build stamp (so a rebuilt
    entry at the same version changes the key) and this module's code."""
    stamps = [(a.parent / cache.STAMP).read_text() for a in archives]
    text = "\n".join([base, *map(str, archives), *stamps, Path(__file__).read_text()])
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
