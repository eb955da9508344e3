"""Alertmanager on the in-memory cluster: `up --with-monitoring` writes its configuration as
a Secret with the rest of distml's Prometheus and says where alerts go; `status` says how
many notifications went to ``cluster.alert_webhook`` and failed; `down` removes the Secret;
a user's Prometheus gets none of it, and `up` says where its alerts go instead."""

from __future__ import annotations

import re

from k8s.manifests import INSTANCE_LABEL
from k8s.monitoring import alertmanager
from runtime.cluster import alerts
from runtime.requests import DeployRequest, DownRequest, UpRequest
from tests.runtime.cluster.test_monitoring import NS, prometheus_answers
from tests.support.cluster_kit import k3d_results, make_ctx, runtime

URL = "http://alert-sink.kubeflow.svc:8080/distml"


def run_with(fake, wd, webhook: str, lines: list[str] | None = None, prom: str = ""):
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    rt = runtime(c, wd, fake, lines=lines)
    rt.cx.alert_webhook, rt.cx.prometheus = webhook, prom
    return rt


def up(fake, wd, webhook: str, lines: list[str] | None = None, prom: str = "") -> None:
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    rt = runtime(c, wd, fake, lines=lines)
    rt.cx.alert_webhook, rt.cx.prometheus = webhook, prom
    assert rt.up(UpRequest(serving_mode="standard", with_monitoring=True)) == 0
    (wd.root / "sample-request.json").write_text('{"instances": []}\n')


def secret(fake):
    return fake.obj("v1", "Secret", alertmanager.NAME, NS)


def test_up_writes_the_webhook_into_a_stamped_secret_and_says_where_alerts_go(wd, fake):
    lines: list[str] = []
    up(fake, wd, URL, lines)
    found = secret(fake)
    assert URL in found["stringData"][alertmanager.CONFIG_FILE]
    assert found["metadata"]["labels"][INSTANCE_LABEL] == wd.state().instance
    assert f"Alertmanager: beside it, on its loopback; alerts are sent to {URL}" in lines
    # Unset later: the same Secret, now sending nowhere, and `up` says so.
    lines.clear()
    rt = run_with(fake, wd, "", lines)
    assert rt.up(UpRequest()) == 0
    assert URL not in secret(fake)["stringData"][alertmanager.CONFIG_FILE]
    assert any("alerts are sent to nowhere (cluster.alert_webhook" in line for line in lines)


def status_rows(fake, wd, webhook: str) -> list[str]:
    lines: list[str] = []
    assert run_with(fake, wd, webhook, lines).status() == 0
    return [line for line in lines if line.startswith(alerts.NOTIFICATIONS)]


def test_status_counts_the_notifications_and_points_at_the_log_when_some_failed(wd, fake):
    up(fake, wd, URL)
    prometheus_answers(fake, {alerts.SENT: "3", alerts.FAILED: "1"})
    run_with(fake, wd, URL).deploy(DeployRequest())
    (row,) = status_rows(fake, wd, URL)
    assert re.match(rf"notifications +to {URL}: 3 sent, 1 failed in the last hour \(", row)
    assert "-c alertmanager" in row
    prometheus_answers(fake, {alerts.SENT: "2", alerts.FAILED: "0"})
    (row,) = status_rows(fake, wd, URL)
    assert row.endswith(f"to {URL}: 2 sent, 0 failed in the last hour")
    (row,) = status_rows(fake, wd, "")
    assert re.match(r"notifications +none sent: cluster.alert_webhook \(INVOKE_CLUSTER_", row)


def test_a_users_prometheus_gets_no_alertmanager_and_up_says_where_its_alerts_go(wd, fake):
    lines: list[str] = []
    up(fake, wd, URL, lines, prom="monitoring/prometheus-k8s:9090")
    assert secret(fake) is None
    assert any(line.startswith("note: cluster.alert_webhook") for line in lines)


def test_down_removes_the_secret(wd, fake):
    up(fake, wd, URL)
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake).down(DownRequest(keep_cluster=True)) == 0
    assert ("Secret", alertmanager.NAME) in {(k[1], k[3]) for k in fake.deleted}
