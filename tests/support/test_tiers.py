"""The fast tier (``tests/support/tiers.py``), run by a real pytest in a process of its
own: a test's tier follows from what it does, with nothing to list.

- A new test file whose tests start processes (``subprocess``, ``multiprocessing``, a
  thread's ``Popen``) or import TensorFlow, Keras or KServe, added with nothing else
  touched: ``--fast`` skips each where it starts one, saying what, and never fails it;
  without ``--fast`` the same tests run and pass.
- The guard hides no failure of its own making: a test that fails before any process
  fails under ``--fast`` too.
- ``--fast`` passes on a machine where matplotlib has never run (its first import builds
  the font cache with ``fc-list``, which must not trip the guard).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DRAWS = (
    "tests/runtime/output/test_charts.py::test_no_history_draws_no_chart_and_a_history_draws_a_png"
)

NEW_FILE = """
import multiprocessing
import subprocess
import threading

import pytest


def test_runs_a_command():
    assert subprocess.run(["true"]).returncode == 0


def test_a_server_thread_starts_a_process_and_the_test_waits_for_it():
    started = threading.Event()

    def serve():
        subprocess.run(["true"], check=True)
        started.set()

    threading.Thread(target=serve, daemon=True).start()
    assert started.wait(5), "the server thread never started"


def test_a_multiprocessing_worker():
    worker = multiprocessing.get_context("spawn").Process(target=print)
    worker.start()
    worker.join(30)
    assert worker.exitcode == 0


def test_code_that_swallows_everything_still_ends_skipped():
    try:
        subprocess.run(["true"], check=True)
    except BaseException:
        pass


def test_imports_tensorflow_in_its_body():
    import tensorflow  # noqa: F401


@pytest.mark.heavy
def test_marked_heavy_is_left_out():
    raise AssertionError("--fast must not run a test marked heavy")


def test_light():
    assert sum([1, 2]) == 3
"""
IMPORTS_KSERVE = "import kserve  # noqa: F401\n\n\ndef test_never_reached_under_fast():\n    pass\n"
FAILS_FIRST = """
import subprocess


def test_fails_before_any_process():
    assert 1 + 1 == 3, "a real failure"
    subprocess.run(["true"])
"""


def _pytest(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    argv = [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "-rs"]
    argv += ["-p", "tests.support.tiers", "-p", "no:cacheprovider", "--rootdir", str(REPO)]
    argv += ["--basetemp", str(tmp_path / "basetemp"), *args]
    env = {**(env or os.environ), "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / "new" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


def test_a_new_file_that_starts_processes_lands_in_unit_by_itself(tmp_path):
    new = _write(tmp_path, "test_new.py", NEW_FILE)
    kserve = _write(tmp_path, "test_new_kserve.py", IMPORTS_KSERVE)
    fast = _pytest(tmp_path, "--fast", new, kserve)
    out = fast.stdout
    assert fast.returncode == 0, out[-3000:] + fast.stderr
    assert "1 passed, 6 skipped, 1 deselected" in out, out[-3000:]
    skips = [line for line in out.splitlines() if line.startswith("SKIPPED [1] ")]
    assert len(skips) == 6, out[-3000:]
    assert sum("test_new.py:" in s and "starts a process (true)" in s for s in skips) == 3
    assert any("test_new.py:" in s and "starts a process (python" in s for s in skips)
    assert any("test_new.py:" in s and "imports tensorflow" in s for s in skips)
    assert any("test_new_kserve.py:1 imports kserve" in s for s in skips), skips
    assert "5 tests started a process" in out  # the module skipped at import is not a test
    every = _pytest(tmp_path, new, "-k", "not tensorflow and not marked_heavy")
    assert every.returncode == 0, every.stdout[-3000:] + every.stderr
    assert "5 passed" in every.stdout, every.stdout[-3000:]


def test_a_test_that_fails_before_any_process_fails_under_fast(tmp_path):
    fast = _pytest(tmp_path, "--fast", _write(tmp_path, "test_fails.py", FAILS_FIRST))
    assert fast.returncode == 1, fast.stdout[-3000:]
    assert "1 failed" in fast.stdout and "a real failure" in fast.stdout


def test_fast_passes_where_matplotlib_has_no_font_cache_yet(tmp_path):
    mplconfig, home = tmp_path / "mplconfig", tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(mplconfig)}
    done = _pytest(tmp_path, "--fast", "-q", DRAWS, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "1 passed" in done.stdout
    assert list(mplconfig.glob("fontlist-*.json")), "the font cache is built where it says"
