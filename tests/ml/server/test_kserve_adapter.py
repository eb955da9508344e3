"""ml.server.kserve_adapter: the one private KServe detail it relies on, that KServe's REST
server builds its uvicorn server from ``RESTServer.config``, so the host and the header
timeout given reach uvicorn."""

from __future__ import annotations

from ml.server import serve, watcher


def test_rest_server_configures_uvicorn_as_given() -> None:
    """Guards ml.server.kserve_adapter.configure_uvicorn, the one private KServe detail used: if a
    KServe upgrade stops building its uvicorn server from ``RESTServer.config``, this fails."""
    adapter = serve.load_kserve()
    args = serve.parse_args(["--model-dir", "d", "--http-port", "18080"])
    server = adapter.model_server(args)
    rest = adapter.BoundRESTServer(
        "kserve.model_server:app",
        server.dataplane,
        server.model_repository_extension,
        server.http_port,
        host="127.0.0.2",
        max_body_bytes=10,
        model=adapter.FashionMnistModel("m", watcher.VersionWatcher("d")),
        request_header_timeout=1.5,
    )
    uvicorn_server = rest._server  # what RESTServer.start() serves
    assert uvicorn_server.config is rest.config
    assert (uvicorn_server.config.host, uvicorn_server.config.port) == ("127.0.0.2", 18080)
    uvicorn_server.config.load()  # resolves the HTTP protocol class, as serving does
    assert uvicorn_server.config.http_protocol_class.header_timeout == 1.5
