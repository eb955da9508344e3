"""`invoke status` on a cluster: one table of the cluster, its operators, the TFJobs, the
InferenceService with its ready replicas, what drives its scaling, the service as
Prometheus sees it (request rate, 5xx ratio, latency quantiles, replicas scraped: when a
Prometheus is there, ``k8s.monitoring.prometheus.ref``), the serving version's model card (its
publish.json, copied off the volume through the loader pod), and the last load test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from invoke.exceptions import UnexpectedExit

from common.errors import DistmlError
from k8s import manifests
from k8s.client.kube import KubeError
from k8s.client.objects import ISVC_API, TFJOB_API, ReplicaCounter, is_true, tfjob_state
from k8s.client.ownership import owner
from k8s.install.operator_check import PROBES
from k8s.install.operator_proof import discovered
from k8s.install.operators import deployment_available
from k8s.install.optional_operators import ARGO_DEPLOYMENTS, KEDA_DEPLOYMENTS, KEDA_NAMESPACE
from k8s.manifests import HPA_CPU_TARGET_PERCENT
from k8s.manifests.names import ARGO_NAMESPACE
from k8s.monitoring import prometheus
from k8s.monitoring import stack as monitoring_objects
from ml import contract_metrics
from ml.contract import model_card, read_publish, serving_record
from runtime.cluster import lab_owner
from runtime.cluster.context import ClusterContext
from runtime.cluster.volume import Volume
from runtime.state import State
from runtime.tables import table

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
        rows += _in_cluster(cx, state.serving_mode or "knative", state.argo, state.monitoring)
        if state.deployed:
            rows += _scaling(cx, state)
            rows += live(cx)
            rows += serving_card(cx)
    rows += _last_loadtest(state.last_loadtest)
    for line in table(rows).splitlines():
        cx.out(line)
    return 0


def _in_cluster(
    cx: ClusterContext, serving_mode: str, argo: bool, monitoring: bool = False
) -> list[Row]:
    """The operators; when the API answered, the TFJobs and the InferenceService too."""
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
                return [*rows, ("cluster API", f"not reachable: {e}")]
            try:
                state = _forbidden(cx, ns)
            except KubeError as e:
                return [*rows, ("cluster API", f"not reachable: {e}")]
        rows.append((label, state))
    return rows + _tfjobs(cx) + [_inference_service(cx)]


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
    rows = []
    # On a shared cluster, this work dir's jobs only (another tenant's are not distml's).
    mine = None if cx.owns_cluster else manifests.selector(instance=cx.instance)
    for job in cx.kube.list(TFJOB_API, "TFJob", cx.namespace, label_selector=mine):
        workers = ((job.get("status") or {}).get("replicaStatuses") or {}).get("Worker", {})
        rows.append(
            (
                f"TFJob {job['metadata']['name']}",
                f"{tfjob_state(job)}; workers "
                + ", ".join(f"{k} {v}" for k, v in sorted(workers.items())),
            )
        )
    return rows


def _inference_service(cx: ClusterContext) -> Row:
    isvc = cx.get(ISVC_API, "InferenceService", cx.service)
    if isvc is None:
        return ("InferenceService", "not deployed")
    if not cx.ours(isvc):  # someone else's of the name: not this work dir's service
        return (f"InferenceService {cx.service}", f"not this work dir's ({owner(isvc)})")
    ready = is_true(isvc, "Ready")
    url = (isvc.get("status") or {}).get("url", "-")
    replicas = ReplicaCounter(cx.kube, cx.namespace, cx.service)()
    return (
        f"InferenceService {cx.service}",
        f"{'Ready' if ready else 'not ready'}, {url}, {replicas} ready replica(s)",
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
    """The service as Prometheus sees it now (`ml.contract_metrics`'s queries); one row
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
        rate = read(contract_metrics.request_rate(ns, svc))
        errors = read(contract_metrics.error_ratio(ns, svc))
        quantiles = [read(contract_metrics.latency_quantile(ns, svc, q)) for q in QUANTILES]
        pods = read(contract_metrics.replicas(ns, svc))
    except prometheus.PrometheusError as e:
        return [("Prometheus", _one_line(str(e)))]
    ms = "/".join("-" if v is None else f"{v * 1000:.0f}" for v in quantiles)
    return [
        ("requests (last 1 min)", f"{rate or 0:.1f} req/s, {(errors or 0) * 100:.1f}% 5xx"),
        (
            "latency p50/p95/p99",
            f"{ms} ms" if any(v is not None for v in quantiles) else "no requests",
        ),
        ("replicas scraped", f"{int(pods or 0)} up ({ref})"),
    ]


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


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
