"""``GET /metrics`` of the real server (``python -m ml serve``), read with prometheus-client's
parser: each counter moves exactly as the requests sent (the direct V1 path and KServe's, V2
JSON and binary, 4xx of each kind, 503 before a version loads, 408 and 400 from the HTTP
protocol), the scrape and the health probes are not counted, in-flight requests are seen
and return to 0, the latency histogram counts every request, batch sizes count every model
call, and the model info follows the versions published."""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ml.contract.serving_metrics import BATCH_SIZE, IN_FLIGHT, LATENCY, OTHER_ROUTE, REQUESTS_TOTAL
from ml.selection.select import publish
from tests.ml.server.scrape import increase
from tests.ml.server.serve_process import Server, wait_for
from tests.support.serve_requests import MAX_BODY_BYTES, MODEL, SMALL_PNG, ZEROS, b64

PREDICT = "/v1/models/{model_name}:predict"
INFER = "/v2/models/{model_name}/infer"
READY = "/v1/models/{model_name}"
HEADER_TIMEOUT = 1.0
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def servers(exported: Path, start_server, tmp_path_factory) -> dict[str, Server]:
    root = tmp_path_factory.mktemp("volume")
    publish(exported, root / "main", {"source": "test"})  # version 1
    started = {
        "main": start_server(root / "main"),
        "empty": start_server(root / "empty", "--request-header-timeout", str(HEADER_TIMEOUT)),
    }
    started["main"].wait_ready()
    started["empty"].wait_live()
    return started


def send(server: Server, method: str, path: str, body: Any = None, **headers: str) -> int:
    """One request on a connection of its own; the status answered."""
    if body is not None and not isinstance(body, bytes):
        body, headers = json.dumps(body).encode(), {**JSON, **headers}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def counted(server: Server) -> dict[tuple[str, ...], float]:
    return server.scrape().counts(REQUESTS_TOTAL, "model", "route", "code", "version")


PIXELS = np.zeros((1, 28, 28, 1), np.float32)
TENSOR = {"name": "pixels", "datatype": "FP32", "shape": [1, 28, 28, 1]}
V2_JSON = {"inputs": [{**TENSOR, "data": [0.0] * 784}]}


def v2_binary() -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": [{**TENSOR, "parameters": {"binary_data_size": 3136}}]})
    length = {"Inference-Header-Content-Length": str(len(header))}
    headers = {"Content-Type": "application/octet-stream", **length}
    return header.encode() + PIXELS.tobytes(), headers


