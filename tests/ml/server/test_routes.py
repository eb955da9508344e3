"""ml.server.routes, through ml.server.serve's web app in process (``tests/support/serve_stub.py``):
only the documented routes are mounted, none that changes state; every other URL, method or
model version gets a 404 or 405 naming what is served; the Open Inference Protocol's
read-only routes answer as it says; and V2 bodies that are not V2 requests get a 400."""

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
    ("GET", "/v2/health/live"),
    ("GET", "/v2/health/ready"),
    ("GET", "/v2"),
    ("GET", "/v2/models/{model_name}"),
    ("GET", "/v2/models/{model_name}/ready"),
    ("POST", "/v2/models/{model_name}/infer"),
    ("POST", "/v2/models/{model_name}/versions/{model_version}/infer"),
    ("GET", "/metrics"),
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
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/v1/models"),
        ("GET", "/v2/models"),
        ("GET", "/v2/repository/index"),
        ("POST", "/v2/repository/index"),
        ("GET", "/v2/health/startup"),
        ("GET", "/no/such/path"),
    ],
)
def test_other_urls_are_404_naming_the_served_routes(client, method, path) -> None:
    answer = client.request(method, path)
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    assert error.startswith(f"{method} {path}: no such route; this server answers ")
    assert f"POST /v1/models/{MODEL}:predict (V1 predict)" in error


@pytest.mark.parametrize(
    "path", [path for method, path in DOCUMENTED_ROUTES if method == "GET" and path != "/"]
)
def test_the_read_only_routes_refuse_other_methods_with_405(client, path) -> None:
    url = path.format(model_name=MODEL)
    for method in ("POST", "PUT", "DELETE"):
        answer = client.request(method, url)
        assert answer.status_code == 405, (method, url, answer.text)
        assert answer.json()["error"] == f"{method} {url}: method not allowed; use GET"


def test_v2_liveness_readiness_and_server_metadata(client) -> None:
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").json() == {"ready": True}
    metadata = client.get("/v2").json()
    assert metadata["name"] == "kserve" and metadata["version"].startswith("0.21.")
    # Binary tensors in and out; not KServe's model repository extension: its routes are 404.
    assert metadata["extensions"] == ["binary_tensor_data"]


def test_v2_model_metadata_names_the_served_version_and_unknown_models_are_404(client) -> None:
    answer = client.get(f"/v2/models/{MODEL}")
    assert answer.status_code == 200, answer.text
    # The stub version has no signatures (the real ones: test_clients.py).
    assert answer.json() == {
        "name": MODEL, "versions": [str(VERSION)], "platform": "", "inputs": [], "outputs": []
    }  # fmt: skip
    answer = client.get("/v2/models/mnist")
    assert answer.status_code == 404
    assert answer.json()["error"] == (
        f"Model with name mnist does not exist. This server serves: {MODEL}."
    )


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
        ("GET", f"/v2/models/{MODEL}/versions/999/ready", f"/v2/models/{MODEL}/ready"),
        ("GET", f"/v2/models/{MODEL}/versions/999", f"/v2/models/{MODEL}"),
        ("GET", f"/v2/models/{MODEL}/versions/{VERSION}", f"/v2/models/{MODEL}"),
    ],
)
def test_versioned_ready_and_metadata_urls_are_404_giving_the_url_without(
    client, method, path, unversioned
) -> None:
    answer = client.request(method, path)
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"] == (
        f"{method} {path}: only infer is addressable by version; readiness and metadata are "
        f"the model's: send the request without /versions/{path.split('/')[5]}: {unversioned} "
        f"(the served version of {MODEL} is now version {VERSION})"
    )


V2_ZEROS = {
    "inputs": [{"name": "pixels", "shape": [1, 28, 28, 1], "datatype": "FP32",
                "data": [0.0] * 784}]
}  # fmt: skip


def test_an_infer_naming_the_served_version_is_answered_by_it(client) -> None:
    answer = client.post(f"/v2/models/{MODEL}/versions/{VERSION}/infer", json=V2_ZEROS)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_version"] == str(VERSION)


@pytest.mark.parametrize("named", ["999", "x1", "-3", "²"])
def test_an_infer_naming_another_version_is_404_saying_which_are_served(client, named) -> None:
    answer = client.post(f"/v2/models/{MODEL}/versions/{named}/infer", json=V2_ZEROS)
    assert answer.status_code == 404, answer.text
    if named.isascii() and named.isdigit():
        assert answer.json()["error"] == (
            f"version {named} is not served here; served: {VERSION} (stable)"
        )
    else:
        assert answer.json()["error"] == f"version {named!r} is not a version number"


def v2_binary(header: dict, data: bytes = b"") -> tuple[bytes, dict[str, str]]:
    """A body in KServe's V2 binary data extension, and its headers."""
    text = json.dumps(header).encode()
    length = {"inference-header-content-length": str(len(text))}
    return text + data, {"content-type": "application/octet-stream", **length}


PIXELS = np.zeros((1, 28, 28, 1), np.float32)
PIXELS_TENSOR = {"name": "pixels", "datatype": "FP32", "shape": [1, 28, 28, 1]}
SIZE_8 = {"binary_data_size": 8}


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
        pytest.param(*v2_binary({}), "inputs: Field required", id="binary: no inputs"),
        pytest.param(
            *v2_binary([]),
            "body: Input should be an object",
            id="binary: JSON part a list",
        ),
        pytest.param(
            *v2_binary({"inputs": [{"name": "pixels"}]}),
            "inputs.0.shape: Field required",
            id="binary: no shape",
        ),
        pytest.param(
            *v2_binary({"inputs": [PIXELS_TENSOR]}),
            "input 'pixels' has no data and no binary_data_size",
            id="binary: neither data nor size",
        ),
        pytest.param(
            *v2_binary(
                {"inputs": [{**PIXELS_TENSOR, "parameters": {"binary_data_size": 8}}]}, b"1234"
            ),
            "the binary data is 4 bytes; the inputs' binary_data_size add up to 8",
            id="binary: data shorter than its size",
        ),
        pytest.param(
            b"{}",
            {"inference-header-content-length": "3"},
            "ValueError: Inference-Header-Content-Length is 3; the body is 2 bytes",
            id="binary: header longer than the body",
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
            "recursion limit exceeded",
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
