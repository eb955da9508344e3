"""kind's base image, made here: Debian bookworm (debootstrap) with kind's own
``images/base/files`` and the steps of its ``images/base/Dockerfile``, but Debian's
containerd, runc and CNI plugins in place of the ones kind compiles."""

from __future__ import annotations

import shutil
from pathlib import Path

from integration.kindbuild import cache, kindsource, pins, rootfs, tools
from integration.kindbuild.run import run

# systemd as a container's init, as kind's and minikube's base Dockerfiles both set it up:
# no units but the ones a node enables, no kernel log, /sbin/init.
SYSTEMD_AS_INIT = r"""
find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
  /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
  /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >> /etc/systemd/journald.conf
ln -sf /lib/systemd/systemd /sbin/init
"""
# The shell steps of kind's base Dockerfile, run in the chroot, plus the links that put
# Debian's binaries where kind's units and scripts look for them.
SETUP = (
    r"""
set -eu
chmod 755 /kind/bin /kind/bin/* /usr/local/bin/*
"""
    + SYSTEMD_AS_INIT.strip("\n")
    + r"""
for b in containerd ctr containerd-shim-runc-v2; do ln -sf /usr/bin/$b /usr/local/bin/$b; done
ln -sf /usr/sbin/runc /usr/local/sbin/runc
mkdir -p /opt/cni/bin
for p in host-local loopback ptp portmap; do cp /usr/lib/cni/$p /opt/cni/bin/; done
hook='{"path": "/kind/bin/mount-product-files.sh"}'
ctr oci spec \
  | jq ".hooks.createContainer[.hooks.createContainer| length] |= . + $hook" \
  | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests
"""
)
HERE = Path(__file__).parent
CHANGES = ["ENV container=docker", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]']


def _copy_tree(src: Path, dest: Path, mode: int) -> None:
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            target.chmod(0o755)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            target.chmod(mode)


# Ours, beside kind's files: see files/restrict-oom-score-adj.
DROPIN = "[Service]\nExecStartPre=/usr/local/bin/restrict-oom-score-adj\n"


def install_oom_dropin(root: Path) -> None:
    """``files/restrict-oom-score-adj`` and the containerd drop-in that runs it, into
    ``root`` (a node's root filesystem)."""
    shutil.copyfile(
        HERE / "files/restrict-oom-score-adj", root / "usr/local/bin/restrict-oom-score-adj"
    )
    dropins = root / "etc/systemd/system/containerd.service.d"
    dropins.mkdir(parents=True)
    (dropins / "10-restrict-oom-score-adj.conf").write_text(DROPIN)


def _customise(root: Path, crictl: Path) -> None:
    _copy_tree(kindsource.base_files(), root, 0o644)
    install_oom_dropin(root)
    shutil.copyfile(crictl, root / "usr/local/bin/crictl")
    (root / "usr/local/bin/crictl").chmod(0o755)
    run(["chroot", str(root), "/bin/bash", "-c", SETUP], heavy=True)


def ensure() -> tuple[str, cache.Result]:
    """``distml-kind/base:<key>`` in the engine (and cached); returns (tag, result)."""
    crictl = tools.crictl().path / "bin/crictl"
    script = (HERE / "files/restrict-oom-score-adj").read_text()
    version = rootfs.key(rootfs.NODE_PACKAGES, pins.KIND, pins.CRICTL, SETUP, DROPIN, script)
    tag = f"distml-kind/base:{pins.KIND}-{version}"
    result = rootfs.base_image(
        "kind-base",
        f"{pins.KIND}-{version}",
        tag,
        rootfs.NODE_PACKAGES,
        CHANGES,
        customise=lambda root: _customise(root, crictl),
    )
    return tag, result
