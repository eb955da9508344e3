"""A canary release in the real server (``python -m ml serve --canary-dir``): the canary
answers exactly its weight's share of the requests, each version's requests are counted
apart on ``/metrics``, a real client (tritonclient) reaches either version by name, and the
weight moves and the canary leaves without a restart and without a failed request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ml.contract.serving_metrics import CANARY_WEIGHT, LATENCY, REQUESTS_TOTAL
from ml.selection.select import publish
from ml.server.canary import WEIGHT_FILE
from tests.ml.server.serve_process import Server, wait_for
from tests.support.serve_requests import MODEL

PREDICT = "/v1/models/{model_name}:predict"
ZEROS = {"instances": [[[[0.0]] * 28] * 28]}


@pytest.fixture(scope="module")
def release(exported: Path, start_server, tmp_path_factory) -> tuple[Server, Path]:
    root = tmp_path_factory.mktemp("volume")
    publish(exported, root / "serving", {"source": "test"})  # version 1: the stable
    canary = root / "canary"
    shutil.copytree(exported, canary / "2")  # the canary, as ml select --canary publishes it
    server = start_server(root / "serving", "--canary-dir", str(canary))
    server.wait_ready()
    return server, canary


def set_weight(server: Server, canary: Path, weight: int) -> None:
    """Write the weight file; wait until the server applies it (its gauge says so)."""
    (canary / WEIGHT_FILE).write_text(json.dumps({"weight": weight}))
    wait_for(
        lambda: server.scrape().counts(CANARY_WEIGHT, "version") == {("2",): weight},
        30,
        f"the canary at {weight}%",
        server.log_tail,
    )


def answered(server: Server, n: int) -> dict[str, float]:
    """Send ``n`` predicts one after another; each version's 200s among them."""
    before = server.scrape().counts(REQUESTS_TOTAL, "route", "code", "version")
    for _ in range(n):
        status, answer = server.predict(ZEROS)
        assert status == 200, answer
    after = server.scrape().counts(REQUESTS_TOTAL, "route", "code", "version")
    return {
        version: after[(route, code, version)] - before.get((route, code, version), 0)
        for route, code, version in after
        if route == PREDICT and code == "200"
        if after[(route, code, version)] != before.get((route, code, version), 0)
    }


def test_the_canary_answers_exactly_its_share_counted_apart(release) -> None:
    server, canary = release
    set_weight(server, canary, 30)
    assert answered(server, 100) == {"1": 70, "2": 30}
    versions = server.scrape().label_values(f"{LATENCY}_count", "version")
    assert {"1", "2"} <= versions  # each version's latency, apart


def test_tritonclient_reaches_either_version_by_name(release) -> None:
    import numpy as np
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    server, canary = release
    set_weight(server, canary, 30)
    client = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    pixels = httpclient.InferInput("pixels", [1, 28, 28, 1], "FP32")
    pixels.set_data_from_numpy(np.zeros((1, 28, 28, 1), np.float32))
    for version in ("1", "2"):
        result = client.infer(MODEL, [pixels], model_version=version)
        assert result.get_response()["model_version"] == version
        assert result.as_numpy("probabilities").shape == (1, 10)
    with pytest.raises(InferenceServerException, match="version 9 is not served here"):
        client.infer(MODEL, [pixels], model_version="9")


def test_the_weight_moves_and_the_canary_leaves_without_a_restart(release) -> None:
    server, canary = release
    set_weight(server, canary, 100)
    assert answered(server, 20) == {"2": 20}
    set_weight(server, canary, 0)
    assert answered(server, 20) == {"1": 20}
    shutil.rmtree(canary / "2")
    wait_for(
        lambda: server.scrape().counts(CANARY_WEIGHT, "version") == {},
        30,
        "the canary gone",
        server.log_tail,
    )
    assert answered(server, 10) == {"1": 10}
