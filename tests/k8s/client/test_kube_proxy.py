"""ApiKube.proxy_get against a loopback stand-in API server: the path and query a real
API server's service proxy expects (PromQL's braces, quotes and '+' encoded), the body of
a 2xx answer, and an error answer kept as a ProxyError with its status and body."""

from __future__ import annotations

import http.server
import json
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s.client.drykube import DryKube
from k8s.client.kube import ApiKube, KubeError, ProxyError
from ml.contract import serving_metrics
from tests.support.api_server import FakeApiServer, status_body, write_kubeconfig

PROXY = "/api/v1/namespaces/team-a/services/distml-prometheus:9090/proxy/api/v1/query"


class ProxyServer(FakeApiServer):
    def do_GET(self) -> None:
        path, query, _ = self.record()
        if path == PROXY and query.get("query"):
            self.answer(200, {"status": "success", "echo": query["query"][0]})
        elif path == PROXY:
            self.answer(400, {"status": "error", "errorType": "bad_data", "error": "no query"})
        elif "/services/gone:9090/" in path:
            self.answer(404, status_body(404, 'services "gone" not found'))
        else:
            super().do_GET()


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiKube]:
    FakeApiServer.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ProxyServer)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config", url)))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    try:
        yield ApiKube("k3d-other")
    finally:
        server.shutdown()
        server.server_close()


def test_a_query_goes_through_the_service_proxy_intact(api: ApiKube) -> None:
    promql = serving_metrics.error_ratio("team-a", "tf-mnist", "2m") + " + 0"
    body = api.proxy_get("team-a", "distml-prometheus", 9090, "api/v1/query", {"query": promql})
    assert json.loads(body) == {"status": "success", "echo": promql}
    (request,) = [r for r in FakeApiServer.requests if r["path"] == PROXY]
    assert request["method"] == "GET" and request["query"] == {"query": [promql]}


def test_an_error_answer_keeps_its_status_and_body(api: ApiKube) -> None:
    with pytest.raises(ProxyError) as info:
        api.proxy_get("team-a", "distml-prometheus", 9090, "api/v1/query", {})
    assert info.value.status == 400
    assert json.loads(info.value.body)["error"] == "no query"
    with pytest.raises(ProxyError, match=r'HTTP 404: services "gone" not found') as gone:
        api.proxy_get("team-a", "gone", 9090, "api/v1/query", {"query": "up"})
    assert gone.value.status == 404


def test_dry_kube_sends_nothing_and_says_so() -> None:
    lines: list[str] = []
    with pytest.raises(KubeError, match="--dry: GET api/v1/query on Service ns/p:9090 not sent"):
        DryKube(lines.append).proxy_get("ns", "p", 9090, "api/v1/query", {"query": "up"})
    assert lines == []
