"""runtime/cluster/status.py: `invoke status` on a cluster: one table of the cluster, operators
(Argo once `up` installed it), jobs and service."""

from __future__ import annotations

import re

from runtime.requests import DeployRequest, TrainRequest, UpRequest
from tests.support.cluster_kit import (
    KC,
    PUBLISH_RECORD,
    TAG,
    commands,
    k3d_results,
    make_ctx,
    runtime,
    set_up,
)


def test_status_shows_cluster_operators_jobs_isvc_and_replicas(wd, fake):
    set_up(wd, fake)
    runtime(make_ctx(fake, {}), wd, fake).train(TrainRequest(models=("cnn",)))
    runtime(make_ctx(fake, {}), wd, fake).deploy(DeployRequest())
    fake.add_pod(
        "kubeflow", "tf-mnist-predictor-1", {"serving.kserve.io/inferenceservice": "tf-mnist"}
    )
    lines = []
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake, lines=lines).status() == 0
    text = "\n".join(lines)
    assert re.search(r"cluster +dist-ml \(k3d, context k3d-dist-ml\): running", text)
    assert re.search(r"training operator +available", text)
    assert re.search(r"TFJob train-cnn +Succeeded; workers succeeded 2", text)
    assert re.search(
        r"InferenceService tf-mnist +Ready, http://tf-mnist-kubeflow.example.com, 1 ready", text
    )
    # The model card of the serving version, copied off the volume by the loader pod.
    assert (
        KC + "-n kubeflow cp distml-data-loader:/trained_model/reports/serving-tf-mnist.json "
        f"{wd.root / 'cluster-volume/reports/serving-tf-mnist.json'}"
    ) in commands(c)
    assert re.search(r"serving model +version 2: cnn \(candidate cnn\)", text)
    assert re.search(
        r"serving accuracy +validation 0\.8712 \(chosen on\), test 0\.8655 \(reported only\)",
        text,
    )
    assert re.search(rf"serving code +{re.escape(TAG)}", text)
    assert re.search(r"serving reason +" + re.escape(PUBLISH_RECORD["reason"]), text)
    assert fake.get("v1", "Pod", "distml-data-loader", "kubeflow") is None, "pod removed"


def test_status_without_a_cluster_says_how_to_make_one(wd, fake):
    lines = []
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake, lines=lines).status() == 0
    assert any("not found (run `invoke up`)" in line for line in lines)
    assert fake.calls == [] or all(call[0] != "apply" for call in fake.calls)


def test_status_shows_argo_once_up_installed_it(wd, fake):
    def status_lines():
        lines = []
        c = make_ctx(fake, k3d_results(exists=True, imported=True))
        assert runtime(c, wd, fake, lines=lines).status() == 0
        return "\n".join(lines)

    set_up(wd, fake)
    assert "argo workflows" not in status_lines()
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake).up(UpRequest(with_argo=True)) == 0
    assert re.search(r"argo workflows +available", status_lines())


def test_status_shows_the_last_canarys_outcome_even_without_the_cluster(wd, fake):
    from runtime.canary import live

    set_up(wd, fake)
    report = live.Live(live.report_path(wd, "tf-mnist"), version=3, stable=2, pid=1)
    report.say(lambda line: None, "promoted: version 3 serves every request (step 2 of 2)")
    report.end()
    lines: list[str] = []
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake, lines=lines).status() == 0
    assert re.search(
        r"last canary +version 3 beside version 2: promoted: version 3 serves every",
        "\n".join(lines),
    )
