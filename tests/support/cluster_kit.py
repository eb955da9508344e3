"""Helpers for the cluster runtime tests: a MockContext whose installs make the operators'
Deployments appear, a FakeKube with controllers on a fake clock, the expected commands.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from unittest.mock import Mock

from invoke import Config, MockContext, Result

from k8s import manifests
from k8s.install import capacity, operators, optional_operators, versions
from k8s.install.preflight import Preflight
from k8s.monitoring import stack
from runtime.cluster import ClusterRuntime
from runtime.image import image_tag
from runtime.requests import UpRequest
from tests.support.fakekube import FakeKube, conditions_status

REPO = Path(__file__).resolve().parents[2]
TAG = image_tag(REPO)
OK = Result(exited=0)

# What ml.selection.select writes as publish.json (the fields ml.records.LINEAGE_FIELDS names).
PUBLISH_RECORD = {
    "source": "candidate cnn",
    "model_type": "cnn",
    "val_accuracy": 0.8712,
    "test_accuracy": 0.8655,
    "selected_on": "validation",
    "reason": "cnn has the highest validation accuracy (0.8712)",
    "code_version": TAG,
    "dataset": {"name": "fashion_mnist", "sha256": {"train-images-idx3-ubyte.gz": "3aede38d6186"}},
    "params": {"profile": "quick", "epochs": 3, "learning_rate": 0.008, "seed": 42},
    "version": 2,
    "previous": 1,
    "published_at": "2025-01-02T03:04:05Z",
}

# Which kubectl install brings which Deployments (namespace, name) up.
OPERATOR_DEPLOYMENTS = {
    "training-operator.git": [("kubeflow", "training-operator")],
    "cert-manager.yaml": [("cert-manager", "cert-manager-webhook")],
    "istio-kind-no-mesh/istio.yaml": [("istio-system", "istiod")],
    "net-istio.yaml": [("knative-serving", "net-istio-controller")],
    "kserve.yaml": [("kserve", "kserve-controller-manager")],
    "metrics-server": [("kube-system", "metrics-server")],
    versions.ARGO_WORKFLOWS_URL: [
        (optional_operators.ARGO_NAMESPACE, d) for d in optional_operators.ARGO_DEPLOYMENTS
    ],
    versions.KEDA_URL: [
        (optional_operators.KEDA_NAMESPACE, d) for d in optional_operators.KEDA_DEPLOYMENTS
    ],
}


def available(fake: FakeKube, namespace: str, name: str) -> None:
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
        for needle, deployments in OPERATOR_DEPLOYMENTS.items():
            for ns, name in deployments:
                if needle in command and " apply " in command:
                    available(fake, ns, name)
                elif needle in command and " delete " in command:  # kubectl delete -f
                    fake.remove("apps/v1", "Deployment", name, ns)
        if versions.KEDA_URL in command and " apply " in command:  # its metrics server answers
            fake.put(
                {
                    "apiVersion": optional_operators.APISERVICE_API,
                    "kind": "APIService",
                    "metadata": {"name": optional_operators.KEDA_APISERVICE},
                    "status": conditions_status(("Available", "True")),
                }
            )
        if "kserve-cluster-resources.yaml" in command and " apply " in command:
            api, kind, name = operators.KSERVE_TF_RUNTIME
            fake.put({"apiVersion": api, "kind": kind, "metadata": {"name": name}})
        words = shlex.split(command)
        if "cp" in words and words[words.index("cp") + 1].startswith("distml-data-loader:"):
            target = Path(words[words.index("cp") + 2])
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.name.startswith("serving-"):  # the serving version's publish.json
                target.write_text(json.dumps(PUBLISH_RECORD))
            else:  # a candidate's metrics.json
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


def controller(fake: FakeKube, *, tfjob_state: str | None = "Succeeded", isvc_ready: bool = True):
    """Plays the cluster's controllers on every fake-clock tick (TFJobs end in
    ``tfjob_state`` at once; None leaves them to ``tests.support.fake_training_operator``)."""

    def tick(_t: float) -> None:
        for (api, kind, ns, name), obj in list(fake.objects.items()):
            if obj.get("status"):
                continue
            if kind == "Job":
                fake.set_status(api, kind, ns, name, conditions_status(("Complete", "True")))
            elif kind == "TFJob" and tfjob_state is not None:
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
            elif kind == "Deployment" and name == stack.NAME:  # distml's Prometheus
                fake.set_status(api, kind, ns, name, conditions_status(("Available", "True")))
            elif kind == "Pod" and name == manifests.LOADER_POD:
                fake.set_status(api, kind, ns, name, {"phase": "Running"})
            elif kind == "Pod" and name == manifests.TENSORBOARD_POD:  # its probe passes
                ready = conditions_status(("Ready", "True"), phase="Running")
                fake.set_status(api, kind, ns, name, ready)

    fake.script(tick)


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
ARGO_URL = "https://github.com/argoproj/argo-workflows/releases/download/v4.1.2/install.yaml"
ARGO_INSTALL = KC + f"apply --server-side -n argo -f {ARGO_URL}"
ARGO_REMOVE = KC + f"delete -n argo -f {ARGO_URL} --ignore-not-found --timeout 300s"
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


def kind_results(clusters: str = "") -> dict:
    return {
        "kind get clusters": Result(clusters),
        "docker exec dist-ml-control-plane crictl images -o json": Result('{"images": []}'),
        re.compile(r"^(kind|kubectl|docker|rm -f) .*"): OK,
    }


def set_up(wd, fake):
    runtime(make_ctx(fake, k3d_results(exists=False, imported=False)), wd, fake).up(UpRequest())


def node(need: capacity.Need) -> dict:
    allocatable = {"cpu": f"{need.cpu_m}m", "memory": f"{need.memory_mi}Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "k3d-dist-ml-server-0"},
        "status": {"allocatable": allocatable},
    }
