"""The server's request protocol, pure: V1 REST bodies (and V2 infer requests) in, a
validated batch out; the V1 answer format. No kserve, no TensorFlow.

Request forms (TF Serving's REST forms for the two signatures in ``ml/export.py``)::

    {"instances": [{"b64": "<base64 PNG/JPEG>"}, ...]}                 row form, bytes
    {"instances": [{"image_bytes": {"b64": "..."}}, ...]}              row form, named input
    {"instances": [[[0.0, ...28], ...28], ...]}                        [28][28] or [28][28][1]
    {"inputs": [...same items...]}  or  {"inputs": {"pixels": [...]}}  columnar form
    optional: "signature_name": "serving_default" | "serving_pixels" (else inferred),
              "return_class_names": true

Encoded images are checked from their header alone (Pillow reads the header, nothing is
decoded), so a small file claiming a huge size costs nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ml.data import CLASS_NAMES
from ml.export import BYTES_INPUT, DEFAULT_SIGNATURE, PIXELS_INPUT, PIXELS_SIGNATURE
from ml.models import INPUT_SHAPE
from ml.server.image_header import ImageHeaderError, image_size

DEFAULT_MAX_INSTANCES = 256
DEFAULT_MAX_IMAGE_PIXELS = 4096 * 4096
#: Decoded pixels of all of one request's images: e.g. 32 photos of 2 megapixels (1920x1080).
DEFAULT_MAX_REQUEST_PIXELS = 64 * 1024 * 1024

#: signature name -> its one input name (the export contract).
SIGNATURE_INPUTS: Mapping[str, str] = {
    DEFAULT_SIGNATURE: BYTES_INPUT,
    PIXELS_SIGNATURE: PIXELS_INPUT,
}
#: Image formats the ``serving_default`` signature decodes. TF's ``decode_image`` with
#: ``channels=1`` (ml/preprocess.py) rejects GIF, BMP and WebP, so those are refused up
#: front with a clear message instead of a TensorFlow error.
DECODABLE_FORMATS = ("png", "jpeg")
#: What to send instead of a malformed body (also used for kserve's own JSON errors).
HINT = (
    'Send a JSON object such as {"instances": [{"b64": "<base64 PNG or JPEG>"}]} or '
    '{"instances": [<28x28 array of floats in [0, 1]>]}.'
)

#: What a V2 inference request holds (REST ``/v2/models/<name>/infer``).
V2_HINT = (
    f'send exactly one input: "{BYTES_INPUT}" (BYTES, one encoded PNG/JPEG per element) or '
    f'"{PIXELS_INPUT}" (FP32, shape [N, 28, 28, 1], values in [0, 1]), e.g. {{"inputs": '
    f'[{{"name": "{PIXELS_INPUT}", "datatype": "FP32", "shape": [1, 28, 28, 1], "data": '
    "[784 floats]}]}"
)

_TOP_LEVEL_KEYS = ("instances", "inputs", "signature_name", "return_class_names")
_IMAGE_SIDE = INPUT_SHAPE[0]
_PIXEL_SHAPES = ((_IMAGE_SIDE, _IMAGE_SIDE), tuple(INPUT_SHAPE))


class RequestError(Exception):
    """A client mistake: ``status`` is the HTTP status (4xx), ``message`` says how to fix it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ParsedRequest(NamedTuple):
    """A validated request, ready for a signature call."""

    signature_name: str
    #: ``list[bytes]`` (encoded images) or ``float32 [N, 28, 28, 1]`` in [0, 1].
    inputs: Any
    #: "row" ({"instances"}), "columnar" ({"inputs"}) or "v2" (KServe V2 InferRequest).
    form: str = "row"
    return_class_names: bool = False
    #: V2 only: the request's id, echoed in the response.
    request_id: str = ""
    #: Decoded pixels of all the images (from their headers): the request's decoding cost.
    pixels: int = 0


