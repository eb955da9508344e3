"""``nox -s integration``, run against a stand-in session on a faked machine
(tests/support/nox_kit.py): for every provider × serving mode × flag that docs/testing.md
names, the usage errors, the checks it makes before anything runs (system packages, free
disk, then Docker/kind/kubectl), the kind build it asks for, and every command it would
run, in order, with the settings each gets, down to ``invoke down``."""

from __future__ import annotations

import itertools
import os

import pytest
from nox.command import CommandFailed

from integration import kind_run
from integration.kindbuild import sysdeps
from tests.support import nox_kit
from tests.support.nox_kit import NODE_TAGS, Stop

PROVIDERS = (None, "kind", "minikube", "k3d")  # None: the default (kind)
MODES = (None, "knative", "standard")  # None: DISTML_SERVING_MODE, else knative
FLAGS = ("--offline", "--with-argo", "--with-monitoring", "--keep-cluster")
EVERY_FLAG_SET = [list(c) for n in range(len(FLAGS) + 1) for c in itertools.combinations(FLAGS, n)]


@pytest.fixture
def machine(monkeypatch, tmp_path):
    return nox_kit.machine(monkeypatch, tmp_path)


def _checks(machine, provider: str, mode: str, offline: bool) -> list[tuple]:
    """What runs before any cluster: packages, disk, the venv, the kind build, the
    preflight (its memory check sized to the run's small CPU requests)."""
    small = {"worker_cpu": kind_run.CPU_REQUEST, "predictor_cpu": kind_run.CPU_REQUEST}
    home = str(kind_run.minikube_home()) if provider == "minikube" else None
    asked = {"provider": provider, "serving_mode": mode, "cpu_requests": small}
    asked["minikube_home"] = home
    disk = {"target": provider if offline else None, "venv": machine.venv, "image": True}
    disk["cluster"] = provider
    build = ["minikube-node"] if provider == "minikube" else []
    kindbuild = ("run", (machine.bin("python"), "-m", "integration.kindbuild", *build))
    return [
        ("sysdeps.needs", {"session": "integration", "offline": offline}),
        ("sysdeps.missing", None),
        ("diskspace.needs", disk),
        ("diskspace.shortfall", None),
        *machine.install(),
        *([kindbuild] if offline else []),
        ("preflight.preflight", asked),
        ("log", "found: docker 27.5"),
    ]


def _expected(machine, provider: str, mode: str, flags: list[str], data: str | None):
    offline = "--offline" in flags
    plan = kind_run.steps(
        mode,
        data,
        argo="--with-argo" in flags,
        offline=offline,
        monitoring="--with-monitoring" in flags,
        provider=provider,
    )
    down = ("down", "--keep-cluster") if "--keep-cluster" in flags else ("down",)
    return [
        *_checks(machine, provider, mode, offline),
        *([("log", kind_run.OFFLINE_IMAGE)] if offline else []),
        *[("run", (machine.bin(step[0]), *step[1:])) for step in plan],
        ("run", (machine.bin("invoke"), *down)),
    ]


def _up(machine) -> str:
    """The ``invoke up`` the run ran, without its program."""
    return next(" ".join(argv[1:]) for argv, _ in machine.runs() if argv[1:2] == ("up",))


def _posargs(provider, mode, flags) -> list[str]:
    return [*([provider] if provider else []), *([mode] if mode else []), *flags]


@pytest.mark.parametrize("flags", EVERY_FLAG_SET, ids=lambda f: " ".join(f) or "no flags")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_provider_mode_and_flag_runs_its_checks_build_and_plan(
    machine, provider, mode, flags
):
    session = machine.session(*_posargs(provider, mode, flags))
    run = nox_kit.noxfile().integration
    if provider == "k3d" and "--offline" in flags:
        with pytest.raises(Stop, match=r"k3d cannot run offline: .*module proxy refuses k3s"):
            run(session)
        assert machine.events == []  # refused before anything is checked or installed
        return
    run(session)
    on, serving = provider or "kind", mode or "knative"
    trace = machine.trace()
    assert trace[:-1] == _expected(machine, on, serving, flags, None)
    assert trace[-1][0] == "log" and trace[-1][1].startswith("step times:")
    up = _up(machine)
    assert up.startswith(f"up --runtime {on} --serving-mode {serving}")
    for flag, said in [("--offline", "--base local"), ("--with-argo", "--with-argo")]:
        assert (said in up) == (flag in flags)
    assert ("--with-monitoring" in up) == ("--with-monitoring" in flags)
    node = NODE_TAGS[on] if "--offline" in flags else None
    steps = [kwargs["env"] for argv, kwargs in machine.runs() if "env" in kwargs]
    assert steps == [kind_run.env(None, node, on)] * len(steps)


