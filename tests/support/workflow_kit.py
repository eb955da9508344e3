"""What the tests of the Argo Workflow's manifests share (tests/k8s/manifests/test_argo_*.py):
the image and settings it is built with, its settings matrix, the Workflow as the tests build
it, and a resource step's embedded manifest."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml

from k8s import manifests as m
from k8s.providers.settings import PREDICTORS, SERVING_MODES, Settings
from ml import contract
from ml.contract import MODEL_TYPES

IMAGE = "distml:0123456789ab"
KEY = m.memo_key(IMAGE, contract.RAW_SHA256)
MATRIX = [
    pytest.param(
        Settings(image=IMAGE, predictor=p, serving_mode=mode, workers=w),
        id=f"{p}-{mode}-{w}-workers",
    )
    for p, mode, w in itertools.product(PREDICTORS, SERVING_MODES, (1, 2))
]
S = Settings(image=IMAGE)


def build(s: Settings = S, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("models", MODEL_TYPES)
    kwargs.setdefault("cache_key", KEY)
    return m.workflow(s, **kwargs)


def embedded(template: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(template["resource"]["manifest"])
