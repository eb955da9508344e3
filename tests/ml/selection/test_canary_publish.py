"""ml.selection.canary_publish: a canary version ends promoted into serving or set aside as
rejected, with the analysis kept in its publish.json; a run killed between any two steps
finishes when run again; a bad record file or a full disk changes nothing. The canary's
publish (``ml select --canary``) is tested with real models in test_select.py; here the
versions are small stand-in directories (the module moves files, it never loads a model)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ml import contract
from ml.contract import canary_commands, records
from ml.contract.volume_lock import volume_lock
from ml.selection import canary_publish as cp
from ml.selection import publishing

SERVICE = "tf-mnist"
RECORD = {"decision": "promote", "reason": "every gate passed", "intervals": [{"weight": 10}]}


class Killed(BaseException):
    """Stands in for SIGKILL between two steps: nothing of ours catches it."""


def make_version(root: Path, version: int, record: dict, *, payload: bytes = b"weights") -> Path:
    path = root / str(version)
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"graph" + payload)
    (path / "variables" / "variables.data-00000-of-00001").write_bytes(payload)
    (path / contract.PUBLISH_FILE).write_text(json.dumps(record))
    return path


@pytest.fixture
def volume(tmp_path) -> Path:
    """Serving version 1; canary version 2 published by ml select --canary, weight 10 %."""
    v = tmp_path / "volume"
    make_version(Path(contract.serving_dir(v, SERVICE)), 1, {"version": 1, "source": "x"})
    canary_record = {"version": 2, "previous": 1, "canary": True, "published_at": "T0"}
    make_version(Path(contract.canary_dir(v, SERVICE)), 2, canary_record, payload=b"new")
    Path(contract.canary_weight_path(v, SERVICE)).write_text('{"weight": 10}')
    return v


def record_file(tmp_path: Path, record: object = RECORD) -> Path:
    path = tmp_path / "analysis.json"
    path.write_text(json.dumps(record))
    return path


def end(volume: Path, record: Path, how: str = "--promote") -> int:
    return cp.main(
        canary_commands.canary_end(volume, SERVICE, promote=how == "--promote", record=record)[4:]
    )


def serving(volume: Path) -> Path:
    return Path(contract.serving_dir(volume, SERVICE))


def canary(volume: Path) -> Path:
    return Path(contract.canary_dir(volume, SERVICE))


def rejected(volume: Path) -> Path:
    return Path(contract.rejected_dir(volume, SERVICE))


def publish_json(path: Path) -> dict:
    return json.loads((path / contract.PUBLISH_FILE).read_text())


def names(path: Path) -> list[str]:
    """What a directory holds; the canary folder inside the serving one is not listed."""
    found = path.iterdir() if path.is_dir() else ()
    return sorted(p.name for p in found if p.name != contract.CANARY_SUBDIR)


def test_the_contract_builds_the_paths_and_the_command_the_parser_takes():
    assert contract.canary_dir("/v", "s") == "/v/serving/s/canary"
    assert contract.canary_weight_path("/v", "s") == "/v/serving/s/canary/weight.json"
    assert contract.rejected_dir("/v", "s") == "/v/rejected/s"
    argv = canary_commands.canary_end("/v", "s", promote=False, record="/r.json", python="py")
    assert argv[:4] == ["py", "-m", "ml", "canary_publish"]
    args = cp.build_parser().parse_args(argv[4:])
    assert (args.volume, args.service, args.promote, args.reject) == ("/v", "s", False, True)
    assert args.record == "/r.json"
    assert (
        cp.build_parser()
        .parse_args(canary_commands.canary_end("/v", "s", promote=True, record="r")[4:])
        .promote
    )


def test_promote_makes_the_canary_the_serving_version(volume, tmp_path, capsys):
    original = canary(volume) / "2"
    files = cp._files(original)
    assert end(volume, record_file(tmp_path)) == 0
    assert capsys.readouterr().out == "promoted canary version 2: serving version 2\n"
    assert names(serving(volume)) == ["1", "2"], "no staging directory is left"
    assert cp._files(serving(volume) / "2") == files
    record = publish_json(serving(volume) / "2")
    assert record["canary"] == RECORD and record["published_at"] == "T0"
    assert (record["version"], record["previous"]) == (2, 1)
    assert records.read_publish(contract.serving_record(volume, SERVICE)) == record
    assert names(canary(volume)) == [], "the canary and its weight are gone"


def test_promote_takes_the_next_number_when_a_publish_took_the_canarys(volume, tmp_path, capsys):
    make_version(serving(volume), 2, {"version": 2, "source": "a publish meanwhile"})
    assert end(volume, record_file(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.startswith("promoted canary version 2: serving version 3 (version 2 was taken")
    assert publish_json(serving(volume) / "3")["previous"] == 2, "what served just before"
    assert publish_json(serving(volume) / "2")["source"] == "a publish meanwhile"


def serving_files(volume: Path) -> dict[Path, bytes]:
    """The serving versions' files (the canary folder inside aside)."""
    inside = canary(volume)
    return {
        p: p.read_bytes()
        for p in serving(volume).rglob("*")
        if p.is_file() and inside not in p.parents
    }


