"""A version's own failure is a 500 counted against it, never a 200 or a client's 4xx
(ml/server/model_error.py, ml/server/watcher.py; the checks: tests/ml/model/test_servable.py):
probabilities that
are not probabilities are withheld, and a graph that rejects checked input is the version's
fault; an image that does not decode is still the client's 400."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ml.selection.select import publish
from tests.ml.server.serve_process import Server
from tests.support.serve_requests import MODEL, b64


@pytest.fixture(scope="module")
def faulty_server(tmp_path_factory, shared_data_dir) -> Iterator[Server]:
    """A server whose one version answers NaN for single real images, and one whose
    version refuses bright images (tests/support/faulty_versions.py)."""
    from ml.model.architectures import build_model
    from tests.support import faulty_versions as fv

    root = tmp_path_factory.mktemp("faulty")
    export = fv.nan_on_single(build_model("cnn", seed=5), root / "nan")
    publish(export, root / "serving" / MODEL, {"source": "test"})
    server = Server(root / "serving" / MODEL, root / "serve.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_non_finite_answers_are_500_counted_against_the_version(faulty_server, tf) -> None:
    image = tf.io.encode_png(tf.cast(tf.random.uniform([28, 28, 1], 0, 255), tf.uint8)).numpy()
    status, body = faulty_server.predict({"instances": [b64(image)]})
    assert status == 500, body
    assert "version 1" in body["error"] and "non-finite for instance 0" in body["error"]
    status, body = faulty_server.predict({"instances": [b64(image)] * 2})
    assert status == 200 and np.isfinite(body["predictions"]).all()  # a batch: answered
    counts = faulty_server.scrape().counts("distml_requests_total", "code", "version")
    assert counts[("500", "1")] == 1 and counts[("200", "1")] == 1


def test_a_graph_that_rejects_checked_pixels_is_the_versions_fault(tmp_path, tf) -> None:
    from ml.model.architectures import build_model
    from ml.server import watcher
    from ml.server.client_error import ClientError
    from ml.server.model_error import ModelError
    from tests.support import faulty_versions as fv

    path = fv.rejects_bright(build_model("cnn", seed=6), tmp_path / "bright")
    loaded = watcher.load_version(3, Path(path))
    versions = watcher.VersionWatcher(tmp_path / "unused")
    dark, bright = np.zeros([1, 28, 28, 1], np.float32), np.ones([1, 28, 28, 1], np.float32)
    assert versions.predict("serving_pixels", dark, loaded)[0] == 3
    with pytest.raises(ModelError, match=r"version 3's serving_pixels graph rejected input"):
        versions.predict("serving_pixels", bright, loaded)
    png = tf.io.encode_png(tf.cast(bright[0] * 255, tf.uint8)).numpy()
    with pytest.raises(ModelError, match=r"serving_default graph rejected"):
        versions.predict("serving_default", [png], loaded)
    with pytest.raises(ClientError, match=r"instance 0 could not be decoded"):  # the client's
        versions.predict("serving_default", [png[:40]], loaded)
