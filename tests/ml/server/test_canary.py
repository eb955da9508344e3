"""ml.server.canary: the canary version loaded beside the served one, its weight read from
its file, and requests split between them exactly as the weight says."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml.server import watcher
from ml.server.canary import WEIGHT_FILE, Split, WeightError, parse_weight
from ml.server.client_error import ClientError


def loader(failing: set[int] | None = None):
    def load(version: int, path: Path) -> watcher.LoadedVersion:
        if version in (failing or set()):
            raise ValueError("broken export")
        return watcher.LoadedVersion(version, path, {}, None)

    return load


def publish(root: Path, version: int) -> None:
    (root / str(version)).mkdir(parents=True)


def set_weight(canary: Path, weight) -> None:
    (canary / WEIGHT_FILE).write_text(json.dumps({"weight": weight}))


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    serving, canary = tmp_path / "serving", tmp_path / "canary"
    publish(serving, 1)
    canary.mkdir()
    return serving, canary


@given(st.integers(0, 100), st.integers(1, 500))
def test_the_split_gives_the_canary_its_weight_to_within_one_request(weight, n):
    split = Split()
    split.set(weight)
    to_canary = sum(split.to_canary() for _ in range(n))
    assert to_canary == n * weight // 100


def test_the_split_spreads_the_canarys_requests_evenly():
    split = Split()
    split.set(25)
    assert [split.to_canary() for _ in range(8)] == [False, False, False, True] * 2


@given(st.binary(max_size=64))
def test_any_weight_file_is_a_weight_or_a_weight_error(data):
    try:
        weight = parse_weight(data)
    except WeightError as e:
        assert str(e)
    else:
        assert 0 <= weight <= 100


@pytest.mark.parametrize("text", ['{"weight": 101}', '{"weight": true}', '{"weight": 2.5}', "[]"])
def test_weights_outside_0_to_100_or_not_integers_are_refused(text):
    with pytest.raises(WeightError, match=r'expected \{"weight": <integer 0-100>\}'):
        parse_weight(text.encode())


def test_the_canary_answers_its_share_and_a_named_version_is_honoured(dirs):
    serving, canary = dirs
    publish(canary, 2)
    set_weight(canary, 20)
    w = watcher.VersionWatcher(serving, loader=loader(), canary_dir=canary)
    w.poll()
    assert w.versions() == {1: "stable", 2: "canary"}
    answered = [w.route().version for _ in range(50)]
    assert answered.count(2) == 10 and answered.count(1) == 40
    assert w.route(2).version == 2 and w.route(1).version == 1
    with pytest.raises(
        ClientError, match=r"version 7 is not served here; served: 1 \(stable\), 2 \(canary\)"
    ):
        w.route(7)


def test_a_new_weight_is_read_at_the_next_poll_and_removal_ends_the_canary(dirs):
    serving, canary = dirs
    publish(canary, 2)
    set_weight(canary, 0)
    w = watcher.VersionWatcher(serving, loader=loader(), canary_dir=canary)
    w.poll()
    assert {w.route().version for _ in range(20)} == {1}
    set_weight(canary, 100)
    w.poll()
    assert {w.route().version for _ in range(20)} == {2}
    (canary / "2").rmdir()
    w.poll()
    assert w.versions() == {1: "stable"}
    assert {w.route().version for _ in range(20)} == {1}


def test_without_a_weight_file_or_with_a_bad_one_the_canary_answers_nothing(dirs, caplog):
    serving, canary = dirs
    publish(canary, 2)
    w = watcher.VersionWatcher(serving, loader=loader(), canary_dir=canary)
    caplog.set_level(logging.WARNING, "ml.server.serve")
    w.poll()
    assert {w.route().version for _ in range(20)} == {1}
    (canary / WEIGHT_FILE).write_text("fifty")
    w.poll()
    w.poll()  # said once per change, not at every poll
    assert {w.route().version for _ in range(20)} == {1}
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "the canary answers nothing" in said[1]


def test_a_canary_that_fails_to_load_answers_nothing_and_the_stable_serves(dirs):
    serving, canary = dirs
    publish(canary, 2)
    set_weight(canary, 50)
    w = watcher.VersionWatcher(serving, loader=loader(failing={2}), canary_dir=canary)
    w.poll()
    assert w.versions() == {1: "stable"}
    assert {w.route().version for _ in range(20)} == {1}


def test_without_a_canary_dir_nothing_changes(dirs):
    serving, _ = dirs
    w = watcher.VersionWatcher(serving, loader=loader())
    w.poll()
    assert w.canary is None and w.route().version == 1 and w.versions() == {1: "stable"}
