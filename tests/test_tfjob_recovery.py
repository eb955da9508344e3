"""Recovery as training-operator v1.9.0 does it (``tests/support/fake_training_operator.py``): what
``--max-restarts`` allows, a deleted worker pod, and the failure report when the operator
has deleted the pods."""

from __future__ import annotations

import pytest

from k8s import manifests
from k8s.objects import TF_CONTAINER, TFJOB_API, tfjob_state
from k8s.settings import Settings
from k8s.tfjobs import failed_for_a_deleted_pod, wait_tfjobs
from runtime.cluster.training import MAX_RESUBMITS
from runtime.requests import TrainRequest
from runtime.workdir import Workdir
from tests.support.cluster_kit import controller, make_ctx, runtime, set_up
from tests.support.fake_training_operator import FakeTrainingOperator, past_backoff_limit
from tests.support.fakekube import FakeClock, FakeKube

NS = "kubeflow"
JOB = "train-cnn"


@pytest.fixture
def fake() -> FakeKube:
    return FakeKube(FakeClock())


@pytest.fixture
def wd(tmp_path) -> Workdir:
    return Workdir.at(tmp_path / "wd")


def submit(fake: FakeKube, max_restarts: int, workers: int = 2) -> FakeTrainingOperator:
    s = Settings(namespace=NS, workers=workers, max_restarts=max_restarts, image="distml:t")
    fake.put(manifests.tfjob(s, "cnn"))
    operator = FakeTrainingOperator(fake)
    operator.tick()
    return operator


def job(fake: FakeKube) -> dict:
    return fake.obj(TFJOB_API, "TFJob", JOB, NS)


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
    result = wait_tfjobs(fake, NS, [JOB], timeout=600, clock=fake.clock, out=out.append)
    assert result == {JOB: "Failed"}
    report = "\n".join(out)
    assert f"Pod {NS}/{JOB}-worker-1: deleted; log of its last crashed run:" in report
    assert "ResourceExhaustedError: OOM" in report
    assert [r for r in fake.log_requests if r[0] == f"{JOB}-worker-0"], "fetched while alive"


# ---------------------------------------------------------------- train-all resubmits
def train_with_operator(wd, fake, plan) -> tuple[int, list[str], FakeTrainingOperator]:
    """`invoke train --model-type cnn` on the cluster runtime, the operator faked as v1.9.0
    and ``plan(operator, now, submissions)`` run on each tick (deletes pods, finishes)."""
    controller(fake, tfjob_state=None)
    set_up(wd, fake)
    operator = FakeTrainingOperator(fake)
    fake.script(lambda now: plan(operator, now, len(applied_tfjobs(fake))))
    lines: list[str] = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    return rt.train(TrainRequest(models=("cnn",), epochs=1)), lines, operator


def applied_tfjobs(fake: FakeKube) -> list[dict]:
    return [o for o in fake.applied if o["kind"] == "TFJob"]


def test_a_deleted_worker_pod_is_resubmitted_and_the_job_succeeds(wd, fake):
    def plan(operator, now, submissions):
        if submissions == 1 and job(fake) and tfjob_state(job(fake)) == "Running":
            if fake.obj("v1", "Pod", f"{JOB}-worker-1", NS):
                operator.delete_pod(JOB, NS, 1)  # mid-epoch: `kubectl delete pod`
        elif submissions == 2 and tfjob_state(job(fake)) == "Running":
            operator.finish(JOB, NS)  # the resubmitted job resumes and completes

    code, lines, _ = train_with_operator(wd, fake, plan)
    assert code == 0, "\n".join(lines)
    assert len(applied_tfjobs(fake)) == 2
    assert any(f"resubmitting it (1/{MAX_RESUBMITS})" in line for line in lines)
    assert tfjob_state(job(fake)) == "Succeeded"


def test_a_job_whose_pods_keep_being_deleted_fails_after_the_resubmissions(wd, fake):
    def plan(operator, now, submissions):
        if job(fake) and tfjob_state(job(fake)) == "Running":
            operator.delete_pod(JOB, NS, 0)

    code, lines, _ = train_with_operator(wd, fake, plan)
    assert code == 1
    assert len(applied_tfjobs(fake)) == 1 + MAX_RESUBMITS
    text = "\n".join(lines)
    assert f"resubmitted {MAX_RESUBMITS} times already" in text
    assert "has failed because 1 Worker replica(s) failed" in text


def test_the_tfjob_container_is_the_one_whose_logs_are_kept():
    assert TF_CONTAINER == manifests.TFJOB_CONTAINER
