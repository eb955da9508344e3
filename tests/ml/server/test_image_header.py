"""ml.server.image_header: image sizes read from the headers alone, for real PNG and JPEG
encodings and the formats it names, and corrupt headers refused."""

from __future__ import annotations

import numpy as np
import pytest

from ml.server import image_header
from tests.support.serve_requests import gray_png, huge_png, pillow_image, png_header


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
