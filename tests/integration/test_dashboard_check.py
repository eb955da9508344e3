"""integration/dashboard_check.py without a cluster: the scrape-target check waits until
every ready predictor pod is an up target (on a deadline, naming what is missing), and the
command's exit codes and messages, against Prometheus's answers scripted behind FakeKube's
service proxy. (Every panel against a real Prometheus and the real server:
tests/k8s/grafana/test_dashboard_prometheus.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from integration import dashboard_check as dc
from k8s.client.objects import ISVC_LABEL
from k8s.monitoring import prometheus
from k8s.monitoring.prometheus import PrometheusRef
from tests.support.fakekube import FakeClock, FakeKube

NS, SVC = "kubeflow", "tf-mnist"
REF = PrometheusRef(NS, prometheus.OWN_SERVICE, prometheus.PORT)


class Scripted:
    """Targets (pod -> health) and, for every query, one series unless it names ``empty``."""

    def __init__(self, kube: FakeKube) -> None:
        self.targets: dict[str, str] = {}
        self.empty = "nothing"
        kube.serve_proxy(REF.namespace, REF.service, REF.port, self.answer)

    def answer(self, path: str, params: dict[str, str]) -> bytes:
        if path == prometheus.TARGETS_PATH:
            active = [
                {"labels": {"job": "distml-predictor", "namespace": NS, "isvc": SVC, "pod": p},
                 "health": h, "lastError": "" if h == "up" else "connection refused"}
                for p, h in self.targets.items()
            ]  # fmt: skip
            return json.dumps({"status": "success", "data": {"activeTargets": active}}).encode()
        query = params["query"]
        labels = {"namespace": NS, "isvc": SVC, "version": "1"}
        result = [] if self.empty in query else [{"metric": labels, "value": [0, "1"]}]
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _pod(kube: FakeKube, name: str, ready: bool = True) -> None:
    kube.add_pod(NS, name, {ISVC_LABEL: SVC}, ready=ready, container="kserve-container")


def test_every_ready_predictor_must_be_an_up_target():
    kube = FakeKube()
    prom = Scripted(kube)
    _pod(kube, "a")
    _pod(kube, "b")
    _pod(kube, "starting", ready=False)  # not ready: not asked for yet
    prom.targets = {"a": "up", "b": "down"}
    assert dc.unscraped_pods(kube, REF, NS, SVC) == ["b (down: connection refused)"]
    del prom.targets["b"]
    assert dc.unscraped_pods(kube, REF, NS, SVC) == ["b (no target)"]
    prom.targets["b"] = "up"
    assert dc.unscraped_pods(kube, REF, NS, SVC) == []


def test_the_target_check_waits_for_a_new_pod_to_be_scraped():
    kube, clock = FakeKube(), FakeClock()
    prom = Scripted(kube)
    _pod(kube, "a")
    clock.hooks.append(lambda now: prom.targets.update(a="up") if now >= 10 else None)
    assert dc.wait_for_targets(kube, REF, NS, SVC, clock=clock) == []
    assert 10 <= clock.now < 15


@pytest.mark.parametrize(
    ("ready", "missing"),
    [(True, "a (no target)"), (False, f"no ready predictor pod of {NS}/{SVC}")],
    ids=["never scraped", "no ready pod"],
)
def test_the_target_check_names_what_is_missing_at_its_deadline(ready, missing):
    kube, clock = FakeKube(), FakeClock()
    Scripted(kube)
    _pod(kube, "a", ready=ready)
    assert dc.wait_for_targets(kube, REF, NS, SVC, clock=clock) == [missing]
    assert clock.now == pytest.approx(dc.TARGETS_TIMEOUT_S)


@pytest.fixture
def cluster(monkeypatch) -> tuple[FakeKube, Scripted]:
    kube = FakeKube()
    monkeypatch.setattr("k8s.client.kube.ApiKube", lambda context, **_: kube)
    return kube, Scripted(kube)


def test_the_command_passes_when_every_panel_has_data(cluster, capsys):
    assert dc.main([]) == 0
    out = capsys.readouterr().out
    assert out.strip() == (
        "dashboard_check: every panel of distml-dashboard.json has data "
        f"({NS}/{SVC}, Prometheus {REF})"
    )


def test_the_command_fails_naming_each_empty_panel(cluster, capsys):
    _kube, prom = cluster
    prom.empty = "distml_requests_in_flight"
    assert dc.main(["--service", SVC]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"dashboard_check: FAIL ({NS}/{SVC}, Prometheus {REF}): panel 'Requests in flight': "
        f'no data from sum(distml_requests_in_flight{{namespace="{NS}",isvc="{SVC}"}})',
        f"dashboard_check: FAIL ({NS}/{SVC}, Prometheus {REF}): panel 'Requests in flight': "
        f'no series distml_requests_in_flight{{namespace="{NS}",isvc="{SVC}"}}',
    ]


def test_the_command_fails_when_prometheus_cannot_be_read(monkeypatch, capsys):
    kube: Any = FakeKube()  # no Service behind the proxy: the API server's 404
    monkeypatch.setattr("k8s.client.kube.ApiKube", lambda context, **_: kube)
    assert dc.main([]) == 1
    err = capsys.readouterr().err
    assert "is not there" in err and "`invoke up --with-monitoring` installs" in err


def test_a_named_prometheus_is_read_instead_of_distml_s(cluster, capsys):
    assert dc.main(["--prometheus", "monitoring/prom:9091"]) == 1  # nothing serves there
    assert "Prometheus monitoring/prom:9091" in capsys.readouterr().err


# ------------------------------------------------------------------ --training
class Training(Scripted):
    """Scripted, and the training workers seen up (pod names) and the operator's target."""

    def __init__(self, kube: FakeKube, seen: list[str], operator_up: bool = True) -> None:
        super().__init__(kube)
        self.seen, self.operator_up = seen, operator_up

    def answer(self, path: str, params: dict[str, str]) -> Any:
        query = params.get("query", "")
        if 'job="distml-training"' in query and "max_over_time(up" in query:
            result = [{"metric": {"pod": p}, "value": [0, "1"]} for p in self.seen]
        elif 'up{job="training-operator"}' in query:
            result = [{"metric": {}, "value": [0, "1"]}] if self.operator_up else []
        else:
            return super().answer(path, params)
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _workers(kube: FakeKube, *names: str) -> None:
    for name in names:
        kube.add_pod(NS, name, {dc.TFJOB_POD_LABEL: name.rsplit("-", 2)[0]}, phase="Succeeded")


