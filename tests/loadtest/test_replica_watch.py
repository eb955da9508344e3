"""loadtest/replica_watch.py: ready replicas sampled beside a real run, recorded in the summary
and charted, and (with ``settle_s``) sampled after the load until they turn ready."""

from __future__ import annotations

import json
import threading
import time

from loadtest import runner as lt
from loadtest import summary as ls
from tests.support.predict_server import MODEL, png_size, predict_server, write_payload


def test_replica_sampler_is_recorded_and_charted(tmp_path, ok_run):
    calls: list[float] = []

    def sampler() -> int:
        calls.append(time.monotonic())
        return 1 if len(calls) == 1 else 3

    with predict_server("ok") as (url, _handler):
        summary = lt.run_loadtest(
            url,
            MODEL,
            write_payload(tmp_path / "body.json"),
            tmp_path / "out",
            duration="2s",
            replica_sampler=sampler,
            expected_replicas=8,
            log=lambda _: None,
        )
    samples = summary["replicas"]
    assert len(samples) >= 2
    assert samples[0]["ready"] == 1 and samples[0]["t_s"] < 1  # sampled before Locust starts
    assert {s["ready"] for s in samples[1:]} == {3}
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)
    assert summary["replicas_start"] == 1 and summary["replicas_peak"] == 3
    assert summary["replicas_expected"] == 8  # what the autoscaler should reach, charted
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["replicas_expected"] == 8
    assert ls.check(summary, expect_scale_out=True) == []
    # The chart gets a third panel: taller than the two-panel chart of ok_run.
    assert png_size(tmp_path / "out" / "chart.png")[1] > png_size(ok_run[1] / "chart.png")[1]


def test_replicas_that_turn_ready_after_the_load_count_with_settle(tmp_path):
    """An HPA decides during the load and its pods turn ready after it: with ``settle_s``
    sampling goes on until they do (and stops as soon as they have)."""
    load_over = threading.Event()
    ready_at: list[float] = []

    def sampler() -> int:
        if not load_over.is_set():
            return 1
        ready_at.append(time.monotonic())
        return 2 if len(ready_at) >= 3 else 1  # ready a few samples after the load

    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("loadtest: load done"):
            load_over.set()

    with predict_server("ok") as (url, _handler):
        summary = lt.run_loadtest(
            url,
            MODEL,
            write_payload(tmp_path / "body.json"),
            tmp_path / "out",
            duration="1s",
            replica_sampler=sampler,
            log=log,
            settle_s=30,
        )
    assert summary["replicas_start"] == 1 and summary["replicas_peak"] == 2
    assert summary["replicas"][-1]["t_s"] > summary["duration_s"]  # sampled after the load
    assert summary["replicas"][-1]["t_s"] < summary["duration_s"] + 20  # not the whole 30 s
    assert ls.check(summary, expect_scale_out=True) == []
