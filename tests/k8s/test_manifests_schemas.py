"""k8s.manifests, strict validity: every object ``cluster_objects`` can produce (the whole
settings matrix) and every builder outside the lifecycle is strictly valid for the pinned
Kubernetes version and the upstream CRDs (tests/support/k8s_schemas.py), and that validator
bites on the mistakes it is there to catch."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest

from k8s import manifests as m
from k8s.providers.settings import PREDICTORS, PROVIDERS, SERVING_MODES, Settings
from ml.contract import MODEL_TYPES
from tests.support import k8s_schemas
from tests.support.manifests_kit import _worker, settings


@pytest.fixture(scope="session")
def schema_validate() -> Callable[[dict[str, Any]], list[str]]:
    """``k8s_schemas.validate`` with results memoised (the same object recurs across the
    settings matrix); each CRD is loaded once, when first needed (a test whose CRD cannot
    be had skips)."""
    seen: dict[str, list[str]] = {}

    def check(obj: dict[str, Any]) -> list[str]:
        key = json.dumps(obj, sort_keys=True)
        if key not in seen:
            seen[key] = k8s_schemas.validate(obj)
        return seen[key]

    return check


MATRIX = list(
    itertools.product(PROVIDERS, SERVING_MODES, PREDICTORS, (False, True), (0, 1), (False, True))
)


@pytest.mark.parametrize(
    ("provider", "mode", "predictor", "logger", "gpus", "source_dir"),
    MATRIX,
    ids=[
        f"{p}-{mode}-{pred}-{'logger' if lg else 'nolog'}-gpu{g}-{'src' if sd else 'nosrc'}"
        for p, mode, pred, lg, g, sd in MATRIX
    ],
)
def test_every_object_is_strictly_valid(
    schema_validate, provider, mode, predictor, logger, gpus, source_dir
) -> None:
    s = settings(
        provider=provider,
        serving_mode=mode,
        predictor=predictor,
        request_logger=logger,
        gpus_per_worker=gpus,
        # Vary the optional fields along with another axis.
        epochs=2 if gpus else None,
        steps_per_epoch=5 if gpus else None,
        container_concurrency=2 if logger else None,
    )
    pairs = m.cluster_objects(
        s, models=MODEL_TYPES, min_accuracy=0.8, force=gpus == 1, source_dir=source_dir
    )
    steps = [step for step, _ in pairs]
    assert set(steps) <= set(m.STEPS)
    assert steps == sorted(steps, key=m.STEPS.index), "steps must come in task order"
    for _, obj in pairs:
        assert schema_validate(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"


def test_builders_outside_the_lifecycle_are_valid(schema_validate) -> None:
    s = settings()
    for obj in (
        m.selection_job(s, min_accuracy=0.0, force=False, rollback=True),
        m.ingest_job(s, "/trained_model/somewhere/else"),
        m.ingest_job(s, None),
        *(m.tfjob(s, model) for model in MODEL_TYPES),
        *m.message_dumper(s),
        m.ingress_service(settings(provider="kind", serving_mode="standard")),
        m.tensorboard_pod(s),
    ):
        assert schema_validate(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"


def _rename(d: dict[str, Any], old: str, new: str) -> None:
    d[new] = d.pop(old)


def _isvc(s: Settings) -> dict[str, Any]:
    return m.inference_service(s)


BROKEN: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None], str]] = {
    "TFJob replica instead of replicas": (
        lambda: m.tfjob(settings(), "cnn"),
        lambda o: _rename(_worker(o), "replicas", "replica"),
        "replica",
    ),
    "TFJob replicas given as a word": (
        lambda: m.tfjob(settings(), "cnn"),
        lambda o: _worker(o).__setitem__("replicas", "two"),
        "replicas",
    ),
    "TFJob misspelt runPolicy field": (
        lambda: m.tfjob(settings(), "cnn"),
        lambda o: _rename(o["spec"]["runPolicy"], "activeDeadlineSeconds", "activeDeadline"),
        "activeDeadline",
    ),
    "TFJob container without a name": (
        lambda: m.tfjob(settings(), "cnn"),
        lambda o: _worker(o)["template"]["spec"]["containers"][0].pop("name"),
        "name",
    ),
    "TFJob memory limit that is no quantity": (
        lambda: m.tfjob(settings(), "cnn"),
        lambda o: _worker(o)["template"]["spec"]["containers"][0]["resources"]["limits"].update(
            memory="2 GB"
        ),
        "2 GB",
    ),
    "TFJob misspelt pod template annotations": (
        lambda: m.tfjob(settings(), "cnn"),
        lambda o: _rename(_worker(o)["template"]["metadata"], "annotations", "annotation"),
        "annotation",
    ),
    "ISVC storageURI instead of storageUri": (
        lambda: _isvc(settings()),
        lambda o: _rename(o["spec"]["predictor"]["model"], "storageUri", "storageURI"),
        "storageURI",
    ),
    "ISVC minReplica instead of minReplicas": (
        lambda: _isvc(settings()),
        lambda o: _rename(o["spec"]["predictor"], "minReplicas", "minReplica"),
        "minReplica",
    ),
    "ISVC maxReplicas given as a word": (
        lambda: _isvc(settings()),
        lambda o: o["spec"]["predictor"].__setitem__("maxReplicas", "eight"),
        "eight",
    ),
    "ISVC unknown scale metric": (
        lambda: _isvc(settings(serving_mode="standard")),
        lambda o: o["spec"]["predictor"].__setitem__("scaleMetric", "gpu"),
        "gpu",
    ),
    "ISVC with a wrong-case kind": (
        lambda: _isvc(settings()),
        lambda o: o.__setitem__("kind", "Inferenceservice"),
        "Inferenceservice",
    ),
    "ISVC at a version KServe does not serve": (
        lambda: _isvc(settings()),
        lambda o: o.__setitem__("apiVersion", "serving.kserve.io/v1"),
        "not served",
    ),
    "ServingRuntime misspelt container field": (
        lambda: m.serving_runtime(settings()),
        lambda o: _rename(o["spec"]["containers"][0], "imagePullPolicy", "imagePullpolicy"),
        "imagePullpolicy",
    ),
    "PVC storageClass instead of storageClassName": (
        lambda: m.pvc(settings()),
        lambda o: _rename(o["spec"], "storageClassName", "storageClass"),
        "storageClass",
    ),
    "Job misspelt backoffLimit": (
        lambda: m.ingest_job(settings()),
        lambda o: _rename(o["spec"], "backoffLimit", "backOffLimit"),
        "backOffLimit",
    ),
    "Service port given as a word": (
        lambda: m.ingress_service(settings(serving_mode="standard")),
        lambda o: o["spec"]["ports"][0].__setitem__("port", "eighty"),
        "eighty",
    ),
    "name that is not DNS-1123": (
        lambda: m.tfjob(settings(), "cnn"),
        lambda o: o["metadata"].__setitem__("name", "train_cnn"),
        "train_cnn",
    ),
    "label value that is not a label value": (
        lambda: m.pvc(settings()),
        lambda o: o["metadata"]["labels"].__setitem__("distml/model", "cnn batchnorm"),
        "cnn batchnorm",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_the_validator_rejects(case: str) -> None:
    build, breakit, mentioned = BROKEN[case]
    obj = build()
    assert k8s_schemas.validate(obj) == [], "the unbroken object must be valid"
    breakit(obj)
    errors = k8s_schemas.validate(obj)
    assert errors, f"{case}: accepted"
    assert any(mentioned in e for e in errors), errors


def test_strict_copy_leaves_the_original_schema_alone() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
    strict = k8s_schemas.strict_schema(schema)
    assert strict["additionalProperties"] is False
    assert strict["properties"]["a"]["additionalProperties"] is False
    assert "additionalProperties" not in schema
    kept = {"type": "object", "properties": {}, "x-kubernetes-preserve-unknown-fields": True}
    assert "additionalProperties" not in k8s_schemas.strict_schema(kept)