# --------------------------------------------------------------------------- image headers


def check_image(data: bytes, i: int, max_image_pixels: int) -> bytes:
    """Check encoded image bytes from their header alone; return them unchanged.

    Raises:
        RequestError: empty, not PNG/JPEG, corrupt header, or more than ``max_image_pixels``
            pixels (413) -- all before any decoding.
    """
    _header_pixels(data, i, max_image_pixels)
    return data


def check_images(
    images: Iterable[bytes], max_image_pixels: int, max_request_pixels: int
) -> tuple[list, int]:
    """:func:`check_image` each image, then their total pixel count (413 over
    ``max_request_pixels``): the whole request's decoding cost, bounded before any decoding.
    Returns (the images, their total pixel count)."""
    checked, total = [], 0
    for i, data in enumerate(images):
        total += _header_pixels(data, i, max_image_pixels)
        checked.append(data)
    if total > max_request_pixels:
        raise RequestError(
            413,
            f"the request's {len(checked)} images total {total:,} pixels, more than this "
            f"server's limit of {max_request_pixels:,} pixels per request "
            "(--max-request-pixels); send fewer images per request, or downscale them "
            f"(the model sees {_IMAGE_SIDE}x{_IMAGE_SIDE})",
        )
    return checked, total


def _header_pixels(data: bytes, i: int, max_image_pixels: int) -> int:
    """The pixel count from ``data``'s header, checked as :func:`check_image` says."""
    if not data:
        raise RequestError(400, f"instance {i}: the image is empty (0 bytes)")
    try:
        fmt, width, height = image_size(data)
    except ImageHeaderError as e:
        raise RequestError(
            400, f"instance {i}: {e}; send the PNG or JPEG file's bytes, base64-encoded"
        ) from e
    if fmt not in DECODABLE_FORMATS:
        raise RequestError(
            400,
            f"instance {i}: {fmt.upper()} images are not supported by this model; "
            "convert the image to PNG or JPEG",
        )
    if width * height > max_image_pixels:
        raise RequestError(
            413,
            f"instance {i}: the image is {width}x{height} ({width * height:,} pixels), more "
            f"than this server's limit of {max_image_pixels:,} pixels (--max-image-pixels); "
            f"downscale it (the model sees {_IMAGE_SIDE}x{_IMAGE_SIDE}) before sending",
        )
    return width * height


# --------------------------------------------------------------------------- V1 bodies


def parse_request(
    body: Any,
    *,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS,
) -> ParsedRequest:
    """Validate a V1 REST request body (a decoded JSON object, or its raw bytes/str).

    Raises:
        RequestError: any client mistake (status 400, or 413 for "too large"), with a
            message that says what is wrong and how to fix it.
    """
    body = _json_object(body)
    return_class_names, signature_name = _options(body)
    form, items, field = _batch(body)
    if not items:
        raise RequestError(400, f"{field} is an empty list; send at least one image")
    kinds = [_instance_kind(item, i) for i, item in enumerate(items)]
    signature_name = _resolve_signature(signature_name, kinds)
    # Malformed instances are reported before "too many": the body limit already bounds
    # this work, and "wrap the image in a list" is the better answer to a 28-row image.
    if signature_name == DEFAULT_SIGNATURE:
        payloads = (_b64_payload(item, i) for i, item in enumerate(items))
        inputs, pixels = check_images(payloads, max_image_pixels, max_request_pixels)
    else:
        inputs = np.stack([check_pixels(_pixel_payload(item), i) for i, item in enumerate(items)])
        pixels = inputs.size
    _check_count(len(items), max_instances)
    return ParsedRequest(signature_name, inputs, form, return_class_names, pixels=pixels)


