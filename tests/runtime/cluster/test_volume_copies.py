"""runtime/cluster/volume.py's copies: each file under its name; ``replace`` removes what is
there first (``kubectl cp`` would copy a folder into a folder of that name, not over it)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from unittest.mock import Mock

import pytest

from runtime.cluster import volume
from runtime.cluster.volume import LOADER_POD, Volume


@pytest.fixture
def loader(monkeypatch) -> tuple[Volume, list[str]]:
    """A Volume whose commands are recorded, not run."""
    commands: list[str] = []
    monkeypatch.setattr(volume, "delete_and_wait", lambda *a, **k: None)
    c = Mock(run=lambda cmd, **_: commands.append(cmd))
    kubectl = SimpleNamespace(kubectl=lambda args: f"kubectl {args}")
    cx = SimpleNamespace(c=c, dry=True, namespace="ns", provider=kubectl, apply=lambda obj: obj)
    monkeypatch.setattr(volume.manifests, "loader_pod", lambda s: {})
    return Volume(cx, Mock()), commands


def test_copy_in_puts_each_file_under_its_name(loader):
    vol, ran = loader
    vol.copy_in([Path("/tmp/a b/x.gz")], "/data/raw", timeout=1)
    assert ran == [
        f"kubectl -n ns exec {LOADER_POD} -- mkdir -p /data/raw",
        f"kubectl -n ns cp '/tmp/a b/x.gz' {LOADER_POD}:/data/raw/x.gz",
    ]


def test_replace_removes_what_is_there_first_and_only_that(loader):
    vol, ran = loader
    vol.copy_in([Path("/tmp/cnn")], "/data/candidates", timeout=1, replace=True)
    assert ran[1:] == [
        f"kubectl -n ns exec {LOADER_POD} -- rm -rf /data/candidates/cnn",
        f"kubectl -n ns cp /tmp/cnn {LOADER_POD}:/data/candidates/cnn",
    ]
