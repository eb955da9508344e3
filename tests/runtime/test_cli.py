"""runtime/cli.py: a runtime verb's outcome as an exit code, and a full disk anywhere in an
error's chain as one line and exit 1."""

from __future__ import annotations

import errno

import pytest
from invoke import Exit

from runtime.cli import call, disk_full
from tests.support.disk import raise_disk_full as _full


def _full_then_full_again_while_cleaning_up(*_):
    try:
        _full()
    finally:
        _full()  # e.g. recording the stopped workers' pids in state.json


def _other_error_caused_by_a_full_disk(*_):
    try:
        _full()
    except OSError as e:
        raise RuntimeError("the log could not be written") from e


@pytest.mark.parametrize(
    "verb",
    [_full, _full_then_full_again_while_cleaning_up, _other_error_caused_by_a_full_disk],
    ids=["plain", "chained while cleaning up", "as the cause"],
)
def test_a_full_disk_anywhere_in_the_chain_is_one_line_and_exit_1(verb):
    with pytest.raises(Exit) as e:
        call(verb)
    assert e.value.code == 1
    message = str(e.value.message)
    assert message.startswith("error: the disk is full") and "\n" not in message
    assert "Free some space" in message and "are kept" in message


def test_other_errors_are_not_mistaken_for_a_full_disk():
    assert disk_full(PermissionError(errno.EACCES, "Permission denied")) is None

    def broken():
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        call(broken)
