"""ml.data.ingest, the ingest step's command line: on a prepared volume, its exit code and error
when there is no data, its result as the last line (one JSON object), and its help.
"""

from __future__ import annotations

import json

import pytest

from ml.contract.records import IngestResult, read_ingest_line
from ml.data import dataset, ingest

pytestmark = pytest.mark.usefixtures("isolated_data_places")


def test_ingest_cli_on_prepared_volume(prepared_volume, capsys):
    volume, _, _ = prepared_volume
    assert ingest.main(["--volume", str(volume)]) == 0
    out = capsys.readouterr().out
    assert "already prepared" in out and str(volume) in out
    assert read_ingest_line(out) == IngestResult(
        IngestResult.ALREADY_PREPARED, str(dataset.datasets_dir(volume) / "fashion_mnist")
    )


def test_ingest_cli_error_exit_code(tmp_path, capsys):
    code = ingest.main(["--volume", str(tmp_path / "v"), "--source-dir", str(tmp_path / "none")])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: cannot find the Fashion-MNIST files")
    assert "Traceback" not in captured.err
    assert str(tmp_path / "none") in captured.out  # the search is reported as it happens


@pytest.mark.parametrize(
    ("prepared_now", "status"),
    [(True, IngestResult.PREPARED), (False, IngestResult.ALREADY_PREPARED)],
)
def test_ingest_cli_ends_with_its_result_as_one_json_line(
    tmp_path, capsys, monkeypatch, prepared_now, status
):
    def fake_prepare(volume, source_dir=None, mirror=None, log=print):
        log("what prepare says")
        return prepared_now

    monkeypatch.setattr(dataset, "prepare", fake_prepare)
    assert ingest.main(["--volume", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "what prepare says"  # the human lines stay
    prepared = str(tmp_path / "datasets" / "fashion_mnist")
    assert json.loads(lines[-1]) == {"ingest": status, "dataset": prepared}
    result = read_ingest_line("\n".join(lines))
    assert (result.status, result.dataset, result.changed) == (status, prepared, prepared_now)


def test_ingest_cli_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        ingest.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--volume", "--source-dir", "--mirror"):
        assert flag in out
