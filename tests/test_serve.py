"""ml.serve: request validation and image headers (ml.server.v1, v2, instances, image_header),
the version watcher (ml.server.watcher), the command line and the KServe adapter (unit), and
the real server (integration).

The integration tests start ``python -m ml.serve`` as subprocesses on free 127.0.0.1 ports:
``server`` serves a small randomly initialised export, ``empty_server``
starts on an empty model directory. Both are terminated in fixture finalizers.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import math
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from ml import serve
from ml.data import CLASS_NAMES
from ml.select import publish
from ml.server import client_error as errors
from ml.server import image_header, instances, v1, v2, watcher

REPO = Path(__file__).resolve().parents[1]
MODEL = "tf-mnist"
MAX_INSTANCES = 8  # the test server's --max-instances
MAX_BODY_BYTES = 1_000_000  # the test server's --max-body-bytes
STARTUP_SECONDS = 90
HEADER_TIMEOUT = 1.0  # the empty server's --request-header-timeout


# --------------------------------------------------------------------------- image bytes


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header(width: int, height: int) -> bytes:
    """PNG signature + IHDR (8-bit gray) and nothing else: a header with no image data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)


def gray_png(width: int, height: int, value: int = 0) -> bytes:
    """A complete, valid 8-bit gray PNG, built with zlib/struct."""
    rows = b"".join(b"\x00" + bytes([value]) * width for _ in range(height))
    return (
        png_header(width, height)
        + png_chunk(b"IDAT", zlib.compress(rows))
        + png_chunk(b"IEND", b"")
    )


def b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode()}


def huge_png(width: int, height: int) -> bytes:
    """A PNG header claiming ``width`` x ``height`` and a few bytes of image data: a small
    file that a decoder would try to expand to the full size."""
    return png_header(width, height) + png_chunk(b"IDAT", zlib.compress(bytes(100)))


def pillow_image(fmt: str, width: int, height: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (width, height)).save(buffer, fmt)
    return buffer.getvalue()


HUGE_PNG = huge_png(100_000, 100_000)
GIF = pillow_image("GIF", 40, 30)
SMALL_PNG = gray_png(28, 28, 128)
ZEROS = np.zeros((28, 28)).tolist()


class Raw(NamedTuple):
    """A request body sent as is (not JSON-encoded)."""

    data: bytes
    content_type: str = "application/json"


