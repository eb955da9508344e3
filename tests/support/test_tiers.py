"""``pytest --fast`` on a machine where matplotlib has never run: its first import builds
the font cache by running ``fc-list``, which must not trip the fast tier's process guard
(``tests/support/tiers.py``). The chart test that failed so, run by a real pytest in a
process of its own with an empty ``MPLCONFIGDIR`` and ``HOME``, as on a fresh machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DRAWS = "tests/runtime/test_charts.py::test_no_history_draws_no_chart_and_a_history_draws_a_png"


def test_fast_passes_where_matplotlib_has_no_font_cache_yet(tmp_path):
    mplconfig, home = tmp_path / "mplconfig", tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(mplconfig)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    argv = [sys.executable, "-m", "pytest", "--fast", "-q", "-p", "no:cacheprovider", DRAWS]
    argv += ["--basetemp", str(tmp_path / "basetemp")]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "1 passed" in done.stdout
    assert list(mplconfig.glob("fontlist-*.json")), "the font cache is built where it says"
