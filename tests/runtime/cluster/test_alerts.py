"""runtime/cluster/alerts.py: which alerts are this work dir's, in what order, and how one
reads as a status row. The rows read from a Prometheus through the API server's proxy are
in test_monitoring.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from k8s.monitoring.prometheus import Alert
from runtime.cluster import alerts

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def alert(
    name: str, severity: str = "ticket", state: str = "firing", ago_s: float = 60, **labels: str
) -> Alert:
    at = NOW - timedelta(seconds=ago_s)
    return Alert(name, {"alertname": name, "severity": severity, **labels}, {}, state, at, 1.0)


def test_this_work_dirs_alerts_are_its_namespaces_and_its_services_firing_pages_first():
    found = [
        alert("Old", ago_s=3600, namespace="team-a"),
        alert("New", ago_s=60, namespace="team-a", isvc="tf-mnist"),
        alert("Page", "page", ago_s=10, namespace="team-a", isvc="tf-mnist"),
        alert("Pending", "page", state="pending", namespace="team-a"),
        alert("OtherService", namespace="team-a", isvc="other"),
        alert("OtherNamespace", namespace="team-b", isvc="tf-mnist"),
        alert("Nowhere"),
        alert("Unranked", "info", namespace="team-a"),
    ]
    mine = alerts.firing_here(found, "team-a", "tf-mnist")
    assert [a.name for a in mine] == ["Page", "Old", "New", "Unranked"]


def test_a_row_names_the_alert_which_one_its_severity_since_when_and_its_summary():
    a = alert("DistmlPredictorTargetDown", ago_s=7 * 60 + 5, namespace="team-a", pod="p-1")
    a.annotations["summary"] = "team-a/tf-mnist:   predictor pod p-1\nnot scraped"
    assert alerts.row(a, NOW) == (
        "alert DistmlPredictorTargetDown (pod p-1)",
        "ticket, active since 2026-12-05 11:52:55 UTC (7 min ago): "
        "team-a/tf-mnist: predictor pod p-1 not scraped",
    )
    bare = Alert("X", {"alertname": "X"}, {}, "firing", None)
    assert alerts.row(bare, NOW) == ("alert X", "no severity")


def test_how_long_ago_reads_in_seconds_minutes_or_hours():
    assert alerts._ago(timedelta(seconds=-3)) == "0 s"
    assert alerts._ago(timedelta(seconds=119)) == "119 s"
    assert alerts._ago(timedelta(minutes=119)) == "119 min"
    assert alerts._ago(timedelta(hours=50, minutes=7)) == "50 h 7 min"
