"""Shared pytest fixtures.

Data:
- ``shared_data_dir``: the four real Fashion-MNIST files, found or fetched as the product
  does (skips when they cannot be had).
- ``isolated_data_places``: the system search places point at empty temp dirs and the data
  environment variables are unset, so a test sees only the data it sets up.
- ``prepared_volume``: a volume with the tfds dataset prepared from the real files.
- ``dead_url``: a loopback URL that refuses connections.
- ``http_mirror``: starts loopback HTTP servers serving a directory.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

pytest_plugins = ["tests.support.tiers"]  # the heavy marker and `pytest --fast`


def pytest_configure(config: pytest.Config) -> None:
    """Let Ctrl-C reach the processes the tests start, however the suite was started.

    A non-interactive shell starts a background command (``cmd &``) with SIGINT ignored,
    and an ignored signal stays ignored across exec: every process the Ctrl-C tests start
    would then ignore their SIGINT and hang them (seen with ``(nohup .ci/run &)``). Python
    leaves an inherited SIG_IGN alone, so restore its usual handler here; children then
    start with SIGINT's default action again.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@functools.cache
def _data_dir() -> Path | str:
    """The Fashion-MNIST files' directory, found as the product's ingest finds them
    (``ml.data.raw``: ``$DISTML_DATA_DIR``, Debian's package, Keras's cache, else a download from
    ``$DISTML_DATA_MIRROR`` or the official mirror), or why they cannot be had (one line).

    A copy that is found but corrupt is an error, not a skip."""
    from k8s.install.upstream_files import TIMEOUT
    from ml import contract
    from ml.data import raw

    quiet = lambda line: None  # noqa: E731
    if any(all((p / f).is_file() for f in raw.FILES) for p in raw.search_places()):
        return raw.locate_raw_files(log=quiet)  # verified; DataError: a bad copy
    try:
        return raw.locate_raw_files(log=quiet, timeout=TIMEOUT)
    except raw.DataError as e:
        cause = str(e.__cause__ or e).splitlines()[0]
        return (
            f"Fashion-MNIST not found ({cause}): set {contract.DATA_DIR_ENV} to a directory "
            f"holding the four .gz files, or {raw.MIRROR_ENV} to a reachable mirror, or "
            "apt-get install dataset-fashion-mnist"
        )


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """Directory with the four original Fashion-MNIST files; skips, saying what to set,
    when they cannot be had."""
    found = _data_dir()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="session")
def required_data_dir(shared_data_dir: Path) -> Path:
    """The same directory for the e2e and image tiers (``.ci/run`` sets DISTML_DATA_DIR, and
    stops when it is missing)."""
    return shared_data_dir


@pytest.fixture(scope="session")
def prepared_volume(tmp_path_factory, shared_data_dir):
    """One real ``ml.data.dataset.prepare`` into a fresh volume (~15 s): (volume, result,
    log lines)."""
    from ml.data import dataset

    volume = tmp_path_factory.mktemp("volume")
    lines: list[str] = []
    result = dataset.prepare(volume, source_dir=shared_data_dir, log=lines.append)
    return volume, result, lines


@pytest.fixture
def isolated_data_places(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead_url: str
) -> tuple[Path, Path]:
    """Point ``ml.data.raw``'s Debian and Keras dirs at empty temp dirs; unset the data env vars.

    ``$DISTML_DATA_MIRROR`` is set to a refusing loopback port, so nothing can reach the real
    mirror by accident. Returns ``(debian_dir, keras_dir)`` (not created).
    """
    from ml.data import raw

    debian, keras = tmp_path / "sys-debian", tmp_path / "sys-keras"
    monkeypatch.setattr(raw, "DEBIAN_DIR", debian)
    monkeypatch.setattr(raw, "KERAS_DIR", keras)
    monkeypatch.delenv("DISTML_DATA_DIR", raising=False)
    monkeypatch.setenv("DISTML_DATA_MIRROR", dead_url)
    return debian, keras


@pytest.fixture
def dead_url() -> Iterator[str]:
    """``http://127.0.0.1:<port>/`` where the port is bound but not listening (refuses)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        sock.close()


class _MirrorHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory; files named in ``truncate`` are cut after that many bytes while the
    full Content-Length is still announced (a connection dropped mid-transfer)."""

    truncate: Mapping[str, int] = {}

    def copyfile(self, source, outputfile) -> None:  # type: ignore[override]
        limit = self.truncate.get(Path(self.path).name)
        if limit is None:
            shutil.copyfileobj(source, outputfile)
        else:
            outputfile.write(source.read(limit))
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_mirror() -> Iterator[Callable[..., str]]:
    """Factory ``serve(directory, truncate=None) -> base URL`` for loopback HTTP mirrors.

    Each call starts a server on 127.0.0.1 on a free port; all are stopped at teardown.
    """
    servers: list[tuple[http.server.ThreadingHTTPServer, threading.Thread]] = []

    def serve(directory: Path, truncate: Mapping[str, int] | None = None) -> str:
        handler = type("Handler", (_MirrorHandler,), {"truncate": dict(truncate or {})})
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(directory))
        )
        server.daemon_threads = True
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_port}/"

    yield serve
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
