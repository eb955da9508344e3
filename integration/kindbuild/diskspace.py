"""Free disk space, checked before the kind build or an integration run writes anything.

The kind build filled the disk twice: about 3 GB per node image in the cache (and as much
again in Docker once loaded), 3 GB per clone's venv, Go's build cache at 19 GB after a
cold build. Running out halfway fails some later step, most of an hour in, with an error
that does not say why. So ``python -m integration.kindbuild`` and the integration sessions
compare, on each filesystem the run writes to, the free space with what it will write, and
stop before starting, naming both and the ways to free space (``--prune``, ``go clean
-cache``, ``docker system prune``). The sizes are estimates, rounded up; warm (a finished
node in the cache) a run writes a fraction of a cold one. ``DISTML_KIND_MIN_FREE_GB``
replaces the estimate (0: no check). Stdlib only, and no process: nox imports it before
any virtualenv exists.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from integration.kindbuild import cache, pins
from runtime.image import IMAGE_REPO

GB = 10**9
MIN_FREE_ENV = "DISTML_KIND_MIN_FREE_GB"
# GB each part of a run writes, by place, measured on a fresh machine with an empty HOME
# (benchmarks/results/disk-2026-12-07.md), rounded up. Only the parts missing are counted.
#: The kind build with nothing cached: every Go build (its module and build caches), the
#: cache's entries, the bases and node images in Docker.
KIND_BUILD = {"cache": 10, "gocache": 18, "gomodcache": 12, "docker": 10}
#: minikube's own steps (its CLI, storage provisioner, Debian base, node) on a finished
#: kind build: the Kubernetes pieces and controller images come from the kind build's cache.
MINIKUBE_BUILD = {"cache": 4, "gocache": 2, "gomodcache": 2, "docker": 4}
#: A finished node rebuilt after a recipe change (its images and the Go builds cached).
NODE_REBUILD = {"cache": 4, "docker": 4}
#: What a running cluster writes into Docker: its node's containers and volumes (images
#: unpacked by containerd, the volume's data, logs), at the run's peak.
CLUSTER_GB = {"kind": 9, "minikube": 10}
VENV_GB = 4  # the shared venv (TensorFlow among it) and pip's cache, when not installed yet
#: The project image built --base local: with no distml image in the engine (its Debian
#: base and the TensorFlow layer), or beside one (the layers it shares are not written).
IMAGE_GB = {"cold": 2, "beside": 1}
NODES = {"kind": "node-stack", "minikube": "minikube-node"}  # each target's last entry
DOCKER_CONFIG = Path("/etc/docker/daemon.json")
DOCKER_ROOT = Path("/var/lib/docker")
FREE_IT = (
    (
        "python -m integration.kindbuild --prune",
        "runs the full build, then deletes every cache entry it did not use: older "
        "versions, interrupted builds, the minikube entries",
    ),
    ("go clean -cache", "Go's build cache; the next build compiles again only what it needs"),
    ("docker system prune", "stopped containers, unused networks, dangling images"),
)


@dataclass(frozen=True)
class Need:
    """``gb`` written under ``path`` (which may not exist yet) for ``what``."""

    what: str
    path: Path
    gb: float


def warm(target: str) -> bool:
    """Whether the cache holds ``target``'s finished node (``kind`` or ``minikube``) at
    the pinned Kubernetes: then the hour of Go builds under it is cached too."""
    prefix = f"{NODES[target]}-{pins.KUBERNETES}-"
    root = cache.root()
    found = root.glob(f"{prefix}*/{cache.STAMP}") if root.is_dir() else []
    return any(not stamp.parent.name.endswith(cache.PARTIAL) for stamp in found)


def _go_env_file() -> dict[str, str]:
    """``go env -w``'s settings ($GOENV, else the user config dir's ``go/env``)."""
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    path = Path(os.environ.get("GOENV") or config / "go" / "env")
    if not path.is_file():
        return {}
    pairs = (line.partition("=") for line in path.read_text().splitlines())
    return {name.strip(): value.strip() for name, eq, value in pairs if eq}


def go_cache() -> Path | None:
    """Where Go keeps compiled packages, as ``go env GOCACHE`` says (no process run)."""
    value = os.environ.get("GOCACHE") or _go_env_file().get("GOCACHE")
    if value == "off":
        return None
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(value) if value else user_cache / "go-build"


def go_mod_cache() -> Path:
    """Where Go keeps downloaded modules: GOMODCACHE, else the first GOPATH's pkg/mod."""
    settings = _go_env_file()
    value = os.environ.get("GOMODCACHE") or settings.get("GOMODCACHE")
    if value:
        return Path(value)
    gopath = os.environ.get("GOPATH") or settings.get("GOPATH") or str(Path.home() / "go")
    return Path(gopath.split(os.pathsep)[0]) / "pkg" / "mod"


def docker_root() -> Path | None:
    """The engine's data root: daemon.json's ``data-root``, else /var/lib/docker when it
    exists; None when unknown (an engine elsewhere: its disk is not this one)."""
    try:
        configured = json.loads(DOCKER_CONFIG.read_text()).get("data-root")
    except (OSError, ValueError):
        configured = None
    if configured:
        return Path(configured)
    return DOCKER_ROOT if DOCKER_ROOT.is_dir() else None