def test_every_worker_pod_must_have_been_an_up_target_and_the_operator_up_now():
    kube = FakeKube()
    _workers(kube, "train-cnn-worker-0", "train-cnn-worker-1")
    Training(kube, seen=["train-cnn-worker-0", "train-cnn-worker-1"])
    assert dc.training_targets(kube, REF, NS) == []
    kube = FakeKube()
    _workers(kube, "train-cnn-worker-0", "train-cnn-worker-1")
    Training(kube, seen=["train-cnn-worker-0"], operator_up=False)
    assert dc.training_targets(kube, REF, NS) == [
        "training worker train-cnn-worker-1: never a target that was up",
        "the training operator (training-operator) is not a target that is up",
    ]


def test_no_training_pod_at_all_is_a_problem_not_a_pass():
    kube = FakeKube()
    Training(kube, seen=[])
    assert dc.training_targets(kube, REF, NS) == [f"no TFJob pod in {NS} (did training run?)"]


class Later(Training):
    """Training, done: its series answer only when asked at the moment it last ran."""

    LAST = 1796460000.0

    def __init__(self, kube: FakeKube, ran: bool = True) -> None:
        super().__init__(kube, seen=["train-cnn-worker-0"])
        self.ran = ran
        self.asked_at: list[str | None] = []

    def answer(self, path: str, params: dict[str, str]) -> Any:
        query = params.get("query", "")
        if query.startswith("max(max_over_time(timestamp(distml_train_running"):
            result = [{"metric": {}, "value": [0, str(self.LAST)]}] if self.ran else []
            return json.dumps({"status": "success",
                               "data": {"resultType": "vector", "result": result}})  # fmt: skip
        # The $namespace variable's union reads serving's series too: they are there now.
        if "distml_train" in query and "max_over_time(up" not in query and "__name__" not in query:
            self.asked_at.append(params.get("time"))
            if params.get("time") != f"{self.LAST:.3f}":  # stale now
                return json.dumps({"status": "success",
                                   "data": {"resultType": "vector", "result": []}})  # fmt: skip
        return super().answer(path, params)


def test_the_training_row_is_read_at_the_moment_a_worker_was_last_scraped():
    kube = FakeKube()
    _workers(kube, "train-cnn-worker-0")
    prom = Later(kube)
    assert dc.check_training(kube, REF, NS, SVC) == []
    assert prom.asked_at and set(prom.asked_at) == {f"{Later.LAST:.3f}"}


def test_no_training_scraped_in_the_last_hour_is_said():
    kube = FakeKube()
    Later(kube, ran=False)
    assert dc.check_training(kube, REF, NS, SVC) == [
        f"no training worker of {NS} scraped in the last hour"
    ]
