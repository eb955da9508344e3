"""The server's Prometheus metrics: a registry each server owns, and the ASGI middleware that
counts and times every request.

Names, labels and buckets are ``ml/contract/serving_metrics.py``'s: the pod contract's, whose PromQL
every reader uses. :class:`ServerMetrics` holds, in a registry of its own (so two servers in one
process, as in tests, count apart):

- ``distml_requests_total{model, route, code, version}``: every answered request but
  ``GET /metrics`` and the health probes (``UNCOUNTED_PATHS``);
- ``distml_request_duration_seconds{model, route, version}``: from the request's first byte
  (when the HTTP protocol says, ``header_timeout.FIRST_BYTE``; else from reaching this
  middleware) to its answer's last byte being handed to the server (or the answer being given up);
- ``distml_requests_in_flight{model}``: requests being answered now;
- ``distml_model_info{model, version}``: the version served now (``""`` before one loads),
  read from the server when scraped, so it cannot lag behind the swap;
- ``distml_batch_size{model}``: images per model call (``ml/server/batcher.py``);
- ``distml_canary_weight{model, version}``: during a canary release, the percent of requests
  the canary ``version`` answers (``ml/server/canary.py``); absent without a canary;
- ``distml_canary_shadow{model, version}``: in a shadow phase, the percent of the stable's
  requests mirrored to the canary's own server; absent otherwise;
- ``distml_shadow_requests_total``, ``distml_shadow_duration_seconds`` (the labels above) and
  ``distml_shadow_agreement_total{model, version, agree}``: a canary's shadow phase, the
  mirrored copies its own server answered (``ml/server/canary_forward.py``).

``route`` is the route template the path matched (``/v1/models/{model_name}:predict``), else
``other``; ``model`` is the served model's name when the path names it, else ``""``; so
neither grows with what clients send. ``code`` is the status answered; ``499`` when the
client went away before an answer started (nginx's code for it), ``500`` when the app
raised before answering. ``version`` is the version the request was routed to, whose call
answered or failed (the model reports it: :func:`answered_by`), ``""`` when no version was
(a refusal before the model): a canary's own errors and latency count against it.

The exposition (:meth:`ServerMetrics.exposition`) also holds what the process's default
registry holds: KServe's own histograms (``request_predict_seconds`` ...) and the process
and Python collectors. Pure ASGI and prometheus-client: no kserve or web framework import.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, InfoMetricFamily, Metric

from ml.contract.serving_metrics import (
    BATCH_BUCKETS,
    BATCH_SIZE,
    CANARY_SHADOW,
    CANARY_WEIGHT,
    IN_FLIGHT,
    LATENCY,
    LATENCY_BUCKETS,
    MODEL_INFO,
    OTHER_ROUTE,
    REQUEST_LABELS,
    REQUESTS,
    SHADOW_AGREEMENT,
    SHADOW_LATENCY,
    SHADOW_REQUESTS,
    UNCOUNTED_PATHS,
)
from ml.server.header_timeout import FIRST_BYTE

#: ``code`` of a request whose client went away before an answer started.
CLIENT_GONE = 499


class _Answer:
    """What one request's answer was made of, filled in while it is answered."""

    version = ""


_ANSWER: ContextVar[_Answer | None] = ContextVar("distml_answer", default=None)


def answered_by(version: int | str) -> None:
    """Record that ``version`` of the model answered the request being handled (its
    ``version`` label). Outside a counted request, nothing happens."""
    answer = _ANSWER.get()
    if answer is not None:
        answer.version = str(version)


class RouteTemplates:
    """Which route template a request path matches, as the web framework routes it: the
    first template whose path matches with the request's method, else the first whose path
    matches (the framework's 405), else ``other``. A ``{name}`` is one path segment."""

    def __init__(self, templates: Iterable[tuple[str, str]], model_name: str) -> None:
        self.model_name = model_name
        self._compiled = [
            (method, template, re.compile(_pattern(template))) for method, template in templates
        ]

    def match(self, method: str, path: str) -> tuple[str, str]:
        """(route label, model label) of a request."""
        partial = None
        for allowed, template, pattern in self._compiled:
            found = pattern.fullmatch(path)
            if found is None:
                continue
            named = found.groupdict().get("model_name")
            model = self.model_name if named == self.model_name else ""
            if allowed == method:
                return template, model
            partial = partial or (template, model)
        return partial or (OTHER_ROUTE, "")


def _pattern(template: str) -> str:
    parts = re.split(r"\{(\w+)\}", template)  # literal, name, literal, name, ..., literal
    return "".join(
        f"(?P<{part}>[^/]+)" if i % 2 else re.escape(part) for i, part in enumerate(parts)
    )


