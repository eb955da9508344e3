"""The V2 inference protocol, pure: a KServe ``InferRequest`` in, a validated batch out, and
the model metadata of the served signatures. No kserve import (the request is read through
its ``inputs``, ``id``, ``request_outputs``, ``use_binary_outputs`` and each input's
``as_numpy()``), no TensorFlow. Bodies are decoded into an ``InferRequest`` by
``ml/server/routes.py``; the V2 answer is built by ``ml/server/kserve_adapter.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ml.model.export import BYTES_INPUT, DEFAULT_SIGNATURE, OUTPUT, PIXELS_INPUT, PIXELS_SIGNATURE
from ml.server.client_error import ClientError
from ml.server.instances import (
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MAX_INSTANCES,
    DEFAULT_MAX_REQUEST_PIXELS,
    ParsedRequest,
    b64_payload,
    check_count,
    check_images,
    check_pixels,
    json_type,
)

#: What a V2 inference request holds (REST ``/v2/models/<name>/infer``).
V2_HINT = (
    f'send exactly one input: "{BYTES_INPUT}" (BYTES, one encoded PNG/JPEG per element) or '
    f'"{PIXELS_INPUT}" (FP32, shape [N, 28, 28, 1], values in [0, 1]), e.g. {{"inputs": '
    f'[{{"name": "{PIXELS_INPUT}", "datatype": "FP32", "shape": [1, 28, 28, 1], "data": '
    "[784 floats]}]}"
)


def parse_v2_request(
    request: Any,
    *,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS,
) -> ParsedRequest:
    """A KServe V2 ``InferRequest`` (REST ``/v2/models/<name>/infer``): one input named
    ``image_bytes`` (BYTES, raw image bytes) or ``pixels`` (FP32 ``[N,28,28(,1)]``)."""
    if len(request.inputs) != 1:
        raise ClientError(400, f"the request has {len(request.inputs)} inputs; {V2_HINT}")
    (tensor,) = request.inputs
    try:
        array = tensor.as_numpy()
    except Exception as e:  # kserve raises several types for malformed tensors
        raise ClientError(400, f"input {tensor.name!r} cannot be read ({e}); {V2_HINT}") from e
    answer = {
        "request_id": request.id or "",
        "binary_outputs": bool(request.use_binary_outputs),
        "requested_outputs": _requested_outputs(request.request_outputs),
    }
    if tensor.name == BYTES_INPUT and tensor.datatype == "BYTES":
        items = list(array.reshape(-1))
        if not items:
            raise ClientError(400, f"input {tensor.name!r} is empty; {V2_HINT}")
        check_count(len(items), max_instances)
        payloads = (_v2_image_bytes(item, i) for i, item in enumerate(items))
        images, total = check_images(payloads, max_image_pixels, max_request_pixels)
        return ParsedRequest(DEFAULT_SIGNATURE, images, "v2", pixels=total, **answer)
    if tensor.name == PIXELS_INPUT and tensor.datatype in ("FP32", "FP64"):
        if array.ndim not in (3, 4) or len(array) == 0:
            raise ClientError(
                400, f"input {tensor.name!r} has shape {list(array.shape)}; {V2_HINT}"
            )
        check_count(len(array), max_instances)
        pixels = np.stack([check_pixels(item, i) for i, item in enumerate(array)])
        return ParsedRequest(PIXELS_SIGNATURE, pixels, "v2", pixels=pixels.size, **answer)
    raise ClientError(400, f"unexpected input {tensor.name!r} ({tensor.datatype}); {V2_HINT}")


def _v2_image_bytes(item: Any, i: int) -> bytes:
    """One element of a V2 BYTES input: bytes (the binary data extension) or base64 text
    (JSON, which carries BYTES as text). Anything else is refused, never passed to
    ``bytes()``, which would make a number N into N zero bytes."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return b64_payload({"b64": item}, i)
    raise ClientError(
        400,
        f"instance {i} of {BYTES_INPUT!r} is {json_type(item)}; send each image as a "
        "base64 string of its PNG or JPEG bytes",
    )


def _requested_outputs(requested: Any) -> Any:
    """The request's ``outputs`` (each may ask for binary data), when each names the one
    output; None when it names none."""
    if not requested:
        return None
    names = [output.name for output in requested]
    if set(names) != {OUTPUT} or len(names) != 1:
        raise ClientError(
            400,
            f"the request asks for outputs {names}; this model has one output, {OUTPUT!r} "
            '(FP32, shape [N, 10]): ask for it alone, or leave "outputs" out',
        )
    return requested


#: TensorFlow dtype names and the V2 protocol's datatypes.
_DATATYPES = {
    "string": "BYTES", "bool": "BOOL", "float16": "FP16", "bfloat16": "BF16",
    "float32": "FP32", "float64": "FP64",
    **{f"{k}{n}": f"{k.upper()}{n}" for k in ("int", "uint") for n in (8, 16, 32, 64)},
}  # fmt: skip


def signature_metadata(signatures: Mapping[str, Any]) -> tuple[list[dict], list[dict]]:
    """The V2 model metadata ``inputs`` and ``outputs`` of a SavedModel's signatures (their
    TensorSpecs): name, datatype and shape (-1: any size), each name once, in signature order.
    A request sends one of the inputs (:data:`V2_HINT`)."""
    inputs: dict[str, dict] = {}
    outputs: dict[str, dict] = {}
    for fn in signatures.values():
        for name, spec in fn.structured_input_signature[1].items():
            inputs.setdefault(name, _tensor(name, spec))
        for name, spec in fn.structured_outputs.items():
            outputs.setdefault(name, _tensor(name, spec))
    return list(inputs.values()), list(outputs.values())


def _tensor(name: str, spec: Any) -> dict:
    dtype = spec.dtype.name
    return {
        "name": name,
        "datatype": _DATATYPES.get(dtype, dtype.upper()),
        "shape": [-1 if size is None else size for size in spec.shape.as_list()],
    }
