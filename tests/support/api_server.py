"""A loopback stand-in for the Kubernetes API server (tests/k8s/client/test_kube.py): discovery and
the few endpoints ApiKube calls, each request recorded, and a kubeconfig that points at it."""

from __future__ import annotations

import http.server
import json
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import yaml

from tests.support.wait_kit import NS


def write_kubeconfig(path: Path, server: str, context: str = "k3d-other") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
                "current-context": context,
            }
        )
    )
    return path


# A loopback stand-in for the API server: just enough discovery and endpoints to check that
# ApiKube sends what a real server expects and maps its answers.
DISCOVERY = {
    "/version": {"major": "1", "minor": "31", "gitVersion": "v1.31.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "apps",
                "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
            }
        ],
    },
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": "pods",
                "singularName": "pod",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["get", "list", "delete", "patch"],
            },
            {
                "name": "pods/log",
                "singularName": "",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["get"],
            },
            {
                "name": "events",
                "singularName": "event",
                "namespaced": True,
                "kind": "Event",
                "verbs": ["get", "list"],
            },
        ],
    },
    "/apis/apps/v1": {
        "kind": "APIResourceList",
        "groupVersion": "apps/v1",
        "resources": [
            {
                "name": "deployments",
                "singularName": "deployment",
                "namespaced": True,
                "kind": "Deployment",
                "verbs": ["get", "list", "delete", "patch"],
            },
        ],
    },
}


WEB_UID = "uid-web"  # Deployment kubeflow/web's uid: a delete preconditioned on another fails


def status_body(code: int, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "code": code,
    }


class FakeApiServer(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[dict]] = []

    def log_message(self, *args) -> None:
        pass

    def answer(self, code: int, body: object, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def record(self) -> tuple[str, dict[str, list[str]], bytes]:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": parse_qs(url.query),
                "content_type": self.headers.get("Content-Type"),
                "body": body,
            }
        )
        return url.path, parse_qs(url.query), body

    def do_GET(self) -> None:
        path, query, _ = self.record()
        deployments = "/apis/apps/v1/namespaces/kubeflow/deployments"
        if path in DISCOVERY:
            self.answer(200, DISCOVERY[path])
        elif path == f"{deployments}/web":
            self.answer(
                200,
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": NS},
                },
            )
        elif path == deployments:
            self.answer(
                200,
                {
                    "apiVersion": "apps/v1",
                    "kind": "DeploymentList",
                    "items": [{"metadata": {"name": "web", "namespace": NS}}],
                },
            )
        elif path.startswith(deployments):
            self.answer(404, status_body(404, 'deployments.apps "gone" not found'))
        elif path == "/api/v1/namespaces/kubeflow/pods/w-0/log":
            lines = [f"line {i}" for i in range(10)]
            self.answer(200, "\n".join(lines[-int(query["tailLines"][0]) :]), "text/plain")
        elif path == "/api/v1/namespaces/kubeflow/pods/starting/log":
            self.answer(400, status_body(400, 'container "tensorflow" is waiting to start'))
        elif path == "/api/v1/namespaces/kubeflow/events":
            self.answer(
                200,
                {
                    "apiVersion": "v1",
                    "kind": "EventList",
                    "items": [
                        event("b", "2026-01-01T00:00:09Z"),
                        event("a", "2026-01-01T00:00:01Z"),
                    ],
                },
            )
        else:
            self.answer(500, status_body(500, f"unexpected {path}"))

    def do_PATCH(self) -> None:
        path, _, body = self.record()
        if path.endswith("/broken"):
            self.answer(
                500,
                status_body(
                    500,
                    'Internal error occurred: failed calling webhook "validator.'
                    'tfjob.training-operator.kubeflow.org": connect: connection refused',
                ),
            )
        else:
            self.answer(200, json.loads(body))

    def do_DELETE(self) -> None:
        path, _, body = self.record()
        asked = ((json.loads(body) if body else {}).get("preconditions") or {}).get("uid")
        if path.endswith("/web") and asked not in (None, WEB_UID):
            message = f"Precondition failed: UID in precondition: {asked}, UID in object meta: "
            self.answer(409, status_body(409, message + WEB_UID))
        elif path.endswith("/web"):
            self.answer(200, status_body(200, "deleted") | {"status": "Success"})
        else:
            self.answer(404, status_body(404, "not found"))


def event(reason: str, stamp: str) -> dict:
    return {
        "metadata": {"name": f"w-0.{reason}", "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": "w-0", "namespace": NS},
        "reason": reason,
        "message": f"event {reason}",
        "type": "Warning",
        "lastTimestamp": stamp,
    }