# (body, status, text in the error) -- the server's limits are
# MAX_INSTANCES and MAX_BODY_BYTES; unit tests pass the same limits to parse_request.
BAD_REQUESTS = [
    pytest.param(Raw(b'{"instances": [1,'), 400, "Send a JSON object", id="malformed JSON"),
    pytest.param(Raw(b"[" * 100_000), 400, "nests JSON arrays", id="JSON nested 100000 deep"),
    pytest.param(
        Raw(b'{"instances": ' + b"[" * 100_000, "text/plain"),
        400,
        "nests JSON arrays",
        id="JSON nested 100000 deep as text/plain",
    ),
    pytest.param([ZEROS], 400, "must be a JSON object", id="body is a list"),
    pytest.param({}, 400, 'no "instances" or "inputs"', id="no instances or inputs"),
    pytest.param(
        {"instances": [ZEROS], "inputs": [ZEROS]}, 400, "not both", id="both forms at once"
    ),
    pytest.param(
        {"instances": [ZEROS], "return_class_name": True},
        400,
        "unknown field(s) 'return_class_name'",
        id="misspelt top-level field",
    ),
    pytest.param({"instances": b64(SMALL_PNG)}, 400, "must be a list", id="not a list"),
    pytest.param({"instances": []}, 400, "empty list", id="empty instances"),
    pytest.param({"inputs": {"pixels": []}}, 400, "empty list", id="empty columnar"),
    pytest.param(
        {"instances": [ZEROS] * (MAX_INSTANCES + 1)},
        413,
        f"limit of {MAX_INSTANCES}",
        id="too many instances",
    ),
    pytest.param(
        {"instances": [np.full((28, 28), 255).tolist()]},
        400,
        "divide them by 255",
        id="pixels in 0-255",
    ),
    pytest.param(
        {"instances": [np.full((28, 28), -0.5).tolist()]},
        400,
        "must be in [0, 1]",
        id="negative pixels",
    ),
    pytest.param({"instances": [np.zeros((28, 27)).tolist()]}, 400, "shape [28][27]", id="28x27"),
    pytest.param(
        {"instances": [np.zeros((28, 28, 3)).tolist()]},
        400,
        "shape [28][28][3]",
        id="three channels",
    ),
    pytest.param({"instances": [[[0.0] * 28] * 27 + [[0.0] * 5]]}, 400, "ragged", id="ragged rows"),
    pytest.param(
        {"instances": [[["a"] * 28] * 28]}, 400, "must be numbers", id="non-numeric pixels"
    ),
    pytest.param({"instances": [[[True] * 28] * 28]}, 400, "true/false", id="boolean pixels"),
    pytest.param({"instances": [None]}, 400, "instance 0 is null", id="null instance"),
    pytest.param({"inputs": ZEROS}, 400, "wrap the image in another list", id="no batch dimension"),
    pytest.param(
        {"inputs": b64(SMALL_PNG)}, 400, '"inputs" must be a list', id="columnar b64 object"
    ),
    pytest.param({"instances": [{"b64": "not base64!"}]}, 400, "not valid base64", id="bad base64"),
    pytest.param({"instances": [{"b64": 42}]}, 400, "must be a string", id="b64 not string"),
    pytest.param(
        {"instances": [base64.b64encode(SMALL_PNG).decode()]},
        400,
        "bare string",
        id="base64 without the b64 object",
    ),
    pytest.param({"instances": [{"image": b64(SMALL_PNG)}]}, 400, "keys 'image'", id="unknown key"),
    pytest.param(
        {"instances": [b64(b"hello, world")]}, 400, "not a PNG or JPEG", id="not an image"
    ),
    pytest.param({"instances": [b64(b"")]}, 400, "empty (0 bytes)", id="empty image"),
    pytest.param({"instances": [b64(GIF)]}, 400, "GIF images are not supported", id="GIF"),
    pytest.param(
        {"instances": [b64(HUGE_PNG)]},
        413,
        "100000x100000",
        id="PNG header claims 100000x100000",
    ),
    pytest.param(
        {"instances": [b64(SMALL_PNG), ZEROS]},
        400,
        "mixes image bytes (e.g. instance 0) and pixel arrays (e.g. instance 1)",
        id="bytes and pixels mixed",
    ),
    pytest.param(
        {"instances": [ZEROS], "signature_name": "predict"},
        400,
        "valid: serving_default, serving_pixels",
        id="unknown signature",
    ),
    pytest.param(
        {"instances": [ZEROS], "signature_name": "serving_default"},
        400,
        "takes base64 image bytes, but the instances are pixel arrays",
        id="signature does not match the instances",
    ),
    pytest.param(
        {"instances": [ZEROS], "signature_name": ["serving_pixels"]},
        400,
        'unknown signature_name ["serving_pixels"]',
        id="signature_name is a list",
    ),
    pytest.param(
        {"instances": [np.full((28, 28), 1e300).tolist()]},
        400,
        "from 1e+300 to 1e+300",
        id="pixels too large for float32",
    ),
    pytest.param(
        {"instances": [ZEROS], "return_class_names": "yes"},
        400,
        "true or false",
        id="return_class_names not a boolean",
    ),
    # JSON has no NaN, but Python's json module accepts it: ml.serve parses bodies that are
    # not sent as application/json itself (KServe hands them over as bytes).
    pytest.param(
        Raw(json.dumps({"instances": [np.full((28, 28), np.nan).tolist()]}).encode(), "text/plain"),
        400,
        "NaN or infinite",
        id="NaN pixels sent as text/plain",
    ),
]


# --------------------------------------------------------------------------- unit


@pytest.mark.parametrize(("body", "status", "text"), BAD_REQUESTS)
def test_bad_requests_are_rejected_with_a_fix(body, status, text) -> None:
    payload = body.data if isinstance(body, Raw) else body
    with pytest.raises(errors.ClientError) as info:
        v1.parse_request(payload, max_instances=MAX_INSTANCES)
    assert info.value.status == status
    assert text in info.value.message


