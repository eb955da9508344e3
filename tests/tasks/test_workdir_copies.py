"""A copied work dir is not the work dir it copies (runtime.workdir.origin): its first
task is refused, naming the original; its `up` makes it a new work dir; `invoke moved`
takes the record over only when the original is gone. And a plain `up` never switches the
runtime a work dir is set up on."""

from __future__ import annotations

import shutil
import socket

from runtime.workdir import Workdir
from tests.support.cli import invoke

SET_UP = {"up": True, "runtime": "existing", "context": "team-ctx", "instance": "abcd1234"}


def original(tmp_path):
    w = Workdir.at(tmp_path / "a")
    w.create()
    w.update_state(
        **SET_UP,
        namespace="ml-a",
        volume_uid="claim-uid",
        object_uids=[["TFJob ml-a/train-cnn", "uid-1"]],
        workdir_path=str(w.root),
        workdir_host=socket.gethostname(),
        workdir_secret="s3cret",
    )
    return w


def copy_of(w: Workdir, tmp_path, name="a2") -> Workdir:
    shutil.copytree(w.root, tmp_path / name)
    return Workdir.at(tmp_path / name)


def test_a_copy_is_refused_before_any_cluster_is_looked_at(tmp_path):
    a = original(tmp_path)
    a2 = copy_of(a, tmp_path)
    for task in (["down"], ["status"], ["train", "--model-type", "cnn"], ["deploy"]):
        r = invoke(a2.root, *task)
        assert r.returncode == 1, (task, r.stdout, r.stderr)
        assert f"is a copy of the work dir at {a.root} on {socket.gethostname()}" in r.stderr
        assert "`invoke moved`" in r.stderr and "`invoke up` makes this one" in r.stderr
        assert "context:" not in r.stdout  # refused before a context was chosen
    assert a2.state() == a.state()  # nothing changed, in either


def test_the_original_is_not_refused(tmp_path):
    a = original(tmp_path)
    r = invoke(a.root, "--dry", "down", "--forget")
    assert "is a copy" not in r.stderr


def test_a_copys_forget_clears_its_record_and_touches_no_cluster(tmp_path):
    a2 = copy_of(original(tmp_path), tmp_path)
    r = invoke(a2.root, "down", "--forget")
    assert r.returncode == 0, r.stderr
    assert a2.state().context is None and a2.state().instance is None
    r = invoke(a2.root, "status")  # a new work dir now: no longer refused as a copy
    assert "is a copy" not in r.stdout + r.stderr


def test_a_copys_up_makes_a_new_work_dir(tmp_path):
    a = original(tmp_path)
    a2 = copy_of(a, tmp_path)
    # --dry: refused (its print would carry the original's label), and it stays a copy.
    r = invoke(a2.root, "--dry", "up", "--runtime", "existing", "--context", "team-ctx")
    assert r.returncode == 1 and "is a copy of the work dir at" in r.stderr
    assert a2.state() == a.state()
    r = invoke(a2.root, "up", "--runtime", "existing", "--context", "no-such-context")
    assert f"work dir: a copy of {a.root}" in r.stdout
    state = a2.state()
    assert state.instance != "abcd1234"  # `up` chose its own, or none yet (it failed early)
    assert (state.volume_uid, state.object_uids, state.context) == (None, (), None)
    assert state.workdir_path == str(a2.root) and state.workdir_secret != "s3cret"
    assert a.state().instance == "abcd1234"  # the original keeps its record


def test_moved_takes_the_record_over_only_when_the_original_is_gone(tmp_path):
    a = original(tmp_path)
    a2 = copy_of(a, tmp_path)
    refused = invoke(a2.root, "moved")
    assert refused.returncode == 1 and "is still there, with the same record" in refused.stderr
    shutil.rmtree(a.root)
    r = invoke(a2.root, "moved")
    assert r.returncode == 0, r.stderr
    assert f"moved from {a.root}" in r.stdout
    state = a2.state()
    assert (state.workdir_path, state.instance, state.volume_uid) == (
        str(a2.root),
        "abcd1234",
        "claim-uid",
    )
    again = invoke(a2.root, "moved")
    assert "its record is its own" in again.stdout


def test_moved_over_a_new_work_dir_at_the_old_path(tmp_path):
    # The original was moved away, and a new work dir made where it was: another secret.
    a = original(tmp_path)
    a2 = copy_of(a, tmp_path)
    shutil.rmtree(a.root)
    fresh = Workdir.at(a.root)
    fresh.create()
    fresh.update_state(workdir_secret="another")
    assert invoke(a2.root, "moved").returncode == 0


def test_a_plain_up_keeps_the_runtime_the_work_dir_is_set_up_on(tmp_path):
    w = Workdir.at(tmp_path / "w")
    w.create()
    w.update_state(**SET_UP)
    r = invoke(w.root, "--dry", "up")
    assert "runtime: existing (the runtime `invoke up` prepared)" in r.stdout
    switched = invoke(w.root, "--dry", "up", "--runtime", "kind")
    assert switched.returncode == 2
    assert "set up on the existing runtime (context team-ctx)" in switched.stderr
    assert "`invoke down` first" in switched.stderr
