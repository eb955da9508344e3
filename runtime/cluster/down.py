"""`invoke down` on a cluster: delete the cluster (or, with --keep-cluster, only what distml
applied in it, and Argo Workflows when `up --with-argo` installed it); with --purge also
the images it built and the work dir."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from k8s import manifests
from k8s.argo_status import WORKFLOW_API, WORKFLOW_KIND
from k8s.manifests.names import is_ours
from k8s.objects import DEPLOYMENT_API, ISVC_API, JOB_API, TFJOB_API
from k8s.operators import Installer
from runtime.cluster.apply import delete_and_wait
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.workdir import MARKER

# What distml applies in its namespace, deleted by label (the PVC is waited for apart).
# The Workflow first: its TFJobs go with it; then its ServiceAccount, Role and RoleBinding.
RBAC_API = "rbac.authorization.k8s.io/v1"
OURS: tuple[tuple[str, str], ...] = (
    (WORKFLOW_API, WORKFLOW_KIND),
    (RBAC_API, "RoleBinding"),
    (RBAC_API, "Role"),
    ("v1", "ServiceAccount"),
    (ISVC_API, "InferenceService"),
    ("serving.kserve.io/v1alpha1", "ServingRuntime"),
    (TFJOB_API, "TFJob"),
    (JOB_API, "Job"),
    ("v1", "Pod"),
    (DEPLOYMENT_API, "Deployment"),
    ("v1", "Service"),
)
PVC_DELETE_TIMEOUT_S = 300


def down(cx: ClusterContext, *, purge: bool, keep_cluster: bool) -> int:
    p = cx.provider
    state = cx.wd.state()
    owned = cx.settings().owns_cluster
    if not owned and not p.context:
        cx.out("no existing cluster is set up for this work dir: nothing to delete there")
    elif not owned:
        # Never the cluster, its operators or CRDs (Argo's included), or anyone else's objects.
        _delete_objects(cx)
    elif keep_cluster:
        _delete_objects(cx)
        if state.argo:
            Installer(cx.c, cx.kube, p, cx.settings(), cx.out, cx.clock).remove_argo()
    elif p.exists(cx.c):
        cx.out(f"deleting cluster {p.cluster} ({p.name}) and everything in it")
        p.delete(cx.c)
    else:
        cx.out(f"cluster {p.cluster}: not found, nothing to delete")
    if purge:
        _purge(cx, state.built_images)
    elif cx.wd.exists() and not cx.dry:
        # The volume is gone either way: the next task needs `invoke up` (quick when the
        # cluster and its operators were kept).
        cx.wd.update_state(
            up=False,
            deployed=False,
            argo=None,  # removed above, or gone with the cluster
            serving_mode=state.serving_mode if keep_cluster or not owned else None,
            # The next `up` may choose another context, class and access mode.
            context=None,
            storage_class=None,
            volume_access=None,
        )
    return 0


def _purge(cx: ClusterContext, images: Sequence[str]) -> None:
    """The images distml built, and the work dir (only one distml made)."""
    for image in images:
        cx.c.run(f"{cx.docker} image rm {image}", warn=True)
        cx.out(f"removed image {image}")
    if cx.wd.exists():
        if not cx.dry:
            shutil.rmtree(cx.wd.root)
        cx.out(f"removed {cx.wd.root}")
    elif cx.wd.root.exists():
        raise ClusterError(
            f"{cx.wd.root} has no {MARKER} marker, so it was not made by distml; not deleting it"
        )


def _delete_objects(cx: ClusterContext) -> None:
    """--keep-cluster: delete what distml applied, keep the cluster and operators."""
    s = cx.settings()
    ns = cx.namespace
    gone = []
    for api, kind in OURS:
        for obj in cx.kube.list(api, kind, ns, label_selector=manifests.selector()):
            name = obj["metadata"]["name"]
            if cx.kube.delete(api, kind, name, ns):
                gone.append(f"{kind} {name}")
    # Argo relabels its cache ConfigMap (k8s.manifests.argo_workflow): deleted by name, and with
    # the volume, or the next workflow would skip ingestion into an empty volume. It and the
    # Role that lets Argo's controller write it live in Argo's namespace.
    # On a cluster distml did not create, only when this work dir used Argo: a user with
    # rights in their own namespace only must still be able to run `down`.
    argo = manifests.ARGO_NAMESPACE
    for api, kind, name in (
        ("v1", "ConfigMap", manifests.WORKFLOW_CACHE),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", manifests.WORKFLOW_CACHE_WRITER),
        ("rbac.authorization.k8s.io/v1", "Role", manifests.WORKFLOW_CACHE_WRITER),
    ):
        if (s.owns_cluster or cx.wd.state().argo) and cx.kube.delete(api, kind, name, argo):
            gone.append(f"{kind} {argo}/{name}")
    claim = cx.get("v1", "PersistentVolumeClaim", s.volume)
    if claim is not None and not (s.owns_cluster or is_ours(claim)):
        cx.out(f"PersistentVolumeClaim {s.volume}: not distml's (no distml labels), kept")
    elif claim is not None:
        # Waited for: an `up` right after must not re-apply a claim that is going away.
        delete_and_wait(cx, "v1", "PersistentVolumeClaim", s.volume, timeout=PVC_DELETE_TIMEOUT_S)
        gone.append(f"PersistentVolumeClaim {s.volume} (its data with it)")
    cx.out("deleted: " + (", ".join(gone) if gone else "nothing (none found)"))
    cx.out(
        f"kept the cluster {cx.provider.cluster} and its operators; `invoke up` makes "
        "the volume and dataset again"
        + ("" if s.owns_cluster else f" (namespace {ns} is left as it is)")
    )
