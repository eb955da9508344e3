"""ml.server.serve's command line: every flag has help, the limits parse, the KServe flags
this server cannot honour are refused; and importing the server's modules loads neither
TensorFlow nor KServe. (The real server over HTTP: test_serve_http.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ml.server import instances, serve
from tests.support.serve_requests import MODEL

REPO = Path(__file__).resolve().parents[3]


def test_every_flag_has_help_and_limits_parse(capsys) -> None:
    parser = serve.build_parser()
    for action in parser._actions:
        assert action.help, action.dest
    with pytest.raises(SystemExit) as info:
        serve.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--model-dir", "--model-name", "--host", "--http-port", "--timeout-keep-alive",
        "--request-header-timeout",
    ):  # fmt: skip
        assert flag in out
    assert "--grpc-port" not in out
    args = serve.parse_args(["--model-dir", "d", "--max-image-pixels", "100x200"])
    assert (args.max_image_pixels, args.host) == (20_000, "127.0.0.1")
    assert args.request_header_timeout == 10.0
    assert args.max_request_pixels == instances.DEFAULT_MAX_REQUEST_PIXELS == 8192 * 8192
    args = serve.parse_args(["--model-dir", "d", "--max-request-pixels", "300x400"])
    assert args.max_request_pixels == 120_000
    assert (args.model_name, args.http_port, args.enable_grpc) == (MODEL, 8080, False)
    # KServe's spellings of the two flags it shares with ours set the same values.
    args = serve.parse_args(["--model-dir", "d", "--model_name", "m", "--http_port", "9000"])
    assert (args.model_name, args.http_port) == ("m", 9000)
    for bad in (
        ["--max-image-pixels", "0x5"],
        ["--max-request-pixels", "many"],
        ["--http-port", "70000"],
        ["--poll-interval", "0"],
        ["--request-header-timeout", "0"],
    ):
        with pytest.raises(SystemExit):
            parser.parse_args(["--model-dir", "d", *bad])


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        pytest.param(["--workers", "2"], "runs one process", id="workers"),
        pytest.param(["--enable_grpc", "true"], "V1 REST protocol only", id="gRPC"),
    ],
)
def test_kserve_flags_this_server_cannot_honour_are_refused(flags, text, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        serve.parse_args(["--model-dir", "d", *flags])
    assert info.value.code == 2 and text in capsys.readouterr().err


def test_importing_the_modules_loads_neither_tensorflow_nor_kserve() -> None:
    code = (
        "import sys, ml.server.serve, ml.server.v1, ml.server.v2, ml.server.watcher, "
        "ml.server.body_limit, ml.server.batcher, ml.server.fast_predict; "
        "print(sorted(m for m in ('tensorflow', 'kserve', 'tf_keras') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
