"""Serving on a cluster: `invoke deploy` (selection Job, then a KServe InferenceService),
`invoke rollback`, and `invoke loadtest` through the ingress with the replica count the
autoscaler should reach."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from k8s import manifests
from k8s.client.kube import KubeError
from k8s.client.objects import ISVC_API, ReplicaCounter
from k8s.install import kserve_keda
from k8s.install.operator_check import survey
from k8s.install.optional_operators import KEDA_NAMESPACE
from k8s.manifests import inference
from k8s.monitoring import prometheus, scrape
from k8s.providers.settings import Settings
from k8s.waits.cluster_poll import WaitError
from k8s.waits.isvc_wait import wait_isvc_ready
from ml.contract import serving_metrics
from runtime.canary import live
from runtime.cluster.apply import apply_reporting, run_job
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.cluster.reach import Way, forward_target, way_in
from runtime.requests import DeployRequest, LoadtestRequest

SELECTION_TIMEOUT_S = 1200
SELECT_LOG_LINES = 24  # of the selection Job's log shown by deploy and rollback
KPA_TARGET_UTILISATION = 0.7  # Knative's default container-concurrency-target-percentage
# After the load, how long to keep counting ready predictors when scale-out is expected:
# the autoscaler decides during the load, its new pods turn ready after it.
HPA_SYNC_S = 15  # kube-controller-manager's --horizontal-pod-autoscaler-sync-period default
METRIC_RESOLUTION_S = 15  # metrics-server's --metric-resolution (components.yaml; k3s's too)
PREDICTOR_START_S = 60  # scheduling, TensorFlow import, model load, readiness probe
SETTLE_S = {
    "standard": HPA_SYNC_S + METRIC_RESOLUTION_S + PREDICTOR_START_S,
    "knative": PREDICTOR_START_S,  # the KPA's panic mode reacts within its 6 s window
}


def settle_s(s: Settings) -> float:
    """How long the autoscaler may take to act on a load. KEDA (standard mode,
    --scale-metric concurrency|rps): the HPA asks KEDA's metrics server, which queries
    Prometheus, whose numbers are a scrape old and averaged over four scrapes."""
    kind = _autoscaler(s)
    if kind != "keda":
        return SETTLE_S[kind]
    window = 4 * s.scrape_interval_s
    return HPA_SYNC_S + s.scrape_interval_s + window / 2 + PREDICTOR_START_S


# `deploy --scale-metric rps` without --target: requests per second per replica. About half
# what one predictor answered at full load on the kind runs (265 req/s from 3 replicas on
# 2 cores: benchmarks/results/kind-integration-2026-12-02.md).
DEFAULT_RPS_TARGET = 50


def expected_replicas(concurrency: int, target: int, max_replicas: int) -> int:
    """What Knative's KPA should reach: ceil(in flight / (target x 70%)), capped."""
    return min(max_replicas, math.ceil(concurrency / (target * KPA_TARGET_UTILISATION)))


def keda_expected_replicas(concurrency: int, target: int, max_replicas: int) -> int:
    """What KEDA's HPA should reach on requests in flight: ceil(in flight / target), capped
    (an AverageValue target: k8s.manifests.inference.keda_autoscaling)."""
    return min(max_replicas, math.ceil(concurrency / target))


# --------------------------------------------------------------------------- deploy


def deploy(cx: ClusterContext, request: DeployRequest, timeout: float) -> int:
    state = cx.require_up()
    refuse_during_canary(cx, "deploy")
    s = cx.settings(
        predictor=request.predictor,
        target=request.target,
        min_replicas=request.min_replicas,
        max_replicas=request.max_replicas,
        container_concurrency=request.container_concurrency,
        request_logger=request.request_logger,
    )
    s = _scaling(cx, s, request)
    cx.check_image(state, s)
    cx.check_namespace()  # labelled since `up`? the predictor would never get its model
    cx.out("== selection")
    job = manifests.selection_job(s, min_accuracy=request.min_accuracy, force=request.force)
    _select(cx, job)
    cx.out(f"== serving ({s.serving_mode} mode, {request.predictor} predictor)")
    _apply_serving(cx, s)
    if cx.dry:
        return 0
    try:
        url = wait_isvc_ready(
            cx.kube,
            cx.namespace,
            s.service,
            timeout=timeout,
            clock=cx.clock,
            out=cx.out,
            kubectl=cx.provider.kubectl,
        )
    except WaitError as e:
        raise ClusterError(f"the InferenceService did not become Ready: {e}") from e
    cx.wd.update_state(
        deployed=True,
        target=s.target,
        max_replicas=s.max_replicas,
        scale_metric=drives(s),
        scrape_interval_s=s.scrape_interval_s if inference.autoscaler_class(s) == "keda" else None,
    )
    _print_access(cx, s, url)
    return 0


