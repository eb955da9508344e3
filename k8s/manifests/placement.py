"""Where the pods that mount the volume may run, and how they pull the image.

A ReadWriteOnce volume is attached to one node at a time (node-local classes like
local-path even pin it there): every pod that mounts it carries ``VOLUME_LABEL`` and a
required pod affinity to the others on ``kubernetes.io/hostname``. The first one is free
to go anywhere (the scheduler admits a pod that matches its own affinity term when no pod
does yet); the rest follow it, instead of sitting in ``ContainerCreating`` (Multi-Attach)
on another node. A ReadWriteMany volume lets them spread: a TFJob's workers are spread
over nodes (preferred, so one node still runs them all when it must).

Only on a cluster distml did not create: its own clusters have one node, where placement
has nothing to decide (and Knative refuses both fields unless its admin enables
``kubernetes.podspec-affinity`` / ``-topologyspreadconstraints``: see ``predictor_placement``).
"""

from __future__ import annotations

from typing import Any

from k8s.manifests.names import VOLUME_LABEL
from k8s.providers.settings import Settings

HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"


def volume_labels(s: Settings) -> dict[str, str]:
    """The label that marks a pod as mounting ``s.volume``."""
    return {VOLUME_LABEL: s.volume}


def placement(s: Settings, spread_by: dict[str, str] | None = None) -> dict[str, Any]:
    """Pod spec fields for a pod that mounts the volume: pod affinity (ReadWriteOnce) or
    a spread over nodes of the pods ``spread_by`` selects (ReadWriteMany); and the image
    pull secret when there is one."""
    fields: dict[str, Any] = {}
    if s.owns_cluster:
        pass  # one node: nothing to place
    elif s.volume_access == "ReadWriteOnce":
        term = {
            "labelSelector": {"matchLabels": volume_labels(s)},
            "topologyKey": HOSTNAME_TOPOLOGY,
        }
        fields["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    elif spread_by:
        fields["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": HOSTNAME_TOPOLOGY,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": dict(spread_by)},
            }
        ]
    return fields | pull_secrets(s)


def predictor_placement(s: Settings, spread_by: dict[str, str]) -> dict[str, Any]:
    """The InferenceService predictor's: ``placement`` in standard mode. In knative mode
    only the pull secret: Knative Serving refuses ``affinity`` and
    ``topologySpreadConstraints`` unless the flags in its ``config-features`` are enabled,
    which is its admin's call (docs/existing-cluster.md)."""
    if s.serving_mode == "knative":
        return pull_secrets(s)
    return placement(s, spread_by)


def pull_secrets(s: Settings) -> dict[str, Any]:
    """``imagePullSecrets`` for a registry that needs credentials (else nothing)."""
    return {"imagePullSecrets": [{"name": s.image_pull_secret}]} if s.image_pull_secret else {}
