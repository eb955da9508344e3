"""Request bodies and image bytes for the model server's tests: PNG headers and images built
with zlib/struct (no TensorFlow), the table of bad requests with the status and the text
each answer must hold, and a KServe V2 request of encoded images.

The limits are those the HTTP tests' server is started with (tests/ml/server/test_serve_http.py);
the unit tests pass the same limits to the parsers."""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib
from typing import Any, NamedTuple

import numpy as np
import pytest

MODEL = "tf-mnist"
MAX_INSTANCES = 8  # the test server's --max-instances
MAX_BODY_BYTES = 1_000_000  # the test server's --max-body-bytes


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
    # JSON has no NaN, but Python's json module accepts it: ml.server.serve parses bodies that are
    # not sent as application/json itself (KServe hands them over as bytes).
    pytest.param(
        Raw(json.dumps({"instances": [np.full((28, 28), np.nan).tolist()]}).encode(), "text/plain"),
        400,
        "NaN or infinite",
        id="NaN pixels sent as text/plain",
    ),
]


def v2_bytes_request(images: list[bytes]) -> Any:
    """A KServe V2 InferRequest with one BYTES input of encoded images."""
    from kserve.protocol.infer_type import InferInput, InferRequest

    tensor = InferInput("image_bytes", [len(images)], "BYTES", data=images)
    return InferRequest(MODEL, [tensor], request_id="budget")
