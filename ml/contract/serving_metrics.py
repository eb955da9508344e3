"""The model server's Prometheus metrics, and the PromQL that reads them: part of the pod
contract, as ``ml/contract/__init__.py`` is. One place for the names the server in the image writes
(``ml/server/metrics.py``) and every reader uses (``invoke status``, the load test's
server-side view, KEDA's triggers, the Grafana dashboard).

Every request the server answers is counted, ``GET /metrics`` and the health probes
excepted: by model, route template (an unknown path is :data:`OTHER_ROUTE`), status code
and the model version that answered (``""`` when none did). The service-level queries
(rate, errors, latency, the objective, the concurrency KEDA scales on) read the predict
and infer routes only (:data:`SERVED_ROUTES`): a probe, a metadata read or a scanner's
404 is not the service's traffic.

Queries select on ``namespace``, ``isvc`` and ``pod``, never on ``job``: any Prometheus
whose scrape config attaches those labels answers them (distml's own, or one set up by
the Prometheus Operator, whose job is ``<namespace>/<podmonitor>``). Their windows come
from the scrape interval (:func:`rate_window`). Stdlib only.
"""

from __future__ import annotations

import math

#: Counter (exposed as ``distml_requests_total``): labels :data:`REQUEST_LABELS`.
REQUESTS = "distml_requests"
REQUESTS_TOTAL = f"{REQUESTS}_total"
#: Histogram of seconds from the request's first byte to its answer's last: ``model``,
#: ``route``, ``version`` (the version the request was routed to; ``""`` when none was).
LATENCY = "distml_request_duration_seconds"
#: Gauge: requests being answered now, ``model``.
IN_FLIGHT = "distml_requests_in_flight"
#: Info (exposed as ``distml_model_info``): ``model``, ``version`` (the one served now).
MODEL_INFO = "distml_model"
#: Histogram of the images per model call where the server batches requests: ``model``.
BATCH_SIZE = "distml_batch_size"
#: Gauge: percent of requests a canary version answers, ``model``, ``version`` (the canary's);
#: absent without a canary release.
CANARY_WEIGHT = "distml_canary_weight"
#: Gauge: in a shadow phase, percent of the stable's requests mirrored to the canary's own
#: server, same labels; absent otherwise.
CANARY_SHADOW = "distml_canary_shadow"

#: A canary's shadow phase (ml/server/canary_forward.py): the mirrored copies of the stable's
#: requests the canary answered (its answers discarded), as REQUESTS and LATENCY count
#: answered ones, same labels; and, per image, whether its class agreed with the stable's
#: answer to the same request (``model``, ``version``, ``agree``: "true" or "false").
SHADOW_REQUESTS = "distml_shadow_requests"
SHADOW_REQUESTS_TOTAL = f"{SHADOW_REQUESTS}_total"
SHADOW_LATENCY = "distml_shadow_duration_seconds"
SHADOW_AGREEMENT = "distml_shadow_agreement"
SHADOW_AGREEMENT_TOTAL = f"{SHADOW_AGREEMENT}_total"

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


def pod_targets(namespace: str, service: str) -> str:
    """``up`` of one InferenceService's predictor pods: not of its Service's probe
    (``k8s.monitoring.stack``), which carries no ``pod``."""
    return f'up{{{selector(namespace, service)},pod!=""}}'


def served(namespace: str, service: str) -> str:
    """:func:`selector`, and the predict and infer routes only (the service's traffic)."""
    return f"{selector(namespace, service)},{served_routes()}"


def served_routes() -> str:
    """The matcher of the predict and infer routes (the service's traffic), of any service:
    what :func:`served` adds to its selector, and what the alerting rules select on."""
    routes = "|".join(_regex_literal(r) for r in SERVED_ROUTES)
    return f'route=~"{routes}"'


_REGEX_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _regex_literal(text: str) -> str:
    """``text`` as an RE2 literal inside a PromQL string: each special character gets a
    backslash, written twice (PromQL's string unescapes one)."""
    return "".join("\\\\" + c if c in _REGEX_SPECIAL else c for c in text)


def rate_window(scrape_interval_s: float, floor_s: float = 0) -> str:
    """A ``rate()`` window for series scraped every ``scrape_interval_s``: four intervals,
    as Grafana's ``$__rate_interval`` takes (a window of one or two intervals holds fewer
    than the two samples ``rate`` needs whenever a scrape is late or fails), and at least
    ``floor_s``. In whole seconds, as PromQL writes durations."""
    if not scrape_interval_s > 0:
        raise ValueError(f"a scrape interval must be positive, not {scrape_interval_s!r}")
    return f"{math.ceil(max(4 * scrape_interval_s, floor_s))}s"


