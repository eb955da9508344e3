"""The hypothesis settings and strategies of the model server's property-based tests
(tests/ml/server/test_v1_fuzz.py, test_v2_fuzz.py, test_routes_fuzz.py): request bodies,
JSON or not, well-formed or not, mostly near valid requests so the checks past the first
are reached too.

The examples are derandomized (the same ones on every run, so CI is reproducible) and few
enough for a few seconds: ``DISTML_HYPOTHESIS_PROFILE=explore`` runs many more, randomly.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ml.server import client_error as errors
from tests.support.serve_requests import gray_png, huge_png, png_header

_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "ci", max_examples=150, derandomize=True, database=None, deadline=None,
    suppress_health_check=_SLOW_IS_FINE,
)  # fmt: skip
# Random examples; failures are kept in .hypothesis/ (not in git) and tried first next time.
settings.register_profile(
    "explore", max_examples=5000, deadline=None, suppress_health_check=_SLOW_IS_FINE
)
FUZZ = settings.get_profile(os.environ.get("DISTML_HYPOTHESIS_PROFILE", "ci"))

# --------------------------------------------------------------------------- strategies


def mostly(usual: Any, other: Any) -> Any:
    """``usual`` three times in four, else ``other``: bodies mostly near valid requests,
    so that the checks past the first are reached too."""
    return st.integers(0, 3).flatmap(lambda k: other if k == 0 else usual)


NUMBERS = st.integers(-(2**70), 2**70) | st.floats() | st.sampled_from([0.0, 0.5, 1.0, 255])
SCALARS = st.none() | st.booleans() | NUMBERS | st.text(max_size=12)
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
# Images: valid PNGs, and bytes that start like the formats the header check reads.
PREFIXES = [b"", b"\x89PNG\r\n\x1a\n", png_header(28, 28), b"\xff\xd8\xff", b"GIF89a"]
IMAGE_BYTES = mostly(
    st.sampled_from([gray_png(28, 28), gray_png(5, 3), huge_png(9000, 9000)]),
    st.tuples(st.sampled_from(PREFIXES), st.binary(max_size=48)).map(b"".join),
)
BASE64 = mostly(IMAGE_BYTES.map(lambda b: base64.b64encode(b).decode()), st.text(max_size=16))
# Pixel arrays: one value in a shape near [28][28] / [28][28][1], or small ragged lists.
PIXEL = mostly(st.floats(0, 1), st.floats() | st.integers(-300, 300))
SHAPES = st.sampled_from([(28, 28), (28, 28, 1), (28, 28, 3), (28, 27), (28,), (), (1, 28, 28)])
IMAGE = mostly(
    st.builds(lambda v, shape: np.full(shape, v).tolist(), PIXEL, SHAPES),
    st.lists(st.lists(NUMBERS | SCALARS, max_size=3), max_size=3),
)
INSTANCE = mostly(
    IMAGE
    | st.builds(lambda b: {"b64": b}, BASE64)
    | st.builds(lambda b: {"image_bytes": {"b64": b}}, BASE64)
    | st.builds(lambda i: {"pixels": i}, IMAGE),
    ANY_JSON,
)
OPTIONS = {
    "signature_name": mostly(st.sampled_from(["serving_default", "serving_pixels"]), ANY_JSON),
    "return_class_names": mostly(st.booleans(), ANY_JSON),
}
BATCH = mostly(st.lists(INSTANCE, min_size=1, max_size=3), ANY_JSON)
COLUMNS = st.dictionaries(st.sampled_from(["pixels", "image_bytes", "x"]), BATCH, max_size=2)
V1_BODY = mostly(
    st.fixed_dictionaries({"instances": BATCH}, optional=OPTIONS)
    | st.fixed_dictionaries({"inputs": BATCH | COLUMNS}, optional=OPTIONS),
    st.dictionaries(st.sampled_from(["instances", "inputs", *OPTIONS, "other"]), ANY_JSON),
)
V2_PIXELS = st.builds(
    lambda n, v, shape, datatype: {
        "name": "pixels", "datatype": datatype, "shape": [n, *shape],
        "data": [v] * (n * int(np.prod(shape))),
    },
    st.integers(0, 3), PIXEL, SHAPES, mostly(st.just("FP32"), st.sampled_from(["FP64", "FP16"])),
)  # fmt: skip
V2_IMAGES = st.builds(
    lambda data: {"name": "image_bytes", "datatype": "BYTES", "shape": [len(data)], "data": data},
    st.lists(mostly(BASE64, NUMBERS | SCALARS), max_size=3),
)
V2_ANY_TENSOR = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["pixels", "image_bytes"]) | st.text(max_size=8),
        "datatype": st.sampled_from(["FP32", "BYTES", "BOOL"]) | st.text(max_size=6),
        "shape": st.lists(st.integers(-2, 30), max_size=5),
        "data": st.lists(NUMBERS, max_size=30) | st.lists(ANY_JSON, max_size=3),
    },
    optional={"parameters": st.dictionaries(st.text(max_size=8), ANY_JSON, max_size=2)},
)
V2_BODY = mostly(
    st.fixed_dictionaries(
        {
            "inputs": mostly(
                st.lists(V2_PIXELS | V2_IMAGES, min_size=1, max_size=1),
                st.lists(V2_ANY_TENSOR, max_size=2),
            )
        },
        optional={"id": st.text(max_size=8)},
    ),
    st.dictionaries(st.sampled_from(["inputs", "id", "outputs", "parameters"]), ANY_JSON),
)
HEADER_CHARACTERS = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
# Nested past json.loads' recursion limit (about 1000 levels) and past numpy's 64 dimensions.
NESTED = st.builds(
    lambda n, opening: (opening * n).encode(),
    st.sampled_from([1, 65, 900, 2_000, 100_000]),
    st.sampled_from(["[", '{"a":', '{"instances":[']),
)


def encoded(strategy: Any) -> Any:
    """JSON text of the values of ``strategy`` (NaN and Infinity included, as Python writes)."""
    return strategy.map(lambda value: json.dumps(value).encode())


V1_BYTES = mostly(encoded(V1_BODY), encoded(ANY_JSON) | st.binary(max_size=256)) | NESTED
V2_BYTES = mostly(encoded(V2_BODY), encoded(ANY_JSON) | st.binary(max_size=256)) | NESTED


def client_error(e: errors.ClientError) -> None:
    assert 400 <= e.status < 500 and e.message, (e.status, e.message)
