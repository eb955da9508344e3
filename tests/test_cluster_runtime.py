"""The cluster runtime without a cluster: exact CLI commands (invoke.MockContext), the
objects applied (an in-memory FakeKube with a fake clock), --dry, idempotence, failures.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from unittest.mock import Mock

import pytest
from invoke import Config, MockContext, Result

from common.errors import DistmlError
from k8s import capacity, manifests, operators
from k8s.preflight import Preflight
from k8s.settings import MODEL_TYPES, Settings
from ml.contract import RAW_FILES
from runtime.cluster import ClusterError, ClusterRuntime, expected_replicas
from runtime.cluster.serve import SETTLE_S
from runtime.image import image_tag
from runtime.workdir import Workdir
from tests.fakekube import FakeClock, FakeKube, conditions_status
from tests.k8s_schemas import validate

REPO = Path(__file__).resolve().parents[1]
TAG = image_tag(REPO)
OK, FAIL = Result(exited=0), Result(exited=1)
DATA = Path(os.environ.get("DISTML_DATA_DIR") or REPO.parent / "shared/data/fashion-mnist")

# Which kubectl install brings which Deployment (namespace, name) up.
OPERATOR_DEPLOYMENTS = {
    "training-operator.git": ("kubeflow", "training-operator"),
    "cert-manager.yaml": ("cert-manager", "cert-manager-webhook"),
    "istio-kind-no-mesh/istio.yaml": ("istio-system", "istiod"),
    "net-istio.yaml": ("knative-serving", "net-istio-controller"),
    "kserve.yaml": ("kserve", "kserve-controller-manager"),
    "metrics-server": ("kube-system", "metrics-server"),
}


def _available(fake: FakeKube, namespace: str, name: str) -> None:
    fake.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "status": conditions_status(("Available", "True")),
        }
    )


def make_ctx(fake: FakeKube, results: dict, dry: bool = False) -> MockContext:
    """A MockContext whose kubectl installs make the operators' Deployments appear, and
    whose `kubectl cp` of a candidate's metrics.json off the volume delivers one."""
    results = {**results, re.compile(r"^kubectl .* cp distml-data-loader:.*"): OK}
    c = MockContext(config=Config(overrides={"run": {"dry": dry}}), run=results, repeat=True)
    inner = c.run

    def hooked(command, *args, **kwargs):
        result = inner(command, *args, **kwargs)
        if dry:
            return result
        for needle, (ns, name) in OPERATOR_DEPLOYMENTS.items():
            if needle in command and " apply " in command:
                _available(fake, ns, name)
        if "kserve-cluster-resources.yaml" in command and " apply " in command:
            api, kind, name = operators.KSERVE_TF_RUNTIME
            fake.put({"apiVersion": api, "kind": kind, "metadata": {"name": name}})
        words = shlex.split(command)
        if "cp" in words and words[words.index("cp") + 1].startswith("distml-data-loader:"):
            target = Path(words[words.index("cp") + 2])
            target.parent.mkdir(parents=True, exist_ok=True)
            history = [{"epoch": 1, "loss": 0.9, "accuracy": 0.7, "val_accuracy": 0.81}]
            target.write_text(json.dumps({"history": history, "final": history[-1]}))
        if "patch" in words and "configmap" in words:  # what the API server would store
            ns, name = words[words.index("-n") + 1], words[words.index("configmap") + 1]
            cm = fake.get("v1", "ConfigMap", name, ns) or {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns},
            }
            cm.setdefault("data", {}).update(json.loads(words[words.index("-p") + 1])["data"])
            fake.put(cm)
        if "patch" in words and "istiod" in words:  # istiod's requests, its HPA's max
            body = json.loads(words[words.index("-p") + 1])
            kind = "Deployment" if "deployment" in words else "HorizontalPodAutoscaler"
            api = "apps/v1" if kind == "Deployment" else "autoscaling/v2"
            obj = fake.get(api, kind, "istiod", "istio-system") or {
                "apiVersion": api,
                "kind": kind,
                "metadata": {"name": "istiod", "namespace": "istio-system"},
            }
            obj["spec"] = body["spec"]
            fake.put(obj)
        if "patch" in words and "istio-ingressgateway" in words:
            spec = json.loads(words[words.index("-p") + 1])["spec"]
            fake.put(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system"},
                    "spec": spec,
                }
            )
        return result

    c.run = Mock(wraps=hooked)
    return c


def kinds(fake: FakeKube) -> list[str]:
    return [o["kind"] for o in fake.applied]


def commands(c: MockContext) -> list[str]:
    return [call.args[0] for call in c.run.call_args_list]


