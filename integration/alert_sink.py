"""The webhook receiver the kind run names as ``cluster.alert_webhook``: a Pod and a Service
in the run's namespace that take Alertmanager's webhook POSTs and print each body as one
JSON line, which :func:`notifications` reads back from the pod's log.

The run's ``up`` names :data:`URL` before the sink exists (a Service's DNS name is resolved
when Alertmanager sends); ``integration.alert_fault`` makes it before its fault and deletes
it after. It runs the project image's Python (the run has no other image): the same image
the predictor pods run, read off one of them.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

from k8s.manifests.names import ISVC_POD_LABEL, PROJECT_UID
from k8s.manifests.pods import container_security_context

NAME = "distml-alert-sink"
PORT = 8080
PATH = "/alerts"
READY_TIMEOUT_S = 180


def url(namespace: str) -> str:
    return f"http://{NAME}.{namespace}.svc:{PORT}{PATH}"


# Every POST's body, one JSON line each; 200 to Alertmanager. Its port is its argument (0:
# any free one, said on its first line).
RECEIVER = """
import http.server, json, sys

class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size)
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {"unparsed": body.decode("utf-8", "replace")}
        print(json.dumps({"path": self.path, "body": doc}), flush=True)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("", int(sys.argv[1])), Sink)
print(json.dumps({"listening": server.server_port}), flush=True)  # port 0: the one it got
server.serve_forever()
"""


def objects(namespace: str, image: str) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": NAME}
    meta = {"name": NAME, "namespace": namespace, "labels": labels}
    container = {
        "name": "sink",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-c", RECEIVER, str(PORT)],
        "ports": [{"containerPort": PORT, "name": "http"}],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2},
        # No CPU request: after the load test the predictors' peak fills a 2-CPU node's
        # requests (the first kind run with it left this pod Pending: Insufficient cpu).
        "resources": {"requests": {"memory": "32Mi"}},
        "securityContext": container_security_context(run_as=PROJECT_UID),
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container]}}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"selector": labels, "ports": [{"port": PORT, "targetPort": PORT}]},
    }
    return [pod, service]


@dataclass(frozen=True)
class Notification:
    status: str  # firing, resolved
    alerts: list[dict[str, Any]]

    def names(self, **labels: str) -> set[str]:
        """The alert names it carries whose labels hold ``labels``."""
        return {
            str(a.get("labels", {}).get("alertname"))
            for a in self.alerts
            if all(a.get("labels", {}).get(k) == v for k, v in labels.items())
        }


def parse(log: str) -> list[Notification]:
    """The sink's log as notifications (lines that are not its JSON are skipped)."""
    found = []
    for line in log.splitlines():
        try:
            doc = json.loads(line)
            body = doc["body"]
            found.append(Notification(str(body["status"]), list(body["alerts"])))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def _kubectl(context: str, *args: str, stdin: str | None = None) -> str:
    run = subprocess.run(
        ["kubectl", "--context", context, *args],
        input=stdin, capture_output=True, text=True, timeout=READY_TIMEOUT_S + 30,
    )  # fmt: skip
    if run.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {run.stderr.strip()}")
    return run.stdout


def predictor_image(context: str, namespace: str) -> str:
    out = _kubectl(
        context, "-n", namespace, "get", "pods", "-l", ISVC_POD_LABEL,
        "-o", "jsonpath={.items[0].spec.containers[0].image}",
    )  # fmt: skip
    if not out:
        raise RuntimeError(f"no predictor pod in {namespace} to take the image from")
    return out


def start(context: str, namespace: str) -> None:
    """The sink, Ready."""
    image = predictor_image(context, namespace)
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects(namespace, image)})
    _kubectl(context, "apply", "-f", "-", stdin=doc)
    _kubectl(context, "-n", namespace, "wait", "--for=condition=Ready", f"pod/{NAME}",
             f"--timeout={READY_TIMEOUT_S}s")  # fmt: skip


def notifications(context: str, namespace: str) -> list[Notification]:
    return parse(_kubectl(context, "-n", namespace, "logs", f"pod/{NAME}"))


def stop(context: str, namespace: str) -> None:
    _kubectl(context, "-n", namespace, "delete", "pod,service", NAME, "--ignore-not-found",
             "--wait=false")  # fmt: skip
