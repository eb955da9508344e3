"""The model server's Prometheus metrics, and the PromQL that reads them: part of the pod
contract, as ``ml/contract.py`` is. One place for the names the server in the image writes
(``ml/server/metrics.py``) and every reader uses (``invoke status``, the load test's
server-side view, KEDA's triggers, the Grafana dashboard).

Every request the server answers is counted, ``GET /metrics`` and the health probes
excepted: by model, route template (an unknown path is :data:`OTHER_ROUTE`), status code
and the model version that answered (``""`` when none did). Stdlib only.
"""

from __future__ import annotations

#: Counter (exposed as ``distml_requests_total``): labels :data:`REQUEST_LABELS`.
REQUESTS = "distml_requests"
REQUESTS_TOTAL = f"{REQUESTS}_total"
#: Histogram of seconds from the request's first byte to its answer's last: ``model``, ``route``.
LATENCY = "distml_request_duration_seconds"
#: Gauge: requests being answered now, ``model``.
IN_FLIGHT = "distml_requests_in_flight"
#: Info (exposed as ``distml_model_info``): ``model``, ``version`` (the one served now).
MODEL_INFO = "distml_model"
#: Histogram of the images per model call where the server batches requests: ``model``.
BATCH_SIZE = "distml_batch_size"

REQUEST_LABELS = ("model", "route", "code", "version")
#: The route label of any path the server does not serve (keeps the label set bounded).
OTHER_ROUTE = "other"
#: Paths never counted: the metrics scrape itself and the health probes.
UNCOUNTED_PATHS = ("/metrics", "/", "/v2/health/live", "/v2/health/ready")

#: The service's latency objective (docs/monitoring.md): 99% of requests within it.
LATENCY_OBJECTIVE_S = 0.1
#: Buckets dense around the objective, so p50/p95/p99 near it read accurately.
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

#: The scrape job of the predictor pods (Prometheus's ``job`` label), and its interval.
SCRAPE_JOB = "distml-predictor"
SCRAPE_INTERVAL_S = 5


def selector(namespace: str, service: str) -> str:
    """The label matchers of one InferenceService's predictor pods' series."""
    return f'namespace="{namespace}",isvc="{service}"'


def request_rate(namespace: str, service: str, window: str = "1m") -> str:
    """Requests per second over ``window``, all pods together."""
    return f"sum(rate({REQUESTS_TOTAL}{{{selector(namespace, service)}}}[{window}]))"


def error_ratio(namespace: str, service: str, window: str = "1m") -> str:
    """The fraction of requests answered 5xx over ``window``; 0 with no requests (a zero
    rate is dropped by ``> 0``, so an idle minute gives ``vector(0)``, not 0/0 = NaN)."""
    sel = selector(namespace, service)
    errors = f'sum(rate({REQUESTS_TOTAL}{{{sel},code=~"5.."}}[{window}]))'
    return f"({errors} / ({request_rate(namespace, service, window)} > 0)) or vector(0)"


def latency_quantile(namespace: str, service: str, q: float, window: str = "1m") -> str:
    """The ``q`` quantile of request latency, in seconds, over ``window``."""
    buckets = f"{LATENCY}_bucket{{{selector(namespace, service)}}}"
    return f"histogram_quantile({q}, sum by (le) (rate({buckets}[{window}])))"


def in_flight(namespace: str, service: str) -> str:
    """Requests being answered now, all pods together (KEDA's concurrency trigger)."""
    return f"sum({IN_FLIGHT}{{{selector(namespace, service)}}})"


def requests_total(namespace: str, service: str) -> str:
    """Requests counted so far by the pods Prometheus scrapes now (the load test's count)."""
    return f"sum({REQUESTS_TOTAL}{{{selector(namespace, service)}}})"


def replicas(namespace: str, service: str) -> str:
    """Predictor pods Prometheus scrapes and finds up (no kube-state-metrics needed)."""
    return f'count(up{{job="{SCRAPE_JOB}",{selector(namespace, service)}}} == 1)'


# --------------------------------------------------------------------------- by route, by label
#: The route label of the V1 predict route: the load test's requests (the readiness probes'
#: ``/v1/models/{model_name}`` is another route, so they never inflate its count).
PREDICT_ROUTE = "/v1/models/{model_name}:predict"


def _by(labels: tuple[str, ...]) -> str:
    return f" by ({', '.join(labels)})" if labels else ""


def predict_requests(namespace: str, service: str, by: tuple[str, ...] = ()) -> str:
    """Predict requests counted so far by the pods scraped now, summed by ``by`` (the load
    test reads them by pod and code at its start and end: its server-side count)."""
    sel = f'{selector(namespace, service)},route="{PREDICT_ROUTE}"'
    return f"sum{_by(by)} ({REQUESTS_TOTAL}{{{sel}}})"


def predict_latency_buckets(namespace: str, service: str, by: tuple[str, ...] = ("le",)) -> str:
    """The predict route's cumulative latency buckets so far, summed by ``by`` (keep ``le``)."""
    sel = f'{selector(namespace, service)},route="{PREDICT_ROUTE}"'
    return f"sum{_by(by)} ({LATENCY}_bucket{{{sel}}})"


def request_rate_by_code(namespace: str, service: str, window: str = "1m") -> str:
    """Requests per second over ``window`` by status code, all pods together."""
    return f"sum by (code) (rate({REQUESTS_TOTAL}{{{selector(namespace, service)}}}[{window}]))"


def model_version(namespace: str, service: str) -> str:
    """The model version(s) the pods serve now: one series per version, its pod count."""
    return f"count by (version) ({MODEL_INFO}_info{{{selector(namespace, service)}}})"


def last_scrape(namespace: str, service: str) -> str:
    """When Prometheus last scraped each predictor pod (seconds since the epoch, by pod):
    the time of its latest ``up`` sample (the load test waits for one after the run)."""
    return f'timestamp(up{{job="{SCRAPE_JOB}",{selector(namespace, service)}}})'


def within_objective(namespace: str, service: str, window: str = "1m") -> str:
    """The fraction of requests answered within :data:`LATENCY_OBJECTIVE_S` over ``window``
    (its bucket's count over the whole count; the objective is one of the buckets)."""
    sel = selector(namespace, service)
    within = f'sum(rate({LATENCY}_bucket{{{sel},le="{LATENCY_OBJECTIVE_S:g}"}}[{window}]))'
    return f"{within} / sum(rate({LATENCY}_count{{{sel}}}[{window}]))"