def controller(fake: FakeKube, *, tfjob_state: str = "Succeeded", isvc_ready: bool = True):
    """Plays the cluster's controllers on every fake-clock tick."""

    def tick(_t: float) -> None:
        for (api, kind, ns, name), obj in list(fake.objects.items()):
            if obj.get("status"):
                continue
            if kind == "Job":
                fake.set_status(api, kind, ns, name, conditions_status(("Complete", "True")))
            elif kind == "TFJob":
                fake.set_status(
                    api,
                    kind,
                    ns,
                    name,
                    conditions_status(
                        ("Created", "True"),
                        (tfjob_state, "True"),
                        replicaStatuses={"Worker": {"succeeded": 2}},
                    ),
                )
            elif kind == "InferenceService" and isvc_ready:
                fake.set_status(
                    api,
                    kind,
                    ns,
                    name,
                    # KServe 0.20: {{ .Name }}-{{ .Namespace }}.{{ .IngressDomain }}
                    conditions_status(("Ready", "True"), url=f"http://{name}-{ns}.example.com"),
                )
            elif kind == "Pod" and name == manifests.LOADER_POD:
                fake.set_status(api, kind, ns, name, {"phase": "Running"})

    fake.script(tick)


@pytest.fixture
def fake() -> FakeKube:
    kube = FakeKube(FakeClock())
    controller(kube)
    return kube


@pytest.fixture
def wd(tmp_path) -> Workdir:
    return Workdir.at(tmp_path / "wd")


def runtime(c, wd, fake, provider="k3d", lines=None, problems=()):
    lines = [] if lines is None else lines
    return ClusterRuntime(
        c,
        provider,
        wd,
        REPO,
        out=lines.append,
        kube=fake,
        clock=fake.clock,
        preflight=lambda *a, **k: Preflight(
            problems=list(problems), versions={"k3d": "5.8.3", "kubectl": "1.33.1"}
        ),
        port_free=lambda port: True,  # whatever else this machine runs on 8080
    )


K3D_CREATE = (
    "k3d cluster create dist-ml --image rancher/k3s:v1.33.4-k3s1 --servers 1 --agents 0 "
    "--k3s-arg '--disable=traefik@server:*' -p '8080:80@loadbalancer' --wait --timeout 300s"
)
KC = "kubectl --context k3d-dist-ml "
KNATIVE_INSTALL = [
    KC + "apply --server-side --force-conflicts -k "
    "'github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.0'",
    KC + "apply --server-side -f https://github.com/cert-manager/cert-manager/releases/"
    "download/v1.17.2/cert-manager.yaml",
    KC + "apply -f https://raw.githubusercontent.com/knative-extensions/net-istio/"
    "knative-v1.21.1/third_party/istio-latest/istio-kind-no-mesh/istio.yaml",
    KC + "-n istio-system patch deployment istiod -p "
    '\'{"spec": {"template": {"spec": {"containers": [{"name": "discovery", "resources": '
    '{"requests": {"cpu": "5m", "memory": "32Mi"}}}]}}}}\'',
    KC + '-n istio-system patch hpa istiod --type merge -p \'{"spec": {"maxReplicas": 1}}\'',
    KC + "apply -f https://github.com/knative/serving/releases/download/knative-v1.21.1/"
    "serving-crds.yaml",
    KC + "apply -f https://github.com/knative/serving/releases/download/knative-v1.21.1/"
    "serving-core.yaml",
    KC + "apply -f https://github.com/knative-extensions/net-istio/releases/download/"
    "knative-v1.21.1/net-istio.yaml",
    KC + "-n knative-serving patch configmap config-domain --type merge -p "
    '\'{"data": {"example.com": ""}}\'',
    KC + "-n knative-serving patch configmap config-deployment --type merge -p "
    '\'{"data": {"registries-skipping-tag-resolving": '
    '"kind.local,ko.local,dev.local,docker.io,index.docker.io"}}\'',
    KC + "apply --server-side -f https://github.com/kserve/kserve/releases/download/v0.20.0/"
    "kserve-crds.yaml",
    KC + "apply --server-side -f https://github.com/kserve/kserve/releases/download/v0.20.0/"
    "kserve.yaml",
    KC + "apply --server-side -f https://github.com/kserve/kserve/releases/download/v0.20.0/"
    "kserve-cluster-resources.yaml",
]


