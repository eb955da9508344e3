"""`up --with-monitoring`, `deploy --scale-metric`, the status rows Prometheus gives and
`down` on the in-memory cluster: distml's own Prometheus applied stamped in its namespace
and waited for, KEDA in standard mode, both remembered by later `up`s and removed by `down
--keep-cluster`; the KEDA form of the InferenceService when Prometheus answers and KEDA is
there, cpu otherwise (said in one line); the autoscaler a redeploy moved away from deleted."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from k8s.install import optional_operators, versions
from k8s.install.operator_check import CLUSTER_WIDE
from k8s.manifests import INSTANCE_LABEL
from k8s.monitoring import prometheus, stack
from ml.contract import serving_metrics
from runtime.cluster import ClusterError
from runtime.requests import DeployRequest, DownRequest, LoadtestRequest, UpRequest
from tests.support.cluster_kit import KC, commands, k3d_results, make_ctx, runtime
from tests.support.fakekube import FakeKube

NS = "kubeflow"
ISVC = ("serving.kserve.io/v1beta1", "InferenceService", "tf-mnist", NS)
PROM_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service"}


def up(wd, fake, lines=None, mode="standard", **request: Any):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    request = {"with_monitoring": True, **request}
    assert runtime(c, wd, fake, lines=lines).up(UpRequest(serving_mode=mode, **request)) == 0
    # deploy prints a sample request, made by `python -m ml sample` unless it is there: these
    # tests are about scaling, so it is there (the light tier starts no process).
    (wd.root / "sample-request.json").write_text('{"instances": []}\n')
    return c


def prometheus_answers(
    fake: FakeKube,
    values: dict[str, str] | None = None,
    alerts: list[dict[str, Any]] | None = None,
) -> list[str]:
    """distml's Prometheus answering: the predictor job's targets, ``alerts`` as its active
    alerts (none by default), and each query in ``values`` with its value (any other: no
    series). The queries asked, in order."""
    asked: list[str] = []

    def handler(path: str, params: dict[str, str]) -> bytes:
        if path == prometheus.TARGETS_PATH:
            active = [{"labels": {"job": serving_metrics.SCRAPE_JOB}, "health": "up"}]
            return json.dumps({"status": "success", "data": {"activeTargets": active}}).encode()
        if path == prometheus.ALERTS_PATH:
            data = {"alerts": alerts or []}
            return json.dumps({"status": "success", "data": data}).encode()
        asked.append(params["query"])
        value = (values or {}).get(params["query"])
        result = [] if value is None else [{"metric": {}, "value": [1.0, value]}]
        data = {"resultType": "vector", "result": result}
        return json.dumps({"status": "success", "data": data}).encode()

    fake.serve_proxy(NS, prometheus.OWN_SERVICE, prometheus.PORT, handler)
    return asked


def isvc(fake: FakeKube) -> dict[str, Any]:
    return fake.obj(ISVC[0], ISVC[1], ISVC[2], ISVC[3])


# ------------------------------------------------------------------ up
def test_up_with_monitoring_installs_keda_and_distmls_prometheus_stamped_and_ready(wd, fake):
    lines: list[str] = []
    c = up(wd, fake, lines)
    keda = f"{KC}apply --server-side -f {versions.KEDA_URL}"
    assert keda in commands(c)
    ours = [o for o in fake.applied if o["metadata"].get("name") == stack.NAME]
    assert {o["kind"] for o in ours} == PROM_KINDS
    instance = wd.state().instance
    assert all(o["metadata"]["labels"][INSTANCE_LABEL] == instance for o in ours)
    assert all(o["metadata"]["namespace"] == NS for o in ours)
    assert "== operators (standard serving mode, with KEDA)" in lines
    assert any(line.startswith("Prometheus: ready at http://distml-prometheus.kubeflow.svc:9090")
               for line in lines)  # fmt: skip
    assert wd.state().monitoring is True
    # A later plain `up` keeps both: KEDA found, not applied again.
    again = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(again, wd, fake).up(UpRequest()) == 0
    assert keda not in commands(again)
    assert wd.state().monitoring is True


def test_knative_mode_gets_prometheus_but_no_keda(wd, fake):
    c = up(wd, fake, mode="knative")
    assert not [x for x in commands(c) if "keda" in x]
    assert fake.obj("apps/v1", "Deployment", stack.NAME, NS) is not None


def test_a_users_prometheus_is_used_and_distmls_own_not_installed(wd, fake):
    lines: list[str] = []
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    rt = runtime(c, wd, fake, lines=lines)
    rt.cx.prometheus = "monitoring/prometheus-k8s:9090"
    assert rt.up(UpRequest(serving_mode="standard", with_monitoring=True)) == 0
    assert fake.obj("apps/v1", "Deployment", stack.NAME, NS) is None
    assert (
        "== monitoring: your Prometheus monitoring/prometheus-k8s:9090 "
        "(cluster.prometheus (INVOKE_CLUSTER_PROMETHEUS))"
    ) in lines
    assert any("keda" in x for x in commands(c))  # KEDA is still what scales


def test_a_prometheus_that_never_turns_ready_fails_up_saying_what_to_look_at(wd, fake):
    fake.clock.hooks.insert(  # its pod never passes its readiness probe
        0,
        lambda _t: (
            (o := fake.obj("apps/v1", "Deployment", stack.NAME, NS))
            and o.update(status={"conditions": [{"type": "Available", "status": "False"}]})
        ),
    )
    with pytest.raises(ClusterError) as info:
        up(wd, fake)
    message = str(info.value)
    assert message.startswith("distml's Prometheus did not become ready:")
    assert "distml-prometheus" in message and KC in message


# ------------------------------------------------------------------ deploy
def test_deploy_scale_metric_concurrency_hands_kserve_the_keda_form(wd, fake):
    up(wd, fake)
    prometheus_answers(fake)
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.deploy(DeployRequest(scale_metric="concurrency", target=2)) == 0
    obj = isvc(fake)
    assert obj["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "keda"
    metric, cpu = obj["spec"]["predictor"]["autoScaling"]["metrics"]
    assert metric["external"]["metric"] == {
        "backend": "prometheus",
        "serverAddress": "http://distml-prometheus.kubeflow.svc:9090",
        "query": serving_metrics.concurrency(NS, "tf-mnist", "30s"),
    }
    assert cpu["resource"]["name"] == "cpu"  # what still scales up while Prometheus is out
    assert metric["external"]["target"] == {"type": "Value", "value": "2"}
    assert "scaleMetric" not in obj["spec"]["predictor"]
    assert (
        "Prometheus kubeflow/distml-prometheus:9090 scrapes every 5 s (distml's own scrape job)"
        in lines
    )
    assert (
        "scaling: KEDA on requests in flight, 2 per replica, read from Prometheus over the "
        "last 30s" in lines
    )
    state = wd.state()
    assert (state.scale_metric, state.target, state.scrape_interval_s) == ("concurrency", 2, 5)


def test_rps_without_a_target_takes_the_default_per_replica_rate(wd, fake):
    up(wd, fake)
    prometheus_answers(fake)
    assert runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest(scale_metric="rps")) == 0
    metric, _cpu = isvc(fake)["spec"]["predictor"]["autoScaling"]["metrics"]
    assert metric["external"]["target"]["value"] == "50"
    assert metric["external"]["metric"]["query"].startswith("sum(rate(distml_requests_total{")
    assert wd.state().scale_metric == "rps"


def fell_back(lines: list[str]) -> str:
    (note,) = [line for line in lines if line.startswith("note: --scale-metric")]
    assert note.endswith("scaling on cpu instead (an HPA at 80% of each predictor's CPU request)")
    return note


def deployed_on_cpu(fake: FakeKube) -> bool:
    obj = isvc(fake)
    predictor = obj["spec"]["predictor"]
    return (
        obj["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "hpa"
        and predictor["scaleMetric"] == "cpu"
        and "autoScaling" not in predictor
    )


def test_without_monitoring_a_request_metric_falls_back_to_cpu_in_one_line(wd, fake):
    up(wd, fake, with_monitoring=False)
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.deploy(DeployRequest(scale_metric="rps")) == 0
    assert "needs a Prometheus (`invoke up --with-monitoring`" in fell_back(lines)
    assert deployed_on_cpu(fake) and wd.state().scale_metric == "cpu"


def test_a_prometheus_that_does_not_answer_falls_back_saying_why(wd, fake):
    up(wd, fake)  # no proxy answer registered: the Service is not found
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.deploy(DeployRequest(scale_metric="concurrency")) == 0
    assert "needs a Prometheus that answers (Prometheus kubeflow/distml-prometheus:9090" in (
        fell_back(lines)
    )
    assert deployed_on_cpu(fake)


def test_a_missing_keda_falls_back_saying_how_to_install_it(wd, fake):
    up(wd, fake)
    prometheus_answers(fake)
    fake.remove("apps/v1", "Deployment", "keda-operator", optional_operators.KEDA_NAMESPACE)
    fake.remove(
        "apps/v1", "Deployment", "keda-metrics-apiserver", optional_operators.KEDA_NAMESPACE
    )
    fake.remove("apps/v1", "Deployment", "keda-admission", optional_operators.KEDA_NAMESPACE)
    fake.remove(optional_operators.APISERVICE_API, "APIService", optional_operators.KEDA_APISERVICE)
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.deploy(DeployRequest(scale_metric="concurrency")) == 0
    assert "needs KEDA (no Available Deployment keda/keda-operator)" in fell_back(lines)
    assert deployed_on_cpu(fake)


def test_knative_mode_refuses_a_request_rate_or_cpu_metric(wd, fake):
    up(wd, fake, mode="knative")
    with pytest.raises(ClusterError, match="--scale-metric rps is for standard serving mode"):
        runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest(scale_metric="rps"))
    assert isvc(fake) is None
    assert (
        runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest(scale_metric="concurrency")) == 0
    )  # what knative mode does anyway
    assert wd.state().scale_metric == "concurrency"


def kserve_made(fake: FakeKube, api: str, kind: str, owner_uid: str) -> None:
    owner = {"kind": "InferenceService", "name": "tf-mnist", "uid": owner_uid}
    meta = {"name": "tf-mnist-predictor", "namespace": NS, "ownerReferences": [owner]}
    fake.put({"apiVersion": api, "kind": kind, "metadata": meta})


def test_a_redeploy_deletes_the_autoscaler_it_moved_away_from_and_only_its_own(wd, fake):
    up(wd, fake)
    prometheus_answers(fake)
    assert runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest()) == 0
    uid = isvc(fake)["metadata"]["uid"]
    kserve_made(fake, "autoscaling/v2", "HorizontalPodAutoscaler", uid)  # what KServe made
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.deploy(DeployRequest(scale_metric="concurrency")) == 0
    assert ("autoscaling/v2", "HorizontalPodAutoscaler", NS, "tf-mnist-predictor") in fake.deleted
    assert (
        "HorizontalPodAutoscaler tf-mnist-predictor: deleted (the predictor now scales with keda)"
        in lines
    )
    # Back to cpu: KEDA's ScaledObject goes; one another InferenceService owns is kept.
    kserve_made(fake, "keda.sh/v1alpha1", "ScaledObject", "someone-elses")
    assert runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest(scale_metric="cpu")) == 0
    assert fake.obj("keda.sh/v1alpha1", "ScaledObject", "tf-mnist-predictor", NS) is not None
    kserve_made(fake, "keda.sh/v1alpha1", "ScaledObject", uid)
    assert runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest(scale_metric="cpu")) == 0
    assert fake.obj("keda.sh/v1alpha1", "ScaledObject", "tf-mnist-predictor", NS) is None


def test_the_load_test_plans_with_what_scales_the_predictor(wd, fake, monkeypatch):
    up(wd, fake)
    prometheus_answers(fake)
    assert (
        runtime(make_ctx(fake, {}), wd, fake).deploy(
            DeployRequest(scale_metric="concurrency", max_replicas=4)
        )
        == 0
    )
    seen: dict[str, Any] = {}

    def fake_run(url, model, payload, out_dir, **kw):
        seen.update(kw)
        return {"requests": 10, "failures": 0, "rps": 5.0, "replicas_start": 1,
                "replicas_peak": 2, "replicas": []}  # fmt: skip

    monkeypatch.setattr("loadtest.runner.run_loadtest", fake_run)
    lines: list[str] = []
    runtime(make_ctx(fake, {}), wd, fake, lines=lines).loadtest(LoadtestRequest(concurrency=3))
    assert seen["expected_replicas"] == 3  # ceil(3 in flight / 1 per replica), max 4
    from runtime.cluster.serving import HPA_SYNC_S, PREDICTOR_START_S

    # The HPA's sync, a scrape, half of KEDA's four-scrape window, the pod's start.
    assert seen["settle_s"] == HPA_SYNC_S + 5 + 10 + PREDICTOR_START_S
    assert any(
        "KEDA scales on requests in flight: it should reach 3 ready replicas "
        "(ceil(3 / 1), max 4)" in line
        for line in lines
    )


# ------------------------------------------------------------------ status
def status_text(wd, fake) -> str:
    lines: list[str] = []
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake, lines=lines).status() == 0
    return "\n".join(lines)


def test_status_shows_what_scales_and_the_live_numbers_from_prometheus(wd, fake):
    up(wd, fake)
    ns, svc = NS, "tf-mnist"
    w = "60s"  # a minute: four of distml's 5 s scrapes are less
    values = {
        serving_metrics.request_rate(ns, svc, w): "12.34",
        serving_metrics.error_ratio(ns, svc, w): "0.015",
        serving_metrics.latency_quantile(ns, svc, 0.5, w): "0.004",
        serving_metrics.latency_quantile(ns, svc, 0.95, w): "0.0125",
        serving_metrics.latency_quantile(ns, svc, 0.99, w): "NaN",
        serving_metrics.replicas(ns, svc): "3",
    }
    asked = prometheus_answers(fake, values)
    runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest(scale_metric="concurrency"))
    text = status_text(wd, fake)
    assert set(values) <= set(asked)
    assert re.search(r"keda +available", text) and re.search(r"prometheus +available", text)
    assert re.search(r"scaling +KEDA on requests in flight \(Prometheus\), 1 per replica", text)
    assert re.search(r"requests \(last 60s\) +12\.3 req/s, 1\.5% 5xx", text)
    assert re.search(r"latency p50/p95/p99 +4/12/- ms", text)  # 12.5 ms rounds to even
    assert re.search(r"replicas scraped +3 up \(kubeflow/distml-prometheus:9090, every 5 s\)", text)
    assert re.search(r"serving model +version 2", text)  # the rest of the status stands
    assert re.search(r"alerts +none firing \(kubeflow/distml-prometheus:9090\)", text)


def alert(name: str, severity: str, state: str = "firing", **labels: str) -> dict[str, Any]:
    return {
        "labels": {"alertname": name, "severity": severity, **labels},
        "annotations": {"summary": f"{name} summary"},
        "state": state,
        "activeAt": "2026-12-05T08:00:00.123456789Z",
        "value": "1e+00",
    }


def test_status_lists_the_alerts_firing_about_this_namespace_and_service(wd, fake):
    up(wd, fake)
    here = {"namespace": NS, "isvc": "tf-mnist"}
    prometheus_answers(
        fake,
        alerts=[
            alert("DistmlTrainingStalled", "ticket", namespace=NS, tfjob="train-cnn", replica="1"),
            alert("DistmlAvailabilityBudgetBurn", "page", long="1h", short="5m", **here),
            alert("DistmlPredictorDown", "page", state="pending", **here),  # not firing yet
            alert("DistmlPredictorDown", "page", namespace=NS, isvc="another-service"),
            alert("DistmlTFJobFailed", "ticket", namespace="team-b"),
            alert("Watchdog", "none"),
        ],
    )
    runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest())
    rows = [line for line in status_text(wd, fake).splitlines() if line.startswith("alert")]
    assert len(rows) == 2, rows
    burn, stalled = rows  # pages first
    assert re.match(
        r"alert DistmlAvailabilityBudgetBurn \(long 1h, short 5m\) +page, active since "
        r"2026-12-05 08:00:00 UTC \(.* ago\): DistmlAvailabilityBudgetBurn summary$",
        burn,
    )
    assert re.match(
        r"alert DistmlTrainingStalled \(tfjob train-cnn, replica 1\) +ticket, active since ",
        stalled,
    )


def test_status_says_in_one_line_why_prometheus_was_not_read_and_goes_on(wd, fake):
    up(wd, fake)
    prometheus_answers(fake)
    runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest())
    fake.proxies.clear()  # gone since
    text = status_text(wd, fake)
    (row,) = [line for line in text.splitlines() if line.startswith("Prometheus ")]
    assert "Service kubeflow/distml-prometheus is not there" in row
    (alerts,) = [line for line in text.splitlines() if line.startswith("alerts ")]
    assert re.search(r"alerts +not read: Prometheus kubeflow/distml-prometheus:9090: ", alerts)
    assert re.search(r"scaling +an HPA on CPU, 80% of each predictor's request", text)
    assert re.search(r"serving model +version 2", text)


def test_status_without_monitoring_reads_no_prometheus(wd, fake):
    up(wd, fake, with_monitoring=False)
    runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest())
    text = status_text(wd, fake)
    assert "Prometheus" not in text and "req/s" not in text
    assert not [call for call in fake.calls if call[0] == "proxy_get"]


# ------------------------------------------------------------------ down
def test_down_keep_cluster_removes_prometheus_and_keda_and_forgets_monitoring(wd, fake):
    up(wd, fake)
    fake.at(fake.clock.now + 5, lambda: fake.remove("v1", "Namespace", "keda"))
    fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "keda"}})
    c = make_ctx(fake, {re.compile(r"^kubectl .*"): k3d_results(exists=True, imported=True)[
        re.compile(r"^(kubectl|docker save|k3d image import|rm -f|k3d cluster create) .*")
    ]})  # fmt: skip
    lines: list[str] = []
    assert runtime(c, wd, fake, lines=lines).down(DownRequest(keep_cluster=True)) == 0
    deleted = {(k[1], k[3]) for k in fake.deleted}
    assert {(kind, stack.NAME) for kind in PROM_KINDS} <= deleted
    crds = " ".join(CLUSTER_WIDE["keda"]["CustomResourceDefinition"])
    assert commands(c)[-2:] == [
        f"{KC}delete crd {crds} --ignore-not-found --timeout 300s",
        f"{KC}delete -f {versions.KEDA_URL} --ignore-not-found --timeout 300s",
    ]
    assert wd.state().monitoring is False
    # Removed for good: the next plain `up` brings neither back.
    again = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(again, wd, fake).up(UpRequest()) == 0
    assert not [x for x in commands(again) if "keda" in x]
    assert fake.obj("apps/v1", "Deployment", stack.NAME, NS) is None