def _json_object(body: Any) -> dict:
    """The body as a JSON object with only known top-level keys."""
    if isinstance(body, (bytes, bytearray, str)):
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(400, f"the request body is not valid JSON ({e}). {HINT}") from e
        except RecursionError as e:  # not a ValueError: json.loads recurses per nesting level
            raise RequestError(
                400,
                "the request body nests JSON arrays or objects too deeply to be read (an "
                f"image is 2 or 3 levels deep inside its list). {HINT}",
            ) from e
    if not isinstance(body, dict):
        raise RequestError(
            400, f"the request body must be a JSON object, got {_json_type(body)}. {HINT}"
        )
    unknown = sorted(set(body) - set(_TOP_LEVEL_KEYS))
    if unknown:
        raise RequestError(
            400,
            f"unknown field(s) {', '.join(map(repr, unknown))} in the request; "
            f"allowed: {', '.join(_TOP_LEVEL_KEYS)}",
        )
    if "instances" in body and "inputs" in body:
        raise RequestError(
            400, 'send either "instances" (row form) or "inputs" (columnar form), not both'
        )
    return body


def _options(body: dict) -> tuple[bool, str | None]:
    """``return_class_names`` and the requested ``signature_name`` (None: infer it)."""
    return_class_names = body.get("return_class_names", False)
    if not isinstance(return_class_names, bool):
        raise RequestError(
            400,
            f'"return_class_names" must be true or false, got {_json_type(return_class_names)}',
        )
    signature_name = body.get("signature_name")
    if signature_name is not None and (
        not isinstance(signature_name, str) or signature_name not in SIGNATURE_INPUTS
    ):
        raise RequestError(
            400,
            f"unknown signature_name {json.dumps(signature_name)}; valid: "
            f"{', '.join(SIGNATURE_INPUTS)} (or leave it out to infer it from the instances)",
        )
    return return_class_names, signature_name


def _batch(body: dict) -> tuple[str, list, str]:
    """(form, the list of instances, how the request names that list)."""
    if "instances" in body:
        items = body["instances"]
        if not isinstance(items, list):
            raise RequestError(
                400, f'"instances" must be a list (one item per image), got {_json_type(items)}'
            )
        return "row", items, '"instances"'
    if "inputs" in body:
        items, named, field = _columnar_items(body["inputs"])
        if named is not None:
            items = [{named: item} for item in items]
        return "columnar", items, field
    raise RequestError(400, f'the request has no "instances" or "inputs". {HINT}')


def _columnar_items(inputs: Any) -> tuple[list, str | None, str]:
    """The batch list of a columnar ``inputs`` value, and the input name it was under."""
    if isinstance(inputs, list):
        return inputs, None, '"inputs"'
    if isinstance(inputs, dict) and len(inputs) == 1:
        ((name, value),) = inputs.items()
        if name in SIGNATURE_INPUTS.values():
            if not isinstance(value, list):
                raise RequestError(
                    400,
                    f'"inputs"."{name}" must be a list (the batch: one item per image), '
                    f"got {_json_type(value)}",
                )
            return value, name, f'"inputs"."{name}"'
    raise RequestError(
        400,
        '"inputs" must be a list (one item per image) or an object with one key, '
        f'"{BYTES_INPUT}" or "{PIXELS_INPUT}", holding that list; got {_json_type(inputs)}'
        + (f" with keys {', '.join(map(repr, inputs))}" if isinstance(inputs, dict) else ""),
    )


def _instance_kind(item: Any, i: int) -> str:
    """The signature an instance belongs to, from its type alone."""
    if isinstance(item, dict):
        if set(item) == {"b64"} or set(item) == {BYTES_INPUT}:
            return DEFAULT_SIGNATURE
        if set(item) == {PIXELS_INPUT}:
            return PIXELS_SIGNATURE
        raise RequestError(
            400,
            f"instance {i} is an object with keys {', '.join(map(repr, item)) or '(none)'}; "
            f'expected {{"b64": "..."}}, {{"{BYTES_INPUT}": {{"b64": "..."}}}} or '
            f'{{"{PIXELS_INPUT}": [28][28] array}}',
        )
    if isinstance(item, list):
        return PIXELS_SIGNATURE
    if isinstance(item, str):
        raise RequestError(
            400,
            f'instance {i} is a bare string; send image bytes as {{"b64": "<base64>"}} '
            "(TF Serving's form for binary data)",
        )
    raise RequestError(
        400,
        f'instance {i} is {_json_type(item)}; expected {{"b64": "..."}} image bytes or '
        "a [28][28] / [28][28][1] array of pixel values in [0, 1]",
    )