@pytest.mark.parametrize("provider", ["kind", "minikube"])
def test_offline_puts_the_cli_and_kubectl_it_built_first_on_path(machine, provider):
    nox_kit.noxfile().integration(machine.session(provider, "standard", "--offline"))
    cli = machine.built("kind" if provider == "kind" else "minikube").path / "bin"
    kubectl = machine.built("kubernetes").path / "bin"
    assert os.environ["PATH"].split(os.pathsep)[:2] == [str(cli), str(kubectl)]


def test_the_data_dir_and_the_mirror_reach_every_step(machine, monkeypatch, tmp_path):
    monkeypatch.setenv("DISTML_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DISTML_UPSTREAM_DIR", str(tmp_path / "upstream"))
    nox_kit.noxfile().integration(machine.session("standard", "--offline"))
    flags = ["--offline"]
    assert machine.trace()[:-1] == _expected(
        machine, "kind", "standard", flags, str(tmp_path / "data")
    )
    env = machine.runs()[-1][1]["env"]
    assert env["DISTML_DATA_DIR"] == str(tmp_path / "data")
    assert env["INVOKE_CLUSTER_MANIFEST_MIRROR"] == str(tmp_path / "upstream")
    assert env["INVOKE_CLUSTER_NODE_IMAGE"] == NODE_TAGS["kind"]  # the one just built


@pytest.mark.parametrize(
    ("given", "posargs", "mode"),
    [("standard", [], "standard"), ("standard", ["knative"], "knative"), (None, [], "knative")],
)
def test_the_serving_mode_is_the_one_named_else_distml_serving_mode(
    machine, monkeypatch, given, posargs, mode
):
    if given:
        monkeypatch.setenv("DISTML_SERVING_MODE", given)
    nox_kit.noxfile().integration(machine.session(*posargs))
    assert _up(machine).startswith(f"up --runtime kind --serving-mode {mode}")


@pytest.mark.parametrize(
    ("posargs", "said"),
    [
        (["kind", "minikube"], r"unknown arguments kind minikube: usage: "),
        (["knative", "standard"], r"unknown arguments knative standard: usage: "),
        (["standard", "--with-monitor"], r"unknown arguments --with-monitor: usage: "),
        (["existing"], r"unknown arguments existing: usage: "),
        (["--offline", "standard", "k3d"], r"k3d cannot run offline"),
    ],
)
def test_usage_errors_stop_before_anything_runs(machine, posargs, said):
    usage = r".*\[kind\|minikube\|k3d\] \[knative\|standard\] \[--offline\]"
    with pytest.raises(Stop, match=said + (usage if "usage" in said else "")):
        nox_kit.noxfile().integration(machine.session(*posargs))
    assert machine.events == []


def test_a_bad_distml_serving_mode_is_refused_naming_both_modes(machine, monkeypatch):
    monkeypatch.setenv("DISTML_SERVING_MODE", "kserve")
    with pytest.raises(Stop, match=r"DISTML_SERVING_MODE='kserve': use knative or standard"):
        nox_kit.noxfile().integration(machine.session())
    assert machine.events == []


def test_missing_packages_stop_it_before_the_disk_check_or_an_install(machine):
    machine.lacking = [sysdeps.Missing("busybox-static: x", ("busybox-static",))]
    command = "nox -s integration -- minikube --offline"
    with pytest.raises(Stop, match=rf"(?s)^{command} needs .*apt-get install .* busybox-static"):
        nox_kit.noxfile().integration(machine.session("minikube", "--offline"))
    assert [e[0] for e in machine.events] == ["sysdeps.needs", "sysdeps.missing"]


