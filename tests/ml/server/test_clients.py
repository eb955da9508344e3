"""Real Open Inference Protocol clients against the real server (``python -m ml serve``):
Triton's HTTP client (``tritonclient[http]``: health, readiness, server and model metadata,
inference with binary and JSON tensors in and out) and KServe's ``InferenceRESTClient``
(readiness, inference). Every answer agrees with the V1 predict route's."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ml.selection.select import publish
from ml.server import serve, v2
from tests.ml.server.serve_process import Server
from tests.support.serve_requests import MODEL

N = 3
OUTPUT = "probabilities"


@pytest.fixture(scope="module")
def servers(exported: Path, start_server, tmp_path_factory) -> dict[str, Server]:
    root = tmp_path_factory.mktemp("volume")
    publish(exported, root / "main", {"source": "test"})  # version 1
    started = {"main": start_server(root / "main"), "empty": start_server(root / "empty")}
    started["main"].wait_ready()
    started["empty"].wait_live()
    return started


@pytest.fixture(scope="module")
def images(tf) -> tuple[np.ndarray, list[bytes]]:
    """``N`` random gray images: as pixels in [0, 1] ``[N, 28, 28, 1]``, and as PNG files."""
    gray = np.random.default_rng(0).integers(0, 256, (N, 28, 28, 1), dtype=np.uint8)
    pngs = [tf.io.encode_png(image).numpy() for image in gray]
    return (gray / 255.0).astype(np.float32), pngs


@pytest.fixture(scope="module")
def expected(servers, images) -> np.ndarray:
    """The V1 predict route's probabilities for ``images`` (the same model, another route)."""
    status, answer = servers["main"].predict({"instances": images[0].tolist()})
    assert status == 200, answer
    return np.asarray(answer["predictions"], np.float32)


def triton(server: Server) -> Any:
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")


def test_triton_health_readiness_and_metadata(servers) -> None:
    client = triton(servers["main"])
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(MODEL)
    assert client.get_server_metadata()["extensions"] == ["binary_tensor_data"]
    assert client.get_model_metadata(MODEL) == {
        "name": MODEL,
        "versions": ["1"],
        "platform": "",
        "inputs": [
            {"name": "image_bytes", "datatype": "BYTES", "shape": [-1]},
            {"name": "pixels", "datatype": "FP32", "shape": [-1, 28, 28, 1]},
        ],
        "outputs": [{"name": OUTPUT, "datatype": "FP32", "shape": [-1, 10]}],
    }


def test_triton_before_a_version_loads_and_for_an_unknown_model(servers) -> None:
    from tritonclient.utils import InferenceServerException

    client = triton(servers["empty"])
    assert client.is_server_live()
    assert not client.is_server_ready() and not client.is_model_ready(MODEL)
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata(MODEL)
    assert info.value.status() == "503" and "No version loaded yet" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        triton(servers["main"]).get_model_metadata("mnist")
    assert info.value.status() == "404" and f"serves: {MODEL}" in info.value.message()


def triton_input(name: str, array: np.ndarray, binary: bool) -> Any:
    import tritonclient.http as httpclient

    datatype = "BYTES" if array.dtype == object else "FP32"
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    return tensor.set_data_from_numpy(array, binary_data=binary)


@pytest.mark.parametrize("binary_in", [True, False], ids=["binary in", "JSON in"])
@pytest.mark.parametrize("binary_out", [None, True, False], ids=["default", "binary", "JSON"])
def test_triton_infer_with_pixels_and_images(servers, images, expected, binary_in, binary_out):
    import tritonclient.http as httpclient

    pixels, pngs = images
    # BYTES in JSON are text: this server takes each image as base64 text there (V2_HINT).
    texts = [base64.b64encode(png).decode() for png in pngs]
    encoded = np.array(pngs if binary_in else texts, dtype=object)
    outputs = None if binary_out is None else [httpclient.InferRequestedOutput(OUTPUT, binary_out)]
    for tensor in (
        triton_input("pixels", pixels, binary_in),
        triton_input("image_bytes", encoded, binary_in),
    ):
        result = triton(servers["main"]).infer(MODEL, [tensor], request_id="r1", outputs=outputs)
        answer = result.get_response()
        assert (answer["model_version"], answer["id"]) == ("1", "r1")
        (output,) = answer["outputs"]
        # No outputs named: tritonclient asks for all as binary data, as Triton answers.
        assert ("data" in output) == (binary_out is False), output
        probabilities = result.as_numpy(OUTPUT)
        assert probabilities.dtype == np.float32 and probabilities.shape == (N, 10)
        np.testing.assert_allclose(probabilities, expected, atol=1e-5)


def test_triton_requests_the_server_refuses_say_why(servers, images) -> None:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = triton(servers["main"])
    tensor = triton_input("pixels", images[0], True)
    with pytest.raises(InferenceServerException) as info:
        client.infer(MODEL, [triton_input("input_1", images[0], True)])
    assert info.value.status() == "400" and info.value.message().endswith(v2.V2_HINT)
    with pytest.raises(InferenceServerException) as info:
        client.infer(MODEL, [tensor], outputs=[httpclient.InferRequestedOutput("logits")])
    assert info.value.status() == "400"
    assert "asks for outputs ['logits']" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.infer(MODEL, [triton_input("pixels", images[0] * 255, True)])
    assert info.value.status() == "400" and "divide them by 255" in info.value.message()


def kserve_client() -> Any:
    serve.load_kserve()  # KServe reads sys.argv when first imported
    from kserve import InferenceRESTClient, RESTConfig

    return InferenceRESTClient(RESTConfig(protocol="v2", timeout=30))


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "JSON"])
def test_kserve_rest_client_readiness_and_infer(servers, images, expected, binary) -> None:
    from kserve import InferInput, InferRequest

    url = servers["main"].url
    tensor = InferInput("pixels", list(images[0].shape), "FP32")
    tensor.set_data_from_numpy(images[0], binary_data=binary)
    request = InferRequest(MODEL, [tensor], request_id="k1")

    async def ask() -> tuple[bool, Any]:
        client = kserve_client()
        try:
            return await client.is_server_ready(url), await client.infer(url, request, MODEL)
        finally:
            await client.close()

    ready, response = asyncio.run(ask())
    assert ready is True
    # (Its InferResponse.from_bytes drops the answer's model_version; tritonclient reads it.)
    assert response.id == "k1"
    np.testing.assert_allclose(response.outputs[0].as_numpy(), expected, atol=1e-5)


def test_kserve_rest_client_sees_a_server_without_a_version_as_not_ready(servers) -> None:
    import httpx

    async def ask() -> bool:
        client = kserve_client()
        try:
            return await client.is_server_ready(servers["empty"].url)
        finally:
            await client.close()

    with pytest.raises(httpx.HTTPStatusError, match="503") as info:
        asyncio.run(ask())
    assert "No version loaded yet" in str(info.value)
