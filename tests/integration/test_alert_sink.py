"""integration/alert_sink.py: the receiver, run here, takes what the real Alertmanager
(Debian's, with distml's configuration for the webhook) sends when an alert is posted to it
and resolved; its log parses back into those notifications; anything else in the log is
skipped (property-based: the log is outside input)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from integration import alert_sink, kind_run
from k8s.monitoring import alertmanager
from k8s.providers.settings import Settings

ALERTMANAGER = Path("/usr/bin/prometheus-alertmanager")
LABELS = {"alertname": "DistmlPredictorDown", "namespace": "kubeflow", "isvc": "tf-mnist"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_run_names_the_sinks_url_as_the_webhook() -> None:
    env = kind_run.env(None)
    assert env["INVOKE_CLUSTER_ALERT_WEBHOOK"] == alert_sink.url(kind_run.NAMESPACE)
    assert alertmanager.parse_webhook(alert_sink.url(kind_run.NAMESPACE))


def test_its_pod_runs_the_given_image_as_the_project_user_ready_on_its_port() -> None:
    pod, service = alert_sink.objects("team-a", "distml:abc")
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "distml:abc" and c["command"][-1] == str(alert_sink.PORT)
    assert c["readinessProbe"]["tcpSocket"]["port"] == alert_sink.PORT
    assert c["securityContext"]["runAsNonRoot"] is True
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    # It schedules beside the predictors' peak on a 2-CPU node: no CPU request.
    assert "cpu" not in c["resources"]["requests"]


@given(st.lists(st.one_of(st.text(max_size=40), st.builds(json.dumps, st.dictionaries(
    st.text(max_size=5), st.one_of(st.none(), st.text(max_size=5)), max_size=3)))))  # fmt: skip
def test_any_log_parses_without_error_into_well_formed_notifications(lines: list[str]) -> None:
    for n in alert_sink.parse("\n".join(lines)):
        assert isinstance(n.status, str) and isinstance(n.alerts, list)


def wait_for(what: str, condition, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")


@pytest.mark.skipif(not ALERTMANAGER.is_file(), reason="apt-get install prometheus-alertmanager")
def test_the_real_alertmanager_delivers_firing_and_resolved_to_the_sink(tmp_path: Path) -> None:
    # The sink takes a port of its own and says which: a port picked here and bound later
    # can be taken meanwhile by another test's server (the first CI run lost it so).
    log = (tmp_path / "sink.log").open("w+")
    sink = subprocess.Popen([sys.executable, "-c", alert_sink.RECEIVER, "0"], stdout=log)
    sink_port = wait_for("the sink listening", lambda: listening(log))
    am_port = free_port()
    url = f"http://127.0.0.1:{sink_port}{alert_sink.PATH}"
    # distml's configuration, its group timings (10 s, 1 m) shortened for the test's sake.
    config = alertmanager.config(Settings(image="", alert_webhook=url))
    config["route"].update(group_wait="1s", group_interval="2s")
    (tmp_path / "am.yml").write_text(json.dumps(config))
    am = subprocess.Popen(
        [str(ALERTMANAGER), f"--config.file={tmp_path / 'am.yml'}",
         f"--storage.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{am_port}",
         "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    api = f"http://127.0.0.1:{am_port}/api/v2/alerts"
    try:
        now = datetime.now(UTC)
        post(api, wait_for("alertmanager up", lambda: up(am_port)) and [alert(now)])

        def seen(status: str):
            log.seek(0)
            return [n for n in alert_sink.parse(log.read()) if n.status == status]

        (firing,) = wait_for("firing", lambda: seen("firing"))
        assert firing.names(namespace="kubeflow", isvc="tf-mnist") == {LABELS["alertname"]}
        post(api, [alert(now, ends=datetime.now(UTC) - timedelta(seconds=1))])
        # Sent at the group's next interval: the resolved one, with the same labels.
        (resolved,) = wait_for("resolved", lambda: seen("resolved"))
        assert resolved.names(**LABELS) == {LABELS["alertname"]}
        assert firing.names(isvc="other") == set()
    finally:
        for p in (am, sink):
            p.terminate()
            p.wait(timeout=10)
        log.close()


def listening(log) -> int | None:
    log.seek(0)
    first = log.readline()
    return json.loads(first)["listening"] if first.endswith("\n") else None


def alert(starts: datetime, ends: datetime | None = None) -> dict:
    doc = {"labels": {**LABELS, "severity": "page"}, "startsAt": starts.isoformat()}
    if ends:
        doc["endsAt"] = ends.isoformat()
    return doc


def up(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def post(api: str, alerts: list[dict]) -> None:
    import urllib.request

    req = urllib.request.Request(
        api, json.dumps(alerts).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
