"""k8s.manifests (the package: ``cluster_objects``): what holds for every object of the
lifecycle: the apply order by task step, the labels ``down`` finds them by, the project image
pinned and never pulled, every pod running as the image's user without privileges, and
builders that share no state between calls."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from k8s import manifests as m
from k8s.providers.settings import PREDICTORS, SERVING_MODES
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
        # In Argo's namespace: named for this namespace (another's `down` leaves them).
        ("workflow", "Role", "distml-workflow-cache-writer-kubeflow"),
        ("workflow", "RoleBinding", "distml-workflow-cache-writer-kubeflow"),
        ("workflow", "ConfigMap", "distml-workflow-cache-kubeflow"),
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


# -- pods that share a namespace: no token they do not use, no sidecar that never ends ---


def pod_templates(obj: dict) -> list[tuple[dict, dict]]:
    """(pod metadata, pod spec) of every pod an object makes (the ISVC's predictor: its
    ``spec.predictor``, whose pod fields KServe copies into the predictor's pods)."""
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind == "Pod":
        return [(obj["metadata"], spec)]
    if kind in ("Job", "Deployment"):
        return [(spec["template"]["metadata"], spec["template"]["spec"])]
    if kind == "TFJob":
        return [
            (r["template"]["metadata"], r["template"]["spec"])
            for r in spec["tfReplicaSpecs"].values()
        ]
    if kind == "InferenceService":
        return [({}, spec["predictor"])]
    return []


@pytest.mark.parametrize("mode", SERVING_MODES)
@pytest.mark.parametrize("provider", ["kind", "existing"])
def test_no_pod_distml_makes_mounts_a_service_account_token(mode, provider) -> None:
    """None of them calls the Kubernetes API: a token would only be there to be stolen."""
    s = settings(serving_mode=mode, provider=provider, namespace="ml-team", request_logger=True)
    objs = [o for o in all_objects(s, source_dir=True) if o["kind"] != "Workflow"]
    objs += [m.tensorboard_pod(s), m.selection_job(s, min_accuracy=0, force=False, rollback=True)]
    pods = [(o["kind"], spec) for o in objs for _, spec in pod_templates(o)]
    kinds = {k for k, _ in pods}
    assert kinds == {"Pod", "Job", "TFJob", "Deployment", "InferenceService"}
    assert len(pods) == 10  # loader, tensorboard, ingest, 3 TFJobs, select, rollback, dumper, isvc
    for kind, spec in pods:
        assert spec["automountServiceAccountToken"] is False, kind


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_every_pod_but_the_predictors_refuses_an_istio_sidecar(mode) -> None:
    """In a namespace labelled istio-injection=enabled an injected sidecar never exits: a
    Job's pod would never complete. The predictors may have one (Knative's mesh)."""
    s = settings(serving_mode=mode, request_logger=True)
    objs = [o for o in all_objects(s, source_dir=True) if o["kind"] != "Workflow"]
    objs += [m.tensorboard_pod(s), m.selection_job(s, min_accuracy=0, force=False, rollback=True)]
    checked = 0
    for obj in objs:
        for meta, _ in pod_templates(obj):
            annotations = meta.get("annotations") or {}
            if obj["kind"] == "InferenceService":
                assert "sidecar.istio.io/inject" not in annotations
                assert "sidecar.istio.io/inject" not in obj["metadata"].get("annotations", {})
                continue
            assert annotations.get("sidecar.istio.io/inject") == "false", obj["metadata"]["name"]
            checked += 1
    assert checked == 9  # loader, tensorboard, ingest, 3 TFJobs, select, rollback, dumper
