"""The Docker engine, through Debian's client (``/usr/bin/docker``): no registry is
reachable, so every image here is imported, built ``FROM`` a local image, or loaded."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

from integration.kindbuild.run import BuildError, run

CAPS_HINT = (
    "this engine cannot grant every capability --privileged asks for (on these VMs root "
    "lacks CAP_SYS_RESOURCE); install integration/kindbuild/files/runc-drop-missing-caps "
    "as the engine's default runtime (the comment at its top says how) and restart dockerd"
)

# Debian's docker.io client matches its engine; a newer client on PATH may not.
DOCKER = (
    "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else shutil.which("docker") or "docker"
)


def has_image(tag: str) -> bool:
    return image_id(tag) is not None


def image_id(tag: str) -> str | None:
    """The engine's image id for ``tag`` (``sha256:…``), or None when it has no such tag."""
    argv = [DOCKER, "image", "inspect", "-f", "{{.Id}}", tag]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def archive_ids(archive: Path) -> dict[str, str]:
    """tag -> image id of each image in a ``docker save`` archive (its manifest.json)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        manifest = json.load(member) if member is not None else []
    ids = {}
    for entry in manifest:
        # "<hex>.json" (docker's own layout) or "blobs/sha256/<hex>" (the OCI layout)
        hexid = entry["Config"].rsplit("/", 1)[-1].removesuffix(".json")
        ids.update({short(tag): f"sha256:{hexid}" for tag in entry.get("RepoTags") or []})
    return ids


def short(tag: str) -> str:
    """A tag as ``docker save`` records it: Docker Hub's names without ``docker.io/``."""
    return tag.removeprefix("docker.io/").removeprefix("library/")


def import_rootfs(rootfs: Path, tag: str, changes: list[str]) -> None:
    """``tar`` of a directory piped into ``docker import`` (a one-layer image)."""
    flags = " ".join(f"-c {shlex.quote(c)}" for c in changes)
    tar = f"tar -C {shlex.quote(str(rootfs))} --numeric-owner -c ."
    cmd = f"{tar} | {DOCKER} import {flags} - {tag}"
    run(["sh", "-c", cmd], heavy=True)


def build(context: Path, tag: str) -> None:
    """``docker build`` with the classic builder: ``FROM`` local images, never a pull."""
    env = dict(os.environ, DOCKER_BUILDKIT="0")
    run([DOCKER, "build", "-q", "-t", tag, str(context)], env=env, heavy=True)


def save(tags: list[str], archive: Path) -> None:
    run([DOCKER, "save", "-o", str(archive), *tags], heavy=True)


def ensure_loaded(tags: list[str], archive: Path) -> None:
    """Load ``archive`` unless every tag is already in the engine *as that archive's image*:
    the tags stay the same from build to build (``distml-kind/node:v1.33.1``), so a tag
    alone could name an older build than the cache entry asked for."""
    want = archive_ids(archive)
    have = {t: image_id(t) for t in tags}  # one inspect per tag
    if any(have[t] is None or have[t] != want.get(short(t)) for t in tags):
        run([DOCKER, "load", "-i", str(archive)], heavy=True)


def check_privileged(image: str) -> None:
    """A privileged container must start here: kind's nodes are privileged."""
    argv = [DOCKER, "run", "--rm", "--privileged", "--entrypoint", "true", image]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        hint = CAPS_HINT if "unable to apply caps" in done.stderr else ""
        raise BuildError(f"{shlex.join(argv)} failed: {done.stderr.strip()}\n{hint}".strip())
