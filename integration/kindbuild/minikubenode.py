"""minikube's node for its docker driver, made here: ``--base-image`` for ``minikube start``.

minikube's own (kicbase, its module's ``deploy/kicbase/Dockerfile``) is Ubuntu plus
downloads that cannot be reached here. minikube only asks a base image to exist by name;
what its docker driver then does in the node is what this image provides, from Debian
bookworm (debootstrap) and the kind build's caches:

- kicbase's ``entrypoint`` (kind's, forked), systemd as init, its sysctl files;
- sshd and a ``docker`` user with passwordless sudo and ``~/.ssh`` (minikube provisions
  the node over SSH: hostname, certificates);
- Debian's containerd (with kicbase's ``config.toml``, which minikube edits with ``sed``),
  runc, the CNI plugins its ``--cni=bridge`` config names, crictl;
- the Kubernetes binaries in ``/var/lib/minikube/binaries/<version>`` (minikube looks there
  before it downloads), and every image the cluster pulls already in containerd: the
  control plane's, storage-provisioner, and the standard-mode, Argo and monitoring
  controllers, as in the offline kind node;
- the offline kind node's two extras for these VMs: the registry mirror for images pulled
  ``Always`` and the Service-range TCP reset (for minikube's Service CIDR), and the
  containerd drop-in that clamps oom_score_adj when the engine lacks CAP_SYS_RESOURCE.

minikube keeps ``/var`` on a volume of its own; Docker fills it from this image's ``/var``
when the node is created, and ``minikube delete`` removes it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from integration.kindbuild import (
    cache,
    controllers,
    docker,
    images,
    kubernetes,
    minikube,
    mirror,
    nodebase,
    nodeimage,
    pins,
    rootfs,
    stacknode,
    tools,
)
from integration.kindbuild.run import run

TAG = f"distml-minikube/node:{pins.KUBERNETES}"
# What kicbase installs that kind's base does not, and minikube uses: sshd, sudo, socat.
PACKAGES = (*rootfs.NODE_PACKAGES, "openssh-server", "sudo", "socat")
# minikube's default --service-cluster-ip-range (pkg/minikube/constants: DefaultServiceCIDR).
SERVICE_CIDR = "10.96.0.0/12"
# The Kubernetes binaries minikube copies into the node (constants.KubernetesReleaseBinaries).
BINARIES = ("kubeadm", "kubelet", "kubectl")
BINARY_DIR = f"/var/lib/minikube/binaries/{pins.KUBERNETES}"
# Files of the module's deploy/kicbase, and where its Dockerfile puts them.
KICBASE_FILES = {
    "entrypoint": "usr/local/bin/entrypoint",
    "containerd.toml": "etc/containerd/config.toml",
    "containerd_docker_io_hosts.toml": "etc/containerd/certs.d/docker.io/hosts.toml",
    "10-network-security.conf": "etc/sysctl.d/10-network-security.conf",
    "11-tcp-mtu-probing.conf": "etc/sysctl.d/11-tcp-mtu-probing.conf",
}
# kicbase's Dockerfile steps that apply to this node, run in the chroot.
SETUP = (
    r"""
