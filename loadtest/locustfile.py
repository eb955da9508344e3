"""Locust user for the KServe V1 predict endpoint (run by ``loadtest.locust_process``, or by hand).

Configured through the environment, so the same file works under ``python -m locust``:

- ``DISTML_LOADTEST_PAYLOAD``: path to a JSON request body, e.g.
  ``{"instances": [{"b64": "<base64 PNG>"}]}`` (read once, sent as-is).
- ``DISTML_LOADTEST_MODEL``: model name; requests go to ``/v1/models/<name>:predict``.
- ``DISTML_LOADTEST_HOST_HEADER`` (optional): ``Host`` header, for an ingress gateway that
  routes on it (Knative/Istio).

Users have no wait time: each keeps exactly one request in flight, so ``-u N`` means N
concurrent requests (what an autoscaler with a concurrency target reacts to).

A response counts as a success only when it is HTTP 200 and ``predictions`` is a list with
one row of 10 numbers per instance sent.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from numbers import Real

import gevent
import locust.stats
from locust import HttpUser, constant, events, task

NUM_CLASSES = 10

# Flush the CSV files every second (Locust 2.47: every 5 s) so the runner can show live
# progress from locust_stats_history.csv. A module constant of locust.stats (documented in
# older Locust docs); should it ever go away, progress lines just come less often.
locust.stats.CSV_STATS_FLUSH_INTERVAL_SEC = 1


@events.quitting.add_listener
def _finish_csv_files(environment, **_kwargs) -> None:
    """With ``--csv PREFIX``: complete Locust's CSVs and add ``PREFIX_per_second.csv``.

    Locust's CSV writer runs once a second and not again at shutdown, so its files miss up
    to the last second of requests: give it one more round now that the users have stopped.
    ``PREFIX_per_second.csv`` holds the exact number of requests and failures completed in
    each wall-clock second (Locust's own per-second buckets), for the throughput chart.
    """
    options = getattr(environment, "parsed_options", None)
    prefix = getattr(options, "csv_prefix", None)
    if not prefix:
        return
    gevent.sleep(locust.stats.CSV_STATS_INTERVAL_SEC + 0.25)
    total = environment.stats.total
    seconds = sorted(set(total.num_reqs_per_sec) | set(total.num_fail_per_sec))
    with open(f"{prefix}_per_second.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Timestamp", "Requests", "Failures"])
        for t in seconds:
            writer.writerow([t, total.num_reqs_per_sec.get(t, 0), total.num_fail_per_sec.get(t, 0)])


def _required_env(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise RuntimeError(f"{name} is not set (see loadtest/locustfile.py)")
    return value


def _load_body() -> tuple[bytes, int]:
    path = _required_env("DISTML_LOADTEST_PAYLOAD")
    with open(path, "rb") as f:
        body = f.read()
    try:
        instances = json.loads(body)["instances"]
    except (ValueError, KeyError, TypeError) as e:
        raise RuntimeError(f"{path}: not a KServe V1 body with 'instances': {e}") from e
    if not isinstance(instances, list) or not instances:
        raise RuntimeError(f"{path}: 'instances' must be a non-empty list")
    return body, len(instances)


BODY, NUM_INSTANCES = _load_body()
MODEL = _required_env("DISTML_LOADTEST_MODEL")
PATH = f"/v1/models/{MODEL}:predict"
HEADERS = {"Content-Type": "application/json"}
if host_header := os.environ.get("DISTML_LOADTEST_HOST_HEADER", "").strip():
    HEADERS["Host"] = host_header


def _is_number(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def problem_with(status: int, text: str) -> str | None:
    """Why a response is a failure, or None when it is a valid prediction."""
    if status != 200:
        detail = text[:200].strip()
        with contextlib.suppress(ValueError, AttributeError):
            detail = str(json.loads(text).get("error", detail))[:200]
        return f"HTTP {status}: {detail}" if detail else f"HTTP {status}"
    try:
        predictions = json.loads(text)["predictions"]
    except (ValueError, KeyError, TypeError):
        return "200 without a JSON 'predictions' field"
    if not isinstance(predictions, list) or len(predictions) != NUM_INSTANCES:
        return f"'predictions' is not a list of {NUM_INSTANCES} rows"
    for row in predictions:
        if not (isinstance(row, list) and len(row) == NUM_CLASSES and all(map(_is_number, row))):
            return f"a prediction row is not {NUM_CLASSES} numbers"
    return None


class PredictUser(HttpUser):
    """Posts the payload back to back: one request in flight per user."""

    wait_time = constant(0)

    def on_start(self) -> None:
        # Measure the server, not an HTTP(S)_PROXY from the environment.
        self.client.trust_env = False

    @task
    def predict(self) -> None:
        with self.client.post(
            PATH, data=BODY, headers=HEADERS, name=PATH, catch_response=True
        ) as response:
            if response.status_code == 0:  # no HTTP response at all
                response.failure(f"connection error: {response.error}")
                return
            problem = problem_with(response.status_code, response.text or "")
            if problem:
                response.failure(problem)
            else:
                response.success()
