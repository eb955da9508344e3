"""noxfile.py's bench session stops, before installing or running anything, when hey or the
Fashion-MNIST files are missing (a stand-in session object; nothing is run)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


class _Stop(Exception):
    pass


class _Session:
    def __init__(self) -> None:
        self.posargs: list[str] = []
        self.env: dict[str, str] = {}
        self.ran: list[tuple] = []

    def error(self, message: str) -> None:
        raise _Stop(message)

    def run(self, *args, **kwargs) -> None:
        self.ran.append(args)


@functools.cache  # once: nox registers each session by name
def _noxfile():
    spec = importlib.util.spec_from_file_location("noxfile_under_test", REPO / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bench_session_stops_when_hey_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no hey there
    session = _Session()
    with pytest.raises(_Stop, match=r"hey was not found on PATH.*apt-get install hey"):
        _noxfile().bench(session)
    assert session.ran == []  # stopped before installing or running anything


def test_the_bench_session_stops_when_the_data_is_missing(tmp_path, monkeypatch):
    hey = tmp_path / "hey"
    hey.write_text("#!/bin/sh\n")
    hey.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DISTML_DATA_DIR", str(tmp_path / "nothing"))
    session = _Session()
    with pytest.raises(_Stop, match="bench needs the Fashion-MNIST files: set DISTML_DATA_DIR"):
        _noxfile().bench(session)
    assert session.ran == []


class _Logging(_Session):
    def __init__(self, *posargs: str) -> None:
        super().__init__()
        self.posargs = list(posargs)
        self.logged: list[str] = []

    def log(self, message: str) -> None:
        self.logged.append(message)


@pytest.mark.parametrize(
    ("name", "posargs", "offline"),
    [
        ("integration", ["standard", "--offline"], True),
        ("integration", ["standard"], False),
        ("integration_existing", ["--offline"], True),
        ("integration_existing", [], False),
    ],
)
def test_the_integration_sessions_name_every_missing_package_before_anything_runs(
    name, posargs, offline, monkeypatch
):
    from integration.kindbuild import sysdeps

    asked = []
    lacking = [sysdeps.Missing("busybox-static: x", ("busybox-static",))]
    monkeypatch.setattr(sysdeps, "needs", lambda *args: asked.append(args) or ())
    monkeypatch.setattr(sysdeps, "missing", lambda checks: lacking)
    session = _Logging(*posargs)
    command = " ".join(["nox", "-s", name, *(["--", *posargs] if posargs else [])])
    with pytest.raises(_Stop, match=rf"(?s)^{command} needs .*apt-get install .* busybox-static"):
        getattr(_noxfile(), name)(session)
    assert asked == [(name, offline)]
    assert session.ran == []  # nothing installed, built or started


def test_the_offline_run_builds_the_project_image_from_the_local_base_and_says_so(monkeypatch):
    from integration import kind_run

    nox_file = _noxfile()
    for quiet in ("_system_preflight", "_shared_env", "_integration_preflight"):
        monkeypatch.setattr(nox_file, quiet, lambda *args: None)
    monkeypatch.setattr(
        nox_file, "_offline_node", lambda session, provider: "distml-kind/node:v1-stack"
    )
    session = _Logging("standard", "--offline")
    nox_file.integration(session)
    up = next(argv for argv in session.ran if argv[1:3] == ("up", "--runtime"))
    assert up[-2:] == ("--base", "local")
    assert kind_run.OFFLINE_IMAGE in session.logged


def test_with_monitoring_the_integration_run_installs_scales_and_checks_it(monkeypatch):
    nox_file = _noxfile()
    for quiet in ("_system_preflight", "_shared_env", "_integration_preflight"):
        monkeypatch.setattr(nox_file, quiet, lambda *args: None)
    monkeypatch.setattr(
        nox_file, "_offline_node", lambda session, provider: "distml-kind/node:v1-stack"
    )
    session = _Logging("standard", "--offline", "--with-monitoring")
    nox_file.integration(session)
    ran = [" ".join(argv[1:]) for argv in session.ran]
    assert ran[0].startswith("up --runtime kind --serving-mode standard")
    assert ran[0].endswith("--with-monitoring")
    assert "deploy --max-replicas 3 --scale-metric concurrency" in ran
    assert (
        ran.index("-m integration.dashboard_check --targets")
        < ran.index("loadtest --concurrency 5 --duration 60s --expect-scale-out")
        < ran.index("-m integration.dashboard_check")
    )
    assert ran[-1] == "down"


def test_the_provider_named_first_runs_the_same_plan_on_its_own_cluster(monkeypatch):
    nox_file = _noxfile()
    for quiet in ("_system_preflight", "_shared_env"):
        monkeypatch.setattr(nox_file, quiet, lambda *args: None)
    asked = []
    monkeypatch.setattr(nox_file, "_integration_preflight", lambda *args: asked.append(args))
    built = []
    monkeypatch.setattr(
        nox_file, "_offline_node", lambda session, provider: built.append(provider) or "mk:1"
    )
    session = _Logging("minikube", "standard", "--offline")
    nox_file.integration(session)
    assert built == ["minikube"] and asked == [(session, "minikube", "standard")]
    ran = [" ".join(argv[1:]) for argv in session.ran]
    assert ran[0].startswith("up --runtime minikube --serving-mode standard")
    assert ran[-1] == "down"
    kind_plan = _Logging("standard", "--offline")
    nox_file.integration(kind_plan)
    others = [" ".join(argv[1:]) for argv in kind_plan.ran]
    assert [r.replace("minikube", "kind") for r in ran] == others  # the same plan


def test_k3d_is_refused_offline_before_anything_runs():
    session = _Logging("k3d", "standard", "--offline")
    nox_file = _noxfile()
    with pytest.raises(_Stop, match=r"k3d cannot run offline: .*module proxy refuses k3s"):
        nox_file._offline_node(session, "k3d")
    assert session.ran == []


def test_two_providers_are_refused_with_the_usage():
    session = _Logging("kind", "minikube")
    with pytest.raises(
        _Stop, match=r"unknown arguments kind minikube: usage: .*\[kind\|minikube\|k3d\]"
    ):
        _noxfile().integration(session)
    assert session.ran == []


def test_an_unknown_integration_flag_is_refused_with_the_usage():
    session = _Logging("standard", "--with-monitor")
    with pytest.raises(_Stop, match=r"unknown arguments --with-monitor: .*\[--with-monitoring\]"):
        _noxfile().integration(session)
    assert session.ran == []
