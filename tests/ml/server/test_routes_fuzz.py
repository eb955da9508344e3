"""The served app's routes (ml.server.routes, through the in-process app of
tests/support/serve_stub.py), property-based (hypothesis): any body on the V1 and V2 routes,
JSON, binary V2 or neither, is answered 2xx or 4xx with a message, never 5xx; and whatever
the method, path and body, the metrics' route label stays one of the route templates or
``other`` (bounded cardinality). (The settings and strategies: tests/support/serve_fuzz.py.)"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml.contract.serving_metrics import OTHER_ROUTE, REQUESTS_TOTAL, UNCOUNTED_PATHS
from ml.server import routes
from tests.ml.server.scrape import Scrape
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


#: Pieces of paths: the served routes' own, a few near them, and anything.
SEGMENTS = st.sampled_from(
    ["v1", "v2", "models", MODEL, "mnist", f"{MODEL}:predict", "infer", "ready", "versions",
     "3", "health", "live", "metrics", "repository", "", "%2F", "..", ":explain"]
) | st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=12)  # fmt: skip
PATHS = st.lists(SEGMENTS, min_size=0, max_size=6).map(lambda parts: "/" + "/".join(parts))
METHODS = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])


@FUZZ
@given(method=METHODS, path=PATHS, body=st.binary(max_size=64))
def test_the_route_label_is_a_template_or_other_whatever_is_asked(method, path, body) -> None:
    client = stub_app().client
    before = Scrape(client.get("/metrics").text).total(REQUESTS_TOTAL)
    url = "http://testserver" + quote(path, safe="/:%")  # %2F stays an encoded slash
    sent = client.request(method, url, content=body).request.url.path
    scrape = Scrape(client.get("/metrics").text)
    counted = 0 if sent in UNCOUNTED_PATHS else 1
    assert scrape.total(REQUESTS_TOTAL) == before + counted, (method, sent)
    labels = scrape.label_values(REQUESTS_TOTAL, "route")
    assert labels <= {path for _, path, _ in routes.ROUTES} | {OTHER_ROUTE}, labels
    assert scrape.label_values(REQUESTS_TOTAL, "model") <= {MODEL, ""}
