"""The kind build's pure parts: go.mod rewriting, reading kind's Go constants, the
version flags, and the cache's build-once contract. (The builds themselves need Go,
Docker and minutes of CPU: ``python -m integration.kindbuild``.)"""

from __future__ import annotations

import json

import pytest

from integration.kindbuild import cache, gomodule, kindsource, kubernetes

GOMOD = """module k8s.io/kubernetes

require k8s.io/api v0.0.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/x/y v1.0.0 => github.com/x/z v1.2.3 // fork
\tgithub.com/a/b => ../b
)

replace github.com/c/d => github.com/c/e v0.1.0
"""


def test_staging_modules_are_pointed_at_the_published_version(tmp_path):
    (tmp_path / "go.mod").write_text(GOMOD)
    assert gomodule.staging_replaces(tmp_path / "go.mod", "v0.33.1") == {
        "k8s.io/api": "k8s.io/api v0.33.1",
        "k8s.io/client-go": "k8s.io/client-go v0.33.1",
    }


def test_module_replaces_are_inherited_and_directory_replaces_dropped(tmp_path):
    (tmp_path / "go.mod").write_text(GOMOD)
    assert gomodule.inherited_replaces(tmp_path / "go.mod") == {
        "github.com/x/y": "github.com/x/z v1.2.3",
        "github.com/c/d": "github.com/c/e v0.1.0",
    }


def test_a_go_constant_made_of_raw_strings_and_constants_is_read_whole():
    source = 'const img = "docker.io/x:v1"\n\nconst manifest = `a: 1\nimage: ` + img + `\nb: 2\n`\n'
    assert kindsource.go_string(source, "manifest") == "a: 1\nimage: docker.io/x:v1\nb: 2\n"
    with pytest.raises(ValueError):
        kindsource.go_string(source, "missing")


def test_every_binary_reports_the_pinned_version():
    flags = kubernetes.version_ldflags("v1.33.1", "abc", "2025-05-15T08:19:07Z")
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        assert f"-X '{pkg}.gitVersion=v1.33.1'" in flags
        assert f"-X '{pkg}.gitMinor=33'" in flags


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
