"""`invoke down` on a cluster: delete the cluster (or, with --keep-cluster, only what distml
applied in it, and Argo Workflows when `up --with-argo` installed it); with --purge also
the images it built and the work dir."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence

from k8s import manifests
from k8s.client.objects import DEPLOYMENT_API, ISVC_API, JOB_API, TFJOB_API
from k8s.client.ownership import owned, owner, proven
from k8s.install.operators import Installer, components
from k8s.manifests.names import INSTANCE_LABEL
from k8s.providers.settings import Settings
from k8s.waits.argo_status import WORKFLOW_API, WORKFLOW_KIND
from runtime.cluster import lab_owner
from runtime.cluster.apply import delete_and_wait
from runtime.cluster.context import ClusterContext, ClusterError, Out
from runtime.workdir import MARKER, Workdir
from runtime.workdir import origin as workdir_identity

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
    ("v1", "ConfigMap"),  # distml's Prometheus's configuration (up --with-monitoring)
    ("v1", "Secret"),  # its Alertmanager's configuration (up --with-monitoring)
)
PVC_DELETE_TIMEOUT_S = 300


def swept(s: Settings, recorded: Iterable[str] = ()) -> tuple[tuple[str, str], ...]:
    """:data:`OURS`, less the kinds ``s``'s options never write: a user who never ran
    ``--with-argo`` or ``--with-monitoring`` needs no right to list or delete Roles,
    RoleBindings, Secrets or Workflows (the printed Role asks only what this sweeps);
    plus every kind of ``recorded`` (the work dir's object uids, ``"Kind ns/name"``)."""
    from k8s.client.ownership import written_names
    from ml.contract import MODEL_TYPES

    written = {(api, kind) for api, kind, _ in written_names(s, MODEL_TYPES)}
    kinds = {key.split(" ", 1)[0] for key in recorded}
    return tuple(k for k in OURS if k in written or k[1] in kinds)


# What `up` recorded of the cluster it set up and the volume it made there (None: cleared).
CLUSTER_RECORD: dict[str, None] = dict.fromkeys(
    (
        "context",
        "namespace",
        "cluster_server",
        "cluster_uid",
        "cluster_ca",
        "object_uids",  # what was deleted forgot its uid; what is left is not ours to keep
        "storage_class",
        "volume_access",
        "volume_uid",
    )
)


def down(cx: ClusterContext, *, purge: bool, keep_cluster: bool) -> int:
    p = cx.provider
    state = cx.wd.state()
    owned = cx.settings().owns_cluster
    if not owned and not p.context:
        cx.out("no existing cluster is set up for this work dir: nothing to delete there")
    elif not owned:
        # Never the cluster, its operators or CRDs (Argo's included), or anyone else's objects.
        _delete_objects(cx)
    elif keep_cluster and (whose := lab_owner.kept(cx)):
        cx.out(whose)  # another work dir's lab cluster (or nobody's): nothing of it touched
    elif keep_cluster:
        _delete_objects(cx)  # the InferenceService, and its ScaledObject, first
        installer = Installer(cx.c, cx.kube, p, cx.settings(), cx.out, cx.clock)
        if state.argo:
            installer.remove_argo()
        if state.monitoring and "keda" in _steps(cx.settings()):
            installer.remove_keda()
    elif not p.exists(cx.c):
        cx.out(f"cluster {p.cluster}: not found, nothing to delete")
    elif whose := lab_owner.kept(cx):
        cx.out(whose)  # only the work dir that made a lab cluster deletes it
    else:
        cx.out(f"deleting cluster {p.cluster} ({p.name}) and everything in it")
        p.delete(cx.c)
        if not cx.dry:
            cx.wd.update_state(made_cluster=None)
    if purge:
        _purge(cx, state.built_images)
    elif cx.wd.exists() and not cx.dry:
        # The volume is gone either way: the next task needs `invoke up` (quick when the
        # cluster and its operators were kept).
        cx.wd.update_state(
            up=False,
            deployed=False,
            argo=None,  # removed above, or gone with the cluster
            monitoring=None,  # likewise (on a cluster distml did not create: KEDA stays)
            scale_metric=None,
            serving_mode=state.serving_mode if keep_cluster or not owned else None,
            **CLUSTER_RECORD,  # the next `up` may choose another context, class, mode
        )
    return 0


def _steps(s: Settings) -> tuple[str, ...]:
    return components(s.provider, s.serving_mode, s.with_argo, s.with_monitoring)


def forget(wd: Workdir, out: Out, *, renew: bool = False) -> int:
    """`down --forget`: clear the work dir's record of its cluster (the context and the
    cluster behind it, the volume, what was up) without a call to any cluster. A copy of
    another work dir (``renew``) forgets all of the original's record: a new work dir."""
    if renew and workdir_identity.original(wd) is not None:
        workdir_identity.renew(wd, out)
        return 0
    state = wd.state()
    if not state.runtime and not state.context:
        out("this work dir records no cluster: nothing to forget")
        return 0
    wd.update_state(
        up=False,
        deployed=False,
        argo=None,
        monitoring=None,
        scale_metric=None,
        runtime=None,
        serving_mode=None,
        **CLUSTER_RECORD,
    )
    where = f"context {state.context}" if state.context else f"the {state.runtime} cluster"
    out(
        f"forgot {where}: no cluster was touched, and whatever this work dir made there is "
        f"left as it is (its objects carry the label {INSTANCE_LABEL}={state.instance})"
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
    """--keep-cluster, or a cluster distml did not create: delete what this work dir
    applied (selected on its instance label), keep the cluster and operators."""
    s = cx.settings()
    ns = cx.namespace
    instance = cx.instance
    if not s.owns_cluster and not instance:
        cx.out(
            "this work dir has no instance id (set up by an older distml): its objects cannot "
            "be told from others', so none is deleted; delete them by hand"
        )
        return
    gone, kept = [], []
    uids = cx.uids
    for api, kind in swept(s, uids):
        mine = manifests.selector(instance=instance)
        for obj in cx.kube.list(api, kind, ns, label_selector=mine):
            name = obj["metadata"]["name"]
            if not (s.owns_cluster or proven(obj, instance, uids)):
                meta = obj.get("metadata") or {}
                # An owned object is its owner's for the garbage collector to remove (a
                # predictor's pods); one being deleted is already going.
                if not (meta.get("ownerReferences") or meta.get("deletionTimestamp")):
                    kept.append(f"{kind} {name}")  # the label alone: anyone's copy
            elif cx.delete_checked(api, obj):
                gone.append(f"{kind} {name}")
    gone += _delete_argo_cache(cx, s)
    gone += _delete_volume(cx, s)
    cx.out("deleted: " + (", ".join(gone) if gone else "nothing (none found)"))
    if kept:
        cx.out(
            f"kept: {', '.join(kept)}: they carry this work dir's label "
            f"{INSTANCE_LABEL}={instance} but are not objects it made (their uids are not the "
            "ones it recorded): a copy of the label proves nothing. Delete them by hand if "
            f"they are yours: `{cx.provider.kubectl(f'-n {ns} delete KIND NAME')}`"
        )
    cx.out(
        f"kept the cluster {cx.provider.cluster} and its operators; `invoke up` makes "
        "the volume and dataset again"
        + ("" if s.owns_cluster else f" (namespace {ns} is left as it is)")
    )


def _delete_argo_cache(cx: ClusterContext, s: Settings) -> list[str]:
    """This namespace's Argo memoization cache, deleted with the volume (else the next
    workflow would skip ingestion into an empty volume), and the Role and RoleBinding that
    let Argo's controller write it: in Argo's namespace, named per distml namespace
    (``manifests.workflow_cache_name``). On a cluster distml did not create, only when
    this work dir used Argo (a user with rights in their own namespace only must still be
    able to run `down`), the Role and RoleBinding only when this work dir's, and the cache
    only with them (Argo strips its labels when it writes an entry)."""
    if not (s.owns_cluster or cx.wd.state().argo):
        return []
    argo = manifests.ARGO_NAMESPACE
    writer = manifests.cache_writer_name(s.namespace)
    rbac = [(RBAC_API, "RoleBinding", writer), (RBAC_API, "Role", writer)]
    mine = [
        (api, obj)
        for api, kind, name in rbac
        if (obj := cx.kube.get(api, kind, name, argo)) is not None
        and (s.owns_cluster or proven(obj, cx.instance, cx.uids))
    ]
    cache_name = manifests.workflow_cache_name(s.namespace)
    cache = cx.kube.get("v1", "ConfigMap", cache_name, argo) if s.owns_cluster or mine else None
    gone = []
    for api, obj in mine + ([("v1", cache)] if cache is not None else []):
        if cx.delete_checked(api, obj):  # the object read here, by its uid
            gone.append(f"{obj['kind']} {argo}/{obj['metadata']['name']}")
    return gone


def _delete_volume(cx: ClusterContext, s: Settings) -> list[str]:
    """The claim `up` made (on a cluster distml did not create: the one whose uid this
    work dir recorded, never another of the name); waited for, so that an `up` right after
    does not re-apply a claim that is going away."""
    claim = cx.get("v1", "PersistentVolumeClaim", s.volume)
    if claim is None:
        return []
    if not s.owns_cluster and not owned(claim, cx.instance, cx.wd.state().volume_uid):
        cx.out(f"PersistentVolumeClaim {s.volume}: not this work dir's ({owner(claim)}), kept")
        return []
    delete_and_wait(cx, "v1", "PersistentVolumeClaim", s.volume, timeout=PVC_DELETE_TIMEOUT_S)
    return [f"PersistentVolumeClaim {s.volume} (its data with it)"]
