"""ml.selection.publishing: the version listing (TF Serving's rule, over any directory-entry names),
the atomic JSON write (replaces whole, leaves no temporary file, keeps the old file on a
failure) and the staging copy (skips the record, fails as its first file failed). The
commands that use them are tested in test_select.py and test_canary_publish.py."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ml.selection import publishing


def test_versions_are_the_integer_directories_ascending(tmp_path):
    for name in ("10", "2", "1", ".3", ".publish-4-x", "5a", "v6", "-7", "latest", "²", "١"):
        (tmp_path / name).mkdir()
    (tmp_path / "8").write_text("a file is not a version")
    assert publishing.serving_versions(tmp_path) == [1, 2, 10]


def test_no_directory_is_no_versions(tmp_path):
    assert publishing.serving_versions(tmp_path / "absent") == []
    (tmp_path / "file").write_text("")
    assert publishing.serving_versions(tmp_path / "file") == []
    assert publishing.serving_versions(tmp_path) == []


def test_a_symlink_to_a_directory_is_a_version_a_dangling_one_is_not(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "3").symlink_to(tmp_path / "real")
    (tmp_path / "4").symlink_to(tmp_path / "gone")
    assert publishing.serving_versions(tmp_path) == [3]


# Names a directory entry can have on Linux: no "/" or NUL, not "." or "..", <= 255 bytes.
# Digits of every kind are drawn often: ASCII, with a leading zero, hidden, and others
# that str.isdigit accepts ("²", "١").
NAME = st.one_of(
    st.from_regex(r"\.?[0-9]{1,4}", fullmatch=True),
    st.sampled_from(["0", "007", "-1", "+1", " 1", "1 ", "1.0", "1e3", "²", "١", "٣٤", "１"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"), min_size=1),
).filter(lambda n: n not in (".", "..") and len(os.fsencode(n)) <= 255)
ASCII_DIGITS = re.compile(r"[0-9]+\Z")
ENTRIES = st.dictionaries(NAME, st.sampled_from(["dir", "file"]), max_size=12)


@settings(max_examples=300, deadline=None)
@given(ENTRIES)
def test_any_entry_names_list_only_the_integer_directories(entries):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, kind in entries.items():
            if kind == "dir":
                (root / name).mkdir()
            else:
                (root / name).write_bytes(b"")
        versions = publishing.serving_versions(root)
    expected = [int(n) for n, kind in entries.items() if kind == "dir" and ASCII_DIGITS.match(n)]
    assert versions == sorted(expected)


def test_write_json_atomic_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "reports" / "selection.json"
    publishing.write_json_atomic(path, {"version": 1})
    publishing.write_json_atomic(path, {"version": 2, "nested": [1, None]})
    assert json.loads(path.read_text()) == {"version": 2, "nested": [1, None]}
    assert path.read_text().endswith("}\n")
    assert [p.name for p in path.parent.iterdir()] == ["selection.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "publish.json"
    publishing.write_json_atomic(path, {"version": 1})

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(publishing.json, "dump", full)
    with pytest.raises(OSError) as e:
        publishing.write_json_atomic(path, {"version": 2})
    assert e.value.errno == errno.ENOSPC
    assert json.loads(path.read_text()) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["publish.json"]


def test_copy_tree_copies_all_but_the_ignored_names(tmp_path):
    source = tmp_path / "model"
    (source / "variables").mkdir(parents=True)
    (source / "saved_model.pb").write_bytes(b"graph")
    (source / "variables" / "variables.index").write_bytes(b"index")
    (source / "publish.json").write_text("{}")
    (source / ".publish.json.tmp1").write_text("{")
    publishing.copy_tree(source, tmp_path / "copy", ignore=("publish.json", ".publish.json.*"))
    copied = sorted(str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*"))
    assert copied == ["saved_model.pb", "variables", "variables/variables.index"]
    assert (tmp_path / "copy" / "saved_model.pb").read_bytes() == b"graph"


@pytest.mark.parametrize(
    ("why", "code"),
    [("[Errno 28] No space left on device", errno.ENOSPC), ("[Errno 5] I/O error", errno.EIO)],
    ids=["disk full", "anything else"],
)
def test_copy_tree_fails_as_its_first_file_failed(tmp_path, monkeypatch, why, code):
    def broken(src, dst, **kwargs):  # as shutil.copytree reports the files it could not copy
        raise shutil.Error([(f"{src}/a", f"{dst}/a", why), (f"{src}/b", f"{dst}/b", "other")])

    monkeypatch.setattr(publishing.shutil, "copytree", broken)
    with pytest.raises(OSError) as e:
        publishing.copy_tree(tmp_path / "src", tmp_path / "dst", ignore=())
    assert e.value.errno == code and e.value.filename == f"{tmp_path / 'dst'}/a"
    assert str(e.value).startswith(f"[Errno {code}] {os.strerror(code)}: copying ")
    assert f"{tmp_path / 'src'}/a: {why}" in str(e.value) and "other" not in str(e.value)


def test_utc_now_is_the_records_time_format():
    assert len(now := publishing.utc_now()) == 20 and now[10] == "T" and now.endswith("Z")


def test_say_waiting_names_the_holder(capsys):
    publishing.say_waiting("ml.selection.select (pid 7)")
    assert capsys.readouterr().out == (
        "waiting for the publish lock: ml.selection.select (pid 7) is selecting or publishing\n"
    )
