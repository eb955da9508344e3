"""Fixtures shared by the image tier: the image tag, the Docker client, cleanup."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def image() -> str:
    tag = os.environ.get("DISTML_IMAGE")
    if not tag:
        pytest.skip("no image to test: set DISTML_IMAGE, or run this tier with `nox -s image`")
    return tag


@pytest.fixture(scope="session")
def docker() -> str:
    return os.environ.get("DISTML_DOCKER", "docker")


@pytest.fixture(scope="session")
def data_dir(required_data_dir: Path) -> Path:
    return required_data_dir


class Docker:
    """Runs docker commands and remembers what it created, to remove it afterwards."""

    def __init__(self, docker: str) -> None:
        self.docker = docker
        self.prefix = f"distml-test-{uuid.uuid4().hex[:8]}"
        self.containers: list[str] = []
        self.networks: list[str] = []

    def run(self, *args: str, check: bool = True, timeout: float = 600):
        result = subprocess.run(
            [self.docker, *args], capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed:\n{result.stderr[-3000:]}")
        return result

    def name(self, what: str) -> str:
        return f"{self.prefix}-{what}"

    def cleanup(self) -> None:
        for c in self.containers:
            self.run("rm", "-f", c, check=False)
        for n in self.networks:
            self.run("network", "rm", n, check=False)


@pytest.fixture(scope="session")
def dk(docker):
    d = Docker(docker)
    try:
        yield d
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def volume(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("volume")
    os.chmod(path, 0o777)  # the container user (UID 1000) writes here, as on a PVC
    yield path
    # Files written by UID 1000 inside the container: removable by us (root or owner).
    shutil.rmtree(path, ignore_errors=True)
