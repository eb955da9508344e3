"""noxfile.py's lint, unit, fast, e2e, image and bench sessions, each run against a
stand-in session (tests/support/nox_kit.py) that records the commands it would run and
starts none: the shared venv installed first, then each command in order, ``nox -- ARGS``
forwarded, and the stops (no Docker engine, no hey, no data) before anything runs.
The integration sessions: test_noxfile_integration.py and test_noxfile_existing.py; the
docs against what the sessions accept: test_noxfile_docs.py."""

from __future__ import annotations

import pytest

from tests.support import nox_kit
from tests.support.nox_kit import Stop


@pytest.fixture
def machine(monkeypatch, tmp_path):
    return nox_kit.machine(monkeypatch, tmp_path)


def _workflows() -> list[str]:
    found = (nox_kit.REPO / ".github" / "workflows").glob("*.yml")
    return sorted(str(p.relative_to(nox_kit.REPO)) for p in found)


@pytest.mark.parametrize("actionlint", [None, "/usr/local/bin/actionlint"])
def test_lint_runs_ruff_hadolint_the_workflow_schema_and_shellcheck(
    machine, monkeypatch, actionlint
):
    nox_file = nox_kit.noxfile()
    monkeypatch.setattr(nox_file.shutil, "which", lambda name, path=None: actionlint)
    workflows = _workflows()
    assert workflows  # the schema check has something to check
    nox_file.lint(machine.session())
    b = machine.bin
    schema = (b("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *workflows)
    assert machine.trace() == [
        *machine.install(),
        ("run", (b("ruff"), "check", ".")),
        ("run", (b("ruff"), "format", "--check", ".")),
        ("run", (b("mypy"),)),
        ("run", (b("hadolint"), "Dockerfile")),
        ("run", schema),
        ("run", (actionlint, *workflows))
        if actionlint
        else ("log", "actionlint not on PATH: its shellcheck pass runs below instead"),
        ("run", (b("python"), "-m", "tools.lint_shell", "--shellcheck", b("shellcheck"))),
    ]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("unit", ["tests", "--ignore=tests/e2e", "--ignore=tests/image", "--timeout=300"]),
        ("fast", ["tests", "--fast", "--timeout=60"]),
        ("e2e", ["tests/e2e", "-v"]),
    ],
)
def test_the_pytest_sessions_run_their_tier_and_pass_on_nox_args(machine, name, args):
    session = machine.session("-k", "noxfile", "-x")
    session.env["DISTML_DATA_DIR"] = "/data"
    getattr(nox_kit.noxfile(), name)(session)
    pytest_argv = (machine.bin("python"), "-m", "pytest", "--durations=15", "--durations-min=1")
    assert machine.trace() == [
        *machine.install(),
        ("run", (*pytest_argv, *args, "-k", "noxfile", "-x")),
    ]
    env = machine.runs()[-1][1]["env"]
    assert env == {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONDONTWRITEBYTECODE": "1", **session.env}


def test_the_shared_venv_is_installed_once_and_then_reused(machine):
    nox_file = nox_kit.noxfile()
    nox_file.fast(machine.session())
    assert machine.trace()[:3] == machine.install()
    (machine.venv / "bin").mkdir()
    (machine.venv / "bin" / "python").touch()
    machine.events.clear()
    nox_file.e2e(machine.session())
    assert [argv[1:3] for argv, _ in machine.runs()] == [("-m", "pytest")]  # no pip
    (machine.venv / ".distml-installed").write_text("an older pyproject")
    machine.events.clear()
    nox_file.e2e(machine.session())
    pip = (machine.bin("python"), "-m", "pip", "install", "-e", ".[test]")
    assert machine.runs()[0][0] == pip  # the venv kept, refreshed


def test_the_image_session_stops_naming_the_engine_it_could_not_reach(machine):
    check = "error: no Docker engine answers at unix:///var/run/docker.sock\n"
    session = machine.session(outputs={"runtime.image check": check})
    with pytest.raises(Stop, match=r"(?s)needs a running Docker engine.*no Docker engine answers"):
        nox_kit.noxfile().image(session)
    assert machine.trace()[-1] == ("run", (machine.bin("python"), "-m", "runtime.image", "check"))


@pytest.mark.parametrize(
    ("base", "build_args"),
    [
        (None, ("--base", "local")),
        ("python:3.11-slim-bookworm", ("--base-image", "python:3.11-slim-bookworm")),
    ],
)
def test_the_image_session_builds_then_tests_the_image_it_built(
    machine, monkeypatch, base, build_args
):
    if base:
        monkeypatch.setenv("DISTML_IMAGE_BASE", base)
    outputs = {
        "runtime.image check": "docker 27.5\n/usr/bin/docker\n",
        "runtime.image tag": "distml:ab12\n",
    }
    session = machine.session("-k", "pods", outputs=outputs)
    nox_kit.noxfile().image(session)
    py = machine.bin("python")
    durations = ("--durations=15", "--durations-min=1")
    assert machine.trace() == [
        *machine.install(),
        ("run", (py, "-m", "runtime.image", "check")),
        ("run", (machine.bin("invoke"), "build", "--docker", "/usr/bin/docker", *build_args)),
        ("run", (py, "-m", "runtime.image", "tag")),
        ("run", (py, "-m", "pytest", *durations, "tests/image", "-v", "-k", "pods")),
    ]
    env = machine.runs()[-1][1]["env"]
    assert env["DISTML_IMAGE"] == "distml:ab12" and env["DISTML_DOCKER"] == "/usr/bin/docker"


def test_the_bench_session_stops_when_hey_is_missing(machine, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no hey there
    with pytest.raises(Stop, match=r"hey was not found on PATH.*apt-get install hey"):
        nox_kit.noxfile().bench(machine.session())
    assert machine.events == []  # stopped before installing or running anything


def _hey(tmp_path, monkeypatch) -> None:
    hey = tmp_path / "hey"
    hey.write_text("#!/bin/sh\n")
    hey.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_the_bench_session_stops_when_the_data_is_missing(machine, tmp_path, monkeypatch):
    _hey(tmp_path, monkeypatch)
    monkeypatch.setenv("DISTML_DATA_DIR", str(tmp_path / "nothing"))
    with pytest.raises(Stop, match="bench needs the Fashion-MNIST files: set DISTML_DATA_DIR"):
        nox_kit.noxfile().bench(machine.session())
    assert machine.events == []


def test_the_bench_session_runs_the_benchmarks_on_the_data_saying_how_it_was_run(
    machine, tmp_path, monkeypatch
):
    _hey(tmp_path, monkeypatch)
    (tmp_path / "train-images-idx3-ubyte.gz").touch()
    monkeypatch.setenv("DISTML_DATA_DIR", str(tmp_path))
    session = machine.session("--only", "training,serving")
    nox_kit.noxfile().bench(session)
    command = "nox -s bench -- --only training,serving"
    bench = ("benchmarks/bench.py", "--data-dir", str(tmp_path), "--command", command)
    assert machine.trace() == [
        *machine.install(),
        ("run", (machine.bin("python"), *bench, "--only", "training,serving")),
    ]
    assert session.env["DISTML_DATA_DIR"] == str(tmp_path)
