"""The model server's ``/metrics`` page, read: what it counted (requests by status code, the
latency histogram's buckets), its in-flight gauge and the version it serves; and the
quantiles of a histogram, computed as Prometheus's ``histogram_quantile`` computes them.

The page is outside input (a server of any version, or something else on that port): it is
parsed with prometheus-client's own text parser, and anything it or the checks here refuse
is a :class:`MetricsTextError`, never another exception. Names and labels are
``ml/contract/serving_metrics.py``'s. prometheus-client is imported when a page is parsed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from common.errors import DistmlError
from ml.contract.serving_metrics import (
    CANARY_SHADOW,
    CANARY_WEIGHT,
    IN_FLIGHT,
    INFER_ROUTE,
    LATENCY,
    MODEL_INFO,
    PREDICT_ROUTE,
    REQUESTS_TOTAL,
    SHADOW_AGREEMENT_TOTAL,
    SHADOW_LATENCY,
    SHADOW_REQUESTS_TOTAL,
)

METRICS_PATH = "/metrics"
BUCKETS = f"{LATENCY}_bucket"
SHADOW_BUCKETS = f"{SHADOW_LATENCY}_bucket"
INFO = f"{MODEL_INFO}_info"
INF = math.inf


class MetricsTextError(DistmlError):
    """A ``/metrics`` page that is not Prometheus text, or not the shape distml writes."""


@dataclass(frozen=True)
class Counts:
    """Requests counted (status code -> count) and the latency histogram (upper bound in
    seconds -> cumulative count), over some span: since the server started, or a run."""

    by_code: Mapping[str, float] = field(default_factory=dict)
    buckets: Mapping[float, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.by_code.values())

    def since(self, earlier: Counts) -> Counts:
        """What was counted after ``earlier``. A count below its earlier value means the
        counter was reset (the server restarted): then all of it is new, as Prometheus's
        ``increase`` takes it."""
        return Counts(_minus(self.by_code, earlier.by_code), _minus(self.buckets, earlier.buckets))

    def plus(self, other: Counts) -> Counts:
        return Counts(_plus(self.by_code, other.by_code), _plus(self.buckets, other.buckets))

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of latency in seconds (None: nothing observed)."""
        x = histogram_quantile(q, self.buckets)
        return None if math.isnan(x) else x

    def error_ratio(self) -> float | None:
        """The fraction answered 5xx (None: no requests)."""
        total = self.total
        errors = sum(n for code, n in self.by_code.items() if code.startswith("5"))
        return errors / total if total else None


def _minus(later: Mapping, earlier: Mapping) -> dict:
    out = {}
    for key, value in later.items():
        before = earlier.get(key, 0.0)
        out[key] = value - before if value >= before else value
    return out


