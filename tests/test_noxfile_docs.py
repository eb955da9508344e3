"""The docs against the sessions: every ``nox -s NAME`` the docs name is a session, every
session has its row in docs/testing.md's tiers table, and the integration sessions' usage
lines (docs/testing.md's, the session's own usage error, its docstring) name exactly what
the session accepts, each word tried on the session itself (a stand-in session on a faked
machine, tests/support/nox_kit.py); every example command in the docs runs."""

from __future__ import annotations

import ast
import re

import nox
import pytest

from integration import kind_run
from tests.support import nox_kit
from tests.support.nox_kit import Stop

REPO = nox_kit.REPO
TESTING = REPO / "docs" / "testing.md"
DOCS = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *REPO.glob("docs/*.md")])
WITH_ARGS = ("integration", "integration_existing")
UNKNOWN = "--no-such-flag"


@pytest.fixture
def machine(monkeypatch, tmp_path):
    return nox_kit.machine(monkeypatch, tmp_path)


def _sessions() -> set[str]:
    nox_kit.noxfile()  # registers them
    return set(nox.registry.get())


def _code_spans(text: str) -> list[str]:
    """Markdown code spans, whitespace folded and table pipes unescaped."""
    return [" ".join(s.replace("\\|", "|").split()) for s in re.findall(r"`([^`]+)`", text)]


def test_every_nox_session_the_docs_name_exists():
    named = {
        (path.name, name)
        for path in [*DOCS, REPO / "benchmarks" / "README.md"]
        for name in re.findall(r"\bnox -s ([\w-]+)", path.read_text())
    }
    assert {pair for pair in named if pair[1] not in _sessions()} == set()


def test_every_session_has_its_row_in_the_tiers_table():
    lines = TESTING.read_text().splitlines()
    rows = [re.split(r"(?<!\\)\|", line) for line in lines if line.startswith("| ")]
    table = {cells[1].strip(): cells[2] for cells in rows if "`nox -s " in cells[2]}
    assert set(table) == _sessions()
    assert [tier for tier, command in table.items() if f"`nox -s {tier}" not in command] == []


def _usage(text: str, name: str) -> str:
    """The arguments of a usage line ``nox -s NAME -- [A|B] [--c]`` (``[-- ...]``
    allowed if it closes at the end): every one must reach the session after ``--``."""
    rest = text.split(f"nox -s {name}", 1)[1].strip()
    if rest.startswith("[--"):
        depth = [rest[: i + 1].count("[") - rest[: i + 1].count("]") for i in range(len(rest))]
        assert depth.index(0) == len(rest) - 1, f"{text!r}: an argument outside [-- ...]"
        rest = rest[1:-1]
    assert rest.startswith("-- "), f"{text!r}: nox passes on only what follows --"
    return rest[3:]


def _words(usage: str) -> set[str]:
    return {w for w in re.split(r"[\s\[\]|]+", usage) if w}


def _docs_usages(name: str) -> list[str]:
    spans = _code_spans(TESTING.read_text())
    return [s for s in spans if re.search(rf"\bnox -s {name}(?!\w)", s) and "[" in s]


def _own_usage(machine, name: str) -> str:
    with pytest.raises(Stop) as refused:
        getattr(nox_kit.noxfile(), name)(machine.session(UNKNOWN))
    return str(refused.value).split("usage: ", 1)[1]


def _docstring_usage(name: str) -> str:
    tree = ast.parse((REPO / "noxfile.py").read_text())
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    spans = re.findall(r"``([^`]*)``", ast.get_docstring(function))
    return next(" ".join(s.split()) for s in spans if s.startswith(f"nox -s {name} "))


def _accepted(machine, name: str, word: str) -> bool:
    try:
        getattr(nox_kit.noxfile(), name)(machine.session(word))
    except Stop as e:
        if "unknown arguments" in str(e) or "DISTML_SERVING_MODE" in str(e):
            return False
        raise
    return True


def _candidates(*usages: str) -> set[str]:
    """Every word a usage line names, every flag-like string in noxfile.py, the providers
    and the serving modes: what the session might accept."""
    flags = {
        node.value
        for node in ast.walk(ast.parse((REPO / "noxfile.py").read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if re.fullmatch(r"--[a-z][\w-]*", node.value)
    }
    return (
        flags
        | set(kind_run.PROVIDERS)
        | {"knative", "standard"}
        | set().union(*map(_words, usages))
    )


@pytest.mark.parametrize("name", WITH_ARGS)
def test_each_usage_line_names_exactly_what_the_session_accepts(machine, name):
    docs = _docs_usages(name)
    assert docs, f"docs/testing.md has no usage line for nox -s {name}"
    usages = {
        "the session's usage error": _own_usage(machine, name).split(f"nox -s {name}", 1)[1],
        "its docstring": _docstring_usage(name).split(f"nox -s {name}", 1)[1],
        **{f"docs/testing.md {text!r}": _usage(text, name) for text in docs},
    }
    usages = {where: u.strip().removeprefix("-- ") for where, u in usages.items()}
    accepted = {w for w in _candidates(*usages.values()) if _accepted(machine, name, w)}
    assert accepted >= {"--offline", "--keep-cluster"}
    wrong = {where: _words(u) ^ accepted for where, u in usages.items() if _words(u) != accepted}
    assert wrong == {}, "a usage line names a word the session refuses, or misses one it takes"


def _examples() -> list[tuple[str, str, list[str]]]:
    """Every ``nox -s integration[_existing] -- ARGS`` the docs show: (file, name, ARGS)."""
    found = []
    for path in [*DOCS, REPO / "benchmarks" / "README.md"]:
        for span in _code_spans(path.read_text()):
            hit = re.search(r"\bnox -s (integration(?:_existing)?)(?: -- (.*))?$", span)
            if hit and "[" not in span:
                args = [a for a in (hit.group(2) or "").split() if a not in ("...", "…")]
                found.append((path.name, hit.group(1), args))
    return found


def test_every_example_command_in_the_docs_runs(machine):
    examples = _examples()
    assert {name for _, name, _ in examples} == set(WITH_ARGS)
    for where, name, args in examples:
        machine.events.clear()
        getattr(nox_kit.noxfile(), name)(machine.session(*args))  # no usage error
        assert machine.runs(), f"{where}: nox -s {name} -- {' '.join(args)} ran nothing"