@pytest.mark.parametrize(
    ("body", "signature", "form"),
    [
        pytest.param({"instances": [b64(SMALL_PNG)]}, "serving_default", "row", id="b64"),
        pytest.param(
            {"instances": [{"image_bytes": b64(SMALL_PNG)}]},
            "serving_default",
            "row",
            id="b64 under the input name",
        ),
        pytest.param({"instances": [ZEROS]}, "serving_pixels", "row", id="[28][28]"),
        pytest.param(
            {"instances": [np.zeros((28, 28, 1)).tolist()]},
            "serving_pixels",
            "row",
            id="[28][28][1]",
        ),
        pytest.param({"instances": [{"pixels": ZEROS}]}, "serving_pixels", "row", id="named"),
        pytest.param({"inputs": [ZEROS, ZEROS]}, "serving_pixels", "columnar", id="columnar"),
        pytest.param(
            {"inputs": {"image_bytes": [b64(SMALL_PNG)]}},
            "serving_default",
            "columnar",
            id="columnar named bytes",
        ),
        pytest.param(
            Raw(json.dumps({"instances": [ZEROS]}).encode()),
            "serving_pixels",
            "row",
            id="raw JSON bytes",
        ),
    ],
)
def test_good_requests_parse(body, signature, form) -> None:
    parsed = v1.parse_request(body.data if isinstance(body, Raw) else body)
    assert (parsed.signature_name, parsed.form) == (signature, form)
    if signature == "serving_pixels":
        assert parsed.inputs.dtype == np.float32 and parsed.inputs.shape[1:] == (28, 28, 1)
    else:
        assert parsed.inputs == [SMALL_PNG]


def test_b64_accepts_line_wrapping_and_the_url_safe_alphabet() -> None:
    data = SMALL_PNG + b"\xfb\xff"  # trailing bytes that encode to '+' and '/' (or '-', '_')
    text = base64.b64encode(data).decode()
    wrapped = "\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    assert "\n" in wrapped and ("+" in text or "/" in text)  # both alphabets differ here
    for form in (wrapped, base64.urlsafe_b64encode(data).decode()):
        assert v1.parse_request({"instances": [{"b64": form}]}).inputs == [data]


def test_format_response_adds_version_and_class_names() -> None:
    probs = np.eye(10, dtype=np.float32)[[9, 0]]
    row = v1.format_response(probs, 3, return_class_names=True)
    assert row == {
        "predictions": probs.tolist(),
        "model_version": 3,
        "class_names": [CLASS_NAMES[9], CLASS_NAMES[0]],
    }
    assert set(v1.format_response(probs, 3, form="columnar")) == {"outputs", "model_version"}


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf

    return tf


def test_header_parser_reads_real_png_and_jpeg(tf) -> None:
    gray = np.random.default_rng(0).integers(0, 256, (20, 30, 1), dtype=np.uint8)
    rgb = np.repeat(gray, 3, axis=-1)
    cases = {
        "png gray": (tf.io.encode_png(gray), "png"),
        "png rgb": (tf.io.encode_png(rgb), "png"),
        "jpeg baseline": (tf.io.encode_jpeg(gray), "jpeg"),
        "jpeg progressive": (tf.io.encode_jpeg(rgb, progressive=True), "jpeg"),
        "jpeg with XMP segment": (tf.io.encode_jpeg(rgb, xmp_metadata="<x>" * 100), "jpeg"),
        "zlib png": (tf.constant(gray_png(30, 20)), "png"),
    }
    for name, (data, fmt) in cases.items():
        assert image_header.image_size(data.numpy()) == (fmt, 30, 20), name


def test_header_parser_names_gif_bmp_and_webp() -> None:
    for fmt in ("gif", "bmp", "webp"):
        assert image_header.image_size(pillow_image(fmt, 40, 30)) == (fmt, 40, 30)


def test_huge_png_is_rejected_before_decoding() -> None:
    # Far too little data for its size: a decoder would fail; the header check answers 413.
    assert image_header.image_size(HUGE_PNG) == ("png", 100_000, 100_000)
    with pytest.raises(errors.ClientError) as info:
        instances.check_image(HUGE_PNG, 0, instances.DEFAULT_MAX_IMAGE_PIXELS)
    assert info.value.status == 413
    assert "100000x100000" in info.value.message and "--max-image-pixels" in info.value.message
    assert instances.check_image(huge_png(4096, 4096), 0, 4096 * 4096)  # the limit itself is fine


