"""ml.server.v1, property-based (hypothesis): any body, JSON or not, well-formed or not, gets a
parsed request or a client error (4xx) with a message, never another exception.
(The settings and strategies: tests/support/serve_fuzz.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from ml.server import client_error as errors
from ml.server import v1
from tests.support.serve_fuzz import ANY_JSON, FUZZ, V1_BODY, V1_BYTES, client_error
from tests.support.serve_stub import MAX_INSTANCES

# KServe casts out-of-range numbers to FP32/FP16 (they are then refused as out of [0, 1]).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


@FUZZ
@given(body=V1_BODY | ANY_JSON | V1_BYTES)
def test_v1_parser_answers_a_request_or_a_client_error(body: Any) -> None:
    try:
        parsed = v1.parse_request(body, max_instances=MAX_INSTANCES)
    except errors.ClientError as e:
        client_error(e)
    else:
        assert 1 <= len(parsed.inputs) <= MAX_INSTANCES
