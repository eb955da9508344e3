"""common/generated_file.py: a generated file written, then checked: current passes, a stale
or missing copy fails saying the command that rewrites it."""

from __future__ import annotations

from common import generated_file


def test_write_then_check_then_stale(tmp_path, capsys):
    path = tmp_path / "made.txt"
    args = (path, "v1\n", "python -m maker", None)
    assert generated_file.main(*args, ["--check"]) == 1  # missing
    assert generated_file.main(*args, []) == 0 and path.read_text() == "v1\n"
    assert generated_file.main(*args, ["--check"]) == 0
    path.write_text("v0\n")
    assert generated_file.main(*args, ["--check"]) == 1
    assert "is stale: run `python -m maker`" in capsys.readouterr().err
