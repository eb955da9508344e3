"""noxfile.py under test: loaded as nox loads it, its sessions run against a stand-in
``nox.Session`` that records every call and starts no process, on a machine whose probes
are faked (system packages, free disk, Docker/kind/kubectl, the kind build's cache and
the shared venv: nothing of this machine is read, so no test depends on what it holds).

The sessions, their helpers and the modules they import are the real ones, and every call
they make on a stand-in is bound to the signature of what it stands for (``nox.Session``'s
methods, ``sysdeps.missing``, ``preflight``, ...) before it is recorded: a call nox or the
module would refuse, or a helper called with the wrong arguments, fails here as it would
in a real run.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import nox
from nox.command import CommandFailed

REPO = Path(__file__).resolve().parents[2]
# Environment the sessions read: unset in every test unless the test sets it.
READ_ENV = (
    "DISTML_DATA_DIR",
    "DISTML_SERVING_MODE",
    "DISTML_UPSTREAM_DIR",
    "DISTML_KIND_NODE_IMAGE",
    "DISTML_IMAGE_BASE",
    "DISTML_KIND_MIN_FREE_GB",
)
NODE_TAGS = {"kind": "distml-kind/node:test-stack", "minikube": "distml-minikube/node:test"}


class Stop(Exception):
    """``session.error``: the session stops, saying why."""


@functools.cache  # once: nox registers each session by name
def noxfile():
    spec = importlib.util.spec_from_file_location("noxfile_under_test", REPO / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imported_from(name: str) -> object:
    """The module noxfile.py imports ``name`` from (``from k8s.x import preflight``), so
    a stand-in replaces what the session really calls, wherever that module moves."""
    found = re.search(rf"from ([\w.]+) import {name}\b", (REPO / "noxfile.py").read_text())
    assert found, f"noxfile.py no longer imports {name}"
    module = importlib.import_module(found.group(1))
    return getattr(module, name) if inspect.ismodule(getattr(module, name)) else module


def _bind(real, *args, **kwargs) -> inspect.BoundArguments:
    """``args`` bound to ``real``'s signature: TypeError where ``real`` would refuse them."""
    return inspect.signature(real).bind(*args, **kwargs)


class FakeSession:
    """Records ``run``, ``log`` and ``warn`` into ``events``; ``error`` raises Stop.
    ``run`` answers from ``outputs`` (the first key found in the command line) and raises
    CommandFailed for a command line holding one of ``fail``."""

    def __init__(self, *posargs: str, events=None, outputs=None, fail: tuple[str, ...] = ()):
        self.posargs = list(posargs)
        self.env: dict[str, str] = {}
        self.events: list[tuple] = [] if events is None else events
        self.outputs: dict[str, str] = outputs or {}
        self.fail = fail

    def run(self, *args, **kwargs):
        _bind(nox.Session.run, self, *args, **kwargs)
        argv = tuple(str(a) for a in args)
        self.events.append(("run", argv, kwargs))
        line = " ".join(argv)
        if any(f in line for f in self.fail):
            raise CommandFailed(f"{line}: exit 1")
        found = [out for key, out in self.outputs.items() if key in line]
        return found[0] if found else ("" if kwargs.get("silent") else True)

    def log(self, *args, **kwargs) -> None:
        _bind(nox.Session.log, self, *args, **kwargs)
        self.events.append(("log", " ".join(map(str, args))))

    def warn(self, *args, **kwargs) -> None:
        _bind(nox.Session.warn, self, *args, **kwargs)
        self.events.append(("warn", " ".join(map(str, args))))

    def error(self, *args) -> None:
        _bind(nox.Session.error, self, *args)
        raise Stop(" ".join(map(str, args)))


