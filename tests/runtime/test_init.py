"""runtime/__init__.py: which runtime ``auto`` picks and why, and how an unknown or unavailable
runtime is explained."""

from __future__ import annotations

import pytest

from common.errors import DistmlError
from runtime import select_runtime


@pytest.mark.parametrize(
    ("requested", "k3d", "docker", "ready", "expected", "why"),
    [
        ("auto", "/usr/bin/k3d", True, True, "k3d", "a Docker daemon answers and k3d is on PATH"),
        ("auto", None, True, True, "local", "k3d is not on PATH"),
        ("auto", "/usr/bin/k3d", False, True, "local", "no Docker daemon answers"),
        ("auto", "/usr/bin/k3d", True, False, "local", "not in this version yet"),
        ("local", "/usr/bin/k3d", True, True, "local", "--runtime local was asked for"),
        ("kind", None, False, True, "kind", "--runtime kind was asked for"),
    ],
    ids=[
        "auto with docker and k3d",
        "auto without k3d",
        "auto without docker",
        "auto before cluster runtimes exist",
        "explicit local",
        "explicit kind",
    ],
)
def test_runtime_selection(requested, k3d, docker, ready, expected, why):
    name, reason = select_runtime(
        requested, which=lambda tool: k3d, docker_ok=lambda: docker, cluster_ready=ready
    )
    assert name == expected
    assert why in reason


def test_unknown_runtime_and_unavailable_cluster_runtime_are_explained():
    with pytest.raises(DistmlError, match="valid: auto, local, k3d, kind"):
        select_runtime("minikub")
    with pytest.raises(DistmlError, match="use --runtime local"):
        select_runtime("k3d", cluster_ready=False)


def test_docker_probe_is_only_consulted_when_k3d_exists():
    calls = []
    select_runtime(
        "auto", which=lambda t: None, docker_ok=lambda: calls.append(1) or True, cluster_ready=True
    )
    assert calls == []
