"""``python -m integration.dashboard_check [--targets] [--training]``: what Grafana would
show, checked against the real Prometheus on the cluster (Grafana cannot run here).

- default: every service panel's PromQL of the committed dashboard (``k8s/monitoring/
  grafana/distml-dashboard.json``), its ``$namespace``, ``$isvc``, ``$__rate_interval``
  and ``$__range`` substituted, returns data; every series a panel reads exists for this
  service; each template variable lists this service's value. Exit 1 naming each empty
  one. ``--training``: the training row's panels too (but those rightly empty until
  something else happened: the scaling efficiency, the restarts), every TFJob worker pod
  of the namespace seen as an up target of the training job in the last hour, and the
  training operator's target up.
- ``--targets``: Prometheus scrapes every ready predictor pod, and finds it up (waited for,
  with a deadline: a new pod is discovered and scraped within a few seconds). The
  dashboard's replicas panel and the load test's server count are only right so.

Run by ``nox -s integration -- ... --with-monitoring`` after ``deploy`` (``--targets``)
and after the load test; it reads Prometheus through the API server's proxy
(``k8s.monitoring.prometheus``), the run's cluster and namespace from ``integration.kind_run``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from integration.kind_run import NAMESPACE, context
from k8s.client.objects import name_of, pod_ready, predictor_pods
from k8s.monitoring import prometheus, scrape, stack
from k8s.monitoring.grafana import dashboard
from ml.contract import DEFAULT_SERVICE
from ml.contract import training_metrics as tmx

TARGETS_TIMEOUT_S = 120.0


def _values(kube: Any, ref: Any, namespace: str, service: str) -> dict[str, str]:
    """The variables as Grafana fills them, ``$__rate_interval`` from the real interval."""
    every = scrape.interval(kube, ref, namespace, service).seconds
    return dashboard.values(namespace, service, every)


def last_training(kube: Any, ref: Any, namespace: str, over: str = "1h") -> float | None:
    """When a training worker of the namespace was last scraped training (within ``over``):
    the moment the training row is read at (its series go stale once the workers are done)."""
    sel = tmx.selector(namespace)
    training = f"timestamp({tmx.TRAINING}{{{sel}}} == 1)"
    found = prometheus.instant(kube, ref, f"max(max_over_time({training}[{over}:5s]))")
    return found[0][1] if found else None


def check_panels(
    kube: Any,
    ref: Any,
    namespace: str,
    service: str,
    row: str = dashboard.SERVICE_ROW,
    at: float | None = None,
) -> list[str]:
    """What the dashboard's ``row`` would show empty for ``namespace``/``service`` (none:
    all fine), its panels read now or ``at`` (a moment in the time shown). A panel that is
    rightly empty until something else happened (MAY_BE_EMPTY: a one-worker baseline run,
    a restarted job) is not checked."""
    board = json.loads(dashboard.PATH.read_text())
    values = _values(kube, ref, namespace, service)
    problems = []
    for name, label, promql in dashboard.variable_queries(board):
        query = dashboard.substitute(promql, values)
        listed = {labels.get(label) for labels, _ in prometheus.instant(kube, ref, query)}
        if values[name] not in listed:
            problems.append(f"variable ${name}: {query} does not list {values[name]!r}")
    for title, expr in dashboard.queries(board, row):
        if title in dashboard.MAY_BE_EMPTY:
            continue
        query = dashboard.substitute(expr, values)
        if not prometheus.instant(kube, ref, query, at=at):
            problems.append(f"panel {title!r}: no data from {query}")
        for series in dashboard.series_read(expr):
            selector = dashboard.substitute(series, values)
            if not prometheus.instant(kube, ref, f"count({selector})", at=at):
                problems.append(f"panel {title!r}: no series {selector}")
    return problems


#: The label the training operator puts on a TFJob's pods.
TFJOB_POD_LABEL = "training.kubeflow.org/job-name"


def training_targets(kube: Any, ref: Any, namespace: str, over: str = "1h") -> list[str]:
    """After the jobs ran: every TFJob worker pod of the namespace was a target of the
    training job and up at some point within ``over`` (they are gone from the targets once
    done), and the training operator is a target that is up now; what is not, named."""
    seen = {
        labels.get("pod", "")
        for labels, _ in prometheus.instant(
            kube, ref,
            f'max by (pod) (max_over_time(up{{job="{stack.TRAINING_JOB}",'
            f'namespace="{namespace}"}}[{over}])) == 1',
        )
    }  # fmt: skip
    pods = [name_of(p) for p in kube.list("v1", "Pod", namespace, label_selector=TFJOB_POD_LABEL)]
    problems = [f"training worker {pod}: never a target that was up" for pod in sorted(pods)
                if pod not in seen]  # fmt: skip
    if not pods:
        problems.append(f"no TFJob pod in {namespace} (did training run?)")
    operator = prometheus.instant(kube, ref, f'up{{job="{stack.OPERATOR_JOB}"}} == 1')
    if not operator:
        problems.append(f"the training operator ({stack.OPERATOR_JOB}) is not a target that is up")
    return problems


def check_training(kube: Any, ref: Any, namespace: str, service: str) -> list[str]:
    """The training row read at the last moment a worker was scraped (the jobs ran before
    the check: their series are stale now, as a dashboard's time range shows them), and the
    workers' and the operator's targets."""
    at = last_training(kube, ref, namespace)
    if at is None:
        return [f"no training worker of {namespace} scraped in the last hour"]
    row = dashboard.TRAINING_ROW
    return check_panels(kube, ref, namespace, service, row, at) + training_targets(
        kube, ref, namespace
    )


def nan_panels(kube: Any, ref: Any, namespace: str, service: str) -> list[str]:
    """Panels whose answer is NaN now (data, but no requests in their window): said, not
    failed."""
    board = json.loads(dashboard.PATH.read_text())
    values = _values(kube, ref, namespace, service)
    return [
        title
        for title, expr in dashboard.queries(board, dashboard.SERVICE_ROW)
        if any(
            math.isnan(v)
            for _, v in prometheus.instant(kube, ref, dashboard.substitute(expr, values))
        )
    ]


def unscraped_pods(kube: Any, ref: Any, namespace: str, service: str) -> list[str]:
    """Ready predictor pods that are no target of the Prometheus, or not up there."""
    health = {
        t.labels.get("pod"): t
        for t in scrape.service_targets(prometheus.targets(kube, ref), namespace, service)
    }
    missing = []
    for pod in predictor_pods(kube, namespace, service):
        if not pod_ready(pod):
            continue
        target = health.get(name_of(pod))
        if target is None:
            missing.append(f"{name_of(pod)} (no target)")
        elif target.health != "up":
            missing.append(f"{name_of(pod)} ({target.health}: {target.last_error or 'no error'})")
    return missing


def wait_for_targets(
    kube: Any, ref: Any, namespace: str, service: str, clock: Any = time
) -> list[str]:
    """Until every ready predictor pod is scraped and up: [] then, else what is missing
    at the deadline. No ready predictor at all is missing too."""

    def observe() -> list[str]:
        if not any(pod_ready(p) for p in predictor_pods(kube, namespace, service)):
            return [f"no ready predictor pod of {namespace}/{service}"]
        return unscraped_pods(kube, ref, namespace, service)

    verdict = poll(
        observe,
        lambda missing: Done([]) if not missing else Pending(", ".join(missing)),
        timeout=TARGETS_TIMEOUT_S,
        interval=2.0,
        clock=clock,
        retry_on=(DistmlError,),
    )
    return verdict.value if isinstance(verdict, Done) else [getattr(verdict, "status", "")]


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m integration.dashboard_check", description=__doc__)
    p.add_argument("--targets", action="store_true", help="check the scrape targets instead")
    p.add_argument(
        "--training", action="store_true", help="check the training row too (after train-all)"
    )
    p.add_argument("--context", default=context(), help=f"kubeconfig context ({context()})")
    p.add_argument("--namespace", default=NAMESPACE, help=f"distml's namespace ({NAMESPACE})")
    p.add_argument("--service", default=DEFAULT_SERVICE, help="the InferenceService")
    p.add_argument("--prometheus", default="", help="NAMESPACE/SERVICE:PORT (default: distml's)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from k8s.client.kube import ApiKube
    from k8s.providers.settings import Settings

    args = _args(argv)
    kube = ApiKube(args.context)
    # The user's Prometheus when named, else distml's own (`up --with-monitoring`).
    s = Settings(image="-", namespace=args.namespace, with_monitoring=True)
    ref = prometheus.ref(replace(s, prometheus=args.prometheus))
    where = f"{args.namespace}/{args.service}, Prometheus {ref}"
    try:
        if args.targets:
            problems = wait_for_targets(kube, ref, args.namespace, args.service)
            what = "every ready predictor pod is scraped and up"
        else:
            problems = check_panels(kube, ref, args.namespace, args.service)
            if args.training:
                problems += check_training(kube, ref, args.namespace, args.service)
            what = f"every panel of {dashboard.PATH.name} has data"
            nan = [] if problems else nan_panels(kube, ref, args.namespace, args.service)
            if nan:
                print(f"note: NaN now (no requests in their window): {', '.join(nan)}")
    except DistmlError as e:
        print(f"dashboard_check: FAIL ({where}): {e}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"dashboard_check: FAIL ({where}): {problem}", file=sys.stderr)
    if not problems:
        print(f"dashboard_check: {what} ({where})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