def k3d_results(*, exists: bool, imported: bool) -> dict:
    images = [{"repoTags": [f"docker.io/library/{TAG}"]}] if imported else []
    return {
        "k3d cluster list -o json": Result(json.dumps([{"name": "dist-ml"}] if exists else [])),
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}": OK,
        "docker exec k3d-dist-ml-server-0 crictl images -o json": Result(
            json.dumps({"images": images})
        ),
        re.compile(r"^(kubectl|docker save|k3d image import|rm -f|k3d cluster create) .*"): OK,
    }


# ---------------------------------------------------------------------------- up
def test_up_on_an_empty_machine_runs_every_step_in_order(wd, fake):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up() == 0
    tar = wd.root / "build" / "distml-image.tar"
    assert commands(c) == [
        "k3d cluster list -o json",
        K3D_CREATE,
        *KNATIVE_INSTALL,
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}",
        "docker exec k3d-dist-ml-server-0 crictl images -o json",
        f"docker save -o {tar} {TAG}",
        f"k3d image import {tar} -c dist-ml",
        f"rm -f {tar}",
    ]
    assert [f"{o['kind']}/{o['metadata']['name']}" for o in fake.applied] == [
        "Namespace/kubeflow",
        "Namespace/kserve",  # kserve.yaml does not carry its own Namespace
        "PersistentVolumeClaim/strategy-volume",
        "Job/distml-ingest",
    ]
    # The training operator's webhook was probed with a server-side dry-run TFJob.
    assert [o["kind"] for o in fake.dry_runs] == ["TFJob"]
    state = wd.load_state()
    assert state["up"] and state["runtime"] == "k3d" and state["image"] == TAG
    assert state["serving_mode"] == "knative"
    assert any("ready; next: invoke train-all" in line for line in lines)


def test_a_second_up_reports_every_step_as_already_done_and_changes_nothing(wd, fake):
    runtime(make_ctx(fake, k3d_results(exists=False, imported=False)), wd, fake).up()
    applied_before = len(fake.applied)
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up() == 0
    # Only read-only queries ran: no create, no install, no import, no new Job.
    assert commands(c) == [
        "k3d cluster list -o json",
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}",
        "docker exec k3d-dist-ml-server-0 crictl images -o json",
    ]
    new = [o["kind"] for o in fake.applied[applied_before:]]
    assert new == ["Namespace", "PersistentVolumeClaim"]  # server-side apply: no-op
    steps = [
        line
        for line in lines
        if ": " in line and not line.startswith(("found", "==")) and "next:" not in line
    ]
    assert steps and all("already" in line for line in steps), steps


def test_an_up_that_stopped_before_kserves_cluster_resources_applies_them_next_time(wd, fake):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake).up() == 0
    fake.remove(*operators.KSERVE_TF_RUNTIME)  # as if the first `up` had timed out there
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up() == 0
    assert "KServe v0.20.0: already installed" in lines
    ran = commands(c)
    assert [x for x in ran if "kserve" in x and " apply " in x] == [KNATIVE_INSTALL[-1]]


def test_preflight_problems_stop_up_before_anything_is_created(wd, fake):
    c = make_ctx(fake, {})
    rt = runtime(c, wd, fake, problems=["k3d: not found on PATH: install k3d"])
    with pytest.raises(ClusterError, match=r"preflight failed, nothing was created:\n  - k3d"):
        rt.up()
    assert commands(c) == [] and fake.applied == [] and not wd.root.exists()


def test_source_dir_is_checked_then_copied_into_the_volume(wd, fake, tmp_path):
    with pytest.raises(ClusterError, match=r"lacks train-images-idx3-ubyte\.gz"):
        runtime(make_ctx(fake, {}), wd, fake).up(source_dir=str(tmp_path))
    src = tmp_path / "data"
    src.mkdir()
    for name in RAW_FILES:
        (src / name).write_bytes(b"x")
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake).up(source_dir=str(src)) == 0
    cp = [cmd for cmd in commands(c) if " cp " in cmd]
    assert cp == [
        f"{KC}-n kubeflow cp {src / n} distml-data-loader:/trained_model/raw/fashion-mnist/{n}"
        for n in RAW_FILES
    ]
    ingest = fake.obj("batch/v1", "Job", "distml-ingest", "kubeflow")
    assert ingest["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == [
        "--source-dir",
        "/trained_model/raw/fashion-mnist",
    ]
    assert ("v1", "Pod", "kubeflow", "distml-data-loader") in fake.deleted


def test_raw_file_names_match_the_pod_side():
    from ml.data import FILES

    assert set(RAW_FILES) == set(FILES)


