"""`invoke status` on a cluster: one table of the cluster, its operators, the TFJobs, the
InferenceService with its ready replicas, the serving version's model card (its
publish.json, copied off the volume through the loader pod), and the last load test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from invoke.exceptions import UnexpectedExit

from common.errors import DistmlError
from k8s import manifests
from k8s.kube import KubeError
from k8s.objects import ISVC_API, TFJOB_API, ReplicaCounter, is_true, tfjob_state
from k8s.operators import ARGO_DEPLOYMENTS, ARGO_NAMESPACE, deployment_available
from ml.contract import model_card, read_publish, serving_record
from runtime.cluster.context import ClusterContext
from runtime.cluster.volume import Volume
from runtime.tables import table

Row = tuple[str, str]
CARD_TIMEOUT_S = 120  # the loader pod that reads the model card off the volume
# (label, namespace, Deployment) of what `up` installs, in install order.
COMPONENTS: list[tuple[str, str, str]] = [
    ("training operator", "kubeflow", "training-operator"),
    ("cert-manager", "cert-manager", "cert-manager-webhook"),
    ("kserve", "kserve", "kserve-controller-manager"),
]
KNATIVE_COMPONENTS: list[tuple[str, str, str]] = [  # before kserve, in knative mode
    ("istio", "istio-system", "istiod"),
    ("knative serving", "knative-serving", "controller"),
]


def status(cx: ClusterContext) -> int:
    state = cx.wd.state()
    p = cx.provider
    exists = p.exists(cx.c)
    rows: list[Row] = [
        ("item", "state"),
        (
            "cluster",
            f"{p.cluster} ({p.name}, context {p.context}): "
            + ("running" if exists else "not found (run `invoke up`)"),
        ),
    ]
    if exists:
        rows += _in_cluster(cx, state.serving_mode or "knative", state.argo)
        if state.deployed:
            rows += serving_card(cx)
    rows += _last_loadtest(state.last_loadtest)
    for line in table(rows).splitlines():
        cx.out(line)
    return 0


def _in_cluster(cx: ClusterContext, serving_mode: str, argo: bool) -> list[Row]:
    """The operators; when the API answered, the TFJobs and the InferenceService too."""
    components = list(COMPONENTS)
    if serving_mode == "knative":
        components[2:2] = KNATIVE_COMPONENTS
    if argo:  # `up --with-argo`
        components.append(("argo workflows", ARGO_NAMESPACE, ARGO_DEPLOYMENTS[0]))
    rows: list[Row] = []
    for label, ns, dep in components:
        try:
            ok = deployment_available(cx.kube, ns, dep)
        except KubeError as e:
            return [*rows, ("cluster API", f"not reachable: {e}")]
        rows.append((label, "available" if ok else "not installed / not available"))
    return rows + _tfjobs(cx) + [_inference_service(cx)]


def _tfjobs(cx: ClusterContext) -> list[Row]:
    rows = []
    # On a shared cluster, this work dir's jobs only (another tenant's are not distml's).
    mine = None if cx.owns_cluster else manifests.selector(instance=cx.instance)
    for job in cx.kube.list(TFJOB_API, "TFJob", cx.namespace, label_selector=mine):
        workers = ((job.get("status") or {}).get("replicaStatuses") or {}).get("Worker", {})
        rows.append(
            (
                f"TFJob {job['metadata']['name']}",
                f"{tfjob_state(job)}; workers "
                + ", ".join(f"{k} {v}" for k, v in sorted(workers.items())),
            )
        )
    return rows


def _inference_service(cx: ClusterContext) -> Row:
    isvc = cx.get(ISVC_API, "InferenceService", cx.service)
    if isvc is None:
        return ("InferenceService", "not deployed")
    ready = is_true(isvc, "Ready")
    url = (isvc.get("status") or {}).get("url", "-")
    replicas = ReplicaCounter(cx.kube, cx.namespace, cx.service)()
    return (
        f"InferenceService {cx.service}",
        f"{'Ready' if ready else 'not ready'}, {url}, {replicas} ready replica(s)",
    )


def serving_card(cx: ClusterContext) -> list[Row]:
    """The serving version's model card: its publish.json's serving copy, read off the
    volume (best effort: the rest of the status stands without it)."""
    s = cx.settings()
    local = Path(serving_record(cx.wd.root / "cluster-volume", s.service))
    local.unlink(missing_ok=True)  # never show an old copy as the current one
    try:
        Volume(cx, s).copy_out(
            [(serving_record(s.mount_path, s.service), local)], timeout=CARD_TIMEOUT_S
        )
    except (DistmlError, OSError, UnexpectedExit) as e:
        return [("serving model", f"could not read its publish.json off the volume ({e})")]
    return [(f"serving {label}", text) for label, text in model_card(read_publish(local))]


def _last_loadtest(path: str | None) -> list[Row]:
    if not (path and Path(path).is_file()):
        return []
    s: dict[str, Any] = json.loads(Path(path).read_text())
    return [
        (
            "last load test",
            f"{s['requests']} requests, {s['failures']} failed, {s['rps'] or 0:.1f} "
            f"req/s, replicas peak {s.get('replicas_peak')}",
        )
    ]
