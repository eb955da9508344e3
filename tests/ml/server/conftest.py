"""Fixtures of the tests that run the real server (test_metrics_http.py, test_clients.py):
``exported``, the model they serve, and ``start_server``, which starts ``python -m ml serve``
processes (tests/ml/server/serve_process.py) and stops them when the module is done."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.ml.server.serve_process import Server, export_test_model


@pytest.fixture(scope="module")
def exported(tf, tmp_path_factory) -> Path:
    """A randomly initialised cnn, exported once per module. TensorFlow builds it (the
    ``tf`` fixture: tests using this one are heavy, tests/support/tiers.py)."""
    return export_test_model(tmp_path_factory.mktemp("export") / "model")


@pytest.fixture(scope="module")
def start_server(tmp_path_factory) -> Iterator[Callable[..., Server]]:
    """``start_server(model_dir, *flags)``: a server process, not yet waited for (start
    several, then wait: their start-ups overlap); all are stopped at the module's end."""
    logs = tmp_path_factory.mktemp("logs")
    started: list[Server] = []

    def start(model_dir: Path, *flags: str) -> Server:
        started.append(Server(model_dir, logs / f"server-{len(started)}.log", *flags))
        return started[-1]

    try:
        yield start
    finally:
        for server in started:
            server.stop()
