"""Fixtures of the load test tests: one real 3 s Locust run against a well-behaved loopback
server, shared by the tests of its summary, files and replica chart."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest import runner as lt
from tests.support.predict_server import MODEL, predict_server, write_payload


@pytest.fixture(scope="package")
def ok_run(tmp_path_factory) -> tuple[dict, Path, set[str], list[str]]:
    """One real 3 s run, 5 users, against a well-behaved server (shared by several tests)."""
    tmp = tmp_path_factory.mktemp("loadtest-ok")
    lines: list[str] = []
    with predict_server("ok") as (url, handler):
        summary = lt.run_loadtest(
            url,
            MODEL,
            write_payload(tmp / "body.json"),
            tmp / "out",
            concurrency=5,
            duration="3s",
            host_header="fashion.default.example.com",
            log=lines.append,
        )
    return summary, tmp / "out", set(handler.hosts), lines
