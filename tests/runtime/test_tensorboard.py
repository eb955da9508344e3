"""runtime/tensorboard.py: the lifecycle both runtimes share: Ctrl-C once up is the normal end
(exit 0), Ctrl-C while starting exits 130, and an error still stops everything."""

from __future__ import annotations

import pytest

from common.errors import DistmlError
from runtime import tensorboard as tb


def _lifecycle(start_raises=None, block_raises=None):
    said: list[str] = []
    stopped: list[bool] = []

    def start() -> str:
        if start_raises:
            raise start_raises
        return "http://127.0.0.1:1/"

    def block() -> int:
        if block_raises:
            raise block_raises
        return 0

    def stop() -> str:
        stopped.append(True)
        return "stopped"

    return said, stopped, lambda: tb.serve(said.append, start=start, block=block, stop=stop)


def test_ctrl_c_once_up_is_the_normal_end_exit_0():
    said, stopped, run = _lifecycle(block_raises=KeyboardInterrupt())
    assert run() == 0
    assert said == ["TensorBoard ready: http://127.0.0.1:1/ (Ctrl-C stops it)", "stopped"]
    assert stopped == [True]


def test_ctrl_c_while_starting_is_an_interruption_exit_130():
    said, stopped, run = _lifecycle(start_raises=KeyboardInterrupt())
    assert run() == tb.INTERRUPTED == 130
    assert said == ["interrupted before TensorBoard was ready", "stopped"]
    assert stopped == [True]


@pytest.mark.parametrize("where", ["start", "block"])
def test_an_error_still_stops_everything(where):
    error = DistmlError("boom")
    said, stopped, run = _lifecycle(**{f"{where}_raises": error})
    with pytest.raises(DistmlError, match="boom"):
        run()
    assert stopped == [True] and said[-1] == "stopped"
