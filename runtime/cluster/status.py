"""`invoke status` on a cluster: one table of the cluster, its operators, the TFJobs, the
InferenceService with its ready replicas, what drives its scaling, the service as
Prometheus sees it (request rate, 5xx ratio, latency quantiles, replicas scraped: when a
Prometheus is there, ``k8s.monitoring.prometheus.ref``), the alerts it fires about this
work dir (``runtime.cluster.alerts``), the serving version's model card (its publish.json,
copied off the volume through the loader pod), and the last load test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from invoke.exceptions import UnexpectedExit

from common.errors import DistmlError
from k8s.client.access import Need, group_of, resource_of
from k8s.client.kube import KubeError
from k8s.client.objects import ISVC_API, TFJOB_API, ReplicaCounter, is_true, tfjob_state
from k8s.client.ownership import owned, owner, proven, uid_key, uid_of
from k8s.install.operator_check import PROBES
from k8s.install.operator_proof import discovered
from k8s.install.operators import deployment_available
from k8s.install.optional_operators import ARGO_DEPLOYMENTS, KEDA_DEPLOYMENTS, KEDA_NAMESPACE
from k8s.manifests import HPA_CPU_TARGET_PERCENT
from k8s.manifests.names import ARGO_NAMESPACE, INSTANCE_LABEL
from k8s.monitoring import prometheus, scrape
from k8s.monitoring import stack as monitoring_objects
from ml.contract import serving_metrics, serving_record
from ml.contract.records import model_card, read_publish
from runtime.canary import live as canary_live
from runtime.cluster import alerts, lab_owner, training_view
from runtime.cluster.access_check import TASK as ACCESS_TASK
from runtime.cluster.context import ClusterContext
from runtime.cluster.volume import Volume
from runtime.output.tables import one_line, table
from runtime.workdir.state import State

Row = tuple[str, str]
CARD_TIMEOUT_S = 120  # the loader pod that reads the model card off the volume
QUANTILES = (0.5, 0.95, 0.99)  # the latency quantiles `status` shows (from Prometheus)
# (label, namespace, Deployment) of what `up` installs, in install order.
COMPONENTS: list[tuple[str, str, str]] = [
    ("training operator", "kubeflow", "training-operator"),
    ("cert-manager", "cert-manager", "cert-manager-webhook"),
    ("kserve", "kserve", "kserve-controller-manager"),
]
KNATIVE_COMPONENTS: list[tuple[str, str, str]] = [  # before kserve, in knative mode
    ("istio", "istio-system", "istiod"),
    ("knative serving", "knative-serving", "controller"),
]


def status(cx: ClusterContext) -> int:
    state = cx.wd.state()
    p = cx.provider
    exists = p.exists(cx.c)
    # A lab cluster of this name may be another work dir's: the row says whose.
    running = "running" + (lab_owner.whose(cx) if exists and cx.owns_cluster else "")
    rows: list[Row] = [
        ("item", "state"),
        (
            "cluster",
            f"{p.cluster} ({p.name}, context {p.context}): "
            + (running if exists else "not found (run `invoke up`)"),
        ),
    ]
    if exists:
        found, theirs = _in_cluster(
            cx, state.serving_mode or "knative", state.argo, state.monitoring
        )
        rows += found
        if state.deployed and not theirs:  # the service under its name is not someone else's
            rows += _scaling(cx, state)
            rows += live(cx)
        if not theirs:  # training's live figures and alerts too, before any deploy
            rows += training_view.rows(cx)
            rows += alerts.rows(cx)
        if state.deployed and not theirs:
            rows += serving_card(cx)
    rows += canary_rows(cx)
    rows += _last_loadtest(state.last_loadtest)
    for line in table(rows).splitlines():
        cx.out(line)
    return 0


def canary_rows(cx: ClusterContext) -> list[Row]:
    """A running canary (its share and last line, from the deploy running it here), or the
    last one's outcome."""
    found = canary_live.facts(cx.wd, cx.service)
    return canary_live.status_rows(found, canary_live.running_pid(found) is not None)


