"""runtime.sample_request, the tasks' side of the sample-request step: it runs ``ml.data.sample``
once, prints what it wrote, and raises the step's own reason when there is no data."""

from __future__ import annotations

import pytest

from common.errors import DistmlError
from ml import contract
from ml.data.dataset import CLASS_NAMES, read_idx
from ml.data.raw import DEBIAN_DIR
from runtime.sample_request import write_sample_request


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