def test_reject_sets_the_canary_aside_and_leaves_serving_alone(volume, tmp_path, capsys):
    before = serving_files(volume)
    assert end(volume, record_file(tmp_path), "--reject") == 0
    kept = rejected(volume) / "2"
    assert capsys.readouterr().out == (
        f"rejected canary version 2: kept in {kept} (reason: every gate passed)\n"
    )
    record = publish_json(kept)
    assert record["rejected"] == RECORD and record["canary"] is True and "rejected_at" in record
    assert names(canary(volume)) == []
    assert serving_files(volume) == before
    assert not Path(contract.serving_record(volume, SERVICE)).exists()


@pytest.mark.parametrize("how", ["--promote", "--reject"])
def test_no_canary_is_exit_1_with_a_hint(tmp_path, how, capsys):
    v = tmp_path / "volume"
    make_version(serving(v), 1, {"version": 1})
    assert end(v, record_file(tmp_path), how) == 1
    err = capsys.readouterr().err
    assert f"no canary version in {canary(v)}: nothing to {how[2:]}" in err
    assert "ml select --canary" in err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot be read (No such file or directory)"),
        (b"{not json", "is not JSON"),
        (b"[1, 2]", "holds an array, not a JSON object"),
        (b"null", "holds null, not a JSON object"),
        (b"\xff\xfe\x00", "is not JSON"),
    ],
    ids=["missing", "not JSON", "an array", "null", "not text"],
)
@pytest.mark.parametrize("how", ["--promote", "--reject"])
def test_a_bad_record_file_is_exit_2_and_changes_nothing(
    volume, tmp_path, content, says, how, capsys
):
    path = tmp_path / "analysis.json"
    if content is not None:
        path.write_bytes(content)
    before = sorted(str(p.relative_to(volume)) for p in volume.rglob("*"))
    assert end(volume, path, how) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: the record file {path} {says}")
    assert err.endswith("; nothing changed\n") and err.count("\n") == 1
    assert sorted(str(p.relative_to(volume)) for p in volume.rglob("*")) == before


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
ENCODINGS = st.sampled_from(["utf-8", "utf-16", "utf-32"])
RECORD_BYTES = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda v, enc: json.dumps(v).encode(enc), JSON, ENCODINGS),
    st.builds(
        lambda v, enc: json.dumps(v).encode(enc), st.dictionaries(st.text(), JSON), ENCODINGS
    ),
    st.text(max_size=32).map(str.encode),
)


def _is_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except (ValueError, RecursionError):
        return False


@settings(max_examples=300, deadline=None)
@given(RECORD_BYTES)
def test_any_bytes_are_a_record_or_a_clean_exit_2(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "analysis.json"
        path.write_bytes(data)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = end(Path(tmp) / "volume", path)  # an object: on to "no canary" (1)
    assert code == (1 if _is_object(data) else 2), err.getvalue()
    assert err.getvalue().count("\n") == 1 and "Traceback" not in err.getvalue()
    if code == 2:
        assert err.getvalue().startswith(f"error: the record file {path} ")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), JSON))
def test_a_json_object_is_kept_as_is(record):
    assert cp._canonical(cp.parse_record(json.dumps(record).encode())) == cp._canonical(record)


def kill_on_rename(monkeypatch, *, when, after: bool) -> None:
    """SIGKILL just before (or after) the first ``os.rename`` whose target ``when`` accepts."""
    rename = os.rename

    def renamed(src, dst):
        if when(Path(dst)) and not after:
            raise Killed
        rename(src, dst)
        if when(Path(dst)):
            raise Killed

    monkeypatch.setattr(cp.os, "rename", renamed)


def kill_after_serving_record(monkeypatch) -> None:
    write = cp._write_serving_record

    def written(*args):
        write(*args)
        raise Killed

    monkeypatch.setattr(cp, "_write_serving_record", written)


