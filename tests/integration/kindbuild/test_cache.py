"""integration.kindbuild.cache: the build-once contract: an entry is built once, stamped with
its version, and a failed build leaves nothing behind."""

from __future__ import annotations

import json

import pytest

from integration.kindbuild import cache


def test_an_entry_is_built_once_and_a_failed_build_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTML_KIND_CACHE", str(tmp_path))
    calls = []

    def build(out):
        calls.append(out)
        (out / "bin").mkdir()

    first = cache.cached("tool", "v1", build)
    second = cache.cached("tool", "v1", build)
    assert len(calls) == 1 and first.built and not second.built
    assert (tmp_path / "tool-v1" / "bin").is_dir()
    assert json.loads((tmp_path / "tool-v1" / cache.STAMP).read_text())["version"] == "v1"

    def broken(out):
        raise RuntimeError("compile error")

    with pytest.raises(RuntimeError):
        cache.cached("tool", "v2", broken)
    assert not (tmp_path / "tool-v2").exists()


def test_prune_removes_what_was_not_used_and_leaves_builds_under_way(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setenv("DISTML_KIND_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "USED", set())
    cache.cached("tool", "v1", lambda out: None)
    cache.USED.clear()  # v1 is an older version: this run only used v2
    kept = cache.cached("tool", "v2", lambda out: None).path
    (tmp_path / "tool-v3.partial").mkdir()  # a build a kill interrupted
    (tmp_path / ".tool-v0.lock").touch()  # a lock with nothing left
    busy = tmp_path / "other-v9.partial"  # a build another process is running
    busy.mkdir()
    with open(tmp_path / ".other-v9.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        removed = cache.prune(set(cache.USED))
    assert removed == ["tool-v1", "tool-v3"]
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert left == ["other-v9.partial", kept.name]  # lock files stay (see cache.prune)
    assert cache.prune(set(cache.USED)) == ["other-v9"]  # its build has ended now
