"""ml.server.v2, the V2 request parser: the elements of a BYTES input must be base64 strings."""

from __future__ import annotations

from typing import Any

import pytest

from ml.server import client_error as errors
from ml.server import v2
from tests.support.serve_requests import v2_bytes_request


@pytest.mark.parametrize(
    ("element", "kind"),
    [(10**15, "a number"), (-1, "a number"), (True, "a boolean"), (None, "null")],
)
def test_v2_bytes_elements_must_be_base64_strings(element: Any, kind: str) -> None:
    # bytes(10**15) would allocate a petabyte: such an element is refused, not converted.
    with pytest.raises(errors.ClientError) as info:
        v2.parse_v2_request(v2_bytes_request([element]))
    assert info.value.status == 400
    assert info.value.message.startswith(f"instance 0 of 'image_bytes' is {kind}; send each")
