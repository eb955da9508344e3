"""The steps of `invoke up` that differ on a cluster distml did not create: reach it
through its context (never create it), leave its namespace as it is, push the image to a
registry instead of side-loading it, and pick the volume's class and access mode from
what the cluster has (k8s.storage)."""

from __future__ import annotations

from dataclasses import replace

from k8s import manifests
from k8s.existing import ExistingClusterError
from k8s.manifests.names import is_ours
from k8s.settings import Settings
from k8s.storage import StorageError, choose
from runtime.cluster.apply import apply_reporting
from runtime.cluster.context import ClusterContext, ClusterError


def reach(cx: ClusterContext) -> None:
    """Say which cluster this is, or fail with what kubectl said; record the context."""
    p = cx.provider
    cx.out(f"== cluster: context {p.context} (an existing cluster: never created or deleted)")
    try:
        version = p.reach(cx.c)
    except ExistingClusterError as e:
        raise ClusterError(str(e)) from e
    if not cx.dry:
        nodes = [n["metadata"]["name"] for n in cx.kube.list("v1", "Node")]
        cx.out(f"cluster: Kubernetes {version}, {len(nodes)} node(s): {', '.join(nodes)}")
        # Recorded now: a later task (`down` above all) must find this cluster even when
        # this `up` stops halfway, and never fall back to another runtime.
        cx.wd.update_state(context=p.context, runtime=p.name)


def namespace(cx: ClusterContext, s: Settings) -> None:
    """Make the namespace unless it is there; one that is there is left as it is."""
    if not cx.dry and cx.kube.get("v1", "Namespace", s.namespace) is not None:
        cx.out(f"namespace {s.namespace}: exists, used as it is")
        return
    apply_reporting(cx, manifests.namespace(s))


def storage(cx: ClusterContext, s: Settings, asked_class: str | None) -> Settings:
    """The volume's class and access mode, said in one line and recorded (a claim's spec
    cannot change: a claim already there keeps its own)."""
    claim = cx.get("v1", "PersistentVolumeClaim", s.volume)
    if claim is not None and cx.wd.state().volume_access is None and not cx.dry:
        # Not one this work dir made: another's, or someone else's data. Never taken over.
        raise ClusterError(
            f"namespace {s.namespace} already has a PersistentVolumeClaim {s.volume} that this "
            f"work dir did not make ({'distml' if is_ours(claim) else 'not distml'}'s): use "
            "another namespace (INVOKE_CLUSTER_NAMESPACE) or run `invoke down` from the "
            "work dir that made it"
        )
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
        try:
            found = choose(
                cx.kube.list("storage.k8s.io/v1", "StorageClass"),
                asked_class or cx.storage_class,
                cx.volume_access,
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
            f"{s.namespace} does not have: `{cx.provider.kubectl('')}-n {s.namespace} create "
            f"secret docker-registry {s.image_pull_secret} --docker-server=REGISTRY "
            "--docker-username=USER --docker-password=...`"
        )


def require_registry(cx: ClusterContext, s: Settings) -> None:
    """Checked before anything is installed: the pods need a registry to pull from."""
    if "/" not in s.image and not cx.dry:
        raise ClusterError(
            "an existing cluster pulls the image from a registry: push it with `invoke build "
            "--push REGISTRY[/REPO]` (or set cluster.registry, INVOKE_CLUSTER_REGISTRY); a "
            "plain-HTTP registry for a local cluster: docs/cluster.md"
        )


def push_image(cx: ClusterContext, s: Settings, local: str) -> None:
    """Push the built image under the name the pods run (``s.image``)."""
    from runtime.image import ImageError
    from runtime.registry import push

    if "/" not in s.image:
        cx.out(f"note (a real run would stop here): {s.image} names no registry")
        return
    registry = s.image.rsplit("/", 1)[0]
    try:
        push(cx.c, cx.docker, local, registry, cx.out)
    except ImageError as e:
        raise ClusterError(str(e)) from e