def test_kind_standard_mode_installs_metrics_server_and_exposes_a_node_port(wd, fake):
    results = {
        "kind get clusters": Result(""),
        re.compile(r"^(kind|kubectl|docker|rm -f) .*"): OK,
        "docker exec dist-ml-control-plane crictl images -o json": Result('{"images": []}'),
    }
    c = make_ctx(fake, results)
    assert runtime(c, wd, fake, provider="kind").up(serving_mode="standard") == 0
    cmds = commands(c)
    create = next(cmd for cmd in cmds if cmd.startswith("kind create cluster"))
    assert create == (
        f"kind create cluster --name dist-ml --image kindest/node:v1.33.1 "
        f"--config {wd.root / 'kind-config.yaml'} --wait 300s"
    )
    config = (wd.root / "kind-config.yaml").read_text()
    assert "containerPort: 31080" in config and "hostPort: 8080" in config
    assert any("metrics-server" in cmd and "components.yaml" in cmd for cmd in cmds)
    assert any("--kubelet-insecure-tls" in cmd for cmd in cmds)
    assert not any("istio" in cmd or "knative" in cmd for cmd in cmds)
    assert any(cmd.startswith("kind load image-archive") for cmd in cmds)
    # No cluster-wide default-mode patch: the InferenceService names its mode itself.
    assert not any("inferenceservice-config" in cmd for cmd in cmds)


def kind_results(clusters: str = "") -> dict:
    return {
        "kind get clusters": Result(clusters),
        "docker exec dist-ml-control-plane crictl images -o json": Result('{"images": []}'),
        re.compile(r"^(kind|kubectl|docker|rm -f) .*"): OK,
    }


def test_kind_knative_exposes_the_gateway_on_the_mapped_node_port_once(wd, fake):
    c = make_ctx(fake, kind_results())
    assert runtime(c, wd, fake, provider="kind").up() == 0
    patch = [cmd for cmd in commands(c) if "istio-ingressgateway" in cmd]
    assert patch == [
        "kubectl --context kind-dist-ml -n istio-system patch service istio-ingressgateway -p "
        '\'{"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 31080}]}}\''
    ]
    c2 = make_ctx(fake, kind_results("dist-ml\n"))
    assert runtime(c2, wd, fake, provider="kind").up() == 0
    assert not any("patch" in cmd for cmd in commands(c2))


def test_switching_serving_mode_on_a_set_up_cluster_is_refused(wd, fake):
    runtime(make_ctx(fake, k3d_results(exists=False, imported=False)), wd, fake).up()
    with pytest.raises(ClusterError, match="needs a fresh cluster: `invoke down`"):
        runtime(make_ctx(fake, {}), wd, fake).up(serving_mode="standard")


# ---------------------------------------------------------------------------- dry
def test_dry_up_prints_commands_and_objects_in_order_and_touches_nothing(wd, fake):
    results = {
        "k3d cluster list -o json": Result("[]"),
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}": OK,
        "docker exec k3d-dist-ml-server-0 crictl images -o json": Result('{"images": []}'),
        re.compile(".*"): OK,
    }
    c = make_ctx(fake, results, dry=True)
    lines = []
    rt = ClusterRuntime(
        c,
        "k3d",
        wd,
        REPO,
        out=lines.append,
        clock=fake.clock,
        preflight=lambda *a, **k: Preflight(problems=["k3d: not found on PATH"]),
    )
    assert rt.up() == 0
    assert not wd.root.exists()  # nothing written
    assert fake.applied == []  # the real seam is never built under --dry
    assert commands(c)[1] == K3D_CREATE
    assert commands(c)[2 : 2 + len(KNATIVE_INSTALL)] == KNATIVE_INSTALL
    text = "\n".join(lines)
    assert "preflight (a real run would stop here): k3d: not found" in text
    order = [text.index(f"would apply {k}") for k in ("Namespace", "PersistentVolumeClaim", "Job")]
    assert order == sorted(order)
    assert "kind: PersistentVolumeClaim" in text  # the object itself, as YAML


def test_invoke_dry_end_to_end_prints_and_creates_nothing(tmp_path):
    """The real CLI: `invoke --dry up --runtime kind` on this machine (no cluster here)."""
    env = {**os.environ, "INVOKE_WORKDIR": str(tmp_path / "wd")}
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "--dry", "up", "--runtime", "kind"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "kind create cluster --name dist-ml --image kindest/node:v1.33.1" in out
    assert "would apply Namespace kubeflow" in out
    assert "would apply PersistentVolumeClaim kubeflow/strategy-volume" in out
    assert out.index("kind create cluster") < out.index("would apply Namespace")
    assert out.index("would apply Namespace") < out.index("kserve.yaml")
    assert not (tmp_path / "wd").exists()