set -eu
chmod 755 /usr/local/bin/*
"""
    + nodebase.SYSTEMD_AS_INIT.strip("\n")
    + r"""
mkdir -p /opt/cni/bin /etc/kubernetes/manifests /kind /var/run/sshd
cp /usr/lib/cni/* /opt/cni/bin/
systemctl enable ssh.service
systemctl disable containerd.service
# No Docker here: minikube's containerd start disables Docker's socket, and reports an
# error when it has no unit at all. Masked, it is found and ignored.
systemctl mask docker.socket
systemctl mask systemd-binfmt.service
sed -ri 's/^#?UsePAM yes/UsePAM no/' /etc/ssh/sshd_config
# minikube runs kubeadm over SSH as `sudo env PATH=<binaries>:$PATH`: without the sbin
# directories (sshd's default PATH) its preflight finds no losetup.
echo "SetEnv PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  >> /etc/ssh/sshd_config
groupadd --system docker
useradd --create-home --shell /bin/bash --gid docker --groups sudo --password '*' docker
echo '%sudo ALL=(ALL) NOPASSWD:ALL' >> /etc/sudoers
install -d -o docker -g docker -m 700 /home/docker/.ssh
"""
)


def kicbase_dir() -> Path:
    """The module's ``deploy/kicbase`` (downloaded by the minikube step)."""
    info = minikube.gomodule.download(pins.MINIKUBE_MODULE, pins.MINIKUBE)
    return Path(info["Dir"]) / "deploy/kicbase"


def version_json(kicbase: Path) -> str:
    """``/version.json`` as the Makefile's VERSION_JSON writes it; minikube compares it
    with its own and warns when it differs."""
    types = (kicbase.parents[1] / "pkg/drivers/kic/types.go").read_text()
    kic = next(ln.split('"')[1] for ln in types.splitlines() if ln.strip().startswith("Version"))
    fields = {"iso_version": pins.MINIKUBE, "kicbase_version": kic}
    fields |= {"minikube_version": pins.MINIKUBE, "commit": "distml"}
    return json.dumps(fields)


def _customise(root: Path, kicbase: Path, crictl: Path) -> None:
    for name, dest in KICBASE_FILES.items():
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kicbase / name, root / dest)
    (root / "version.json").write_text(version_json(kicbase) + "\n")
    nodebase.install_oom_dropin(root)
    shutil.copyfile(crictl, root / "usr/local/bin/crictl")
    run(["chroot", str(root), "/bin/bash", "-c", SETUP], heavy=True)


def base() -> tuple[str, cache.Result]:
    """``distml-minikube/base:<key>``: the Debian root filesystem above, without images."""
    kicbase = kicbase_dir()
    crictl = tools.crictl().path / "bin/crictl"
    sources = [(kicbase / n).read_text() for n in KICBASE_FILES]
    sources.append((nodebase.HERE / "files/restrict-oom-score-adj").read_text())
    version = rootfs.key(PACKAGES, pins.MINIKUBE, pins.CRICTL, SETUP, nodebase.DROPIN, *sources)
    tag = f"distml-minikube/base:{version}"
    result = rootfs.base_image(
        "minikube-base",
        version,
        tag,
        PACKAGES,
        nodebase.CHANGES,
        customise=lambda root: _customise(root, kicbase, crictl),
    )
    return tag, result


def archives() -> list[Path]:
    """Every image archive the node holds: the control plane's (minikube asks for the same
    tags kubeadm does), storage-provisioner, and the offline node's controllers."""
    paths = [images.kube_images().path / f"{n}.tar" for n in pins.KUBERNETES_IMAGES]
    paths += [step().path / "image.tar" for step in (images.etcd, images.coredns, images.pause)]
    paths.append(minikube.storage_provisioner().path / "image.tar")
    paths += [controllers.ensure(s).path / "image.tar" for s in controllers.controllers()]
    return paths


# kubeadm built here with Go 1.26 fails its own HTTPProxyCIDR preflight check on every
# machine: it puts an IPv4 address in brackets in a URL ("https://[10.96.0.1]:1234/"),
# which Go 1.26's net/url refuses ("invalid IP-literal"). kind ignores every preflight
# error; minikube names the ones it ignores, so the node's kubeadm adds this one to
# `kubeadm init` (the only command of minikube's that runs the preflight; its phases take
# no such flag).
KUBEADM_WRAPPER = """#!/bin/sh
# distml: see integration/kindbuild/minikubenode.py (KUBEADM_WRAPPER)
real="$(dirname "$0")/kubeadm.go126"
if [ "$1" = init ] && [ "$2" != phase ]; then
  exec "$real" "$@" --ignore-preflight-errors=HTTPProxyCIDR
fi
exec "$real" "$@"
"""


# On a cgroup v1 host that mounts only some controllers (these VMs: no hugetlb, perf_event,
# net_cls/net_prio), the node's systemd mounts the rest itself as new v1 hierarchies, and
# kubelet (cgroupfs driver) makes its kubepods cgroups there, at the kernel's root: they
# outlive `minikube delete`, keep those hierarchies, and the next kind node's kubelet then
# fails ("cgroup [kubelet] has some missing paths: /sys/fs/cgroup/hugetlb/kubelet.slice").
# As kind does for the misc controller, /sbin/init hides from systemd every controller the
# container was not given, then becomes systemd.
INIT = """#!/bin/sh
# distml: see integration/kindbuild/minikubenode.py (INIT). PROC, CGROUP_FS, STATE and
# SYSTEMD are for its tests: a node runs it with none of them set.
proc=${PROC:-/proc}
if [ ! -f "${CGROUP_FS:-/sys/fs/cgroup}/cgroup.controllers" ]; then  # cgroup v1
  # mountinfo: the mount point is field 5, the type follows the "-" separator.
  cgroup_mounts='{for (i=7; i<NF; i++) if ($i == "-") {if ($(i+1) == "cgroup") print $5; break}}'
  given=$(awk "$cgroup_mounts" "$proc/self/mountinfo")
  hide=""
  for c in $(awk 'NR > 1 && $4 == 1 {print $1}' "$proc/cgroups"); do
    echo "$given" | grep -qE "^/sys/fs/cgroup/(.*,)?$c(,.*)?$" || hide="$hide $c"
  done
  if [ -n "$hide" ]; then
    echo "distml: hiding cgroup controllers the container was not given:$hide"
    fake=${STATE:-/kind}/distml-cgroups
    awk -v hide="$hide" 'BEGIN {n = split(hide, a, " "); for (i = 1; i <= n; i++) h[a[i]] = 1}
      !($1 in h)' "$proc/cgroups" > "$fake"
    mount --bind "$fake" "$proc/cgroups"
  fi
fi
exec ${SYSTEMD:-/lib/systemd/systemd} "$@"
"""


def _fill(container: str, bins: Path, archives: list[Path], always: list[str]) -> None:
    init = [docker.DOCKER, "exec", "-i", container, "sh", "-c", "rm /sbin/init && cat > /sbin/init"]
    run(init, stdin=INIT.encode())
    nodeimage.exec_in(container, f"chmod 755 /sbin/init && mkdir -p {BINARY_DIR}")
    for name in BINARIES:
        target = f"{BINARY_DIR}/{name}.go126" if name == "kubeadm" else f"{BINARY_DIR}/{name}"
        run([docker.DOCKER, "cp", str(bins / name), f"{container}:{target}"])
    wrapper = [docker.DOCKER, "exec", "-i", container, "tee", f"{BINARY_DIR}/kubeadm"]
    run(wrapper, stdin=KUBEADM_WRAPPER.encode(), capture=True)
    nodeimage.exec_in(container, f"chown root:root {BINARY_DIR}/* && chmod 755 {BINARY_DIR}/*")
    nodeimage.start_containerd(container)
    nodeimage.import_archives(container, archives)
    mirror.bake(container, nodeimage.exec_in, always)
    nodeimage.stop_containerd(container)
    stacknode.install_guard(container, SERVICE_CIDR)


def ensure() -> cache.Result:
    """``distml-minikube/node:<kubernetes version>`` in the engine (and cached)."""
    base_tag, base_result = base()
    paths = archives()
    always = sorted(s.image for s in controllers.controllers() if s.pull_always)
    bins = kubernetes.ensure().path / "bin"
    registry = mirror.binary()
    stamps = [base_result.path / "image.tar", registry.path / "docker-registry", *paths]
    stamps.append(bins.parent / "version")  # the Kubernetes build's entry
    key = nodeimage.inputs_key(
        f"{base_tag} always={','.join(always)}",
        stamps,
        Path(__file__),
        Path(mirror.__file__),
        Path(stacknode.__file__),
    )

    def build(out: Path) -> None:
        rootfs.load(base_tag, base_result)
        nodeimage.build_from(base_tag, TAG, out, lambda c: _fill(c, bins, paths, always))

    result = cache.cached("minikube-node", f"{pins.KUBERNETES}-{key}", build)
    docker.ensure_loaded([TAG], result.path / "image.tar")
    return result
