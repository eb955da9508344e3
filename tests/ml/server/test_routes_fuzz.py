"""The served app's routes (ml.server.routes, through the in-process app of
tests/support/serve_stub.py), property-based (hypothesis): any body on the V1 and V2 routes,
JSON, binary V2 or neither, is answered 2xx or 4xx with a message, never 5xx.
(The settings and strategies: tests/support/serve_fuzz.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.serve_fuzz import FUZZ, HEADER_CHARACTERS, V1_BYTES, V2_BODY, V2_BYTES, encoded
from tests.support.serve_stub import MODEL, stub_app

# KServe casts out-of-range numbers to FP32/FP16 (they are then refused as out of [0, 1]).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


ROUTES = {
    "V1 predict (direct)": (f"/v1/models/{MODEL}:predict", {"content-type": "application/json"}),
    "V1 predict (KServe)": (f"/v1/models/{MODEL}:predict", {"content-type": "text/plain"}),
    "V2 infer": (f"/v2/models/{MODEL}/infer", {"content-type": "application/json"}),
}


@pytest.mark.parametrize("route", ROUTES)
@FUZZ
@given(body=V1_BYTES | V2_BYTES)
def test_the_app_answers_any_body_with_2xx_or_4xx(route: str, body: bytes) -> None:
    path, headers = ROUTES[route]
    answer = stub_app().client.post(path, content=body, headers=headers)
    assert 200 <= answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert answer.json()["error"], answer.text


@FUZZ
@given(
    body=encoded(V2_BODY) | st.binary(max_size=256),
    length=st.integers(-5, 300) | st.text(HEADER_CHARACTERS, max_size=4),
)
def test_the_app_answers_any_binary_v2_body_with_2xx_or_4xx(body: bytes, length: Any) -> None:
    headers = {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(length),
    }
    answer = stub_app().client.post(f"/v2/models/{MODEL}/infer", content=body, headers=headers)
    assert 200 <= answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert answer.json()["error"], answer.text