def drives(s: Settings) -> str:
    """What scales the predictor: knative mode's concurrency, else the scale metric."""
    return "concurrency" if s.serving_mode == "knative" else s.scale_metric


def _scaling(cx: ClusterContext, s: Settings, request: DeployRequest) -> Settings:
    """The scale metric and its per-replica target; a request metric without Prometheus or
    KEDA falls back to cpu, said in one line; knative mode refuses anything but concurrency."""
    asked = request.scale_metric
    if s.serving_mode == "knative":
        if asked not in (None, "concurrency"):
            raise ClusterError(
                f"--scale-metric {asked} is for standard serving mode; knative mode scales on "
                "concurrent requests per replica (Knative's autoscaler, --target)"
            )
        return s
    if asked in (None, "cpu"):
        return replace(s, scale_metric="cpu")
    missing = _missing_for_keda(cx, s)
    if missing:
        cx.out(
            f"note: --scale-metric {asked} needs {missing}; scaling on cpu instead (an HPA "
            f"at {manifests.HPA_CPU_TARGET_PERCENT}% of each predictor's CPU request)"
        )
        return replace(s, scale_metric="cpu")
    target = request.target or (DEFAULT_RPS_TARGET if asked == "rps" else s.target)
    per = "requests in flight" if asked == "concurrency" else "requests per second"
    s = replace(s, scale_metric=asked, target=target, scrape_interval_s=_scrape_interval(cx, s))
    window = serving_metrics.rate_window(s.scrape_interval_s, inference.KEDA_FLOOR_S)
    cx.out(
        f"scaling: KEDA on {per}, {target} per replica, read from Prometheus over the last {window}"
    )
    return s


def _scrape_interval(cx: ClusterContext, s: Settings) -> float:
    """How often the Prometheus KEDA reads scrapes the predictor (k8s.monitoring.scrape),
    said; under --dry (nothing read) distml's own scrape's."""
    ref = prometheus.ref(s)
    if cx.dry or ref is None:
        return s.scrape_interval_s
    try:
        found = scrape.interval(cx.kube, ref, s.namespace, s.service, kubectl=cx.provider.kubectl)
    except prometheus.PrometheusError as e:
        raise ClusterError(
            f"how often Prometheus scrapes the predictor cannot be read, and KEDA's query "
            f"window depends on it: {e}"
        ) from e
    cx.out(f"Prometheus {ref} scrapes every {found.seconds:g} s ({found.found})")
    return found.seconds


def _missing_for_keda(cx: ClusterContext, s: Settings) -> str:
    """What scaling on requests lacks ("" when nothing): a Prometheus that answers, KEDA."""
    ref = prometheus.ref(s)
    if ref is None:
        return (
            "a Prometheus (`invoke up --with-monitoring`, or yours in "
            f"{prometheus.SETTING}) and KEDA"
        )
    if cx.dry:
        return ""  # nothing is read under --dry: planned as asked
    try:
        prometheus.targets(cx.kube, ref, kubectl=cx.provider.kubectl)
    except prometheus.PrometheusError as e:
        return f"a Prometheus that answers ({e})"
    try:
        finding = survey(cx.kube, "keda", cx.provider.kubectl)
    except KubeError as e:
        return f"KEDA, which cannot be checked here ({e})"
    if finding.blocked:
        return f"KEDA, which is not usable: {finding.blocked}"
    if not finding.found:
        return (
            f"KEDA (no Available Deployment {KEDA_NAMESPACE}/keda-operator): `invoke up "
            "--with-monitoring` installs it (an existing cluster: with --install-operators)"
        )
    early = kserve_keda.started_before_keda(cx.kube)
    if early:  # it still scales: said, not refused
        cx.out(f"note: {kserve_keda.advice(early, cx.provider.kubectl(kserve_keda.RESTART))}")
    return ""


