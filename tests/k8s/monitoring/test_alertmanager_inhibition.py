"""distml's Alertmanager configuration in a real Alertmanager (Debian's 0.25): while
``DistmlPredictorDown`` fires for a service, what the same outage sets off for that
service is held back (its pods' targets down, its budget burning), another service's is
not; the watchdog goes to its own receiver, never the alerts' webhook. The webhook (the
kind run's sink) gets exactly the alerts not held back."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from integration import alert_sink
from k8s.monitoring import alertmanager
from k8s.providers.settings import Settings
from tests.integration.test_alert_sink import ALERTMANAGER, free_port, listening, post, up, wait_for

NS = "team-a"


def _alert(name: str, severity: str, **labels: str) -> dict:
    return {"labels": {"alertname": name, "severity": severity, "namespace": NS, **labels},
            "startsAt": datetime.now(UTC).isoformat()}  # fmt: skip


@pytest.mark.skipif(not ALERTMANAGER.is_file(), reason="apt-get install prometheus-alertmanager")
def test_an_outage_pages_once_and_holds_back_that_service_s_other_alerts(tmp_path: Path) -> None:
    log = (tmp_path / "sink.log").open("w+")
    sink = subprocess.Popen([sys.executable, "-c", alert_sink.RECEIVER, "0"], stdout=log)
    port_ = wait_for("the sink listening", lambda: listening(log))
    url = f"http://127.0.0.1:{port_}{alert_sink.PATH}"
    config = alertmanager.config(
        Settings(image="", alert_webhook=url, watchdog_webhook="http://127.0.0.1:9/none")
    )
    config["route"].update(group_wait="1s", group_interval="2s")
    (tmp_path / "am.yml").write_text(json.dumps(config))
    port = free_port()
    am = subprocess.Popen(
        [str(ALERTMANAGER), f"--config.file={tmp_path / 'am.yml'}",
         f"--storage.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api/v2/alerts"
    sent = [
        _alert("DistmlPredictorDown", "page", isvc="tf-mnist"),
        _alert("DistmlPredictorTargetDown", "ticket", isvc="tf-mnist", pod="p-1"),
        _alert("DistmlAvailabilityBudgetBurn", "page", isvc="tf-mnist", long="1h", short="5m"),
        _alert("DistmlPredictorTargetDown", "ticket", isvc="other", pod="q-1"),
        {"labels": {"alertname": alertmanager.WATCHDOG, "severity": "none"},
         "startsAt": datetime.now(UTC).isoformat()},
    ]  # fmt: skip
    try:
        post(api, wait_for("alertmanager up", lambda: up(port)) and sent)

        def states() -> dict[tuple[str, str], dict]:
            with urllib.request.urlopen(api, timeout=5) as r:
                found = json.loads(r.read())
            return {(a["labels"]["alertname"], a["labels"].get("isvc", "")): a for a in found}

        now = wait_for("every alert received", lambda: len(states()) == len(sent) and states())
        held = {k for k, a in now.items() if a["status"]["inhibitedBy"]}
        assert held == {("DistmlPredictorTargetDown", "tf-mnist"),
                        ("DistmlAvailabilityBudgetBurn", "tf-mnist")}  # fmt: skip
        watchdog = now[(alertmanager.WATCHDOG, "")]
        assert [r["name"] for r in watchdog["receivers"]] == [alertmanager.WATCHDOG_RECEIVER]

        def notified() -> set[tuple[str, str]]:
            log.seek(0)
            return {
                (a.get("labels", {}).get("alertname"), a.get("labels", {}).get("isvc", ""))
                for n in alert_sink.parse(log.read())
                for a in n.alerts
            }

        got = wait_for("both notifications", lambda: len(notified()) >= 2 and notified())
        assert got == {("DistmlPredictorDown", "tf-mnist"), ("DistmlPredictorTargetDown", "other")}
    finally:
        for p in (am, sink):
            p.terminate()
            p.wait(timeout=10)
        log.close()
