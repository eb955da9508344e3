"""Fixtures of the k8s tests: ``fake``, a fake cluster on a fake clock
(tests/support/fakekube.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.fakekube import FakeKube


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    """A fake cluster on a fake clock: a test using it must not take real time."""
    started = time.monotonic()
    yield FakeKube()
    assert time.monotonic() - started < 1.0, "a wait took real time"