def _apply_serving(cx: ClusterContext, s: Settings) -> None:
    """The request logger, the serving runtime, the InferenceService and (standard mode)
    the ingress Service."""
    if s.request_logger:
        for obj in manifests.message_dumper(s):
            apply_reporting(cx, obj)
    if s.predictor == "kserve":
        apply_reporting(cx, manifests.serving_runtime(s))
    isvc = manifests.inference_service(s)
    existed = cx.get(ISVC_API, "InferenceService", s.service) is not None
    applied = cx.apply(isvc)
    if s.serving_mode == "standard":
        _drop_other_autoscaler(cx, s, (applied.get("metadata") or {}).get("uid"))
    cx.out(
        f"InferenceService {s.service}: "
        + (
            "applied"
            if cx.dry
            else "updated in place (the predictor polls /mnt/models and loads the new version "
            "by itself: no new revision)"
            if existed
            else "created"
        )
    )
    if manifests.has_ingress(s):  # not on a cluster distml did not create: not ours to take
        apply_reporting(cx, manifests.ingress_service(s))


def _drop_other_autoscaler(cx: ClusterContext, s: Settings, isvc_uid: str | None) -> None:
    """KServe leaves the autoscaler of the class a redeploy moved away from (its HPA, or
    its ScaledObject: two autoscalers would fight over the predictor): delete it, when
    it is this InferenceService's (its owner reference says so)."""
    wanted = inference.autoscaler_class(s)
    name = inference.predictor_name(s)
    for cls, (api, kind) in inference.AUTOSCALER_OBJECTS.items():
        obj = None if cls == wanted or cx.dry else cx.get(api, kind, name)
        owners = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
        if not any(
            o.get("kind") == "InferenceService" and o.get("uid") == isvc_uid for o in owners
        ):
            continue
        cx.kube.delete(api, kind, name, cx.namespace, uid=(obj or {})["metadata"].get("uid"))
        cx.out(f"{kind} {name}: deleted (the predictor now scales with {wanted})")


def _select(cx: ClusterContext, job: dict[str, Any]) -> None:
    logs = run_job(cx, job, SELECTION_TIMEOUT_S, "selection")
    # The candidates' validation and test figures, the verdict and the model card.
    for line in logs.splitlines()[-SELECT_LOG_LINES:]:
        cx.out(f"  select: {line}")


def _endpoint(cx: ClusterContext, s: Settings, isvc_url: str | None) -> tuple[str, str | None]:
    """(url to send to, Host header): through the ingress, never a port-forward."""
    base = cx.provider.ingress_url(cx.c)
    if s.serving_mode == "knative":
        return base, urlparse(isvc_url or "").netloc or None
    return base, None


def _sample_request(cx: ClusterContext) -> Path:
    """A V1 request body for the curl line and the load test (written into the work dir)."""
    from runtime.sample_request import write_sample_request

    source_dir = cx.wd.state().source_dir
    return write_sample_request(cx.wd.root, source_dir, cx.out, synthetic_ok=True)


@contextlib.contextmanager
def _way(cx: ClusterContext, s: Settings, isvc_url: str | None, url: str | None) -> Iterator[Way]:
    """Where requests go: ``--url``; the ingress the cluster distml made maps to a host
    port; an existing cluster's way in is found (runtime.cluster.reach)."""
    if s.owns_cluster and not url:
        base, host = _endpoint(cx, s, isvc_url)
        yield Way(base, host, "the ingress")
        return
    with way_in(cx, s.serving_mode, s.service, isvc_url, url) as way:
        yield way