@dataclass
class Machine:
    """The faked probes' answers, and every call (the probes' and the session's) in order."""

    tmp: Path
    venv: Path
    events: list[tuple] = field(default_factory=list)
    lacking: list = field(default_factory=list)  # sysdeps.missing's answer
    disk_short: str | None = None  # diskspace.shortfall's answer
    problems: list[str] = field(default_factory=list)  # the preflight's
    notes: list[str] = field(default_factory=list)

    def session(self, *posargs: str, **kwargs) -> FakeSession:
        return FakeSession(*posargs, events=self.events, **kwargs)

    def trace(self) -> list[tuple]:
        """Every call in order: ``("run", argv)`` (keywords left out), the others whole."""
        return [e[:2] if e[0] == "run" else e for e in self.events]

    def runs(self) -> list[tuple[tuple[str, ...], dict]]:
        """Every command run, with its keywords (env, success_codes, silent)."""
        return [(e[1], e[2]) for e in self.events if e[0] == "run"]

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def install(self) -> list[tuple]:
        """The shared venv's install as the sessions run it (the fake venv starts empty)."""
        return [
            ("run", (sys.executable, "-m", "venv", str(self.venv))),
            ("run", (self.bin("python"), "-m", "pip", "install", "--upgrade", "pip")),
            ("run", (self.bin("python"), "-m", "pip", "install", "-e", ".[test]")),
        ]

    def built(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(path=self.tmp / "kind-cache" / name, built=False)


def _recorder(machine: Machine, real, answer, record=True):
    """A stand-in for ``real``: its arguments bound to ``real``'s signature and recorded
    as ``("module.name", {parameter: value given})`` (or None), then ``answer(bound)``."""
    tag = f"{real.__module__.rsplit('.', 1)[-1]}.{real.__name__}"

    def stand_in(*args, **kwargs):
        bound = _bind(real, *args, **kwargs)
        machine.events.append((tag, dict(bound.arguments) if record else None))
        return answer(bound)

    return stand_in


def machine(monkeypatch, tmp_path: Path) -> Machine:
    """Fake every probe and build lookup the sessions make; restore after the test what
    they change (PATH, sys.path, the venv's place)."""
    from integration import byo, kind_run
    from integration.kindbuild import (
        diskspace,
        kubernetes,
        minikube,
        minikubenode,
        mirror,
        stacknode,
        sysdeps,
        tools,
    )

    nox_file = noxfile()
    m = Machine(tmp_path, tmp_path / "venv")
    m.venv.mkdir()  # empty: no python, no stamp, so the install is always recorded
    monkeypatch.setattr(nox_file, "SHARED_ENV", m.venv)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    monkeypatch.setenv("DISTML_KIND_CACHE", str(tmp_path / "kind-cache"))
    for name in READ_ENV:
        monkeypatch.delenv(name, raising=False)
    needs = sysdeps.needs  # pure: called for real, and recorded
    monkeypatch.setattr(sysdeps, "needs", _recorder(m, needs, lambda b: needs(*b.args)))
    missing = _recorder(m, sysdeps.missing, lambda b: m.lacking, record=False)
    monkeypatch.setattr(sysdeps, "missing", missing)
    monkeypatch.setattr(diskspace, "needs", _recorder(m, diskspace.needs, lambda b: []))
    short = _recorder(m, diskspace.shortfall, lambda b: m.disk_short, record=False)
    monkeypatch.setattr(diskspace, "shortfall", short)
    check = imported_from("preflight")

    def found(bound) -> object:
        return check.Preflight(list(m.problems), list(m.notes), {"docker": "27.5"})

    monkeypatch.setattr(check, "preflight", _recorder(m, check.preflight, found))
    for module, name, entry in [
        (tools, "kind", "kind"),
        (minikube, "ensure", "minikube"),
        (kubernetes, "ensure", "kubernetes"),
        (mirror, "binary", "mirror-bin"),
    ]:
        monkeypatch.setattr(module, name, functools.partial(m.built, entry))
    monkeypatch.setattr(stacknode, "TAG", NODE_TAGS["kind"])
    monkeypatch.setattr(minikubenode, "TAG", NODE_TAGS["minikube"])
    monkeypatch.setattr(kind_run, "workdir", lambda: tmp_path / "distml-integration")
    monkeypatch.setattr(byo, "workdir", lambda: tmp_path / "distml-byo")
    return m
