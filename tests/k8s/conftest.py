"""Fixtures of the k8s tests: ``fake``, a fake cluster on a fake clock
(tests/support/fakekube.py), and ``plan``, `up`'s install plan run against the real upstream
files for each provider x serving mode, with and without Argo, and with monitoring
(tests/support/install_plan.py; package-scoped: test_operators.py and test_capacity.py
share each run)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.fakekube import FakeKube
from tests.support.install_plan import ALL_PLANS, run_plan
from tests.support.tiers import heavy_fixture
from tests.support.upstream import PlanCluster


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    """A fake cluster on a fake clock: a test using it must not take real time."""
    started = time.monotonic()
    yield FakeKube()
    assert time.monotonic() - started < 1.0, "a wait took real time"


@pytest.fixture(
    scope="package",
    params=ALL_PLANS,
    ids=[
        f"{p}-{m}" + ("-argo" if argo else "") + ("-monitoring" if mon else "")
        for p, m, argo, mon in ALL_PLANS
    ],
)
def plan(request: pytest.FixtureRequest) -> PlanCluster:
    heavy_fixture(request, "parses every upstream release file for 12 install plans")
    with pytest.MonkeyPatch.context() as mp:
        provider, mode, argo, monitoring = request.param
        return run_plan(provider, mode, mp, argo, monitoring)
