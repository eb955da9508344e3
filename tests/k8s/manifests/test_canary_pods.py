"""k8s.manifests.canary_pods: the canary's own pod and Service, strictly valid against the
pinned Kubernetes schema; the Service selects the pod and nothing of the predictor's; the
pod is never scraped as the predictor (no InferenceService label: its requests are counted
once, by the predictor pods); the host the weight file names is exactly the one the
predictor's server allows."""

from __future__ import annotations

from k8s.client.ownership import stamp
from k8s.manifests import canary_jobs, canary_pods, inference
from k8s.manifests.names import ISVC_POD_LABEL
from ml import contract
from ml.server import serve
from tests.support import k8s_schemas
from tests.support.manifests_kit import settings


def test_the_pod_and_service_are_valid_and_the_service_selects_only_the_canary():
    s = settings()
    pod, svc = canary_pods.canary_pod(s), canary_pods.canary_service(s)
    for obj in (pod, svc):
        assert k8s_schemas.validate(stamp(obj, "wd-1")) == [], obj["kind"]
    labels = pod["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert ISVC_POD_LABEL not in labels, "Prometheus would count its requests twice"
    assert svc["spec"]["selector"][canary_pods.CANARY_OF_LABEL] == s.service
    (c,) = pod["spec"]["containers"]
    assert c["resources"] == s.predictor_resources.as_dict(), "a predictor's weight, no more"
    assert c["readinessProbe"]["httpGet"]["path"] == contract.READY_PATH
    assert pod["spec"]["restartPolicy"] == "Always", "a crash shows as a restart"
    assert all(m.get("readOnly") for m in c["volumeMounts"])


def test_the_pod_serves_the_canary_folder_with_the_servers_own_parser():
    s = settings()
    (c,) = canary_pods.canary_pod(s)["spec"]["containers"]
    args = serve.parse_args(contract.split_step(c["command"])[1])
    assert args.model_dir == contract.canary_dir(s.mount_path, s.service)
    assert args.canary_dir is None, "it serves the canary as its only version"


def test_the_weight_files_url_names_exactly_the_host_the_predictor_allows():
    s = settings()
    (runtime_container,) = inference.serving_runtime(s)["spec"]["containers"]
    args = runtime_container["args"]
    # KServe puts the InferenceService's name for {{.Name}}.
    filled = [a.replace("{{.Name}}", s.service) for a in args]
    parsed = serve.parse_args(filled)
    assert parsed.canary_elsewhere, "the predictor never loads a canary itself"
    weight_job = canary_jobs.weight_job(s, 20, shadow=0)
    (job_container,) = weight_job["spec"]["template"]["spec"]["containers"]
    url = job_container["command"][job_container["command"].index("--url") + 1]
    assert url == f"http://{parsed.canary_host}:8080" == canary_pods.url(s)
