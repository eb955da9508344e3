"""Serve the newest published model version over KServe's V1 REST protocol.

    python -m ml.serve --model-dir V/serving/S --model-name S [--host 127.0.0.1]
        [--http-port 8080] [--grpc-port N] [--poll-interval 2.0] [--max-instances 256]
        [--max-body-bytes 8388608] [--max-image-pixels 4096x4096]

``POST /v1/models/<name>:predict`` answers predictions; ``GET /v1/models/<name>`` is the
readiness probe (200 once a version is loaded, 503 before). The server polls ``--model-dir``
every ``--poll-interval`` seconds and serves the newest integer version directory (TF
Serving's rule; hidden directories are publishes in progress and are ignored). A new version
is loaded and warmed up completely before one reference assignment swaps it in, so no
request fails or sees half a model; a version that fails to load is logged and skipped.

Request forms (TF Serving's REST forms for the two signatures in ``ml/export.py``)::

    {"instances": [{"b64": "<base64 PNG/JPEG>"}, ...]}                 row form, bytes
    {"instances": [{"image_bytes": {"b64": "..."}}, ...]}              row form, named input
    {"instances": [[[0.0, ...28], ...28], ...]}                        [28][28] or [28][28][1]
    {"inputs": [...same items...]}  or  {"inputs": {"pixels": [...]}}  columnar form
    optional: "signature_name": "serving_default" | "serving_pixels" (else inferred),
              "return_class_names": true

Answers ``{"predictions": [[10 probabilities], ...], "model_version": N}`` (row form) or
``{"outputs": ..., "model_version": N}`` (columnar form, as TF Serving does), plus
``"class_names"`` when asked. Client mistakes get a 4xx with ``{"error": "..."}`` saying
what is wrong and how to fix it.

Every socket binds ``--host``: KServe 0.21's ModelServer hard-codes the HTTP host to
0.0.0.0 and gRPC to [::]:8081, so this module runs KServe's own REST/gRPC servers through
small subclasses that take the host, and starts gRPC (KServe's V2 protocol) only when
``--grpc-port`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import logging
import math
import os
import re
import struct
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ml.data import CLASS_NAMES
from ml.export import (
    BYTES_INPUT,
    DEFAULT_SIGNATURE,
    OUTPUT,
    PIXELS_INPUT,
    PIXELS_SIGNATURE,
)
from ml.models import INPUT_SHAPE, NUM_CLASSES
from ml.select import serving_versions

log = logging.getLogger("ml.serve")  # not __name__: that is "__main__" under -m

DEFAULT_MODEL_NAME = "tf-mnist"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8080
DEFAULT_POLL_INTERVAL = 2.0
DEFAULT_MAX_INSTANCES = 256
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_IMAGE_PIXELS = 4096 * 4096

#: signature name -> its one input name (the export contract).
SIGNATURE_INPUTS: Mapping[str, str] = {
    DEFAULT_SIGNATURE: BYTES_INPUT,
    PIXELS_SIGNATURE: PIXELS_INPUT,
}
#: Image formats the ``serving_default`` signature decodes. TF's ``decode_image`` with
#: ``channels=1`` (ml/preprocess.py) rejects GIF, BMP and WebP, so those are refused up
#: front with a clear message instead of a TensorFlow error.
DECODABLE_FORMATS = ("png", "jpeg")

_TOP_LEVEL_KEYS = ("instances", "inputs", "signature_name", "return_class_names")
_HINT = (
    'Send a JSON object such as {"instances": [{"b64": "<base64 PNG or JPEG>"}]} or '
    '{"instances": [<28x28 array of floats in [0, 1]>]}.'
)
_IMAGE_SIDE = INPUT_SHAPE[0]
_PIXEL_SHAPES = ((_IMAGE_SIDE, _IMAGE_SIDE), tuple(INPUT_SHAPE))


# --------------------------------------------------------------------------- errors


class RequestError(Exception):
    """A client mistake: ``status`` is the HTTP status (4xx), ``message`` says how to fix it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ImageHeaderError(ValueError):
    """Image bytes whose header is unknown, truncated or corrupt."""


