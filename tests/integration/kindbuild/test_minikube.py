"""integration.kindbuild.minikube and minikubenode: what minikube's offline node holds, held
to minikube's own source where it is in the Go module cache (the build downloads it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from integration.kindbuild import minikube, minikubenode, pins
from tests.support.gomod import module_source


def _module() -> Path:
    return module_source(pins.MINIKUBE_MODULE, pins.MINIKUBE)


def test_the_version_flags_are_the_makefiles(tmp_path: Path):
    flags = minikube.ldflags("abc123")
    for name, value in (
        ("version", pins.MINIKUBE),
        ("isoVersion", pins.MINIKUBE),
        ("gitCommitID", "abc123"),
        ("storageProvisionerVersion", pins.STORAGE_PROVISIONER_TAG),
    ):
        assert f"-X k8s.io/minikube/pkg/version.{name}={value}" in flags


def test_the_makefile_names_these_tags():
    makefile = (_module() / "Makefile").read_text()
    assert f"STORAGE_PROVISIONER_TAG ?= {pins.STORAGE_PROVISIONER_TAG}\n" in makefile
    assert "REGISTRY ?= gcr.io/k8s-minikube\n" in makefile
    assert f"ISO_VERSION ?= {pins.MINIKUBE}\n" in makefile
    for flag in ("version.version", "version.isoVersion", "version.gitCommitID"):
        assert f"-X k8s.io/minikube/pkg/{flag}=" in makefile


def test_the_guarded_range_is_minikubes_default_service_cidr():
    constants = (_module() / "pkg/minikube/constants/constants.go").read_text()
    assert f'DefaultServiceCIDR = "{minikubenode.SERVICE_CIDR}"' in constants


def test_the_nodes_binaries_are_the_ones_minikube_copies_and_where_it_looks():
    source = _module()
    constants = (source / "pkg/minikube/constants/constants.go").read_text()
    listed = constants.split("KubernetesReleaseBinaries = []string{", 1)[1].split("}", 1)[0]
    assert sorted(b.strip(' "\n\t') for b in listed.split(",") if b.strip()) == sorted(
        minikubenode.BINARIES
    )
    binaries = (source / "pkg/minikube/bootstrapper/bsutil/binaries.go").read_text()
    assert 'path.Join(vmpath.GuestPersistentDir, "binaries", version)' in binaries
    vmpath = (source / "pkg/minikube/vmpath/constants.go").read_text()
    assert 'GuestPersistentDir = "/var/lib/minikube"' in vmpath
    assert f"/var/lib/minikube/binaries/{pins.KUBERNETES}" == minikubenode.BINARY_DIR


def test_version_json_carries_the_kicbase_version_minikube_compares():
    kicbase = _module() / "deploy/kicbase"
    fields = json.loads(minikubenode.version_json(kicbase))
    types = (kicbase.parents[1] / "pkg/drivers/kic/types.go").read_text()
    assert f'Version = "{fields["kicbase_version"]}"' in types
    assert fields["minikube_version"] == pins.MINIKUBE


def _kubeadm(tmp_path: Path, *args: str) -> list[str]:
    """Run the node's kubeadm wrapper with a stand-in for the real binary beside it."""
    (tmp_path / "kubeadm").write_text(minikubenode.KUBEADM_WRAPPER)
    real = tmp_path / "kubeadm.go126"
    real.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    for path in (tmp_path / "kubeadm", real):
        path.chmod(0o755)
    done = subprocess.run([str(tmp_path / "kubeadm"), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_kubeadm_init_skips_only_the_go126_proxy_check_and_passes_everything_on(tmp_path):
    flag = "--ignore-preflight-errors=HTTPProxyCIDR"
    init = ["init", "--config", "/var/tmp/minikube/kubeadm.yaml", "--ignore-preflight-errors=Swap"]
    assert _kubeadm(tmp_path, *init) == [*init, flag]
    # The phases minikube runs on a restart take no such flag: unchanged.
    for other in (["init", "phase", "certs", "all"], ["reset", "--force"], ["version"]):
        assert _kubeadm(tmp_path, *other) == other


CGROUPS = """#subsys_name\thierarchy\tnum_cgroups\tenabled
cpuset\t3\t3\t1
cpu\t1\t3\t1
memory\t4\t170\t1
net_cls\t0\t3\t1
net_prio\t0\t3\t1
hugetlb\t0\t3\t1
pids\t8\t3\t1
rdma\t0\t1\t0
"""
# Docker gave the container cpu, cpuset, memory and pids (one mount has no optional field).
MOUNTINFO = """\
600 590 0:32 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
601 590 0:33 / /sys/fs/cgroup/cpuset rw,nosuid master:1 - cgroup cgroup rw,cpuset
602 590 0:34 /docker/abc /sys/fs/cgroup/memory rw,nosuid master:2 - cgroup cgroup rw,memory
603 590 0:35 / /sys/fs/cgroup/pids rw,nosuid master:3 - cgroup cgroup rw,pids
604 590 0:36 / /sys/fs/cgroup/unified rw,nosuid master:4 - cgroup2 cgroup2 rw
605 590 0:37 / /run rw - tmpfs tmpfs rw
"""


def test_init_hides_from_systemd_the_controllers_the_container_was_not_given(tmp_path: Path):
    # On a cgroup v1 host, systemd would mount net_cls, net_prio and hugetlb as new
    # hierarchies and kubelet would leave cgroups in them after `minikube delete`.
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "cgroups").write_text(CGROUPS)
    (proc / "self/mountinfo").write_text(MOUNTINFO)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mount").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/mounted\n')
    (bin_dir / "mount").chmod(0o755)
    init = tmp_path / "init"
    init.write_text(minikubenode.INIT)
    init.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PROC": str(proc),
        "STATE": str(tmp_path),
        "SYSTEMD": "echo",
        "CGROUP_FS": str(tmp_path / "v1"),  # a cgroup v1 host: no cgroup.controllers
    }
    done = subprocess.run([str(init), "--system"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "distml: hiding cgroup controllers the container was not given: net_cls net_prio hugetlb",
        "--system",  # then systemd, with init's arguments
    ]
    kept = (tmp_path / "distml-cgroups").read_text().splitlines()
    assert [line.split("\t")[0] for line in kept] == [
        "#subsys_name", "cpuset", "cpu", "memory", "pids", "rdma"
    ]  # fmt: skip
    fake, target = (tmp_path / "mounted").read_text().split()[1:]
    assert (fake, target) == (str(tmp_path / "distml-cgroups"), str(proc / "cgroups"))
    # On cgroup v2 there are no per-controller hierarchies to leak: systemd starts at once.
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2/cgroup.controllers").write_text("cpu memory\n")
    v2 = subprocess.run(
        [str(init)], env={**env, "CGROUP_FS": str(tmp_path / "v2")}, capture_output=True, text=True
    )
    assert v2.stdout.splitlines() == [""]
