"""Which work dir made a lab cluster (k3d, kind, minikube), so that only that one deletes it.

Every work dir names its lab cluster ``dist-ml`` (``cluster.name``), so a second checkout,
or a fresh work dir, finds the first one's cluster under the same name. `up` records the
maker twice, right after it creates the cluster: on the cluster, as the ConfigMap
``distml-cluster-owner`` in ``kube-system`` (the work dir's instance id, its resolved path
and its host), and in the work dir's state (``made_cluster``). A cluster counts as this
work dir's only when both say so: `down` deletes no other, `up` sets up no other, and
`status` says whose it is.

``kube-system``, not ``kube-public``: the record names a path and a host, which
``kube-public`` would show to every reader, anonymous ones included; ``kube-system``
cannot be deleted, so the record lives exactly as long as the cluster; and no distml
deletion reaches it (`down --keep-cluster` deletes in distml's namespace only).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from k8s import manifests
from k8s.client.kube import KubeError
from k8s.manifests.names import INSTANCE_LABEL
from runtime.cluster.context import ClusterContext, ClusterError

RECORD = "distml-cluster-owner"
RECORD_NAMESPACE = "kube-system"
DOCS = 'docs/cluster.md, "Who owns a lab cluster"'


@dataclass(frozen=True)
class Owner:
    """The work dir that made a cluster."""

    instance: str  # its instance id (state.json's ``instance``)
    path: str  # its resolved path
    host: str  # the machine it is on

    def describe(self) -> str:
        return f"the work dir {self.path} on {self.host}"


def this_workdir(cx: ClusterContext) -> Owner:
    return Owner(cx.instance or "", str(cx.wd.root.resolve()), socket.gethostname())


def record(cluster: str, owner: Owner) -> dict[str, Any]:
    """The ConfigMap that says who made ``cluster`` (pure)."""
    extra = {INSTANCE_LABEL: owner.instance} if owner.instance else {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": RECORD,
            "namespace": RECORD_NAMESPACE,
            "labels": manifests.labels("cluster-owner", **extra),
        },
        "data": {
            "cluster": cluster,
            "instance": owner.instance,
            "workdir": owner.path,
            "host": owner.host,
        },
    }


def parse(obj: dict[str, Any] | None) -> Owner | None:
    """The owner a record names; None when there is no record (or it names no instance)."""
    data = (obj or {}).get("data") or {}
    instance = str(data.get("instance") or "")
    if not instance:
        return None
    return Owner(instance, str(data.get("workdir") or "?"), str(data.get("host") or "?"))


def read(cx: ClusterContext) -> Owner | None:
    """The cluster's record (None: there is none). Raises KubeError when unreadable."""
    return parse(cx.kube.get("v1", "ConfigMap", RECORD, RECORD_NAMESPACE))


def write(cx: ClusterContext) -> None:
    """Record this work dir as the cluster's maker, on the cluster and in its state."""
    p = cx.provider
    if not cx.dry:  # first: a record that failed to write is written again by the next `up`
        cx.wd.update_state(made_cluster=True)
    try:
        cx.kube.apply(record(p.cluster, this_workdir(cx)), force=True)
    except KubeError as e:
        raise ClusterError(
            f"cluster {p.cluster} was created, but recording this work dir as its maker "
            f"failed ({e}); run `invoke up` again"
        ) from e
    cx.out(
        f"cluster {p.cluster}: recorded as this work dir's (ConfigMap {RECORD_NAMESPACE}/{RECORD})"
    )


def check_reuse(cx: ClusterContext) -> None:
    """Before `up` reuses an existing lab cluster: go on when this work dir made it,
    else refuse, saying whose it is and what to do instead."""
    state = cx.wd.state()
    p = cx.provider
    if cx.dry:
        if not state.made_cluster:
            cx.out(
                f"note (a real run reads the cluster's record first): this work dir did not "
                f"make cluster {p.cluster}; `up` refuses it unless the record names this work dir"
            )
        return
    try:
        owner = read(cx)
    except KubeError as e:
        raise ClusterError(
            f"cluster {p.cluster} exists, but whose it is cannot be read ({e}); nothing was "
            "set up there"
        ) from e
    if owner is not None and owner.instance == state.instance:
        if not state.made_cluster:
            cx.wd.update_state(made_cluster=True)
        return
    if owner is None and (state.made_cluster or _set_up_here_before(cx)):
        write(cx)  # made (or set up) by this work dir before the record was written
        return
    raise ClusterError(_refusal(cx, owner))


