"""The canary's own server on a cluster: one Pod and its Service, for the time of a canary.

The predictor pods hold only the stable; each forwards the canary's share of its requests,
request by request, to this Service (``ml serve --canary-elsewhere --canary-host``,
``ml/server/canary.py``), and in a shadow phase a mirrored copy of a share of the rest.
So the share stays exact per request, and the canary has its own CPU, memory and batcher:
a slow, leaking or crashing canary cannot slow the stable or take it down, and the
stable's figures stay a baseline it cannot distort. Its requests are still counted by the
predictor pods, under its version: this pod carries no InferenceService label, so
Prometheus never scrapes it, and nothing is counted twice.

One pod, with a predictor's resources (``Settings.predictor_resources``) and no
autoscaler: a canary answers a share of the load for minutes. It asks what a predictor
asks, CPU included, so that under contention it gets the CPU weight a predictor pod gets
and its latency is compared on equal terms (asking none, the lowest weight, an identical
version's copies reached p99 94 ms on a saturated kind node against the stable's ~45, and
a better version was rolled back); its limit keeps a CPU-hungry canary from taking more
than one predictor's share. Where no node has that much unrequested,
``runtime/canary/cluster_pod.py`` says so within seconds. ``restartPolicy: Always``, so a
crash or an OOM kill shows as a restart, which fails the analysis
(``runtime/canary/cluster.py``).
"""

from __future__ import annotations

from typing import Any

from k8s.manifests.names import NO_ISTIO_SIDECAR, PREDICTOR_PORT, labels
from k8s.manifests.placement import volume_labels
from k8s.manifests.pods import _project_container, _project_pod_spec, _volume, _volume_mount, meta
from k8s.providers.settings import Settings
from ml import contract

COMPONENT = "canary-server"
#: Which service's canary a pod is (the Service selects on it with the component).
CANARY_OF_LABEL = "distml/canary-of"
#: The predictor's ``--canary-host``: KServe puts the InferenceService's name for {{.Name}}.
HOST_TEMPLATE = "{{.Name}}-canary"


def name(s: Settings) -> str:
    """The pod's and the Service's name, the host the predictor forwards to: the
    InferenceService's name and ``-canary`` (a DNS label: the service name is at most
    63 - len("-predictor-00001"))."""
    return HOST_TEMPLATE.replace("{{.Name}}", s.service)


def url(s: Settings) -> str:
    """What ``weight.json`` names: the Service, by its short name (the predictor pods are in
    its namespace; ``--canary-host`` allows exactly that host)."""
    return f"http://{name(s)}:{PREDICTOR_PORT}"


def _selector(s: Settings) -> dict[str, str]:
    return labels(COMPONENT, **{CANARY_OF_LABEL: s.service})


def canary_pod(s: Settings) -> dict[str, Any]:
    """``ml serve`` of the service's canary folder, the volume read-only; Ready once the
    canary version has loaded."""
    command = contract.serve(
        contract.canary_dir(s.mount_path, s.service), s.service, host="0.0.0.0",
        http_port=PREDICTOR_PORT,
    )  # fmt: skip
    resources = s.predictor_resources.as_dict()
    container = _project_container(s, "kserve-container", command, resources=resources)
    container["volumeMounts"] = [_volume_mount(s, read_only=True)]
    container["ports"] = [{"containerPort": PREDICTOR_PORT, "name": "http"}]
    container["readinessProbe"] = {
        "httpGet": {"path": contract.READY_PATH, "port": "http"},
        "periodSeconds": 2,
        "failureThreshold": 2,
        "timeoutSeconds": 2,
    }
    spec = _project_pod_spec(s, container, restart_policy="Always")
    spec["volumes"] = [_volume(s, read_only=True)]
    spec["terminationGracePeriodSeconds"] = 5
    metadata = meta(
        name(s), s.namespace, COMPONENT,
        extra_labels={CANARY_OF_LABEL: s.service, **volume_labels(s)},
        annotations=NO_ISTIO_SIDECAR,
    )  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def canary_service(s: Settings) -> dict[str, Any]:
    """The ClusterIP Service the predictor pods forward to."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(
            name(s), s.namespace, COMPONENT, extra_labels={CANARY_OF_LABEL: s.service}
        ),
        "spec": {
            "selector": _selector(s),
            "ports": [{"name": "http", "port": PREDICTOR_PORT, "targetPort": "http"}],
        },
    }
