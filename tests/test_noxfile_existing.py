"""``nox -s integration_existing``, run against a stand-in session on a faked machine
(tests/support/nox_kit.py): with and without ``--offline`` and ``--keep-cluster``, the
usage error, the checks before anything runs, kind's node built offline (and found
online), then the admin's cluster and every step of integration/byo.py with its own
settings, and the teardown unless the cluster is to be kept."""

from __future__ import annotations

import pytest
from nox.command import CommandFailed

from integration import byo
from integration.kindbuild import sysdeps
from tests.support import nox_kit
from tests.support.nox_kit import NODE_TAGS, Stop

FLAG_SETS = [[], ["--offline"], ["--keep-cluster"], ["--offline", "--keep-cluster"]]


@pytest.fixture
def machine(monkeypatch, tmp_path):
    return nox_kit.machine(monkeypatch, tmp_path)


def _expected(machine, flags: list[str], data: str | None, mirror: str) -> list[tuple]:
    offline = "--offline" in flags
    py = machine.bin("python")
    online_node = nox_kit.imported_from("versions").KIND_NODE_IMAGE
    node = NODE_TAGS["kind"] if offline else online_node
    registry = str(machine.built("mirror-bin").path / "docker-registry")
    steps = [byo.split_env(step)[1] for step in byo.steps(data)]
    disk = {"target": "kind" if offline else None, "venv": machine.venv, "image": True}
    disk["cluster"] = "kind"
    return [
        ("sysdeps.needs", {"session": "integration_existing", "offline": offline}),
        ("sysdeps.missing", None),
        ("diskspace.needs", disk),
        ("diskspace.shortfall", None),
        *machine.install(),
        *([("run", (py, "-m", "integration.kindbuild"))] if offline else []),  # kind's node
        ("run", (py, "-m", "integration.byo", "setup", node, registry, mirror)),
        *[("run", (machine.bin(step[0]), *step[1:])) for step in steps],
    ]


@pytest.mark.parametrize("data", [None, "/srv/fashion-mnist"])
@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: " ".join(f) or "no flags")
def test_every_flag_runs_its_checks_build_steps_and_teardown(machine, monkeypatch, flags, data):
    mirror = "/srv/k8s-upstream" if data else ""
    if data:
        monkeypatch.setenv("DISTML_DATA_DIR", data)
        monkeypatch.setenv("DISTML_UPSTREAM_DIR", mirror)
    nox_kit.noxfile().integration_existing(machine.session(*flags))
    trace, expected = machine.trace(), _expected(machine, flags, data, mirror)
    assert trace[: len(expected)] == expected
    log = trace[len(expected)]
    assert log[0] == "log" and log[1].startswith("step times:")
    teardown = ("run", (machine.bin("python"), "-m", "integration.byo", "teardown"))
    assert trace[len(expected) + 1 :] == ([] if "--keep-cluster" in flags else [teardown])
    steps = byo.steps(data)
    setup = next(i for i, (argv, _) in enumerate(machine.runs()) if argv[3:4] == ("setup",))
    ran = machine.runs()[setup + 1 : setup + 1 + len(steps)]
    env = byo.env(data, mirror or None)
    assert [kwargs["env"] for _, kwargs in ran] == [{**env, **byo.split_env(s)[0]} for s in steps]


def test_offline_builds_kinds_node_and_the_admins_cluster_runs_on_it(machine):
    # `_offline_node(session)` once broke `nox -s integration_existing -- --offline` with a
    # TypeError: the session is run here through the real helper, so that cannot pass.
    nox_kit.noxfile().integration_existing(machine.session("--offline", "--keep-cluster"))
    ran = [argv for argv, _ in machine.runs()]
    build = ran.index((machine.bin("python"), "-m", "integration.kindbuild"))
    setup = next(argv for argv in ran if argv[3:4] == ("setup",))
    assert ran.index(setup) == build + 1 and setup[4] == NODE_TAGS["kind"]


def test_each_step_gets_the_runs_settings_and_its_own(machine):
    nox_kit.noxfile().integration_existing(machine.session("--keep-cluster"))
    env = byo.env(None, None)
    steps = byo.steps(None)
    runs = machine.runs()[-len(steps) :]
    for step, (argv, kwargs) in zip(steps, runs, strict=True):
        own, command = byo.split_env(step)
        assert argv == (machine.bin(command[0]), *command[1:])
        assert kwargs["env"] == {**env, **own}
    assert any(byo.split_env(step)[0] for step in steps)  # some steps have settings of their own


@pytest.mark.parametrize("posargs", [["standard"], ["--offline", "--with-argo"], ["kind"]])
def test_anything_but_its_two_flags_is_refused_with_the_usage(machine, posargs):
    unknown = " ".join(a for a in posargs if a != "--offline")
    usage = r"usage: nox -s integration_existing -- \[--offline\] \[--keep-cluster\]"
    with pytest.raises(Stop, match=rf"^unknown arguments {unknown}: {usage}$"):
        nox_kit.noxfile().integration_existing(machine.session(*posargs))
    assert machine.events == []


@pytest.mark.parametrize("posargs", [[], ["--offline"]])
def test_missing_packages_stop_it_before_the_disk_check_or_an_install(machine, posargs):
    machine.lacking = [sysdeps.Missing("curl: x", ("curl",))]
    command = " ".join(
        ["nox", "-s", "integration_existing", *(["--", *posargs] if posargs else [])]
    )
    with pytest.raises(Stop, match=rf"(?s)^{command} needs .*apt-get install .* curl"):
        nox_kit.noxfile().integration_existing(machine.session(*posargs))
    assert machine.trace() == [
        ("sysdeps.needs", {"session": "integration_existing", "offline": bool(posargs)}),
        ("sysdeps.missing", None),
    ]


def test_too_little_disk_stops_it_before_the_venv_or_the_build(machine):
    machine.disk_short = "nox -s integration_existing -- --offline needs more free disk ..."
    with pytest.raises(Stop, match="needs more free disk"):
        nox_kit.noxfile().integration_existing(machine.session("--offline"))
    assert machine.runs() == []


@pytest.mark.parametrize("keep", [[], ["--keep-cluster"]])
def test_a_failed_step_shows_status_and_pods_then_tears_down_unless_kept(machine, keep):
    session = machine.session(*keep, fail=("check-placement",))
    with pytest.raises(CommandFailed, match="check-placement"):
        nox_kit.noxfile().integration_existing(session)
    ran = machine.runs()
    failed = next(i for i, (argv, _) in enumerate(ran) if "check-placement" in argv)
    pods = ("kubectl", "--context", byo.CONTEXT, "get", "pods", "-A", "-o", "wide")
    after = [argv for argv, _ in ran[failed + 1 :]]
    teardown = [(machine.bin("python"), "-m", "integration.byo", "teardown")]
    assert after == [(machine.bin("invoke"), "status"), pods, *([] if keep else teardown)]
    assert all(kwargs["success_codes"] == range(256) for _, kwargs in ran[failed + 1 :])
