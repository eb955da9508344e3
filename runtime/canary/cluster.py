"""The canary on a cluster: the predictor pods split, the canary's own pod answers.

The split is the local runtime's, in each predictor pod: the server (started with the
canary folder inside its model mount and ``--canary-elsewhere``,
``k8s/manifests/inference.py``) forwards exactly its weight's share of the requests that
pod gets to the canary's own pod (``k8s/manifests/canary_pods.py``,
``ml/server/canary_forward.py``), and counts them under the canary's version. Whichever
pod a request reaches, and however many connections the clients hold open, the share is
the weight, where a split by replica counts moves only by whole pods and, behind
kube-proxy's per-connection balancing, by whole connections. The stable's replicas and
autoscaler are untouched, and the canary has its own CPU, memory and batcher: it cannot
slow the stable, or crash it.

This module is the analysis' ``Split`` and ``measure`` for it:

- ``set_weight``: a Job writes ``weight.json`` in the volume (``ml.selection.canary_weight``,
  with the canary pod's URL and, in the shadow phase, the share mirrored to it); then
  Prometheus must show every predictor pod applying it (``distml_canary_weight``,
  ``distml_canary_shadow``);
- ``measure``: Prometheus, per version, since the last reading: requests and 5xx on the
  predict and infer routes only, and their p99, from the counters and latency buckets
  read at both ends and subtracted (so every request falls in exactly one interval, where
  ``increase()`` and ``rate()`` miss what a new series, as a canary's is, counted before
  its first scrape); in the shadow phase, the canary's answers to the mirrored copies and
  their agreement with the stable's instead; plus, once, each version's accuracy on
  the labelled sample (a Job sends it to each version's own URL: the stable's through the
  predictor's in-cluster Service, the canary's to its pod's); and the canary pod itself:
  a restart, an OOM kill or a lost pod fails the analysis (``runtime/canary/cluster_pod.py``);
- ``promote`` and ``rollback``: a Job runs ``ml.selection.canary_publish`` with the record as text,
  then Prometheus must show every pod serving the result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from k8s.client.kube import KubeError
from k8s.manifests import canary_jobs as jobs
from k8s.manifests import canary_pods
from k8s.monitoring import prometheus
from k8s.monitoring.prometheus import PrometheusError, PrometheusRef, Sample
from k8s.providers.settings import Settings
from loadtest.metrics_text import Counts
from ml.contract import serving_metrics as cm
from runtime.canary import cluster_pod, live
from runtime.canary.analysis import MeasurementError, Result, record_of
from runtime.canary.gates import Figures
from runtime.canary.local import figures, last_json
from runtime.canary.paired import Paired, SampleError, read_report
from runtime.cluster.apply import run_job
from runtime.cluster.context import ClusterContext, ClusterError

#: How long the pods may take to show a weight or the end: their 2 s poll, then a scrape.
APPLY_TIMEOUT_S = 180.0
JOB_TIMEOUT_S = 300.0


#: What the predictor pods counted so far, by (pod, version): codes and latency buckets.
Totals = dict[tuple[str, str], Counts]


def totals(requests: list[Sample], buckets: list[Sample]) -> Totals:
    """:func:`contract_metrics.version_requests` and ``version_latency_buckets`` answers,
    by (pod, version)."""
    codes: dict[tuple[str, str], dict[str, float]] = {}
    bounds: dict[tuple[str, str], dict[float, float]] = {}
    for labels, n in requests:
        codes.setdefault((labels.get("pod", ""), labels.get("version", "")), {})[
            labels.get("code", "")
        ] = n
    for labels, n in buckets:
        le = labels.get("le", "")
        bound = math.inf if le == "+Inf" else float(le)
        bounds.setdefault((labels.get("pod", ""), labels.get("version", "")), {})[bound] = n
    return {k: Counts(codes.get(k, {}), bounds.get(k, {})) for k in {*codes, *bounds}}


def counted_since(before: Totals, after: Totals, version: int) -> Counts:
    """What the pods counted for ``version`` between two readings (a pod new since, or
    restarted, counted from 0: :meth:`Counts.since`)."""
    total = Counts()
    for (pod, ver), counts in after.items():
        if ver == str(version):
            total = total.plus(counts.since(before.get((pod, ver), Counts())))
    return total


def _by_pod(samples: list[Sample]) -> dict[str, dict[str, float]]:
    """pod -> version -> value."""
    found: dict[str, dict[str, float]] = {}
    for labels, value in samples:
        found.setdefault(labels.get("pod", ""), {})[labels.get("version", "")] = value
    return found


def agreement_since(before: list[Sample], after: list[Sample], version: int) -> tuple[int, int]:
    """(images agreed, images not) for ``version`` between two readings of
    :func:`serving_metrics.shadow_agreement` (a series new or reset since counts from 0)."""
    was = {(lb.get("pod", ""), lb.get("agree", "")): n for lb, n in before
           if lb.get("version") == str(version)}  # fmt: skip
    found = {"true": 0.0, "false": 0.0}
    for labels, n in after:
        key = (labels.get("pod", ""), labels.get("agree", ""))
        if labels.get("version") == str(version) and key[1] in found:
            found[key[1]] += n - was.get(key, 0.0) if n >= was.get(key, 0.0) else n
    return int(found["true"]), int(found["false"])


@dataclass(frozen=True)
class Pods:
    """What Prometheus shows of the predictor pods now: the ones up, and per pod the canary
    weight (by version) and the stable version."""

    up: frozenset[str]
    weights: dict[str, dict[str, float]]
    stable: dict[str, str]
    shadows: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, up: list[Sample], weights: list[Sample], versions: list[Sample],
        shadows: list[Sample] = (),  # type: ignore[assignment]
    ) -> Pods:  # fmt: skip
        return cls(
            frozenset(labels.get("pod", "") for labels, value in up if value == 1),
            _by_pod(weights),
            {labels.get("pod", ""): labels.get("version", "") for labels, _ in versions},
            _by_pod(shadows),
        )

    def lacking(self, ok: Callable[[str], bool]) -> list[str]:
        """The up pods for which ``ok(pod)`` is false (all of them: none is up)."""
        return sorted(p for p in self.up if not ok(p)) if self.up else ["(no pod up)"]


class ClusterCanary:
    """The analysis' Split and measure for a canary of ``version`` beside ``stable``."""

    def __init__(
        self,
        cx: ClusterContext,
        s: Settings,
        *,
        ref: PrometheusRef,
        stable: int,
        version: int,
        address: str,
        note: Callable[[str], None],
    ) -> None:
        self.cx, self.s, self.ref = cx, s, ref
        self.stable, self.version, self.address = stable, version, address
        self._unscored = live.Unscored(note)
        self._counted: Totals = {}
        self._mirrored: Totals = {}  # the shadow phase's, as _counted
        self._agreed: list[Sample] = []
        self._shadow = 0  # the share mirrored now (the shadow phase), else 0
        #: The canary's own pod as it was Ready (runtime/canary/cluster_pod.py), set by
        #: whoever started it; None: not watched.
        self.seen: cluster_pod.Seen | None = None
        self._unread = ""  # why the last interval's start could not be read, if it could not
        self._accuracy: dict[str, float] | None = None
        self._paired: Paired | None = None

    # --- Split -------------------------------------------------------------------------

    def set_weight(self, weight: int, shadow: int = 0) -> None:
        what = f"mirroring {shadow}%" if shadow else f"setting the canary's share to {weight}%"
        self._job(jobs.weight_job(self.s, weight, shadow), what)
        v = str(self.version)
        mirrored = {v: shadow} if shadow else {}
        self._wait(
            lambda pods: pods.lacking(
                lambda p: pods.weights.get(p) == {v: weight} and pods.shadows.get(p, {}) == mirrored
            ),
            f"every predictor pod to {'mirror' if shadow else 'send'} "
            f"{shadow or weight}% of its requests to version {v}",
        )
        self._shadow = shadow
        # The labelled sample, before the first interval starts: its 5,000 images on both
        # versions' servers must not be counted in the latency users are judged by.
        self._accuracies()
        try:  # the next interval counts from here
            self._counted, self._mirrored, self._agreed = self._readings()
        except PrometheusError as e:  # that interval cannot be measured: the next one can
            self._counted, self._mirrored, self._agreed, self._unread = {}, {}, [], str(e)

    def promote(self, result: Result) -> None:
        self._end(result, promote=True)
        v = str(self.version)
        self._wait(
            lambda pods: pods.lacking(
                lambda p: pods.stable.get(p) == v and not pods.weights.get(p)
            ),
            f"every predictor pod to serve version {v} to every request",
        )

    def rollback(self, result: Result) -> None:
        self._end(result, promote=False)
        self._wait(
            lambda pods: pods.lacking(lambda p: not pods.weights.get(p)),
            f"every predictor pod to drop canary version {self.version}",
        )

    def _end(self, result: Result, *, promote: bool) -> None:
        record = json.dumps(record_of(result), separators=(",", ":"))
        job = jobs.end_job(self.s, promote=promote, record_json=record)
        self._job(job, "promoting the canary" if promote else "rolling the canary back")

    # --- measure -----------------------------------------------------------------------

    def measure(self, seconds: float) -> tuple[Figures, Figures]:
        down = self._pod_trouble()
        try:
            now, mirrored, agreed = self._readings()
        except PrometheusError as e:
            raise MeasurementError(str(e)) from e
        before, self._counted = self._counted, now
        mirrored0, self._mirrored = self._mirrored, mirrored
        agreed0, self._agreed = self._agreed, agreed
        if self._unread:
            unread, self._unread = self._unread, ""
            raise MeasurementError(f"the interval's start could not be read: {unread}")
        accuracy = self._accuracies()
        stable = figures(counted_since(before, now, self.stable), accuracy.get(str(self.stable)))
        v, paired = self.version, self._paired
        if not self._shadow:
            canary = figures(counted_since(before, now, v), accuracy.get(str(v)), paired)
        else:  # the shadow phase: the canary's answers to the mirrored copies
            canary = figures(counted_since(mirrored0, mirrored, v), accuracy.get(str(v)), paired)
            canary = replace(canary, agreement=agreement_since(agreed0, agreed, v))
        return stable, replace(canary, down=down) if down else canary

    def _pod_trouble(self) -> str | None:
        """What went wrong with the canary's own pod since it was Ready (None: nothing, or
        not watched); a pod the API cannot read now is read at the next interval."""
        if self.seen is None:
            return None
        try:
            pod = self.cx.get("v1", "Pod", canary_pods.name(self.s))
        except KubeError:
            return None
        return cluster_pod.trouble(pod, self.seen)

    def _readings(self) -> tuple[Totals, Totals, list[Sample]]:
        """What the predictor pods counted so far: requests by version; in the shadow phase
        also the mirrored copies and their agreement (else nothing of those)."""
        ns, svc = self.s.namespace, self.s.service
        served = totals(
            self._query(cm.version_requests(ns, svc)),
            self._query(cm.version_latency_buckets(ns, svc)),
        )
        if not self._shadow:
            return served, {}, []
        mirrored = totals(
            self._query(cm.shadow_requests(ns, svc)),
            self._query(cm.shadow_latency_buckets(ns, svc)),
        )
        return served, mirrored, self._query(cm.shadow_agreement(ns, svc))

    def _accuracies(self) -> dict[str, float]:
        """Each version's accuracy on the labelled sample: measured once, as the first share
        is set and before its interval starts, retried at the next interval when it could
        not be."""
        if self._accuracy is None:
            # The canary's half straight to its own pod: the predictor would only pass it
            # on, as it came, at the cost of its own event loop while users wait on it.
            urls = {
                str(self.stable): jobs.version_url(self.address, self.s.service, self.stable),
                str(self.version): jobs.version_url(
                    canary_pods.url(self.s), self.s.service, self.version
                ),
            }
            try:
                logs = self._job(jobs.sample_job(self.s, urls), "the labelled sample")
            except ClusterError as e:
                return self._unscored(str(e).splitlines()[0])
            try:
                found = read_report(last_json(logs), self.stable, self.version)
            except SampleError as e:
                return self._unscored(f"the sample Job: {e}")
            self._accuracy, self._paired = found
        return self._accuracy

    # --- the cluster -------------------------------------------------------------------

    def _job(self, job: dict[str, Any], what: str) -> str:
        return run_job(self.cx, job, JOB_TIMEOUT_S, what)

    def _query(self, promql: str) -> list[Sample]:
        return prometheus.instant(self.cx.kube, self.ref, promql, kubectl=self.cx.provider.kubectl)

    def pods(self) -> Pods:
        ns, svc = self.s.namespace, self.s.service
        return Pods.of(
            self._query(cm.pods_up(ns, svc)),
            self._query(cm.canary_weights(ns, svc)),
            self._query(cm.pod_versions(ns, svc)),
            self._query(cm.canary_shadows(ns, svc)),
        )

    def _wait(self, lacking: Callable[[Pods], list[str]], what: str) -> None:
        def judge(pods: Pods) -> Any:
            missing = lacking(pods)
            return Pending(f"not yet: {', '.join(missing)}") if missing else Done(pods)

        verdict = poll(
            self.pods, judge, timeout=APPLY_TIMEOUT_S, interval=2.0, clock=self.cx.clock,
            retry_on=(PrometheusError,), retry_for=30.0,
        )  # fmt: skip
        if not isinstance(verdict, Done):
            raise DistmlError(
                f"timed out after {APPLY_TIMEOUT_S:.0f} s waiting for {what} "
                f"({getattr(verdict, 'status', verdict)}); Prometheus {self.ref} reads the pods"
            )
