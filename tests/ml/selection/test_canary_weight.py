"""ml.selection.canary_weight: the canary's share written into the volume in one rename, read back
by the server's own parser; refused, with nothing written, when there is no canary."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml import contract
from ml.contract import canary_commands
from ml.selection import canary_weight as cw
from ml.server.canary import parse_weight

SERVICE = "tf-mnist"


def run(volume: Path, weight: str) -> int:
    return cw.main(["--volume", str(volume), "--service", SERVICE, "--weight", weight])


def test_the_weight_is_written_as_the_server_reads_it(tmp_path, capsys):
    (Path(contract.canary_dir(tmp_path, SERVICE)) / "3").mkdir(parents=True)
    argv = canary_commands.canary_weight(tmp_path, SERVICE, 25)
    assert argv[:4] == ["python", "-m", "ml", "canary_weight"]
    assert cw.main(argv[4:]) == 0
    assert capsys.readouterr().out == "canary version 3: 25% of requests\n"
    path = Path(contract.canary_weight_path(tmp_path, SERVICE))
    assert parse_weight(path.read_bytes()) == 25
    assert sorted(p.name for p in path.parent.iterdir()) == ["3", "weight.json"], "no temp file"


def test_no_canary_is_exit_1_and_writes_nothing(tmp_path, capsys):
    assert run(tmp_path, "10") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no canary version in ") and "ml select --canary" in err
    assert not Path(contract.canary_weight_path(tmp_path, SERVICE)).exists()


@given(st.text(max_size=6))
def test_a_weight_is_ascii_digits_from_0_to_100(text):
    ok = text.isascii() and text.isdigit() and int(text) <= 100
    if ok:
        assert cw.percent(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            cw.percent(text)


def test_the_file_is_one_json_object(tmp_path):
    (Path(contract.canary_dir(tmp_path, SERVICE)) / "2").mkdir(parents=True)
    cw.set_weight(tmp_path, SERVICE, 0)
    assert json.loads(Path(contract.canary_weight_path(tmp_path, SERVICE)).read_text()) == {
        "weight": 0
    }
