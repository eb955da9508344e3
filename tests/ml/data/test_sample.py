"""ml.data.sample, the sample-request step: its PNG encoder, test image 0 written as a request body
and a PNG, and exit 2 without data unless a drawn stand-in is allowed."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from ml import contract
from ml.data import sample
from ml.data.dataset import CLASS_NAMES, read_idx


def test_png_encoder_round_trips() -> None:
    pixels = (np.arange(28 * 28) % 256).astype(np.uint8).reshape(28, 28)
    with Image.open(io.BytesIO(sample.encode_png(pixels))) as image:
        assert (image.format, image.mode) == ("PNG", "L")
        assert (np.asarray(image) == pixels).all()


def read_request(out_dir: Path) -> bytes:
    """The PNG inside the written request body, checked to equal the written PNG."""
    body = json.loads((out_dir / contract.SAMPLE_REQUEST).read_text())
    assert body["return_class_names"] is True
    png = base64.b64decode(body["instances"][0]["b64"])
    assert png == (out_dir / contract.SAMPLE_PNG).read_bytes()
    return png


def test_step_writes_test_image_0(tmp_path, shared_data_dir, capsys) -> None:
    argv = contract.sample(tmp_path / "out", str(shared_data_dir))[4:]  # after python -m ml sample
    assert sample.main(argv) == 0
    line = json.loads(capsys.readouterr().out)
    label = int(read_idx(shared_data_dir / "t10k-labels-idx1-ubyte.gz")[0])
    assert line == {
        "request": str(tmp_path / "out" / contract.SAMPLE_REQUEST),
        "png": str(tmp_path / "out" / contract.SAMPLE_PNG),
        "what": f"test image 0, class {CLASS_NAMES[label]}",
    }
    image = np.asarray(Image.open(io.BytesIO(read_request(tmp_path / "out"))))
    assert (image == read_idx(shared_data_dir / "t10k-images-idx3-ubyte.gz")[0]).all()


def test_step_without_data_exits_2_unless_synthetic_ok(
    tmp_path, isolated_data_places, capsys
) -> None:
    out = tmp_path / "out"
    assert sample.main(["--out-dir", str(out), "--source-dir", str(tmp_path / "none")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "cannot write the sample request: " in captured.err
    assert not out.exists()

    assert sample.main(["--out-dir", str(out), "--synthetic-ok"]) == 0
    assert "a drawn stand-in" in json.loads(capsys.readouterr().out)["what"]
    assert np.asarray(Image.open(io.BytesIO(read_request(out)))).shape == (28, 28)
