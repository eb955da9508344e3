"""integration/foreign_down.py: the kind run's check that a fresh work dir's `invoke down`
keeps the run's cluster, its record and its Ready InferenceService (subprocess faked)."""

from __future__ import annotations

import json
import subprocess

import pytest

from integration import foreign_down as fd
from integration.kind_run import workdir

KEPT = (
    "cluster distml-it (kind): it was made by the work dir /x/.distml-integration on h, not "
    "by this one; kept, with everything in it, and nothing deleted there. To delete it, ..."
)


@pytest.mark.parametrize(
    ("provider", "out", "listed"),
    [
        ("kind", "distml-it\nother\n", True),
        ("kind", "No kind clusters found.\n", False),
        ("k3d", json.dumps([{"name": "distml-it"}]), True),
        ("k3d", "not json", False),
        ("minikube", json.dumps({"valid": [{"Name": "distml-it"}]}), True),
        ("minikube", json.dumps({"valid": []}), False),
    ],
)
def test_each_providers_list_is_read_for_the_runs_cluster(provider, out, listed):
    assert fd.is_listed(provider, out) is listed
    assert fd.listed(provider)[0] in ("kind", "k3d", "env")


class Machine:
    """Answers the commands the check runs, and records them (with their environment)."""

    def __init__(self, down: str = KEPT, code: int = 0, ready: str = "True") -> None:
        self.down, self.code, self.ready = down, code, ready
        self.ran: list[tuple[list[str], dict | None]] = []

    def __call__(self, argv, env=None):
        self.ran.append((argv, env))
        if argv[-1] == "down":
            return subprocess.CompletedProcess(argv, self.code, self.down, "")
        if argv[:2] == ["kind", "get"]:
            return subprocess.CompletedProcess(argv, 0, "distml-it\n", "")
        if "minikube" in argv:
            listed = json.dumps({"valid": [{"Name": "distml-it"}]})
            return subprocess.CompletedProcess(argv, 0, listed, "")
        if "configmap" in argv:
            return subprocess.CompletedProcess(argv, 0, str(workdir().resolve()), "")
        return subprocess.CompletedProcess(argv, 0, self.ready, "")


def test_it_passes_when_the_down_kept_the_cluster_and_the_service_is_ready(monkeypatch):
    machine = Machine()
    monkeypatch.setattr(fd, "_run", machine)
    assert fd.check("kind", "kind-distml-it", ["invoke"]) == KEPT
    (down, env), *rest = machine.ran
    assert down == ["invoke", "down"]
    assert env is not None and env["INVOKE_WORKDIR"] != str(workdir())  # a fresh one
    assert "distml-foreign-" in env["INVOKE_WORKDIR"]
    assert [argv[:3] for argv, _ in rest] == [
        ["kind", "get", "clusters"],
        ["kubectl", "--context", "kind-distml-it"],
        ["kubectl", "--context", "kind-distml-it"],
    ]
    assert rest[-1][0][-4:-2] == ["inferenceservice", "tf-mnist"]


@pytest.mark.parametrize(
    ("machine", "says"),
    [
        (Machine(code=1), "exited 1"),
        (Machine(down="deleting cluster distml-it (kind) and everything in it"), "did not say"),
        (Machine(ready="False"), "is not Ready after another work dir's down"),
    ],
    ids=["down failed", "down deleted it", "service not ready"],
)
def test_it_fails_naming_what_it_saw(monkeypatch, machine, says):
    monkeypatch.setattr(fd, "_run", machine)
    with pytest.raises(fd.StillThere, match=says):
        fd.check("kind", "kind-distml-it", ["invoke"])


def test_on_minikube_the_fresh_work_dir_does_not_even_find_the_cluster(monkeypatch):
    machine = Machine(down="cluster distml-it: not found, nothing to delete")
    monkeypatch.setattr(fd, "_run", machine)
    said = fd.check("minikube", "distml-it", ["invoke"])
    assert said == "cluster distml-it: not found, nothing to delete"
    assert machine.ran[1][0][:2] == ["env", f"MINIKUBE_HOME={fd.minikube_home()}"]


def test_main_exits_1_with_what_it_saw(monkeypatch, capsys):
    monkeypatch.setattr(fd, "_run", Machine(code=1))
    monkeypatch.setenv("INVOKE_RUNTIME", "kind")
    assert fd.main([]) == 1
    assert capsys.readouterr().err.startswith("foreign down: FAILED: `invoke down` from a fresh")