def _print_access(cx: ClusterContext, s: Settings, isvc_url: str) -> None:
    if not s.owns_cluster:
        ns, target = forward_target(cx, s.serving_mode, s.service)
        cx.out(f"serving {s.service} at {isvc_url}")
        cx.out(
            "`invoke loadtest` sends to that URL when it answers from this machine, else "
            f"through a port-forward to {ns}/{target}; `--url` names the cluster's ingress"
        )
        return
    base, host = _endpoint(cx, s, isvc_url)
    sample = _sample_request(cx)
    cx.out(f"serving {s.service} at {isvc_url}")
    cx.out(f"through the ingress: {base}" + (f" with Host: {host}" if host else ""))
    header = f"-H 'Host: {host}' " if host else ""
    cx.out(
        "try it:\n  curl -s " + header + f"-H 'Content-Type: application/json' -d @{sample} "
        f"{base}/v1/models/{s.service}:predict"
    )


def refuse_during_canary(cx: ClusterContext, verb: str) -> None:
    """A plain ``deploy`` or a ``rollback`` would change the stable a running canary is
    judged against: refused until it ends."""
    pid = live.running_pid(live.facts(cx.wd, cx.service))
    if pid is not None:
        raise ClusterError(
            f"a canary is running (`invoke deploy --canary`, pid {pid}); `{verb}` waits for "
            "it to end, or end it now with `invoke canary --promote` or `--abort`"
        )
    if left := _canary_left(cx):
        raise ClusterError(
            f"canary version {left} is loaded in the predictor pods with no `invoke deploy "
            f"--canary` running (one was killed?), and takes its share of the requests "
            f"unjudged; `{verb}` would change the version beside it: end it first with "
            "`invoke canary --abort` or `--promote`"
        )


def _canary_left(cx: ClusterContext) -> str:
    """The canary versions Prometheus shows loaded in the predictor pods ("" for none, or
    when there is no Prometheus: no canary runs on a cluster without one)."""
    s = cx.settings()
    ref = prometheus.ref(s)
    if ref is None or cx.dry:
        return ""
    query = serving_metrics.canary_weights(s.namespace, s.service)
    try:
        found = prometheus.instant(cx.kube, ref, query, kubectl=cx.provider.kubectl)
    except prometheus.PrometheusError as e:
        cx.out(f"note: whether a canary is left in the predictor pods cannot be read ({e})")
        return ""
    return ", ".join(sorted({labels.get("version", "?") for labels, _ in found}))


def rollback(cx: ClusterContext) -> int:
    cx.require_up()
    refuse_during_canary(cx, "rollback")
    s = cx.settings()
    cx.out("== rollback")
    _select(cx, manifests.selection_job(s, min_accuracy=0.0, force=False, rollback=True))
    cx.out("the predictor loads the republished version by itself (it polls /mnt/models)")
    return 0


# --------------------------------------------------------------------------- loadtest


@dataclass(frozen=True)
class Target:
    """Where the load goes and what the autoscaler should do about it."""

    base: str  # the ingress URL
    host: str | None  # the Host header (knative: the InferenceService's host)
    expected: int | None  # ready replicas the KPA should reach (knative mode only)


def loadtest(cx: ClusterContext, request: LoadtestRequest) -> int:
    state = cx.require_up()
    from loadtest.summary import check

    s = cx.settings(target=state.target, max_replicas=state.max_replicas)
    if s.serving_mode == "standard" and state.scale_metric:  # what `deploy` applied
        s = replace(s, scale_metric=state.scale_metric)
    if state.scrape_interval_s:
        s = replace(s, scrape_interval_s=state.scrape_interval_s)
    isvc = cx.get(ISVC_API, "InferenceService", s.service)
    if isvc is None and not cx.dry:
        raise ClusterError(f"no InferenceService {s.service}; run `invoke deploy` first")
    if isvc is not None:  # never load someone else's service of the name
        cx.require_ours(isvc, f"loadtest: InferenceService {s.service}")
    isvc_url = ((isvc or {}).get("status") or {}).get("url")
    with _way(cx, s, isvc_url, request.url) as way:
        target = _target(s, request.concurrency, way)
        _say_plan(cx, s, request.concurrency, target)
        if cx.dry:
            return 0
        counter = ReplicaCounter(cx.kube, cx.namespace, s.service)
        out_dir = cx.wd.reports / "loadtest"
        summary = _run(cx, s, request, target, counter, out_dir)
    _report(cx, summary, counter, target.expected)
    cx.out(f"results: {out_dir} (summary.json, chart.png, Locust CSVs)")
    cx.wd.update_state(last_loadtest=str(out_dir / "summary.json"))
    problems = check(
        summary,
        max_failure_ratio=request.max_failure_ratio,
        expect_scale_out=request.expect_scale_out,
    )
    for p in problems:
        cx.out(f"error: {p}")
    return 1 if problems else 0


