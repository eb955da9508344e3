"""The load test's server-side view on a cluster: distml's Prometheus (``invoke up
--with-monitoring``), read through the API server (``k8s.monitoring.prometheus``).

The count is exact, not a rate: the predict requests each pod counted (``sum by (pod,
code)``, and the latency buckets ``by (pod, le)``) at the start and at the end, each read
only once every predictor target's last scrape is later than that moment (a condition with
a deadline, not a sleep), so the end reads every request answered before the run ended.
Per pod: a pod that appeared during the run starts from 0; one whose count went down was
restarted (all of its count is new, as ``increase`` takes it); one that left during the run
took its count with it, which the report names. In-flight requests and the replicas
Prometheus finds up are sampled once a second (instant queries) for the series.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from common.errors import DistmlError
from common.poll import Clock, Done, Failed, Pending, poll
from loadtest.metrics_text import Counts, bound
from loadtest.server_view import Absent, Log, Row, ServerView, figures
from ml.contract import serving_metrics as sm

NO_PROMETHEUS = (
    "this cluster has no distml Prometheus; `invoke up --with-monitoring` installs it "
    "(then the load test compares the server's count with Locust's)"
)


def scraped_timeout_s(interval_s: float) -> float:
    """Every target scraped after a moment: one interval, a missed scrape and a slow API
    server."""
    return 3 * interval_s + 20


def for_cluster(kube: Any, settings: Any) -> ServerView:
    """The view of ``settings``' InferenceService: Prometheus when the cluster has distml's,
    else :class:`Absent` saying how to get it."""
    from k8s.monitoring import prometheus

    ref = prometheus.ref(settings)
    if ref is None:
        return Absent(NO_PROMETHEUS)
    return PrometheusView(kube, ref, settings.namespace, settings.service)


def _ago(at: float | None, after: float) -> str:
    return "never" if at is None else f"scraped {after - at:.1f} s before the moment"


class PrometheusView:
    """One InferenceService's predictors, as Prometheus scraped them (the module doc)."""

    def __init__(
        self,
        kube: Any,
        ref: Any,
        namespace: str,
        service: str,
        *,
        clock: Clock = time,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.ref = kube, ref
        self.namespace, self.service = namespace, service
        self.source = f"Prometheus {ref}"
        self._clock, self._wall = clock, wall
        self._every: float | None = None  # how often it scrapes the predictors, once read
        self._start: dict[str, Counts] | None = None
        self._error: str | None = None

    def _prom(self) -> Any:
        from k8s.monitoring import prometheus

        return prometheus

    def _interval(self) -> float:
        """How often Prometheus scrapes the predictors (k8s.monitoring.scrape), read once."""
        from k8s.monitoring import scrape

        if self._every is None:
            found = scrape.interval(self.kube, self.ref, self.namespace, self.service)
            self._every = found.seconds
        return self._every

    # -- reading

    def _unscraped(self, after: float) -> list[str]:
        """The predictor targets not scraped since ``after`` (each pod's latest ``up``
        sample's time), or ['no target ...'] while Prometheus has none."""
        from k8s.monitoring.scrape import service_targets

        prom, ns, svc = self._prom(), self.namespace, self.service
        mine = [
            t.labels.get("pod", t.scrape_url)
            for t in service_targets(prom.targets(self.kube, self.ref), ns, svc)
        ]
        if not mine:
            return [f"no target of {ns}/{svc}'s predictor pods (is the pod up?)"]
        scraped = {
            labels.get("pod", ""): at
            for labels, at in prom.instant(self.kube, self.ref, sm.last_scrape(ns, svc))
        }
        return [
            f"{pod} (last {_ago(scraped.get(pod), after)})"
            for pod in sorted(mine)
            if not scraped.get(pod, 0) > after
        ]

    def _wait_scraped(self, after: float) -> None:
        """Until every predictor target was scraped after ``after``; DistmlError if not."""

        def judge(late: list[str]) -> Any:
            return Done() if not late else Pending("waiting for a scrape of " + ", ".join(late))

        timeout = scraped_timeout_s(self._interval())
        verdict = poll(
            lambda: self._unscraped(after), judge, timeout=timeout, interval=1.0,
            clock=self._clock, retry_on=(DistmlError,), retry_for=15.0,
        )  # fmt: skip
        if not isinstance(verdict, Done):
            why = verdict.reason if isinstance(verdict, Failed) else verdict.status
            raise DistmlError(
                f"Prometheus did not scrape every predictor within {timeout:g} s: {why}"
            )

    def _counts(self) -> dict[str, Counts]:
        """pod -> the predict requests it counted so far, by code, and their buckets."""
        prom, ns, svc = self._prom(), self.namespace, self.service
        by_code: dict[str, dict[str, float]] = {}
        for labels, value in prom.instant(
            self.kube, self.ref, sm.predict_requests(ns, svc, ("pod", "code"))
        ):
            by_code.setdefault(labels.get("pod", ""), {})[labels.get("code", "")] = value
        buckets: dict[str, dict[float, float]] = {}
        query = sm.predict_latency_buckets(ns, svc, ("pod", "le"))
        for labels, value in prom.instant(self.kube, self.ref, query):
            buckets.setdefault(labels.get("pod", ""), {})[bound(labels.get("le"))] = value
        return {
            pod: Counts(by_code.get(pod, {}), buckets.get(pod, {})) for pod in {*by_code, *buckets}
        }

    # -- the view

    def begin(self, log: Log) -> bool:
        try:
            self._wait_scraped(self._wall())
            self._start = self._counts()
        except DistmlError as e:
            self._error = f"before the run: {e}"
            return False
        log(f"loadtest: server-side view: {self.source}, every predictor scraped")
        return True

    def sample(self) -> Row:
        prom, ns, svc = self._prom(), self.namespace, self.service
        return {
            "in_flight": prom.scalar(self.kube, self.ref, sm.in_flight(ns, svc)),
            "replicas": prom.scalar(self.kube, self.ref, sm.replicas(ns, svc)),
        }

    def finish(self, run_end: float, log: Log) -> Row:
        if self._start is None:
            return {"error": self._error or "not read before the run"}
        log("loadtest: waiting for Prometheus to scrape every predictor after the run's end")
        try:
            self._wait_scraped(run_end)
            end = self._counts()
        except DistmlError as e:
            return {"error": f"after the run: {e}"}
        return run_counts(self._start, end)


def run_counts(start: dict[str, Counts], end: dict[str, Counts]) -> Row:
    """The run's figures from per-pod counts at its start and end; ``notes`` name the pods
    that left during the run (their requests are missing from the end's count) and those
    whose count was reset."""
    total, notes = Counts(), []
    for pod, counts in sorted(end.items()):
        before = start.get(pod, Counts())
        if counts.total < before.total:
            notes.append(f"pod {pod}'s count went down (restarted?): all of it taken as new")
        total = total.plus(counts.since(before))
    gone = sorted(set(start) - set(end))
    if gone:
        notes.append(
            f"pod(s) {', '.join(gone)} left during the run: the requests they answered "
            "are not in the server's count"
        )
    return {**figures(total), "pods": sorted(end), "notes": notes}