#: `invoke status`'s window: the last minute, or four scrapes where those are longer.
STATUS_FLOOR_S = 60


def request_rate(namespace: str, service: str, window: str) -> str:
    """Predict and infer requests per second over ``window``, all pods together."""
    return f"sum(rate({REQUESTS_TOTAL}{{{served(namespace, service)}}}[{window}]))"


def error_ratio(namespace: str, service: str, window: str) -> str:
    """The fraction of predict and infer requests answered 5xx over ``window``; 0 with no
    requests (a zero rate is dropped by ``> 0``, so an idle window gives ``vector(0)``,
    not 0/0 = NaN)."""
    sel = served(namespace, service)
    errors = f'sum(rate({REQUESTS_TOTAL}{{{sel},code=~"5.."}}[{window}]))'
    return f"({errors} / ({request_rate(namespace, service, window)} > 0)) or vector(0)"


def latency_quantile(namespace: str, service: str, q: float, window: str) -> str:
    """The ``q`` quantile of predict and infer latency, in seconds, over ``window``."""
    buckets = f"{LATENCY}_bucket{{{served(namespace, service)}}}"
    return f"histogram_quantile({q}, sum by (le) (rate({buckets}[{window}])))"


def concurrency(namespace: str, service: str, window: str) -> str:
    """Predict and infer requests in flight, averaged over ``window``, all pods together
    (KEDA's concurrency trigger). Little's law: the seconds spent answering, per second,
    is the time-averaged number of requests being answered; exact, where a scrape of the
    in-flight gauge is a point sample (mostly 0 under requests of a few milliseconds)."""
    return f"sum(rate({LATENCY}_sum{{{served(namespace, service)}}}[{window}]))"


def in_flight(namespace: str, service: str) -> str:
    """Requests being answered at the last scrape, all pods together (a point sample: the
    dashboard's and the load test's view, not a scaling input)."""
    return f"sum({IN_FLIGHT}{{{selector(namespace, service)}}})"


def requests_total(namespace: str, service: str) -> str:
    """Requests counted so far by the pods Prometheus scrapes now (the load test's count)."""
    return f"sum({REQUESTS_TOTAL}{{{selector(namespace, service)}}})"


def replicas(namespace: str, service: str) -> str:
    """Predictor pods Prometheus scrapes and finds up (no kube-state-metrics needed): pods,
    each counted once even when two scrape jobs reach it."""
    return f"count(count by (pod) ({pod_targets(namespace, service)} == 1))"


# --------------------------------------------------------------------------- by route, by label
#: The route label of the V1 predict route: the load test's requests (the readiness probes'
#: ``/v1/models/{model_name}`` is another route, so they never inflate its count).
PREDICT_ROUTE = "/v1/models/{model_name}:predict"
#: The route label of the Open Inference Protocol's infer route.
INFER_ROUTE = "/v2/models/{model_name}/infer"
#: The routes that are the service's traffic: every service-level query reads these only.
SERVED_ROUTES = (PREDICT_ROUTE, INFER_ROUTE)


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


def request_rate_by_code(namespace: str, service: str, window: str) -> str:
    """Predict and infer requests per second over ``window`` by status code."""
    return f"sum by (code) (rate({REQUESTS_TOTAL}{{{served(namespace, service)}}}[{window}]))"


def model_version(namespace: str, service: str) -> str:
    """The model version(s) the pods serve now: one series per version, its pod count."""
    return f"count by (version) ({MODEL_INFO}_info{{{selector(namespace, service)}}})"


def last_scrape(namespace: str, service: str) -> str:
    """When Prometheus last scraped each predictor pod (seconds since the epoch, by pod):
    the time of its latest ``up`` sample (the load test waits for one after the run)."""
    return f"max by (pod) (timestamp({pod_targets(namespace, service)}))"


def within_objective(namespace: str, service: str, window: str) -> str:
    """The fraction of predict and infer requests answered within
    :data:`LATENCY_OBJECTIVE_S` over ``window`` (its bucket's count over the whole count;
    the objective is one of the buckets)."""
    sel = served(namespace, service)
    within = f'sum(rate({LATENCY}_bucket{{{sel},le="{LATENCY_OBJECTIVE_S:g}"}}[{window}]))'
    return f"{within} / sum(rate({LATENCY}_count{{{sel}}}[{window}]))"


