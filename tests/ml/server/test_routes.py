"""ml.server.routes, through ml.serve's web app in process (``tests/support/serve_stub.py``):
only the documented routes are mounted, every other URL, method or model version gets a 404
or 405 naming what is served, and V2 bodies that are not V2 requests get a 400."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from ml.server import v2
from tests.support.serve_stub import MODEL, VERSION, StubVersions, stub_app

JSON = "application/json"
DOCUMENTED_ROUTES = [
    ("GET", "/"),
    ("GET", "/v1/models/{model_name}"),
    ("POST", "/v1/models/{model_name}:predict"),
    ("GET", "/v2/models/{model_name}/ready"),
    ("POST", "/v2/models/{model_name}/infer"),
]


@pytest.fixture(scope="module")
def app() -> Any:
    return stub_app().app


@pytest.fixture(scope="module")
def client() -> Any:
    return stub_app().client


@pytest.fixture(scope="module")
def versions() -> StubVersions:
    return stub_app().versions


def test_only_the_documented_routes_are_mounted(app) -> None:
    mounted = sorted(
        (method, getattr(route, "path", type(route).__name__))
        for route in app.routes
        for method in getattr(route, "methods", None) or ["(any)"]
    )
    assert mounted == sorted(DOCUMENTED_ROUTES)


def test_repository_unload_and_load_are_404_and_the_model_stays_ready(client, versions) -> None:
    for action in ("unload", "load"):
        answer = client.post(f"/v2/repository/models/{MODEL}/{action}")
        assert answer.status_code == 404, answer.text
    assert client.get(f"/v1/models/{MODEL}").status_code == 200
    assert client.get(f"/v2/models/{MODEL}/ready").status_code == 200
    assert not versions.stopped
    answer = client.post(f"/v1/models/{MODEL}:predict", json={"instances": [[[0.0] * 28] * 28]})
    assert answer.status_code == 200 and answer.json()["model_version"] == VERSION


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/v1/models"),
        ("GET", "/v2"),
        ("GET", "/v2/health/live"),
        ("GET", "/v2/models"),
        ("GET", f"/v2/models/{MODEL}"),
        ("GET", "/no/such/path"),
    ],
)
def test_other_urls_are_404_naming_the_served_routes(client, method, path) -> None:
    answer = client.request(method, path)
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    assert error.startswith(f"{method} {path}: no such route; this server answers ")
    assert f"POST /v1/models/{MODEL}:predict (V1 predict)" in error


def test_a_served_path_with_another_method_is_405_naming_the_method(client) -> None:
    answer = client.delete(f"/v1/models/{MODEL}")
    assert answer.status_code == 405
    assert answer.json()["error"] == f"DELETE /v1/models/{MODEL}: method not allowed; use GET"
    assert answer.headers["allow"] == "GET"
    # KServe's explainer route is gone: its path is the readiness path's, of another model.
    assert client.post(f"/v1/models/{MODEL}:explain").status_code == 405


@pytest.mark.parametrize(
    ("method", "path", "unversioned"),
    [
        ("POST", f"/v2/models/{MODEL}/versions/999/infer", f"/v2/models/{MODEL}/infer"),
        ("GET", f"/v2/models/{MODEL}/versions/999/ready", f"/v2/models/{MODEL}/ready"),
        ("POST", f"/v2/models/{MODEL}/versions/{VERSION}/infer", f"/v2/models/{MODEL}/infer"),
    ],
)
def test_versioned_v2_urls_are_404_naming_the_served_version(
    client, method, path, unversioned
) -> None:
    answer = client.request(method, path, json={})
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"].startswith(
        f"{method} {path}: versions are not addressable: this server serves only the newest "
        f"published version of {MODEL} (now version {VERSION}); send the request without "
        f"/versions/"
    )
    assert f": {unversioned} (the answer's model_version says" in answer.json()["error"]


def v2_binary(header: dict, data: bytes = b"") -> tuple[bytes, dict[str, str]]:
    """A body in KServe's V2 binary data extension, and its headers."""
    text = json.dumps(header).encode()
    length = {"inference-header-content-length": str(len(text))}
    return text + data, {"content-type": "application/octet-stream", **length}


PIXELS = np.zeros((1, 28, 28, 1), np.float32)
PIXELS_TENSOR = {"name": "pixels", "datatype": "FP32", "shape": [1, 28, 28, 1]}


@pytest.mark.parametrize(
    ("body", "headers", "text"),
    [
        pytest.param(
            b"[" * 100_000,
            {"content-type": JSON},
            "recursion limit exceeded",
            id="nested 100000 deep",
        ),
        pytest.param(b"{not json", {"content-type": JSON}, "Invalid JSON", id="not JSON"),
        pytest.param(b"{}", {"content-type": JSON}, "inputs: Field required", id="no inputs"),
        pytest.param(
            b'{"inputs": 5}',
            {"content-type": JSON},
            "inputs: Input should be a valid array",
            id="inputs 5",
        ),
        pytest.param(*v2_binary({}), "KeyError: 'inputs'", id="binary: no inputs"),
        pytest.param(*v2_binary([]), "TypeError", id="binary: JSON part a list"),
        pytest.param(
            *v2_binary({"inputs": [{"name": "pixels"}]}), "KeyError", id="binary: no shape"
        ),
        pytest.param(
            b"{}",
            {"inference-header-content-length": "two"},
            "ValueError: invalid literal for int()",
            id="binary: length not a number",
        ),
        pytest.param(
            b"[" * 100_000,
            {"inference-header-content-length": "100000"},
            "depth limit exceeded",
            id="binary: nested 100000 deep",
        ),
    ],
)
def test_v2_bodies_that_are_not_v2_requests_are_400(client, body, headers, text) -> None:
    answer = client.post(f"/v2/models/{MODEL}/infer", content=body, headers=headers)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error.startswith("the body is not a V2 inference request (") and text in error
    assert error.endswith(v2.V2_HINT)


def test_v2_json_and_binary_requests_are_answered(client) -> None:
    tensor = {**PIXELS_TENSOR, "data": PIXELS.reshape(-1).tolist()}
    binary = {**PIXELS_TENSOR, "parameters": {"binary_data_size": PIXELS.nbytes}}
    for body, headers in [
        (json.dumps({"id": "a", "inputs": [tensor]}).encode(), {"content-type": JSON}),
        v2_binary({"id": "a", "inputs": [binary]}, PIXELS.tobytes()),
    ]:
        answer = client.post(f"/v2/models/{MODEL}/infer", content=body, headers=headers)
        assert answer.status_code == 200, answer.text
        assert (answer.json()["id"], answer.json()["model_version"]) == ("a", str(VERSION))
