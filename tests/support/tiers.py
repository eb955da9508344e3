"""The fast tier (``pytest --fast``, ``nox -s fast``): a test's tier follows from what it does.

A test is heavy, and ``--fast`` leaves it to ``nox -s unit``, when

- it lives in ``tests/e2e`` or ``tests/image`` (the lifecycle tiers: never even imported);
- it carries ``@pytest.mark.heavy`` (slow with no process: hashing every mirrored file),
  or a fixture it uses says so with :func:`heavy_fixture`, each with its reason beside it;
- it starts a process (``fork``, ``posix_spawn``, ``os.system``: so ``subprocess``,
  ``multiprocessing`` and ``asyncio`` too) or imports TensorFlow, Keras or KServe, in its
  module, a fixture or its body, in any thread. Under ``--fast`` that call raises a skip
  there and then, saying what it started; whatever the test does with it (a server thread
  dying, a wait timing out), it ends skipped, never failed. The tests that run before
  such a call still fail as they would.

There is no list of heavy tests to keep: a new test that starts a process lands in the
right tier by itself. ``nox -s unit`` runs every test, heavy or not; ``.ci/run`` runs
``nox -s fast`` as well, so the tier cannot break unseen.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
import sys
from collections.abc import Callable, Generator
from importlib.abc import MetaPathFinder
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import pytest

TESTS = Path(__file__).resolve().parents[1]
HEAVY_DIRS = ("e2e", "image")
BLOCKED_IMPORTS = ("tensorflow", "tf_keras", "keras", "kserve")
WHERE = "runs in nox -s unit"
# (module, attribute): every way a Python process starts another one. subprocess goes
# through its own fork_exec or posix_spawn; multiprocessing through fork or fork_exec.
STARTERS = (
    (subprocess, "_fork_exec"),
    (_posixsubprocess, "fork_exec"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "system"),
)


class _Guard:
    """What the running test tried that makes it heavy (reset before each test)."""

    def __init__(self) -> None:
        self.tried: list[str] = []
        self.skipped: set[str] = set()

    def refuse(self, what: str) -> NoReturn:
        what = f"{_caller()}{what}"
        self.tried.append(what)
        skip = pytest.skip.Exception(f"heavy: {what} ({WHERE})", allow_module_level=True)
        skip._use_item_location = True  # reported at the test, as a skip mark is
        raise skip


def _caller() -> str:
    """``tests/x/test_y.py:12 `` for the innermost frame of a test module or of ``tests/``
    that led here (a module skipped at import is otherwise reported at this file's line),
    else ''."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        tests_side = path.is_relative_to(TESTS) or path.name.startswith("test_")
        if tests_side and path.resolve() != Path(__file__).resolve():
            return f"{_relative(path)}:{frame.f_lineno} "
        frame = frame.f_back
    return ""


GUARD = _Guard()


def _program(name: str, args: tuple[Any, ...]) -> str:
    """What a starter was asked to run, for the skip's reason."""
    position = {"system": None, "posix_spawn": 1, "posix_spawnp": 1}.get(name, 0)
    try:
        first = args[0] if position is None else args[position][0] if args[position] else None
    except (IndexError, TypeError):
        first = None
    program = os.path.basename(os.fsdecode(first).split()[0]) if first else ""
    return f"starts a process ({program})" if program else f"starts a process ({name})"


def _refusing(name: str) -> Callable[..., NoReturn]:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        GUARD.refuse(_program(name, args))

    return refuse


class _Blocker(MetaPathFinder):
    """Under ``--fast``: importing TensorFlow, Keras or KServe makes the importer heavy."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".", 1)[0] in BLOCKED_IMPORTS:
            GUARD.refuse(f"imports {name}")
        return None


def heavy_fixture(request: pytest.FixtureRequest, why: str) -> None:
    """Call first in a fixture that is slow without starting a process: under ``--fast``
    every test using it is skipped, saying ``why``."""
    if request.config.getoption("--fast"):
        pytest.skip(f"heavy: {why} ({WHERE})")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="leave out the tests that start processes, TensorFlow or servers",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fast"):
        _build_font_cache()
        _arm()


def _arm() -> None:
    """From here on (the whole session: fixtures of any scope, any thread) starting a
    process or importing TensorFlow, Keras or KServe skips whoever does it."""
    for module, name in STARTERS:
        if hasattr(module, name):
            setattr(module, name, _refusing(name))
    sys.meta_path.insert(0, _Blocker())


def _build_font_cache() -> None:
    """Before the guard is armed: matplotlib's font cache, which its first import on a
    machine builds by running ``fc-list`` (once, in ``$MPLCONFIGDIR`` or
    ``~/.cache/matplotlib``). That is the library setting itself up, not the code under
    test starting a process: done here, the first ``--fast`` run on a fresh machine runs
    the chart tests as every later one does. Warm, it reads one JSON file."""
    import matplotlib.font_manager  # noqa: F401


def _relative(path: Path) -> str:
    """``path`` relative to ``tests/``, or as it is when outside it."""
    path = path.resolve()
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else str(path)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``--fast`` the lifecycle tiers are not even imported."""
    if not config.getoption("--fast") or not collection_path.is_relative_to(TESTS):
        return None
    return True if _relative(collection_path).split("/", 1)[0] in HEAVY_DIRS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _relative(item.path).split("/", 1)[0] in HEAVY_DIRS:
            item.add_marker(pytest.mark.heavy)
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if config.getoption("--fast") and heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker("heavy")]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> None:
    GUARD.tried.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test that tried to start a process or import TensorFlow under ``--fast`` ends
    skipped, whatever followed (a thread that died of the skip, a wait that timed out, code
    that swallowed it and passed); a teardown that tried fails nothing."""
    report = yield
    if GUARD.tried and item.config.getoption("--fast"):
        GUARD.skipped.add(item.nodeid)
        if report.failed or (report.passed and call.when != "teardown"):
            report.outcome = "skipped"
            line = item.location[1] + 1 if item.location[1] is not None else 0
            report.longrepr = (str(item.path), line, f"Skipped: heavy: {GUARD.tried[0]} ({WHERE})")
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.getoption("--fast") and GUARD.skipped:
        terminalreporter.write_line(
            f"--fast: {len(GUARD.skipped)} tests started a process or imported "
            f"TensorFlow, Keras or KServe and were skipped there; nox -s unit runs them"
        )
