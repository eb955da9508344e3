"""runtime/cluster/training.py against training-operator v1.9.0 as faked in
``tests/support/fake_training_operator.py``: a TFJob failed by a deleted worker pod is
resubmitted (up to MAX_RESUBMITS times) and resumes."""

from __future__ import annotations

import pytest

from k8s.client.objects import tfjob_state
from runtime.cluster.training import MAX_RESUBMITS
from runtime.requests import TrainRequest
from runtime.workdir import Workdir
from tests.support.cluster_kit import controller, make_ctx, runtime, set_up
from tests.support.fake_training_operator import FakeTrainingOperator
from tests.support.fakekube import FakeClock, FakeKube
from tests.support.tfjob_kit import JOB, NS, job


@pytest.fixture
def fake() -> FakeKube:
    return FakeKube(FakeClock())


@pytest.fixture
def wd(tmp_path) -> Workdir:
    return Workdir.at(tmp_path / "wd")


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
