"""integration.kindbuild.sysdeps: every system dependency of the kind build and of both
integration sessions is checked before the first build, and all missing ones are named
at once with one ``apt-get`` line, on a fake machine (no apt, Docker or Go is run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.kindbuild import __main__ as kindbuild
from integration.kindbuild import cache, controllers, docker, mirror, sysdeps

EVERY_COMMAND = {"docker", "go", "jq", *sysdeps.COMMANDS}
ALL_CAPS = "000001ffffffffff"  # 0..40
NO_SYS_RESOURCE = "000001fffeffffff"  # these VMs: CAP_SYS_RESOURCE (24) is missing


class FakeMachine(sysdeps.Machine):
    """A machine described by what it has; records what the checks ran."""

    def __init__(self, **has) -> None:
        self.commands = has.get("commands", EVERY_COMMAND)
        self.packages = has.get("packages", set(sysdeps.PACKAGES))
        self.files = has.get("files", {controllers.CA_BUNDLE})
        self.root = has.get("root", True)
        self.engine = has.get("engine", (0, "runc\n"))
        self.caps = has.get("caps", ALL_CAPS)
        self.go = has.get("go", "go1.26.8\n")
        self.apt = has.get("apt", 0)
        self.ran: list[list[str]] = []

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if Path(name).name in self.commands else None

    def exists(self, path: Path) -> bool:
        return path in self.files

    def is_root(self) -> bool:
        return self.root

    def read(self, path: str) -> str:
        return {"/proc/self/status": f"CapBnd:\t{self.caps}\n"}.get(path, "40\n")

    def run(self, argv) -> tuple[int, str]:
        self.ran.append(list(argv))
        program = Path(argv[0]).name
        if program == "dpkg-query":
            installed = [p for p in argv[3:] if p in self.packages]
            return 0, "".join(f"{p} install ok installed\n" for p in installed)
        if program == "docker":
            return self.engine
        if program == "go":
            return 0, self.go
        return self.apt, ""


@pytest.fixture(autouse=True)
def _empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTML_KIND_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("offline", [False, True])
@pytest.mark.parametrize("session", sysdeps.SESSIONS)
def test_a_machine_with_everything_lacks_nothing(session, offline):
    assert sysdeps.missing(sysdeps.needs(session, offline), FakeMachine()) == []


def test_busybox_static_missing_is_named_before_the_first_build():
    found = sysdeps.missing(sysdeps.needs("integration", offline=True), FakeMachine(packages=set()))
    assert [x.packages for x in found] == [("busybox-static",), ("libc6-dev",)]
    text = sysdeps.report(found, "nox -s integration")
    assert text.splitlines()[-2:] == [
        "  apt-get update && apt-get install -y --no-install-recommends busybox-static libc6-dev",
        "then run nox -s integration again",  # nox appends its timing here, not to the command
    ]


def test_a_fresh_machine_gets_everything_named_at_once_with_one_apt_line():
    bare = FakeMachine(
        commands=set(), packages=set(), files=set(), root=False, caps=NO_SYS_RESOURCE
    )
    found = sysdeps.missing(sysdeps.needs("integration_existing", offline=True), bare)
    text = sysdeps.report(found, "nox -s integration_existing")
    assert "root: debootstrap and chroot" in text and ": run as root" in text
    assert sysdeps.GO_HINT in text
    packages = "docker.io debootstrap apt dpkg gcc binutils busybox-static libc6-dev"
    assert text.splitlines()[-2].endswith(f" {packages} ca-certificates curl")
    assert len(found) == len(set(found)) == len(text.splitlines()) - 4


def test_an_engine_that_does_not_answer_is_named_with_how_to_start_it():
    (found,) = sysdeps.missing(sysdeps.DOCKER, FakeMachine(engine=(1, "")))
    assert "no engine answers" in found.what and "dockerd" in found.fix
    assert found.packages == ()


def test_an_engine_that_cannot_start_privileged_containers_needs_the_wrapper_and_jq():
    lacking = FakeMachine(caps=NO_SYS_RESOURCE, commands=EVERY_COMMAND - {"jq"})
    wrapper, jq = sysdeps.missing(sysdeps.DOCKER, lacking)
    assert wrapper.fix == docker.CAPS_HINT
    assert jq.packages == ("jq",)
    wrapped = FakeMachine(caps=NO_SYS_RESOURCE, engine=(0, "runc-capfit\n"))
    assert sysdeps.missing(sysdeps.DOCKER, wrapped) == []


@pytest.mark.parametrize(
    ("machine", "found"),
    [
        (FakeMachine(go="go1.19.8\n"), " (found go1.19.8)"),
        # Prometheus v0.316.0's go.mod says go 1.26.7: the patch release counts.
        (FakeMachine(go="go1.26.6\n"), " (found go1.26.6)"),
        (FakeMachine(commands=EVERY_COMMAND - {"go"}), ""),
    ],
    ids=["too-old", "patch-too-old", "absent"],
)
def test_go_older_than_the_modules_need_or_absent_is_named(machine, found):
    (missing,) = sysdeps.missing([sysdeps.go], machine)
    assert missing.what == f"go: every Go module built here{found}"
    assert missing.fix == sysdeps.GO_HINT


def test_apt_that_cannot_fetch_the_registry_package_asks_for_an_update():
    machine = FakeMachine(apt=100)
    (found,) = sysdeps.missing(sysdeps.REGISTRY, machine)
    assert mirror.DEB in found.what and found.fix.startswith("apt-get update")
    assert ["apt-get", "download", "--print-uris", mirror.DEB] in machine.ran


def test_a_cached_registry_binary_needs_no_apt():
    machine = FakeMachine(apt=100)
    machine.files = {cache.entry(*mirror.BINARY_ENTRY) / cache.STAMP}
    assert sysdeps.missing(sysdeps.REGISTRY, machine) == []
    assert not [a for a in machine.ran if a[0] == "apt-get"]


def test_each_session_needs_what_it_runs():
    online = sysdeps.needs("integration")
    assert online == sysdeps.DOCKER  # kind and kubectl: the integration preflight's
    assert sysdeps.needs("integration", offline=True) == sysdeps.KINDBUILD
    byo = FakeMachine(commands=EVERY_COMMAND - {"curl", "gcc"})
    found = sysdeps.missing(sysdeps.needs("integration_existing"), byo)
    assert [x.packages for x in found] == [("curl",)]  # builds --base local, not pause
    with pytest.raises(ValueError, match="unknown session"):
        sysdeps.needs("e2e")


def test_the_kind_build_checks_first_and_builds_nothing_when_something_is_missing(
    monkeypatch, capsys
):
    lacking = [sysdeps.Missing("busybox-static: x", ("busybox-static",))]
    monkeypatch.setattr(sysdeps, "missing", lambda checks: lacking)
    monkeypatch.setattr(kindbuild, "run_step", lambda step: pytest.fail(f"built {step}"))
    assert kindbuild.main([]) == 1
    assert "apt-get install -y --no-install-recommends busybox-static" in capsys.readouterr().err


def test_a_program_that_is_not_there_exits_127(monkeypatch):
    def absent(argv, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    monkeypatch.setattr(sysdeps.subprocess, "run", absent)
    assert sysdeps.Machine().run(["dpkg-query", "-W"]) == (127, "")


def test_the_command_line_names_what_is_missing(monkeypatch, capsys):
    monkeypatch.setattr(sysdeps, "Machine", lambda: FakeMachine(packages=set()))
    assert sysdeps.main(["integration", "--offline"]) == 1
    assert "busybox-static" in capsys.readouterr().err
    assert sysdeps.main(["nosuch"]) == 2
