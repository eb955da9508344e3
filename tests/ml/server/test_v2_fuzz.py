"""ml.server.v2, property-based (hypothesis): any body, decoded as the V2 route decodes it
(ml.server.routes.decode_v2_body), gets a parsed request or a client error (4xx) with a
message, never another exception. (The settings and strategies: tests/support/serve_fuzz.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml.server import client_error as errors
from ml.server import v2
from tests.support.serve_fuzz import FUZZ, V2_BYTES, client_error
from tests.support.serve_stub import MAX_INSTANCES, MODEL

# KServe casts out-of-range numbers to FP32/FP16 (they are then refused as out of [0, 1]).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


@FUZZ
@given(body=V2_BYTES, binary=st.booleans())
def test_v2_decoder_and_parser_answer_a_request_or_a_client_error(body: bytes, binary) -> None:
    from ml.server.routes import decode_v2_body

    headers = {"inference-header-content-length": str(len(body))} if binary else {}
    try:
        parsed = v2.parse_v2_request(
            decode_v2_body(body, headers, MODEL), max_instances=MAX_INSTANCES
        )
    except errors.ClientError as e:
        client_error(e)
    else:
        assert 1 <= len(parsed.inputs) <= MAX_INSTANCES