# --------------------------------------------------------------------------- image headers

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: JPEG start-of-frame markers carrying the frame size (not DHT 0xC4, JPG 0xC8, DAC 0xCC).
_JPEG_SOF = frozenset(
    {*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC), 0xCD, 0xCE, 0xCF}
)
#: Markers without a length field: TEM and RST0-7 (SOI is consumed before the loop).
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def image_size(data: bytes) -> tuple[str, int, int]:
    """``(format, width, height)`` read from the header of PNG, JPEG, GIF or BMP bytes.

    Reads only the header (PNG IHDR, JPEG SOF marker, GIF logical screen, BMP DIB header):
    nothing is decoded, so a small file claiming a huge size costs nothing.

    Raises:
        ImageHeaderError: unknown format, or a header that is truncated or corrupt.
    """
    if data.startswith(_PNG_SIGNATURE):
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise ImageHeaderError("PNG data is truncated or corrupt (no IHDR chunk first)")
        width, height = struct.unpack(">II", data[16:24])
        return "png", width, height
    if data.startswith(b"\xff\xd8"):
        return ("jpeg", *_jpeg_size(data))
    if data[:6] in (b"GIF87a", b"GIF89a"):
        if len(data) < 10:
            raise ImageHeaderError("GIF data is truncated (no logical screen descriptor)")
        width, height = struct.unpack("<HH", data[6:10])
        return "gif", width, height
    if data.startswith(b"BM"):
        if len(data) < 22:
            raise ImageHeaderError("BMP data is truncated (no DIB header)")
        (dib_size,) = struct.unpack("<I", data[14:18])
        if dib_size == 12:  # BITMAPCOREHEADER: unsigned 16-bit sizes
            width, height = struct.unpack("<HH", data[18:22])
        elif dib_size >= 40 and len(data) >= 26:  # BITMAPINFOHEADER and later
            width, height = struct.unpack("<ii", data[18:26])
            height = abs(height)  # negative: rows stored top-down
            if width < 0:
                raise ImageHeaderError(f"BMP header has a negative width ({width})")
        else:
            raise ImageHeaderError(f"BMP data is truncated or has an unknown header ({dib_size})")
        return "bmp", width, height
    raise ImageHeaderError(
        f"not a PNG or JPEG image (the data starts with {data[:8].hex(' ') or 'nothing'})"
    )


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the first SOF marker; walks the segment list from byte 2."""
    i, n = 2, len(data)
    while i < n:
        if data[i] != 0xFF:
            raise ImageHeaderError(f"JPEG data is corrupt (no marker at byte {i})")
        while i < n and data[i] == 0xFF:  # fill bytes
            i += 1
        if i >= n:
            break
        marker = data[i]
        i += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0xD9, 0xDA):  # EOI or start of scan before any frame header
            raise ImageHeaderError("JPEG data has no frame header (SOF) before its image data")
        if i + 2 > n:
            break
        (length,) = struct.unpack(">H", data[i : i + 2])
        if length < 2:
            raise ImageHeaderError(f"JPEG data is corrupt (segment length {length})")
        if marker in _JPEG_SOF:
            if i + 7 > n:
                break
            height, width = struct.unpack(">HH", data[i + 3 : i + 7])
            if height == 0:
                raise ImageHeaderError(
                    "JPEG frame header gives height 0 (size set later by a DNL marker), "
                    "which is not supported"
                )
            return width, height
        i += length
    raise ImageHeaderError("JPEG data is truncated (ends before its frame header)")


# --------------------------------------------------------------------------- request parsing


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


def parse_request(
    body: Any,
    *,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
) -> ParsedRequest:
    """Validate a V1 REST request body (a decoded JSON object, or its raw bytes/str).

    Raises:
        RequestError: any client mistake (status 400, or 413 for "too large"), with a
            message that says what is wrong and how to fix it.
    """
    if isinstance(body, (bytes, bytearray, str)):
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(400, f"the request body is not valid JSON ({e}). {_HINT}") from e
    if not isinstance(body, dict):
        raise RequestError(
            400, f"the request body must be a JSON object, got {_json_type(body)}. {_HINT}"
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
    if "instances" in body:
        form, items, field = "row", body["instances"], '"instances"'
        if not isinstance(items, list):
            raise RequestError(
                400, f'"instances" must be a list (one item per image), got {_json_type(items)}'
            )
    elif "inputs" in body:
        form = "columnar"
        items, named, field = _columnar_items(body["inputs"])
        if named is not None:
            items = [{named: item} for item in items]
    else:
        raise RequestError(400, f'the request has no "instances" or "inputs". {_HINT}')

    if not items:
        raise RequestError(400, f"{field} is an empty list; send at least one image")
    kinds = [_instance_kind(item, i) for i, item in enumerate(items)]
    signature_name = _resolve_signature(signature_name, kinds)
    # Malformed instances are reported before "too many": the body limit already bounds
    # this work, and "wrap the image in a list" is the better answer to a 28-row image.
    if signature_name == DEFAULT_SIGNATURE:
        inputs: Any = [
            check_image(_b64_payload(item, i), i, max_image_pixels) for i, item in enumerate(items)
        ]
    else:
        inputs = np.stack([check_pixels(_pixel_payload(item), i) for i, item in enumerate(items)])
    _check_count(len(items), max_instances)
    return ParsedRequest(signature_name, inputs, form, return_class_names)


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


def check_image(data: bytes, i: int, max_image_pixels: int) -> bytes:
    """Check encoded image bytes from their header alone; return them unchanged.

    Raises:
        RequestError: empty, not PNG/JPEG, corrupt header, or more than ``max_image_pixels``
            pixels (413) -- all before any decoding.
    """
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
    if width == 0 or height == 0:
        raise RequestError(400, f"instance {i}: the {fmt.upper()} header gives a {width}x{height}")
    if width * height > max_image_pixels:
        raise RequestError(
            413,
            f"instance {i}: the image is {width}x{height} ({width * height:,} pixels), more "
            f"than this server's limit of {max_image_pixels:,} pixels (--max-image-pixels); "
            f"downscale it (the model sees {_IMAGE_SIDE}x{_IMAGE_SIDE}) before sending",
        )
    return data


def _pixel_payload(item: Any) -> Any:
    return item[PIXELS_INPUT] if isinstance(item, dict) else item


def check_pixels(value: Any, i: int) -> np.ndarray:
    """One pixel instance, ``[28][28]`` or ``[28][28][1]`` in [0, 1] -> float32 [28, 28, 1].

    Raises:
        RequestError: not an array of numbers, wrong shape, non-finite or out-of-range values.
    """
    expected = "expected a [28][28] or [28][28][1] array of pixel values in [0, 1]"
    if not isinstance(value, (list, np.ndarray)):
        raise RequestError(400, f"instance {i} is {_json_type(value)}; {expected}")
    try:
        array = np.asarray(value)
    except ValueError as e:  # ragged nesting
        raise RequestError(
            400, f"instance {i} is a ragged array (rows of different lengths); {expected}"
        ) from e
    if array.dtype.kind not in "iuf":
        what = {
            "b": "true/false",
            "U": "strings",
            "O": "values that are not plain numbers (null, objects or huge integers)",
        }.get(array.dtype.kind, f"values of type {array.dtype}")
        raise RequestError(400, f"instance {i} contains {what}; pixel values must be numbers")
    if array.shape not in _PIXEL_SHAPES:
        shape = "".join(f"[{d}]" for d in array.shape) or "a single number"
        hint = ""
        if array.shape == (_IMAGE_SIDE,):
            hint = (
                " (this looks like one row of an image: a batch is a list of images, so "
                "wrap the image in another list)"
            )
        raise RequestError(400, f"instance {i} has shape {shape}; {expected}{hint}")
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


def parse_v2_request(
    request: Any,
    *,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
) -> ParsedRequest:
    """A KServe V2 ``InferRequest`` (gRPC, or REST ``/v2/.../infer``): one input named
    ``image_bytes`` (BYTES, raw image bytes) or ``pixels`` (FP32 ``[N,28,28(,1)]``)."""
    usage = (
        f'send exactly one input: "{BYTES_INPUT}" (BYTES, one encoded PNG/JPEG per element) or '
        f'"{PIXELS_INPUT}" (FP32, shape [N, 28, 28, 1], values in [0, 1])'
    )
    if len(request.inputs) != 1:
        raise RequestError(400, f"the request has {len(request.inputs)} inputs; {usage}")
    (tensor,) = request.inputs
    try:
        array = tensor.as_numpy()
    except Exception as e:  # kserve raises several types for malformed tensors
        raise RequestError(400, f"input {tensor.name!r} cannot be read ({e}); {usage}") from e
    if tensor.name == BYTES_INPUT and tensor.datatype == "BYTES":
        items = list(array.reshape(-1))
        if not items:
            raise RequestError(400, f"input {tensor.name!r} is empty; {usage}")
        _check_count(len(items), max_instances)
        images = []
        for i, item in enumerate(items):
            if isinstance(item, str):  # REST V2 carries BYTES as text: take it as base64
                item = _b64_payload({"b64": item}, i)
            images.append(check_image(bytes(item), i, max_image_pixels))
        return ParsedRequest(DEFAULT_SIGNATURE, images, "v2", request_id=request.id or "")
    if tensor.name == PIXELS_INPUT and tensor.datatype in ("FP32", "FP64"):
        if array.ndim not in (3, 4) or len(array) == 0:
            raise RequestError(400, f"input {tensor.name!r} has shape {list(array.shape)}; {usage}")
        _check_count(len(array), max_instances)
        pixels = np.stack([check_pixels(item, i) for i, item in enumerate(array)])
        return ParsedRequest(PIXELS_SIGNATURE, pixels, "v2", request_id=request.id or "")
    raise RequestError(400, f"unexpected input {tensor.name!r} ({tensor.datatype}); {usage}")


# --------------------------------------------------------------------------- versions


class LoadedVersion(NamedTuple):
    """One fully loaded, warmed-up version. Immutable: swapping versions swaps the object."""

    version: int
    path: Path
    signatures: Mapping[str, Callable[..., Any]]
    #: The loaded SavedModel object: its variables live as long as it does.
    saved_model: Any


def load_version(version: int, path: Path) -> LoadedVersion:
    """Load a SavedModel, check it has the export contract's signatures, and warm it up.

    Raises:
        Exception: whatever loading raises, or ValueError when the contract is not met.
    """
    import tensorflow as tf

    saved_model = tf.saved_model.load(str(path))
    signatures = {}
    for name, input_name in SIGNATURE_INPUTS.items():
        if name not in saved_model.signatures:
            raise ValueError(
                f"no signature {name!r} (has {', '.join(sorted(saved_model.signatures))}); "
                "export it with ml.export.export_model"
            )
        fn = saved_model.signatures[name]
        inputs = set(fn.structured_input_signature[1])
        if inputs != {input_name}:
            raise ValueError(
                f"signature {name!r} takes {sorted(inputs)}, expected [{input_name!r}]"
            )
        signatures[name] = fn
    # Warm-up: the first call of each signature is slow; pay it before the swap, not in a
    # request. It also proves the outputs have the contract's shape.
    blank = tf.zeros([1, *INPUT_SHAPE], tf.float32)
    warm = {
        PIXELS_SIGNATURE: blank,
        DEFAULT_SIGNATURE: tf.expand_dims(tf.io.encode_png(tf.cast(blank[0], tf.uint8)), 0),
    }
    for name, tensor in warm.items():
        out = signatures[name](**{SIGNATURE_INPUTS[name]: tensor})
        shape = tuple(out[OUTPUT].shape) if OUTPUT in out else None
        if shape != (1, NUM_CLASSES):
            raise ValueError(
                f"signature {name!r} answers {sorted(out)} with shape {shape}, "
                f"expected {OUTPUT!r} [N, {NUM_CLASSES}]"
            )
    return LoadedVersion(version, path, signatures, saved_model)


def _fingerprint(path: Path) -> tuple[int, ...] | None:
    """Changes when a version directory is rewritten, so a failed version is retried then."""
    try:
        stats = [path.stat()]
        pb = path / "saved_model.pb"
        if pb.exists():
            stats.append(pb.stat())
    except OSError:
        return None
    return tuple(v for s in stats for v in (s.st_mtime_ns, s.st_size))


class VersionWatcher:
    """Serves the newest loadable integer version under ``model_dir``; polls for new ones.

    ``current`` is swapped by one reference assignment after the new version is fully
    loaded; readers take ``current`` once per request and use only that object.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        loader: Callable[[int, Path], Any] = load_version,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.current: LoadedVersion | None = None
        self._loader = loader
        self._failed: dict[int, tuple[int, ...] | None] = {}
        self._said_empty = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> bool:
        """Check the directory once; load and switch to a newer version. True if switched."""
        versions = serving_versions(self.model_dir)
        current = self.current
        if not versions:
            if not self._said_empty:
                if current is None:
                    log.warning(
                        "waiting for a model: no version directory in %s yet (expecting "
                        "%s/<integer version>/saved_model.pb); not ready until one loads",
                        self.model_dir,
                        self.model_dir,
                    )
                else:
                    log.warning(
                        "no version directory left in %s; still serving version %d",
                        self.model_dir,
                        current.version,
                    )
                self._said_empty = True
            return False
        self._said_empty = False
        for version in reversed(versions):
            if current is not None and version == current.version:
                return False
            path = self.model_dir / str(version)
            fingerprint = _fingerprint(path)
            if version in self._failed and self._failed[version] == fingerprint:
                continue  # already failed in this state; retried if the directory changes
            log.info("loading version %d from %s", version, path)
            try:
                loaded = self._loader(version, path)
            except Exception as e:  # any failure must leave the serving version in place
                self._failed[version] = fingerprint
                still = (
                    f"still serving version {current.version}"
                    if current is not None
                    else "no version is being served yet"
                )
                log.error(
                    "version %d in %s failed to load and is skipped (%s: %s); %s",
                    version,
                    path,
                    type(e).__name__,
                    str(e).splitlines()[0] if str(e) else "",
                    still,
                )
                continue
            self.current = loaded  # the switch: one reference assignment
            self._failed.pop(version, None)
            was = f" (was version {current.version})" if current is not None else ""
            log.info("serving version %d from %s%s", version, path, was)
            return True
        return False

    def _poll_safely(self) -> None:
        try:
            self.poll()
        except Exception:  # e.g. the directory became unreadable: keep serving, keep polling
            log.exception("polling %s failed; will try again", self.model_dir)

    def start(self, interval: float) -> None:
        """Poll now and then every ``interval`` seconds in a daemon thread."""

        def run() -> None:
            self._poll_safely()
            while not self._stop.wait(interval):
                self._poll_safely()

        self._thread = threading.Thread(target=run, name="model-version-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def predict(self, signature_name: str, inputs: Any) -> tuple[int, np.ndarray]:
        """Run one signature on the version serving now; returns (version, probabilities)."""
        import tensorflow as tf

        current = self.current
        if current is None:
            raise RuntimeError(f"no model version loaded from {self.model_dir} yet")
        dtype = tf.string if signature_name == DEFAULT_SIGNATURE else tf.float32
        tensor = tf.constant(inputs, dtype)
        try:
            out = current.signatures[signature_name](**{SIGNATURE_INPUTS[signature_name]: tensor})
        except tf.errors.InvalidArgumentError as e:
            if signature_name == DEFAULT_SIGNATURE:
                where, detail = _find_undecodable(inputs, e)
                raise RequestError(
                    400,
                    f"{where} could not be decoded ({detail}); send complete, valid PNG or "
                    "JPEG files",
                ) from e
            raise RequestError(400, f"the pixel input was rejected ({_tf_detail(e)})") from e
        return current.version, out[OUTPUT].numpy()


def _tf_detail(error: Any) -> str:
    """The useful line of a TensorFlow error message (not the graph-execution boilerplate)."""
    skip = ("Graph execution error", "Detected at node", "<stack traces", "[[")
    lines = [line.strip() for line in error.message.splitlines()]
    useful = [line for line in lines if line and not line.startswith(skip)]
    detail = useful[-1] if useful else error.message
    detail = re.sub(r"\{\{.*?\}\}|\[Op:[^\]]*\].*$", "", detail)
    return detail.strip() or "TensorFlow gave no reason"


def _find_undecodable(images: Sequence[bytes], error: Any) -> tuple[str, str]:
    """After a batch failed to decode: which instance, and why (error path only).

    Decodes one image at a time with the signature's own decoder (ml.preprocess).
    """
    import tensorflow as tf

    from ml.preprocess import decode_image

    for i, data in enumerate(images):
        try:
            decode_image(tf.constant(data))
        except tf.errors.InvalidArgumentError as e:
            return f"instance {i}", _tf_detail(e)
    return "an image", _tf_detail(error)


# --------------------------------------------------------------------------- body size


class BodyLimitMiddleware:
    """ASGI middleware: 413 for bodies over ``max_bytes``.

    Checked from Content-Length before anything is read, and while reading (chunked
    transfer), so an oversized body is never held in memory.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self, size: str) -> RequestError:
        return RequestError(
            413,
            f"the request body is {size}, more than this server's limit of "
            f"{self.max_bytes:,} bytes (--max-body-bytes); send fewer or smaller images",
        )

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _send_error(send, self._too_large(f"{int(declared):,} bytes"))
            return
        received = 0
        started = False

        async def limited_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise self._too_large(f"over {self.max_bytes:,} bytes (chunked)")
            return message

        async def watched_send(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except RequestError as e:  # raised while reading, outside a handler's reach
            if started:
                raise
            await _send_error(send, e)


async def _send_error(send: Callable, error: RequestError) -> None:
    body = json.dumps({"error": error.message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# --------------------------------------------------------------------------- KServe


def _import_kserve() -> Any:
    """Import kserve with an argv of just the program name.

    ``kserve.model_server`` parses ``sys.argv`` with its own parser at import time; this
    command's flags are not kserve's (ours are passed explicitly instead).
    """
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        import kserve
    finally:
        sys.argv = saved
    return kserve


def _listen_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def build_server(args: argparse.Namespace, watcher: VersionWatcher) -> tuple[Any, Any]:
    """The KServe model and a ModelServer whose every socket binds ``args.host``."""
    kserve = _import_kserve()
    from concurrent import futures

    from fastapi.responses import JSONResponse
    from grpc import StatusCode, aio
    from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING, MAX_GRPC_MESSAGE_LENGTH
    from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
    from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor, LoggingInterceptor
    from kserve.protocol.grpc.server import GRPCServer
    from kserve.protocol.grpc.servicer import InferenceServicer
    from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse
    from kserve.protocol.rest.server import RESTServer

    limits = {"max_instances": args.max_instances, "max_image_pixels": args.max_image_pixels}

    class FashionMnistModel(kserve.Model):
        """The served model: validation in ``preprocess``, the signature call in ``predict``."""

        def __init__(self, name: str) -> None:
            super().__init__(name)
            self.watcher = watcher

        async def healthy(self) -> bool:  # readiness: a version is loaded
            return self.watcher.current is not None

        def not_ready_reason(self) -> str:
            return f"No version loaded yet from {self.watcher.model_dir} (waiting for one)."

        def preprocess(self, payload: Any, headers: Any = None) -> ParsedRequest:
            if isinstance(payload, InferRequest):
                return parse_v2_request(payload, **limits)
            return parse_request(payload, **limits)

        async def predict(self, payload: ParsedRequest, headers: Any = None) -> Any:
            loop = asyncio.get_running_loop()
            version, probabilities = await loop.run_in_executor(
                None, self.watcher.predict, payload.signature_name, payload.inputs
            )
            if payload.form == "v2":
                output = InferOutput(OUTPUT, list(probabilities.shape), "FP32")
                output.set_data_from_numpy(probabilities, binary_data=False)
                return InferResponse(
                    response_id=payload.request_id, model_name=self.name, infer_outputs=[output],
                    model_version=str(version),
                )  # fmt: skip
            return format_response(
                probabilities,
                version,
                form=payload.form,
                return_class_names=payload.return_class_names,
            )

        def stop(self) -> None:
            self.watcher.stop()
            super().stop()

    class BoundRESTServer(RESTServer):
        """KServe's REST server on ``host`` (0.21 hard-codes 0.0.0.0), with a body limit and
        error answers that say how to fix the request."""

        def __init__(self, *a: Any, host: str, max_body_bytes: int, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.config.host = host  # the uvicorn.Config the server binds from
            self.max_body_bytes = max_body_bytes

        def _add_middlewares(self, app: Any) -> None:
            super()._add_middlewares(app)
            app.add_middleware(BodyLimitMiddleware, max_bytes=self.max_body_bytes)

        def _add_exception_handlers(self, app: Any) -> None:
            super()._add_exception_handlers(app)
            registry = self.dataplane.model_registry

            async def request_error(_: Any, exc: RequestError) -> JSONResponse:
                log.info("rejected a request (%d): %s", exc.status, exc.message)
                return JSONResponse(status_code=exc.status, content={"error": exc.message})

            async def invalid_input(_: Any, exc: InvalidInput) -> JSONResponse:
                # kserve raises this when the body is not JSON (Content-Type: application/json)
                log.info("rejected a request (400): %s", exc)
                return JSONResponse(status_code=400, content={"error": f"{exc}. {_HINT}"})

            async def not_found(_: Any, exc: ModelNotFound) -> JSONResponse:
                served = ", ".join(registry.get_models()) or "(none)"
                return JSONResponse(
                    status_code=404,
                    content={"error": f"{exc} This server serves: {served}."},
                )

            async def not_ready(_: Any, exc: ModelNotReady) -> JSONResponse:
                model = registry.get_model(exc.model_name)
                detail = model.not_ready_reason() if hasattr(model, "not_ready_reason") else ""
                return JSONResponse(status_code=503, content={"error": f"{exc} {detail}".strip()})

            app.add_exception_handler(RequestError, request_error)
            app.add_exception_handler(InvalidInput, invalid_input)
            app.add_exception_handler(ModelNotFound, not_found)
            app.add_exception_handler(ModelNotReady, not_ready)

    class RequestErrorToStatus(ExceptionToStatusInterceptor):
        """kserve's exception mapping, plus: client mistakes -> INVALID_ARGUMENT (413 cases:
        RESOURCE_EXHAUSTED) instead of INTERNAL; ModelNotReady -> UNAVAILABLE (kserve 0.21's
        mapping reads a ``reason`` attribute that ModelNotReady lacks)."""

        async def handle_exception(
            self, ex: Exception, request_or_iterator: Any, context: Any, method_name: str
        ) -> None:
            if isinstance(ex, RequestError):
                log.info("rejected a gRPC request (%d): %s", ex.status, ex.message)
                code = (
                    StatusCode.RESOURCE_EXHAUSTED
                    if ex.status == 413
                    else StatusCode.INVALID_ARGUMENT
                )
                await context.abort(code, ex.message)
            elif isinstance(ex, ModelNotReady):
                await context.abort(StatusCode.UNAVAILABLE, str(ex))
            else:
                await super().handle_exception(ex, request_or_iterator, context, method_name)

    class BoundGRPCServer(GRPCServer):
        """KServe 0.21's ``GRPCServer.start`` with ``host`` instead of ``[::]``."""

        def __init__(self, *a: Any, host: str, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.host = host

        async def start(self, max_workers: int) -> None:
            servicer = InferenceServicer(self._data_plane, self._model_repository_extension)
            self._server = aio.server(
                futures.ThreadPoolExecutor(max_workers=max_workers),
                interceptors=(LoggingInterceptor(), RequestErrorToStatus()),
                options=[
                    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_LENGTH),
                    ("grpc.max_receive_message_length", args.max_body_bytes),
                    ("grpc.so_reuseport", 0),  # fail if the port is taken, do not share it
                ],
            )
            grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
                servicer, self._server
            )
            address = _listen_address(self.host, self._port)
            if not self._server.add_insecure_port(address):  # older grpcio returns 0
                raise RuntimeError(f"gRPC cannot listen on {address}")
            log.info("gRPC (KServe V2) listening on %s", address)
            await self._server.start()
            await self._server.wait_for_termination()

    class BoundModelServer(kserve.ModelServer):
        """ModelServer whose sockets bind ``host``; gRPC only when a port is given.

        ``start`` registers the model before it is ready (``ModelServer.start`` refuses
        that): readiness answers 503 until the watcher loads a version.
        """

        def __init__(self) -> None:
            super().__init__(
                http_port=args.http_port,
                grpc_port=args.grpc_port or 0,
                enable_grpc=args.grpc_port is not None,
                workers=1,
                enable_docs_url=False,
            )

        def start(self, models: list[Any]) -> None:
            for model in models:
                self.register_model(model)
                model.enable_latency_logging = self.enable_latency_logging
            self._rest_server = BoundRESTServer(
                FASTAPI_APP_IMPORT_STRING,
                self.dataplane,
                self.model_repository_extension,
                self.http_port,
                host=args.host,
                max_body_bytes=args.max_body_bytes,
                access_log_format=self.access_log_format,
                grace_period=self.grace_period,
                event_loop=self.event_loop,
                timeout_keep_alive=self.timeout_keep_alive,
                ssl_certfile=self.ssl_certfile,
                ssl_keyfile=self.ssl_keyfile,
            )
            self.servers.append(self._rest_server.start())
            if self.enable_grpc:
                self._grpc_server = BoundGRPCServer(
                    self.grpc_port,
                    self.dataplane,
                    self.model_repository_extension,
                    kwargs={},
                    grace_period=self.grace_period,
                    host=args.host,
                )
                self.servers.append(self._grpc_server.start(self.max_threads))
            self.setup_event_loop()
            self.register_signal_handler()
            asyncio.run(self._serve())

    return FashionMnistModel(args.model_name), BoundModelServer()


