"""integration.kindbuild.diskspace: the free space of each filesystem the kind build writes
to, held to what a cold or warm build needs, and the build stopped before it starts when
it is short, saying how to free space; on a faked ``shutil.disk_usage`` (every place under
a temporary directory: nothing of this machine's disk, cache, Go or Docker is read)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from integration.kindbuild import __main__ as kindbuild
from integration.kindbuild import diskspace, pins, sysdeps

COLD_GB = sum(diskspace.COLD.values())
WARM_GB = sum(diskspace.WARM.values())
WHO = "python -m integration.kindbuild"


@pytest.fixture(autouse=True)
def places(tmp_path, monkeypatch) -> SimpleNamespace:
    """Every place the build writes to, under tmp_path; no override set."""
    found = SimpleNamespace(
        cache=tmp_path / "cache",
        gocache=tmp_path / "go-build",
        gomodcache=tmp_path / "gomod",
        docker=tmp_path / "docker",
    )
    found.docker.mkdir()
    monkeypatch.setenv("DISTML_KIND_CACHE", str(found.cache))
    monkeypatch.setenv("GOCACHE", str(found.gocache))
    monkeypatch.setenv("GOMODCACHE", str(found.gomodcache))
    monkeypatch.setenv("GOENV", str(tmp_path / "no-go-env"))
    monkeypatch.setattr(diskspace, "DOCKER_CONFIG", tmp_path / "no-daemon.json")
    monkeypatch.setattr(diskspace, "DOCKER_ROOT", found.docker)
    monkeypatch.delenv(diskspace.MIN_FREE_ENV, raising=False)
    return found


def _free(monkeypatch, gb: float, asked: list | None = None) -> None:
    """Every filesystem has ``gb`` free; the paths asked about go into ``asked``."""

    def disk_usage(path):
        (asked if asked is not None else []).append(Path(path))
        return SimpleNamespace(total=10**12, used=0, free=int(gb * diskspace.GB))

    monkeypatch.setattr(diskspace.shutil, "disk_usage", disk_usage)


def _finished(cache: Path, name: str) -> None:
    (cache / name).mkdir(parents=True)
    (cache / name / "build.json").write_text("{}")


def test_a_cold_build_needs_every_place_added_up_on_one_filesystem(monkeypatch, places):
    found = diskspace.needs("kind")
    assert [(n.path, n.gb) for n in found] == [
        (places.cache, diskspace.COLD["cache"]),
        (places.gocache, diskspace.COLD["gocache"]),
        (places.gomodcache, diskspace.COLD["gomodcache"]),
        (places.docker, diskspace.COLD["docker"]),
    ]
    _free(monkeypatch, COLD_GB)
    assert diskspace.shortfall(found, WHO) is None
    _free(monkeypatch, COLD_GB - 0.5)
    assert diskspace.shortfall(found, WHO) is not None


def test_short_of_space_it_names_the_free_space_the_need_and_how_to_free_it(monkeypatch):
    _free(monkeypatch, 12.34)
    said = diskspace.shortfall(diskspace.needs("kind"), WHO)
    lines = said.splitlines()
    assert (
        lines[0]
        == f"{WHO} needs more free disk than this machine has (nothing was built or started):"
    )
    assert lines[1].endswith(f": 12.3 GB free, needs {COLD_GB} GB:")
    assert "cold: no finished node cached" in lines[2] and "Go's build cache" in lines[3]
    for fix in (
        "python -m integration.kindbuild --prune",
        "go clean -cache",
        "docker system prune",
    ):
        assert any(line.startswith(f"  {fix}  (") for line in lines), fix
    assert diskspace.MIN_FREE_ENV in said
    assert lines[-1] == f"then run {WHO} again"


def test_a_warm_cache_needs_only_a_node_rebuild(monkeypatch, places):
    _finished(places.cache, f"node-stack-{pins.KUBERNETES}-0123abcd")
    assert diskspace.warm("kind") and not diskspace.warm("minikube")
    _free(monkeypatch, WARM_GB)
    assert diskspace.shortfall(diskspace.needs("kind"), WHO) is None
    assert diskspace.shortfall(diskspace.needs("minikube"), WHO) is not None  # its own node
    assert [n.gb for n in diskspace.needs("kind")] == list(diskspace.WARM.values())
    assert "warm: its node is cached" in diskspace.needs("kind")[0].what


@pytest.mark.parametrize(
    "entry",
    [
        f"node-stack-{pins.KUBERNETES}-0123abcd.partial",  # interrupted after its stamp
        "node-stack-v1.0.0-0123abcd",  # another Kubernetes: everything under it rebuilt
        f"node-image-{pins.KUBERNETES}-0123abcd",  # not the last step's
    ],
)
def test_only_a_finished_node_at_the_pinned_kubernetes_is_warm(places, entry):
    _finished(places.cache, entry)
    (places.cache / f"node-stack-{pins.KUBERNETES}-unstamped").mkdir()
    assert not diskspace.warm("kind")


def test_each_filesystem_is_held_to_what_lands_on_it(monkeypatch, places):
    monkeypatch.setattr(
        diskspace, "filesystem", lambda path: 2 if places.docker in [path, *path.parents] else 1
    )
    free = {places.docker: 5.0}
    monkeypatch.setattr(
        diskspace.shutil,
        "disk_usage",
        lambda path: SimpleNamespace(free=int(free.get(Path(path), 1000) * diskspace.GB)),
    )
    said = diskspace.shortfall(diskspace.needs("kind", image=True), WHO)
    short = [" ".join(line.split()) for line in said.split("\nfree space with:")[0].splitlines()]
    want = diskspace.COLD["docker"] + diskspace.IMAGE_GB
    assert short[1:] == [
        f"- the filesystem of {places.docker}: 5.0 GB free, needs {want} GB:",
        f"{diskspace.COLD['docker']} GB the node images in Docker ({places.docker})",
        f"{diskspace.IMAGE_GB} GB the project image, built --base local ({places.docker})",
    ]


def test_a_place_not_made_yet_is_checked_where_it_will_be_made(monkeypatch, places, tmp_path):
    asked = []
    _free(monkeypatch, 1000, asked)
    assert not places.cache.exists()
    assert diskspace.shortfall(diskspace.needs("kind"), WHO) is None
    assert asked == [tmp_path]  # one filesystem, asked once, at the nearest existing directory


def test_the_override_replaces_the_estimate_and_zero_turns_the_check_off(monkeypatch):
    needs = diskspace.needs("kind")
    _free(monkeypatch, COLD_GB + 10)
    monkeypatch.setenv(diskspace.MIN_FREE_ENV, str(COLD_GB + 20))
    assert f"{diskspace.MIN_FREE_ENV} asks {COLD_GB + 20} GB" in diskspace.shortfall(needs, WHO)
    monkeypatch.setenv(diskspace.MIN_FREE_ENV, "1")
    _free(monkeypatch, 2)
    assert diskspace.shortfall(needs, WHO) is None
    monkeypatch.setenv(diskspace.MIN_FREE_ENV, "0")
    monkeypatch.setattr(diskspace.shutil, "disk_usage", lambda path: pytest.fail("checked"))
    assert diskspace.shortfall(needs, WHO) is None
    monkeypatch.setenv(diskspace.MIN_FREE_ENV, "lots")
    assert diskspace.shortfall(needs, WHO).startswith(
        f"{diskspace.MIN_FREE_ENV}='lots': give the GB"
    )


def test_go_caches_are_found_as_go_env_finds_them(monkeypatch, tmp_path):
    for name in ("GOCACHE", "GOMODCACHE", "GOPATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert diskspace.go_cache() == tmp_path / "xdg" / "go-build"
    assert diskspace.go_mod_cache() == tmp_path / "home" / "go" / "pkg" / "mod"
    monkeypatch.setenv("GOPATH", f"{tmp_path / 'gp1'}:{tmp_path / 'gp2'}")
    assert diskspace.go_mod_cache() == tmp_path / "gp1" / "pkg" / "mod"
    written = tmp_path / "go-env"  # `go env -w GOCACHE=... GOMODCACHE=...`
    written.write_text(f"GOCACHE={tmp_path / 'w-cache'}\nGOMODCACHE={tmp_path / 'w-mod'}\n")
    monkeypatch.setenv("GOENV", str(written))
    assert diskspace.go_cache() == tmp_path / "w-cache"
    assert diskspace.go_mod_cache() == tmp_path / "w-mod"
    monkeypatch.setenv("GOCACHE", "off")
    assert diskspace.go_cache() is None
    assert "Go's build cache" not in [n.what for n in diskspace.needs("kind")]


def test_dockers_data_root_is_its_configured_one_or_none_when_unknown(
    monkeypatch, tmp_path, places
):
    config = tmp_path / "daemon.json"
    monkeypatch.setattr(diskspace, "DOCKER_CONFIG", config)
    config.write_text(json.dumps({"data-root": str(tmp_path / "data-root")}))
    assert diskspace.docker_root() == tmp_path / "data-root"
    config.write_text("{not json")
    assert diskspace.docker_root() == places.docker  # the default, present
    shutil.rmtree(places.docker)
    assert diskspace.docker_root() is None  # an engine elsewhere: not this disk
    assert [n.what for n in diskspace.needs(None, image=True)] == []


def test_the_venv_and_the_project_image_are_needs_of_their_own(tmp_path, places):
    found = diskspace.needs(None, venv=tmp_path / "venv", image=True)
    assert [(n.path, n.gb) for n in found] == [
        (tmp_path / "venv", diskspace.VENV_GB),
        (places.docker, diskspace.IMAGE_GB),
    ]
    assert diskspace.needs(None) == []


def test_the_kind_build_checks_the_disk_first_and_builds_nothing_when_short(monkeypatch, capsys):
    monkeypatch.setattr(sysdeps, "missing", lambda checks: [])
    monkeypatch.setattr(kindbuild, "run_step", lambda step: pytest.fail(f"built {step}"))
    asked = []
    real = diskspace.needs
    monkeypatch.setattr(diskspace, "needs", lambda target: asked.append(target) or real(target))
    _free(monkeypatch, 1)
    assert kindbuild.main([]) == 1
    assert kindbuild.main(["minikube-node"]) == 1
    assert asked == ["kind", "minikube"]
    err = capsys.readouterr().err
    assert f"{WHO} needs more free disk" in err and "go clean -cache" in err


def test_the_docs_quote_the_estimates():
    docs = " ".join(
        (Path(__file__).resolve().parents[3] / "docs" / "testing.md").read_text().split()
    )
    cold = diskspace.COLD
    assert (
        f"write {COLD_GB} GB (cache {cold['cache']}, Go's build cache {cold['gocache']}, its "
        f"module cache {cold['gomodcache']}, Docker {cold['docker']})"
    ) in docs
    assert f"a warm one {WARM_GB} GB" in docs and f"cache {diskspace.WARM['cache']}, Docker" in docs
    assert f"the venv {diskspace.VENV_GB} GB, the project image {diskspace.IMAGE_GB} GB" in docs
    assert diskspace.MIN_FREE_ENV in docs
