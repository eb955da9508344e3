"""k8s.manifests (the package: ``cluster_objects``): what holds for every object of the
lifecycle: the apply order by task step, the labels ``down`` finds them by, the project image
pinned and never pulled, every pod running as the image's user without privileges, and
builders that share no state between calls."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from k8s import manifests as m
from k8s.settings import PREDICTORS, SERVING_MODES
from ml.contract import MODEL_TYPES
from tests.support.manifests_kit import IMAGE, all_objects, containers, one, pod_specs, settings


@pytest.mark.parametrize("mode", SERVING_MODES)
@pytest.mark.parametrize("predictor", PREDICTORS)
def test_project_image_is_pinned_and_never_pulled(mode, predictor) -> None:
    objs = all_objects(
        settings(serving_mode=mode, predictor=predictor, request_logger=True), source_dir=True
    )
    seen = 0
    for obj in objs:
        for c in containers(obj):
            assert not c["image"].endswith(":latest"), c["image"]
            assert c["imagePullPolicy"] == "IfNotPresent", (obj["kind"], c["name"])
            seen += c["image"] == IMAGE
    # loader, ingest, 3 TFJobs, selection (+ our predictor runtime)
    assert seen == 6 + (predictor == "kserve")


def test_project_pods_run_as_the_image_user_without_privileges() -> None:
    objs = all_objects(settings(request_logger=True), source_dir=True)
    checked = 0
    for obj in objs:
        for spec in pod_specs(obj):
            for c in spec["containers"]:
                ctx = {**spec.get("securityContext", {}), **c.get("securityContext", {})}
                assert ctx["runAsNonRoot"] is True, obj["metadata"]["name"]
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
                if c["image"] == IMAGE:
                    assert ctx["runAsUser"] == ctx["runAsGroup"] == 1000
                    assert spec["securityContext"]["fsGroup"] == 1000
                checked += 1
    runtime = one(objs, "ServingRuntime")["spec"]["containers"][0]["securityContext"]
    assert runtime["runAsNonRoot"] is True and runtime["runAsUser"] == 1000
    assert runtime["allowPrivilegeEscalation"] is False
    assert checked == 7  # loader, ingest, 3 TFJobs, selection, message dumper


def test_every_object_is_labelled_for_down() -> None:
    objs = all_objects(settings(serving_mode="standard", request_logger=True), source_dir=True)
    for obj in objs:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "distml"
        assert labels["app.kubernetes.io/managed-by"] == "distml"
    assert m.selector() == ("app.kubernetes.io/part-of=distml,app.kubernetes.io/managed-by=distml")


def test_apply_order() -> None:
    pairs = m.cluster_objects(
        settings(request_logger=True, serving_mode="standard"),
        models=["cnn", "cnn_batchnorm"],
        source_dir=True,
    )
    assert [(step, o["kind"], o["metadata"]["name"]) for step, o in pairs] == [
        ("up", "Namespace", "kubeflow"),
        ("up", "PersistentVolumeClaim", "strategy-volume"),
        ("up", "Pod", "distml-data-loader"),
        ("up", "Job", "distml-ingest"),
        ("train-all", "TFJob", "train-cnn"),
        ("train-all", "TFJob", "train-cnn-batchnorm"),
        ("deploy", "Job", "distml-select"),
        ("deploy", "Deployment", "message-dumper"),
        ("deploy", "Service", "message-dumper"),
        ("deploy", "ServingRuntime", "distml-predictor"),
        ("deploy", "InferenceService", "tf-mnist"),
        ("deploy", "Service", "tf-mnist-ingress"),
        # `invoke workflow`'s objects, the alternative to train-all + deploy.
        ("workflow", "ServiceAccount", "distml-workflow"),
        ("workflow", "Role", "distml-workflow"),
        ("workflow", "RoleBinding", "distml-workflow"),
        ("workflow", "Role", "distml-workflow-cache-writer"),
        ("workflow", "RoleBinding", "distml-workflow-cache-writer"),
        ("workflow", "ConfigMap", "distml-workflow-cache"),
        ("workflow", "Workflow", "distml-pipeline"),
    ]


def test_builders_are_pure() -> None:
    s = settings(request_logger=True, serving_mode="standard", gpus_per_worker=1)
    before = dataclasses.asdict(s)
    first = m.cluster_objects(s, models=MODEL_TYPES, source_dir=True)
    snapshot = copy.deepcopy(first)
    # Changing what one call returned must not leak into the next (no shared dicts).
    for _, obj in first:
        obj["metadata"]["labels"]["x"] = "y"
        for c in containers(obj):
            c.get("resources", {}).get("limits", {})["cpu"] = "99"
            c.get("env", []).append({"name": "X", "value": "1"})
    second = m.cluster_objects(s, models=MODEL_TYPES, source_dir=True)
    assert second == snapshot
    assert dataclasses.asdict(s) == before
