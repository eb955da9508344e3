"""k8s.manifests.pods: the TFJob (its workers, names, command, GPU limit), the loader pod
and the ingest Job, TensorBoard's pod, the selection and rollback Jobs, the PVC and the
namespace; and every pod command parses with the CLI the pod runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from k8s import manifests as m
from ml import contract
from ml.contract import MODEL_TYPES
from tests.support.manifests_kit import (
    IMAGE,
    _worker,
    all_objects,
    by_kind,
    containers,
    one,
    settings,
)

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_tfjob_worker_shape() -> None:
    s = settings(workers=3)
    job = m.tfjob(s, "cnn_dropout")
    worker = _worker(job)
    assert list(job["spec"]["tfReplicaSpecs"]) == ["Worker"]
    assert worker["replicas"] == 3
    assert worker["restartPolicy"] == "OnFailure"
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"  # the operator looks for this name
    assert container["ports"] == [
        {"containerPort": 2222, "name": "tfjob-port"},
        {"containerPort": 9464, "name": "metrics"},  # ml/training/train_metrics.py's /metrics
    ]
    assert worker["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert job["spec"]["runPolicy"] == {
        "activeDeadlineSeconds": s.train_deadline_s,
        "backoffLimit": s.max_restarts * s.workers + 1,  # see tfjob_backoff_limit
        "cleanPodPolicy": "None",
    }
    assert job["spec"]["successPolicy"] == "AllWorkers"
    assert job["metadata"]["labels"]["distml/model"] == "cnn_dropout"
    env = {e["name"]: e.get("value") for e in container["env"]}
    # /metrics on the pod's IP, which the downward API gives before the address uses it.
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_IP") < names.index("DISTML_METRICS_ADDRESS")
    (pod_ip,) = [e for e in container["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["DISTML_METRICS_ADDRESS"] == "$(POD_IP):9464"
    assert env["DISTML_JOB"] == "train-cnn-dropout" and env["DISTML_METRICS_LINGER_S"] == "15"
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
        "python", "-m", "ml", "train", "--volume", "/trained_model", "--model-type", "cnn",
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
    # Scheduled beside the predictors' peak (`status` reads the model card through it).
    assert c["resources"]["requests"]["cpu"] == "0" != c["resources"]["limits"]["cpu"]
    ingest = by_kind(objs, "Job")[0]
    assert ingest["metadata"]["name"] == "distml-ingest"
    assert ingest["spec"]["backoffLimit"] == 2
    assert "ttlSecondsAfterFinished" not in ingest["spec"]
    command = ingest["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == [
        "python", "-m", "ml", "ingest", "--volume", "/trained_model",
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
        "python", "-m", "ml", "select", "--volume", "/trained_model", "--service", "tf-mnist",
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


def test_commands_parse_with_the_pod_clis(monkeypatch) -> None:
    from ml.data import ingest
    from ml.selection import select as select_cli
    from ml.server import serve
    from ml.training import train

    objs = all_objects(settings(epochs=2, steps_per_epoch=3), source_dir=True, force=True)
    ingest_cmd = _command(by_kind(objs, "Job")[0])
    args = ingest._parser().parse_args(contract.split_step(ingest_cmd)[1])
    assert (args.volume, args.source_dir) == ("/trained_model", "/trained_model/raw/fashion-mnist")

    for job in by_kind(objs, "TFJob"):
        cmd = _worker(job)["template"]["spec"]["containers"][0]["command"]
        args = train.build_parser().parse_args(contract.split_step(cmd)[1])
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

    # ml.selection.select parses inside main(): run it with the work itself replaced.
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
    assert select_cli.main(contract.split_step(_command(select))[1]) == 0
    kind, volume, service, kwargs = calls[-1]
    assert (kind, str(volume), service) == ("select", "/trained_model", "tf-mnist")
    assert (kwargs["force"], kwargs["min_accuracy"]) == (True, 0.0)
    rollback = m.selection_job(settings(), min_accuracy=0, force=False, rollback=True)
    assert select_cli.main(contract.split_step(_command(rollback))[1]) == 0
    assert calls[-1] == ("rollback", Path("/trained_model"), "tf-mnist")
