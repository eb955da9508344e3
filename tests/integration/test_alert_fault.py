"""integration/alert_fault.py without a cluster: it finds predictor servers by their command
line, stops them, waits for the alert to fire, always lets them go on, and waits for the
alert to clear; a real stand-in process, and a Prometheus whose alert follows that
process's real state (stopped: firing), scripted behind FakeKube's service proxy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from integration import alert_fault as af
from k8s.monitoring import prometheus
from k8s.monitoring.prometheus import PrometheusRef
from tests.support.fakekube import FakeKube

NS, SVC = "kubeflow", "tf-mnist"
REF = PrometheusRef(NS, prometheus.OWN_SERVICE, prometheus.PORT)
# A process whose command line reads like a predictor's (ml.contract.serve).
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
STAND_IN = [*SLEEP, "-m", "ml", "serve", "--model-dir", "/mnt/models"]


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def serve_alerts(kube: FakeKube, pid: int, *, always: bool = False) -> None:
    def answer(path: str, params: dict) -> bytes:
        alerts = []
        if always or stopped(pid):
            alerts.append({"labels": {"alertname": af.ALERT, "namespace": NS, "isvc": SVC},
                           "annotations": {}, "state": "firing",
                           "activeAt": "2026-12-05T09:00:00Z", "value": "0e+00"})  # fmt: skip
        return json.dumps({"status": "success", "data": {"alerts": alerts}}).encode()

    kube.serve_proxy(REF.namespace, REF.service, REF.port, answer)


@pytest.fixture
def stand_in():
    proc = subprocess.Popen(STAND_IN)
    # Popen returns once exec has begun; the kernel sets the new command line a moment
    # later (an empty /proc/<pid>/cmdline meanwhile, seen under load): wait for it.
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    verdict = poll(
        cmdline.read_bytes, lambda b: Done(b) if b else Pending(), timeout=10, interval=0.01
    )
    assert isinstance(verdict, Done), "the stand-in never showed its command line"
    yield proc
    proc.kill()
    proc.wait()


def test_the_predictors_are_found_by_their_command_line(stand_in, tmp_path):
    assert stand_in.pid in af.predictor_pids()
    fake_proc = tmp_path / "proc"
    for pid, cmd in {"7": b"python\0-m\0ml\0serve\0--model-dir\0/mnt/models\0",
                     "8": b"python\0-m\0ml\0train\0--volume\0/mnt/models\0",
                     "9": b"dpkg\0--unpack\0caf\xe9.deb\0", "self": b"x"}.items():  # fmt: skip
        (fake_proc / pid).mkdir(parents=True)
        (fake_proc / pid / "cmdline").write_bytes(cmd)
    assert af.predictor_pids(fake_proc) == [7]


def test_stopped_the_alert_fires_and_let_go_it_clears(stand_in, monkeypatch):
    monkeypatch.setattr(af, "predictor_pids", lambda: [stand_in.pid])
    kube = FakeKube()
    serve_alerts(kube, stand_in.pid)
    held = []
    # The firing notification is waited for while the fault holds: an alert that clears
    # within Alertmanager's group wait is never notified (the first kind run's failure).
    said = af.run(kube, REF, NS, SVC, lambda: held.append(stopped(stand_in.pid)) or 1.0)
    assert said.startswith(f"alert fault: 1 predictor server(s) stopped; {af.ALERT} fired")
    assert held == [True]
    assert not stopped(stand_in.pid)  # let go


def test_an_alert_that_never_clears_fails_and_the_process_is_let_go_all_the_same(
    stand_in, monkeypatch
):
    monkeypatch.setattr(af, "predictor_pids", lambda: [stand_in.pid])
    monkeypatch.setattr(af, "CLEAR_TIMEOUT_S", 3)
    kube2 = FakeKube()
    fired = {"n": 0}

    def answer(path: str, params: dict) -> bytes:  # fires once stopped, then never clears
        fired["n"] += stopped(stand_in.pid)
        alerts = [
            {
                "labels": {"alertname": af.ALERT, "namespace": NS, "isvc": SVC},
                "annotations": {},
                "state": "firing",
                "activeAt": "2026-12-05T09:00:00Z",
            }
        ]
        return json.dumps({"status": "success",
                           "data": {"alerts": alerts if fired["n"] else []}}).encode()  # fmt: skip

    kube2.serve_proxy(REF.namespace, REF.service, REF.port, answer)
    with pytest.raises(DistmlError, match=f"{af.ALERT} gone: not within 3 s"):
        af.run(kube2, REF, NS, SVC)
    assert not stopped(stand_in.pid)


def test_an_alert_firing_before_the_fault_proves_nothing(stand_in, monkeypatch):
    monkeypatch.setattr(af, "predictor_pids", lambda: [stand_in.pid])
    kube = FakeKube()
    serve_alerts(kube, stand_in.pid, always=True)
    with pytest.raises(DistmlError, match="already fires before the fault"):
        af.run(kube, REF, NS, SVC)
    assert not stopped(stand_in.pid)


def test_no_predictor_is_a_failure_not_a_pass(monkeypatch):
    monkeypatch.setattr(af, "predictor_pids", lambda: [])
    with pytest.raises(DistmlError, match="no predictor server process"):
        af.run(FakeKube(), REF, NS, SVC)


def test_delivered_needs_the_alert_about_this_service_with_that_status() -> None:
    from integration.alert_sink import Notification

    here = {"alertname": af.ALERT, "namespace": NS, "isvc": SVC}
    log = [
        Notification("firing", [{"labels": {**here, "isvc": "other"}}]),
        Notification("firing", [{"labels": {"alertname": "Else", "namespace": NS, "isvc": SVC}}]),
        Notification("resolved", [{"labels": here}]),
    ]
    assert af.delivered(lambda: log, "resolved", NS, SVC)
    assert not af.delivered(lambda: log, "firing", NS, SVC)
    assert af.delivered(
        lambda: [*log, Notification("firing", [{"labels": here}])], "firing", NS, SVC
    )


def test_no_firing_notification_fails_and_the_process_is_let_go_all_the_same(stand_in, monkeypatch):
    monkeypatch.setattr(af, "predictor_pids", lambda: [stand_in.pid])
    kube = FakeKube()
    serve_alerts(kube, stand_in.pid)

    def never_notified() -> float:
        raise DistmlError(f"{af.ALERT} firing at the webhook: not within 120 s")

    with pytest.raises(DistmlError, match="at the webhook"):
        af.run(kube, REF, NS, SVC, never_notified)
    assert not stopped(stand_in.pid)


class Cluster:
    """kubectl as the fault uses it: nodes cordoned make the predictor's pods Pending (the
    alert fires while they are); every call recorded."""

    def __init__(self, fires_when_cordoned: bool = True) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.cordoned: set[str] = set()
        self.fires = fires_when_cordoned

    def kubectl(self, kube_context: str, *args: str) -> str:
        self.calls.append(args)
        if args[:2] == ("get", "nodes"):
            return "node/a\nnode/b\n"
        if args[0] == "cordon":
            self.cordoned.add(args[1])
        if args[0] == "uncordon":
            self.cordoned.discard(args[1])
        return ""

    def serve(self, kube: FakeKube) -> None:
        def answer(path: str, params: dict) -> bytes:
            alerts = []
            if self.fires and self.cordoned and ("-n", NS, "delete") in {c[:3] for c in self.calls}:
                alerts.append({"labels": {"alertname": af.ALERT, "namespace": NS, "isvc": SVC},
                               "annotations": {}, "state": "firing",
                               "activeAt": "2026-12-05T09:00:00Z"})  # fmt: skip
            return json.dumps({"status": "success", "data": {"alerts": alerts}}).encode()

        kube.serve_proxy(REF.namespace, REF.service, REF.port, answer)


def test_every_pod_gone_fires_and_clears_once_the_nodes_take_pods_again(monkeypatch):
    cluster, kube = Cluster(), FakeKube()
    cluster.serve(kube)
    monkeypatch.setattr(af, "_kubectl", cluster.kubectl)
    said = af.gone("kind-x", kube, REF, NS, SVC)
    assert said.startswith("alert fault: every predictor pod gone")
    deleted = [c for c in cluster.calls if c[:3] == ("-n", NS, "delete")]
    assert deleted == [("-n", NS, "delete", "pods", "-l",
                        f"serving.kserve.io/inferenceservice={SVC}", "--wait=false")]  # fmt: skip
    assert not cluster.cordoned  # every node uncordoned


def test_an_alert_that_never_fires_with_pods_gone_fails_and_the_nodes_are_uncordoned(
    monkeypatch,
):
    cluster, kube = Cluster(fires_when_cordoned=False), FakeKube()
    cluster.serve(kube)
    monkeypatch.setattr(af, "_kubectl", cluster.kubectl)
    monkeypatch.setattr(af, "FOR_S", 1)
    monkeypatch.setattr(af, "FIRE_SLACK_S", 2)
    with pytest.raises(DistmlError, match="firing with every pod Pending: not within 3 s"):
        af.gone("kind-x", kube, REF, NS, SVC)
    assert {c[0] for c in cluster.calls} >= {"cordon", "uncordon"} and not cluster.cordoned