def _set_up_here_before(cx: ClusterContext) -> bool:
    """An unrecorded cluster whose distml volume this work dir's `up` made (a distml from
    before the record): the one work dir that may adopt it."""
    state = cx.wd.state()
    if not (state.up and state.runtime == cx.provider.name and state.instance):
        return False
    claim = cx.get("v1", "PersistentVolumeClaim", cx.settings().volume)
    meta = (claim or {}).get("metadata") or {}
    labels = meta.get("labels") or {}
    return labels.get(INSTANCE_LABEL) == state.instance and meta.get("uid") == state.volume_uid


def _refusal(cx: ClusterContext, owner: Owner | None) -> str:
    p = cx.provider
    if owner is None:
        whose = (
            f"cluster {p.cluster} ({p.name}) exists but has no record of the work dir that "
            "made it (an older distml made it, or it was made by hand)"
        )
        own = f"if it is yours and holds nothing you need, `{p.delete_command}` and `invoke up`"
    else:
        whose = (
            f"cluster {p.cluster} ({p.name}) was made by {owner.describe()}, not by this "
            f"one ({this_workdir(cx).path})"
        )
        own = f"run from that work dir (INVOKE_WORKDIR={owner.path} invoke up)"
    port = "" if p.name == "minikube" else " INVOKE_CLUSTER_INGRESS_PORT=18081"
    return (
        f"{whose}; nothing was set up there: its namespace {cx.namespace} and the objects "
        f"in it are that cluster's maker's, and its `invoke down` deletes the cluster. "
        f"Either {own}; or make a cluster of this work dir's own: "
        f"INVOKE_CLUSTER_NAME={p.cluster}-2{port} invoke up --runtime {p.name}; or use it "
        f"as a cluster distml did not create, in a namespace of your own: "
        f"invoke up --runtime existing --context {p.context} ({DOCS})"
    )


def kept(cx: ClusterContext) -> str | None:
    """`down`: None when this work dir made the cluster (its state says so and the
    cluster's record names its instance); else what to say instead of deleting it."""
    state = cx.wd.state()
    p = cx.provider
    if cx.dry and state.made_cluster:
        return None  # a real run reads the record first
    owner: Owner | None = None
    why = ""
    if cx.dry:
        why = "this work dir did not make it (a real run also reads the cluster's record)"
    else:
        try:
            owner = read(cx)
        except KubeError as e:
            why = f"whose it is cannot be read ({e})"
        else:
            if owner is not None and state.made_cluster and owner.instance == state.instance:
                return None
            if owner is None:
                why = (
                    "it has no record of the work dir that made it (an older distml made "
                    "it, or it was made by hand)"
                )
            else:
                why = f"it was made by {owner.describe()}, not by this one"
    there = (
        f"run `invoke down` from that work dir (INVOKE_WORKDIR={owner.path}), or " if owner else ""
    )
    return (
        f"cluster {p.cluster} ({p.name}): {why}; kept, with everything in it, and nothing "
        f"deleted there. To delete it, {there}`{p.delete_command}`"
    )


def whose(cx: ClusterContext) -> str:
    """`status`: "" when this work dir made the cluster, else whose it is."""
    state = cx.wd.state()
    if cx.dry:
        return "" if state.made_cluster else ", not made by this work dir"
    try:
        owner = read(cx)
    except KubeError as e:
        return f", whose cannot be read ({e})"
    if owner is not None and state.made_cluster and owner.instance == state.instance:
        return ""
    if owner is None:
        return ", not this work dir's: no record of who made it"
    return f", not this work dir's: made by {owner.describe()}"
