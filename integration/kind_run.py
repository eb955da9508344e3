"""What ``nox -s integration`` runs, as data: its settings and its steps, in order, on
the cluster provider it is given (kind, minikube or k3d: the same plan on each).

The session (noxfile.py) runs each step as a command and tears down after; this module
only says what they are, so a test can read the plan without a cluster. Stdlib only:
nox imports it before any virtualenv exists.
"""

from __future__ import annotations

import os
from pathlib import Path

# Its own cluster and host port: a developer's `dist-ml` cluster (k3d or kind) or a local
# model server on 8080 is neither reused nor deleted by the integration run.
CLUSTER = "distml-it"
INGRESS_PORT = "18080"
PROVIDERS = ("kind", "minikube", "k3d")
DEFAULT_PROVIDER = "kind"
# Each provider's kubeconfig context for CLUSTER (k8s.providers names them the same way).
CONTEXTS = {"kind": f"kind-{CLUSTER}", "minikube": CLUSTER, "k3d": f"k3d-{CLUSTER}"}
CONTEXT = CONTEXTS[DEFAULT_PROVIDER]
NAMESPACE = "kubeflow"
# Its pods ask for little CPU: a 2-CPU machine holds the control plane, the operators and
# train-all's jobs only so (docs/cluster.md, "Resources").
CPU_REQUEST = "100m"
# Offline (no registry, no release URLs): a node image built here and the pinned install
# files' local mirror, passed on as the cluster settings that take them.
OFFLINE = {
    "DISTML_KIND_NODE_IMAGE": "INVOKE_CLUSTER_NODE_IMAGE",
    "DISTML_UPSTREAM_DIR": "INVOKE_CLUSTER_MANIFEST_MIRROR",
}
# The faults the run recovers from (python -m integration.recovery), each on its own model.
RECOVERY = (("delete-pod", "cnn"), ("sigterm", "cnn_dropout"))
BUDGET = ["--epochs", "1", "--steps-per-epoch", "5"]
# At most 2 predictors: the HPA keeps its peak for 5 minutes after the load, and on 2 CPUs
# 8 predictors' requests left the recovery checks' workers Pending for those 5 minutes; at
# 3, the node had no CPU left to request for a canary's own pod beside them (it asks what a
# predictor asks: runtime/canary/cluster_pod.py), and the canary check could not run.
DEPLOY = ["invoke", "deploy", "--max-replicas", "2"]
# Offline, `up` builds the project image, when the engine lacks it, from Debian packages
# (the local base, as `nox -s image` and the byo run build it), never FROM Docker Hub.
LOCAL_BASE = ["--base", "local"]
OFFLINE_IMAGE = (
    "offline: `up --base local` builds the project image, if the engine lacks it, from "
    "Debian packages (distml-base:bookworm, debootstrap): no registry is asked"
)
# --with-monitoring: distml's Prometheus (`up`), KEDA scaling the predictor on requests in
# flight (`deploy`), then the checks that read Prometheus: every predictor pod a target
# that is up, and every dashboard panel's PromQL giving data (integration/dashboard_check.py).
MONITORING_UP = ["--with-monitoring"]
MONITORING_DEPLOY = ["--scale-metric", "concurrency"]
TARGETS_CHECK = ["python", "-m", "integration.dashboard_check", "--targets"]
# After the load: every panel, the training row too (the jobs trained before it), and every
# training worker seen as an up target while it ran.
DASHBOARD_CHECK = ["python", "-m", "integration.dashboard_check", "--training"]
# Then a deliberate fault: every predictor stopped, its alert must fire and clear.
ALERT_FAULT = ["python", "-m", "integration.alert_fault"]
# Last, the same deploy, load test and status against a Prometheus set up as the Prometheus
# Operator sets one up (job <namespace>/<PodMonitor>, a 30 s scrape), named by cluster.prometheus.
OPERATOR_LIFECYCLE = ["python", "-m", "integration.operator_prometheus"]
# Then canary releases under load: a good version promoted with each step's measured share
# within tolerance, a bad one (every model trained one step) rolled back by itself.
CANARY_CHECK = ["python", "-m", "integration.canary_check"]
# Then a slow and an erroring version (the serving one, wrapped): each rolled back in its
# shadow phase, the stable's p99 meanwhile within 20% of its baseline.
CANARY_FAULTS = ["python", "-m", "integration.canary_faults"]
# With Argo: the pipeline again, ending in a canary release of a longer-trained version.
WORKFLOW_CANARY_CHECK = [*CANARY_CHECK, "--workflow"]
# After the first deploy: a fresh work dir's `invoke down` must keep the run's cluster and
# its Ready service (only the work dir that made a lab cluster deletes it).
FOREIGN_DOWN = ["python", "-m", "integration.foreign_down"]
PROMETHEUS_TARGETS = (
    f"/api/v1/namespaces/{NAMESPACE}/services/distml-prometheus:9090/proxy/api/v1/targets"
)


