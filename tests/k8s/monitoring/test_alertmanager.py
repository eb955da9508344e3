"""Alertmanager beside distml's Prometheus: loopback only, its configuration checked by the
real amtool, the webhook setting parsed strictly (property-based: it is outside input)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8s.monitoring import alertmanager, stack
from k8s.providers.settings import Settings

AMTOOL = shutil.which("amtool") or "/usr/bin/amtool"
URL = "http://alert-sink.team-a.svc:8080/distml?token=s3cret"


WATCHDOG_URL = "https://hc-ping.example.com/8f1c"


def settings(webhook: str = "", watchdog: str = "") -> Settings:
    return Settings(
        image="distml:abc", namespace="team-a", alert_webhook=webhook, watchdog_webhook=watchdog
    )


def deployment(s: Settings) -> dict:
    (found,) = [o for o in stack.prometheus_objects(s) if o["kind"] == "Deployment"]
    return found


@pytest.mark.parametrize(
    "text",
    ["http://sink:8080/x", "https://hooks.example.com/services/T0/B0/xyz", "  http://[::1]:9/ "],
)
def test_a_webhook_url_is_taken_as_given(text: str) -> None:
    assert alertmanager.parse_webhook(text) == text.strip()
    assert alertmanager.parse_webhook("") == alertmanager.parse_webhook("  ") == ""


@pytest.mark.parametrize(
    "text", ["sink:8080/x", "ftp://sink/x", "http:///path", "http://[zz]/", "http://a b/"]
)
def test_anything_else_is_refused_naming_the_setting_and_the_form(text: str) -> None:
    with pytest.raises(ValueError) as e:
        alertmanager.parse_webhook(text)
    assert "cluster.alert_webhook" in str(e.value) and "http(s)://HOST" in str(e.value)


@given(st.text(max_size=80))
def test_any_text_is_a_clean_url_or_a_value_error(text: str) -> None:
    try:
        value = alertmanager.parse_webhook(text)
    except ValueError as e:
        assert "cluster.alert_webhook" in str(e)
        return
    assert value == text.strip()
    assert not value or value.split("://", 1)[0] in ("http", "https")
    assert not any(c.isspace() for c in value)


def test_without_a_url_alertmanager_runs_and_sends_nothing() -> None:
    config = alertmanager.config(settings())
    assert config["route"]["receiver"] == alertmanager.NO_RECEIVER
    assert config["receivers"] == [
        {"name": alertmanager.NO_RECEIVER},
        {"name": alertmanager.WATCHDOG_RECEIVER},
    ]


def test_with_a_url_every_alert_goes_there_resolved_ones_too() -> None:
    config = alertmanager.config(settings(URL))
    assert config["route"]["receiver"] == alertmanager.WEBHOOK_RECEIVER
    receiver = {r["name"]: r for r in config["receivers"]}[alertmanager.WEBHOOK_RECEIVER]
    assert receiver["webhook_configs"] == [{"url": URL, "send_resolved": True}]


def test_the_watchdog_goes_to_its_own_url_every_minute_and_never_to_the_alerts_one() -> None:
    config = alertmanager.config(settings(URL, WATCHDOG_URL))
    (route,) = config["route"]["routes"]
    assert route["receiver"] == alertmanager.WATCHDOG_RECEIVER
    assert route["repeat_interval"] == route["group_interval"] == "1m"
    receiver = {r["name"]: r for r in config["receivers"]}[alertmanager.WATCHDOG_RECEIVER]
    assert receiver["webhook_configs"] == [{"url": WATCHDOG_URL, "send_resolved": False}]
    (group,) = alertmanager.watchdog_rules()["groups"]
    (rule,) = group["rules"]
    assert rule["alert"] == alertmanager.WATCHDOG and rule["expr"] == "vector(1)"
    assert "namespace" not in rule["labels"]  # never one of `status`'s alert rows


def test_the_watchdog_rule_is_distmls_own_prometheus_only() -> None:
    from k8s.monitoring import rules

    assert alertmanager.WATCHDOG not in rules.render()  # a user's Prometheus loads that one
    config = stack.prometheus_config(settings())
    assert f"{stack.CONFIG_DIR}/{stack.WATCHDOG_FILE}" in config["rule_files"]
    (cm,) = [o for o in stack.prometheus_objects(settings()) if o["kind"] == "ConfigMap"]
    assert json.loads(cm["data"][stack.WATCHDOG_FILE]) == alertmanager.watchdog_rules()


def test_the_url_is_in_a_secret_and_nowhere_else_and_the_pod_rolls_when_it_changes() -> None:
    objects = stack.prometheus_objects(settings(URL))
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert URL in secret["stringData"][alertmanager.CONFIG_FILE]
    assert [o["kind"] for o in objects if URL in json.dumps(o)] == ["Secret"]
    digest = stack.CONFIG_HASH_ANNOTATION
    before = deployment(settings())["spec"]["template"]["metadata"]["annotations"][digest]
    after = deployment(settings(URL))["spec"]["template"]["metadata"]["annotations"][digest]
    assert before != after


def test_it_listens_on_loopback_only_and_prometheus_reaches_it_there() -> None:
    pod = deployment(settings())["spec"]["template"]["spec"]
    (beside,) = [c for c in pod["containers"] if c["name"] == "alertmanager"]
    assert f"--web.listen-address=127.0.0.1:{alertmanager.PORT}" in beside["args"]
    assert "--cluster.listen-address=" in beside["args"]  # no gossip port either
    assert "ports" not in beside
    assert beside["readinessProbe"]["exec"]["command"][0] == "/bin/amtool"
    assert beside["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in beside["volumeMounts"]}
    assert mounts == {alertmanager.CONFIG_DIR, alertmanager.DATA_DIR}
    secret_volume = {v["name"]: v for v in pod["volumes"]}["alertmanager-config"]
    assert secret_volume["secret"]["secretName"] == alertmanager.NAME
    config = stack.prometheus_config(settings())
    targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == [alertmanager.LISTEN]
    scraped = {j["job_name"]: j for j in config["scrape_configs"]}[alertmanager.SCRAPE_JOB]
    assert scraped["static_configs"] == [{"targets": [alertmanager.LISTEN]}]


@pytest.mark.parametrize("webhook", ["", URL])
def test_amtool_accepts_the_configuration(tmp_path: Path, webhook: str) -> None:
    if not Path(AMTOOL).is_file():
        pytest.skip(f"no amtool at {AMTOOL}: apt-get install prometheus-alertmanager")
    path = tmp_path / alertmanager.CONFIG_FILE
    path.write_text(alertmanager.config_text(settings(webhook)))
    run = subprocess.run(
        [AMTOOL, "check-config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout
    # Where a page of distml's goes, as Alertmanager's own routing tree decides it.
    routed = subprocess.run(
        [AMTOOL, "config", "routes", "test", f"--config.file={path}",
         "alertname=DistmlPredictorDown", "severity=page", "namespace=team-a", "isvc=tf-mnist"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert routed.returncode == 0, routed.stdout + routed.stderr
    expected = alertmanager.WEBHOOK_RECEIVER if webhook else alertmanager.NO_RECEIVER
    assert routed.stdout.strip() == expected
    watchdog = subprocess.run(
        [AMTOOL, "config", "routes", "test", f"--config.file={path}",
         f"alertname={alertmanager.WATCHDOG}", "severity=none"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert watchdog.stdout.strip() == alertmanager.WATCHDOG_RECEIVER, watchdog.stdout


def _amtool(*args: str) -> subprocess.CompletedProcess:
    if not Path(AMTOOL).is_file():
        pytest.skip(f"no amtool at {AMTOOL}: apt-get install prometheus-alertmanager")
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=60)


def test_notifications_are_grouped_by_labels_the_alerts_carry_tfjob_too() -> None:
    """Two stalled TFJobs of one namespace are two notifications: grouped by ``tfjob``, a
    label the training alerts carry (``job_name`` was one none did)."""
    from k8s.monitoring import rules

    assert alertmanager.config(settings(URL))["route"]["group_by"] == alertmanager.GROUP_BY
    carried = {"alertname"} | {
        k
        for g in rules.groups()
        for r in g["rules"]
        if "alert" in r
        for k in (*r["labels"], *_labels_of(r["expr"]))
    }
    assert set(alertmanager.GROUP_BY) <= carried
    assert "job_name" not in alertmanager.GROUP_BY


def _labels_of(expr: str) -> set[str]:
    """The labels an alert's expression keeps (``by``/``on`` lists, and label_replace's)."""
    import re

    kept = {x.strip() for m in re.findall(r"(?:by|on) \(([^)]*)\)", expr) for x in m.split(",")}
    return kept | set(re.findall(r'label_replace\([^"]*"(\w+)"', expr, re.S))


def test_a_service_down_holds_back_what_its_outage_also_sets_off_of_that_service_only() -> None:
    (inhibit,) = alertmanager.config(settings(URL))["inhibit_rules"]
    assert inhibit["equal"] == ["namespace", "isvc"]
    assert inhibit["source_matchers"] == ['alertname="DistmlPredictorDown"']
    from k8s.monitoring import rules

    alerts = {r["alert"] for g in rules.groups() for r in g["rules"] if "alert" in r}
    assert set(alertmanager.INHIBITED_BY_DOWN) <= alerts  # every name is a real alert
    assert "DistmlPredictorDown" not in alertmanager.INHIBITED_BY_DOWN


def test_amtool_refuses_what_alertmanager_would_refuse(tmp_path: Path) -> None:
    """The check above can fail: a receiver the route does not name is an error."""
    if not Path(AMTOOL).is_file():
        pytest.skip(f"no amtool at {AMTOOL}: apt-get install prometheus-alertmanager")
    config = alertmanager.config(settings(URL))
    config["route"]["receiver"] = "nobody"
    path = tmp_path / alertmanager.CONFIG_FILE
    path.write_text(json.dumps(config))
    run = subprocess.run([AMTOOL, "check-config", str(path)], capture_output=True, timeout=60)
    assert run.returncode != 0