def too_large(server: Server) -> int:
    """A predict request declaring a body over --max-body-bytes (413 from its headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest("POST", f"/v1/models/{MODEL}:predict")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_every_request_is_counted_as_answered_and_probes_are_not(servers) -> None:
    server = servers["main"]
    scrape = server.scrape()
    before = counted(server)
    latency = scrape.counts(f"{LATENCY}_count", "model", "route")
    batches = scrape.total(f"{BATCH_SIZE}_count", model=MODEL)
    kserve_predicts = scrape.total("request_predict_seconds_count", model_name=MODEL)
    one = {"instances": [ZEROS]}
    statuses = [
        send(server, "POST", f"/v1/models/{MODEL}:predict", one),  # the direct path
        send(server, "POST", f"/v1/models/{MODEL}:predict", one),
        send(server, "POST", f"/v1/models/{MODEL}:predict", json.dumps(one).encode()),  # KServe's
        send(server, "POST", f"/v2/models/{MODEL}/infer", V2_JSON),
        send(server, "POST", f"/v2/models/{MODEL}/infer", v2_binary()[0], **v2_binary()[1]),
        send(server, "POST", f"/v1/models/{MODEL}:predict", {"instances": 5}),
        send(server, "POST", f"/v1/models/{MODEL}:predict", {"instances": [b64(SMALL_PNG[:60])]}),
        send(server, "POST", f"/v2/models/{MODEL}/infer", {}),
        send(server, "GET", "/no/such/path"),
        send(server, "POST", "/v1/models/mnist:predict", one),
        send(server, "DELETE", f"/v1/models/{MODEL}"),
        too_large(server),
        send(server, "GET", f"/v1/models/{MODEL}"),
        send(server, "GET", "/v2"),
        *(send(server, "GET", path) for path in ("/", "/v2/health/live", "/v2/health/ready")),
        send(server, "GET", "/metrics"),
    ]  # fmt: skip
    assert statuses == [200] * 5 + [400] * 3 + [404, 404, 405, 413] + [200] * 6
    after = server.scrape()
    assert increase(before, counted(server)) == {
        (MODEL, PREDICT, "200", "1"): 3,
        (MODEL, INFER, "200", "1"): 2,
        (MODEL, PREDICT, "400", ""): 1,  # refused before reaching a version
        (MODEL, PREDICT, "400", "1"): 1,  # the undecodable image: the version it went to
        (MODEL, INFER, "400", ""): 1,
        ("", OTHER_ROUTE, "404", ""): 1,
        ("", PREDICT, "404", ""): 1,  # another model's name: not a label value
        (MODEL, READY, "405", ""): 1,
        (MODEL, PREDICT, "413", ""): 1,
        (MODEL, READY, "200", ""): 1,
        ("", "/v2", "200", ""): 1,
    }
    assert increase(latency, after.counts(f"{LATENCY}_count", "model", "route")) == {
        (MODEL, PREDICT): 6, (MODEL, INFER): 3, ("", OTHER_ROUTE): 1, ("", PREDICT): 1,
        (MODEL, READY): 2, ("", "/v2"): 1,
    }  # fmt: skip
    assert after.total(IN_FLIGHT) == 0
    # One model call per answered predict or infer, and the undecodable image's.
    assert after.total(f"{BATCH_SIZE}_count", model=MODEL) == batches + 6
    # KServe's own histograms (the default registry) are exposed beside these.
    assert after.total("request_predict_seconds_count", model_name=MODEL) >= kserve_predicts + 2


def test_a_request_being_answered_is_in_flight(servers) -> None:
    """A predict request whose body is half sent is in flight until the rest arrives."""
    server = servers["main"]
    body = json.dumps({"instances": [ZEROS]}).encode()
    head = (
        f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        f"\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + body[:10])
        wait_for(lambda: server.scrape().total(IN_FLIGHT, model=MODEL) == 1, 30, "in flight 1")
        sock.sendall(body[10:])
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    wait_for(lambda: server.scrape().total(IN_FLIGHT, model=MODEL) == 0, 30, "in flight 0")


def test_latency_counts_from_the_requests_first_byte(servers) -> None:
    """A request whose line arrives well before its headers: between them the test makes 20
    scrapes, so the server had the first byte before the second scrape started and the
    rest after the last ended; its latency is at least the time those 19 took."""
    server = servers["main"]
    latency = server.scrape().total(f"{LATENCY}_sum", route=PREDICT)
    body = json.dumps({"instances": [ZEROS]}).encode()
    head = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: x\r\n".encode())
        server.scrape()
        began = time.perf_counter()
        for _ in range(19):
            server.scrape()
        held = time.perf_counter() - began
        sock.sendall(head + body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    took = server.scrape().total(f"{LATENCY}_sum", route=PREDICT) - latency
    assert took >= held, (took, held)


def closed_after(server: Server, data: bytes) -> bytes:
    """Send ``data``, then read until the server closes the connection; what it sent."""
    received = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(data)
        while select.select([sock], [], [], HEADER_TIMEOUT + 10)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk
    raise AssertionError(f"the server did not close the connection; it sent {received!r}")


def test_the_protocols_own_refusals_are_counted_as_route_other(servers) -> None:
    server = servers["empty"]
    before = counted(server)
    assert closed_after(server, b"GET /v1/models/tf-mnist HTTP/1.1\r\nHost:").startswith(
        b"HTTP/1.1 408 "
    )
    assert closed_after(server, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert increase(before, counted(server)) == {
        ("", OTHER_ROUTE, "408", ""): 1,
        ("", OTHER_ROUTE, "400", ""): 1,
    }


def model_info(server: Server) -> str:
    (info,) = server.scrape().matching("distml_model_info", model=MODEL)
    return info.labels["version"]


def test_503_before_a_version_loads_and_the_model_info_follows_each_publish(
    servers, exported
) -> None:
    server = servers["empty"]
    assert model_info(server) == ""
    before = counted(server)
    assert send(server, "POST", f"/v1/models/{MODEL}:predict", {"instances": [ZEROS]}) == 503
    assert send(server, "GET", f"/v2/models/{MODEL}") == 503
    assert send(server, "GET", "/v2/health/ready") == 503  # a probe: not counted
    assert increase(before, counted(server)) == {
        (MODEL, PREDICT, "503", ""): 1,
        (MODEL, "/v2/models/{model_name}", "503", ""): 1,
    }
    for version in (1, 2):
        assert publish(exported, server.model_dir, {"source": "test"}) == version
        wait_for(lambda v=version: model_info(server) == str(v), 60, f"version {version}")
        before = counted(server)
        assert send(server, "POST", f"/v1/models/{MODEL}:predict", {"instances": [ZEROS]}) == 200
        assert increase(before, counted(server)) == {(MODEL, PREDICT, "200", str(version)): 1}
