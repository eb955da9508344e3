"""``python -m integration.operator_prometheus``: the kind run's second lifecycle, against a
Prometheus set up as the Prometheus Operator sets one up, not distml's own.

The Operator cannot be had here (the module proxy refuses its main module), so its
Prometheus is made the way the Operator makes it from ``invoke render
--prometheus-operator``'s objects: in a namespace of its own (:data:`NAMESPACE`), scraping
at the Operator's default 30 s, one scrape job per PodMonitor endpoint as v0.93.0 writes it
(``integration.operator_config``: job label ``<namespace>/<PodMonitor>``), and per
ServiceMonitor endpoint (the training operator's, KEDA's), the PrometheusRule's groups as
its rules, the external labels it adds, and its governing Service ``prometheus-operated``.
Its rights are kube-prometheus's in the namespaces it watches, none: only the Roles and
RoleBindings `render` wrote, applied as the docs say. Every monitor's targets must come up.

Then, as a user whose ``cluster.prometheus`` names it: `invoke deploy --scale-metric
concurrency` (the interval read off its targets: KEDA's window four 30 s scrapes), `invoke
loadtest --expect-scale-out` (KEDA scales the predictor out on its numbers; the server's
count, read from it, matches Locust's) and `invoke status` (its figures, "every 30 s").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from integration.kind_run import NAMESPACE as DISTML_NAMESPACE
from integration.kind_run import context
from integration.operator_config import scrape_config
from k8s.install import versions
from k8s.monitoring import operator_rbac, prometheus_operator
from k8s.monitoring.prometheus import PrometheusRef, targets
from k8s.providers.settings import Settings

NAMESPACE = "monitoring"
NAME = "k8s"  # the Prometheus object's name: its pods are prometheus-k8s-N
SERVICE = "prometheus-operated"  # the Operator's governing Service, port "web" 9090
PORT = 9090
INTERVAL = "30s"  # the Operator's default scrapeInterval and evaluationInterval
SETTING = f"{NAMESPACE}/{SERVICE}:{PORT}"
READY_TIMEOUT_S = 180
TARGETS_TIMEOUT_S = 150  # the predictor pods discovered and scraped once at 30 s
ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ["deploy", "--max-replicas", "3", "--scale-metric", "concurrency"]
# Longer than the first run's 60 s: KEDA's window is now 2 minutes.
LOAD = ["loadtest", "--concurrency", "5", "--duration", "120s", "--expect-scale-out"]


MONITORS = ("PodMonitor", "ServiceMonitor")


def prometheus_yml(s: Settings) -> dict[str, Any]:
    monitors = [o for o in prometheus_operator.operator_objects(s) if o["kind"] in MONITORS]
    return {
        "global": {
            "scrape_interval": INTERVAL,
            "evaluation_interval": INTERVAL,
            "external_labels": {
                "prometheus": f"{NAMESPACE}/{NAME}",
                "prometheus_replica": f"prometheus-{NAME}-0",
            },
        },
        "rule_files": ["/etc/prometheus/rules/*.yaml"],
        "scrape_configs": [scrape_config(m) for m in monitors],
    }


def _meta(name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/name": "prometheus"},
    }


def _rbac(s: Settings) -> list[dict[str, Any]]:
    """Its ServiceAccount, as kube-prometheus names it (``prometheus-k8s``: render's default
    ``--prometheus-sa``), with no right of its own in distml's or the operators' namespaces
    (kube-prometheus grants Roles in default, kube-system and monitoring only); then the
    Roles and RoleBindings `render --prometheus-operator` wrote for it, as a user applies
    them: the discovery its monitors need, and nothing else."""
    account = f"prometheus-{NAME}"
    assert f"{NAMESPACE}/{account}" == operator_rbac.DEFAULT_ACCOUNT
    rendered = [
        o for o in prometheus_operator.operator_objects(s) if o["kind"] in ("Role", "RoleBinding")
    ]
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(account)}, *rendered]


def _deployment() -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "prometheus", "prometheus": NAME}
    container = {
        "name": "prometheus",
        "image": versions.PROMETHEUS_IMAGE,
        "args": [
            "--config.file=/etc/prometheus/prometheus.yml",
            "--storage.tsdb.path=/prometheus",
            f"--web.listen-address=:{PORT}",
        ],
        "ports": [{"name": "web", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": PORT}, "periodSeconds": 5},
        # No CPU request: it must schedule while the earlier steps' predictors still hold
        # their peak (the HPA keeps it 5 minutes), which fills a 2-CPU node's requests.
        "resources": {"requests": {"memory": "128Mi"}},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/prometheus"},
            {"name": "rules", "mountPath": "/etc/prometheus/rules"},
            {"name": "data", "mountPath": "/prometheus"},
        ],
    }
    spec = {
        "serviceAccountName": f"prometheus-{NAME}",
        "securityContext": {"runAsUser": 65534, "runAsNonRoot": True, "fsGroup": 65534},
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": f"prometheus-{NAME}"}},
            {"name": "rules", "configMap": {"name": f"prometheus-{NAME}-rulefiles-0"}},
            {"name": "data", "emptyDir": {}},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(f"prometheus-{NAME}"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def objects(s: Settings) -> list[dict[str, Any]]:
    """Everything, in apply order."""
    rule = prometheus_operator.prometheus_rule(s)
    rule_file = f"{s.namespace}-{rule['metadata']['name']}.yaml"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *_rbac(s),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(f"prometheus-{NAME}"),
            "data": {"prometheus.yml": json.dumps(prometheus_yml(s), indent=2)},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(f"prometheus-{NAME}-rulefiles-0"),
            "data": {rule_file: yaml.safe_dump(rule["spec"], sort_keys=False)},
        },
        _deployment(),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(SERVICE),
            "spec": {
                "selector": {"prometheus": NAME},
                "ports": [{"name": "web", "port": PORT, "targetPort": PORT}],
            },
        },
    ]


def _kubectl(kube_context: str, *args: str, stdin: str | None = None) -> str:
    run = subprocess.run(
        ["kubectl", "--context", kube_context, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT_S + 30,
    )
    if run.returncode != 0:
        raise DistmlError(f"kubectl {' '.join(args[:3])}: {run.stderr.strip()}")
    return run.stdout


def install(kube_context: str, s: Settings) -> None:
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects(s)})
    _kubectl(kube_context, "apply", "-f", "-", stdin=doc)
    _kubectl(
        kube_context,
        "-n",
        NAMESPACE,
        "rollout",
        "status",
        f"deployment/prometheus-{NAME}",
        f"--timeout={READY_TIMEOUT_S}s",
    )


def wait_for_predictor_targets(kube: Any, s: Settings) -> list[str]:
    """The predictor pods as its targets, up, under the Operator's job label."""
    ref = PrometheusRef(NAMESPACE, SERVICE, PORT)
    job = f"{s.namespace}/{prometheus_operator.PREDICTOR}"

    def seen() -> list[str]:
        return [
            f"{t.labels.get('pod')} ({t.labels.get('job')}, every {t.scrape_interval_s:g} s)"
            for t in targets(kube, ref)
            if t.job == job
            and t.health == "up"
            and t.labels.get("isvc") == s.service
            and t.scrape_interval_s == 30
        ]

    verdict = poll(
        seen,
        lambda up: Done() if up else Pending("no predictor target up yet"),
        timeout=TARGETS_TIMEOUT_S,
        interval=5.0,
        retry_on=(DistmlError,),
    )
    if not isinstance(verdict, Done):
        raise DistmlError(f"{SETTING}: no predictor target up under job {job} at 30 s")
    return seen()


