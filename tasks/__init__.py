"""distml tasks: from an empty laptop to an autoscaled image classifier, and back.

    invoke up train-all deploy loadtest --concurrency 5
    invoke status
    invoke down [--purge]

Thin by design: parse flags, pick the runtime, call library code in ``runtime/``.
Every config key below can be set in ``invoke.yaml`` or as ``INVOKE_<KEY>`` (for example
``INVOKE_RUNTIME=local``, ``INVOKE_WORKDIR=/tmp/distml``).
"""

from __future__ import annotations

from invoke import Collection

from k8s.providers.settings import CPU_REQUEST_SETTINGS
from ml import contract
from runtime.cli import call as _call  # noqa: F401  (tests drive a verb as a task does)
from runtime.requests import DEFAULT_HTTP_PORT
from tasks.access_role import access_role
from tasks.chain import (
    canary,
    deploy,
    down,
    loadtest,
    moved,
    rollback,
    status,
    train,
    train_all,
    up,
)
from tasks.extras import build, lock_image, render, tensorboard, workflow

ns = Collection(
    up,
    train_all,
    train,
    deploy,
    rollback,
    canary,
    loadtest,
    status,
    down,
    moved,
    workflow,
    tensorboard,
    render,
    build,
    lock_image,
    access_role,
)
ns.configure(
    {
        "runtime": "auto",
        "workdir": ".distml",
        "service": contract.DEFAULT_SERVICE,
        "source_dir": "",
        "workers": contract.DEFAULT_WORKERS,
        "profile": contract.DEFAULT_PROFILE,
        "max_restarts": contract.DEFAULT_MAX_RESTARTS,
        "http_port": DEFAULT_HTTP_PORT,
        "tensorboard_port": contract.TENSORBOARD_PORT,
        "docker": "",
        # Cluster runtimes: INVOKE_CLUSTER_NAME, INVOKE_CLUSTER_NAMESPACE, ...
        "cluster": {
            "name": "dist-ml",
            "namespace": "",  # "": kubeflow on a cluster distml makes, distml on an existing one
            "ingress_port": 8080,
            "node_image": "",  # kind/k3d: the nodes' image ("": the pinned one)
            "manifest_mirror": "",  # the pinned install files, applied instead of URLs
            # --runtime existing (docs/cluster.md, "Bring your own cluster"):
            "context": "",  # the kubeconfig context (the first `up` needs it named)
            "registry": "",  # REGISTRY[/REPO] pods pull the image from ("": build --push's)
            "image_pull_secret": "",  # a Secret in the namespace, for a private registry
            "storage_class": "",  # the volume's class ("": the provider's, or the default)
            "volume_access": "",  # ReadWriteOnce / ReadWriteMany ("": from the class)
            # Istio's gateway Service when `up --install-operators` installs it on an
            # existing cluster ("": ClusterIP; LoadBalancer only when asked for)
            "istio_gateway_type": "",
            # A Prometheus of yours for `status` and `deploy --scale-metric` (KEDA's trigger):
            # NAMESPACE/SERVICE:PORT ("": distml's own, `up --with-monitoring`)
            "prometheus": "",
            # Where distml's Alertmanager sends the alerts (`up --with-monitoring`): an
            # http(s) URL that takes Alertmanager's webhook JSON ("": nowhere; `status`)
            "alert_webhook": "",
            # Where it sends its always-firing watchdog every minute (a dead man's switch)
            "watchdog_webhook": "",
            **dict.fromkeys(CPU_REQUEST_SETTINGS, ""),  # "": the built-in requests
        },
    }
)
