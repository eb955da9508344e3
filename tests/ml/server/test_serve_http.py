"""The real model server (``python -m ml serve``) over HTTP: the request forms predict alike,
bad requests get a 4xx and the server keeps serving, the body and request-pixel limits, V2
infer, the listening sockets, a server waiting for its first version, the request-header
timeout, and a new version swapped in under load.

The tests start ``python -m ml serve`` as subprocesses on free 127.0.0.1 ports
(tests/ml/server/serve_process.py): ``server`` serves a small randomly initialised export,
``empty_server`` starts on an empty model directory. Both are terminated in fixture
finalizers.
"""

from __future__ import annotations

import http.client
import json
import math
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ml.data.dataset import CLASS_NAMES
from ml.selection.select import publish
from ml.server import instances
from tests.ml.server.serve_process import Server, export_test_model, http_json, wait_for
from tests.support.serve_requests import (
    BAD_REQUESTS,
    MAX_BODY_BYTES,
    MODEL,
    SMALL_PNG,
    ZEROS,
    Raw,
    b64,
    huge_png,
)

HEADER_TIMEOUT = 1.0  # the empty server's --request-header-timeout


@pytest.fixture(scope="module")
def real_images(shared_data_dir: Path) -> np.ndarray:
    from ml.data.dataset import read_idx

    return read_idx(shared_data_dir / "t10k-images-idx3-ubyte.gz")[:4]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A randomly initialised cnn, exported once (its outputs vary across images)."""
    return export_test_model(tmp_path_factory.mktemp("export") / "model")


@pytest.fixture(scope="module")
def servers(tmp_path_factory, exported: Path) -> Iterator[dict[str, Server]]:
    """Both servers, started together so their (TensorFlow) start-ups overlap."""
    root = tmp_path_factory.mktemp("volume")
    serving = root / "serving" / MODEL
    publish(exported, serving, {"source": "test"})  # version 1
    started: dict[str, Server] = {}
    try:
        started["main"] = Server(serving, root / "main.log")
        started["empty"] = Server(
            root / "serving" / "empty",
            root / "empty.log",
            "--request-header-timeout",
            str(HEADER_TIMEOUT),
        )
        # The default limits (the others' --max-instances is small, for the bad-input table).
        defaults = root / "serving" / "defaults"
        publish(exported, defaults, {"source": "test"})
        started["defaults"] = Server(
            defaults, root / "defaults.log", "--max-instances", str(instances.DEFAULT_MAX_INSTANCES)
        )
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def server(servers: dict[str, Server]) -> Server:
    servers["main"].wait_ready()
    return servers["main"]


@pytest.fixture(scope="module")
def empty_server(servers: dict[str, Server]) -> Server:
    servers["empty"].wait_live()
    return servers["empty"]


@pytest.fixture(scope="module")
def default_limits_server(servers: dict[str, Server]) -> Server:
    servers["defaults"].wait_ready()
    return servers["defaults"]


def check_probabilities(predictions: Any, n: int) -> np.ndarray:
    probs = np.asarray(predictions, dtype=np.float64)
    assert probs.shape == (n, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert (probs >= 0).all()
    return probs


def test_predicts_b64_pngs_pixel_arrays_and_columnar_alike(server, real_images, tf) -> None:
    pngs = [b64(tf.io.encode_png(img[..., None]).numpy()) for img in real_images]
    pixels = (real_images / 255.0).tolist()
    n = len(real_images)

    status, by_bytes = server.predict({"instances": pngs, "return_class_names": True})
    assert status == 200, by_bytes
    probs = check_probabilities(by_bytes["predictions"], n)
    assert probs.std(axis=0).max() > 1e-3, "outputs must vary across images"
    assert by_bytes["class_names"] == [CLASS_NAMES[k] for k in probs.argmax(axis=1)]
    assert by_bytes["model_version"] == 1

    answers = {
        "[28][28]": server.predict({"instances": pixels}),
        "[28][28][1]": server.predict({"instances": (real_images[..., None] / 255.0).tolist()}),
        "named b64": server.predict({"instances": [{"image_bytes": p} for p in pngs]}),
        "columnar pixels": server.predict({"inputs": {"pixels": pixels}}),
        "columnar b64": server.predict(
            {"inputs": pngs, "signature_name": "serving_default"}, **{"Content-Type": "text/plain"}
        ),
    }
    for name, (status, body) in answers.items():
        assert status == 200, (name, body)
        key = "outputs" if name.startswith("columnar") else "predictions"
        np.testing.assert_allclose(check_probabilities(body[key], n), probs, atol=1e-5)


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        *BAD_REQUESTS,
        pytest.param(
            {"instances": [b64(SMALL_PNG), b64(SMALL_PNG[:60])]},
            400,
            "instance 1 could not be decoded",
            id="truncated PNG (decoded by TensorFlow)",
        ),
        pytest.param(
            {"instances": [b64(b"\xff\xd8\xff\xc0\x00\x0b\x08\x00\x1c\x00\x1c\x01\x01\x11\x00")]},
            400,
            "instance 0 could not be decoded",
            id="JPEG with a header and no data",
        ),
        pytest.param(
            Raw(b"{not json", "text/plain"),
            400,
            "is not valid JSON",
            id="malformed JSON sent as text/plain",
        ),
    ],
)
def test_bad_requests_over_http_get_4xx_and_the_server_keeps_serving(
    server, body, status, text
) -> None:
    got, answer = server.predict(body)
    assert got == status and text in answer["error"], answer
    ok, good = server.predict({"instances": [ZEROS]})
    assert ok == 200 and len(good["predictions"]) == 1


def test_unknown_model_is_404_naming_the_served_model(server) -> None:
    status, answer = server.predict({"instances": [ZEROS]}, model="mnist")
    assert status == 404
    assert "mnist" in answer["error"] and f"serves: {MODEL}" in answer["error"]


def test_oversized_body_is_413_before_or_while_reading(server) -> None:
    path = f"/v1/models/{MODEL}:predict"
    # Declared too large: answered from the headers, no body is sent at all.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", path)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and "--max-body-bytes" in json.loads(response.read())["error"]
    conn.close()

    # Chunked (no Content-Length): counted while reading.
    body = b'{"instances": [' + b" " * (MAX_BODY_BYTES - 16) + b"]}"
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", path)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    try:
        for i in range(0, len(body), 65536):
            chunk = body[i : i + 65536]
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer and close before the last chunk
    response = conn.getresponse()
    assert response.status == 413 and "chunked" in json.loads(response.read())["error"]
    conn.close()
    assert server.predict({"instances": [ZEROS]})[0] == 200


def test_a_full_batch_of_the_largest_images_is_413_from_the_headers(
    default_limits_server: Server,
) -> None:
    """256 PNGs of 4096x4096 (each within --max-image-pixels; 4 Gi pixels to decode) that
    are headers and 100 bytes of data each: refused from the headers, nothing decoded."""
    server = default_limits_server
    n = instances.DEFAULT_MAX_INSTANCES
    status, answer = server.predict({"instances": [b64(huge_png(4096, 4096))] * n})
    assert status == 413, answer
    total = n * 4096 * 4096
    limit = instances.DEFAULT_MAX_REQUEST_PIXELS
    expected = (
        f"the request's {n} images total {total:,} pixels, more than this server's limit of "
        f"{limit:,} pixels per request (--max-request-pixels)"
    )
    assert answer["error"].startswith(expected), answer
    # Refused in preprocess (ml.server.instances, headers only): a decode of these truncated images
    # would have answered 400 "could not be decoded" and logged no such refusal.
    wait_for(lambda: f"rejected a request (413): {expected}" in server.log(), 10, "the log line")
    assert "could not be decoded" not in server.log()
    status, answer = server.predict({"instances": [b64(SMALL_PNG)] * n})
    assert status == 200 and len(answer["predictions"]) == n


def test_v2_infer_over_rest(server, real_images) -> None:
    """KServe's V2 REST endpoint reaches the same model (ml.server.v2.parse_v2_request)."""
    pixels = (real_images[..., None] / 255.0).astype(np.float32)
    _, rest = server.predict({"instances": pixels.tolist()})

    def infer(array: np.ndarray) -> tuple[int, Any]:
        tensor = {"name": "pixels", "datatype": "FP32", "shape": list(array.shape)}
        body = {"id": "req-1", "inputs": [{**tensor, "data": array.reshape(-1).tolist()}]}
        url = f"{server.url}/v2/models/{MODEL}/infer"
        headers = {"Content-Type": "application/json"}
        return http_json("POST", url, json.dumps(body).encode(), headers)

    status, answer = infer(pixels)
    assert status == 200, answer
    (output,) = answer["outputs"]
    assert output["shape"] == [len(pixels), 10]
    assert (answer["model_version"], answer["id"]) == ("1", "req-1")
    got = np.asarray(output["data"]).reshape(-1, 10)
    np.testing.assert_allclose(got, rest["predictions"], atol=1e-5)
    status, answer = infer(pixels * 255)
    assert status == 400 and "divide them by 255" in answer["error"], answer