# --------------------------------------------------------------------------- CLI


def _pixel_limit(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", text)
    value = 0
    if match:
        value = int(match[1]) * (int(match[2]) if match[2] else 1)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a pixel count (16777216) or WIDTHxHEIGHT (4096x4096), got {text!r}"
        )
    return value


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse type: a finite number above 0, of type ``kind`` (int or float)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    return parse


def _port(text: str) -> int:
    if not (text.isdigit() and 1 <= int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ml.serve",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model-dir",
        required=True,
        help="directory of integer version subdirectories (TF Serving layout), e.g. "
        "V/serving/tf-mnist; the newest one is served; it may be empty or missing at start",
    )
    p.add_argument(
        "--model-name",
        default=DEFAULT_MODEL_NAME,
        help="model name in the URL: /v1/models/<name>:predict",
    )
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help="address every socket binds (HTTP and gRPC); 0.0.0.0 to accept remote clients",
    )
    p.add_argument("--http-port", type=_port, default=DEFAULT_HTTP_PORT, help="HTTP (REST) port")
    p.add_argument(
        "--grpc-port",
        type=_port,
        default=None,
        help="serve KServe's gRPC V2 protocol on this port too (off when not given)",
    )
    p.add_argument(
        "--poll-interval",
        type=_positive(float),
        default=DEFAULT_POLL_INTERVAL,
        help="seconds between checks of --model-dir for a new version",
    )
    p.add_argument(
        "--max-instances",
        type=_positive(int),
        default=DEFAULT_MAX_INSTANCES,
        help="most images in one request (more: 413)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_BODY_BYTES,
        help="largest request body in bytes (more: 413, refused before it is read)",
    )
    p.add_argument(
        "--max-image-pixels",
        type=_pixel_limit,
        default=DEFAULT_MAX_IMAGE_PIXELS,
        help="largest image, as a pixel count or WIDTHxHEIGHT, checked from the PNG/JPEG "
        "header before decoding (more: 413)",
    )
    return p


def _configure_logging() -> None:
    logger = logging.getLogger("ml")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s.%(msecs)03d %(process)d %(name)s %(levelname)s %(message)s",
                datefmt="%Y-%m-%d %H:%M:%S",
            )
        )
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.grpc_port is not None and args.grpc_port == args.http_port:
        parser.error(f"--grpc-port and --http-port must differ (both {args.http_port})")
    model_dir = Path(args.model_dir)
    if model_dir.exists() and not model_dir.is_dir():
        parser.error(f"--model-dir {model_dir} exists and is not a directory")
    _configure_logging()
    watcher = VersionWatcher(model_dir)
    model, server = build_server(args, watcher)
    log.info(
        "model %r from %s: HTTP on %s%s; polling every %gs",
        args.model_name,
        model_dir,
        _listen_address(args.host, server.http_port),
        f", gRPC on {_listen_address(args.host, args.grpc_port)}" if args.grpc_port else "",
        args.poll_interval,
    )
    watcher.start(args.poll_interval)
    try:
        server.start([model])
    finally:
        watcher.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
