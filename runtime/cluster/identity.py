"""Which cluster a kubeconfig context points at: its API server's URL and the uid of its
``kube-system`` Namespace (made once, when the cluster was made). Context names repeat
across kubeconfigs (``kubernetes-admin@kubernetes``, k3s's ``default``), so `up` records
the cluster itself, and every later task on an existing cluster checks it before its first
call: a context that now names another cluster is refused, and nothing is touched there."""

from __future__ import annotations

from dataclasses import dataclass

from k8s.client.kube import Kube, KubeError
from runtime.cluster.cluster_error import ClusterError
from runtime.state import State

FORGET = "`invoke down --forget` clears this work dir's record without touching any cluster"


@dataclass(frozen=True)
class Identity:
    server: str  # the API server's URL
    uid: str  # kube-system's uid; "" when this user may not read it

    def describe(self) -> str:
        return f"API server {self.server or '?'}" + (
            f", kube-system uid {self.uid}" if self.uid else ""
        )

    def same(self, other: Identity) -> bool:
        """The same cluster: the same server and, where both were readable, the same uid
        (``check_recorded`` refuses a recorded uid that cannot be read now)."""
        return self.server == other.server and (
            not (self.uid and other.uid) or self.uid == other.uid
        )


def read(kube: Kube) -> tuple[Identity, str]:
    """The cluster's identity, and a note when kube-system cannot be read (a user whose
    rights end at their namespace): the URL alone then tells the cluster."""
    try:
        ns = kube.get("v1", "Namespace", "kube-system")
    except KubeError as e:
        note = f"note: cannot read Namespace kube-system ({e}): the cluster is known by its URL"
        return Identity(kube.server(), ""), note
    uid = str(((ns or {}).get("metadata") or {}).get("uid") or "")
    return Identity(kube.server(), uid), ""


def recorded(state: State) -> Identity | None:
    if not state.cluster_server:
        return None
    return Identity(state.cluster_server, state.cluster_uid or "")


def mismatch(context: str, was: Identity, now: Identity) -> str:
    return (
        f"context {context!r} now points at another cluster ({now.describe()}) than the one "
        f"`invoke up` set up for this work dir ({was.describe()}); distml touches nothing "
        "there. Point the context back at that cluster (check KUBECONFIG and `kubectl config "
        f"get-contexts`), or, if it is gone, {FORGET}"
    )


def check_recorded(kube: Kube, state: State, context: str) -> None:
    """Refuse a context whose cluster is not the one `up` recorded (nothing recorded: the
    first `up`, which records it)."""
    was = recorded(state)
    if was is None:
        return
    now, note = read(kube)
    if was.uid and not now.uid:  # a URL alone is no proof: 127.0.0.1:6443 is everywhere
        raise ClusterError(
            f"context {context!r}: {note.removeprefix('note: ')}, so it cannot be told to be "
            f"the cluster `invoke up` set up ({was.describe()}); distml touches nothing "
            f"there. Check the context's credentials, or, if that cluster is gone, {FORGET}"
        )
    if not was.same(now):
        raise ClusterError(mismatch(context, was, now))