class ServerMetrics:
    """The metrics of one server of ``model_name`` (the module doc), in a registry of its own.

    ``served_version()`` is the version served now (None before one loads).
    """

    def __init__(
        self,
        model_name: str,
        served_version: Callable[[], int | None],
        canary: Callable[[], tuple[int, int, int] | None] = lambda: None,
    ) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(REQUESTS, "Requests answered.", REQUEST_LABELS, registry=r)
        self.latency = Histogram(
            LATENCY,
            "Seconds from a request's first byte to its answer's last.",
            ("model", "route", "version"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(IN_FLIGHT, "Requests being answered now.", ("model",), registry=r)
        self.batch_size = Histogram(
            BATCH_SIZE, "Images per model call.", ("model",), buckets=BATCH_BUCKETS, registry=r
        )
        self.shadow_requests = Counter(
            SHADOW_REQUESTS, "Mirrored requests a canary answered.", REQUEST_LABELS, registry=r
        )
        self.shadow_latency = Histogram(
            SHADOW_LATENCY,
            "Seconds the canary took to answer a mirrored request.",
            ("model", "route", "version"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.shadow_agreement = Counter(
            SHADOW_AGREEMENT,
            "Images of mirrored requests whose class the canary and the stable agreed on.",
            ("model", "version", "agree"),
            registry=r,
        )
        self.in_flight.labels(model_name)  # 0 from the start, not absent
        r.register(_ModelInfo(model_name, served_version))
        r.register(_CanaryWeight(model_name, canary))
        r.register(_Registry(REGISTRY))  # KServe's histograms, process and Python metrics

    def count(self, model: str, route: str, code: int, version: str, seconds: float) -> None:
        """One answered request."""
        self.requests.labels(model, route, str(code), version).inc()
        self.latency.labels(model, route, version).observe(seconds)

    def shadowed(
        self, route: str, code: int, version: str, seconds: float, agreed: tuple[int, int]
    ) -> None:
        """One mirrored request the canary answered; ``agreed``: (images whose class agreed
        with the stable's answer, images that did not)."""
        m = self.model_name
        self.shadow_requests.labels(m, route, str(code), version).inc()
        self.shadow_latency.labels(m, route, version).observe(seconds)
        for agree, n in zip(("true", "false"), agreed, strict=True):
            if n:
                self.shadow_agreement.labels(m, version, agree).inc(n)

    def refused_early(self, code: int, seconds: float) -> None:
        """A request the HTTP protocol answered itself (408: its headers came too late; 400:
        not HTTP), before any route saw it: route ``other``, no model."""
        self.count("", OTHER_ROUTE, code, "", seconds)

    def observe_batch(self, requests: int, images: int) -> None:
        """One model call (``Batcher.on_call``): ``images`` from ``requests`` requests."""
        self.batch_size.labels(self.model_name).observe(images)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """(body, content type) of a scrape, in the format ``accept`` asks for."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class _ModelInfo:
    """``distml_model_info{model, version}``, read from the server at each scrape."""

    def __init__(self, model_name: str, served_version: Callable[[], int | None]) -> None:
        self.model_name = model_name
        self.served_version = served_version

    def collect(self) -> Iterator[Metric]:
        version = self.served_version()
        info = InfoMetricFamily(MODEL_INFO, "The model version served now.", labels=["model"])
        info.add_metric([self.model_name], {"version": "" if version is None else str(version)})
        yield info

    def describe(self) -> Iterator[Metric]:
        return self.collect()


class _CanaryWeight:
    """``distml_canary_weight`` and ``distml_canary_shadow{model, version}`` from
    ``canary()`` ((version, weight, shadow) or None)."""

    def __init__(self, model_name: str, canary: Callable[[], tuple[int, int, int] | None]) -> None:
        self.model_name = model_name
        self.canary = canary

    def collect(self) -> Iterator[Metric]:
        labels = ["model", "version"]
        family = GaugeMetricFamily(
            CANARY_WEIGHT, "Percent of requests the canary answers.", labels=labels
        )
        shadow = GaugeMetricFamily(
            CANARY_SHADOW, "Percent of the stable's requests mirrored to the canary.", labels=labels
        )
        now = self.canary()
        if now is not None:
            family.add_metric([self.model_name, str(now[0])], now[1])
            if now[2]:
                shadow.add_metric([self.model_name, str(now[0])], now[2])
        yield family
        yield shadow

    def describe(self) -> Iterator[Metric]:
        return self.collect()


class _Registry:
    """Every metric of another registry (the default one), collected when this one is."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()


class MetricsMiddleware:
    """ASGI middleware counting and timing every HTTP request but ``UNCOUNTED_PATHS`` (the
    module doc); outermost, so refusals made by the middlewares it wraps count too."""

    def __init__(self, app: Any, metrics: ServerMetrics, routes: RouteTemplates) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] in UNCOUNTED_PATHS:
            await self.app(scope, receive, send)
            return
        route, model = self.routes.match(scope["method"], scope["path"])
        started = scope.get(FIRST_BYTE) or time.perf_counter()
        code = CLIENT_GONE
        answer = _Answer()
        token = _ANSWER.set(answer)
        in_flight = self.metrics.in_flight.labels(model)
        in_flight.inc()

        async def watched_send(message: dict) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except Exception:
            if code == CLIENT_GONE:  # nothing answered yet: the framework answers 500
                code = 500
            raise
        finally:
            _ANSWER.reset(token)
            in_flight.dec()
            seconds = time.perf_counter() - started
            self.metrics.count(model, route, code, answer.version, seconds)