def _resolve_signature(requested: str | None, kinds: Sequence[str]) -> str:
    found = sorted(set(kinds))
    if len(found) > 1:
        first_pixels = kinds.index(PIXELS_SIGNATURE)
        first_bytes = kinds.index(DEFAULT_SIGNATURE)
        raise RequestError(
            400,
            f"the request mixes image bytes (e.g. instance {first_bytes}) and pixel arrays "
            f"(e.g. instance {first_pixels}); send one kind per request",
        )
    (kind,) = found
    if requested is not None and requested != kind:
        what = "image bytes" if kind == DEFAULT_SIGNATURE else "pixel arrays"
        takes = "base64 image bytes" if requested == DEFAULT_SIGNATURE else "pixel arrays"
        raise RequestError(
            400,
            f"signature_name {requested!r} takes {takes}, but the instances are {what}; "
            f"use {kind!r} or leave signature_name out",
        )
    return kind


def _b64_payload(item: dict, i: int) -> bytes:
    value = item.get(BYTES_INPUT, item)
    if not (isinstance(value, dict) and set(value) == {"b64"}):
        raise RequestError(
            400,
            f'instance {i}: "{BYTES_INPUT}" must be {{"b64": "<base64>"}}, got {_json_type(value)}',
        )
    text = value["b64"]
    if not isinstance(text, str):
        raise RequestError(400, f'instance {i}: "b64" must be a string, got {_json_type(text)}')
    # Accept line-wrapped output (the base64 tool) and the URL-safe alphabet.
    text = "".join(text.split()).replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise RequestError(
            400,
            f'instance {i}: "b64" is not valid base64 ({e}); encode the raw PNG or JPEG '
            "file bytes with standard base64",
        ) from e


def _pixel_payload(item: Any) -> Any:
    return item[PIXELS_INPUT] if isinstance(item, dict) else item


def check_pixels(value: Any, i: int) -> np.ndarray:
    """One pixel instance, ``[28][28]`` or ``[28][28][1]`` in [0, 1] -> float32 [28, 28, 1].

    Raises:
        RequestError: not an array of numbers, wrong shape, non-finite or out-of-range values.
    """
    array = _numeric_array(value, i)
    if array.shape not in _PIXEL_SHAPES:
        shape = "".join(f"[{d}]" for d in array.shape) or "a single number"
        hint = ""
        if array.shape == (_IMAGE_SIDE,):
            hint = (
                " (this looks like one row of an image: a batch is a list of images, so "
                "wrap the image in another list)"
            )
        raise RequestError(400, f"instance {i} has shape {shape}; {_PIXELS_EXPECTED}{hint}")
    array = array.astype(np.float64)  # range checks before the float32 cast can overflow
    if not np.isfinite(array).all():
        raise RequestError(400, f"instance {i} contains NaN or infinite pixel values")
    low, high = float(array.min()), float(array.max())
    if low < 0.0 or high > 1.0:
        raise RequestError(
            400,
            f"instance {i}: pixel values must be in [0, 1], found values from {low:g} to "
            f"{high:g}; if these are 0-255 pixel values, divide them by 255",
        )
    return array.astype(np.float32).reshape(INPUT_SHAPE)


_PIXELS_EXPECTED = "expected a [28][28] or [28][28][1] array of pixel values in [0, 1]"


