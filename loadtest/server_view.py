"""The load test's server-side view: what the model server itself counted over the run
(predict requests by status code, their latency p50/p95/p99 from its histogram), its
in-flight requests and replicas sampled over the run, beside Locust's view.

One small interface, :class:`ServerView`, two sources:

- :class:`MetricsEndpoint` (local runtime): the server's ``/metrics`` page scraped directly,
  before the run, once a second during it, and after it once every answer has been counted;
- ``loadtest.prometheus_view.PrometheusView`` (cluster): Prometheus's instant queries
  (``ml/contract/serving_metrics.py``) through the API server.

And :class:`Absent` when there is none (a cluster without Prometheus), which says why and
how to get one. The view's report (:func:`report`) states the server's count next to
Locust's and their difference in %; ``loadtest.summary.check`` judges it.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from common.errors import DistmlError
from common.poll import Clock, Done, Failed, Pending, poll
from loadtest.metrics_text import METRICS_PATH, Counts, MetricsTextError, Page, parse_page

Log = Callable[[str], Any]
Row = dict[str, Any]
QUANTILES = (("p50_ms", 0.5), ("p95_ms", 0.95), ("p99_ms", 0.99))


class ServerView(Protocol):
    """What the server saw of a run. ``source`` names where it is read from."""

    source: str

    def begin(self, log: Log) -> bool:
        """Read the counts before the run; False when there is nothing to read (then
        ``sample`` is not called and ``finish`` says why)."""

    def sample(self) -> Row:
        """The figures of now, for the series over the run: ``in_flight``, ``replicas``."""

    def finish(self, run_end: float, log: Log) -> Row:
        """What was counted since ``begin`` (:func:`figures`, once every request answered
        by ``run_end``, a wall-clock time, is in the counts); or ``{"absent": why}``, or
        ``{"error": what went wrong}``."""


@dataclass
class Absent:
    """No server-side view: ``reason`` says why and how to get one."""

    reason: str
    source: str = "none"

    def begin(self, log: Log) -> bool:
        return False

    def sample(self) -> Row:
        return {}

    def finish(self, run_end: float, log: Log) -> Row:
        return {"absent": self.reason}


def figures(counts: Counts) -> Row:
    """A run's counts as the report holds them: requests, by code, error ratio, p50/p95/p99."""
    out: Row = {
        "requests": round(counts.total),
        "by_code": {code: round(n) for code, n in sorted(counts.by_code.items()) if n},
        "error_ratio": counts.error_ratio(),
    }
    for key, q in QUANTILES:
        seconds = counts.quantile(q)
        out[key] = None if seconds is None else round(seconds * 1000, 2)
    return out


def report(source: str, result: Row, series: Any, locust_requests: int) -> Row:
    """``summary.json``'s ``server``: the view's result, Locust's count beside the server's
    and their difference (in % of Locust's), and the series sampled (a ``Sampler``, or None)."""
    out: Row = {"source": source, **result}
    if "requests" in result:
        diff = int(result["requests"]) - locust_requests
        out["locust_requests"] = locust_requests
        out["difference"] = diff
        out["difference_pct"] = round(100 * diff / locust_requests, 3) if locust_requests else None
    rows = series.samples if series is not None else []
    out["series"] = [r for r in rows if any(v is not None for k, v in r.items() if k != "t_s")]
    return out


def line(server: Row) -> str:
    """The report's line, as the load test prints it."""
    if "absent" in server:
        return f"loadtest: no server-side view: {server['absent']}"
    if "error" in server:
        return f"loadtest: server-side view ({server['source']}) failed: {server['error']}"
    codes = ", ".join(f"{code}: {n}" for code, n in server["by_code"].items()) or "none"
    pct = server.get("difference_pct")
    ms = "/".join("n/a" if server[k] is None else f"{server[k]:g}" for k, _ in QUANTILES)
    return (
        f"loadtest: the server counted {server['requests']} predict requests ({codes}), "
        f"Locust {server['locust_requests']}"
        + (f" ({pct:+.2f}%)" if pct is not None else "")
        + f"; server-side p50/p95/p99 {ms} ms ({server['source']})"
    )


# --------------------------------------------------------------------------- local: /metrics


class MetricsUnavailable(DistmlError):
    """The ``/metrics`` page did not answer, or not with a page."""


def fetch(url: str, timeout: float = 5.0) -> str:
    """GET ``url`` (no proxy from the environment: a loopback server); its text."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        raise MetricsUnavailable(f"{url} answered HTTP {e.code}") from e
    except (urllib.error.URLError, OSError) as e:
        raise MetricsUnavailable(f"{url} did not answer: {e}") from e


class MetricsEndpoint:
    """The local server's ``/metrics``, scraped directly (the module doc)."""

    SETTLE_TIMEOUT_S = 15.0  # until every answered request is counted, after the run

    def __init__(
        self, url: str, model: str, *, get: Callable[[str], str] = fetch, clock: Clock = time
    ) -> None:
        self.url = url.rstrip("/") + METRICS_PATH
        self.model = model
        self.source = self.url
        self._get, self._clock = get, clock
        self._start: Counts | None = None
        self._absent: str | None = None

    def scrape(self) -> Page:
        return parse_page(self._get(self.url))

    def begin(self, log: Log) -> bool:
        try:
            page = self.scrape()
        except (MetricsUnavailable, MetricsTextError) as e:
            self._absent = f"{e} (a model server started by an older distml has none: redeploy)"
            return False
        if not page.has_requests_metric():
            self._absent = f"{self.url} has no distml metrics (a server from an older distml?)"
            return False
        self._start = page.counts(self.model)
        return True

    def sample(self) -> Row:
        return {"in_flight": self.scrape().in_flight(self.model)}

    def finish(self, run_end: float, log: Log) -> Row:
        if self._start is None:
            return {"absent": self._absent or "not read before the run"}
        verdict = poll(
            self.scrape, _Settled(self.model), timeout=self.SETTLE_TIMEOUT_S, interval=0.1,
            clock=self._clock, retry_on=(MetricsUnavailable, MetricsTextError), retry_for=5.0,
        )  # fmt: skip
        if not isinstance(verdict, Done):
            why = verdict.reason if isinstance(verdict, Failed) else verdict.status
            return {"error": f"the counts did not settle within {self.SETTLE_TIMEOUT_S:g} s: {why}"}
        page: Page = verdict.value
        return {
            **figures(page.counts(self.model).since(self._start)),
            "version": page.version(self.model),
        }


class _Settled:
    """Done(page) once nothing is in flight and two scrapes in a row count the same: every
    request answered is then counted (the server counts one as its answer ends)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.previous: float | None = None

    def __call__(self, page: Page) -> Any:
        total = page.counts(self.model, route=None).total
        in_flight = page.in_flight(self.model)
        settled = in_flight == 0 and total == self.previous
        self.previous = total
        if settled:
            return Done(page)
        return Pending(f"{in_flight} in flight, {total:g} counted")
