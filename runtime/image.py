"""The project image: content-hash tag, Docker client choice, local base image, build.

The tag is a hash of exactly the files the build context holds (the .dockerignore
allowlist), computed without Docker, so ``render`` and ``build`` agree on it.
Every shell command goes through ``c.run`` (so ``invoke --dry`` shows it).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from common.errors import DistmlError

IMAGE_REPO = "distml"
LOCAL_BASE = "distml-base:bookworm"
DEFAULT_BASE = "python:3.11-slim-bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What the build context holds (must match .dockerignore; a unit test checks).
CONTEXT_FILES = ("Dockerfile", "requirements-image.txt")
CONTEXT_DIRS = ("ml",)
CA_DIR = Path("/usr/local/share/ca-certificates")


class ImageError(DistmlError):
    """A build problem a user can fix; the message says how."""


def context_files(root: Path) -> list[Path]:
    """The files of the build context, relative to ``root``, sorted."""
    files = [Path(name) for name in CONTEXT_FILES if (root / name).is_file()]
    for d in CONTEXT_DIRS:
        for path in sorted((root / d).rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
                files.append(rel)
    return sorted(files)


def context_hash(root: Path) -> str:
    """12 hex digits of SHA-256 over every context file's path and bytes."""
    digest = hashlib.sha256()
    for rel in context_files(root):
        digest.update(str(rel).encode() + b"\0")
        digest.update((root / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def image_tag(root: Path) -> str:
    """``distml:<content hash>`` (never ``latest``: a ``latest`` tag makes clusters pull)."""
    return f"{IMAGE_REPO}:{context_hash(root)}"


def code_version(root: Path) -> str:
    """The code version a published model records (publish.json's ``code_version``): the
    image tag this code builds to. On a cluster that is the image the pods run (the
    manifests pass ``Settings.image``, which is this tag); locally, the same tag for the
    same ``ml/`` code, so a local model and an image can be matched."""
    return image_tag(root)


def extra_ca_files(env: Mapping[str, str] | None = None) -> list[Path]:
    """CA certificates to trust during the build: DISTML_EXTRA_CA (files, ':'-separated)
    and every ``*.crt`` under /usr/local/share/ca-certificates (Debian's place for them)."""
    source = os.environ if env is None else env
    files = [Path(p) for p in source.get("DISTML_EXTRA_CA", "").split(os.pathsep) if p]
    if CA_DIR.is_dir():
        files += sorted(CA_DIR.rglob("*.crt"))
    return [f for f in files if f.is_file()]


def find_docker(
    c: Any, configured: str = "", which: Callable[[str], str | None] | None = None
) -> str:
    """A Docker client that can do BuildKit builds (``RUN --mount=type=secret``).

    Docker >= 23 clients need the buildx plugin for BuildKit; older clients (Debian's
    docker.io 20.10) build with ``DOCKER_BUILDKIT=1`` on their own.
    """
    which = which or shutil.which
    candidates = [configured] if configured else [which("docker") or "", "/usr/bin/docker"]
    tried = []
    for docker in dict.fromkeys(p for p in candidates if p):
        if which(docker) is None:  # shutil.which takes absolute paths too
            tried.append(f"{docker}: not found")
            continue
        if c.run(f"{docker} buildx version", hide=True, warn=True).ok:
            return docker
        version = c.run(
            f"{docker} version --format '{{{{.Client.Version}}}}'", hide=True, warn=True
        )
        # Without an engine `docker version` exits non-zero but still prints the client's.
        major = version.stdout.strip().split(".")[0]
        if (major.isascii() and major.isdigit()) and int(major) < 23:
            return docker
        tried.append(f"{docker}: client {version.stdout.strip() or '?'} without buildx")
    raise ImageError(
        "no Docker client that can run BuildKit builds; tried: "
        + "; ".join(tried or ["none"])
        + ". Install the buildx plugin (Docker's docker-buildx-plugin, Debian's docker-buildx) "
        "or Debian's docker.io (its /usr/bin/docker builds with DOCKER_BUILDKIT=1)"
    )


def require_engine(c: Any, docker: str) -> None:
    result = c.run(f"{docker} info", hide=True, warn=True)
    if not result.ok:
        text = f"{result.stdout or ''}\n{result.stderr or ''}"
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        why = next((ln for ln in lines if "daemon" in ln.lower()), lines[0] if lines else "")
        raise ImageError(
            f"no Docker engine answers ({docker} info: {why[:200]}). Start it (systemctl start "
            "docker, or `dockerd &` as root) or install it (apt-get install docker.io)"
        )


def _ready_engine(c: Any, docker: str, workdir: Path) -> str:
    """The Docker client to use, after checking its engine answers; makes ``workdir``."""
    docker = find_docker(c, docker)
    require_engine(c, docker)
    if not c.config.run.dry:
        workdir.mkdir(parents=True, exist_ok=True)
    return docker


def ensure_local_base(
    c: Any, docker: str, workdir: Path, out: Callable[[str], None], mirror: str = DEBIAN_MIRROR
) -> str:
    """Make ``distml-base:bookworm`` from Debian packages (debootstrap), unless it exists."""
    if c.run(f"{docker} image inspect {LOCAL_BASE}", hide=True, warn=True).ok:
        out(f"base image {LOCAL_BASE} exists; reusing it")
        return LOCAL_BASE
    if shutil.which("debootstrap") is None and not c.config.run.dry:
        raise ImageError("--base local needs debootstrap: apt-get install debootstrap (as root)")
    if os.geteuid() != 0 and not c.config.run.dry:
        raise ImageError(
            "--base local runs debootstrap, which needs root: run as root or use "
            "--base-image with a Python 3.11 image you can pull"
        )
    rootfs = workdir / "base-rootfs"
    q = shlex.quote(str(rootfs))
    out(f"making {LOCAL_BASE} from Debian bookworm packages (debootstrap, about a minute)")
    try:
        c.run(f"rm -rf {q}")
        c.run(
            f"debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "
            f"bookworm {q} {mirror}"
        )
        c.run(
            f"rm -rf {q}/var/cache/apt/archives/*.deb {q}/var/lib/apt/lists/* "
            f"{q}/usr/share/doc {q}/usr/share/man"
        )
        c.run(f"tar -C {q} -c . | {docker} import -c 'ENV LANG=C.UTF-8' - {LOCAL_BASE}")
    finally:
        c.run(f"rm -rf {q}", warn=True)
    return LOCAL_BASE


def build(
    c: Any,
    root: Path,
    workdir: Path,
    *,
    base_image: str | None = None,
    base: str | None = None,
    docker: str = "",
    out: Callable[[str], None] = print,
    env: dict[str, str] | None = None,
) -> str:
    """Build the project image; return its tag."""
    if base not in (None, "", "local"):
        raise ImageError(f"--base accepts only 'local', got {base!r}")
    if base and base_image:
        raise ImageError("use either --base local or --base-image IMAGE, not both")
    docker = _ready_engine(c, docker, workdir)
    base_ref = ensure_local_base(c, docker, workdir, out) if base else (base_image or DEFAULT_BASE)
    tag = image_tag(root)
    cmd = [
        f"DOCKER_BUILDKIT=1 {docker} build --progress=plain",
        f"--build-arg BASE_IMAGE={shlex.quote(base_ref)}",
    ]
    cas = extra_ca_files(env)
    if cas:
        bundle = workdir / "extra-ca.pem"
        if not c.config.run.dry:
            bundle.write_text("".join(p.read_text() + "\n" for p in cas))
        cmd.append(f"--secret id=extra_ca,src={shlex.quote(str(bundle))}")
        out(
            f"extra CA certificates for the build (a BuildKit secret, not stored in the "
            f"image): {', '.join(str(p) for p in cas)}"
        )
    cmd += [f"-t {tag}", shlex.quote(str(root))]
    out(f"building {tag} from {base_ref}")
    c.run(" ".join(cmd))
    size = c.run(f"{docker} image inspect --format '{{{{.Size}}}}' {tag}", hide=True, warn=True)
    if size.ok and (size.stdout.strip().isascii() and size.stdout.strip().isdigit()):
        out(f"built {tag}: {int(size.stdout.strip()) / 1e9:.2f} GB")
    else:
        out(f"built {tag}")
    return tag


def lock(
    c: Any,
    root: Path,
    workdir: Path,
    *,
    base_image: str | None = None,
    docker: str = "",
    out: Callable[[str], None] = print,
) -> Path:
    """Resolve requirements-image.in inside the base image and write the pinned list."""
    docker = _ready_engine(c, docker, workdir)
    base_ref = base_image or ensure_local_base(c, docker, workdir, out)
    mounts = f"-v {shlex.quote(str(root / 'requirements-image.in'))}:/tmp/req.in:ro"
    cas = extra_ca_files()
    if cas:
        bundle = workdir / "lock-ca.pem"
        system = Path("/etc/ssl/certs/ca-certificates.crt")
        parts = [system.read_text()] if system.is_file() else []
        if not c.config.run.dry:  # --dry touches nothing
            bundle.write_text("".join(parts + [p.read_text() + "\n" for p in cas]))
        mounts += f" -v {shlex.quote(str(bundle))}:/tmp/ca.pem:ro -e PIP_CERT=/tmp/ca.pem"
    script = (
        "python3 -m venv /tmp/v >/dev/null && /tmp/v/bin/pip install -q "
        "--disable-pip-version-check -r /tmp/req.in >&2 && /tmp/v/bin/pip freeze "
        "--exclude tf-keras --exclude tf_keras"
    )
    result = c.run(
        f"{docker} run --rm {mounts} {shlex.quote(base_ref)} sh -c {shlex.quote(script)}",
        hide="out",
    )
    target = root / "requirements-image.txt"
    header = (
        "# Pinned runtime dependencies of the pod image: requirements-image.in resolved "
        "in the\n# image's Python 3.11 (pip freeze), tf-keras excluded (installed "
        "--no-deps by the Dockerfile).\n# Regenerate: invoke lock-image\n"
    )
    if not c.config.run.dry:
        target.write_text(header + result.stdout)
        out(f"wrote {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m runtime.image check|tag``: for scripts (the nox image session)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args == ["tag"]:
        print(image_tag(Path(__file__).resolve().parents[1]))
        return 0
    if args == ["check"]:
        from invoke import Context

        c = Context()
        try:
            docker = find_docker(c)
            require_engine(c, docker)
        except ImageError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(docker)
        return 0
    print("usage: python -m runtime.image check|tag", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
