"""k8s/waits/tfjobs.py and the TFJob manifest against training-operator v1.9.0 as faked in
``tests/support/fake_training_operator.py``: what ``--max-restarts`` allows, a deleted worker
pod, and the failure report when the operator has deleted the pods."""

from __future__ import annotations

import pytest

from k8s import manifests
from k8s.client.objects import TF_CONTAINER, tfjob_state
from k8s.providers.settings import Settings
from k8s.waits.tfjobs import failed_for_a_deleted_pod, wait_tfjobs
from tests.support.fake_training_operator import FakeTrainingOperator, past_backoff_limit
from tests.support.fakekube import FakeClock, FakeKube
from tests.support.tfjob_kit import JOB, NS, job
from tests.support.wait_kit import KUBECTL


@pytest.fixture
def fake() -> FakeKube:
    return FakeKube(FakeClock())


def submit(fake: FakeKube, max_restarts: int, workers: int = 2) -> FakeTrainingOperator:
    s = Settings(namespace=NS, workers=workers, max_restarts=max_restarts, image="distml:t")
    fake.put(manifests.tfjob(s, "cnn"))
    operator = FakeTrainingOperator(fake)
    operator.tick()
    return operator


@pytest.mark.parametrize(("max_restarts", "workers"), [(0, 2), (1, 2), (2, 2), (2, 3), (3, 4)])
def test_max_restarts_whole_job_restarts_are_survived_and_the_next_fault_fails(
    fake, max_restarts, workers
):
    operator = submit(fake, max_restarts, workers)
    everyone = tuple(range(workers))
    for _ in range(max_restarts):
        operator.crash(JOB, NS, everyone)  # every worker restarts: its peers fail with it
        operator.tick()
        assert tfjob_state(job(fake)) == "Running"
    operator.crash(JOB, NS, (0,))  # the next fault: its first restart already fails the job
    operator.tick()
    assert tfjob_state(job(fake)) == "Failed"
    assert "reached the specified backoff limit" in job(fake)["status"]["conditions"][-1]["message"]
    assert operator.pods(JOB, NS) == [], "past the limit the operator deletes every pod"


def test_a_backoff_limit_of_max_restarts_would_fail_a_two_worker_job_at_its_first_fault(fake):
    # Why the limit is not --max-restarts itself: one fault restarts both containers.
    operator = submit(fake, max_restarts=2)
    operator.crash(JOB, NS, (0, 1))
    assert past_backoff_limit(operator.pods(JOB, NS), "OnFailure", 2)


def test_the_operator_fails_the_whole_job_at_once_when_a_running_worker_pod_is_deleted(fake):
    operator = submit(fake, max_restarts=2)
    operator.delete_pod(JOB, NS, 1)
    operator.tick()
    assert tfjob_state(job(fake)) == "Failed"
    assert failed_for_a_deleted_pod(job(fake))
    operator.tick()
    assert tfjob_state(job(fake)) == "Failed", "no pod is recreated for a failed job"


def test_a_crash_past_the_limit_is_not_mistaken_for_a_deleted_pod(fake):
    operator = submit(fake, max_restarts=0)
    operator.crash(JOB, NS, (0,))
    operator.tick()
    assert tfjob_state(job(fake)) == "Failed" and not failed_for_a_deleted_pod(job(fake))


def test_the_report_keeps_the_crashed_runs_logs_the_operator_deleted(fake):
    operator = submit(fake, max_restarts=1)
    for i in (0, 1):
        fake.set_log(f"{JOB}-worker-{i}", f"worker {i}\nResourceExhaustedError: OOM", previous=True)
    fake.at(10, lambda: operator.crash(JOB, NS, (0, 1)))  # fault 1: restarts, goes on
    fake.at(20, lambda: operator.crash(JOB, NS, (0,)))  # fault 2: past the limit
    out: list[str] = []
    result = wait_tfjobs(
        fake, NS, [JOB], timeout=600, clock=fake.clock, out=out.append, kubectl=KUBECTL
    )
    assert result == {JOB: "Failed"}
    report = "\n".join(out)
    assert f"Pod {NS}/{JOB}-worker-1: deleted; log of its last crashed run:" in report
    assert "ResourceExhaustedError: OOM" in report
    assert [r for r in fake.log_requests if r[0] == f"{JOB}-worker-0"], "fetched while alive"


def test_the_tfjob_container_is_the_one_whose_logs_are_kept():
    assert TF_CONTAINER == manifests.TFJOB_CONTAINER
