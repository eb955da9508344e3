"""loadtest/__main__.py (``python -m loadtest``): bad arguments exit 2 before anything runs,
and failed requests are counted and fail the command (exit 1), against a flaky loopback
server."""

from __future__ import annotations

import json

import pytest

from loadtest import __main__ as cli
from loadtest import runner as lt
from loadtest import summary as ls
from tests.support.predict_server import MODEL, predict_server, write_payload


def test_bad_arguments(tmp_path):
    payload = write_payload(tmp_path / "body.json")
    (tmp_path / "junk.json").write_text('{"inputs": []}')
    for kwargs, error in [
        ({"payload_path": tmp_path / "missing.json"}, FileNotFoundError),
        ({"payload_path": tmp_path / "junk.json"}, ValueError),
        ({"concurrency": 0}, ValueError),
        ({"duration": "soon"}, ValueError),
        ({"url": "127.0.0.1:8080"}, ValueError),
        ({"spawn_rate": 0}, ValueError),
    ]:
        args = {"url": "http://127.0.0.1:9", "model_name": MODEL, "payload_path": payload}
        args.update(kwargs)
        with pytest.raises(error):
            lt.run_loadtest(out_dir=tmp_path / "out", log=lambda _: None, **args)
    base = ["--url", "http://127.0.0.1:9", "--model", MODEL, "--out", str(tmp_path / "o")]
    for argv in [
        [],
        [*base, "--payload", str(tmp_path / "missing.json")],
        [*base, "--payload", str(payload), "--duration", "abc"],
        [*base, "--payload", str(payload), "--concurrency", "0"],
        [*base, "--payload", str(payload), "--max-failure-ratio", "2"],
    ]:
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2, argv
    assert not (tmp_path / "o").exists()  # nothing ran


def test_failures_are_counted_and_fail_the_cli(tmp_path, capsys):
    """Via the CLI: 1 in 4 answers is a 500, 1 in 4 a 200 with 9 classes -> exit 1."""
    payload = write_payload(tmp_path / "body.json")
    with predict_server("flaky") as (url, _handler):
        argv = ["--url", url, "--model", MODEL, "--payload", str(payload)]
        code = cli.main([*argv, "--out", str(tmp_path / "out"), "--duration", "3s"])
    assert code == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["failures"] > 0
    assert 0.3 < summary["failure_ratio"] < 0.7
    errors = {e["error"] for e in summary["errors"]}
    assert "HTTP 500: model exploded" in errors
    assert "a prediction row is not 10 numbers" in errors
    problems = ls.check(summary)
    assert len(problems) == 1 and f"{summary['failures']} of {summary['requests']}" in problems[0]
    assert ls.check(summary, max_failure_ratio=0.9) == []
    err = capsys.readouterr().err
    assert "FAIL" in err and "requests failed" in err
