"""ml.server.v1, the V1 request parser and response: every bad request refused with its
status and a fix, the accepted request forms, base64 variants, and the response's version and
class names."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from ml.data.dataset import CLASS_NAMES
from ml.server import client_error as errors
from ml.server import v1
from tests.support.serve_requests import BAD_REQUESTS, MAX_INSTANCES, SMALL_PNG, ZEROS, Raw, b64


@pytest.mark.parametrize(("body", "status", "text"), BAD_REQUESTS)
def test_bad_requests_are_rejected_with_a_fix(body, status, text) -> None:
    payload = body.data if isinstance(body, Raw) else body
    with pytest.raises(errors.ClientError) as info:
        v1.parse_request(payload, max_instances=MAX_INSTANCES)
    assert info.value.status == status
    assert text in info.value.message


@pytest.mark.parametrize(
    ("body", "signature", "form"),
    [
        pytest.param({"instances": [b64(SMALL_PNG)]}, "serving_default", "row", id="b64"),
        pytest.param(
            {"instances": [{"image_bytes": b64(SMALL_PNG)}]},
            "serving_default",
            "row",
            id="b64 under the input name",
        ),
        pytest.param({"instances": [ZEROS]}, "serving_pixels", "row", id="[28][28]"),
        pytest.param(
            {"instances": [np.zeros((28, 28, 1)).tolist()]},
            "serving_pixels",
            "row",
            id="[28][28][1]",
        ),
        pytest.param({"instances": [{"pixels": ZEROS}]}, "serving_pixels", "row", id="named"),
        pytest.param({"inputs": [ZEROS, ZEROS]}, "serving_pixels", "columnar", id="columnar"),
        pytest.param(
            {"inputs": {"image_bytes": [b64(SMALL_PNG)]}},
            "serving_default",
            "columnar",
            id="columnar named bytes",
        ),
        pytest.param(
            Raw(json.dumps({"instances": [ZEROS]}).encode()),
            "serving_pixels",
            "row",
            id="raw JSON bytes",
        ),
    ],
)
def test_good_requests_parse(body, signature, form) -> None:
    parsed = v1.parse_request(body.data if isinstance(body, Raw) else body)
    assert (parsed.signature_name, parsed.form) == (signature, form)
    if signature == "serving_pixels":
        assert parsed.inputs.dtype == np.float32 and parsed.inputs.shape[1:] == (28, 28, 1)
    else:
        assert parsed.inputs == [SMALL_PNG]


def test_b64_accepts_line_wrapping_and_the_url_safe_alphabet() -> None:
    data = SMALL_PNG + b"\xfb\xff"  # trailing bytes that encode to '+' and '/' (or '-', '_')
    text = base64.b64encode(data).decode()
    wrapped = "\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    assert "\n" in wrapped and ("+" in text or "/" in text)  # both alphabets differ here
    for form in (wrapped, base64.urlsafe_b64encode(data).decode()):
        assert v1.parse_request({"instances": [{"b64": form}]}).inputs == [data]


def test_format_response_adds_version_and_class_names() -> None:
    probs = np.eye(10, dtype=np.float32)[[9, 0]]
    row = v1.format_response(probs, 3, return_class_names=True)
    assert row == {
        "predictions": probs.tolist(),
        "model_version": 3,
        "class_names": [CLASS_NAMES[9], CLASS_NAMES[0]],
    }
    assert set(v1.format_response(probs, 3, form="columnar")) == {"outputs", "model_version"}
