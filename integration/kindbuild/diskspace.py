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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from integration.kindbuild import cache, pins

GB = 10**9
MIN_FREE_ENV = "DISTML_KIND_MIN_FREE_GB"
# GB written, by place. Cold (nothing cached), measured on a fresh machine (2026-12-04, kind
# and minikube built): the cache 16 GB, Go's build cache 18, its module cache 12, Docker
# 13 (the nodes and bases loaded), each rounded up. Warm (the target's node finished in
# the cache): at most that node is rebuilt, after a recipe change, and loaded again.
COLD = {"cache": 17, "gocache": 20, "gomodcache": 13, "docker": 14}
WARM = {"cache": 4, "docker": 4}
VENV_GB = 3  # the shared venv (TensorFlow among it), when not installed yet
IMAGE_GB = 3  # the project image (2.07 GB) built into Docker by `--base local`
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


def needs(target: str | None, *, venv: Path | None = None, image: bool = False) -> list[Need]:
    """What a run writes: the kind build of ``target`` (``kind``, ``minikube`` or None for
    no build), the shared venv at ``venv`` (None: installed), the project image."""
    found = []
    docker = docker_root()
    if target:
        cached = warm(target)
        state = "warm: its node is cached" if cached else "cold: no finished node cached"
        places = {
            "cache": (f"the {target} build's cache, {state}", cache.root()),
            "gocache": ("Go's build cache", go_cache()),
            "gomodcache": ("Go's module cache", go_mod_cache()),
            "docker": ("the node images in Docker", docker),
        }
        sizes = WARM if cached else COLD
        for key, gb in sizes.items():
            label, where = places[key]
            if where is not None:  # a place that cannot be found is not checked
                found.append(Need(label, where, gb))
    if venv is not None:
        found.append(Need("the shared venv", venv, VENV_GB))
    if image and docker:
        found.append(Need("the project image, built --base local", docker, IMAGE_GB))
    return found


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