def burn_by_version(namespace: str, service: str, window: str, slo: str) -> str:
    """Each version's error-budget burn over ``window`` (its bad share over the budget's:
    ``k8s.monitoring.rules``' SLOs, 1 spends the budget in exactly its period), ``slo``
    "availability" (5xx; budget 0.1%) or "latency" (slower than the objective; 1%): what
    a canary's owner compares while two versions serve."""
    sel = served(namespace, service)

    def rate(metric: str, extra: str = "") -> str:
        return f"sum by (version) (rate({metric}{{{sel}{extra}}}[{window}]))"

    if slo == "availability":  # no 5xx series yet is 0, not no answer
        total, budget = rate(REQUESTS_TOTAL), 0.001
        errors = rate(REQUESTS_TOTAL, ',code=~"5.."')
        bad = f"({errors} or {total} * 0)"
    else:
        total = rate(f"{LATENCY}_count")
        within = rate(f"{LATENCY}_bucket", f',le="{LATENCY_OBJECTIVE_S:g}"')
        bad = f"({total} - {within})"
        budget = 0.01
    return f"{bad} / ({total} > 0) / {budget:g}"


# --------------------------------------------------------------------------- a canary's analysis
# Each version's own figures (``version`` is the one that answered: a canary's requests and
# the stable's are counted apart in every pod), and each pod's view of the split.


def version_requests(namespace: str, service: str) -> str:
    """Predict and infer requests counted so far, by pod, version and status code: read at
    two times and subtracted series by series (a series absent at the first reading started
    at 0 since; one that dropped was reset), every request falls in exactly one interval,
    where ``increase()`` misses what a new series (a canary's first requests) counted
    before its first scrape."""
    by = "pod, version, code"
    return f"sum by ({by}) ({REQUESTS_TOTAL}{{{served(namespace, service)}}})"


def version_latency_buckets(namespace: str, service: str) -> str:
    """The predict and infer routes' cumulative latency buckets so far, by pod, version and
    ``le``: read and subtracted as :func:`version_requests` are, for each version's p99
    over exactly the same requests."""
    buckets = f"{LATENCY}_bucket{{{served(namespace, service)}}}"
    return f"sum by (pod, version, le) ({buckets})"


def canary_shadows(namespace: str, service: str) -> str:
    """Each pod's shadow share now (the percent of its requests mirrored to the canary's
    own server), by pod and the canary's version (no series: no shadow phase there)."""
    return f"max by (pod, version) ({CANARY_SHADOW}{{{selector(namespace, service)}}})"


def shadow_requests(namespace: str, service: str) -> str:
    """:func:`version_requests` of the mirrored copies the canary answered (shadow phase)."""
    return f"sum by (pod, version, code) ({SHADOW_REQUESTS_TOTAL}{{{served(namespace, service)}}})"


def shadow_latency_buckets(namespace: str, service: str) -> str:
    """:func:`version_latency_buckets` of the mirrored copies."""
    buckets = f"{SHADOW_LATENCY}_bucket{{{served(namespace, service)}}}"
    return f"sum by (pod, version, le) ({buckets})"


def shadow_agreement(namespace: str, service: str) -> str:
    """Images whose class the canary agreed on with the stable so far, by pod, version and
    ``agree``: read at two times and subtracted, as :func:`version_requests` are."""
    return (
        f"sum by (pod, version, agree) ({SHADOW_AGREEMENT_TOTAL}{{{selector(namespace, service)}}})"
    )


def canary_weights(namespace: str, service: str) -> str:
    """Each pod's canary share now, by pod and the canary's version (no series: no canary
    loaded in that pod)."""
    return f"max by (pod, version) ({CANARY_WEIGHT}{{{selector(namespace, service)}}})"


def pod_versions(namespace: str, service: str) -> str:
    """The version each pod serves as its stable now, by pod and version."""
    return f"max by (pod, version) ({MODEL_INFO}_info{{{selector(namespace, service)}}})"


def pods_up(namespace: str, service: str) -> str:
    """The predictor pods Prometheus scrapes now, by pod (1: the last scrape answered)."""
    return f"max by (pod) ({pod_targets(namespace, service)})"
