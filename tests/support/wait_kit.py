"""What the tests of the waits share (tests/k8s/): the namespace and API versions they use,
the provider's ``kubectl`` that builds the commands they print (and a check that each names
its context), a scheduler's refusal, the ``out`` that collects a wait's lines, a TFJob's
status as the training operator writes it, and a predictor pod as KServe makes it."""

from __future__ import annotations

import re
from collections.abc import Callable

from k8s.providers import provider
from tests.support.fakekube import FakeKube

NS = "kubeflow"
TF = "kubeflow.org/v1"
# A context whose name needs quoting: every command a wait prints must name it, quoted.
CONTEXT = "team a"
KUBECTL = provider("existing", kube_context=CONTEXT).kubectl
NAMED = "kubectl --context 'team a' "
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


def unnamed_commands(text: str) -> list[str]:
    """The kubectl commands in ``text`` that do not name the context (none, when each was
    built by ``KUBECTL``)."""
    return re.findall(r"kubectl (?!--context 'team a' )\S+[^;`\n]*", text)
