"""What the V1 and V2 protocols share: the request limits, the validated request both
produce (:class:`ParsedRequest`), and the checks of one instance (an encoded image or a
pixel array). No kserve, no TensorFlow.

Encoded images are checked from their header alone (``ml/server/image_header.py``: nothing
is decoded), so a small file claiming a huge size costs nothing.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from ml.model.architectures import INPUT_SHAPE
from ml.model.export import BYTES_INPUT, DEFAULT_SIGNATURE, PIXELS_INPUT, PIXELS_SIGNATURE
from ml.server.client_error import ClientError
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
#: ``channels=1`` (ml/data/preprocess.py) rejects GIF, BMP and WebP, so those are refused up
#: front with a clear message instead of a TensorFlow error.
DECODABLE_FORMATS = ("png", "jpeg")

_IMAGE_SIDE = INPUT_SHAPE[0]
_PIXEL_SHAPES = ((_IMAGE_SIDE, _IMAGE_SIDE), tuple(INPUT_SHAPE))


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
    #: V2 only: answer the outputs as binary data (KServe's ``InferRequest.use_binary_outputs``).
    binary_outputs: bool = False
    #: V2 only: the outputs asked for by name (``RequestedOutput``s), None when none were.
    requested_outputs: Any = None


# --------------------------------------------------------------------------- encoded images


def b64_payload(item: dict, i: int) -> bytes:
    """The bytes of ``{"b64": ...}`` or ``{"image_bytes": {"b64": ...}}`` (instance ``i``).

    Raises:
        ClientError: not that shape, or not base64 (standard or URL-safe, line-wrapped ok).
    """
    value = item.get(BYTES_INPUT, item)
    if not (isinstance(value, dict) and set(value) == {"b64"}):
        raise ClientError(
            400,
            f'instance {i}: "{BYTES_INPUT}" must be {{"b64": "<base64>"}}, got {json_type(value)}',
        )
    text = value["b64"]
    if not isinstance(text, str):
        raise ClientError(400, f'instance {i}: "b64" must be a string, got {json_type(text)}')
    # Accept line-wrapped output (the base64 tool) and the URL-safe alphabet.
    text = "".join(text.split()).replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ClientError(
            400,
            f'instance {i}: "b64" is not valid base64 ({e}); encode the raw PNG or JPEG '
            "file bytes with standard base64",
        ) from e


def check_image(data: bytes, i: int, max_image_pixels: int) -> bytes:
    """Check encoded image bytes from their header alone; return them unchanged.

    Raises:
        ClientError: empty, not PNG/JPEG, corrupt header, or more than ``max_image_pixels``
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
        raise ClientError(
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
        raise ClientError(400, f"instance {i}: the image is empty (0 bytes)")
    try:
        fmt, width, height = image_size(data)
    except ImageHeaderError as e:
        raise ClientError(
            400, f"instance {i}: {e}; send the PNG or JPEG file's bytes, base64-encoded"
        ) from e
    if fmt not in DECODABLE_FORMATS:
        raise ClientError(
            400,
            f"instance {i}: {fmt.upper()} images are not supported by this model; "
            "convert the image to PNG or JPEG",
        )
    if width * height > max_image_pixels:
        raise ClientError(
            413,
            f"instance {i}: the image is {width}x{height} ({width * height:,} pixels), more "
            f"than this server's limit of {max_image_pixels:,} pixels (--max-image-pixels); "
            f"downscale it (the model sees {_IMAGE_SIDE}x{_IMAGE_SIDE}) before sending",
        )
    return width * height


# --------------------------------------------------------------------------- pixel arrays


def check_pixels(value: Any, i: int) -> np.ndarray:
    """One pixel instance, ``[28][28]`` or ``[28][28][1]`` in [0, 1] -> float32 [28, 28, 1].

    Raises:
        ClientError: not an array of numbers, wrong shape, non-finite or out-of-range values.
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
        raise ClientError(400, f"instance {i} has shape {shape}; {_PIXELS_EXPECTED}{hint}")
    array = array.astype(np.float64)  # range checks before the float32 cast can overflow
    if not np.isfinite(array).all():
        raise ClientError(400, f"instance {i} contains NaN or infinite pixel values")
    low, high = float(array.min()), float(array.max())
    if low < 0.0 or high > 1.0:
        raise ClientError(
            400,
            f"instance {i}: pixel values must be in [0, 1], found values from {low:g} to "
            f"{high:g}; if these are 0-255 pixel values, divide them by 255",
        )
    return array.astype(np.float32).reshape(INPUT_SHAPE)


_PIXELS_EXPECTED = "expected a [28][28] or [28][28][1] array of pixel values in [0, 1]"


def _numeric_array(value: Any, i: int) -> np.ndarray:
    """``value`` as a numpy array of numbers (any shape)."""
    if not isinstance(value, (list, np.ndarray)):
        raise ClientError(400, f"instance {i} is {json_type(value)}; {_PIXELS_EXPECTED}")
    try:
        array = np.asarray(value)
    except ValueError as e:  # ragged, or nested deeper than numpy's 64 dimensions
        raise ClientError(
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
        raise ClientError(400, f"instance {i} contains {what}; pixel values must be numbers")
    return array


# --------------------------------------------------------------------------- counts and types


def check_count(n: int, max_instances: int) -> None:
    """413 when a request has more than ``max_instances`` instances."""
    if n > max_instances:
        raise ClientError(
            413,
            f"the request has {n} instances, more than this server's limit of {max_instances} "
            "(--max-instances); split it into smaller requests",
        )


def json_type(value: Any) -> str:
    """What a decoded JSON value is, as an error message names it ("a list", "null")."""
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
