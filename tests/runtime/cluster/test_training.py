"""runtime/cluster/training.py: training on a cluster: TFJobs per model, replacement, waves
that fit the node, failures, the metrics table off the volume.
"""

from __future__ import annotations

import pytest

from k8s.install import capacity
from k8s.providers.settings import Settings
from ml.contract import MODEL_TYPES
from runtime.cluster import ClusterError
from runtime.requests import RequestError, TrainRequest
from tests.support.cluster_kit import (
    TAG,
    controller,
    make_ctx,
    node,
    runtime,
    set_up,
)
from tests.support.fakekube import FakeClock, FakeKube


def test_train_all_submits_one_tfjob_per_model_together_and_waits(wd, fake):
    set_up(wd, fake)
    lines = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert (
        rt.train(TrainRequest(models=tuple(["cnn", "cnn_dropout", "cnn_batchnorm"]), epochs=1)) == 0
    )
    tfjobs = [o for o in fake.applied if o["kind"] == "TFJob"]
    assert [j["metadata"]["name"] for j in tfjobs] == [
        "train-cnn",
        "train-cnn-dropout",
        "train-cnn-batchnorm",
    ]
    assert all(j["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 2 for j in tfjobs)
    assert any("Succeeded" in line for line in lines)
    assert not any(line.startswith("TFJob train-cnn: Succeeded (") for line in lines)  # once
    assert lines[-1] == "next: invoke deploy"
    # The candidates' metrics came off the volume: accuracy table and training curves.
    assert any(line.startswith("cnn ") and "0.8100" in line for line in lines)
    assert (wd.reports / "training-curves.png").stat().st_size > 5_000
    assert ("v1", "Pod", "kubeflow", "distml-data-loader") in fake.deleted
    assert "dataset: already prepared" in "\n".join(lines)  # ingest Job completed in up


def test_resubmitting_replaces_the_finished_job_of_the_same_name(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(TrainRequest(models=("cnn",)))
    lines = []
    assert (
        runtime(make_ctx(fake, {}), wd, fake, lines=lines).train(
            TrainRequest(models=("cnn",), epochs=2)
        )
        == 0
    )
    assert ("kubeflow.org/v1", "TFJob", "kubeflow", "train-cnn") in fake.deleted
    assert "TFJob train-cnn: replacing the succeeded job" in lines
    job = fake.obj("kubeflow.org/v1", "TFJob", "train-cnn", "kubeflow")
    cmd = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--epochs") + 1] == "2"


def test_a_failed_tfjob_is_reported_with_its_pods_and_exits_nonzero(wd):
    fake = FakeKube(FakeClock())
    controller(fake, tfjob_state="Failed")
    set_up(wd, fake)
    fake.add_pod(
        "kubeflow",
        "train-cnn-worker-1",
        {"training.kubeflow.org/job-name": "train-cnn"},
        phase="Failed",
        ready=False,
        exit_code=1,
    )
    fake.set_log("train-cnn-worker-1", "Traceback ...\nValueError: boom")
    lines = []
    assert (
        runtime(make_ctx(fake, {}), wd, fake, lines=lines).train(TrainRequest(models=("cnn",))) == 1
    )
    text = "\n".join(lines)
    assert "ValueError: boom" in text
    assert "next: fix the cause above, then `invoke train --model-type cnn`" in text


def test_train_needs_up_and_known_models(wd, fake):
    rt = runtime(make_ctx(fake, {}), wd, fake)
    with pytest.raises(ClusterError, match="run `invoke up --runtime k3d` first"):
        rt.train(TrainRequest(models=("cnn",)))
    set_up(wd, fake)
    with pytest.raises(RequestError, match="unknown model type 'resnet'; valid: cnn"):
        TrainRequest(models=("resnet",))


def test_gpus_per_worker_reach_the_tfjob(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(TrainRequest(models=("cnn",), gpus_per_worker=1))
    job = fake.obj("kubeflow.org/v1", "TFJob", "train-cnn", "kubeflow")
    limits = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"
    ]["limits"]
    assert limits["nvidia.com/gpu"] == "1"


def test_parallel_runs_the_jobs_in_waves(wd, fake):
    set_up(wd, fake)
    lines = []
    rt = runtime(make_ctx(fake, {}), wd, fake, lines=lines)
    assert rt.train(TrainRequest(models=tuple(["cnn", "cnn_dropout"]), parallel=1)) == 0
    assert "1 job(s) at a time, 2 waves" in lines
    first_done = next(i for i, x in enumerate(lines) if "train-cnn " in x and "Succeeded" in x)
    second_submitted = lines.index("TFJob train-cnn-dropout: submitted")
    assert first_done < second_submitted


def test_train_all_runs_in_waves_that_fit_a_small_node_and_says_so(wd, fake):
    set_up(wd, fake)
    s = Settings(image=TAG, provider="k3d", serving_mode="knative")
    fake.put(node(capacity.requirement(s, 2)))  # room for two jobs' workers, not three
    lines = []
    assert (
        runtime(make_ctx(fake, {}), wd, fake, lines=lines).train(TrainRequest(models=MODEL_TYPES))
        == 0
    )
    said = [x for x in lines if x.startswith("the node offers pods")]
    assert len(said) == 1 and "3 TFJobs at once need" in said[0]
    assert said[0].endswith("running 2 at a time")
    assert "2 job(s) at a time, 2 waves" in lines


def test_train_all_runs_everything_at_once_on_a_node_that_holds_it(wd, fake):
    set_up(wd, fake)
    fake.put(node(capacity.DOCUMENTED_NODE))
    lines = []
    assert (
        runtime(make_ctx(fake, {}), wd, fake, lines=lines).train(TrainRequest(models=MODEL_TYPES))
        == 0
    )
    assert not [x for x in lines if "at a time" in x]
