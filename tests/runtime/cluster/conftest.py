"""Fixtures of the cluster runtime tests (``runtime/cluster/``): a FakeKube whose
controllers run on each fake-clock tick, and a work dir."""

from __future__ import annotations

import pytest

from runtime.workdir import Workdir
from tests.support.cluster_kit import controller
from tests.support.fakekube import FakeClock, FakeKube


@pytest.fixture
def fake() -> FakeKube:
    kube = FakeKube(FakeClock())
    controller(kube)
    return kube


@pytest.fixture
def wd(tmp_path) -> Workdir:
    return Workdir.at(tmp_path / "wd")
