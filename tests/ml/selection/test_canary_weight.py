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
from ml.server.canary import LOOPBACK, parse_endpoint, parse_shadow, parse_weight

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


def test_the_canarys_own_server_and_the_shadow_are_written_as_the_server_reads_them(
    tmp_path, capsys
):
    (Path(contract.canary_dir(tmp_path, SERVICE)) / "3").mkdir(parents=True)
    url = "http://tf-mnist-canary:8080"
    argv = canary_commands.canary_weight(tmp_path, SERVICE, 0, url=url, shadow=20)
    assert cw.main(argv[4:]) == 0
    assert capsys.readouterr().out == f"canary version 3 at {url}: 0% of requests, 20% mirrored\n"
    data = Path(contract.canary_weight_path(tmp_path, SERVICE)).read_bytes()
    assert parse_weight(data) == 0 and parse_shadow(data) == 20
    assert parse_endpoint(data, LOOPBACK | {"tf-mnist-canary"}) == url


def test_a_shadow_without_the_canarys_server_or_a_bad_url_is_refused(tmp_path, capsys):
    (Path(contract.canary_dir(tmp_path, SERVICE)) / "3").mkdir(parents=True)
    base = ["--volume", str(tmp_path), "--service", SERVICE, "--weight", "0"]
    with pytest.raises(SystemExit, match="--shadow mirrors to the canary's own server"):
        cw.main([*base, "--shadow", "20"])
    with pytest.raises(SystemExit):
        cw.main([*base, "--url", "ftp://x:1"])
    assert "is not an http://host:port URL" in capsys.readouterr().err
    assert not Path(contract.canary_weight_path(tmp_path, SERVICE)).exists(), "nothing written"


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
