"""The V1 REST protocol, pure: a request body in, a validated batch out; the V1 answer
format. No kserve, no TensorFlow.

Request forms (TF Serving's REST forms for the two signatures in ``ml/model/export.py``)::

    {"instances": [{"b64": "<base64 PNG/JPEG>"}, ...]}                 row form, bytes
    {"instances": [{"image_bytes": {"b64": "..."}}, ...]}              row form, named input
    {"instances": [[[0.0, ...28], ...28], ...]}                        [28][28] or [28][28][1]
    {"inputs": [...same items...]}  or  {"inputs": {"pixels": [...]}}  columnar form
    optional: "signature_name": "serving_default" | "serving_pixels" (else inferred),
              "return_class_names": true

Each instance is checked by ``ml/server/instances.py`` (images from their header alone).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ml.data.dataset import CLASS_NAMES
from ml.model.export import BYTES_INPUT, DEFAULT_SIGNATURE, PIXELS_INPUT, PIXELS_SIGNATURE
from ml.server.client_error import ClientError
from ml.server.instances import (
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MAX_INSTANCES,
    DEFAULT_MAX_REQUEST_PIXELS,
    SIGNATURE_INPUTS,
    ParsedRequest,
    b64_payload,
    check_count,
    check_images,
    check_pixels,
    json_type,
)

#: What to send instead of a malformed body (also used for kserve's own JSON errors).
HINT = (
    'Send a JSON object such as {"instances": [{"b64": "<base64 PNG or JPEG>"}]} or '
    '{"instances": [<28x28 array of floats in [0, 1]>]}.'
)

_TOP_LEVEL_KEYS = ("instances", "inputs", "signature_name", "return_class_names")


def parse_request(
    body: Any,
    *,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS,
) -> ParsedRequest:
    """Validate a V1 REST request body (a decoded JSON object, or its raw bytes/str).

    Raises:
        ClientError: any client mistake (status 400, or 413 for "too large"), with a
            message that says what is wrong and how to fix it.
    """
    body = _json_object(body)
    return_class_names, signature_name = _options(body)
    form, items, field = _batch(body)
    if not items:
        raise ClientError(400, f"{field} is an empty list; send at least one image")
    kinds = [_instance_kind(item, i) for i, item in enumerate(items)]
    signature_name = _resolve_signature(signature_name, kinds)
    # Malformed instances are reported before "too many": the body limit already bounds
    # this work, and "wrap the image in a list" is the better answer to a 28-row image.
    inputs: list[bytes] | np.ndarray
    if signature_name == DEFAULT_SIGNATURE:
        payloads = (b64_payload(item, i) for i, item in enumerate(items))
        inputs, pixels = check_images(payloads, max_image_pixels, max_request_pixels)
    else:
        inputs = np.stack([check_pixels(_pixel_payload(item), i) for i, item in enumerate(items)])
        pixels = inputs.size
    check_count(len(items), max_instances)
    return ParsedRequest(signature_name, inputs, form, return_class_names, pixels=pixels)


def _json_object(body: Any) -> dict:
    """The body as a JSON object with only known top-level keys."""
    if isinstance(body, (bytes, bytearray, str)):
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise ClientError(400, f"the request body is not valid JSON ({e}). {HINT}") from e
        except RecursionError as e:  # not a ValueError: json.loads recurses per nesting level
            raise ClientError(
                400,
                "the request body nests JSON arrays or objects too deeply to be read (an "
                f"image is 2 or 3 levels deep inside its list). {HINT}",
            ) from e
    if not isinstance(body, dict):
        raise ClientError(
            400, f"the request body must be a JSON object, got {json_type(body)}. {HINT}"
        )
    unknown = sorted(set(body) - set(_TOP_LEVEL_KEYS))
    if unknown:
        raise ClientError(
            400,
            f"unknown field(s) {', '.join(map(repr, unknown))} in the request; "
            f"allowed: {', '.join(_TOP_LEVEL_KEYS)}",
        )
    if "instances" in body and "inputs" in body:
        raise ClientError(
            400, 'send either "instances" (row form) or "inputs" (columnar form), not both'
        )
    return body


def _options(body: dict) -> tuple[bool, str | None]:
    """``return_class_names`` and the requested ``signature_name`` (None: infer it)."""
    return_class_names = body.get("return_class_names", False)
    if not isinstance(return_class_names, bool):
        raise ClientError(
            400,
            f'"return_class_names" must be true or false, got {json_type(return_class_names)}',
        )
    signature_name = body.get("signature_name")
    if signature_name is not None and (
        not isinstance(signature_name, str) or signature_name not in SIGNATURE_INPUTS
    ):
        raise ClientError(
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
            raise ClientError(
                400, f'"instances" must be a list (one item per image), got {json_type(items)}'
            )
        return "row", items, '"instances"'
    if "inputs" in body:
        items, named, field = _columnar_items(body["inputs"])
        if named is not None:
            items = [{named: item} for item in items]
        return "columnar", items, field
    raise ClientError(400, f'the request has no "instances" or "inputs". {HINT}')


def _columnar_items(inputs: Any) -> tuple[list, str | None, str]:
    """The batch list of a columnar ``inputs`` value, and the input name it was under."""
    if isinstance(inputs, list):
        return inputs, None, '"inputs"'
    if isinstance(inputs, dict) and len(inputs) == 1:
        ((name, value),) = inputs.items()
        if name in SIGNATURE_INPUTS.values():
            if not isinstance(value, list):
                raise ClientError(
                    400,
                    f'"inputs"."{name}" must be a list (the batch: one item per image), '
                    f"got {json_type(value)}",
                )
            return value, name, f'"inputs"."{name}"'
    raise ClientError(
        400,
        '"inputs" must be a list (one item per image) or an object with one key, '
        f'"{BYTES_INPUT}" or "{PIXELS_INPUT}", holding that list; got {json_type(inputs)}'
        + (f" with keys {', '.join(map(repr, inputs))}" if isinstance(inputs, dict) else ""),
    )


def _instance_kind(item: Any, i: int) -> str:
    """The signature an instance belongs to, from its type alone."""
    if isinstance(item, dict):
        if set(item) == {"b64"} or set(item) == {BYTES_INPUT}:
            return DEFAULT_SIGNATURE
        if set(item) == {PIXELS_INPUT}:
            return PIXELS_SIGNATURE
        raise ClientError(
            400,
            f"instance {i} is an object with keys {', '.join(map(repr, item)) or '(none)'}; "
            f'expected {{"b64": "..."}}, {{"{BYTES_INPUT}": {{"b64": "..."}}}} or '
            f'{{"{PIXELS_INPUT}": [28][28] array}}',
        )
    if isinstance(item, list):
        return PIXELS_SIGNATURE
    if isinstance(item, str):
        raise ClientError(
            400,
            f'instance {i} is a bare string; send image bytes as {{"b64": "<base64>"}} '
            "(TF Serving's form for binary data)",
        )
    raise ClientError(
        400,
        f'instance {i} is {json_type(item)}; expected {{"b64": "..."}} image bytes or '
        "a [28][28] / [28][28][1] array of pixel values in [0, 1]",
    )


def _resolve_signature(requested: str | None, kinds: Sequence[str]) -> str:
    found = sorted(set(kinds))
    if len(found) > 1:
        first_pixels = kinds.index(PIXELS_SIGNATURE)
        first_bytes = kinds.index(DEFAULT_SIGNATURE)
        raise ClientError(
            400,
            f"the request mixes image bytes (e.g. instance {first_bytes}) and pixel arrays "
            f"(e.g. instance {first_pixels}); send one kind per request",
        )
    (kind,) = found
    if requested is not None and requested != kind:
        what = "image bytes" if kind == DEFAULT_SIGNATURE else "pixel arrays"
        takes = "base64 image bytes" if requested == DEFAULT_SIGNATURE else "pixel arrays"
        raise ClientError(
            400,
            f"signature_name {requested!r} takes {takes}, but the instances are {what}; "
            f"use {kind!r} or leave signature_name out",
        )
    return kind


def _pixel_payload(item: Any) -> Any:
    return item[PIXELS_INPUT] if isinstance(item, dict) else item


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