def _in_cluster(
    cx: ClusterContext, serving_mode: str, argo: bool, monitoring: bool = False
) -> tuple[list[Row], bool]:
    """The operators; when the API answered, the TFJobs and the InferenceService too
    (what this user may not read is a row that says so). And whether the InferenceService
    of this work dir's name is someone else's."""
    components = list(COMPONENTS)
    if serving_mode == "knative":
        components[2:2] = KNATIVE_COMPONENTS
    if argo:  # `up --with-argo`
        components.append(("argo workflows", ARGO_NAMESPACE, ARGO_DEPLOYMENTS[0]))
    if monitoring and serving_mode == "standard":  # `up --with-monitoring`
        components.append(("keda", KEDA_NAMESPACE, KEDA_DEPLOYMENTS[0]))
    if monitoring and not cx.prometheus:  # distml's own Prometheus, in its namespace
        components.append(("prometheus", cx.namespace, monitoring_objects.NAME))
    rows: list[Row] = []
    for label, ns, dep in components:
        try:
            ok = deployment_available(cx.kube, ns, dep)
            state = "available" if ok else "not installed / not available"
        except KubeError as e:
            if not e.forbidden:  # unreachable, a timeout, a 5xx
                return [*rows, _unreachable(e)], False
            try:
                state = _forbidden(cx, ns)
            except KubeError as e:
                return [*rows, _unreachable(e)], False
        rows.append((label, state))
    try:
        rows += _tfjobs(cx)
        isvc, theirs = _inference_service(cx)
    except KubeError as e:  # not a 403 (those are rows): unreachable, a timeout, a 5xx
        return [*rows, _unreachable(e)], False
    return [*rows, isvc], theirs


def _unreachable(e: KubeError) -> Row:
    return ("cluster API", f"not reachable: {e}")


def _forbidden(cx: ClusterContext, namespace: str) -> str:
    """An operator whose namespace this user may not read (403), said by API discovery
    (``k8s.install.operator_proof``: what every user may read)."""
    unread = "cannot be read here (forbidden)"
    step = next((step for step, p in PROBES.items() if p.namespace == namespace), None)
    if step is None:
        return unread
    served, said = discovered(cx.kube, step)
    return f"{unread}; {'found' if served else 'not found'} by API discovery ({said})"


def _tfjobs(cx: ClusterContext) -> list[Row]:
    """The TFJobs: on a cluster distml did not create, this work dir's only (its label
    and a uid it recorded), and one line for each of its names or its label that someone
    else holds; every TFJob in the namespace on a cluster distml made."""
    try:
        jobs = cx.kube.list(TFJOB_API, "TFJob", cx.namespace)
    except KubeError as e:
        if not e.forbidden:
            raise
        return [("TFJobs", _forbidden_read(cx, "list", TFJOB_API, "TFJob"))]
    recorded = {k for k in cx.uids if k.startswith("TFJob ")}
    rows = []
    for job in jobs:
        label = f"TFJob {job['metadata']['name']}"
        if not _mine(cx, job):
            if owned(job, cx.instance) or uid_key("TFJob", *_where(job)) in recorded:
                rows.append((label, f"not this work dir's ({_whose(cx, job)})"))
            continue  # another team's, another work dir's: none of this work dir's business
        workers = ((job.get("status") or {}).get("replicaStatuses") or {}).get("Worker", {})
        rows.append(
            (
                label,
                f"{tfjob_state(job)}; workers "
                + ", ".join(f"{k} {v}" for k, v in sorted(workers.items())),
            )
        )
    return rows


def _inference_service(cx: ClusterContext) -> tuple[Row, bool]:
    """The InferenceService's row, and whether it is someone else's (then nothing of the
    service that answers under its name is this work dir's to show)."""
    label = f"InferenceService {cx.service}"
    try:
        isvc = cx.get(ISVC_API, "InferenceService", cx.service)
    except KubeError as e:
        if not e.forbidden:
            raise
        return (label, _forbidden_read(cx, "get", ISVC_API, "InferenceService")), False
    if isvc is None:
        return ("InferenceService", "not deployed"), False
    if not _mine(cx, isvc):  # someone else's of the name: not this work dir's service
        return (label, f"not this work dir's ({_whose(cx, isvc)})"), True
    ready = is_true(isvc, "Ready")
    url = (isvc.get("status") or {}).get("url", "-")
    try:
        replicas = f"{ReplicaCounter(cx.kube, cx.namespace, cx.service)()} ready replica(s)"
    except KubeError as e:
        if not e.forbidden:
            raise
        replicas = f"ready replicas unknown ({_forbidden_read(cx, 'list', 'v1', 'Pod')})"
    return (label, f"{'Ready' if ready else 'not ready'}, {url}, {replicas}"), False


def _mine(cx: ClusterContext, obj: dict[str, Any]) -> bool:
    """``obj`` is this work dir's: on a cluster distml did not create, its instance label
    and a uid it recorded (``proven``: a copy of the label proves nothing)."""
    return cx.owns_cluster or cx.dry or proven(obj, cx.instance, cx.uids)


def _whose(cx: ClusterContext, obj: dict[str, Any]) -> str:
    if owned(obj, cx.instance):  # ``owner`` would call this work dir's label another's
        return (
            f"it carries this work dir's label {INSTANCE_LABEL}={cx.instance}, but its uid "
            f"{uid_of(obj) or '-'} is not one this work dir recorded: a copy of the label"
        )
    return owner(obj)


