"""runtime/canary/local.py against a stand-in server on loopback: its /metrics is written by
prometheus-client with the server's own metric names, and, as ``ml serve --canary-dir``
does, it applies the weight file at its next poll. The steps (ml canary_publish, ml
sample_accuracy) are recorded or faked here; the real ones run in tests/e2e/test_canary.py."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from common.errors import DistmlError
from ml import contract
from ml.contract import serving_metrics as sm
from runtime.canary.analysis import MeasurementError, Result, record_of
from runtime.canary.gates import Figures
from runtime.canary.local import LocalCanary, last_json
from runtime.canary.policy import Action, Decision

SERVICE = "tf-mnist"
VERSIONED = "/v2/models/{model_name}/versions/{model_version}/infer"


class StandIn:
    """The server's metrics, and its canary weight read from the weight file per scrape."""

    def __init__(self, volume: Path) -> None:
        self.weight_file = Path(contract.canary_weight_path(volume, SERVICE))
        self.registry = r = CollectorRegistry()
        self.requests = Counter(sm.REQUESTS, "r", sm.REQUEST_LABELS, registry=r)
        self.latency = Histogram(sm.LATENCY, "l", ("model", "route", "version"),
                                 buckets=sm.LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.weight = Gauge(sm.CANARY_WEIGHT, "w", ("model", "version"), registry=r)
        self.mirror = Gauge(sm.CANARY_SHADOW, "m", ("model", "version"), registry=r)
        self.shadow = Counter(sm.SHADOW_REQUESTS, "s", sm.REQUEST_LABELS, registry=r)
        self.shadow_latency = Histogram(sm.SHADOW_LATENCY, "sl", ("model", "route", "version"),
                                        buckets=sm.LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.agreement = Counter(
            sm.SHADOW_AGREEMENT, "a", ("model", "version", "agree"), registry=r
        )
        self.info = Gauge("distml_model_info", "i", ("model", "version"), registry=r)
        self.serving, self.canary, self.down = "1", "2", False

    def answer(self, version: str, code: int, seconds: float, route=sm.PREDICT_ROUTE, n=1):
        for _ in range(n):
            self.requests.labels(SERVICE, route, str(code), version).inc()
            self.latency.labels(SERVICE, route, version).observe(seconds)

    def mirrored(self, code: int, seconds: float, agree: int, differ: int, n=1):
        for _ in range(n):
            self.shadow.labels(SERVICE, sm.PREDICT_ROUTE, str(code), self.canary).inc()
            self.shadow_latency.labels(SERVICE, sm.PREDICT_ROUTE, self.canary).observe(seconds)
            self.agreement.labels(SERVICE, self.canary, "true").inc(agree)
            self.agreement.labels(SERVICE, self.canary, "false").inc(differ)

    def page(self) -> bytes:
        self.weight.clear()
        self.mirror.clear()
        self.info.clear()
        self.info.labels(SERVICE, self.serving).set(1)
        if self.canary and self.weight_file.is_file():
            doc = json.loads(self.weight_file.read_text())
            self.weight.labels(SERVICE, self.canary).set(doc["weight"])
            if doc.get("shadow") and doc.get("url"):  # the server mirrors only to its own
                self.mirror.labels(SERVICE, self.canary).set(doc["shadow"])
        return generate_latest(self.registry)


@pytest.fixture
def served(tmp_path):
    stand_in = StandIn(tmp_path)
    Path(contract.canary_dir(tmp_path, SERVICE)).mkdir(parents=True)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if stand_in.down:
                self.send_response(503)
                self.end_headers()
                return
            body = stand_in.page()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield stand_in, f"http://127.0.0.1:{server.server_port}", tmp_path
    server.shutdown()


def canary(url, volume, steps=None, score=None, notes=None):
    def scored(argv):
        return subprocess.CompletedProcess(
            argv, 0, json.dumps({"accuracy": {"1": 0.9, "2": 0.88}}), ""
        )

    return LocalCanary(
        url=url, service=SERVICE, volume=volume, stable=1, version=2,
        step=lambda what, argv: (steps if steps is not None else []).append(argv) or 0,
        python="python", note=(notes if notes is not None else []).append, score=score or scored,
    )  # fmt: skip


def test_set_weight_writes_the_file_and_returns_once_the_server_applies_it(served):
    stand_in, url, volume = served
    c = canary(url, volume)
    c.set_weight(25)
    assert json.loads(stand_in.weight_file.read_text()) == {"weight": 25}
    c.endpoint = "http://127.0.0.1:9001"  # the canary's own server: named for the forwarding
    c.set_weight(50)
    assert json.loads(stand_in.weight_file.read_text()) == {"weight": 50, "url": c.endpoint}


def test_the_sample_goes_before_the_first_interval_the_canary_half_to_its_own_server(served):
    _, url, volume = served
    sent: list[list[str]] = []

    def scored(argv):
        sent.append(argv)
        return subprocess.CompletedProcess(
            argv, 0, json.dumps({"accuracy": {"1": 0.9, "2": 0.9}}), ""
        )

    c = canary(url, volume, score=scored)
    c.endpoint = "http://127.0.0.1:9001"
    c.set_weight(50)
    assert len(sent) == 1, "sent before the first interval starts, not within it"
    c.measure(30)
    (argv,) = sent  # and only once
    assert f"--endpoint=1={url}/v2/models/{SERVICE}/versions/1/infer" in argv  # its server
    assert f"--endpoint=2=http://127.0.0.1:9001/v2/models/{SERVICE}/versions/2/infer" in argv


def test_each_interval_counts_each_versions_served_traffic_since_the_last(served):
    stand_in, url, volume = served
    c = canary(url, volume)
    stand_in.answer("1", 200, 0.004, n=10)  # before the canary: not in any interval
    c.set_weight(50)
    stand_in.answer("1", 200, 0.004, n=60)
    stand_in.answer("2", 200, 0.004, n=55)
    stand_in.answer("2", 503, 0.3, n=3)
    stand_in.answer("2", 400, 0.3, n=2)  # any answer but a 2xx is a failure
    stand_in.answer("1", 400, 0.3, n=1)
    stand_in.answer("2", 200, 0.001, route=VERSIONED, n=7)  # the accuracy sample: not traffic
    stand_in.answer("2", 200, 0.001, route="/v1/models/{model_name}", n=9)  # probes
    stable, new = c.measure(30)
    assert (stable.requests, stable.errors, stable.accuracy) == (61, 1, 0.9)
    assert (new.requests, new.errors, new.accuracy) == (60, 5, 0.88)
    assert new.p99_s > 0.25
    stand_in.answer("2", 200, 0.004, n=3)
    stable, new = c.measure(30)
    assert (stable.requests, new.requests) == (0, 3)


def test_the_shadow_phase_is_measured_on_the_mirrored_copies_with_their_agreement(served):
    stand_in, url, volume = served
    c = canary(url, volume)
    with pytest.raises(DistmlError, match="needs the canary in a server of its own"):
        c.set_weight(0, shadow=20)
    c.endpoint = "http://127.0.0.1:9001"
    c.set_weight(0, shadow=20)
    assert json.loads(stand_in.weight_file.read_text())["shadow"] == 20
    stand_in.answer("1", 200, 0.004, n=50)
    stand_in.mirrored(200, 0.006, agree=1, differ=0, n=9)
    stand_in.mirrored(500, 0.2, agree=0, differ=0, n=1)
    stable, shadow = c.measure(30)
    assert (stable.requests, shadow.requests, shadow.errors) == (50, 10, 1)
    assert shadow.agreement == (9, 0) and shadow.p99_s > 0.1
    c.set_weight(10)  # the first step: no copies, the canary's answers go to users
    stand_in.answer("2", 200, 0.004, n=5)
    stand_in.mirrored(200, 0.006, agree=1, differ=0, n=4)  # late copies: not the step's
    _, new = c.measure(30)
    assert (new.requests, new.agreement) == (5, None)


def test_an_unreadable_metrics_page_is_a_measurement_error(served):
    stand_in, url, volume = served
    c = canary(url, volume)
    c.set_weight(10)
    stand_in.down = True
    with pytest.raises(MeasurementError, match="the server's /metrics"):
        c.measure(30)


def test_an_unscored_sample_says_why_once_and_leaves_accuracy_unknown(served):
    _, url, volume = served
    notes: list[str] = []

    def failing(argv):
        return subprocess.CompletedProcess(argv, 1, "", "progress\nendpoint 2: HTTP 404")

    c = canary(url, volume, score=failing, notes=notes)
    c.set_weight(10)
    assert c.measure(30)[1].accuracy is None and c.measure(30)[1].accuracy is None
    assert notes == ["accuracy sample not scored: endpoint 2: HTTP 404"]


@pytest.mark.parametrize("promote", [True, False])
def test_the_end_runs_canary_publish_with_the_record_and_waits_for_the_server(served, promote):
    stand_in, url, volume = served
    steps: list = []
    c = canary(url, volume, steps=steps)
    c.set_weight(10)
    recorded = {}

    def step(what, argv):
        recorded.update(json.loads(Path(argv[argv.index("--record") + 1]).read_text()))
        stand_in.canary = ""  # what ml.selection.canary_publish leaves: no canary
        stand_in.serving = "2" if promote else "1"
        return 0

    c.step = step
    result = Result(Decision(Action.PROMOTE if promote else Action.ROLLBACK, 0, "because"))
    (c.promote if promote else c.rollback)(result)
    assert recorded["reason"] == "because"


def test_a_failed_end_step_is_an_error(served):
    _, url, volume = served
    c = canary(url, volume)
    c.step = lambda what, argv: 1
    with pytest.raises(DistmlError, match="ending the canary failed"):
        c.rollback(Result(Decision(Action.ROLLBACK, 0, "x")))


def test_the_record_holds_every_intervals_figures():
    from runtime.canary.analysis import Interval
    from runtime.canary.gates import Thresholds, judge

    stable, new = Figures(100, 0, 0.01, 0.9), Figures(50, 10, 0.2, 0.5)
    gates = judge(stable, new, Thresholds())
    result = Result(
        Decision(Action.ROLLBACK, 0, "1 failed measurement(s)"),
        [Interval(10, stable, new, gates, Decision(Action.ROLLBACK, 0, "x"))],
    )
    record = record_of(result)
    assert record["decision"] == "rollback" and record["reason"] == "1 failed measurement(s)"
    (interval,) = record["intervals"]
    assert interval["canary"]["errors"] == 10 and interval["gates"]["errors"][0] == "fail"


@pytest.mark.parametrize(
    ("stdout", "note"),
    [
        ("", "the sample printed no accuracy"),
        ('progress\n{"accuracy": "90%"}\n', "the sample printed no accuracy"),
        ('{"accuracy": {"1": 0.9, "2": 0.8}}\nbye\n', None),
    ],
    ids=["silent", "not a mapping", "the last object line"],
)
def test_a_sample_that_exits_0_is_read_from_its_last_json_line(served, stdout, note):
    _, url, volume = served
    notes: list[str] = []

    def scored(argv):
        return subprocess.CompletedProcess(argv, 0, stdout, "")

    c = canary(url, volume, score=scored, notes=notes)
    c.set_weight(10)
    stable, new = c.measure(30)
    if note:
        assert (new.accuracy, notes) == (None, [f"accuracy sample not scored: {note}"])
    else:
        assert (stable.accuracy, new.accuracy, notes) == (0.9, 0.8, [])


@given(st.text())
def test_any_output_is_read_without_raising(text):
    assert isinstance(last_json(text), dict)


# Lines that are not JSON: no character splitlines() splits on (controls, Zl, Zp).
LINE = st.text(st.characters(blacklist_categories=("Cc", "Zl", "Zp")))
NOISE = st.lists(LINE.map(lambda t: "# " + t))
OBJECTS = st.dictionaries(st.text(), st.one_of(st.integers(), st.text(), st.floats(0, 1)))


@given(NOISE, OBJECTS, NOISE)
def test_the_last_object_line_is_found_among_any_other_lines(before, obj, after):
    text = "\n".join([*before, json.dumps(obj), *after])
    assert last_json(text) == obj
