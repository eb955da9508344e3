"""What the kind build and the integration sessions need from the machine, checked before
anything is built: every missing piece named at once, with the one ``apt-get`` line that
installs the Debian packages among them.

A cold kind build takes most of an hour, so a package found missing halfway (on a fresh
machine: busybox-static, after 24 minutes of builds) costs that time again for each one.
``python -m integration.kindbuild`` and both nox integration sessions check first.
Debian's essential packages (coreutils, tar, util-linux's nice and ionice) are taken as
given; kind and kubectl, when not built here, are the integration preflight's.
Stdlib only: nox imports it before any virtualenv exists.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from integration.kindbuild import cache, controllers, docker, mirror, run

# The newest `go` directive among the modules built here (Kubernetes v1.33.1: 1.24.0,
# KEDA v2.20.2: 1.26.0, Prometheus v0.316.0: 1.26.7); builds run with GOTOOLCHAIN=local, so
# no newer Go is fetched.
MIN_GO = (1, 26, 7)
GO_HINT = (
    f"install Go >= {'.'.join(map(str, MIN_GO))} from https://go.dev/dl into /usr/local/go "
    "(Debian bookworm's golang-go is 1.19)"
)
SESSIONS = ("kindbuild", "integration", "integration_existing")


@dataclass(frozen=True)
class Missing:
    """One thing the machine lacks: the Debian packages that provide it, or else what to do."""

    what: str
    packages: tuple[str, ...] = ()
    fix: str = ""


class Machine:
    """What the checks read from this machine (tests pass a fake)."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def exists(self, path: Path) -> bool:
        return path.exists()

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        """``argv``'s exit code and output; a program that is not there exits 127."""
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        except OSError:
            return 127, ""
        return done.returncode, done.stdout

    def is_root(self) -> bool:
        return os.geteuid() == 0

    def read(self, path: str) -> str:
        return Path(path).read_text()


Check = Callable[[Machine], list[Missing]]

# command -> (its Debian package, what runs it)
COMMANDS = {
    "debootstrap": (
        "debootstrap",
        "the Debian base images (kind's node, kube-proxy's, --base local)",
    ),
    "gcc": ("gcc", "the pause image (Kubernetes' pause.c, compiled static)"),
    "strip": ("binutils", "the pause image"),
    "apt-get": ("apt", f"the offline node's registry (apt-get download {mirror.DEB})"),
    "dpkg-deb": ("dpkg", "the offline node's registry (unpacking its .deb)"),
    "curl": ("curl", "waiting for the admin's registry (integration_existing) to answer"),
}
# Debian packages whose files are used rather than a command of theirs.
PACKAGES = {
    "busybox-static": "local-path's helper image (/bin/busybox; its version keys the cache)",
    "libc6-dev": "the pause image (gcc -static links libc.a)",
}


def commands(*names: str) -> Check:
    def check(m: Machine) -> list[Missing]:
        return [
            Missing(f"{name}: {COMMANDS[name][1]}", (COMMANDS[name][0],))
            for name in names
            if not m.which(name)
        ]

    return check


def packages(m: Machine) -> list[Missing]:
    """Every package in PACKAGES that dpkg does not list as installed (one dpkg-query)."""
    _, out = m.run(["dpkg-query", "-W", "-f=${Package} ${Status}\\n", *PACKAGES])
    installed = {ln.split()[0] for ln in out.splitlines() if ln.endswith(" installed")}
    return [Missing(f"{p}: {why}", (p,)) for p, why in PACKAGES.items() if p not in installed]


def ca_bundle(m: Machine) -> list[Missing]:
    if m.exists(controllers.CA_BUNDLE):
        return []
    return [
        Missing(f"{controllers.CA_BUNDLE}: the controller images' CA bundle", ("ca-certificates",))
    ]


def root(m: Machine) -> list[Missing]:
    if m.is_root():
        return []
    return [Missing("root: debootstrap and chroot (the Debian base images)", fix="run as root")]


def lacks_capabilities(m: Machine) -> bool:
    """Whether this machine's root lacks a capability ``--privileged`` grants (these VMs:
    CAP_SYS_RESOURCE), as ``files/runc-drop-missing-caps`` finds out for itself."""
    status = m.read("/proc/self/status")
    found = re.search(r"^CapBnd:\s*([0-9a-f]+)", status, re.M)
    last = int(m.read("/proc/sys/kernel/cap_last_cap").strip())
    return found is not None and int(found.group(1), 16) != (1 << (last + 1)) - 1


