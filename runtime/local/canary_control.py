"""``invoke canary --promote|--abort``: end a canary release by hand, now.

With ``deploy --canary`` running, its loop looks at a control file every second
(``runtime.canary.live.take_word``): this writes the word there and waits until that deploy has
acted on it and says how it ended. With none running (it was killed, ``kill -9`` or a lost terminal,
leaving the canary in the volume), this ends the canary itself through ``ml canary_publish``,
with a record saying so; the server follows at its next poll.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.poll import Done, Pending, poll
from ml.contract import canary_commands
from runtime.canary import live
from runtime.local.serving import in_progress

if TYPE_CHECKING:
    from runtime.local import LocalRuntime

ACT_TIMEOUT_S = 120.0  # a promotion or rollback waits for the server to show it (60 s)


def _facts(rt: LocalRuntime) -> dict[str, Any]:
    return live.facts(rt.wd, rt.service)


def control(rt: LocalRuntime, word: str) -> int:
    version = in_progress(rt)
    if version is None:
        raise rt.error("no canary is in progress; `invoke deploy --canary` starts one")
    facts = _facts(rt)
    pid = live.running_pid(facts)
    if pid is not None and facts.get("version") == version:
        return _tell(rt, word, pid)
    return _end_here(rt, word, version)


def _tell(rt: LocalRuntime, word: str, pid: int) -> int:
    if not rt.ex.act(f"tell the running `deploy --canary` (pid {pid}) to {word}"):
        return 0
    live.control_path(rt.wd).write_text(word + "\n")
    rt.out(f"told the running `deploy --canary` (pid {pid}) to {word}; waiting for it")

    def judge(facts: dict[str, Any]) -> Any:
        return Pending() if facts.get("running") else Done(facts)

    verdict = poll(lambda: _facts(rt), judge, timeout=ACT_TIMEOUT_S, interval=0.5)
    if not isinstance(verdict, Done):
        raise rt.error(
            f"the running `deploy --canary` (pid {pid}) did not end within "
            f"{ACT_TIMEOUT_S:.0f} s; see its output"
        )
    rt.out(str(verdict.value.get("last", "")))
    return 0


def _end_here(rt: LocalRuntime, word: str, version: int) -> int:
    """No deploy runs the canary: end it with ``ml canary_publish``, a record saying so."""
    record = live.ended_record(word)
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=rt.wd.root, delete=False) as f:
        json.dump(record, f)
    try:
        argv = canary_commands.canary_end(
            rt.wd.volume, rt.service, promote=word == "promote", record=f.name, python=rt.python
        )
        code, _ = rt.ex.step(f"{word} canary version {version}", argv, rt.wd.logs / "canary.log")
    finally:
        Path(f.name).unlink(missing_ok=True)
    if code != 0:
        raise rt.error(f"ending canary version {version} failed (see above); it is still in place")
    return 0
