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
