"""ml.contract.records: what the steps write, read back. Ingest's result line round-trips,
the last one counts, and output without one is refused. (The readers of metrics.json,
publish.json and the selection report: the select and status tests.)"""

from __future__ import annotations

import json

import pytest

from ml.contract.records import IngestResult, read_ingest_line


@pytest.mark.parametrize("status", [IngestResult.PREPARED, IngestResult.ALREADY_PREPARED])
def test_the_ingest_line_round_trips(status):
    result = IngestResult(status, "/v/datasets/fashion_mnist")
    assert json.loads(result.line()) == {"ingest": status, "dataset": "/v/datasets/fashion_mnist"}
    output = f"data: some human line\n{result.line()}\n"
    assert read_ingest_line(output) == result
    assert result.changed is (status == IngestResult.PREPARED)


def test_read_ingest_line_takes_the_last_result_and_skips_other_lines():
    first = IngestResult(IngestResult.PREPARED, "/a").line()
    last = IngestResult(IngestResult.ALREADY_PREPARED, "/b").line()
    output = f"{first}\n{{not json\n{last}\n{json.dumps({'other': 1})}\n[1, 2]\nW0000 a warning\n"
    assert read_ingest_line(output) == IngestResult(IngestResult.ALREADY_PREPARED, "/b")


@pytest.mark.parametrize(
    "output",
    ["", "dataset already prepared at /v/datasets/fashion_mnist\n", '{"ingest": "maybe"}\n'],
)
def test_read_ingest_line_refuses_output_without_a_result(output):
    with pytest.raises(ValueError, match="no ingest result line"):
        read_ingest_line(output)
