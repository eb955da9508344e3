"""Server-side apply on a cluster distml did not create: never forced, and a conflict is said
plainly (which object or file, which other field manager owns which field, what to do).

On a cluster distml made (kind, minikube, k3d) the installs force conflicts (``kubectl apply
--server-side --force-conflicts``, ``kube.apply(force=True)``): distml is the only writer
there, and a re-run after an interrupted install must take back the fields it wrote under
another manager. Elsewhere the fields belong to whoever wrote them: the API server's 409 is
final, retrying cannot fix it, and taking them over would undo an admin's install.
"""

from __future__ import annotations

import re
from typing import Any

from k8s.client.kube import Kube, KubeError
from k8s.client.kubectl_errors import PermanentError

# kubectl's (and the API server's) words for a server-side apply conflict.
_CONFLICT = re.compile(r"Apply failed with (\d+ )?conflicts?", re.IGNORECASE)
# One conflict: `conflict with "MANAGER"[ with subresource "S"][ using GROUP/VERSION]: .field`.
_ONE = re.compile(
    r'conflict with "([^"]+)"(?: with subresource "[^"]+")?(?: using ([^:\s]+))?:\s*(\S+)'
)


def force_flag(owns_cluster: bool) -> str:
    """``--force-conflicts`` on a cluster distml made, nothing elsewhere."""
    return " --force-conflicts" if owns_cluster else ""


def is_conflict(text: str) -> bool:
    return bool(_CONFLICT.search(text))


def conflicts(text: str) -> list[str]:
    """Each conflict as ``"MANAGER" owns FIELD (GROUP/VERSION)``, in kubectl's order."""
    return [
        f'"{manager}" owns {field}' + (f" ({using})" if using else "")
        for manager, using, field in _ONE.findall(text)
    ]


def _what_to_do(what: str, by_hand: str) -> str:
    return (
        f"distml does not force a conflict on a cluster it did not create, and took nothing "
        f"over. Ask the cluster's admin to install or upgrade {what} (or to hand those fields "
        f"to you), or install it by hand ({by_hand}), then run `invoke up` again"
    )


def kubectl_conflict_message(what: str, args: str, kubectl_output: str) -> str:
    """A `kubectl apply --server-side` of an upstream file (``args``) that conflicted.
    kubectl's message does not name the object: a server-side diff of the file lists the
    objects the apply would change."""
    owned = "; ".join(conflicts(kubectl_output)) or kubectl_output.strip()[-300:]
    source = args.removeprefix("apply ").replace("--server-side ", "")
    return (
        f"{what}: server-side apply conflicts with another field manager: {owned}. "
        f"Which objects: `kubectl diff --server-side --force-conflicts {source}` (writes "
        f"nothing). {_what_to_do(what, f'kubectl {args}, as an admin')}"
    )


def apply_unforced(kube: Kube, obj: dict[str, Any], *, owns_cluster: bool, what: str) -> None:
    """``kube.apply(obj)``, forced only on a cluster distml made; a conflict elsewhere is
    a PermanentError naming the object, the other field manager and what to do."""
    try:
        kube.apply(obj, force=owns_cluster)
    except KubeError as e:
        if owns_cluster or not (e.status == 409 or is_conflict(str(e))):
            raise
        meta = obj["metadata"]
        name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        owned = "; ".join(conflicts(str(e))) or str(e)
        raise PermanentError(
            f"{what}: {obj['kind']} {name} has fields another field manager owns: {owned}. "
            + _what_to_do(what, "kubectl apply --server-side -f <its manifest>, as an admin")
        ) from e
