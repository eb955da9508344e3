"""k8s.manifests: every object is strictly valid for the pinned Kubernetes version and the
upstream CRDs, the validator bites, and the objects do what a user relies on."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from k8s import manifests as m
from k8s import versions
from k8s.settings import PREDICTORS, PROVIDERS, SERVING_MODES, Settings
from ml.contract import MODEL_TYPES
from tests.support import k8s_schemas

IMAGE = "distml:0123456789ab"
DOCS = Path(__file__).resolve().parents[1] / "docs"


def settings(**overrides: Any) -> Settings:
    return Settings(image=IMAGE, **overrides)


def all_objects(s: Settings, **kwargs: Any) -> list[dict[str, Any]]:
    kwargs.setdefault("models", MODEL_TYPES)
    return [obj for _, obj in m.cluster_objects(s, **kwargs)]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = by_kind(objs, kind)
    return obj


def pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every pod spec in an object (Pod, Job/Deployment templates, TFJob replicas)."""
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind == "Pod":
        yield spec
    elif kind in ("Job", "Deployment"):
        yield spec["template"]["spec"]
    elif kind == "TFJob":
        for replica in spec["tfReplicaSpecs"].values():
            yield replica["template"]["spec"]


def containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every container an object will run (ServingRuntime and ISVC model included)."""
    for spec in pod_specs(obj):
        yield from spec.get("containers", [])
    if obj["kind"] == "ServingRuntime":
        yield from obj["spec"]["containers"]


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


# -- every object is strictly valid ----------------------------------------------------

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


# -- the validator bites ---------------------------------------------------------------


def _worker(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["tfReplicaSpecs"]["Worker"]


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


# -- what a user relies on -------------------------------------------------------------


def test_tfjob_worker_shape() -> None:
    s = settings(workers=3)
    job = m.tfjob(s, "cnn_dropout")
    worker = _worker(job)
    assert list(job["spec"]["tfReplicaSpecs"]) == ["Worker"]
    assert worker["replicas"] == 3
    assert worker["restartPolicy"] == "OnFailure"
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"  # the operator looks for this name
    assert container["ports"] == [{"containerPort": 2222, "name": "tfjob-port"}]
    assert worker["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert job["spec"]["runPolicy"] == {
        "activeDeadlineSeconds": s.train_deadline_s,
        "backoffLimit": s.max_restarts * s.workers + 1,  # see tfjob_backoff_limit
        "cleanPodPolicy": "None",
    }
    assert job["spec"]["successPolicy"] == "AllWorkers"
    assert job["metadata"]["labels"]["distml/model"] == "cnn_dropout"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["TF_NUM_INTRAOP_THREADS"] == env["TF_NUM_INTEROP_THREADS"] == str(s.threads)
    mount = container["volumeMounts"][0]
    assert mount["mountPath"] == "/trained_model"
    volumes = {v["name"]: v for v in worker["template"]["spec"]["volumes"]}
    assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] == "strategy-volume"


@pytest.mark.parametrize("model", MODEL_TYPES)
def test_every_tfjob_gives_its_workers_time_to_save_and_restarts_them_on_failure(model) -> None:
    worker = _worker(m.tfjob(settings(), model))
    assert worker["restartPolicy"] == "OnFailure"
    # Room for the agreed save on SIGTERM (measured 0.3-1.5 s), well under the 30 s default.
    assert worker["template"]["spec"]["terminationGracePeriodSeconds"] == m.WORKER_GRACE_S
    assert 5 <= m.WORKER_GRACE_S < 30


def test_tfjob_names_are_distinct_dns_names() -> None:
    names = [m.tfjob(settings(), model)["metadata"]["name"] for model in MODEL_TYPES]
    assert names == ["train-cnn", "train-cnn-dropout", "train-cnn-batchnorm"]
    assert all(m.is_dns_label(n) for n in names)


def test_train_command_and_overrides() -> None:
    plain = m.train_command(settings(), "cnn")
    assert plain == [
        "python", "-m", "ml.train", "--volume", "/trained_model", "--model-type", "cnn",
        "--profile", "quick", "--log-every", "5",
    ]  # fmt: skip
    tuned = m.train_command(settings(profile="full", epochs=4, steps_per_epoch=9), "cnn")
    assert tuned[tuned.index("--profile") + 1] == "full"
    assert tuned[-4:] == ["--epochs", "4", "--steps-per-epoch", "9"]


def test_gpu_limit_only_when_asked() -> None:
    def gpu_limits(objs):
        return [
            c["resources"]["limits"].get("nvidia.com/gpu")
            for o in objs
            for c in containers(o)
            if "resources" in c
        ]

    assert set(gpu_limits(all_objects(settings()))) == {None}
    objs = all_objects(settings(gpus_per_worker=1))
    for job in by_kind(objs, "TFJob"):
        assert gpu_limits([job]) == ["1"]
    assert set(gpu_limits([o for o in objs if o["kind"] != "TFJob"])) == {None}


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


def test_loader_pod_and_ingest_from_local_files() -> None:
    objs = all_objects(settings(), source_dir=True)
    loader = one(objs, "Pod")
    (c,) = loader["spec"]["containers"]
    assert loader["metadata"]["name"] == "distml-data-loader"
    assert loader["spec"]["restartPolicy"] == "Never"
    assert c["volumeMounts"][0]["mountPath"] == "/trained_model"
    assert c["command"][:2] == ["python", "-c"]
    assert "time.sleep(3600)" in c["command"][2]
    assert "/trained_model/raw/fashion-mnist" in c["command"][2]
    ingest = by_kind(objs, "Job")[0]
    assert ingest["metadata"]["name"] == "distml-ingest"
    assert ingest["spec"]["backoffLimit"] == 2
    assert "ttlSecondsAfterFinished" not in ingest["spec"]
    command = ingest["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == [
        "python", "-m", "ml.ingest", "--volume", "/trained_model",
        "--source-dir", "/trained_model/raw/fashion-mnist",
    ]  # fmt: skip
    no_local = all_objects(settings())
    assert not by_kind(no_local, "Pod")
    assert (
        "--source-dir"
        not in by_kind(no_local, "Job")[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    )


def _command(job: dict[str, Any]) -> list[str]:
    return job["spec"]["template"]["spec"]["containers"][0]["command"]


def test_tensorboard_pod_reads_the_training_volume_read_only() -> None:
    from ml import contract

    s = settings()
    pod = m.tensorboard_pod(s)
    (worker,) = _worker(m.tfjob(s, "cnn"))["template"]["spec"]["containers"]
    (c,) = pod["spec"]["containers"]
    # The PVC and mount path the training pods write, mounted read-only at both levels.
    assert pod["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": s.volume, "readOnly": True}}
    ]
    assert c["volumeMounts"] == [{**worker["volumeMounts"][0], "readOnly": True}]
    assert c["command"] == contract.tensorboard(s.mount_path, host="0.0.0.0")
    assert c["command"][3:5] == ["--logdir", "/trained_model/tensorboard"]
    assert (c["image"], c["imagePullPolicy"]) == (IMAGE, "IfNotPresent")
    assert c["securityContext"] == worker["securityContext"]
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000
    # Ready once TensorBoard answers on the port kubectl port-forward reaches.
    assert c["ports"] == [{"containerPort": 6006, "name": "http"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/", "port": "http"}
    # Small requests, as the resource table in docs/cluster.md states.
    assert c["resources"] == {
        "requests": {"cpu": "50m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "1536Mi"},
    }
    row = "| TensorBoard (`invoke tensorboard`, while it runs) | 50m CPU / 256 MiB | 1 CPU / "
    assert row + "1.5 GiB |" in (DOCS / "cluster.md").read_text()
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["name"] == m.TENSORBOARD_POD == "distml-tensorboard"
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "distml"  # down finds it


def test_selection_and_rollback_jobs() -> None:
    s = settings()
    select = m.selection_job(s, min_accuracy=0.85, force=True)
    assert select["metadata"]["name"] == "distml-select"
    assert select["spec"]["backoffLimit"] == 0
    assert _command(select) == [
        "python", "-m", "ml.select", "--volume", "/trained_model", "--service", "tf-mnist",
        "--min-accuracy", "0.85", "--force", "--code-version", IMAGE,
    ]  # fmt: skip
    # The code version recorded in publish.json is the image this very pod runs.
    assert select["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    assert "--force" not in _command(m.selection_job(s, min_accuracy=0.0, force=False))
    rollback = m.selection_job(s, min_accuracy=0.0, force=False, rollback=True)
    assert rollback["metadata"]["name"] == "distml-rollback"
    assert rollback["spec"]["backoffLimit"] == 0
    assert _command(rollback)[-1] == "--rollback"
    assert "--min-accuracy" not in _command(rollback)
    assert "--code-version" not in _command(rollback), "a rollback keeps the restored lineage"
    with pytest.raises(ValueError, match=r"did you mean 0\.85"):
        m.selection_job(s, min_accuracy=85, force=False)


@pytest.mark.parametrize("predictor", PREDICTORS)
def test_storage_uri_is_the_services_folder_in_the_pvc(predictor) -> None:
    isvc = m.inference_service(settings(predictor=predictor))
    model = isvc["spec"]["predictor"]["model"]
    assert model["storageUri"] == "pvc://strategy-volume/serving/tf-mnist"
    assert "name" not in model  # KServe's webhook refuses a name on a standard predictor


def test_knative_mode_autoscales_on_concurrency() -> None:
    isvc = m.inference_service(settings(target=3, min_replicas=0, max_replicas=5))
    annotations = isvc["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/target"] == "3"
    assert annotations["serving.kserve.io/deploymentMode"] == "Knative"
    predictor = isvc["spec"]["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (0, 5)
    assert "scaleMetric" not in predictor
    assert "containerConcurrency" not in predictor
    assert "sidecar.istio.io/inject" not in annotations
    with_cc = m.inference_service(settings(container_concurrency=4))
    assert with_cc["spec"]["predictor"]["containerConcurrency"] == 4
    assert not by_kind(all_objects(settings()), "Service")  # the Istio gateway is the way in


def test_standard_mode_scales_on_cpu_behind_an_ingress_service() -> None:
    isvc = m.inference_service(settings(serving_mode="standard"))
    annotations = isvc["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "Standard"
    assert annotations["serving.kserve.io/autoscalerClass"] == "hpa"
    assert "autoscaling.knative.dev/target" not in annotations
    assert isvc["spec"]["predictor"]["scaleMetric"] == "cpu"
    assert isvc["spec"]["predictor"]["scaleTarget"] == 80


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ingress_service_per_provider(provider) -> None:
    svc = one(all_objects(settings(provider=provider, serving_mode="standard")), "Service")
    assert svc["metadata"]["name"] == "tf-mnist-ingress"
    assert svc["spec"]["selector"] == {"serving.kserve.io/inferenceservice": "tf-mnist"}
    (port,) = svc["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (80, 8080)
    if provider == "k3d":
        assert svc["spec"]["type"] == "LoadBalancer" and "nodePort" not in port
    else:
        assert svc["spec"]["type"] == "NodePort" and port["nodePort"] == 31080


def test_kserve_predictor_runs_our_server_from_the_model_mount() -> None:
    objs = all_objects(settings())
    runtime, isvc = one(objs, "ServingRuntime"), one(objs, "InferenceService")
    (c,) = runtime["spec"]["containers"]
    assert c["name"] == "kserve-container"
    assert c["command"] + c["args"] == [
        "python", "-m", "ml.serve", "--model-dir", "/mnt/models", "--model-name", "{{.Name}}",
        "--host", "0.0.0.0", "--http-port", "8080",
    ]  # fmt: skip
    assert c["ports"] == [{"containerPort": 8080, "name": "http1", "protocol": "TCP"}]
    assert {"name": "TF_USE_LEGACY_KERAS", "value": "1"} in c["env"]
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"] == "distml-predictor"
    (fmt,) = runtime["spec"]["supportedModelFormats"]
    assert fmt == {"name": "distml-savedmodel", "version": "1", "autoSelect": True}
    assert model["modelFormat"] == {"name": fmt["name"], "version": fmt["version"]}
    assert runtime["spec"]["protocolVersions"] == ["v1"]


def test_tfserving_predictor_uses_the_pinned_builtin_runtime() -> None:
    objs = all_objects(settings(predictor="tfserving"))
    assert not by_kind(objs, "ServingRuntime")
    model = one(objs, "InferenceService")["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "tensorflow"}
    assert model["runtimeVersion"] == versions.TFSERVING_RUNTIME_VERSION
    assert "runtime" not in model


def test_request_logger_only_when_asked() -> None:
    off = all_objects(settings())
    assert "logger" not in one(off, "InferenceService")["spec"]["predictor"]
    assert not by_kind(off, "Deployment")
    on = all_objects(settings(request_logger=True, namespace="ml"))
    logger = one(on, "InferenceService")["spec"]["predictor"]["logger"]
    assert logger == {"mode": "all", "url": "http://message-dumper.ml.svc.cluster.local"}
    deployment, service = one(on, "Deployment"), one(on, "Service")
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "message-dumper"
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == versions.MESSAGE_DUMPER_IMAGE
    assert service["spec"]["ports"][0]["targetPort"] == c["ports"][0]["containerPort"] == 8080
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_pvc_and_namespace() -> None:
    claim = m.pvc(settings(provider="kind", volume_size="3Gi"))
    assert claim["metadata"]["name"] == "strategy-volume"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "standard",
        "resources": {"requests": {"storage": "3Gi"}},
    }
    assert m.pvc(settings())["spec"]["storageClassName"] == "local-path"
    assert m.namespace(settings(namespace="ml"))["metadata"]["name"] == "ml"


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


# -- the commands fit the pod's CLIs ---------------------------------------------------


def test_commands_parse_with_the_pod_clis(monkeypatch) -> None:
    from ml import ingest, serve, train
    from ml import select as select_cli

    objs = all_objects(settings(epochs=2, steps_per_epoch=3), source_dir=True, force=True)
    ingest_cmd = _command(by_kind(objs, "Job")[0])
    args = ingest._parser().parse_args(ingest_cmd[3:])
    assert (args.volume, args.source_dir) == ("/trained_model", "/trained_model/raw/fashion-mnist")

    for job in by_kind(objs, "TFJob"):
        cmd = _worker(job)["template"]["spec"]["containers"][0]["command"]
        args = train.build_parser().parse_args(cmd[3:])
        assert (args.epochs, args.steps_per_epoch, args.log_every) == (2, 3, 5)
        assert args.model_type == job["metadata"]["labels"]["distml/model"]

    c = one(objs, "ServingRuntime")["spec"]["containers"][0]
    args = serve.build_parser().parse_args([a.replace("{{.Name}}", "tf-mnist") for a in c["args"]])
    assert (args.model_dir, args.model_name, args.host, args.http_port) == (
        "/mnt/models",
        "tf-mnist",
        "0.0.0.0",
        8080,
    )

    # ml.select parses inside main(): run it with the work itself replaced.
    calls: list[tuple[Any, ...]] = []

    def fake_select(volume, service, **kwargs):
        calls.append(("select", volume, service, kwargs))
        return 0, {}

    def fake_rollback(volume, service):
        calls.append(("rollback", volume, service))
        return 1, 2

    monkeypatch.setattr(select_cli, "select", fake_select)
    monkeypatch.setattr(select_cli, "rollback", fake_rollback)
    (select,) = [j for j in by_kind(objs, "Job") if j["metadata"]["name"] == "distml-select"]
    assert select_cli.main(_command(select)[3:]) == 0
    kind, volume, service, kwargs = calls[-1]
    assert (kind, str(volume), service) == ("select", "/trained_model", "tf-mnist")
    assert (kwargs["force"], kwargs["min_accuracy"]) == (True, 0.0)
    rollback = m.selection_job(settings(), min_accuracy=0, force=False, rollback=True)
    assert select_cli.main(_command(rollback)[3:]) == 0
    assert calls[-1] == ("rollback", Path("/trained_model"), "tf-mnist")


# -- settings and names ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"provider": "minikub"}, "unknown provider 'minikub'; valid: k3d, kind, minikube"),
        ({"serving_mode": "serverless"}, "unknown serving mode"),
        ({"predictor": "triton"}, "unknown predictor"),
        ({"profile": "fast"}, "unknown profile"),
        ({"workers": 0}, "workers must be at least 1"),
        ({"gpus_per_worker": -1}, "gpus per worker"),
        ({"min_replicas": 5, "max_replicas": 2}, r"min replicas \(5\) is more than max"),
        ({"max_replicas": 0, "min_replicas": 0}, "max replicas must be at least 1"),
        ({"target": 0}, "target must be at least 1"),
        ({"serving_mode": "standard", "min_replicas": 0}, "cannot scale to zero"),
        ({"epochs": 0}, "epochs must be at least 1"),
        ({"ingress_node_port": 8080}, "NodePort range"),
        ({"service": "TF_mnist"}, "must start with a letter"),
        ({"service": "s" * 48}, "at most 47"),
        ({"namespace": "-x"}, "DNS-1123"),
        ({"volume_size": "5 GB"}, "not a Kubernetes quantity"),
        ({"image": "distml"}, "no tag"),
        ({"image": "registry:5000/distml"}, "no tag"),
        ({"image": "distml:latest"}, ":latest"),
    ],
)
def test_check_settings_rejects(overrides, message) -> None:
    s = dataclasses.replace(settings(), **overrides)
    with pytest.raises(ValueError, match=message):
        m.check_settings(s)
    with pytest.raises(ValueError, match=message):
        m.cluster_objects(s, models=["cnn"])


def test_check_settings_accepts_the_defaults_and_digests() -> None:
    m.check_settings(settings())
    m.check_settings(dataclasses.replace(settings(), image="r:5000/distml@sha256:" + "a" * 64))
    m.check_settings(settings(min_replicas=0, max_replicas=1))


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (["cnn", "resnet"], "unknown model type.*'resnet'.*valid: cnn, cnn_dropout, cnn_batchnorm"),
        ([], "no model given"),
        ("cnn", "not the string"),
        (["cnn", "cnn"], "given twice: cnn"),
    ],
)
def test_check_models_rejects(models, message) -> None:
    with pytest.raises(ValueError, match=message):
        m.check_models(models)


def test_check_models_keeps_order() -> None:
    assert m.check_models(iter(["cnn_batchnorm", "cnn"])) == ("cnn_batchnorm", "cnn")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cnn_batchnorm", "cnn-batchnorm"),
        ("Train CNN", "train-cnn"),
        ("--a__b..c--", "a-b-c"),
        ("x" * 70, "x" * 63),
        ("a" * 62 + "_b", "a" * 62),  # cut at 63, then no trailing '-'
        ("tf-mnist", "tf-mnist"),
    ],
)
def test_dns_name(text, expected) -> None:
    assert m.dns_name(text) == expected
    assert m.is_dns_label(expected)


@pytest.mark.parametrize("text", ["", "__", "-", "..."])
def test_dns_name_refuses_nothing(text) -> None:
    with pytest.raises(ValueError, match="DNS-1123"):
        m.dns_name(text)


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a_b", "a" * 64, "a.b"])
def test_is_dns_label_rejects(name) -> None:
    assert not m.is_dns_label(name)


def test_predictor_is_ready_only_when_a_model_answers():
    from k8s.settings import Settings

    s = Settings(image="distml:0123456789ab")
    container = m.serving_runtime(s)["spec"]["containers"][0]
    probe = container["readinessProbe"]["httpGet"]
    assert probe == {"path": "/v1/models/tf-mnist", "port": 8080}
    assert container["ports"][0]["containerPort"] == 8080
