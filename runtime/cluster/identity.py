"""Which cluster a kubeconfig context points at: its API server's URL, the uid of its
``kube-system`` Namespace (made once, when the cluster was made) and the fingerprint of its
CA certificate. Context names repeat across kubeconfigs (``kubernetes-admin@kubernetes``,
k3s's ``default``) and so do URLs (``127.0.0.1:6443``, a proxy kept at one address while
the cluster behind it is made again), so `up` records the cluster itself, and every later
task on an existing cluster checks it before its first call: a context that now names
another cluster is refused, and nothing is touched there.

A user whose rights end at their namespace cannot read ``kube-system``; every namespace
holds the ``kube-root-ca.crt`` ConfigMap, which every user of it may read: the cluster's CA,
which a cluster made again does not share. Without it, the kubeconfig's CA. Only a 403
lowers the check: a timeout, an unreachable server or a 5xx fails the task.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, replace

from k8s.client.kube import Kube, KubeError
from runtime.cluster.cluster_error import ClusterError
from runtime.workdir.state import State

FORGET = "`invoke down --forget` clears this work dir's record without touching any cluster"
ROOT_CA = "kube-root-ca.crt"  # the ConfigMap every namespace has (its key: ca.crt)
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)


@dataclass(frozen=True)
class Identity:
    server: str  # the API server's URL
    uid: str  # kube-system's uid; "" when this user may not read it
    ca: str = ""  # the CA certificates' SHA-256; "" when none could be read

    def describe(self) -> str:
        return (
            f"API server {self.server or '?'}"
            + (f", kube-system uid {self.uid}" if self.uid else "")
            + (f", CA sha256:{self.ca[:16]}" if self.ca else "")
        )

    def same(self, other: Identity) -> bool:
        """The same cluster: the same server and, for the uid and the CA, the same value
        wherever both were readable (``check_recorded`` refuses a recorded value that
        cannot be read now)."""

        def agree(a: str, b: str) -> bool:
            return not (a and b) or a == b

        return (
            self.server == other.server and agree(self.uid, other.uid) and agree(self.ca, other.ca)
        )


def fingerprint(pem: str) -> str:
    """The SHA-256 of the DER of every certificate in ``pem``, in order ("" when none)."""
    digest = hashlib.sha256()
    blocks = _PEM.findall(pem or "")
    for block in blocks:
        try:
            digest.update(base64.b64decode("".join(block.split()), validate=True))
        except ValueError:
            return ""
    return digest.hexdigest() if blocks else ""


def _read(kube: Kube, kind: str, name: str, namespace: str | None) -> tuple[dict | None, str]:
    """The object (None when absent or forbidden) and, when forbidden, why; any other
    failure (unreachable, a timeout, a 5xx) is a ClusterError: no check is lowered for it."""
    try:
        return kube.get("v1", kind, name, namespace), ""
    except KubeError as e:
        if e.forbidden:
            return None, str(e)
        raise ClusterError(f"cannot tell which cluster this is: {e}") from e


def read(kube: Kube, namespace: str | None = None) -> tuple[Identity, str]:
    """The cluster's identity, and a note of what could not be read for want of rights."""
    ns, why = _read(kube, "Namespace", "kube-system", None)
    uid = str(((ns or {}).get("metadata") or {}).get("uid") or "")
    ca = ""
    for where in [namespace, "default"] if namespace else ["default"]:
        cm, _ = _read(kube, "ConfigMap", ROOT_CA, where)
        ca = fingerprint(str(((cm or {}).get("data") or {}).get("ca.crt") or ""))
        if ca:
            break
    if not ca:
        ca = fingerprint(kube.ca())
    note = ""
    if why:
        known = "its CA" if ca else "its URL alone"
        note = f"note: cannot read Namespace kube-system ({why}): the cluster is known by {known}"
    return Identity(kube.server(), uid, ca), note


def recorded(state: State) -> Identity | None:
    if not state.cluster_server:
        return None
    return Identity(state.cluster_server, state.cluster_uid or "", state.cluster_ca or "")


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
    now, note = read(kube, state.namespace)
    recorded_proofs = [
        (what, b) for what, a, b in (("uid", was.uid, now.uid), ("CA", was.ca, now.ca)) if a
    ]
    if recorded_proofs and not any(b for _, b in recorded_proofs):
        # A URL alone is no proof: 127.0.0.1:6443 is everywhere.
        lost = " and ".join(what for what, _ in recorded_proofs)
        raise ClusterError(
            f"context {context!r}: the cluster's {lost} cannot be read now "
            f"({note.removeprefix('note: ') or 'no CA in the kubeconfig'}), so it cannot be "
            f"told to be the cluster `invoke up` set up ({was.describe()}); distml touches "
            f"nothing there. Check the context's credentials, or, if that cluster is gone, "
            f"{FORGET}"
        )
    if not (was.same(now) or _same_by_kubeconfig(kube, was, now)):
        raise ClusterError(mismatch(context, was, now))


def _same_by_kubeconfig(kube: Kube, was: Identity, now: Identity) -> bool:
    """The CA `up` recorded may have come from the kubeconfig (the namespace's ConfigMap
    not there yet, ``default`` not readable) and the one read now from the ConfigMap: two
    sources that may hold different certificates for one cluster. The kubeconfig's, read
    now, settles it."""
    return bool(was.ca) and fingerprint(kube.ca()) == was.ca and was.same(replace(now, ca=was.ca))
