"""k8s.client.objects' ReplicaCounter against tests/support/fakekube.py: it counts only the ready,
running predictor pods of its InferenceService, over time, and names the pending ones with
the scheduler's message. The refusal of a namespace KServe skips names the context in the
command it gives."""

from __future__ import annotations

from k8s.client.objects import KSERVE_SKIPPED_NAMESPACE_LABEL, ReplicaCounter, namespace_refusal
from tests.support.fakekube import FakeKube
from tests.support.wait_kit import (
    INSUFFICIENT_CPU,
    KUBECTL,
    NAMED,
    NS,
    predictor,
    unnamed_commands,
)


def test_replica_counter_counts_only_ready_running_pods(fake: FakeKube) -> None:
    predictor(fake, "p-ready")
    predictor(fake, "p-not-ready", ready=False)
    predictor(fake, "p-pending", phase="Pending", ready=False, unschedulable=INSUFFICIENT_CPU)
    predictor(fake, "p-terminating", deleting=True)
    predictor(fake, "other-ready", isvc="other")
    count = ReplicaCounter(fake, NS, "tf-mnist")

    assert count() == 1
    assert count.pending() == [("p-pending", INSUFFICIENT_CPU)]


def test_replica_counter_rises_over_time_and_can_stay_at_one(fake: FakeKube) -> None:
    predictor(fake, "p-0")
    count = ReplicaCounter(fake, NS, "tf-mnist")
    stay = ReplicaCounter(fake, NS, "other")
    predictor(fake, "o-0", isvc="other")
    fake.at(5, lambda: predictor(fake, "p-1"))
    fake.at(9, lambda: predictor(fake, "p-2"))

    seen, stayed = [], []
    for _ in range(7):
        seen.append(count())
        stayed.append(stay())
        fake.clock.sleep(2)

    assert seen == [1, 1, 1, 2, 2, 3, 3]
    assert stayed == [1] * 7


def test_pending_names_pods_with_the_event_message_when_no_condition_says(fake: FakeKube) -> None:
    predictor(fake, "p-0")
    predictor(fake, "p-1", phase="Pending", ready=False)
    fake.add_event(NS, "p-1", "FailedScheduling", INSUFFICIENT_CPU)
    predictor(fake, "p-2", phase="Pending", ready=False)
    assert ReplicaCounter(fake, NS, "tf-mnist").pending() == [
        ("p-1", INSUFFICIENT_CPU),
        ("p-2", ""),
    ]


def test_a_namespace_kserve_skips_is_refused_with_the_command_naming_the_context():
    labels = {KSERVE_SKIPPED_NAMESPACE_LABEL: "kubeflow"}
    namespace = {"metadata": {"name": "ml-team", "labels": labels}}
    message = namespace_refusal(namespace, KUBECTL) or ""
    assert message.endswith(f"{NAMED}label namespace ml-team control-plane-")
    assert unnamed_commands(message) == []
    assert namespace_refusal({"metadata": {"name": "ml-team"}}, KUBECTL) is None
