"""What the tests of the waits share (tests/k8s/): the namespace and API versions they use,
a scheduler's refusal, the ``out`` that collects a wait's lines, a TFJob's status as the
training operator writes it, and a predictor pod as KServe makes it."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.fakekube import FakeKube

NS = "kubeflow"
TF = "kubeflow.org/v1"
INSUFFICIENT_CPU = (
    "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available"
)


def collect() -> tuple[list[str], Callable[[str], None]]:
    """The lines a wait prints, and the ``out`` that collects them."""
    lines: list[str] = []
    return lines, lines.append


def tfjob_status(*types: str, active=0, succeeded=0, failed=0, message: str = "") -> dict:
    """Conditions in order; all True except that a later terminal one turns Running False."""
    conds = []
    for t in types:
        for c in conds:
            if t in ("Succeeded", "Failed") and c["type"] == "Running":
                c["status"] = "False"
        conds.append(
            {"type": t, "status": "True", "reason": f"TFJob{t}", "message": message or f"is {t}"}
        )
    return {
        "conditions": conds,
        "replicaStatuses": {"Worker": {"active": active, "succeeded": succeeded, "failed": failed}},
    }


def predictor(fake: FakeKube, name: str, isvc: str = "tf-mnist", **kwargs) -> dict:
    labels = {"serving.kserve.io/inferenceservice": isvc, "component": "predictor"}
    return fake.add_pod(NS, name, labels, container="kserve-container", **kwargs)
