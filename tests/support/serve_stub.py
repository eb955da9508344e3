"""The app ``python -m ml serve`` serves, built in process (no socket, no TensorFlow) with a
stub model version, for tests of its routes and answers.

``stub_app()`` builds it with ``ml.server.kserve_adapter.rest_server`` and ``create_application``,
as serving does. KServe keeps one FastAPI app per process and adds its middlewares and
routes to it, so it is built once per process and shared by every test module.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ml.server import serve, watcher

MODEL = "tf-mnist"
VERSION = 3
MAX_INSTANCES = 8
MAX_BODY_BYTES = 1_000_000


class StubVersions(watcher.VersionWatcher):
    """A watcher serving version ``VERSION`` of a model that answers 0.1 for each class."""

    def __init__(self) -> None:
        super().__init__(f"/nonexistent/{MODEL}")
        self.current = watcher.LoadedVersion(VERSION, Path(f"/stub/{VERSION}"), {}, None)
        self.stopped = False

    def predict(
        self, signature_name: str, inputs: Any, loaded: Any = None
    ) -> tuple[int, np.ndarray]:
        version = loaded.version if loaded is not None else VERSION
        return version, np.full((len(inputs), 10), 0.1, np.float32)

    def stop(self) -> None:
        self.stopped = True
        super().stop()


class StubApp(NamedTuple):
    app: Any  # the FastAPI app
    client: Any  # a starlette TestClient of it; server errors answer 500, not raise
    versions: StubVersions


@functools.cache
def stub_app() -> StubApp:
    adapter = serve.load_kserve()
    import kserve
    from starlette.testclient import TestClient

    args = serve.parse_args(
        ["--model-dir", "d", "--model-name", MODEL, "--max-instances", str(MAX_INSTANCES),
         "--max-body-bytes", str(MAX_BODY_BYTES)]
    )  # fmt: skip
    versions = StubVersions()
    model = adapter.FashionMnistModel(MODEL, versions, max_instances=MAX_INSTANCES)
    adapter.rest_server(adapter.model_server(args), model, args).create_application()
    app = kserve.model_server.app
    return StubApp(app, TestClient(app, raise_server_exceptions=False), versions)
