"""runtime/workdir/state.py: the work dir's state has one reader that never fails and one
writer that takes only the fields it knows, and a write that fails (a full disk) keeps the
old state."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.workdir import Workdir
from runtime.workdir.state import (
    _PARSERS,
    VERSION,
    Server,
    State,
    StateError,
    from_json,
    read_state,
    to_json,
    update_state,
)
from tests.support.disk import raise_disk_full as _full

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


KEYS = st.sampled_from([f.name for f in fields(State)] + ["deployed_version", "pid", "url"])


# Objects with the state's own keys, so the values (not only unknown keys) get exercised.
STATE_LIKE = st.dictionaries(KEYS, JSON | st.dictionaries(KEYS, JSON, max_size=5), max_size=8)


SERVER = st.builds(
    Server,
    pid=st.integers(),
    url=st.text(),
    log=st.text(),
    started=st.none() | st.floats(allow_nan=False),
)


STATES = st.builds(
    State,
    up=st.booleans(),
    runtime=st.none() | st.text(),
    source_dir=st.none() | st.text(),
    last_loadtest=st.none() | st.text(),
    server=st.none() | SERVER,
    train_pids=st.lists(st.integers()).map(tuple),
    serving_mode=st.none() | st.text(),
    argo=st.booleans(),
    monitoring=st.booleans(),
    image=st.none() | st.text(),
    built_images=st.lists(st.text()).map(tuple),
    deployed=st.booleans(),
    target=st.none() | st.integers(),
    max_replicas=st.none() | st.integers(),
    scale_metric=st.none() | st.sampled_from(["cpu", "concurrency", "rps"]),
)


def test_every_field_has_a_parser():
    assert set(_PARSERS) == {f.name for f in fields(State)}


@settings(max_examples=300, deadline=None)
@given(raw=JSON | STATE_LIKE)
def test_any_json_reads_as_a_state(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("wd") / "state.json"
    path.write_text(json.dumps(raw))
    state = read_state(path)
    assert isinstance(state, State)
    assert state.server is None or isinstance(state.server, Server)
    assert all(type(p) is int for p in state.train_pids)


@settings(max_examples=200, deadline=None)
@given(data=st.binary())
def test_any_bytes_read_as_a_state(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("wd") / "state.json"
    path.write_bytes(data)
    assert isinstance(read_state(path), State)


@settings(max_examples=200, deadline=None)
@given(state=STATES)
def test_what_is_written_reads_back_the_same(tmp_path_factory, state):
    path = tmp_path_factory.mktemp("wd") / "state.json"
    changes = {f.name: getattr(state, f.name) for f in fields(State) if f.name != "version"}
    assert update_state(path, **changes) == state
    assert read_state(path) == state
    assert from_json(json.loads(json.dumps(to_json(state)))) == state


def test_no_file_or_a_corrupt_one_is_an_empty_state(tmp_path):
    assert read_state(tmp_path / "missing.json") == State()
    (tmp_path / "state.json").write_text('{"up": tru')
    assert read_state(tmp_path / "state.json") == State()
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert read_state(tmp_path / "deep.json") == State()


def test_an_older_file_reads_its_fields_and_drops_the_keys_nothing_reads(tmp_path):
    path = tmp_path / "state.json"
    older = {
        "up": True,
        "runtime": "local",
        "server": {"pid": 7, "port": 8501, "url": "http://127.0.0.1:8501", "log": "l"},
        "deployed_version": 3,
        "train_pids": [1, "2"],  # a wrong type: the field's default
    }
    path.write_text(json.dumps(older))
    state = read_state(path)
    assert state == State(up=True, runtime="local", server=Server(7, "http://127.0.0.1:8501", "l"))
    update_state(path, argo=True)
    assert json.loads(path.read_text()) == {
        "version": VERSION,
        "up": True,
        "runtime": "local",
        "server": {"pid": 7, "url": "http://127.0.0.1:8501", "log": "l", "started": None},
        "argo": True,
    }


def test_none_resets_a_field_and_defaults_are_not_written(tmp_path):
    path = tmp_path / "state.json"
    update_state(path, up=True, train_pids=[4, 5], serving_mode="standard")
    assert read_state(path).train_pids == (4, 5)
    update_state(path, train_pids=None, up=False)
    assert json.loads(path.read_text()) == {"version": VERSION, "serving_mode": "standard"}


@pytest.mark.parametrize(
    "changes",
    [{"deployed_version": 3}, {"version": 2}, {"up": "yes"}, {"train_pids": [1.5]}],
)
def test_an_unknown_field_or_a_wrong_type_is_a_bug(tmp_path, changes):
    path = tmp_path / "state.json"
    with pytest.raises(TypeError):
        update_state(path, **changes)
    assert not path.exists()


def test_a_newer_file_is_read_but_not_overwritten(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": VERSION + 1, "up": True, "new_thing": 1}))
    assert read_state(path).up is True
    with pytest.raises(StateError, match="newer distml"):
        update_state(path, up=False)
    assert json.loads(path.read_text())["new_thing"] == 1


def test_a_failed_state_write_keeps_the_old_state_and_leaves_no_temp_file(tmp_path, monkeypatch):
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    wd.update_state(up=True)
    monkeypatch.setattr("runtime.workdir.state.json.dump", lambda *a, **k: _full())
    with pytest.raises(OSError):
        wd.update_state(train_pids=[1, 2])
    assert wd.state() == State(up=True)
    assert [p.name for p in wd.root.iterdir() if p.name.startswith(".state")] == []


@pytest.mark.parametrize("value", ["Bad Value", "-a", "a" * 64, "abc_", 7, ""])
def test_an_instance_id_that_is_no_label_value_is_not_read(value):
    # It is put on objects as a label: a hand-edited state must not break every apply.
    assert from_json({"instance": value}).instance is None


def test_an_instance_id_is_read():
    assert from_json({"instance": "abcd1234"}).instance == "abcd1234"