def _autoscaler(s: Settings) -> str:
    """Which autoscaler decides: knative (its KPA), keda, or standard (an HPA on CPU):
    SETTLE_S's keys, and keda."""
    if s.serving_mode == "knative":
        return "knative"
    return "keda" if inference.autoscaler_class(s) == "keda" else "standard"


def _target(s: Settings, concurrency: int, way: Way) -> Target:
    expected = None
    if _autoscaler(s) == "knative":
        expected = expected_replicas(concurrency, s.target, s.max_replicas)
    elif s.scale_metric == "concurrency":
        expected = keda_expected_replicas(concurrency, s.target, s.max_replicas)
    return Target(way.base, way.host, expected)


def _plan_note(s: Settings, concurrency: int, t: Target) -> str:
    """What the autoscaler should do about the load, in one clause."""
    if _autoscaler(s) == "knative":
        return (
            f"the autoscaler should reach {t.expected} ready replicas "
            f"(ceil({concurrency} / ({s.target} x 70%)), max {s.max_replicas})"
        )
    if s.scale_metric == "concurrency":
        return (
            f"KEDA scales on requests in flight: it should reach {t.expected} ready replicas "
            f"(ceil({concurrency} / {s.target}), max {s.max_replicas})"
        )
    if s.scale_metric == "rps":
        return (
            f"KEDA scales on requests per second: ceil(req/s / {s.target}) replicas, "
            f"max {s.max_replicas}"
        )
    return (
        f"standard mode scales on CPU (an HPA at {manifests.HPA_CPU_TARGET_PERCENT}% "
        f"of each predictor's CPU request): it decides {HPA_SYNC_S}-"
        f"{HPA_SYNC_S + METRIC_RESOLUTION_S} s into the load, and its new pods "
        "turn ready after that"
    )


def _say_plan(cx: ClusterContext, s: Settings, concurrency: int, t: Target) -> None:
    cx.out(
        f"load: {concurrency} users, no wait time, through {t.base}"
        + (f" (Host: {t.host})" if t.host else "")
        + f"; {_plan_note(s, concurrency, t)}"
    )


def _run(
    cx: ClusterContext,
    s: Settings,
    request: LoadtestRequest,
    t: Target,
    counter: ReplicaCounter,
    out_dir: Path,
) -> dict[str, Any]:
    from loadtest.prometheus_view import for_cluster
    from loadtest.runner import run_loadtest

    return run_loadtest(
        t.base,
        s.service,
        _sample_request(cx),
        out_dir,
        concurrency=request.concurrency,
        duration=request.duration,
        spawn_rate=request.spawn_rate,
        host_header=t.host,
        replica_sampler=counter,
        expected_replicas=t.expected,
        log=cx.out,
        settle_s=settle_s(s) if request.expect_scale_out else 0.0,
        # What the server counted (Prometheus's), beside Locust's; absent without one.
        server_view=for_cluster(cx.kube, s),
    )


def _report(
    cx: ClusterContext, summary: dict[str, Any], counter: ReplicaCounter, expected: int | None
) -> None:
    peak = summary.get("replicas_peak")
    cx.out(
        f"{summary['requests']} requests, {summary['failures']} failed, "
        f"{summary['rps'] or 0:.1f} req/s; ready replicas {summary.get('replicas_start')} "
        f"-> peak {peak}" + (f" (expected {expected})" if expected else "")
    )
    pending = counter.pending()
    if pending:
        cx.out(
            f"{len(pending)} predictor pod(s) stayed Pending: the cluster ran out of CPU "
            "for more replicas (lower --max-replicas, or give Docker more CPUs):"
        )
        for name, why in pending:
            cx.out(f"  {name}: {why or 'Pending'}")
