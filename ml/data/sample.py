"""Write a sample request: a real test image as PNG and a ready-to-send V1 request body.

    python -m ml sample --out-dir DIR [--source-dir D] [--synthetic-ok]

Writes ``DIR/sample.png`` and ``DIR/sample-request.json`` from Fashion-MNIST test image 0
and prints one JSON line: ``{"request": ..., "png": ..., "what": ...}``. With
``--synthetic-ok`` (a cluster that downloaded the data itself, none on this machine), a drawn
28x28 image stands in when no data is found: the load test needs a valid request, not a
particular answer. Without it, no data is exit 2 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from ml.contract import SAMPLE_PNG, SAMPLE_REQUEST, step_prog
from ml.data.dataset import CLASS_NAMES, DataError, locate_raw_files, read_idx


def encode_png(pixels: np.ndarray) -> bytes:
    """An 8-bit grayscale PNG of a ``[height, width]`` uint8 array."""
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(pixels, np.uint8)).save(buffer, "PNG")  # 2-D uint8: mode L
    return buffer.getvalue()


def sample_image(source_dir: str | None, *, synthetic_ok: bool) -> tuple[np.ndarray, str]:
    """Test image 0 and what it is; a drawn stand-in when allowed and no data is found.

    Raises:
        DataError: no Fashion-MNIST files (and ``synthetic_ok`` is false).
    """
    try:
        raw = locate_raw_files(source_dir, log=lambda m: None)
    except DataError:
        if not synthetic_ok:
            raise
        pixels = np.zeros((28, 28), np.uint8)
        pixels[6:22, 4:24] = 255
        return pixels, "a drawn stand-in: no Fashion-MNIST files here"
    images = read_idx(raw / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(raw / "t10k-labels-idx1-ubyte.gz")
    return images[0], f"test image 0, class {CLASS_NAMES[int(labels[0])]}"


def write_sample(out_dir: Path, pixels: np.ndarray, what: str) -> dict[str, str]:
    """Write the PNG and the request body into ``out_dir``; the JSON line to print."""
    png = encode_png(pixels)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SAMPLE_PNG).write_bytes(png)
    body = {"instances": [{"b64": base64.b64encode(png).decode()}], "return_class_names": True}
    (out_dir / SAMPLE_REQUEST).write_text(json.dumps(body) + "\n")
    return {
        "request": str(out_dir / SAMPLE_REQUEST),
        "png": str(out_dir / SAMPLE_PNG),
        "what": what,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=step_prog("sample"), description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", required=True, help="where to write the PNG and the request")
    p.add_argument("--source-dir", help="directory holding the Fashion-MNIST files")
    p.add_argument(
        "--synthetic-ok",
        action="store_true",
        help="draw a stand-in image when no Fashion-MNIST files are found",
    )
    args = p.parse_args(argv)
    try:
        pixels, what = sample_image(args.source_dir, synthetic_ok=args.synthetic_ok)
    except DataError as e:
        print(f"cannot write the sample request: {e}", file=sys.stderr)
        return 2
    print(json.dumps(write_sample(Path(args.out_dir), pixels, what)))
    return 0