def v2_bytes_request(images: list[bytes]) -> Any:
    """A KServe V2 InferRequest with one BYTES input of encoded images."""
    from kserve.protocol.infer_type import InferInput, InferRequest

    tensor = InferInput("image_bytes", [len(images)], "BYTES", data=images)
    return InferRequest(MODEL, [tensor], request_id="budget")


@pytest.mark.parametrize(
    ("element", "kind"),
    [(10**15, "a number"), (-1, "a number"), (True, "a boolean"), (None, "null")],
)
def test_v2_bytes_elements_must_be_base64_strings(element: Any, kind: str) -> None:
    # bytes(10**15) would allocate a petabyte: such an element is refused, not converted.
    with pytest.raises(errors.ClientError) as info:
        v2.parse_v2_request(v2_bytes_request([element]))
    assert info.value.status == 400
    assert info.value.message.startswith(f"instance 0 of 'image_bytes' is {kind}; send each")


@pytest.mark.parametrize("path", ["v1", "v2"])
def test_request_pixel_budget_is_summed_from_headers_before_decoding(path: str) -> None:
    # Four 100x100 headers with no image data behind them: only their headers are read.
    images = [huge_png(100, 100)] * 4

    def parse(limit: int) -> instances.ParsedRequest:
        if path == "v1":
            body = {"instances": [b64(image) for image in images]}
            return v1.parse_request(body, max_request_pixels=limit)
        return v2.parse_v2_request(v2_bytes_request(images), max_request_pixels=limit)

    assert parse(40_000).inputs == images  # exactly at the limit: accepted
    with pytest.raises(errors.ClientError) as info:
        parse(39_999)
    assert info.value.status == 413
    assert info.value.message.startswith(
        "the request's 4 images total 40,000 pixels, more than this server's limit of "
        "39,999 pixels per request (--max-request-pixels)"
    )


def test_default_request_pixel_budget_refuses_a_full_batch_of_the_largest_images() -> None:
    largest = huge_png(4096, 4096)  # each at --max-image-pixels, so each alone is accepted
    assert v1.parse_request({"instances": [b64(largest)]}).inputs == [largest]
    body = {"instances": [b64(largest)] * instances.DEFAULT_MAX_INSTANCES}
    with pytest.raises(errors.ClientError) as info:
        v1.parse_request(body)
    assert info.value.status == 413 and "--max-request-pixels" in info.value.message


@pytest.mark.parametrize(
    ("data", "text"),
    [
        pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00", "PNG header is truncated", id="truncated PNG"),
        pytest.param(png_header(28, 28), "PNG header is truncated", id="PNG without image data"),
        pytest.param(huge_png(28, 0), "PNG header is truncated or corrupt", id="PNG 28x0"),
        pytest.param(b"\xff\xd8\xff\xe0\x00\x10JFIF", "JPEG header is truncated", id="JPEG cut"),
        pytest.param(b"\xff\xd8\xff\xda\x00\x08", "JPEG header is truncated", id="JPEG scan first"),
        pytest.param(b"\xff\xd8\x00\x00", "not a PNG or JPEG", id="JPEG garbage"),
        pytest.param(b"GIF89a\x01", "not a PNG or JPEG", id="truncated GIF"),
        pytest.param(b"RIFF\x00\x00\x00\x00WEBP", "not a PNG or JPEG", id="WebP"),
    ],
)
def test_header_parser_rejects_corrupt_headers(data: bytes, text: str) -> None:
    with pytest.raises(image_header.ImageHeaderError, match=text):
        image_header.image_size(data)


def _version_dirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir(parents=True)


def test_watcher_serves_newest_integer_version_and_skips_failures(tmp_path: Path) -> None:
    root = tmp_path / "serving" / MODEL
    attempts: list[int] = []

    def loader(version: int, path: Path) -> watcher.LoadedVersion:
        attempts.append(version)
        if (path / "broken").exists():
            raise ValueError("corrupt SavedModel")
        return watcher.LoadedVersion(version, path, {}, None)

    versions = watcher.VersionWatcher(root, loader=loader)
    assert not versions.poll() and versions.current is None  # no directory at all yet
    _version_dirs(root, "1", "2", ".publish-9-tmp", "10x", "notes")
    (root / "7").write_text("a file, not a version")
    assert versions.poll() and versions.current.version == 2
    assert not versions.poll() and attempts == [2]  # nothing new: nothing loaded

    _version_dirs(root, "3")
    (root / "3" / "broken").write_text("")
    assert not versions.poll() and versions.current.version == 2  # 3 failed: keep serving 2
    assert not versions.poll() and attempts == [2, 3]  # a failed version is not retried...
    (root / "3" / "broken").unlink()
    os.utime(root / "3", ns=(1, 1))  # ...until its directory changes
    assert versions.poll() and versions.current.version == 3

    shutil.rmtree(root / "3")  # the served version disappears: fall back to the newest left
    assert versions.poll() and versions.current.version == 2


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