def test_too_little_disk_stops_it_before_the_venv_or_the_build(machine):
    machine.disk_short = "nox -s integration -- --offline needs more free disk than ..."
    with pytest.raises(Stop, match="needs more free disk"):
        nox_kit.noxfile().integration(machine.session("--offline"))
    assert machine.trace()[-2:] == [
        (
            "diskspace.needs",
            {"target": "kind", "venv": machine.venv, "image": True, "cluster": "kind"},
        ),
        ("diskspace.shortfall", None),
    ]
    assert machine.runs() == []


def test_the_preflight_names_every_problem_and_prints_its_notes(machine):
    machine.problems = ["kind not found on PATH", "kubectl not found on PATH"]
    machine.notes = ["Docker has 2 CPUs"]
    with pytest.raises(
        Stop, match=r"(?s)needs Docker, kind and kubectl.*- kind not found.*- kubectl"
    ):
        nox_kit.noxfile().integration(machine.session("standard"))
    assert ("log", "note: Docker has 2 CPUs") in machine.trace()
    assert not [argv for argv, _ in machine.runs() if "up" in argv]  # no cluster


@pytest.mark.parametrize("keep", [[], ["--keep-cluster"]])
def test_a_failed_step_keeps_diagnostics_then_tears_down_anyway(machine, keep):
    session = machine.session("standard", *keep, fail=("train-all",))
    with pytest.raises(CommandFailed):
        nox_kit.noxfile().integration(session)
    out = kind_run.workdir() / "diagnostics"
    found = kind_run.diagnostics(machine.bin("invoke"), out, "kind")
    ran = [argv for argv, _ in machine.runs()]
    failed = next(i for i, argv in enumerate(ran) if "train-all" in argv)
    assert ran[failed + 1 : -1] == [tuple(cmd) for cmd, _ in found.values()]
    assert ran[-1] == (machine.bin("invoke"), "down", *keep)
    assert machine.runs()[-1][1]["success_codes"] == range(256)  # never hides the failure
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.txt" for n in found)


def test_a_teardown_that_fails_after_a_failure_is_a_warning(machine):
    session = machine.session("standard", fail=("train-all", "invoke down"))
    with pytest.raises(CommandFailed, match="train-all"):  # the first failure, not down's
        nox_kit.noxfile().integration(session)
    assert machine.trace()[-1][0] == "warn" and "invoke down failed too" in machine.trace()[-1][1]


def test_with_monitoring_the_run_installs_scales_and_checks_it(machine):
    nox_kit.noxfile().integration(machine.session("standard", "--offline", "--with-monitoring"))
    ran = [" ".join(argv[1:]) for argv, _ in machine.runs()]
    up = next(r for r in ran if r.startswith("up "))
    assert up.startswith("up --runtime kind --serving-mode standard")
    assert up.endswith("--base local --with-monitoring")
    assert "deploy --max-replicas 2 --scale-metric concurrency" in ran
    assert (
        ran.index("-m integration.dashboard_check --targets")
        < ran.index("loadtest --concurrency 5 --duration 60s --expect-scale-out")
        < ran.index("-m integration.dashboard_check --training")
        < ran.index("-m integration.alert_fault")
    )
    assert ran[-1] == "down"


def test_every_provider_runs_the_same_plan_on_its_own_cluster(machine):
    plans = {}
    for provider in ("kind", "minikube", "k3d"):
        machine.events.clear()
        nox_kit.noxfile().integration(machine.session(provider, "standard"))
        ran = [" ".join(argv[1:]) for argv, _ in machine.runs()]
        plan = ran[[r.split(" ")[0] for r in ran].index("up") :]  # after the venv's install
        plans[provider] = [r.replace(provider, "PROVIDER") for r in plan]
    assert plans["kind"] == plans["minikube"] == plans["k3d"]
    assert plans["kind"][0].startswith("up --runtime PROVIDER") and plans["kind"][-1] == "down"