def context(provider: str | None = None) -> str:
    """The run's kubeconfig context on ``provider`` (default: the one the steps' settings
    name, ``INVOKE_RUNTIME``, else kind)."""
    return CONTEXTS[provider or os.environ.get("INVOKE_RUNTIME") or DEFAULT_PROVIDER]


def steps(
    mode: str,
    data_dir: str | None,
    argo: bool = False,
    offline: bool = False,
    monitoring: bool = False,
    provider: str = DEFAULT_PROVIDER,
) -> list[list[str]]:
    """The lifecycle, in order: each step an ``invoke`` argument list, or a ``python -m``
    module's (``["python", "-m", ...]``). The task chain, or (``argo``) the pipeline as
    one Argo Workflow. ``offline``: no step asks a registry (``LOCAL_BASE``).
    ``monitoring``: with distml's Prometheus, KEDA on concurrency, and their checks; the
    load test then also holds the server's count to Locust's (within 1%). The task chain
    checks, after its first deploy, that a fresh work dir's `down` keeps the cluster
    (``FOREIGN_DOWN``)."""
    source = ["--source-dir", data_dir] if data_dir else []  # offline: no download
    base = LOCAL_BASE if offline else []
    watched = MONITORING_UP if monitoring else []
    up = ["invoke", "up", "--runtime", provider, "--serving-mode", mode, *source, *base, *watched]
    # Scale-out is judged after the load too: an HPA's new pods turn ready after it.
    load = ["invoke", "loadtest", "--concurrency", "5", "--duration", "60s", "--expect-scale-out"]
    # With monitoring: every predictor scraped before the load, every panel after it.
    before, after = ([TARGETS_CHECK], [DASHBOARD_CHECK, ALERT_FAULT]) if monitoring else ([], [])
    if argo:  # ingest -> TFJobs in parallel -> select -> serve, watched to the end
        workflow = ["invoke", "workflow", "--watch", *BUDGET]
        canary = [WORKFLOW_CANARY_CHECK] if monitoring else []
        return [[*up, "--with-argo"], workflow, *before, load, *after, *canary]
    deploy = [*DEPLOY, *(MONITORING_DEPLOY if monitoring else [])]
    recover = [["python", "-m", "integration.recovery", *fault] for fault in RECOVERY]
    return [
        up,
        ["invoke", "train-all", *BUDGET],  # as many jobs at once as the node holds
        deploy,
        FOREIGN_DOWN,
        *before,
        load,
        *after,
        *recover,
        deploy,  # the recovered models trained longest: a new version
        ["invoke", "rollback"],  # and back to the first one
        ["invoke", "status"],
        # The faults last: on 2 CPUs a canary that burns CPU slows the stable on the same
        # node, which its check reports; that must not hide the Operator-style lifecycle.
        *([CANARY_CHECK, OPERATOR_LIFECYCLE, CANARY_FAULTS] if monitoring else []),
    ]