def build_sizes(target: str) -> tuple[str, dict[str, int]]:
    """What the kind build of ``target`` writes, by place, and why: only the parts not
    finished in the cache (minikube's node is built on the kind build's pieces)."""
    if warm(target):
        return "warm: its node is cached (at most rebuilt)", dict(NODE_REBUILD)
    if target == "minikube" and warm("kind"):
        return "cold on a cached kind build: minikube's own steps", dict(MINIKUBE_BUILD)
    parts = [KIND_BUILD, MINIKUBE_BUILD] if target == "minikube" else [KIND_BUILD]
    total = {key: sum(part.get(key, 0) for part in parts) for key in KIND_BUILD}
    return "cold: nothing cached", total


def needs(
    target: str | None,
    *,
    venv: Path | None = None,
    image: bool = False,
    cluster: str | None = None,
) -> list[Need]:
    """What a run writes: the kind build of ``target`` (``kind``, ``minikube`` or None for
    no build), the shared venv at ``venv`` (None: installed), the project image, and a
    running ``cluster`` (``kind``, ``minikube``, ``k3d`` or None)."""
    found = []
    docker = docker_root()
    if target:
        state, sizes = build_sizes(target)
        places = {
            "cache": (f"the {target} build's cache, {state}", cache.root()),
            "gocache": ("Go's build cache", go_cache()),
            "gomodcache": ("Go's module cache", go_mod_cache()),
            "docker": ("the node images in Docker", docker),
        }
        for key, gb in sizes.items():
            label, where = places[key]
            if where is not None and gb:  # a place that cannot be found is not checked
                found.append(Need(label, where, gb))
    if venv is not None:
        found.append(Need("the shared venv", venv, VENV_GB))
    if image and docker:
        beside = bool(engine_images(IMAGE_REPO))
        what = "beside one in the engine" if beside else "no distml image in the engine"
        gb = IMAGE_GB["beside" if beside else "cold"]
        found.append(Need(f"the project image, built --base local ({what})", docker, gb))
    if cluster and docker:
        gb = CLUSTER_GB.get(cluster, max(CLUSTER_GB.values()))
        found.append(Need(f"the {cluster} cluster while it runs", docker, gb))
    return found


DOCKER_SOCKET = Path("/var/run/docker.sock")


def engine_images(repo: str) -> list[str] | None:
    """The tags of ``repo`` the local Docker engine holds, asked over its socket (no
    process: ``docker`` may not be on PATH yet); None when the engine does not answer
    (then the image counts as not there)."""
    query = urllib.parse.quote(json.dumps({"reference": [repo]}))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(DOCKER_SOCKET))
            request = f"GET /images/json?filters={query} HTTP/1.0\r\nHost: docker\r\n\r\n"
            sock.sendall(request.encode())
            answer = b"".join(iter(lambda: sock.recv(65536), b""))
        head, _, body = answer.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.0 200") and not head.startswith(b"HTTP/1.1 200"):
            return None
        images = json.loads(body)
        return [tag for image in images for tag in image.get("RepoTags") or []]
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def existing(path: Path) -> Path:
    """``path``, or the nearest directory above it that exists (where it will be made)."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def filesystem(path: Path) -> int:
    """The device ``path`` is on: needs on the same one add up."""
    return os.stat(existing(path)).st_dev


def shortfall(found: Sequence[Need], who: str) -> str | None:
    """None when every filesystem has room for what ``who`` writes to it (or, with
    ``DISTML_KIND_MIN_FREE_GB``, that many GB free), else what to say and do."""
    value = os.environ.get(MIN_FREE_ENV, "").strip()
    try:
        floor = float(value) if value else None
    except ValueError:
        return f"{MIN_FREE_ENV}={value!r}: give the GB each filesystem must have free (0: no check)"
    if floor == 0:
        return None
    groups: dict[int, list[Need]] = {}
    for need in found:
        groups.setdefault(filesystem(need.path), []).append(need)
    short = []
    for group in groups.values():
        free = shutil.disk_usage(existing(group[0].path)).free / GB
        want = floor if floor is not None else sum(n.gb for n in group)
        if free < want:
            short.append(_line(free, want, group, floor is not None))
    return _report(short, who) if short else None


def _line(free: float, want: float, group: Sequence[Need], floor: bool) -> str:
    """One filesystem: its free space, what it must have, and what lands on it."""
    where = existing(group[0].path)
    why = f"{MIN_FREE_ENV} asks {want:g} GB" if floor else f"needs {want:g} GB"
    parts = [f"      {n.gb:4g} GB  {n.what} ({n.path})" for n in group]
    return "\n".join([f"  - the filesystem of {where}: {free:.1f} GB free, {why}:", *parts])


def _report(short: Sequence[str], who: str) -> str:
    lines = [f"{who} needs more free disk than this machine has (nothing was built or started):"]
    lines += [*short, "free space with:"]
    lines += [f"  {command}  ({why})" for command, why in FREE_IT]
    lines.append(f"or set {MIN_FREE_ENV} to the GB each filesystem must have free (0: no check)")
    lines.append(f"then run {who} again")  # last: nox appends its timing to this line
    return "\n".join(lines)
