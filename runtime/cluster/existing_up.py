"""The steps of `invoke up` that differ on a cluster distml did not create: reach it
through its context (never create it), leave its namespace as it is, push the image to a
registry instead of side-loading it, and pick the volume's class and access mode from
what the cluster has (k8s.providers.storage)."""

from __future__ import annotations

from dataclasses import replace

from k8s import manifests
from k8s.client.kube import KubeError
from k8s.client.ownership import owned, refusal, written_names
from k8s.providers.existing import Existing, ExistingClusterError
from k8s.providers.settings import Settings
from k8s.providers.storage import CLASS_SETTING, StorageError, choose, unlisted
from ml.contract import MODEL_TYPES
from runtime.cluster import access_check, identity
from runtime.cluster.apply import apply_reporting
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.cluster.identity import Identity

PVC = "PersistentVolumeClaim"


def reach(cx: ClusterContext) -> Identity | None:
    """Say which cluster this is, or fail with what kubectl said; return its identity."""
    p = cx.provider
    assert isinstance(p, Existing), "existing_up runs only with --runtime existing"
    cx.out(f"== cluster: context {p.context} (an existing cluster: never created or deleted)")
    try:
        version = p.reach(cx.c)
    except ExistingClusterError as e:
        raise ClusterError(str(e)) from e
    if cx.dry:
        return None
    # cx.kube refuses another cluster than the one recorded
    found, note = identity.read(cx.kube, cx.namespace)
    try:
        nodes = [n["metadata"]["name"] for n in cx.kube.list("v1", "Node")]
        cx.out(f"cluster: Kubernetes {version}, {len(nodes)} node(s): {', '.join(nodes)}")
    except KubeError as e:  # a user whose rights end at their namespace (a 403 only)
        if not e.forbidden:
            raise ClusterError(str(e)) from e
        cx.out(f"cluster: Kubernetes {version}; its nodes cannot be listed ({e})")
    cx.out(f"cluster: {found.describe()}")
    if note:
        cx.out(note)
    return found


def claim(cx: ClusterContext, s: Settings, found: Identity | None) -> None:
    """Before the first write: every name distml writes in the namespace is free or this
    work dir's (else refuse, naming each owner); then record the context and the cluster,
    so that later tasks (`down` above all) act on this cluster and no other."""
    access_check.require(cx, s)  # first: may this user do what distml needs here?
    if cx.dry or found is None:
        return
    state = cx.wd.state()
    taken = [
        obj
        for api, kind, name in written_names(s, MODEL_TYPES)
        if (obj := cx.get(api, kind, name)) is not None
        and not owned(obj, state.instance, state.volume_uid if kind == PVC else None)
    ]
    if taken:
        raise ClusterError(refusal(taken, s.namespace, when="up refused before any write"))
    cx.wd.update_state(
        context=cx.provider.context,
        namespace=s.namespace,
        runtime=cx.provider.name,
        cluster_server=found.server,
        cluster_uid=found.uid,
        cluster_ca=found.ca,
    )


def namespace(cx: ClusterContext, s: Settings) -> None:
    """Make the namespace unless it is there; one that is there is left as it is."""
    try:
        found = not cx.dry and cx.kube.get("v1", "Namespace", s.namespace) is not None
    except KubeError as e:  # rights in the namespace only: it is there, or nothing will work
        cx.out(f"namespace {s.namespace}: cannot be read ({e}); used as it is")
        return
    if found:
        cx.out(f"namespace {s.namespace}: exists, used as it is")
        return
    apply_reporting(cx, manifests.namespace(s))


def _classes(cx: ClusterContext) -> list[dict] | None:
    """The cluster's StorageClasses; None when this user may not list them (a 403 only)."""
    try:
        return cx.kube.list("storage.k8s.io/v1", "StorageClass")
    except KubeError as e:
        if not e.forbidden:
            raise ClusterError(str(e)) from e
        cx.out(f"note: StorageClasses cannot be listed ({e}): {CLASS_SETTING} names one")
        return None


def storage(cx: ClusterContext, s: Settings, asked_class: str | None) -> Settings:
    """The volume's class and access mode, said in one line and recorded (a claim's spec
    cannot change: a claim already there keeps its own)."""
    claim = cx.get("v1", PVC, s.volume)
    if claim is not None:
        cx.require_ours(claim, f"up: the volume {s.volume}")  # checked by `claim` already
    if claim is not None:
        spec = claim.get("spec") or {}
        chosen = replace(
            s,
            storage_class_name=spec.get("storageClassName") or s.storage_class_name,
            volume_access=(spec.get("accessModes") or [s.volume_access])[0],
        )
        cx.out(f"volume {s.volume}: exists ({chosen.storage_class}, {chosen.volume_access})")
    elif cx.dry:
        return s
    else:
        classes, asked = _classes(cx), asked_class or cx.storage_class
        try:
            found = (
                unlisted(asked, cx.volume_access)
                if classes is None
                else choose(classes, asked, cx.volume_access)
            )
        except StorageError as e:
            raise ClusterError(str(e)) from e
        cx.out(found.line(s.volume))
        chosen = replace(s, storage_class_name=found.storage_class, volume_access=found.access)
    cx.wd.update_state(storage_class=chosen.storage_class, volume_access=chosen.volume_access)
    return chosen


def check_pull_secret(cx: ClusterContext, s: Settings) -> None:
    if not s.image_pull_secret or cx.dry:
        return
    if cx.get("v1", "Secret", s.image_pull_secret) is None:
        raise ClusterError(
            f"cluster.image_pull_secret names Secret {s.image_pull_secret!r}, which namespace "
            f"{s.namespace} does not have: `"
            + cx.provider.kubectl(
                f"-n {s.namespace} create secret docker-registry {s.image_pull_secret} "
                "--docker-server=REGISTRY --docker-username=USER --docker-password=..."
            )
            + "`"
        )


def require_registry(cx: ClusterContext, s: Settings) -> None:
    """Checked before anything is installed: the pods need a registry to pull from."""
    if "/" not in s.image and not cx.dry:
        raise ClusterError(
            "an existing cluster pulls the image from a registry: push it with `invoke build "
            "--push REGISTRY[/REPO]` (or set cluster.registry, INVOKE_CLUSTER_REGISTRY); a "
            "plain-HTTP registry for a local cluster: docs/cluster.md"
        )


def push_image(cx: ClusterContext, s: Settings, local: str) -> str:
    """Push the built image under the name the pods run (``s.image``); return that name
    pinned to the pushed digest, and record it for the later tasks."""
    from runtime.image import ImageError
    from runtime.registry import push

    if "/" not in s.image:
        cx.out(f"note (a real run would stop here): {s.image} names no registry")
        return s.image
    registry = s.image.split("@", 1)[0].rsplit("/", 1)[0]
    try:
        name = push(cx.c, cx.docker, local, registry, cx.out)
    except ImageError as e:
        raise ClusterError(str(e)) from e
    if not cx.dry and "@" in name:
        cx.wd.update_state(pushed=name)
        cx.out(f"image: pods run {name} (pinned to the pushed digest)")
    return name
