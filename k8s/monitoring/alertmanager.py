"""Notifications for distml's own Prometheus: Alertmanager beside it, as pure builders.

Alertmanager runs as a second container of the Prometheus pod (``k8s.monitoring.stack``)
and listens on the pod's loopback only (:data:`LISTEN`): its API v2 creates silences and
alerts without authentication, so nothing but the Prometheus beside it may reach it. No
Service, no port. Prometheus sends it the firing alerts (``alerting`` in prometheus.yml)
and scrapes its ``/metrics`` over the same loopback (:data:`SCRAPE_JOB`), so that a
notification that fails is an alert too (``k8s.monitoring.rules``).

Where the alerts go is ``cluster.alert_webhook`` (:data:`SETTING`): an ``http(s)`` URL that
gets Alertmanager's webhook JSON (version 4) for each group of alerts, firing and resolved.
The URL may carry a token, so the configuration is a Secret, not a ConfigMap. Without a
URL, Alertmanager still runs with a receiver that sends nothing: `invoke status` lists
the firing alerts either way, and naming a URL later is one `invoke up`.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

import yaml

from k8s.install import versions
from k8s.manifests.pods import container_security_context, meta
from k8s.providers.settings import Resources, Settings

SETTING = "cluster.alert_webhook (INVOKE_CLUSTER_ALERT_WEBHOOK)"
NAME = "distml-alertmanager"  # the Secret's name
COMPONENT = "monitoring"
PORT = 9093
LISTEN = f"127.0.0.1:{PORT}"
CONFIG_DIR = "/etc/alertmanager"
CONFIG_FILE = "alertmanager.yml"
DATA_DIR = "/alertmanager"
SCRAPE_JOB = "alertmanager"
UID = 65534  # the upstream image's USER nobody
RESOURCES = Resources("10m", "200m", "32Mi", "128Mi")
WEBHOOK_RECEIVER = "webhook"
NO_RECEIVER = "status-only"  # no integration: the alerts are in `invoke status` only
WATCHDOG_SETTING = "cluster.watchdog_webhook (INVOKE_CLUSTER_WATCHDOG_WEBHOOK)"
# The labels an alert's group is made of: one notification per alert and service, or per
# TFJob (the training alerts' ``tfjob``), never every stall of a namespace in one.
GROUP_BY = ["alertname", "namespace", "isvc", "tfjob"]
# How soon a group is sent, how often it is sent again while it changes or stays firing.
GROUP_WAIT, GROUP_INTERVAL, REPEAT_INTERVAL = "10s", "1m", "4h"
#: While a service's every predictor is down (a page), what that outage also sets off
#: says nothing more: each pod's target down, the burn of its budget, KEDA reading empty.
INHIBITED_BY_DOWN = (
    "DistmlPredictorTargetDown",
    "DistmlAvailabilityBudgetBurn",
    "DistmlLatencyBudgetBurn",
    "DistmlKedaMetricEmpty",
)
#: Always firing while Prometheus evaluates its rules and Alertmanager sends: a receiver
#: that stops hearing it every WATCHDOG_REPEAT knows the alerting itself is down (a dead
#: man's switch: distml's Prometheus and Alertmanager keep their data in an emptyDir).
WATCHDOG = "DistmlWatchdog"
WATCHDOG_RECEIVER = "watchdog"
WATCHDOG_REPEAT = "1m"


def parse_webhook(text: str, setting: str = SETTING) -> str:
    """A webhook setting's value (``cluster.alert_webhook``'s, or ``setting``'s): an
    absolute http(s) URL with a host, stripped; "" for none. ValueError naming the setting
    for anything else."""
    value = text.strip()
    if not value:
        return ""
    problem = ""
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError as e:  # a bracketed host that is not an IP, a bad port
        problem = str(e)
    else:
        if parts.scheme not in ("http", "https"):
            problem = "its scheme must be http or https"
        elif not host:
            problem = "it names no host"
        elif any(c.isspace() or ord(c) < 32 for c in value):
            problem = "it holds white space or control characters"
    if problem:
        raise ValueError(
            f"{setting} {value!r} is not a webhook URL ({problem}): name the receiver as "
            "http(s)://HOST[:PORT]/PATH, e.g. http://alert-sink.team-a.svc:8080/distml"
        )
    return value


def _receiver(name: str, url: str, send_resolved: bool = True) -> dict[str, Any]:
    if not url:
        return {"name": name}
    return {"name": name, "webhook_configs": [{"url": url, "send_resolved": send_resolved}]}


def config(s: Settings) -> dict[str, Any]:
    """alertmanager.yml: every alert to the webhook (resolved ones too), or to nobody; the
    watchdog to its own (``cluster.watchdog_webhook``) every WATCHDOG_REPEAT, or to nobody;
    what a service's outage also sets off held back while it is down."""
    main = WEBHOOK_RECEIVER if s.alert_webhook else NO_RECEIVER
    watchdog = {
        "receiver": WATCHDOG_RECEIVER,
        "matchers": [f'alertname="{WATCHDOG}"'],
        "group_by": ["alertname"],
        "group_wait": "0s",
        "group_interval": WATCHDOG_REPEAT,
        "repeat_interval": WATCHDOG_REPEAT,
    }
    route = {
        "receiver": main,
        "group_by": GROUP_BY,
        "group_wait": GROUP_WAIT,
        "group_interval": GROUP_INTERVAL,
        "repeat_interval": REPEAT_INTERVAL,
        "routes": [watchdog],
    }
    inhibit = {
        "source_matchers": ['alertname="DistmlPredictorDown"'],
        "target_matchers": [f'alertname=~"{"|".join(INHIBITED_BY_DOWN)}"'],
        "equal": ["namespace", "isvc"],
    }
    receivers = [
        _receiver(main, s.alert_webhook),
        _receiver(WATCHDOG_RECEIVER, s.watchdog_webhook, send_resolved=False),
    ]
    return {"route": route, "inhibit_rules": [inhibit], "receivers": receivers}


