"""`invoke status` on a cluster while training runs: each TFJob's live figures, from the
workers' ``/metrics`` as Prometheus scraped them (``ml/contract/training_metrics.py``'s
queries; distml's own Prometheus scrapes every worker, a user's must too). One row per
TFJob that has a worker training now; none when nothing trains; one row saying why when
Prometheus cannot be read."""

from __future__ import annotations

from k8s.monitoring import prometheus, scrape
from ml.contract import serving_metrics
from ml.contract import training_metrics as tmx
from runtime.cluster.context import ClusterContext
from runtime.output.tables import one_line

Row = tuple[str, str]


def _by_job(cx: ClusterContext, ref: prometheus.PrometheusRef, promql: str) -> dict[str, float]:
    samples = prometheus.instant(cx.kube, ref, promql, kubectl=cx.provider.kubectl)
    return {labels.get(tmx.JOB_LABEL, ""): value for labels, value in samples}


def rows(cx: ClusterContext) -> list[Row]:
    """The namespace's TFJobs that train now: examples/s, loss, workers training."""
    ref = prometheus.ref(cx.settings())
    if ref is None or cx.dry:
        return []
    ns = cx.namespace
    try:
        every = scrape.interval(cx.kube, ref, ns, cx.service, kubectl=cx.provider.kubectl)
        window = serving_metrics.rate_window(every.seconds)  # live: four scrapes, no floor
        running = f"sum by ({tmx.JOB_LABEL}) ({tmx.TRAINING}{{{tmx.selector(ns)}}} == 1)"
        training = _by_job(cx, ref, running)
        rates = _by_job(cx, ref, tmx.throughput(ns, window))
        losses = _by_job(cx, ref, tmx.loss(ns))
    except prometheus.PrometheusError as e:
        return [("training figures", one_line(str(e)))]
    return [
        (
            f"training {job}",
            f"{rates.get(job, 0):.0f} examples/s (last {window}), loss "
            + ("-" if job not in losses else f"{losses[job]:.4f}")
            + f", {n:.0f} worker(s) training",
        )
        for job, n in sorted(training.items())
    ]