def _plus(a: Mapping, b: Mapping) -> dict:
    return {key: a.get(key, 0.0) + b.get(key, 0.0) for key in {*a, *b}}


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float:
    """Prometheus's ``histogram_quantile`` (promql/quantile.go, ``bucketQuantile``) over
    cumulative ``buckets`` (upper bound -> count, ``inf`` included): linear interpolation
    inside the bucket the rank falls in; NaN with no ``+Inf`` bucket or no observations."""
    if math.isnan(q):
        return math.nan
    if q < 0 or q > 1:
        return -INF if q < 0 else INF
    bounds = sorted(buckets.items())
    if not bounds or not math.isinf(bounds[-1][0]) or len(bounds) < 2:
        return math.nan
    counts = [bounds[0][1]]
    for _, count in bounds[1:]:
        counts.append(max(count, counts[-1]))  # ensureMonotonic
    observations = counts[-1]
    if not observations > 0:
        return math.nan
    rank = q * observations
    b = next(i for i, c in enumerate([*counts[:-1], INF]) if c >= rank)
    if b == len(bounds) - 1:
        return bounds[-2][0]
    if b == 0 and bounds[0][0] <= 0:
        return bounds[0][0]
    start, end, count = 0.0, bounds[b][0], counts[b]
    if b > 0:
        start, count, rank = bounds[b - 1][0], count - counts[b - 1], rank - counts[b - 1]
    return start + (end - start) * (rank / count)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Page:
    """One ``/metrics`` page's samples (every family; the readers pick theirs)."""

    samples: tuple[Sample, ...]

    def _of(self, name: str, **labels: str) -> Iterable[Sample]:
        for s in self.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                yield s

    def counts(
        self,
        model: str,
        route: str | None = PREDICT_ROUTE,
        version: str | None = None,
        names: tuple[str, str] = (REQUESTS_TOTAL, BUCKETS),
    ) -> Counts:
        """``model``'s requests on ``route`` (None: every route) routed to ``version`` (None:
        any), by code, and their latency (``names``: the counter's and the buckets')."""
        where = {"model": model, **({"route": route} if route else {})}
        where |= {"version": version} if version is not None else {}
        by_code: dict[str, float] = {}
        for s in self._of(names[0], **where):
            code = s.labels.get("code", "")
            by_code[code] = by_code.get(code, 0.0) + s.value
        buckets: dict[float, float] = {}
        for s in self._of(names[1], **where):
            le = bound(s.labels.get("le"))
            buckets[le] = buckets.get(le, 0.0) + s.value
        return Counts(by_code, buckets)

    def in_flight(self, model: str) -> float | None:
        values = [s.value for s in self._of(IN_FLIGHT, model=model)]
        return sum(values) if values else None

    def served(self, model: str, version: str) -> Counts:
        """``version``'s share of the service's traffic: its predict and infer requests."""
        return (
            Counts()
            .plus(self.counts(model, PREDICT_ROUTE, version))
            .plus(self.counts(model, INFER_ROUTE, version))
        )

    def shadowed(self, model: str, version: str) -> Counts:
        """The mirrored requests canary ``version`` answered in a shadow phase."""
        names = (SHADOW_REQUESTS_TOTAL, SHADOW_BUCKETS)
        return (
            Counts()
            .plus(self.counts(model, PREDICT_ROUTE, version, names))
            .plus(self.counts(model, INFER_ROUTE, version, names))
        )

    def agreement(self, model: str, version: str) -> tuple[float, float]:
        """(images whose class canary ``version`` agreed on with the stable, images not)."""
        found = {"true": 0.0, "false": 0.0}
        for s in self._of(SHADOW_AGREEMENT_TOTAL, model=model, version=version):
            agree = s.labels.get("agree", "")
            if agree in found:
                found[agree] += s.value
        return found["true"], found["false"]

    def canary_weight(self, model: str) -> dict[str, float]:
        """The canary version loaded beside the served one -> its weight (empty: none)."""
        return {s.labels.get("version", ""): s.value for s in self._of(CANARY_WEIGHT, model=model)}

    def canary_shadow(self, model: str) -> dict[str, float]:
        """The canary version -> the percent of requests mirrored to it (empty: none)."""
        return {s.labels.get("version", ""): s.value for s in self._of(CANARY_SHADOW, model=model)}

    def version(self, model: str) -> str | None:
        """The version ``model`` serves now ("" before one loaded; None: not on the page)."""
        found = [s.labels.get("version", "") for s in self._of(INFO, model=model)]
        return found[0] if found else None

    def has_requests_metric(self) -> bool:
        return any(s.name == REQUESTS_TOTAL for s in self.samples) or any(
            s.name == IN_FLIGHT for s in self.samples
        )


def bound(text: str | None) -> float:
    """A bucket's ``le`` label as a number; MetricsTextError for anything else."""
    try:
        return float(text or "")
    except ValueError:
        raise MetricsTextError(f"a histogram bucket with le={text!r}, not a number") from None


def parse_page(text: str) -> Page:
    """The samples of a Prometheus text page; MetricsTextError for anything else."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        samples = tuple(
            Sample(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        )
    except ValueError as e:
        raise MetricsTextError(f"not Prometheus text format: {e}") from e
    page = Page(samples)
    for s in page.samples:
        if s.name in (BUCKETS, SHADOW_BUCKETS):
            bound(s.labels.get("le"))
    return page