def watchdog_rules() -> dict[str, Any]:
    """The rule file of distml's own Prometheus beside ``distml-rules.yaml``: the watchdog
    (not in that file, which a user's Prometheus loads too: kube-prometheus has its own)."""
    rule = {
        "alert": WATCHDOG,
        "expr": "vector(1)",
        "labels": {"severity": "none"},
        "annotations": {
            "summary": "distml's alerting works: this alert fires always",
            "description": (
                f"Sent every {WATCHDOG_REPEAT} to {WATCHDOG_SETTING}, if set: a receiver that "
                "stops hearing it (a dead man's switch) knows that distml's Prometheus or "
                "Alertmanager is down, and that no other alert would reach anyone."
            ),
        },
    }
    return {"groups": [{"name": "distml-watchdog", "rules": [rule]}]}


def config_text(s: Settings) -> str:
    """alertmanager.yml, as a person would write it."""
    return str(yaml.safe_dump(config(s), sort_keys=False))


def digest(s: Settings) -> str:
    """A short hash of the configuration: the pod rolls when it changes."""
    return hashlib.sha256(config_text(s).encode()).hexdigest()[:16]


def secret(s: Settings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(NAME, s.namespace, COMPONENT),
        "type": "Opaque",
        "stringData": {CONFIG_FILE: config_text(s)},
    }


def prometheus_alerting() -> dict[str, Any]:
    """prometheus.yml's ``alerting``: the Alertmanager beside it, over loopback."""
    return {"alertmanagers": [{"static_configs": [{"targets": [LISTEN]}]}]}


def scrape_config() -> dict[str, Any]:
    """Its own counters (``alertmanager_notifications_failed_total``), over loopback."""
    return {"job_name": SCRAPE_JOB, "static_configs": [{"targets": [LISTEN]}]}


def container() -> dict[str, Any]:
    """Loopback only, no gossip (one replica); ready once its API answers, asked by the
    image's own amtool from inside the pod (an httpGet probe would need the pod's IP)."""
    ready = [
        "/bin/amtool",
        f"--alertmanager.url=http://{LISTEN}",
        "--output=json",
        "config",
        "show",
    ]
    return {
        "name": "alertmanager",
        "image": versions.ALERTMANAGER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            f"--config.file={CONFIG_DIR}/{CONFIG_FILE}",
            f"--storage.path={DATA_DIR}",
            f"--web.listen-address={LISTEN}",
            "--cluster.listen-address=",
        ],
        "readinessProbe": {"exec": {"command": ready}, "periodSeconds": 10, "timeoutSeconds": 5},
        "resources": RESOURCES.as_dict(),
        "securityContext": {
            **container_security_context(run_as=UID),
            "readOnlyRootFilesystem": True,
        },
        "volumeMounts": [
            {"name": "alertmanager-config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "alertmanager-data", "mountPath": DATA_DIR},
        ],
    }


def volumes() -> list[dict[str, Any]]:
    return [
        {"name": "alertmanager-config", "secret": {"secretName": NAME}},
        {"name": "alertmanager-data", "emptyDir": {}},
    ]