def _numeric_array(value: Any, i: int) -> np.ndarray:
    """``value`` as a numpy array of numbers (any shape)."""
    if not isinstance(value, (list, np.ndarray)):
        raise RequestError(400, f"instance {i} is {_json_type(value)}; {_PIXELS_EXPECTED}")
    try:
        array = np.asarray(value)
    except ValueError as e:  # ragged, or nested deeper than numpy's 64 dimensions
        raise RequestError(
            400,
            f"instance {i} is a ragged array (rows of different lengths) or nested too deeply; "
            f"{_PIXELS_EXPECTED}",
        ) from e
    if array.dtype.kind not in "iuf":
        what = {
            "b": "true/false",
            "U": "strings",
            "O": "values that are not plain numbers (null, objects or huge integers)",
        }.get(array.dtype.kind, f"values of type {array.dtype}")
        raise RequestError(400, f"instance {i} contains {what}; pixel values must be numbers")
    return array


def _check_count(n: int, max_instances: int) -> None:
    if n > max_instances:
        raise RequestError(
            413,
            f"the request has {n} instances, more than this server's limit of {max_instances} "
            "(--max-instances); split it into smaller requests",
        )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def format_response(
    probabilities: np.ndarray,
    version: int,
    *,
    form: str = "row",
    return_class_names: bool = False,
) -> dict[str, Any]:
    """The V1 answer: predictions (row form) or outputs (columnar), version, class names."""
    key = "outputs" if form == "columnar" else "predictions"
    response: dict[str, Any] = {key: probabilities.tolist(), "model_version": version}
    if return_class_names:
        response["class_names"] = [CLASS_NAMES[k] for k in probabilities.argmax(axis=1)]
    return response


# --------------------------------------------------------------------------- V2 requests


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
        raise RequestError(400, f"the request has {len(request.inputs)} inputs; {V2_HINT}")
    (tensor,) = request.inputs
    try:
        array = tensor.as_numpy()
    except Exception as e:  # kserve raises several types for malformed tensors
        raise RequestError(400, f"input {tensor.name!r} cannot be read ({e}); {V2_HINT}") from e
    request_id = request.id or ""
    if tensor.name == BYTES_INPUT and tensor.datatype == "BYTES":
        items = list(array.reshape(-1))
        if not items:
            raise RequestError(400, f"input {tensor.name!r} is empty; {V2_HINT}")
        _check_count(len(items), max_instances)
        payloads = (_v2_image_bytes(item, i) for i, item in enumerate(items))
        images, total = check_images(payloads, max_image_pixels, max_request_pixels)
        return ParsedRequest(DEFAULT_SIGNATURE, images, "v2", request_id=request_id, pixels=total)
    if tensor.name == PIXELS_INPUT and tensor.datatype in ("FP32", "FP64"):
        if array.ndim not in (3, 4) or len(array) == 0:
            raise RequestError(
                400, f"input {tensor.name!r} has shape {list(array.shape)}; {V2_HINT}"
            )
        _check_count(len(array), max_instances)
        pixels = np.stack([check_pixels(item, i) for i, item in enumerate(array)])
        return ParsedRequest(
            PIXELS_SIGNATURE, pixels, "v2", request_id=request_id, pixels=pixels.size
        )
    raise RequestError(400, f"unexpected input {tensor.name!r} ({tensor.datatype}); {V2_HINT}")


def _v2_image_bytes(item: Any, i: int) -> bytes:
    """One element of a V2 BYTES input: bytes (the binary data extension) or base64 text
    (JSON, which carries BYTES as text). Anything else is refused, never passed to
    ``bytes()``, which would make a number N into N zero bytes."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return _b64_payload({"b64": item}, i)
    raise RequestError(
        400,
        f"instance {i} of {BYTES_INPUT!r} is {_json_type(item)}; send each image as a "
        "base64 string of its PNG or JPEG bytes",
    )