PROMOTE_KILLS = {
    "renamed into serving": lambda mp, v: kill_on_rename(
        mp, when=lambda d: d.parent == serving(v), after=True
    ),
    "serving record written": lambda mp, v: kill_after_serving_record(mp),
    "canary moved out": lambda mp, v: kill_on_rename(
        mp, when=lambda d: d.parent.name.startswith(cp.ENDED_PREFIX), after=True
    ),
}


@pytest.mark.parametrize("kill", PROMOTE_KILLS.values(), ids=PROMOTE_KILLS.keys())
def test_a_promote_killed_between_steps_finishes_when_run_again(
    volume, tmp_path, kill, monkeypatch, capsys
):
    files = cp._files(canary(volume) / "2")
    with monkeypatch.context() as mp:
        kill(mp, volume)
        with pytest.raises(Killed):
            end(volume, record_file(tmp_path))
    # What a SIGKILL leaves that the exception did not: an abandoned copy in each place.
    (serving(volume) / f"{publishing.STAGING_PREFIX}9-killed").mkdir()
    if canary(volume).is_dir():
        (canary(volume) / f"{cp.ENDED_PREFIX}7-killed").mkdir()
    capsys.readouterr()
    assert end(volume, record_file(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "serving version 2" in out or out.startswith("already promoted with this record")
    assert names(serving(volume)) == ["1", "2"], "one copy, no leftovers"
    assert cp._files(serving(volume) / "2") == files
    assert publish_json(serving(volume) / "2")["canary"] == RECORD
    assert records.read_publish(contract.serving_record(volume, SERVICE))["version"] == 2
    assert names(canary(volume)) == []
    assert end(volume, record_file(tmp_path)) == 0, "and again: already done"
    assert "already promoted with this record" in capsys.readouterr().out


REJECT_KILLS = {
    "marked": lambda mp, v: kill_on_rename(mp, when=lambda d: d.parent == rejected(v), after=False),
    "moved": lambda mp, v: kill_on_rename(mp, when=lambda d: d.parent == rejected(v), after=True),
}


@pytest.mark.parametrize("kill", REJECT_KILLS.values(), ids=REJECT_KILLS.keys())
def test_a_reject_killed_between_steps_finishes_when_run_again(
    volume, tmp_path, kill, monkeypatch, capsys
):
    with monkeypatch.context() as mp:
        kill(mp, volume)
        with pytest.raises(Killed):
            end(volume, record_file(tmp_path), "--reject")
    assert end(volume, record_file(tmp_path), "--reject") == 0
    assert (
        names(rejected(volume)) == ["2"]
        and publish_json(rejected(volume) / "2")["rejected"] == RECORD
    )
    assert names(canary(volume)) == [] and names(serving(volume)) == ["1"]
    capsys.readouterr()
    assert end(volume, record_file(tmp_path), "--reject") == 0
    assert "already rejected with this record" in capsys.readouterr().out


def test_the_same_end_with_another_record_is_no_canary(volume, tmp_path):
    assert end(volume, record_file(tmp_path)) == 0
    assert end(volume, record_file(tmp_path, {"reason": "another analysis"})) == 1


def copy_fails_as_shutil_says(monkeypatch) -> None:
    def full(src, dst, **kwargs):  # as shutil.copytree reports a file it could not copy
        (Path(dst) / "variables").mkdir(parents=True)
        (Path(dst) / "saved_model.pb").write_bytes(b"half")
        raise publishing.shutil.Error([(str(src), str(dst), "[Errno 28] No space left on device")])

    monkeypatch.setattr(publishing.shutil, "copytree", full)


def copy_fails_over_quota(monkeypatch) -> None:
    def full(src, dst, ignore):
        Path(dst).mkdir(parents=True)
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(dst))

    monkeypatch.setattr(cp, "copy_tree", full)


@pytest.mark.parametrize("fail", [copy_fails_as_shutil_says, copy_fails_over_quota])
def test_a_full_disk_during_a_promote_changes_nothing(volume, tmp_path, fail, monkeypatch, capsys):
    fail(monkeypatch)
    assert end(volume, record_file(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: the volume is full" in err and "Traceback" not in err
    assert "nothing changed: the canary (version 2) is still in place" in err
    assert names(serving(volume)) == ["1"] and names(canary(volume)) == ["2", "weight.json"]


def test_a_full_disk_after_the_copy_says_what_is_left_and_a_rerun_finishes(
    volume, tmp_path, monkeypatch, capsys
):
    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "reports/serving-tf-mnist.json")

    with monkeypatch.context() as mp:
        mp.setattr(cp, "_write_serving_record", full)
        assert end(volume, record_file(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "canary version 2 is in serving as version 2 already, but is not cleaned up" in err
    assert end(volume, record_file(tmp_path)) == 0
    assert names(serving(volume)) == ["1", "2"] and names(canary(volume)) == []


def test_a_full_disk_during_a_reject_changes_nothing(volume, tmp_path, monkeypatch, capsys):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(publishing.json, "dump", full)
    assert end(volume, record_file(tmp_path), "--reject") == 1
    assert "nothing changed: the canary (version 2) is still in place" in capsys.readouterr().err
    assert (
        names(canary(volume)) == ["2", "weight.json"]
        and not rejected(volume).joinpath("2").exists()
    )
    assert publish_json(canary(volume) / "2") == {
        "version": 2,
        "previous": 1,
        "canary": True,
        "published_at": "T0",
    }
    assert [p.name for p in (canary(volume) / "2").iterdir() if p.name.startswith(".")] == []


def test_a_held_lock_is_exit_3(volume, tmp_path, capsys):
    lock = contract.lock_path(volume, SERVICE, contract.PUBLISH_LOCK)
    with volume_lock(lock, "ml.selection.select", wait_s=1, on_wait=print):
        code = cp.main(
            [
                *canary_commands.canary_end(
                    volume, SERVICE, promote=True, record=record_file(tmp_path)
                )[4:],
                "--lock-wait",
                "0.3",
            ]
        )
    assert code == publishing.LOCKED_EXIT
    assert "still holds" in capsys.readouterr().err
    assert names(canary(volume)) == ["2", "weight.json"]


def test_promote_and_reject_are_exclusive_and_one_is_needed(tmp_path, capsys):
    for argv in (["--promote", "--reject"], []):
        with pytest.raises(SystemExit) as e:
            cp.main(["--volume", str(tmp_path), "--record", "r", *argv])
        assert e.value.code == 2


def test_the_record_as_text_is_kept_as_the_file_would_be(volume, capsys):
    # A cluster's Job cannot share a file with the laptop: the record comes as an argument.
    argv = canary_commands.canary_end(
        volume, SERVICE, promote=False, record_json=json.dumps(RECORD)
    )
    assert "--record" not in argv and cp.main(argv[4:]) == 0
    assert publish_json(rejected(volume) / "2")["rejected"] == RECORD
    capsys.readouterr()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_record_text_is_a_record_or_a_clean_exit_2(text):
    with tempfile.TemporaryDirectory() as tmp:
        err = io.StringIO()
        argv = canary_commands.canary_end(Path(tmp) / "v", SERVICE, promote=True, record_json=text)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cp.main(argv[4:])
    assert code == (1 if _is_object(text.encode("utf-8", "surrogatepass")) else 2), err.getvalue()
    assert err.getvalue().count("\n") == 1 and "Traceback" not in err.getvalue()


def test_a_reject_after_a_promote_killed_once_its_copy_serves_is_refused(
    volume, tmp_path, monkeypatch, capsys
):
    # Setting the canary aside now would leave serving version 2 with its model gone from
    # the canary folder and a record saying it was rejected.
    with monkeypatch.context() as mp:
        PROMOTE_KILLS["renamed into serving"](mp, volume)
        with pytest.raises(Killed):
            end(volume, record_file(tmp_path))
    before = serving_files(volume)
    capsys.readouterr()
    assert end(volume, record_file(tmp_path), "--reject") == 1
    err = capsys.readouterr().err
    assert "promotion stopped half way has made it serving version 2" in err
    assert "`invoke canary --promote`" in err
    assert serving_files(volume) == before and "2" in names(canary(volume))
    assert not rejected(volume).exists() or names(rejected(volume)) == []
    assert end(volume, record_file(tmp_path)) == 0, "the promotion still finishes"
    assert names(canary(volume)) == [] and names(serving(volume)) == ["1", "2"]


def test_a_new_canary_starts_at_no_share_whatever_weight_file_was_left(volume, tmp_path):
    # A weight Job that wrote after the last canary ended would otherwise hand the next
    # one that share before it was judged at all.
    assert end(volume, record_file(tmp_path), "--reject") == 0
    weight = Path(contract.canary_weight_path(volume, SERVICE))
    weight.write_text('{"weight": 50}')  # the late write
    source = make_version(tmp_path / "candidate", 9, {"source": "y"}, payload=b"newer")
    version = cp.publish_canary(source, volume, SERVICE, {"source": "y"})
    assert names(canary(volume)) == [str(version)] and not weight.exists()
