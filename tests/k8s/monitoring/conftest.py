"""The real model server, started once for every test of this package that reads it
through a real Prometheus (TensorFlow's start is the slow part)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.served_model import served_model


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m ml serve`` on a free loopback port, serving version 1; its base URL."""
    with served_model(tmp_path_factory.mktemp("served")) as url:
        yield url
