"""runtime.workdir.origin, unit by unit: where a work dir lives is stamped once; a copy or
a move is told by path or host; a copy's renewal forgets everything that names the
original's objects; `moved` takes the record over only when the original is gone. (The
tasks' side of it: tests/tasks/test_workdir_copies.py.)"""

from __future__ import annotations

import dataclasses
import shutil
import socket

import pytest

from runtime.workdir import Workdir
from runtime.workdir import origin as wi
from runtime.workdir.state import State

# State fields a copy's `up` keeps, and why: they name nothing on a cluster.
KEPT = {
    "version": "the state file's format",
    "source_dir": "the raw files on this machine: the copy reads them as the original does",
    "last_loadtest": "a report file; reading it changes nothing",
    "registry": "where the user pushes images: a setting, not an object of the original",
}


def _workdir(tmp_path, name="a") -> Workdir:
    w = Workdir.at(tmp_path / name)
    w.create()
    return w


def test_every_state_field_is_renewed_or_kept_on_purpose() -> None:
    fields = {f.name for f in dataclasses.fields(State)}
    undecided = fields - set(wi.RENEWED) - set(KEPT)
    assert undecided == set(), "a new State field: add it to RENEWED or say why a copy keeps it"
    assert set(wi.RENEWED) <= fields


def test_stamp_records_the_place_once(tmp_path) -> None:
    w = _workdir(tmp_path)
    wi.stamp(w)
    first = w.state()
    assert (first.workdir_path, first.workdir_host) == (str(w.root), socket.gethostname())
    assert first.workdir_secret and len(first.workdir_secret) == 32
    wi.stamp(w)
    assert w.state().workdir_secret == first.workdir_secret
    wi.check(w)  # the original is not refused


def test_a_work_dir_without_a_record_is_not_a_copy(tmp_path) -> None:
    w = _workdir(tmp_path)
    assert wi.original(w) is None
    wi.check(w)


def test_a_copy_is_refused_naming_the_original(tmp_path) -> None:
    a = _workdir(tmp_path)
    a.update_state(instance="abcd1234")
    wi.stamp(a)
    shutil.copytree(a.root, tmp_path / "a2")
    a2 = Workdir.at(tmp_path / "a2")
    with pytest.raises(wi.CopiedWorkdir) as e:
        wi.check(a2)
    msg = str(e.value)
    assert f"a copy of the work dir at {a.root} on {socket.gethostname()}" in msg
    assert "abcd1234" in msg and "`invoke up`" in msg and "`invoke moved`" in msg
    assert wi.original_is_there(a2, wi.recorded(a2))  # type: ignore[arg-type]


def test_another_hosts_record_is_a_copy_too(tmp_path) -> None:
    w = _workdir(tmp_path)
    w.update_state(workdir_path=str(w.root), workdir_host="elsewhere", workdir_secret="x")
    assert wi.original(w) == wi.Place(str(w.root), "elsewhere")
    assert not wi.original_is_there(w, wi.Place(str(w.root), "elsewhere"))
    with pytest.raises(wi.CopiedWorkdir):
        wi.check(w)


def test_renew_forgets_what_names_the_originals_objects(tmp_path) -> None:
    a = _workdir(tmp_path)
    a.update_state(
        up=True,
        runtime="kind",
        instance="abcd1234",
        made_cluster=True,
        volume_uid="v",
        object_uids=[["TFJob ns/t", "u"]],
        source_dir="/data",
    )
    wi.stamp(a)
    shutil.copytree(a.root, tmp_path / "a2")
    a2 = Workdir.at(tmp_path / "a2")
    said: list[str] = []
    wi.renew(a2, said.append)
    s = a2.state()
    assert (s.up, s.runtime, s.instance, s.made_cluster, s.volume_uid) == (
        False,
        None,
        None,
        False,
        None,
    )
    assert s.object_uids == () and s.workdir_secret is None
    assert s.source_dir == "/data"
    assert said and f"a copy of {a.root}" in said[0]
    assert a.state().instance == "abcd1234"  # the original untouched


def test_moved_refuses_while_the_original_is_there_and_takes_over_after(tmp_path) -> None:
    a = _workdir(tmp_path)
    wi.stamp(a)
    shutil.copytree(a.root, tmp_path / "b")
    b = Workdir.at(tmp_path / "b")
    with pytest.raises(wi.CopiedWorkdir, match="is still there"):
        wi.moved(b, print)
    shutil.rmtree(a.root)
    said: list[str] = []
    assert wi.moved(b, said.append) == 0
    assert b.state().workdir_path == str(b.root)
    wi.check(b)
    assert wi.moved(b, said.append) == 0 and "nothing to take over" in said[-1]