def test_rest_server_configures_uvicorn_as_given() -> None:
    """Guards ml.server.kserve_adapter.configure_uvicorn, the one private KServe detail used: if a
    KServe upgrade stops building its uvicorn server from ``RESTServer.config``, this fails."""
    adapter = serve.load_kserve()
    args = serve.parse_args(["--model-dir", "d", "--http-port", "18080"])
    server = adapter.model_server(args)
    rest = adapter.BoundRESTServer(
        "kserve.model_server:app",
        server.dataplane,
        server.model_repository_extension,
        server.http_port,
        host="127.0.0.2",
        max_body_bytes=10,
        model=adapter.FashionMnistModel("m", watcher.VersionWatcher("d")),
        request_header_timeout=1.5,
    )
    uvicorn_server = rest._server  # what RESTServer.start() serves
    assert uvicorn_server.config is rest.config
    assert (uvicorn_server.config.host, uvicorn_server.config.port) == ("127.0.0.2", 18080)
    uvicorn_server.config.load()  # resolves the HTTP protocol class, as serving does
    assert uvicorn_server.config.http_protocol_class.header_timeout == 1.5


def test_importing_the_modules_loads_neither_tensorflow_nor_kserve() -> None:
    code = (
        "import sys, ml.serve, ml.server.v1, ml.server.v2, ml.server.watcher, "
        "ml.server.body_limit, ml.server.batcher, ml.server.fast_predict; "
        "print(sorted(m for m in ('tensorflow', 'kserve', 'tf_keras') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- integration


_handed_out: set[int] = set()


def free_port() -> int:
    """A free 127.0.0.1 port, never the same twice, never 8081 (KServe's default gRPC port,
    which the tests check stays unused)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 8081 and port not in _handed_out:
            _handed_out.add(port)
            return port


def wait_for(condition: Callable[[], Any], timeout: float, what: str, log: Callable = str) -> Any:
    """Poll ``condition`` until it returns a truthy value or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{log()}")
        time.sleep(0.05)


class Server:
    """``python -m ml.serve`` as a subprocess, its output in a log file."""

    def __init__(self, model_dir: Path, log_path: Path, *extra: str) -> None:
        self.model_dir = model_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        command = [
            sys.executable, "-m", "ml.serve", "--model-dir", str(model_dir),
            "--model-name", MODEL, "--host", "127.0.0.1", "--http-port", str(self.port),
            "--poll-interval", "0.2", "--max-instances", str(MAX_INSTANCES),
            "--max-body-bytes", str(MAX_BODY_BYTES), *extra,
        ]  # fmt: skip
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self) -> str:
        return "--- server log (tail) ---\n" + "\n".join(self.log().splitlines()[-40:])

    def get(self, path: str) -> tuple[int, Any]:
        return http_json("GET", self.url + path)

    def predict(self, body: Any, model: str = MODEL, **headers: str) -> tuple[int, Any]:
        data = body.data if isinstance(body, Raw) else json.dumps(body).encode()
        content_type = body.content_type if isinstance(body, Raw) else "application/json"
        headers = {"Content-Type": content_type, **headers}
        return http_json("POST", f"{self.url}/v1/models/{model}:predict", data, headers)

    def _answers(self, path: str, statuses: tuple[int, ...]) -> bool:
        assert self.proc.poll() is None, f"server exited with {self.proc.returncode}"
        try:
            return self.get(path)[0] in statuses
        except OSError:  # not listening yet
            return False

    def wait_live(self) -> None:
        wait_for(lambda: self._answers("/", (200,)), STARTUP_SECONDS, "liveness", self.log_tail)

    def wait_ready(self) -> None:
        wait_for(
            lambda: self._answers(f"/v1/models/{MODEL}", (200,)),
            STARTUP_SECONDS,
            "readiness",
            self.log_tail,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def listening(self) -> set[tuple[str, int]]:
        """(ip, port) of every listening TCP and bound UDP socket of the server's processes."""
        import psutil

        proc = psutil.Process(self.proc.pid)
        found = set()
        for p in (proc, *proc.children(recursive=True)):
            conns = getattr(p, "net_connections", None) or p.connections  # psutil 6 / 5
            for c in conns(kind="inet"):
                if c.status in (psutil.CONN_LISTEN, psutil.CONN_NONE) and c.laddr:
                    found.add((c.laddr.ip, c.laddr.port))
        return found


def http_json(
    method: str, url: str, data: bytes | None = None, headers: dict | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def real_images(shared_data_dir: Path) -> np.ndarray:
    from ml.data import read_idx

    return read_idx(shared_data_dir / "t10k-images-idx3-ubyte.gz")[:4]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A randomly initialised cnn, exported once (its outputs vary across images)."""
    from ml.export import export_model
    from ml.models import build_model

    path = tmp_path_factory.mktemp("export") / "model"
    export_model(build_model("cnn", seed=7), path)
    return path


@pytest.fixture(scope="module")
def servers(tmp_path_factory, exported: Path) -> Iterator[dict[str, Server]]:
    """Both servers, started together so their (TensorFlow) start-ups overlap."""
    root = tmp_path_factory.mktemp("volume")
    serving = root / "serving" / MODEL
    publish(exported, serving, {"source": "test"})  # version 1
    started: dict[str, Server] = {}
    try:
        started["main"] = Server(serving, root / "main.log")
        started["empty"] = Server(
            root / "serving" / "empty",
            root / "empty.log",
            "--request-header-timeout",
            str(HEADER_TIMEOUT),
        )
        # The default limits (the others' --max-instances is small, for the bad-input table).
        defaults = root / "serving" / "defaults"
        publish(exported, defaults, {"source": "test"})
        started["defaults"] = Server(
            defaults, root / "defaults.log", "--max-instances", str(instances.DEFAULT_MAX_INSTANCES)
        )
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def server(servers: dict[str, Server]) -> Server:
    servers["main"].wait_ready()
    return servers["main"]


@pytest.fixture(scope="module")
def empty_server(servers: dict[str, Server]) -> Server:
    servers["empty"].wait_live()
    return servers["empty"]


@pytest.fixture(scope="module")
def default_limits_server(servers: dict[str, Server]) -> Server:
    servers["defaults"].wait_ready()
    return servers["defaults"]


def check_probabilities(predictions: Any, n: int) -> np.ndarray:
    probs = np.asarray(predictions, dtype=np.float64)
    assert probs.shape == (n, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert (probs >= 0).all()
    return probs


def test_predicts_b64_pngs_pixel_arrays_and_columnar_alike(server, real_images, tf) -> None:
    pngs = [b64(tf.io.encode_png(img[..., None]).numpy()) for img in real_images]
    pixels = (real_images / 255.0).tolist()
    n = len(real_images)

    status, by_bytes = server.predict({"instances": pngs, "return_class_names": True})
    assert status == 200, by_bytes
    probs = check_probabilities(by_bytes["predictions"], n)
    assert probs.std(axis=0).max() > 1e-3, "outputs must vary across images"
    assert by_bytes["class_names"] == [CLASS_NAMES[k] for k in probs.argmax(axis=1)]
    assert by_bytes["model_version"] == 1

    answers = {
        "[28][28]": server.predict({"instances": pixels}),
        "[28][28][1]": server.predict({"instances": (real_images[..., None] / 255.0).tolist()}),
        "named b64": server.predict({"instances": [{"image_bytes": p} for p in pngs]}),
        "columnar pixels": server.predict({"inputs": {"pixels": pixels}}),
        "columnar b64": server.predict(
            {"inputs": pngs, "signature_name": "serving_default"}, **{"Content-Type": "text/plain"}
        ),
    }
    for name, (status, body) in answers.items():
        assert status == 200, (name, body)
        key = "outputs" if name.startswith("columnar") else "predictions"
        np.testing.assert_allclose(check_probabilities(body[key], n), probs, atol=1e-5)


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        *BAD_REQUESTS,
        pytest.param(
            {"instances": [b64(SMALL_PNG), b64(SMALL_PNG[:60])]},
            400,
            "instance 1 could not be decoded",
            id="truncated PNG (decoded by TensorFlow)",
        ),
        pytest.param(
            {"instances": [b64(b"\xff\xd8\xff\xc0\x00\x0b\x08\x00\x1c\x00\x1c\x01\x01\x11\x00")]},
            400,
            "instance 0 could not be decoded",
            id="JPEG with a header and no data",
        ),
        pytest.param(
            Raw(b"{not json", "text/plain"),
            400,
            "is not valid JSON",
            id="malformed JSON sent as text/plain",
        ),
    ],
)
def test_bad_requests_over_http_get_4xx_and_the_server_keeps_serving(
    server, body, status, text
) -> None:
    got, answer = server.predict(body)
    assert got == status and text in answer["error"], answer
    ok, good = server.predict({"instances": [ZEROS]})
    assert ok == 200 and len(good["predictions"]) == 1


def test_unknown_model_is_404_naming_the_served_model(server) -> None:
    status, answer = server.predict({"instances": [ZEROS]}, model="mnist")
    assert status == 404
    assert "mnist" in answer["error"] and f"serves: {MODEL}" in answer["error"]


def test_oversized_body_is_413_before_or_while_reading(server) -> None:
    path = f"/v1/models/{MODEL}:predict"
    # Declared too large: answered from the headers, no body is sent at all.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", path)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and "--max-body-bytes" in json.loads(response.read())["error"]
    conn.close()

    # Chunked (no Content-Length): counted while reading.
    body = b'{"instances": [' + b" " * (MAX_BODY_BYTES - 16) + b"]}"
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", path)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    try:
        for i in range(0, len(body), 65536):
            chunk = body[i : i + 65536]
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer and close before the last chunk
    response = conn.getresponse()
    assert response.status == 413 and "chunked" in json.loads(response.read())["error"]
    conn.close()
    assert server.predict({"instances": [ZEROS]})[0] == 200


def test_a_full_batch_of_the_largest_images_is_413_from_the_headers(
    default_limits_server: Server,
) -> None:
    """256 PNGs of 4096x4096 (each within --max-image-pixels; 4 Gi pixels to decode) that
    are headers and 100 bytes of data each: refused from the headers, nothing decoded."""
    server = default_limits_server
    n = instances.DEFAULT_MAX_INSTANCES
    status, answer = server.predict({"instances": [b64(huge_png(4096, 4096))] * n})
    assert status == 413, answer
    total = n * 4096 * 4096
    limit = instances.DEFAULT_MAX_REQUEST_PIXELS
    expected = (
        f"the request's {n} images total {total:,} pixels, more than this server's limit of "
        f"{limit:,} pixels per request (--max-request-pixels)"
    )
    assert answer["error"].startswith(expected), answer
    # Refused in preprocess (ml.server.instances, headers only): a decode of these truncated images
    # would have answered 400 "could not be decoded" and logged no such refusal.
    wait_for(lambda: f"rejected a request (413): {expected}" in server.log(), 10, "the log line")
    assert "could not be decoded" not in server.log()
    status, answer = server.predict({"instances": [b64(SMALL_PNG)] * n})
    assert status == 200 and len(answer["predictions"]) == n


def test_v2_infer_over_rest(server, real_images) -> None:
    """KServe's V2 REST endpoint reaches the same model (ml.server.v2.parse_v2_request)."""
    pixels = (real_images[..., None] / 255.0).astype(np.float32)
    _, rest = server.predict({"instances": pixels.tolist()})

    def infer(array: np.ndarray) -> tuple[int, Any]:
        tensor = {"name": "pixels", "datatype": "FP32", "shape": list(array.shape)}
        body = {"id": "req-1", "inputs": [{**tensor, "data": array.reshape(-1).tolist()}]}
        url = f"{server.url}/v2/models/{MODEL}/infer"
        headers = {"Content-Type": "application/json"}
        return http_json("POST", url, json.dumps(body).encode(), headers)

    status, answer = infer(pixels)
    assert status == 200, answer
    (output,) = answer["outputs"]
    assert output["shape"] == [len(pixels), 10]
    assert (answer["model_version"], answer["id"]) == ("1", "req-1")
    got = np.asarray(output["data"]).reshape(-1, 10)
    np.testing.assert_allclose(got, rest["predictions"], atol=1e-5)
    status, answer = infer(pixels * 255)
    assert status == 400 and "divide them by 255" in answer["error"], answer


def test_main_server_listens_only_on_host_http_port(server) -> None:
    # HTTP on 127.0.0.1 only: nothing on 0.0.0.0, [::] or KServe's default gRPC port 8081.
    assert server.listening() == {("127.0.0.1", server.port)}


def test_server_without_versions_waits_not_ready_then_loads_the_first(
    empty_server, exported
) -> None:
    status, answer = empty_server.get(f"/v1/models/{MODEL}")
    assert status == 503 and "No version loaded yet" in answer["error"], answer
    assert empty_server.predict({"instances": [ZEROS]})[0] == 503
    wait_for(lambda: "waiting for a model" in empty_server.log(), 10, "the waiting log line")
    # HTTP on 127.0.0.1 only (nothing on 0.0.0.0, [::] or 8081).
    assert empty_server.listening() == {("127.0.0.1", empty_server.port)}

    publish(exported, empty_server.model_dir, {"source": "test"})
    empty_server.wait_ready()
    status, answer = empty_server.predict({"instances": [ZEROS]})
    assert status == 200 and answer["model_version"] == 1
    assert f"serving version 1 from {empty_server.model_dir / '1'}" in empty_server.log()


def trickle(port: int, start: bytes, rest: bytes, within: float) -> tuple[bytes, float]:
    """Send ``start``, then one byte of ``rest`` every 0.1 s until the server closes the
    connection or ``within`` seconds pass. Returns (what the server sent, seconds until it
    closed the connection, or inf)."""
    began = time.monotonic()
    received = b""
    pending = iter(rest)
    with socket.create_connection(("127.0.0.1", port), timeout=within) as sock:
        sock.sendall(start)
        while time.monotonic() - began < within:
            if select.select([sock], [], [], 0.1)[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    return received, time.monotonic() - began
                received += chunk
            elif (byte := next(pending, None)) is not None:
                sock.send(bytes([byte]))
    return received, math.inf


@pytest.mark.parametrize(
    ("start", "rest", "answer"),
    [
        pytest.param(
            b"GET /v1/models/tf-mnist HTT",
            b"P/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000,
            b"HTTP/1.1 408 Request Timeout\r\n",
            id="request line and headers sent a byte at a time",
        ),
        pytest.param(b"", b"", b"", id="nothing sent"),
    ],
)
def test_a_request_whose_headers_do_not_arrive_in_time_is_closed(
    empty_server, start, rest, answer
) -> None:
    received, closed_after = trickle(empty_server.port, start, rest, HEADER_TIMEOUT + 10)
    assert HEADER_TIMEOUT - 0.1 < closed_after < HEADER_TIMEOUT + 5, (closed_after, received)
    assert received.startswith(answer), received
    if answer:
        assert b"--request-header-timeout" in received
    assert empty_server.get(f"/v1/models/{MODEL}")[0] in (200, 503)  # still answering


def test_new_version_is_swapped_in_without_failing_a_request(server, exported, tmp_path) -> None:
    """Publishes a corrupt version 2 (skipped) then a good version 3 (served) under load."""
    seen: list[int] = []
    failures: list[str] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                status, answer = server.predict({"instances": [ZEROS, ZEROS]})
                if status != 200:
                    failures.append(f"{status}: {answer}")
                else:
                    check_probabilities(answer["predictions"], 2)
                    seen.append(answer["model_version"])
            except Exception as e:  # any failure counts, whatever its kind
                failures.append(repr(e))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
        assert publish(broken, server.model_dir, {"source": "test"}) == 2
        wait_for(
            lambda: "version 2 in" in server.log() and "failed to load" in server.log(),
            30,
            "the corrupt version to be skipped",
            server.log_tail,
        )
        assert publish(exported, server.model_dir, {"source": "test"}) == 3
        wait_for(lambda: seen and seen[-1] == 3, 60, "model_version 3", server.log_tail)
        count = len(seen)
        wait_for(lambda: len(seen) > count + 10, 30, "more answers after the switch")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert failures == []
    assert set(seen) == {1, 3}, sorted(set(seen))
    assert seen.index(3) > 0 and "still serving version 1" in server.log()
    assert "serving version 3 from" in server.log()
