"""The images a kind node holds in containerd, built here and tagged as kubeadm and kind
name them. Each lands in ``<cache>/<component>-<version>/image.tar`` (``docker save``)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from integration.kindbuild import cache, docker, gomodule, kubernetes, pins, rootfs
from integration.kindbuild.run import BuildError, run

PATH_ENV = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HERE = Path(__file__).parent
# kube-proxy and the kindnetd stand-in use the node's iptables backend (files/iptables-wrapper).
WRAPPER_STEPS = "COPY iptables-wrapper /usr/sbin/\nRUN /usr/sbin/iptables-wrapper --install\n"


def build_image(out: Path, tag: str, dockerfile: str, files: Mapping[str, Path | None]) -> None:
    """Build ``tag`` from ``dockerfile`` and ``files`` (context name -> source file, or None
    for an empty directory, mode 775) into ``out/image.tar``; the context is removed
    afterwards."""
    context = out / "context"
    context.mkdir()
    for name, source in files.items():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        if source is None:
            (context / name).mkdir(mode=0o775)
            (context / name).chmod(0o775)
        else:
            shutil.copy2(source, context / name)
    (context / "Dockerfile").write_text(dockerfile)
    docker.build(context, tag)
    docker.save([tag], out / "image.tar")
    shutil.rmtree(context)


def _cached_image(component: str, version: str, build: Callable[[Path], None]):
    """The entry only: the archive is loaded into the engine by whoever needs it there
    (the node image imports archives straight from the cache)."""
    return cache.cached(component, version, build)


def _go_binary(out: Path, module: str, version: str, package: str, name: str) -> Path:
    info = gomodule.download(module, version)
    work = out / "module"
    replaces = gomodule.inherited_replaces(Path(info["GoMod"]))
    gomodule.write_module(work, {module: version}, replaces)
    binary = out / "bin" / name
    gomodule.build(work, package, binary)
    return binary


def static_go_image(component, module, version, package, binary, tag, extra=""):
    """A FROM-scratch image holding one static Go binary at /usr/local/bin."""

    def build(out: Path) -> None:
        path = _go_binary(out, module, version, package, binary)
        dockerfile = (
            f"FROM scratch\nCOPY {binary} /usr/local/bin/{binary}\n{PATH_ENV}\n{extra}"
            f'ENTRYPOINT ["/usr/local/bin/{binary}"]\n'
        )
        build_image(out, tag, dockerfile, {binary: path})

    return _cached_image(component, version, build)


def etcd() -> cache.Result:
    return static_go_image(
        "etcd", pins.ETCD_MODULE, pins.ETCD, pins.ETCD_MODULE, "etcd", pins.ETCD_IMAGE
    )


def coredns() -> cache.Result:
    def build(out: Path) -> None:
        path = _go_binary(out, pins.COREDNS_MODULE, pins.COREDNS, pins.COREDNS_MODULE, "coredns")
        dockerfile = (
            'FROM scratch\nCOPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT ["/coredns"]\n'
        )
        build_image(out, pins.COREDNS_IMAGE, dockerfile, {"coredns": path})

    return _cached_image("coredns", pins.COREDNS, build)


def local_path_provisioner() -> cache.Result:
    return static_go_image(
        "local-path-provisioner",
        pins.LOCAL_PATH_MODULE,
        pins.LOCAL_PATH,
        pins.LOCAL_PATH_MODULE,
        "local-path-provisioner",
        pins.LOCAL_PATH_IMAGE,
    )


def pause() -> cache.Result:
    """registry.k8s.io/pause from Kubernetes' own pause.c, compiled static with gcc."""
    version = pins.PAUSE_IMAGE.rsplit(":", 1)[1]

    def build(out: Path) -> None:
        source = Path(gomodule.download("k8s.io/kubernetes", pins.KUBERNETES)["Dir"])
        binary = out / "bin" / "pause"
        binary.parent.mkdir(parents=True)
        run(
            [
                "gcc",
                "-Os",
                "-static",
                "-Wall",
                "-Werror",
                f"-DVERSION=v{version}-distml",
                "-o",
                str(binary),
                str(source / "build/pause/linux/pause.c"),
            ],
            heavy=True,
        )
        run(["strip", str(binary)])
        dockerfile = 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
        build_image(out, pins.PAUSE_IMAGE, dockerfile, {"pause": binary})

    return _cached_image("pause", f"{version}-k8s-{pins.KUBERNETES}", build)


def local_path_helper() -> cache.Result:
    """sh, mkdir and rm for local-path's helper pods: Debian's busybox-static."""
    query = ["dpkg-query", "-W", "-f=${Version}", "busybox-static"]
    deb = subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip()
    if not deb:
        raise BuildError("local-path-helper needs busybox-static: apt-get install busybox-static")
    tag = pins.LOCAL_PATH_HELPER_IMAGE

    def build(out: Path) -> None:
        dockerfile = (
            "FROM scratch\nCOPY busybox /bin/busybox\n"
            'RUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
            f"{PATH_ENV}\n"
            'CMD ["/bin/sh"]\n'
        )
        build_image(out, tag, dockerfile, {"busybox": Path("/bin/busybox")})

    return _cached_image("local-path-helper", "busybox-" + deb.replace(":", "_"), build)


def kindnetd() -> cache.Result:
    """A stand-in for kindnetd (``files/kindnetd``: what it does and does not do), tagged
    as kind's default CNI manifest names it; its source is not reachable from here."""
    netbase, base = rootfs.net_base()
    files = {n: HERE / "files" / n for n in ("kindnetd", "iptables-wrapper")}
    digest = hashlib.sha256(netbase.encode())
    for path in files.values():
        digest.update(path.read_bytes())
    dockerfile = (
        f"FROM {netbase}\nCOPY kindnetd /usr/sbin/\n{WRAPPER_STEPS}"
        'LABEL org.opencontainers.image.description="distml stand-in for kindnetd"\n'
        'ENTRYPOINT ["/usr/sbin/kindnetd"]\n'
    )

    def build(out: Path) -> None:
        rootfs.load(netbase, base)
        build_image(out, pins.KINDNETD_IMAGE, dockerfile, files)

    return _cached_image("kindnetd-standin", digest.hexdigest()[:10], build)


def kube_images() -> cache.Result:
    """registry.k8s.io/kube-{apiserver,controller-manager,scheduler,proxy}:<version>."""
    bins = kubernetes.ensure().path / "bin"
    netbase, netbase_entry = rootfs.net_base()
    tags = [f"registry.k8s.io/{name}:{pins.KUBERNETES}" for name in pins.KUBERNETES_IMAGES]

    def build(out: Path) -> None:
        rootfs.load(netbase, netbase_entry)
        for name, tag in zip(pins.KUBERNETES_IMAGES, tags, strict=True):
            base, files = "scratch", {name: bins / name}
            extra = ""
            if name == "kube-proxy":  # runs iptables, ip6tables, conntrack, ipset
                base = netbase
                files["iptables-wrapper"] = HERE / "files" / "iptables-wrapper"
                extra = WRAPPER_STEPS
            dockerfile = f"FROM {base}\nCOPY {name} /usr/local/bin/{name}\n{extra}{PATH_ENV}\n"
            sub = out / name
            sub.mkdir()
            build_image(sub, tag, dockerfile, files)
            (sub / "image.tar").rename(out / f"{name}.tar")
            sub.rmdir()

    return cache.cached("kube-images", pins.KUBERNETES, build)