def env(
    data_dir: str | None, node_image: str | None = None, provider: str = DEFAULT_PROVIDER
) -> dict[str, str]:
    """The settings every step gets: its provider, own cluster, work dir and port; small
    CPU requests; offline, the node image and install files named locally (``node_image``,
    the one ``--offline`` built, before ``DISTML_KIND_NODE_IMAGE``)."""
    out = {
        "INVOKE_RUNTIME": provider,
        "INVOKE_WORKDIR": str(workdir()),
        "INVOKE_CLUSTER_NAME": CLUSTER,
        "INVOKE_CLUSTER_NAMESPACE": NAMESPACE,  # the one recovery.py and diagnostics read
        "INVOKE_CLUSTER_INGRESS_PORT": INGRESS_PORT,
        "INVOKE_CLUSTER_WORKER_CPU": CPU_REQUEST,
        "INVOKE_CLUSTER_PREDICTOR_CPU": CPU_REQUEST,
        # --with-monitoring: where Alertmanager sends the alerts (integration.alert_sink,
        # started by the alert fault's check); unused without distml's Prometheus.
        "INVOKE_CLUSTER_ALERT_WEBHOOK": f"http://distml-alert-sink.{NAMESPACE}.svc:8080/alerts",
    }
    if data_dir:
        out["DISTML_DATA_DIR"] = data_dir
    for given, setting in OFFLINE.items():
        if os.environ.get(given):
            out[setting] = os.environ[given]
    if node_image:
        out["INVOKE_CLUSTER_NODE_IMAGE"] = node_image
    return out


def workdir() -> Path:
    """The run's work dir (state, reports, diagnostics), in the checkout."""
    return Path(__file__).resolve().parents[1] / ".distml-integration"


def minikube_home() -> Path:
    """The run's MINIKUBE_HOME: distml keeps it in the work dir (k8s.providers.lab.Minikube)."""
    return workdir() / "minikube"


def node_logs(provider: str, out_dir: Path) -> tuple[str, list[str]]:
    """The provider's own dump of its node's logs: (name, command)."""
    if provider == "minikube":
        home = f"MINIKUBE_HOME={minikube_home()}"
        log = str(out_dir / "minikube-logs.txt")
        return "minikube-logs", ["env", home, "minikube", "-p", CLUSTER, "logs", "--file", log]
    if provider == "k3d":
        return "k3d-node-logs", ["docker", "logs", f"k3d-{CLUSTER}-server-0"]
    return "kind-export-logs", [
        "kind",
        "export",
        "logs",
        str(out_dir / "kind-logs"),
        "--name",
        CLUSTER,
    ]


def diagnostics(
    invoke: str, out_dir: Path, provider: str = DEFAULT_PROVIDER
) -> dict[str, tuple[list[str], int | None]]:
    """After a failure: name -> (command, lines to print or None for all)."""
    kubectl = ["kubectl", "--context", context(provider)]
    logs_name, logs = node_logs(provider, out_dir)
    return {
        "invoke-status": ([invoke, "status"], None),
        "pods": ([*kubectl, "get", "pods", "-A", "-o", "wide"], None),
        "events": ([*kubectl, "get", "events", "-A", "--sort-by=.lastTimestamp"], 100),
        "describe": ([*kubectl, "describe", "tfjobs,inferenceservices", "-n", NAMESPACE], None),
        "hpa": ([*kubectl, "describe", "hpa", "-n", NAMESPACE], None),
        # --with-monitoring: what KEDA decided, and what Prometheus scrapes (its targets).
        "scaledobjects": ([*kubectl, "describe", "scaledobjects", "-n", NAMESPACE], None),
        "prometheus-targets": ([*kubectl, "get", "--raw", PROMETHEUS_TARGETS], None),
        "workflows": ([*kubectl, "get", "workflows", "-n", NAMESPACE, "-o", "yaml"], None),
        logs_name: (logs, None),
    }
