"""The real model server (``python -m ml serve``) on a loopback port, serving a small random
cnn exported here, and predict requests to it: for the tests that read what it counts
through a real Prometheus."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from loadtest.server_view import fetch
from ml import contract
from runtime.procs import free_ports
from tests.support.e2e_kit import post
from tests.support.predict_server import wait_for

REPO = Path(__file__).resolve().parents[2]
SVC = "tf-mnist"


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (28, 28), 128).save(out, format="PNG")
    return out.getvalue()


@contextlib.contextmanager
def served_model(root: Path, *, canary: bool = False) -> Iterator[str]:
    """``python -m ml serve`` on a free loopback port, serving version 1 of a random cnn
    exported under ``root`` (the volume; ``root/export`` the model); its base URL. Stopped
    after. ``canary``: started with the service's canary folder, as a cluster's predictor
    is (``--canary-elsewhere``: the canary answers in a server of its own,
    :func:`served_canary`)."""
    from ml.model.architectures import build_model
    from ml.model.export import export_model
    from ml.selection.select import publish

    export_model(build_model("cnn", seed=7), root / "export")
    serving = root / "serving" / SVC
    publish(root / "export", serving, {"source": "test"})
    with _serving(root, serving, "serve.log", canary) as url:
        yield url


@contextlib.contextmanager
def served_canary(root: Path) -> Iterator[str]:
    """The canary's own server (the cluster's canary pod): ``ml serve`` of the service's
    canary folder, Ready once its newest version loaded; its base URL."""
    with _serving(root, Path(contract.canary_dir(root, SVC)), "canary-serve.log") as url:
        yield url


@contextlib.contextmanager
def _serving(root: Path, model_dir: Path, log_name: str, canary: bool = False) -> Iterator[str]:
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    cmd = contract.serve(
        model_dir, SVC, host="127.0.0.1", http_port=port, python=sys.executable,
        canary_dir=contract.canary_dir(root, SVC) if canary else None,
        canary_elsewhere=canary,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    log = root / log_name
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:

        def ready() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                return json.loads(fetch(f"{url}/v1/models/{SVC}")).get("ready") is True
            except Exception:
                return False

        wait_for(ready, 180, "the model server to be ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def send(url: str, ok: int, bad: int) -> None:
    """``ok`` predict requests answered 200, then ``bad`` answered 400."""
    body = json.dumps({"instances": [{"b64": base64.b64encode(_png()).decode()}]})
    for _ in range(ok):
        assert post(f"{url}/v1/models/{SVC}:predict", body)[0] == 200
    for _ in range(bad):
        assert post(f"{url}/v1/models/{SVC}:predict", '{"instances": []}')[0] == 400