def _where(obj: dict[str, Any]) -> tuple[str, str | None]:
    meta = obj.get("metadata") or {}
    return meta.get("name", ""), meta.get("namespace")


def _forbidden_read(cx: ClusterContext, verb: str, api_version: str, kind: str) -> str:
    """What this user may not read here (the API said 403: reachable, not allowed), the
    right it lacks, and where the Role to ask for is printed."""
    need = Need(group_of(api_version), resource_of(kind), verb)
    return (
        f"{verb} {need.resource_name} in namespace {cx.namespace}: forbidden; "
        f"`invoke {ACCESS_TASK}` prints the Role to ask for"
    )


def _scaling(cx: ClusterContext, state: State) -> list[Row]:
    """What drives the predictor's scaling, as `deploy` applied it."""
    metric, target = state.scale_metric, state.target
    if (state.serving_mode or "knative") == "knative":
        how = f"Knative's autoscaler on concurrency, {target or 1} in flight per replica"
    elif metric == "concurrency":
        how = f"KEDA on requests in flight (Prometheus), {target} per replica"
    elif metric == "rps":
        how = f"KEDA on requests per second (Prometheus), {target} per replica"
    else:
        how = f"an HPA on CPU, {HPA_CPU_TARGET_PERCENT}% of each predictor's request"
    cap = f", at most {state.max_replicas} replicas" if state.max_replicas else ""
    return [("scaling", how + cap)]


def live(cx: ClusterContext) -> list[Row]:
    """The service as Prometheus sees it now (`ml.contract.serving_metrics`'s queries); one row
    saying why when it cannot be read."""
    ref = prometheus.ref(cx.settings())
    if ref is None:
        return []
    if cx.dry:
        return [("Prometheus", f"{ref}: not read under --dry")]
    ns, svc = cx.namespace, cx.service

    def read(promql: str) -> float | None:
        return prometheus.scalar(cx.kube, ref, promql, kubectl=cx.provider.kubectl)

    try:
        every = scrape.interval(cx.kube, ref, ns, svc, kubectl=cx.provider.kubectl)
        w = serving_metrics.rate_window(every.seconds, serving_metrics.STATUS_FLOOR_S)
        rate = read(serving_metrics.request_rate(ns, svc, w))
        errors = read(serving_metrics.error_ratio(ns, svc, w))
        quantiles = [read(serving_metrics.latency_quantile(ns, svc, q, w)) for q in QUANTILES]
        pods = read(serving_metrics.replicas(ns, svc))
    except prometheus.PrometheusError as e:
        return [("Prometheus", one_line(str(e)))]
    ms = "/".join("-" if v is None else f"{v * 1000:.0f}" for v in quantiles)
    return [
        (f"requests (last {w})", f"{rate or 0:.1f} req/s, {(errors or 0) * 100:.1f}% 5xx"),
        (
            "latency p50/p95/p99",
            f"{ms} ms" if any(v is not None for v in quantiles) else "no requests",
        ),
        ("replicas scraped", f"{int(pods or 0)} up ({ref}, every {every.seconds:g} s)"),
        *_keda_window(cx, every),
    ]


def _keda_window(cx: ClusterContext, every: scrape.Interval) -> list[Row]:
    scaled_at = cx.wd.state().scrape_interval_s
    problem = scaled_at and scrape.keda_window_problem(every, scaled_at)
    return [("KEDA's window", f"too short: {problem}")] if problem else []


def serving_card(cx: ClusterContext) -> list[Row]:
    """The serving version's model card: its publish.json's serving copy, read off the
    volume (best effort: the rest of the status stands without it)."""
    s = cx.settings()
    local = Path(serving_record(cx.wd.root / "cluster-volume", s.service))
    local.unlink(missing_ok=True)  # never show an old copy as the current one
    try:
        Volume(cx, s).copy_out(
            [(serving_record(s.mount_path, s.service), local)], timeout=CARD_TIMEOUT_S
        )
    except (DistmlError, OSError, UnexpectedExit) as e:
        return [("serving model", f"could not read its publish.json off the volume ({e})")]
    return [(f"serving {label}", text) for label, text in model_card(read_publish(local))]


def _last_loadtest(path: str | None) -> list[Row]:
    if not (path and Path(path).is_file()):
        return []
    s: dict[str, Any] = json.loads(Path(path).read_text())
    return [
        (
            "last load test",
            f"{s['requests']} requests, {s['failures']} failed, {s['rps'] or 0:.1f} "
            f"req/s, replicas peak {s.get('replicas_peak')}",
        )
    ]