def docker_engine(m: Machine) -> list[Missing]:
    """The client, an engine that answers, and one that can start kind's privileged nodes."""
    what = "docker: kind's nodes and every image built here"
    if not m.which(docker.DOCKER):
        return [Missing(what, ("docker.io",))]
    code, runtime = m.run([docker.DOCKER, "info", "--format", "{{.DefaultRuntime}}"])
    if code != 0:
        return [
            Missing(
                f"{what}: no engine answers", fix="start it (dockerd, or systemctl start docker)"
            )
        ]
    if not lacks_capabilities(m):
        return []
    found = []
    if runtime.strip() == "runc":
        found.append(Missing("privileged containers (kind's nodes)", fix=docker.CAPS_HINT))
    if not m.which("jq"):
        found.append(
            Missing(
                "jq: the runc wrapper this engine needs (root lacks a capability) runs it", ("jq",)
            )
        )
    return found


def go(m: Machine) -> list[Missing]:
    """``go`` (on PATH or /usr/local/go), at least MIN_GO."""
    code, out = m.run([run.GO, "env", "GOVERSION"]) if m.which(run.GO) else (127, "")
    version = tuple(int(x) for x in re.findall(r"\d+", out)[:3])
    if code == 0 and version >= MIN_GO:
        return []
    found = f" (found {out.strip()})" if code == 0 else ""
    return [Missing(f"go: every Go module built here{found}", fix=GO_HINT)]


def registry_deb(m: Machine) -> list[Missing]:
    """apt can fetch the pinned docker-registry (unless the cache holds its binary)."""
    if m.exists(cache.entry(*mirror.BINARY_ENTRY) / cache.STAMP) or not m.which("apt-get"):
        return []  # cached; or apt-get itself is missing, which `commands` names
    code, _ = m.run(["apt-get", "download", "--print-uris", mirror.DEB])
    if code == 0:
        return []
    what = f"{mirror.DEB} in apt's package lists: the offline node's registry"
    return [Missing(what, fix="apt-get update, with Debian bookworm's main in the sources")]


DOCKER: tuple[Check, ...] = (docker_engine,)
LOCAL_BASE: tuple[Check, ...] = (root, commands("debootstrap"))
REGISTRY: tuple[Check, ...] = (commands("apt-get", "dpkg-deb"), registry_deb)
KINDBUILD: tuple[Check, ...] = (
    *DOCKER,
    *LOCAL_BASE,
    *REGISTRY,
    go,
    commands("gcc", "strip"),
    packages,
    ca_bundle,
)


def needs(session: str, offline: bool = False) -> tuple[Check, ...]:
    """What ``session`` needs: ``kindbuild`` (``python -m integration.kindbuild``), or a nox
    session (``--offline`` runs the kind build first; the integration run's ``up --base
    local`` and integration_existing's ``build --base local`` debootstrap a base)."""
    if session == "kindbuild" or (session == "integration" and offline):
        return KINDBUILD
    if session == "integration":
        return DOCKER
    if session == "integration_existing":
        return (*(KINDBUILD if offline else (*DOCKER, *LOCAL_BASE, *REGISTRY)), commands("curl"))
    raise ValueError(f"unknown session {session!r}: one of {', '.join(SESSIONS)}")


def missing(checks: Sequence[Check], m: Machine | None = None) -> list[Missing]:
    """Every check's findings, in order, each once."""
    machine = m or Machine()
    found = [x for check in checks for x in check(machine)]
    return list(dict.fromkeys(found))


def report(found: Sequence[Missing], who: str) -> str:
    """What is missing and how to add it: one ``apt-get`` line for every package."""
    lines = [f"{who} needs what this machine lacks (nothing was built or started):"]
    lines += [f"  - {x.what}" + (f": {x.fix}" if x.fix else "") for x in found]
    names = list(dict.fromkeys(p for x in found for p in x.packages))
    if names:
        install = "apt-get update && apt-get install -y --no-install-recommends"
        lines += ["install the packages (as root) with:", f"  {install} {' '.join(names)}"]
    lines.append(f"then run {who} again")  # last: nox appends its timing to this line
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m integration.kindbuild.sysdeps [SESSION] [--offline]``: exit 1, saying
    what is missing, or 0."""
    args = list(sys.argv[1:] if argv is None else argv)
    offline = "--offline" in args
    rest = [a for a in args if a != "--offline"] or ["kindbuild"]
    if len(rest) != 1 or rest[0] not in SESSIONS:
        print(f"usage: python -m integration.kindbuild.sysdeps [{'|'.join(SESSIONS)}] [--offline]")
        return 2
    found = missing(needs(rest[0], offline))
    if found:
        print(report(found, rest[0]), file=sys.stderr)
        return 1
    print(f"{rest[0]}: every system dependency found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