# ---------------------------------------------------------------------------- train
def set_up(wd, fake):
    runtime(make_ctx(fake, k3d_results(exists=False, imported=False)), wd, fake).up()


def test_train_all_submits_one_tfjob_per_model_together_and_waits(wd, fake):
    set_up(wd, fake)
    lines = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.train(["cnn", "cnn_dropout", "cnn_batchnorm"], epochs=1) == 0
    tfjobs = [o for o in fake.applied if o["kind"] == "TFJob"]
    assert [j["metadata"]["name"] for j in tfjobs] == [
        "train-cnn",
        "train-cnn-dropout",
        "train-cnn-batchnorm",
    ]
    assert all(j["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 2 for j in tfjobs)
    assert any("Succeeded" in line for line in lines)
    assert not any(line.startswith("TFJob train-cnn: Succeeded (") for line in lines)  # once
    assert lines[-1] == "next: invoke deploy"
    # The candidates' metrics came off the volume: accuracy table and training curves.
    assert any(line.startswith("cnn ") and "0.8100" in line for line in lines)
    assert (wd.reports / "training-curves.png").stat().st_size > 5_000
    assert ("v1", "Pod", "kubeflow", "distml-data-loader") in fake.deleted
    assert "dataset: already prepared" in "\n".join(lines)  # ingest Job completed in up


def test_resubmitting_replaces_the_finished_job_of_the_same_name(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(["cnn"])
    lines = []
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).train(["cnn"], epochs=2) == 0
    assert ("kubeflow.org/v1", "TFJob", "kubeflow", "train-cnn") in fake.deleted
    assert "TFJob train-cnn: replacing the succeeded job" in lines
    job = fake.obj("kubeflow.org/v1", "TFJob", "train-cnn", "kubeflow")
    cmd = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--epochs") + 1] == "2"


def test_a_failed_tfjob_is_reported_with_its_pods_and_exits_nonzero(wd):
    fake = FakeKube(FakeClock())
    controller(fake, tfjob_state="Failed")
    set_up(wd, fake)
    fake.add_pod(
        "kubeflow",
        "train-cnn-worker-1",
        {"training.kubeflow.org/job-name": "train-cnn"},
        phase="Failed",
        ready=False,
        exit_code=1,
    )
    fake.set_log("train-cnn-worker-1", "Traceback ...\nValueError: boom")
    lines = []
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).train(["cnn"]) == 1
    text = "\n".join(lines)
    assert "ValueError: boom" in text
    assert "next: fix the cause above, then `invoke train --model-type cnn`" in text


def test_train_needs_up_and_known_models(wd, fake):
    rt = runtime(make_ctx(fake, {}), wd, fake)
    with pytest.raises(ClusterError, match="run `invoke up --runtime k3d` first"):
        rt.train(["cnn"])
    set_up(wd, fake)
    with pytest.raises(ClusterError, match="unknown model type 'resnet'; valid: cnn"):
        runtime(make_ctx(fake, {}), wd, fake).train(["resnet"])


def test_gpus_per_worker_reach_the_tfjob(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(["cnn"], gpus_per_worker=1)
    job = fake.obj("kubeflow.org/v1", "TFJob", "train-cnn", "kubeflow")
    limits = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"
    ]["limits"]
    assert limits["nvidia.com/gpu"] == "1"


# ---------------------------------------------------------------------------- deploy
def test_deploy_selects_then_serves_and_prints_url_host_and_curl(wd, fake):
    set_up(wd, fake)
    lines = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.deploy(min_accuracy=0.8, max_replicas=4) == 0
    applied = kinds(fake)
    assert applied[-3:] == ["Job", "ServingRuntime", "InferenceService"]
    select = fake.obj("batch/v1", "Job", "distml-select", "kubeflow")
    assert "0.8" in select["spec"]["template"]["spec"]["containers"][0]["command"]
    isvc = fake.obj("serving.kserve.io/v1beta1", "InferenceService", "tf-mnist", "kubeflow")
    assert isvc["spec"]["predictor"]["maxReplicas"] == 4
    text = "\n".join(lines)
    assert "serving tf-mnist at http://tf-mnist-kubeflow.example.com" in text
    assert "with Host: tf-mnist-kubeflow.example.com" in text
    assert (
        "curl -s -H 'Host: tf-mnist-kubeflow.example.com' -H 'Content-Type: application/json'"
        in text
    )
    assert "http://localhost:8080/v1/models/tf-mnist:predict" in text
    assert (wd.root / "sample-request.json").is_file()
    # A redeploy updates in place: the predictor polls for new versions itself.
    lines.clear()
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).deploy() == 0
    assert any("updated in place" in line for line in lines)


