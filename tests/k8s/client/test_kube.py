"""k8s.client.kube: ApiKube imports nothing until used, says what to run when its
context is missing, and, against a loopback stand-in for the API server
(tests/support/api_server.py), sends what a real server expects and maps its answers."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s.client.kube import ApiKube, KubeError
from tests.support.api_server import WEB_UID, FakeApiServer, write_kubeconfig
from tests.support.wait_kit import NS, TF


def test_constructing_api_kube_imports_and_loads_nothing(tmp_path: Path) -> None:
    code = (
        "import sys, k8s.client.kube as k; kube = k.ApiKube('k3d-distml'); "
        "print(sorted(m for m in sys.modules if m.startswith(('kubernetes', 'urllib3'))))"
    )
    env = {"KUBECONFIG": str(tmp_path / "does-not-exist"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("kubeconfig", ["missing-file", "other-context"])
def test_api_kube_without_the_context_says_run_invoke_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubeconfig: str
) -> None:
    path = tmp_path / "config"
    if kubeconfig == "other-context":
        write_kubeconfig(path, "https://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", str(path))
    kube = ApiKube("k3d-distml")

    with pytest.raises(KubeError, match="no kubeconfig context k3d-distml; run `invoke up` first"):
        kube.get("v1", "Pod", "p", NS)


@pytest.fixture
def api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    FakeApiServer.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config", url)))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the discovery cache file
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def test_api_kube_against_a_stand_in_api_server(api_server: str) -> None:
    kube = ApiKube("k3d-other")
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 1},
    }

    assert kube.apply(dep) == dep
    assert kube.apply(dep, dry_run=True) == dep
    patches = [r for r in FakeApiServer.requests if r["method"] == "PATCH"]
    assert patches[0]["path"] == "/apis/apps/v1/namespaces/kubeflow/deployments/web"
    assert patches[0]["content_type"] == "application/apply-patch+yaml"
    assert patches[0]["query"] == {"fieldManager": ["distml"], "force": ["true"]}
    assert patches[1]["query"]["dryRun"] == ["All"]
    assert json.loads(patches[0]["body"]) == dep

    assert kube.get("apps/v1", "Deployment", "web", NS)["metadata"]["name"] == "web"
    assert kube.get("apps/v1", "Deployment", "gone", NS) is None
    listed = kube.list("apps/v1", "Deployment", NS)
    assert [d["metadata"]["name"] for d in listed] == ["web"]
    # The server's items name no kind (the List does): every listed object names its own.
    assert [(d["apiVersion"], d["kind"]) for d in listed] == [("apps/v1", "Deployment")]
    assert kube.list(TF, "TFJob", NS) == []  # kind not installed
    assert kube.get(TF, "TFJob", "cnn", NS) is None

    assert kube.delete("apps/v1", "Deployment", "web", NS) is True
    assert kube.delete("apps/v1", "Deployment", "gone", NS) is False
    delete = next(r for r in FakeApiServer.requests if r["method"] == "DELETE")
    # In the body: the API server reads no query parameter of a DELETE that has one.
    assert json.loads(delete["body"])["propagationPolicy"] == "Foreground"
    # Only the object of the uid this work dir recorded: another one of the name is a 409.
    assert kube.delete("apps/v1", "Deployment", "web", NS, uid=WEB_UID) is True
    sent = [r for r in FakeApiServer.requests if r["method"] == "DELETE"][-1]
    assert json.loads(sent["body"]) == {
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": WEB_UID},
    }
    with pytest.raises(KubeError, match="Precondition failed") as refused:
        kube.delete("apps/v1", "Deployment", "web", NS, uid="uid-someone-elses")
    assert refused.value.status == 409 and not refused.value.forbidden

    assert kube.logs("w-0", NS, container="tensorflow", tail=3) == "line 7\nline 8\nline 9"
    log_call = next(r for r in FakeApiServer.requests if r["path"].endswith("w-0/log"))
    assert log_call["query"] == {"container": ["tensorflow"], "tailLines": ["3"]}
    kube.logs("w-0", NS, container="tensorflow", tail=3, previous=True)
    log_call = [r for r in FakeApiServer.requests if r["path"].endswith("w-0/log")][-1]
    assert log_call["query"]["previous"] == ["true"]  # the crashed run's log
    assert kube.logs("starting", NS, container="tensorflow") == ""

    events = kube.events(NS, "w-0")
    assert [e["reason"] for e in events] == ["a", "b"]  # oldest first
    assert events[0]["involvedObject"]["name"] == "w-0"
    assert "lastTimestamp" in events[0]
    event_call = next(r for r in FakeApiServer.requests if r["path"].endswith("/events"))
    assert event_call["query"]["fieldSelector"] == ["involvedObject.name=w-0"]

    broken = dict(dep, metadata={"name": "broken", "namespace": NS})
    with pytest.raises(KubeError) as info:
        kube.apply(broken)
    assert str(info.value).startswith("apply Deployment kubeflow/broken failed: Internal error")
    assert "connection refused" in str(info.value)
    with pytest.raises(KubeError, match="apply TFJob kubeflow/cnn failed: the kind TFJob"):
        kube.apply(
            {"apiVersion": TF, "kind": "TFJob", "metadata": {"name": "cnn", "namespace": NS}}
        )


def test_api_kube_unreachable_server_is_a_kube_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(
        "KUBECONFIG", str(write_kubeconfig(tmp_path / "c", f"http://127.0.0.1:{port}"))
    )
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kube = ApiKube("k3d-other")
    with pytest.raises(
        KubeError, match="cannot reach the API server of kubeconfig context k3d-other"
    ):
        kube.list("v1", "Pod", NS)


def test_api_kube_never_forces_when_asked_not_to_and_says_its_server(api_server: str) -> None:
    # On a cluster distml did not create, a conflict with another writer is the API
    # server's to refuse: kubernetes' client sends force=false (not merely no force).
    kube = ApiKube("k3d-other")
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "w", "namespace": NS},
    }
    kube.apply(dep, force=False)
    patch = next(r for r in FakeApiServer.requests if r["method"] == "PATCH")
    assert patch["query"].get("force", ["false"]) == ["false"]
    assert kube.server() == api_server  # what `up` records as the cluster's URL


def test_api_kube_applies_as_the_field_manager_it_is_given(api_server: str) -> None:
    kube = ApiKube("k3d-other", manager="distml-abcd1234")
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "w", "namespace": NS},
    }
    kube.apply(dep, force=False)
    patch = next(r for r in FakeApiServer.requests if r["method"] == "PATCH")
    assert patch["query"]["fieldManager"] == ["distml-abcd1234"]
