"""runtime/cluster/serving.py: serving on a cluster: deploy (selection, InferenceService),
its failures, the load test through the ingress and the replicas the autoscaler should
reach.
"""

from __future__ import annotations

import pytest

from runtime.cluster import ClusterError, expected_replicas
from runtime.cluster.serving import SETTLE_S
from runtime.requests import DeployRequest, LoadtestRequest
from tests.support.cluster_kit import (
    controller,
    kinds,
    make_ctx,
    runtime,
    set_up,
)
from tests.support.fakekube import FakeClock, FakeKube, conditions_status


def test_deploy_selects_then_serves_and_prints_url_host_and_curl(wd, fake):
    set_up(wd, fake)
    lines = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.deploy(DeployRequest(min_accuracy=0.8, max_replicas=4)) == 0
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
    assert runtime(make_ctx(fake, {}), wd, fake, lines=lines).deploy(DeployRequest()) == 0
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
        runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest(min_accuracy=0.99))
    assert "InferenceService" not in kinds(fake)


def test_tfserving_predictor_and_request_logger(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).deploy(
        DeployRequest(predictor="tfserving", request_logger=True)
    )
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
    rt = runtime(make_ctx(fake, {}), wd, fake)
    rt.deploy_timeout_s = 30
    with pytest.raises(ClusterError, match="RevisionMissing"):
        rt.deploy(DeployRequest())


def test_loadtest_goes_through_the_ingress_and_checks_scale_out(wd, fake, monkeypatch):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest())
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

    monkeypatch.setattr("loadtest.runner.run_loadtest", fake_run)
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
    assert (
        rt.loadtest(LoadtestRequest(concurrency=5)) == 1
    )  # one ready replica throughout: no scale-out
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

    monkeypatch.setattr("loadtest.runner.run_loadtest", rising)
    assert runtime(make_ctx(fake, {}), wd, fake).loadtest(LoadtestRequest(concurrency=5)) == 0
    runtime(make_ctx(fake, {}), wd, fake).loadtest(
        LoadtestRequest(concurrency=5, expect_scale_out=False)
    )
    assert seen["settle_s"] == 0  # nothing to wait for


def test_standard_mode_waits_for_the_hpa_sync_metrics_and_pod_start():
    # metrics-server's --metric-resolution (the real components.yaml) is what SETTLE_S uses.
    from k8s.install import versions
    from runtime.cluster import serving as serve
    from tests.support.upstream import objects

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