def wait_for_operator_targets(kube: Any) -> list[str]:
    """The ServiceMonitors' Services (the training operator's, KEDA's) as targets, up:
    discovered in their namespaces through the Roles `render` wrote, nothing else."""
    from k8s.install.operator_check import PROBES

    ref = PrometheusRef(NAMESPACE, SERVICE, PORT)
    wanted = {PROBES[k].deployment for k in ("training_operator", "keda")}  # their Services

    def up() -> set[str]:
        return {t.job for t in targets(kube, ref) if t.job in wanted and t.health == "up"}

    verdict = poll(
        up,
        lambda found: Done() if found == wanted else Pending(f"up: {sorted(found)}"),
        timeout=TARGETS_TIMEOUT_S,
        interval=5.0,
        retry_on=(DistmlError,),
    )
    if not isinstance(verdict, Done):
        raise DistmlError(f"{SETTING}: the ServiceMonitors' targets are not all up: {verdict}")
    return sorted(wanted)


def lifecycle() -> list[str]:
    """deploy, loadtest, status as a user of that Prometheus; each must pass. Their output."""
    env = {**os.environ, "INVOKE_CLUSTER_PROMETHEUS": SETTING}
    said = []
    for task in (DEPLOY, LOAD, ["status"]):
        print(f"== operator-style Prometheus: invoke {' '.join(task)}", flush=True)
        run = subprocess.run(
            [sys.executable, "-m", "invoke", *task],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        print(run.stdout, flush=True)
        if run.returncode != 0:
            raise DistmlError(f"invoke {task[0]} against {SETTING} failed ({run.returncode})")
        said.append(run.stdout)
    return said


def check(said: Sequence[str]) -> list[str]:
    """What the output must say: the 30 s interval found and used, and status reading it."""
    deploy, _, status = said
    wanted = [
        (deploy, f"Prometheus {SETTING} scrapes every 30 s"),
        (deploy, "read from Prometheus over the last 120s"),
        (status, f"({SETTING}, every 30 s)"),
    ]
    return [text for out, text in wanted if text not in out]


def main(argv: Sequence[str] | None = None) -> int:
    from k8s.client.kube import ApiKube

    del argv
    s = Settings(image="-", namespace=DISTML_NAMESPACE, serving_mode="standard")
    started = time.monotonic()
    try:
        install(context(), s)
        up = wait_for_predictor_targets(ApiKube(context()), s)
        print(f"operator-style Prometheus {SETTING}: predictor targets up: {', '.join(up)}")
        services = wait_for_operator_targets(ApiKube(context()))
        print(f"operator-style Prometheus {SETTING}: ServiceMonitor targets up: {services}")
        missing = check(lifecycle())
    except DistmlError as e:
        print(f"operator-style Prometheus: FAILED: {e}", file=sys.stderr)
        return 1
    if missing:
        print(f"operator-style Prometheus: FAILED: the output lacks {missing}", file=sys.stderr)
        return 1
    print(
        f"operator-style Prometheus: deploy, loadtest and status passed in "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