def test_a_refused_selection_fails_deploy_and_serves_nothing_new(wd):
    fake = FakeKube(FakeClock())
    controller(fake)
    set_up(wd, fake)

    def fail_select(_t):
        key = ("batch/v1", "Job", "kubeflow", "distml-select")
        if key in fake.objects:
            fake.set_status(*key, conditions_status(("Failed", "True"), reason="BackoffLimit"))

    fake.clock.hooks.insert(0, fail_select)
    with pytest.raises(ClusterError, match="selection failed"):
        runtime(make_ctx(fake, {}), wd, fake).deploy(min_accuracy=0.99)
    assert "InferenceService" not in kinds(fake)


def test_tfserving_predictor_and_request_logger(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).deploy(predictor="tfserving", request_logger=True)
    applied = kinds(fake)
    assert "ServingRuntime" not in applied and {"Deployment", "Service"} <= set(applied)
    isvc = fake.obj("serving.kserve.io/v1beta1", "InferenceService", "tf-mnist", "kubeflow")
    assert isvc["spec"]["predictor"]["model"]["modelFormat"]["name"] == "tensorflow"
    assert "logger" in isvc["spec"]["predictor"]


def test_deploy_timeout_explains_why_the_isvc_is_not_ready(wd):
    fake = FakeKube(FakeClock())
    controller(fake, isvc_ready=False)
    set_up(wd, fake)
    fake.put(
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "tf-mnist", "namespace": "kubeflow"},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "RevisionMissing",
                        "message": "Revision failed: 0/1 nodes: Insufficient cpu",
                    }
                ]
            },
        }
    )
    with pytest.raises(ClusterError, match="RevisionMissing"):
        runtime(make_ctx(fake, {}), wd, fake).deploy(timeout=30)


# ---------------------------------------------------------------------------- loadtest
def test_loadtest_goes_through_the_ingress_and_checks_scale_out(wd, fake, monkeypatch):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).deploy()
    seen = {}

    def fake_run(url, model, payload, out_dir, **kw):
        seen.update(url=url, model=model, **kw)
        samples = [{"t_s": t, "ready": kw["replica_sampler"]()} for t in range(3)]
        return {
            "requests": 100,
            "failures": 0,
            "rps": 10.0,
            "replicas": samples,
            "replicas_start": samples[0]["ready"],
            "replicas_peak": max(s["ready"] for s in samples),
        }

    monkeypatch.setattr("loadtest.run.run_loadtest", fake_run)
    labels = {"serving.kserve.io/inferenceservice": "tf-mnist"}
    fake.add_pod("kubeflow", "tf-mnist-predictor-1", labels)
    fake.add_pod(
        "kubeflow",
        "tf-mnist-predictor-2",
        labels,
        phase="Pending",
        ready=False,
        unschedulable="0/1 nodes are available: 1 Insufficient cpu.",
    )
    lines = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.loadtest(concurrency=5) == 1  # one ready replica throughout: no scale-out
    assert seen["url"] == "http://localhost:8080"  # the ingress, not a port-forward
    assert seen["host_header"] == "tf-mnist-kubeflow.example.com"
    assert seen["expected_replicas"] == 8
    # Scale-out is expected: keep counting after the load while new pods start.
    assert seen["settle_s"] == SETTLE_S["knative"] > 0
    text = "\n".join(lines)
    assert "error: no scale-out" in text
    assert "tf-mnist-predictor-2: 0/1 nodes are available: 1 Insufficient cpu." in text
    assert "ran out of CPU" in text
    # More pods become ready: scale-out seen, exit 0.
    fake.add_pod("kubeflow", "tf-mnist-predictor-3", labels)

    def rising(url, model, payload, out_dir, **kw):
        fake_summary = fake_run(url, model, payload, out_dir, **kw)
        fake_summary["replicas_start"] = 1
        return fake_summary

    monkeypatch.setattr("loadtest.run.run_loadtest", rising)
    assert runtime(make_ctx(fake, {}), wd, fake).loadtest(concurrency=5) == 0
    runtime(make_ctx(fake, {}), wd, fake).loadtest(concurrency=5, expect_scale_out=False)
    assert seen["settle_s"] == 0  # nothing to wait for


