"""The fast tier, set in one place: which tests start processes, TensorFlow or servers.

``HEAVY`` names them, as test files (``ml/test_train.py``) or single tests
(``test_layout.py::test_x``), relative to ``tests/``; ``tests/e2e`` and ``tests/image``
are heavy as a whole. Every one of them gets the ``heavy`` marker. ``pytest --fast``
(``nox -s fast``) leaves them out, and keeps the list honest: a test it runs that starts a
process or imports TensorFlow, Keras or KServe fails, naming this list. ``nox -s unit``
runs both kinds.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.abc import MetaPathFinder
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
HEAVY_DIRS = ("e2e", "image")
HEAVY: frozenset[str] = frozenset()
BLOCKED_IMPORTS = ("tensorflow", "tf_keras", "keras", "kserve")
FIX = f"list it in HEAVY in {Path(__file__).relative_to(TESTS.parent)}"


def _relative(path: Path) -> str:
    return path.resolve().relative_to(TESTS).as_posix()


def is_heavy(nodeid_in_tests: str) -> bool:
    """``nodeid_in_tests``: ``ml/test_train.py::test_x[param]`` (relative to ``tests/``)."""
    file, _, name = nodeid_in_tests.partition("::")
    test = name.split("[", 1)[0]
    return file.split("/", 1)[0] in HEAVY_DIRS or file in HEAVY or f"{file}::{test}" in HEAVY


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="leave out the tests that start processes, TensorFlow or servers (HEAVY)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "heavy: starts processes, TensorFlow or servers")
    if config.getoption("--fast"):
        sys.meta_path.insert(0, _Blocker())


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``--fast`` heavy files are not even imported (their imports load TF)."""
    if not config.getoption("--fast") or not collection_path.is_relative_to(TESTS):
        return None
    relative = _relative(collection_path)
    return True if relative.split("/", 1)[0] in HEAVY_DIRS or relative in HEAVY else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    heavy = [item for item in items if is_heavy(_nodeid(item))]
    for item in heavy:
        item.add_marker(pytest.mark.heavy)
    if config.getoption("--fast") and heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if item not in heavy]


def _nodeid(item: pytest.Item) -> str:
    return f"{_relative(item.path)}::{item.nodeid.split('::', 1)[1]}"


@pytest.fixture(autouse=True)
def _fast_means_no_processes(request: pytest.FixtureRequest, monkeypatch) -> None:
    if not request.config.getoption("--fast"):
        return

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} starts a process under --fast: {FIX}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


class _Blocker(MetaPathFinder):
    """Under ``--fast``: importing TensorFlow, Keras or KServe fails, naming the fix."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".", 1)[0] in BLOCKED_IMPORTS:
            raise ImportError(f"--fast runs no {name}: the test module imports it; {FIX}")
        return None
