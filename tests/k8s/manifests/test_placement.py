"""k8s.manifests placement: every pod that mounts the volume carries the volume label and,
for a ReadWriteOnce volume, a required pod affinity to the others on the node's hostname;
for ReadWriteMany no affinity, and a TFJob's workers spread over nodes. An image pull
secret reaches every such pod and the Argo Workflow; the PVC leaves its class to an
existing cluster's default and asks for the access mode chosen."""

from __future__ import annotations

from typing import Any

import pytest

from k8s import manifests as m
from k8s.manifests.names import MODEL_LABEL, VOLUME_LABEL
from k8s.providers.settings import Settings
from ml import contract

IMAGE = "registry.example.com/ml/distml:0123456789ab"
HOSTNAME = "kubernetes.io/hostname"


def settings(**kw: Any) -> Settings:
    """A cluster distml did not create: the only one where pods are placed."""
    return Settings(image=IMAGE, **{"provider": "existing", "namespace": "ml-team", **kw})


def volume_pods(s: Settings) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
    """(pod labels, pod spec fields) of every pod that mounts the volume, by name."""
    ingest = m.ingest_job(s)["spec"]["template"]
    select = m.selection_job(s, min_accuracy=0.5, force=False)["spec"]["template"]
    worker = m.tfjob(s, "cnn")["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    loader, tensorboard = m.loader_pod(s), m.tensorboard_pod(s)
    predictor = m.inference_service(s)["spec"]["predictor"]
    return {
        "ingest": (ingest["metadata"]["labels"], ingest["spec"]),
        "select": (select["metadata"]["labels"], select["spec"]),
        "tfjob worker": (worker["metadata"]["labels"], worker["spec"]),
        "loader": (loader["metadata"]["labels"], loader["spec"]),
        "tensorboard": (tensorboard["metadata"]["labels"], tensorboard["spec"]),
        "predictor": (predictor["labels"], predictor),
    }


def affinity_terms(fields: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = fields.get("affinity") or {}
    return (affinity.get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []


POD_NAMES = ("ingest", "select", "tfjob worker", "loader", "tensorboard", "predictor")


@pytest.mark.parametrize(
    ("pod", "mode"),
    [(p, "standard") for p in POD_NAMES] + [(p, "knative") for p in POD_NAMES[:-1]],
)
def test_read_write_once_keeps_every_volume_pod_on_the_volume_node(pod, mode):
    s = settings(volume="vol-a", volume_access="ReadWriteOnce", serving_mode=mode)
    labels, fields = volume_pods(s)[pod]
    assert labels[VOLUME_LABEL] == "vol-a"
    (term,) = affinity_terms(fields)
    assert term == {"labelSelector": {"matchLabels": {VOLUME_LABEL: "vol-a"}},
                    "topologyKey": HOSTNAME}  # fmt: skip
    # the pod matches its own term: the first one is free to go anywhere
    assert all(labels.get(k) == v for k, v in term["labelSelector"]["matchLabels"].items())
    assert "topologySpreadConstraints" not in fields


@pytest.mark.parametrize("access", ["ReadWriteOnce", "ReadWriteMany"])
def test_knative_predictors_get_neither_affinity_nor_spread(access):
    # Knative Serving refuses both fields unless its admin enables them (config-features).
    predictor = m.inference_service(settings(serving_mode="knative", volume_access=access))
    fields = predictor["spec"]["predictor"]
    assert "affinity" not in fields and "topologySpreadConstraints" not in fields


@pytest.mark.parametrize("provider", ["k3d", "kind", "minikube"])
@pytest.mark.parametrize("mode", ["knative", "standard"])
def test_the_one_node_clusters_distml_makes_place_nothing(provider, mode):
    s = Settings(image=IMAGE, provider=provider, serving_mode=mode)
    for pod, (labels, fields) in volume_pods(s).items():
        assert labels[VOLUME_LABEL] == "strategy-volume", pod
        assert "affinity" not in fields and "topologySpreadConstraints" not in fields, pod


@pytest.mark.parametrize("pod", POD_NAMES)
def test_read_write_many_has_no_affinity_but_keeps_the_label(pod):
    labels, fields = volume_pods(settings(volume_access="ReadWriteMany"))[pod]
    assert labels[VOLUME_LABEL] == "strategy-volume"
    assert "affinity" not in fields


def test_read_write_many_spreads_a_tfjobs_workers_over_nodes():
    s = settings(volume_access="ReadWriteMany")
    for model in contract.MODEL_TYPES:
        template = m.tfjob(s, model)["spec"]["tfReplicaSpecs"]["Worker"]["template"]
        (spread,) = template["spec"]["topologySpreadConstraints"]
        assert spread["topologyKey"] == HOSTNAME
        assert spread["whenUnsatisfiable"] == "ScheduleAnyway"  # one node still runs them all
        selector = spread["labelSelector"]["matchLabels"]
        assert selector[MODEL_LABEL] == model
        # it selects this job's workers (and so not another model's)
        assert all(template["metadata"]["labels"].get(k) == v for k, v in selector.items())


def test_read_write_once_workers_are_not_spread():
    template = m.tfjob(settings(), "cnn")["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert "topologySpreadConstraints" not in template["spec"]


@pytest.mark.parametrize("access", ["ReadWriteOnce", "ReadWriteMany"])
def test_an_image_pull_secret_reaches_every_volume_pod(access):
    s = settings(volume_access=access, image_pull_secret="regcred")
    for name, (_, fields) in volume_pods(s).items():
        assert fields["imagePullSecrets"] == [{"name": "regcred"}], name


def test_no_image_pull_secret_means_none_is_named():
    for name, (_, fields) in volume_pods(settings()).items():
        assert "imagePullSecrets" not in fields, name
    wf = m.workflow(settings(), models=["cnn"], cache_key=m.memo_key(IMAGE, ["0" * 64]))
    assert "imagePullSecrets" not in wf["spec"]


def test_the_argo_workflow_names_the_image_pull_secret():
    s = settings(image_pull_secret="regcred")
    wf = m.workflow(s, models=["cnn"], cache_key=m.memo_key(IMAGE, ["0" * 64]))
    assert wf["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_the_argo_workflow_steps_that_mount_the_volume_follow_it():
    s = settings(volume_access="ReadWriteOnce")
    wf = m.workflow(s, models=["cnn"], cache_key=m.memo_key(IMAGE, ["0" * 64]))
    steps = [t for t in wf["spec"]["templates"] if "container" in t]
    assert steps
    for t in steps:
        assert t["metadata"]["labels"][VOLUME_LABEL] == s.volume, t["name"]
        assert affinity_terms(t), t["name"]


# ------------------------------------------------------------------ the PVC
def test_an_existing_cluster_without_a_class_gets_its_default_class():
    claim = m.pvc(settings(provider="existing"))
    assert "storageClassName" not in claim["spec"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.parametrize("access", ["ReadWriteOnce", "ReadWriteMany"])
def test_the_pvc_asks_for_the_chosen_class_and_access(access):
    s = settings(provider="existing", storage_class_name="nfs", volume_access=access)
    spec = m.pvc(s)["spec"]
    assert spec["storageClassName"] == "nfs"
    assert spec["accessModes"] == [access]
    assert spec["resources"] == {"requests": {"storage": s.volume_size}}


@pytest.mark.parametrize(("provider", "cls"), [("k3d", "local-path"), ("kind", "standard")])
def test_a_cluster_distml_made_keeps_its_providers_class(provider, cls):
    assert m.pvc(settings(provider=provider))["spec"]["storageClassName"] == cls
