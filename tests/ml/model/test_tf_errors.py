"""ml.model.tf_errors: the useful line of a TensorFlow error, as the server and the
selection say it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml.model.tf_errors import tf_detail

GRAPH = (
    "Graph execution error:\n\nDetected at node cond/ReadFile defined at (most recent call "
    "last):\n<stack traces unavailable>\n/nonexistent/x; No such file or directory\n"
    "\t [[{{node cond/ReadFile}}]] [Op:__inference_signature_wrapper_serve_pixels_1935]\n"
)


@pytest.mark.parametrize(
    "message,expected",
    [
        (GRAPH, "/nonexistent/x; No such file or directory"),
        ("Invalid PNG data, size 60 [Op:DecodePng]", "Invalid PNG data, size 60"),
        ("", "TensorFlow gave no reason"),
    ],
)
def test_the_useful_line(message, expected):
    assert tf_detail(SimpleNamespace(message=message)) == expected


@given(st.text(max_size=200))
def test_any_message_gives_one_line(message):
    detail = tf_detail(SimpleNamespace(message=message))
    assert detail and "\n" not in detail
