"""Which StorageClass the volume gets and whether its pods may spread over nodes.

A StorageClass does not say which access modes it supports; its provisioner does. Those
known to give ReadWriteMany (shared file systems) let the pods spread; every other one is
taken as ReadWriteOnce, and the pods that mount the volume are kept on one node
(k8s.manifests.placement). ``cluster.volume_access`` overrides the guess either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.errors import DistmlError
from k8s.providers.settings import ACCESS_MODES

DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
# Provisioners of shared file systems: ReadWriteMany.
RWX_PROVISIONERS = frozenset(
    {
        "nfs.csi.k8s.io",
        "cephfs.csi.ceph.com",
        "efs.csi.aws.com",
        "file.csi.azure.com",
        "kubernetes.io/azure-file",
        "filestore.csi.storage.gke.io",
        "cluster.local/nfs-subdir-external-provisioner",
        "k8s-sigs.io/nfs-subdir-external-provisioner",
        "driver.longhorn.io",  # RWX through its share manager
    }
)
ACCESS_SETTING = "cluster.volume_access (INVOKE_CLUSTER_VOLUME_ACCESS)"
CLASS_SETTING = "--storage-class (or cluster.storage_class)"


class StorageError(DistmlError):
    """No StorageClass to make the volume with, or one that cannot give what was asked."""


@dataclass(frozen=True)
class Storage:
    storage_class: str
    provisioner: str
    access: str  # ReadWriteOnce or ReadWriteMany

    def line(self, volume: str) -> str:
        """`up`'s one line about where the pods that mount the volume run."""
        where = (
            "pods spread over nodes (a TFJob's workers on different nodes where there is room)"
            if self.access == "ReadWriteMany"
            else "every pod that mounts it runs on the volume's node (pod affinity)"
        )
        named = self.storage_class or "the cluster's default"
        what = f"class {named} ({self.provisioner}), {self.access}"
        return f"volume {volume}: {what}: {where}"


def _is_default(sc: dict[str, Any]) -> bool:
    annotations = (sc.get("metadata") or {}).get("annotations") or {}
    return any(annotations.get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS)


def choose(classes: list[dict[str, Any]], asked_class: str, asked_access: str) -> Storage:
    """The class asked for (else the cluster's default) and its access mode."""
    by_name = {(sc.get("metadata") or {}).get("name"): sc for sc in classes}
    names = ", ".join(sorted(n for n in by_name if n)) or "none"
    if asked_class:
        sc = by_name.get(asked_class)
        if sc is None:
            raise StorageError(
                f"the cluster has no StorageClass {asked_class!r} (it has: {names}); "
                f"pick one with {CLASS_SETTING}"
            )
    else:
        defaults = [sc for sc in classes if _is_default(sc)]
        if len(defaults) != 1:
            why = (
                "no default StorageClass" if not defaults else "more than one default StorageClass"
            )
            raise StorageError(
                f"the cluster has {why} (classes: {names}); name one with {CLASS_SETTING}"
            )
        sc = defaults[0]
    _check_access(asked_access)
    provisioner = str(sc.get("provisioner") or "?")
    access = asked_access or (
        "ReadWriteMany" if provisioner in RWX_PROVISIONERS else "ReadWriteOnce"
    )
    return Storage(str(sc["metadata"]["name"]), provisioner, access)


def _check_access(asked_access: str) -> None:
    if asked_access and asked_access not in ACCESS_MODES:
        raise StorageError(
            f"{ACCESS_SETTING} must be one of {', '.join(ACCESS_MODES)}, got {asked_access!r}"
        )


def unlisted(asked_class: str, asked_access: str) -> Storage:
    """For a user who may not list StorageClasses (rights that end at a namespace): the
    class asked for, else the cluster's default (the claim names none), and the access
    asked for, else ReadWriteOnce: the guess that cannot fail (every pod that mounts the
    volume kept on one node)."""
    _check_access(asked_access)
    return Storage(asked_class, "StorageClasses not readable", asked_access or "ReadWriteOnce")
