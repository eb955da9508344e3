"""Test sessions. Plain ``nox`` = lint + unit (offline, a few minutes).

All sessions share one virtualenv (``.nox/shared``), installed from ``pyproject.toml``
(the one install source) and re-installed only when ``pyproject.toml`` changes, so
TensorFlow is installed once rather than once per session.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
SHARED_ENV = ROOT / ".nox" / "shared"
EXTRAS = "test"

nox.options.sessions = ["lint", "unit"]
nox.options.error_on_missing_interpreters = True


def _bin(name: str) -> str:
    return str(SHARED_ENV / ("Scripts" if os.name == "nt" else "bin") / name)


def _shared_env(session: nox.Session) -> None:
    """Create/refresh the shared venv; skip the install when pyproject.toml is unchanged."""
    stamp = SHARED_ENV / ".distml-installed"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest() + EXTRAS
    if stamp.is_file() and stamp.read_text() == want:
        return
    if not Path(_bin("python")).exists():
        session.run(sys.executable, "-m", "venv", str(SHARED_ENV), external=True)
        session.run(_bin("python"), "-m", "pip", "install", "--upgrade", "pip", external=True)
    session.run(_bin("python"), "-m", "pip", "install", "-e", f".[{EXTRAS}]", external=True)
    stamp.write_text(want)


def _pytest(session: nox.Session, *args: str) -> None:
    """The one way sessions run pytest: in the shared env, forwarding ``nox -- ARGS``."""
    _shared_env(session)
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONDONTWRITEBYTECODE": "1", **session.env}
    session.run(_bin("python"), "-m", "pytest", *args, *session.posargs, env=env, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Ruff lint and format check; hadolint on the Dockerfile."""
    _shared_env(session)
    session.run(_bin("ruff"), "check", ".", external=True)
    session.run(_bin("ruff"), "format", "--check", ".", external=True)
    session.run(_bin("hadolint"), "Dockerfile", external=True)


@nox.session(venv_backend="none")
def unit(session: nox.Session) -> None:
    """Unit tests: offline, real TF at toy scale (incl. a 2-process MWMS run)."""
    _pytest(session, "tests", "--ignore=tests/e2e", "--ignore=tests/image")


@nox.session(venv_backend="none", default=False, tags=["slow"])
def e2e(session: nox.Session) -> None:
    """The whole lifecycle on the local runtime: real workers, server, Locust (minutes)."""
    data = os.environ.get("DISTML_DATA_DIR") or str(ROOT.parent / "shared/data/fashion-mnist")
    if not (Path(data) / "train-images-idx3-ubyte.gz").is_file():
        session.error(f"e2e needs the Fashion-MNIST files: set DISTML_DATA_DIR (tried {data})")
    session.env["DISTML_DATA_DIR"] = data
    _pytest(session, "tests/e2e", "-v")


@nox.session(venv_backend="none", default=False, tags=["slow"])
def image(session: nox.Session) -> None:
    """Build the image and run it as pods do (needs a running Docker engine; never installs)."""
    _shared_env(session)
    py = _bin("python")
    # Fails loudly, naming what is missing, when no Docker engine answers.
    docker = session.run(
        py, "-m", "runtime.image", "check", silent=True, external=True, success_codes=[0, 1]
    )
    if "error:" in docker:
        session.error(
            f"the image tier needs a running Docker engine and a BuildKit-capable "
            f"client; it never installs them itself.\n{docker.strip()}"
        )
    docker = docker.strip().splitlines()[-1]
    base = os.environ.get("DISTML_IMAGE_BASE")  # e.g. python:3.11-slim-bookworm
    build_args = ["--base-image", base] if base else ["--base", "local"]
    session.run(_bin("invoke"), "build", "--docker", docker, *build_args, external=True)
    tag = session.run(py, "-m", "runtime.image", "tag", silent=True, external=True)
    session.env["DISTML_IMAGE"] = tag.strip().splitlines()[-1]
    session.env["DISTML_DOCKER"] = docker
    data = os.environ.get("DISTML_DATA_DIR") or str(ROOT.parent / "shared/data/fashion-mnist")
    session.env["DISTML_DATA_DIR"] = data
    _pytest(session, "tests/image", "-v")


@nox.session(venv_backend="none", default=False, tags=["bench"])
def bench(session: nox.Session) -> None:
    """Accuracy benchmark: all models, 2 workers, real data (tens of minutes)."""
    _shared_env(session)
    session.run(_bin("python"), "benchmarks/accuracy.py", *session.posargs, external=True)
