"""Debian root filesystems from debootstrap (minbase), imported as local base images."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from integration.kindbuild import cache, docker, pins
from integration.kindbuild.run import BuildError, run

# What kind v0.29's base image installs (images/base/Dockerfile), without nfs-common and
# open-iscsi (no NFS/iSCSI volumes here), plus Debian's containerd, runc and CNI plugins
# (kind builds those from source; Debian's 1.6 reads kind's version-2 containerd config).
NODE_PACKAGES = (
    *("systemd", "conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux"),
    *("mount", "kmod", "libseccomp2", "pigz", "fuse-overlayfs", "bash", "ca-certificates"),
    *("curl", "jq", "procps", "containerd", "runc", "containernetworking-plugins"),
)
# For kube-proxy (iptables, conntrack, ipset) and the kindnetd stand-in (ip, curl, jq).
NET_PACKAGES = (
    *("iptables", "nftables", "conntrack", "ipset", "kmod", "iproute2", "ca-certificates"),
    *("curl", "jq"),
)


def key(packages: list[str] | tuple[str, ...], *extra: str) -> str:
    """A short hash of what goes into a rootfs: the cache key's version part."""
    text = "\n".join([pins.DEBIAN_SUITE, *sorted(packages), *extra])
    return f"{pins.DEBIAN_SUITE}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def debootstrap(dest: Path, packages: list[str] | tuple[str, ...]) -> None:
    """A minbase Debian with ``packages``, with apt's caches and the docs removed."""
    if shutil.which("debootstrap") is None:
        raise BuildError("the Debian base images need debootstrap: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise BuildError("debootstrap and chroot need root: run the kind build as root")
    include = ",".join(packages)
    run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={include}",
            pins.DEBIAN_SUITE,
            str(dest),
            pins.DEBIAN_MIRROR,
        ],
        heavy=True,
    )
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        shutil.rmtree(dest / junk, ignore_errors=True)
    (dest / "var/lib/apt/lists/partial").mkdir(parents=True)


def base_image(
    component: str,
    version: str,
    tag: str,
    packages: list[str] | tuple[str, ...],
    changes: list[str],
    customise: Callable[[Path], None] | None = None,
) -> cache.Result:
    """``<cache>/<component>-<version>/image.tar``, an image tagged ``tag`` (see load)."""

    def build(out: Path) -> None:
        rootfs = out / "rootfs"
        try:
            debootstrap(rootfs, packages)
            if customise:
                customise(rootfs)
            docker.import_rootfs(rootfs, tag, changes)
        finally:
            run(["rm", "-rf", str(rootfs)], heavy=True)
        docker.save([tag], out / "image.tar")

    return cache.cached(component, version, build)


def load(tag: str, result: cache.Result) -> None:
    """Put a cached base image into the engine, unless it is there already."""
    docker.ensure_loaded([tag], result.path / "image.tar")


def net_base() -> tuple[str, cache.Result]:
    """A small Debian with iptables and friends: the base of kube-proxy and kindnetd."""
    version = key(NET_PACKAGES)
    tag = f"distml-kind/netbase:{version}"
    return tag, base_image("netbase", version, tag, NET_PACKAGES, ["ENV LANG=C.UTF-8"])
