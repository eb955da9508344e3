"""ml.sample (the sample-request step) and runtime.sample_request (the tasks' side of it)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from common.errors import DistmlError
from ml import contract, sample
from ml.data import CLASS_NAMES, read_idx
from ml.raw import DEBIAN_DIR
from runtime.sample_request import write_sample_request


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
    argv = contract.sample(tmp_path / "out", str(shared_data_dir))[3:]  # after python -m ml.sample
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


def test_tasks_run_the_step_once_and_print_what_it_wrote(tmp_path, shared_data_dir) -> None:
    lines: list[str] = []
    request = write_sample_request(tmp_path, str(shared_data_dir), lines.append)
    assert request == tmp_path / contract.SAMPLE_REQUEST and request.is_file()
    label = CLASS_NAMES[int(read_idx(shared_data_dir / "t10k-labels-idx1-ubyte.gz")[0])]
    assert lines == [
        f"sample input: {tmp_path / contract.SAMPLE_PNG} (test image 0, class {label})"
    ]
    request.write_text("kept")  # present: returned as is, the step does not run again
    assert write_sample_request(tmp_path, None, lines.append) == request
    assert request.read_text() == "kept" and len(lines) == 1


def test_tasks_raise_the_steps_reason_when_there_is_no_data(
    tmp_path, monkeypatch, dead_url
) -> None:
    if DEBIAN_DIR.is_dir():
        pytest.skip(f"{DEBIAN_DIR} exists on this machine: the step would find data there")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # an empty Keras cache
    monkeypatch.setenv("DISTML_DATA_MIRROR", dead_url)
    monkeypatch.delenv("DISTML_DATA_DIR", raising=False)
    with pytest.raises(DistmlError, match="cannot write the sample request: "):
        write_sample_request(tmp_path, str(tmp_path / "none"), print)
    assert not (tmp_path / contract.SAMPLE_REQUEST).exists()
