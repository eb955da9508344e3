"""Serving on a cluster: `invoke deploy` (selection Job, then a KServe InferenceService),
`invoke rollback`, and `invoke loadtest` through the ingress with the replica count the
autoscaler should reach."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from k8s import manifests
from k8s.cluster_poll import WaitError
from k8s.isvc_wait import wait_isvc_ready
from k8s.objects import ISVC_API, ReplicaCounter
from k8s.settings import Settings
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


def expected_replicas(concurrency: int, target: int, max_replicas: int) -> int:
    """What Knative's KPA should reach: ceil(in flight / (target x 70%)), capped."""
    return min(max_replicas, math.ceil(concurrency / (target * KPA_TARGET_UTILISATION)))


# --------------------------------------------------------------------------- deploy


def deploy(cx: ClusterContext, request: DeployRequest, timeout: float) -> int:
    state = cx.require_up()
    s = cx.settings(
        predictor=request.predictor,
        target=request.target,
        min_replicas=request.min_replicas,
        max_replicas=request.max_replicas,
        container_concurrency=request.container_concurrency,
        request_logger=request.request_logger,
    )
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
    cx.wd.update_state(deployed=True, target=s.target, max_replicas=s.max_replicas)
    _print_access(cx, s, url)
    return 0


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
    cx.apply(isvc)
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


def rollback(cx: ClusterContext) -> int:
    cx.require_up()
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
    isvc = cx.get(ISVC_API, "InferenceService", s.service)
    if isvc is None and not cx.dry:
        raise ClusterError(f"no InferenceService {s.service}; run `invoke deploy` first")
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


def _target(s: Settings, concurrency: int, way: Way) -> Target:
    expected = (
        expected_replicas(concurrency, s.target, s.max_replicas)
        if s.serving_mode == "knative"
        else None
    )
    return Target(way.base, way.host, expected)


def _say_plan(cx: ClusterContext, s: Settings, concurrency: int, t: Target) -> None:
    cx.out(
        f"load: {concurrency} users, no wait time, through {t.base}"
        + (f" (Host: {t.host})" if t.host else "")
        + (
            f"; the autoscaler should reach {t.expected} ready replicas "
            f"(ceil({concurrency} / ({s.target} x 70%)), max {s.max_replicas})"
            if t.expected
            else (
                f"; standard mode scales on CPU (an HPA at {manifests.HPA_CPU_TARGET_PERCENT}% "
                f"of each predictor's CPU request): it decides {HPA_SYNC_S}-"
                f"{HPA_SYNC_S + METRIC_RESOLUTION_S} s into the load, and its new pods "
                "turn ready after that"
            )
        )
    )


def _run(
    cx: ClusterContext,
    s: Settings,
    request: LoadtestRequest,
    t: Target,
    counter: ReplicaCounter,
    out_dir: Path,
) -> dict[str, Any]:
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
        settle_s=SETTLE_S[s.serving_mode] if request.expect_scale_out else 0.0,
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