def test_main_server_listens_only_on_host_http_port(server) -> None:
    # HTTP on 127.0.0.1 only: nothing on 0.0.0.0, [::] or KServe's default gRPC port 8081.
    assert server.listening() == {("127.0.0.1", server.port)}


def test_server_without_versions_waits_not_ready_then_loads_the_first(
    empty_server, exported
) -> None:
    status, answer = empty_server.get(f"/v1/models/{MODEL}")
    assert status == 503 and "No version loaded yet" in answer["error"], answer
    assert empty_server.predict({"instances": [ZEROS]})[0] == 503
    wait_for(lambda: "waiting for a model" in empty_server.log(), 10, "the waiting log line")
    # HTTP on 127.0.0.1 only (nothing on 0.0.0.0, [::] or 8081).
    assert empty_server.listening() == {("127.0.0.1", empty_server.port)}

    publish(exported, empty_server.model_dir, {"source": "test"})
    empty_server.wait_ready()
    status, answer = empty_server.predict({"instances": [ZEROS]})
    assert status == 200 and answer["model_version"] == 1
    assert f"serving version 1 from {empty_server.model_dir / '1'}" in empty_server.log()


def trickle(port: int, start: bytes, rest: bytes, within: float) -> tuple[bytes, float]:
    """Send ``start``, then one byte of ``rest`` every 0.1 s until the server closes the
    connection or ``within`` seconds pass. Returns (what the server sent, seconds until it
    closed the connection, or inf)."""
    began = time.monotonic()
    received = b""
    pending = iter(rest)
    with socket.create_connection(("127.0.0.1", port), timeout=within) as sock:
        sock.sendall(start)
        while time.monotonic() - began < within:
            if select.select([sock], [], [], 0.1)[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    return received, time.monotonic() - began
                received += chunk
            elif (byte := next(pending, None)) is not None:
                sock.send(bytes([byte]))
    return received, math.inf


@pytest.mark.parametrize(
    ("start", "rest", "answer"),
    [
        pytest.param(
            b"GET /v1/models/tf-mnist HTT",
            b"P/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000,
            b"HTTP/1.1 408 Request Timeout\r\n",
            id="request line and headers sent a byte at a time",
        ),
        pytest.param(b"", b"", b"", id="nothing sent"),
    ],
)
def test_a_request_whose_headers_do_not_arrive_in_time_is_closed(
    empty_server, start, rest, answer
) -> None:
    received, closed_after = trickle(empty_server.port, start, rest, HEADER_TIMEOUT + 10)
    assert HEADER_TIMEOUT - 0.1 < closed_after < HEADER_TIMEOUT + 5, (closed_after, received)
    assert received.startswith(answer), received
    if answer:
        assert b"--request-header-timeout" in received
    assert empty_server.get(f"/v1/models/{MODEL}")[0] in (200, 503)  # still answering


def test_new_version_is_swapped_in_without_failing_a_request(server, exported, tmp_path) -> None:
    """Publishes a corrupt version 2 (skipped) then a good version 3 (served) under load."""
    seen: list[int] = []
    failures: list[str] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                status, answer = server.predict({"instances": [ZEROS, ZEROS]})
                if status != 200:
                    failures.append(f"{status}: {answer}")
                else:
                    check_probabilities(answer["predictions"], 2)
                    seen.append(answer["model_version"])
            except Exception as e:  # any failure counts, whatever its kind
                failures.append(repr(e))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
        assert publish(broken, server.model_dir, {"source": "test"}) == 2
        wait_for(
            lambda: "version 2 in" in server.log() and "failed to load" in server.log(),
            30,
            "the corrupt version to be skipped",
            server.log_tail,
        )
        assert publish(exported, server.model_dir, {"source": "test"}) == 3
        wait_for(lambda: seen and seen[-1] == 3, 60, "model_version 3", server.log_tail)
        count = len(seen)
        wait_for(lambda: len(seen) > count + 10, 30, "more answers after the switch")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert failures == []
    assert set(seen) == {1, 3}, sorted(set(seen))
    assert seen.index(3) > 0 and "still serving version 1" in server.log()
    assert "serving version 3 from" in server.log()
