"""ml.server.watcher: the version watcher serves the newest integer version, skips a version
that fails to load until its directory changes, and falls back when the served one goes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ml.server import watcher
from tests.support.serve_requests import MODEL


def _version_dirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir(parents=True)


def test_watcher_serves_newest_integer_version_and_skips_failures(tmp_path: Path) -> None:
    root = tmp_path / "serving" / MODEL
    attempts: list[int] = []

    def loader(version: int, path: Path) -> watcher.LoadedVersion:
        attempts.append(version)
        if (path / "broken").exists():
            raise ValueError("corrupt SavedModel")
        return watcher.LoadedVersion(version, path, {}, None)

    versions = watcher.VersionWatcher(root, loader=loader)
    assert not versions.poll() and versions.current is None  # no directory at all yet
    _version_dirs(root, "1", "2", ".publish-9-tmp", "10x", "notes")
    (root / "7").write_text("a file, not a version")
    assert versions.poll() and versions.current.version == 2
    assert not versions.poll() and attempts == [2]  # nothing new: nothing loaded

    _version_dirs(root, "3")
    (root / "3" / "broken").write_text("")
    assert not versions.poll() and versions.current.version == 2  # 3 failed: keep serving 2
    assert not versions.poll() and attempts == [2, 3]  # a failed version is not retried...
    (root / "3" / "broken").unlink()
    os.utime(root / "3", ns=(1, 1))  # ...until its directory changes
    assert versions.poll() and versions.current.version == 3

    shutil.rmtree(root / "3")  # the served version disappears: fall back to the newest left
    assert versions.poll() and versions.current.version == 2


def test_the_server_lists_versions_without_importing_the_selection() -> None:
    # The version rule is ml.selection.publishing's: serving must not load
    # ml.selection.select (and with it ml.selection.evaluate, the publish lock and the
    # canary's end) to know which version to serve.
    code = "import sys, ml.server.watcher; print(*sorted(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "ml.selection.publishing" in out
    assert not {
        "ml.selection.select",
        "ml.selection.evaluate",
        "ml.selection.canary_publish",
    } & set(out)
