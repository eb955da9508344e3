"""Does KServe's controller watch ScaledObjects? KServe 0.20 registers its watch on KEDA's
ScaledObjects only when their CRD exists as the controller starts: started before KEDA
was installed, it still makes a ScaledObject for an InferenceService with
``autoscalerClass: keda``, but never sees it change or go (a deleted one is not made
again, an edited one not put back).

:func:`started_before_keda` compares the CRD's creation with the start of the
controller's pods. On a cluster distml made, `up` then restarts the controller (it is
distml's); on any other, distml says so and leaves the restart to the cluster's admin.
Reading either takes rights a user of one namespace does not have: then nothing is said.
"""

from __future__ import annotations

from datetime import datetime

from k8s.client.kube import Kube, KubeError

SCALEDOBJECT_CRD = "scaledobjects.keda.sh"
KSERVE_NAMESPACE = "kserve"
KSERVE_CONTROLLER = "kserve-controller-manager"
#: The label KServe's release file gives the controller's pods.
CONTROLLER_SELECTOR = f"control-plane={KSERVE_CONTROLLER}"
RESTART = f"-n {KSERVE_NAMESPACE} rollout restart deployment/{KSERVE_CONTROLLER}"


def _time(text: object) -> datetime | None:
    """An RFC 3339 time as the API server writes it ("2026-12-05T08:00:00Z")."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def started_before_keda(kube: Kube) -> list[str]:
    """The controller pods that started before the ScaledObject CRD was made (their
    names); empty when none did, when either is missing, or when they cannot be read
    (a 403)."""
    try:
        crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", SCALEDOBJECT_CRD)
        pods = kube.list("v1", "Pod", KSERVE_NAMESPACE, label_selector=CONTROLLER_SELECTOR)
    except KubeError as e:
        if e.forbidden:
            return []
        raise
    made = _time(((crd or {}).get("metadata") or {}).get("creationTimestamp"))
    if made is None:
        return []
    early = []
    for pod in pods:
        started = _time((pod.get("status") or {}).get("startTime"))
        if started is not None and started < made:
            early.append(str((pod.get("metadata") or {}).get("name", "")))
    return early


def advice(pods: list[str], kubectl: str) -> str:
    """What to tell the user of a cluster distml did not make (``kubectl``: the restart
    command, as it runs against that cluster)."""
    return (
        f"KServe's controller ({', '.join(pods)}) started before KEDA's ScaledObject CRD "
        "existed, so it does not watch ScaledObjects: it makes them, but a deleted or "
        "edited one is not put back until it restarts. It is the cluster's: ask its admin "
        f"to run `{kubectl}`"
    )
