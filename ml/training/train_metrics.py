"""A training worker's Prometheus metrics (``ml/contract/training_metrics.py``'s names), served
on ``GET /metrics`` while it trains, from a registry of its own.

The address comes from the environment (:data:`ADDRESS_ENV`, ``HOST:PORT``): the pod's IP
on a cluster (the TFJob's env, from the downward API), 127.0.0.1 locally; unset, nothing
is served and every update is a no-op (a worker run by hand). :data:`JOB_ENV` names the job
(the TFJob's name), the model type and the worker's index come from the run itself.

What each update means (the Keras callback in ``ml/training/train.py`` calls them):

- :meth:`TrainMetrics.steps_done`: ``n`` steps ended in ``seconds`` (a call of several
  steps, ``steps_per_execution``, is timed as one and each of its steps observed at the
  call's mean); ``examples`` is this worker's share of those steps' global batches;
- :meth:`TrainMetrics.read_loss` and :meth:`TrainMetrics.epoch`: as the progress lines
  read them;
- :meth:`TrainMetrics.resumed`: the step a restored backup resumed from.

The time spent in the gradient all-reduce is not exported: MultiWorkerMirroredStrategy
runs it inside the compiled step, where only TensorFlow's profiler sees it apart.

:meth:`TrainMetrics.linger` keeps the page up after training for :data:`LINGER_ENV`
seconds (a SIGTERM ends it at once), so that a scrape after the last step sees the job's
final figures.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import deque
from typing import Any

from ml.contract.training_metrics import (
    ADDRESS_ENV,
    EPOCH,
    EXAMPLES,
    EXAMPLES_PER_SECOND,
    JOB_ENV,
    LABELS,
    LINGER_ENV,
    LOSS,
    RECENT_CALLS,
    RESUMED_STEP,
    STEP_BUCKETS,
    STEP_SECONDS,
    STEPS,
    TRAINING,
)

__all__ = ["ADDRESS_ENV", "JOB_ENV", "LINGER_ENV", "TrainMetrics", "parse_address"]


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets); ValueError naming the variable otherwise."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"{ADDRESS_ENV}={text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    return host, int(port)


class TrainMetrics:
    """One worker's metrics: created for ``model`` and the worker ``replica``, served when
    :data:`ADDRESS_ENV` says where (:meth:`serve`)."""

    def __init__(self, model: str, replica: int, job: str | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        labels = dict(
            zip(LABELS, (job or os.environ.get(JOB_ENV) or model, model, str(replica)), strict=True)
        )
        r = self.registry

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, LABELS, registry=r).labels(**labels)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, LABELS, registry=r).labels(**labels)

        self._steps = counter(STEPS, "Training steps this worker completed.")
        self._examples = counter(EXAMPLES, "Training examples this worker processed.")
        self._step_seconds = Histogram(
            STEP_SECONDS, "Seconds per training step.", LABELS, buckets=STEP_BUCKETS, registry=r
        ).labels(**labels)
        self._recent_rate = gauge(EXAMPLES_PER_SECOND, "Examples/s over the last calls.")
        self._recent: deque[tuple[float, int]] = deque(maxlen=RECENT_CALLS)
        self._loss = gauge(LOSS, "The training loss as last read.")
        self._epoch = gauge(EPOCH, "The epoch being trained (1-based).")
        self._resumed = gauge(RESUMED_STEP, "The step this run resumed from (0: fresh).")
        self._running = gauge(TRAINING, "1 while this worker trains.")
        self._server: Any = None

    # -- serving

    def serve(self) -> str | None:
        """Serve ``/metrics`` at :data:`ADDRESS_ENV`'s address; the URL, or None when unset."""
        address = os.environ.get(ADDRESS_ENV)
        if not address:
            return None
        from prometheus_client import start_http_server

        host, port = parse_address(address)
        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        where = f"[{host}]" if ":" in host else host
        return f"http://{where}:{port}/metrics"

    def linger(self) -> None:
        """After training: keep serving up to :data:`LINGER_ENV` seconds, or until SIGTERM."""
        seconds = float(os.environ.get(LINGER_ENV) or 0)
        if self._server is None or seconds <= 0:
            return
        done = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
        try:
            done.wait(seconds)
        finally:
            signal.signal(signal.SIGTERM, previous)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- updates

    def started(self) -> None:
        self._running.set(1)

    def finished(self) -> None:
        self._running.set(0)

    def steps_done(self, n: int, seconds: float, examples: int) -> None:
        if n <= 0:
            return
        self._steps.inc(n)
        self._examples.inc(examples)
        self._recent.append((seconds, examples))
        took = sum(s for s, _ in self._recent)
        if took > 0:
            self._recent_rate.set(sum(e for _, e in self._recent) / took)
        for _ in range(n):
            self._step_seconds.observe(seconds / n)

    def read_loss(self, value: float) -> None:
        self._loss.set(value)

    def epoch(self, epoch: int) -> None:
        self._epoch.set(epoch)

    def resumed(self, step: int) -> None:
        self._resumed.set(step)