def test_standard_mode_waits_for_the_hpa_sync_metrics_and_pod_start():
    # metrics-server's --metric-resolution (the real components.yaml) is what SETTLE_S uses.
    from k8s import versions
    from runtime.cluster import serve
    from tests.upstream import objects

    server = next(o for o in objects(versions.METRICS_SERVER_URL) if o["kind"] == "Deployment")
    args = server["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--metric-resolution={serve.METRIC_RESOLUTION_S}s" in args
    assert SETTLE_S["standard"] == (
        serve.HPA_SYNC_S + serve.METRIC_RESOLUTION_S + serve.PREDICTOR_START_S
    )


@pytest.mark.parametrize(
    ("concurrency", "target", "max_replicas", "expected"),
    [(5, 1, 8, 8), (5, 1, 3, 3), (1, 1, 8, 2), (10, 2, 20, 8)],
)
def test_expected_replicas_follow_the_kpa_rule(concurrency, target, max_replicas, expected):
    assert expected_replicas(concurrency, target, max_replicas) == expected


# ---------------------------------------------------------------------------- down, render
def test_down_deletes_the_cluster_and_purge_removes_built_images(wd, fake):
    set_up(wd, fake)
    wd.update_state(built_images=[TAG])
    c = make_ctx(fake, {**k3d_results(exists=True, imported=True), re.compile(".*"): OK})
    lines = []
    assert runtime(c, wd, fake, lines=lines).down(purge=True) == 0
    assert commands(c) == [
        "k3d cluster list -o json",
        "k3d cluster delete dist-ml",
        f"docker image rm {TAG}",
    ]
    assert not wd.root.exists()


def test_down_keep_cluster_deletes_only_what_distml_applied(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(["cnn"])
    c = make_ctx(fake, {})
    lines = []
    assert runtime(c, wd, fake, lines=lines).down(keep_cluster=True) == 0
    assert commands(c) == []  # no cluster delete
    deleted = {(k[1], k[3]) for k in fake.deleted}
    assert {("TFJob", "train-cnn"), ("Job", "distml-ingest")} <= deleted
    assert ("PersistentVolumeClaim", "strategy-volume") in deleted
    assert not any(kind == "Namespace" for kind, _ in deleted)  # the operator lives there
    assert ("Deployment", "training-operator") not in deleted


@pytest.mark.parametrize("provider", ["k3d", "kind", "minikube"])
@pytest.mark.parametrize("mode", ["knative", "standard"])
def test_render_writes_every_object_in_apply_order_and_each_is_valid(
    tmp_path, provider, mode, fake
):
    wd = Workdir.at(tmp_path / "wd")
    rt = ClusterRuntime(make_ctx(fake, {}), provider, wd, REPO, out=lambda _: None)
    written = rt.render(tmp_path / "out", serving_mode=mode)
    if provider == "kind":  # the cluster config the script's `kind create cluster` uses
        assert written[-1].name == "kind-config.yaml"
        assert "--config kind-config.yaml" in written[0].read_text()
        assert "hostPort: 8080" in written[-1].read_text()
        written = written[:-1]
    files = written
    names = [p.name for p in files]
    assert names[0] == "00-operators.sh"
    assert names[1:] == sorted(names[1:])
    kinds = [n.split("-")[2] if n.split("-")[1] != "train" else n for n in names[1:]]
    assert kinds[0] == "namespace"
    import yaml

    objects = [yaml.safe_load(p.read_text()) for p in files[1:]]
    assert [o["kind"] for o in objects][:2] == ["Namespace", "PersistentVolumeClaim"]
    assert [o["kind"] for o in objects].count("TFJob") == 3
    for obj in objects:
        assert validate(obj) == [], obj["metadata"]["name"]
    script = files[0].read_text()
    assert ("knative" in script) == (mode == "knative")
    assert not wd.root.exists()  # render touches no cluster and no work dir


def test_status_shows_cluster_operators_jobs_isvc_and_replicas(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(["cnn"])
    runtime(make_ctx(fake, {}), wd, fake).deploy()
    fake.add_pod(
        "kubeflow", "tf-mnist-predictor-1", {"serving.kserve.io/inferenceservice": "tf-mnist"}
    )
    lines = []
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake, lines=lines).status() == 0
    text = "\n".join(lines)
    assert re.search(r"cluster +dist-ml \(k3d, context k3d-dist-ml\): running", text)
    assert re.search(r"training operator +available", text)
    assert re.search(r"TFJob train-cnn +Succeeded; workers succeeded 2", text)
    assert re.search(
        r"InferenceService tf-mnist +Ready, http://tf-mnist-kubeflow.example.com, 1 ready", text
    )


def test_status_without_a_cluster_says_how_to_make_one(wd, fake):
    lines = []
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake, lines=lines).status() == 0
    assert any("not found (run `invoke up`)" in line for line in lines)
    assert fake.calls == [] or all(call[0] != "apply" for call in fake.calls)


def test_a_busy_ingress_port_stops_up_before_the_cluster_is_created(wd, fake):
    import socket

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        c = make_ctx(fake, k3d_results(exists=False, imported=False))
        rt = ClusterRuntime(
            c,
            "k3d",
            wd,
            REPO,
            ingress_port=port,
            out=lambda _: None,
            kube=fake,
            clock=fake.clock,
            preflight=lambda *a, **k: Preflight(),
        )
        with pytest.raises(ClusterError, match=f"host port {port} is in use"):
            rt.up()
    assert not any("cluster create" in cmd for cmd in commands(c))


def test_a_permanent_kubectl_error_fails_up_at_once_with_kubectls_message(wd, fake):
    bad = (
        "error: unable to read URL "
        '"https://github.com/kserve/kserve/releases/download/v0.20.0/kserve-crds.yaml", '
        "server reported 404 Not Found, status code=404"
    )
    # The specific pattern comes first: MockContext takes the first that matches.
    results = {
        re.compile(r".*kserve-crds\.yaml$"): Result(stderr=bad, exited=1),
        **k3d_results(exists=False, imported=False),
    }
    c = make_ctx(fake, results)
    started = fake.clock.now
    with pytest.raises(DistmlError, match="404 Not Found"):  # the task prints `error: ...`
        runtime(c, wd, fake).up()
    assert fake.clock.now - started < 5  # no 600 s of retries
    assert sum("kserve-crds.yaml" in cmd for cmd in commands(c)) == 1


def test_a_webhook_race_is_retried_until_it_passes(wd, fake):
    refused = Result(
        stderr='Error from server (InternalError): failed calling webhook "webhook.cert-manager'
        '.io": connection refused',
        exited=1,
    )
    attempts = iter([refused, refused, OK])
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    inner = c.run

    def flaky(command, *args, **kwargs):
        if command.endswith("kserve.yaml"):
            result = next(attempts)
            if result.ok:
                _available(fake, "kserve", "kserve-controller-manager")
            return result
        return inner(command, *args, **kwargs)

    c.run = Mock(wraps=flaky)
    lines = []
    assert runtime(c, wd, fake, lines=lines).up() == 0
    assert sum(cmd.endswith("/kserve.yaml") for cmd in commands(c)) == 3
    assert any("not ready yet" in line and "connection refused" in line for line in lines)


def test_parallel_runs_the_jobs_in_waves(wd, fake):
    set_up(wd, fake)
    lines = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.train(["cnn", "cnn_dropout"], parallel=1) == 0
    assert "1 job(s) at a time, 2 waves" in lines
    first_done = next(i for i, x in enumerate(lines) if "train-cnn " in x and "Succeeded" in x)
    second_submitted = lines.index("TFJob train-cnn-dropout: submitted")
    assert first_done < second_submitted


def node(need: capacity.Need) -> dict:
    allocatable = {"cpu": f"{need.cpu_m}m", "memory": f"{need.memory_mi}Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "k3d-dist-ml-server-0"},
        "status": {"allocatable": allocatable},
    }


def test_train_all_runs_in_waves_that_fit_a_small_node_and_says_so(wd, fake):
    set_up(wd, fake)
    s = Settings(image=TAG, provider="k3d", serving_mode="knative")
    fake.put(node(capacity.requirement(s, 2)))  # room for two jobs' workers, not three
    lines = []
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).train(list(MODEL_TYPES)) == 0
    said = [x for x in lines if x.startswith("the node offers pods")]
    assert len(said) == 1 and "3 TFJobs at once need" in said[0]
    assert said[0].endswith("running 2 at a time")
    assert "2 job(s) at a time, 2 waves" in lines


def test_train_all_runs_everything_at_once_on_a_node_that_holds_it(wd, fake):
    set_up(wd, fake)
    fake.put(node(capacity.DOCUMENTED_NODE))
    lines = []
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).train(list(MODEL_TYPES)) == 0
    assert not [x for x in lines if "at a time" in x]


def test_ctrl_c_on_a_cluster_says_the_jobs_keep_running(wd, fake, capsys):
    from invoke import Exit

    import tasks

    rt = runtime(make_ctx(fake, {}), wd, fake)

    def interrupted_train(*args, **kwargs):
        raise KeyboardInterrupt

    rt.train = interrupted_train.__get__(rt)  # a bound method, as tasks calls it
    with pytest.raises(Exit) as info:
        tasks._call(rt.train, ["cnn"])
    assert info.value.code == 130
    err = capsys.readouterr().err
    assert "jobs already submitted keep running in the cluster" in err
    assert "invoke down --keep-cluster" in err
