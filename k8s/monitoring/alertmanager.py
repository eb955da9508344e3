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
# The labels an alert's group is made of (one notification per service, per alert).
GROUP_BY = ["alertname", "namespace", "isvc", "job_name"]
# How soon a group is sent, how often it is sent again while it changes or stays firing.
GROUP_WAIT, GROUP_INTERVAL, REPEAT_INTERVAL = "10s", "1m", "4h"


def parse_webhook(text: str) -> str:
    """``cluster.alert_webhook``'s value: an absolute http(s) URL with a host, stripped;
    "" for none. ValueError naming the setting for anything else."""
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
            f"{SETTING} {value!r} is not a webhook URL ({problem}): name the receiver as "
            "http(s)://HOST[:PORT]/PATH, e.g. http://alert-sink.team-a.svc:8080/distml"
        )
    return value


def config(s: Settings) -> dict[str, Any]:
    """alertmanager.yml: every alert to the webhook (resolved ones too), or to nobody."""
    route = {
        "group_by": GROUP_BY,
        "group_wait": GROUP_WAIT,
        "group_interval": GROUP_INTERVAL,
        "repeat_interval": REPEAT_INTERVAL,
    }
    if not s.alert_webhook:
        return {"route": {**route, "receiver": NO_RECEIVER}, "receivers": [{"name": NO_RECEIVER}]}
    receiver = {
        "name": WEBHOOK_RECEIVER,
        "webhook_configs": [{"url": s.alert_webhook, "send_resolved": True}],
    }
    return {"route": {**route, "receiver": WEBHOOK_RECEIVER}, "receivers": [receiver]}


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
