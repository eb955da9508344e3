"""The tasks (``tasks/``) through the real ``invoke`` CLI: flags become requests, the runtime's
capabilities decide the notes, renamed settings are refused, --dry touches nothing."""

from __future__ import annotations

import pytest

from runtime.image import image_tag
from runtime.workdir import Workdir
from tests.support.cli import REPO, invoke


@pytest.fixture
def wd(tmp_path):
    workdir = Workdir.at(tmp_path / "wd")
    workdir.create()
    workdir.update_state(up=True, runtime="local")
    return workdir.root


def test_cluster_only_flags_are_noted_as_ignored_on_the_local_runtime(wd):
    r = invoke(wd, "--dry", "deploy", "--target", "3", "--request-logger", "--http-port", "8181")
    assert r.returncode == 0, r.stderr
    assert "note: --target, --request-logger apply to cluster runtimes; ignored on local" in (
        r.stdout
    )
    assert "would run (selection): python -m ml.select" in r.stdout
    # publish.json's code version: the image tag this repository's code builds to.
    assert f"--code-version {image_tag(REPO)}" in r.stdout
    assert r.stdout.rstrip().endswith("--host 127.0.0.1 --http-port 8181")


def test_with_argo_is_noted_as_ignored_by_the_local_runtime(wd):
    r = invoke(wd, "--dry", "up", "--runtime", "local", "--with-argo")
    assert r.returncode == 0, r.stderr
    assert "note: --with-argo applies to cluster runtimes; ignored on local" in r.stdout
    assert "argoproj" not in r.stdout  # nothing of Argo is planned


def test_gpus_on_the_local_runtime_are_refused_not_ignored(wd):
    r = invoke(wd, "train", "--model-type", "cnn", "--gpus-per-worker", "1")
    assert r.returncode == 2
    assert "error: --gpus-per-worker cannot be used on the local runtime" in r.stderr


def test_train_and_train_all_build_the_same_request(wd):
    one = invoke(wd, "--dry", "train", "--model-type", "cnn_dropout", "--epochs", "2")
    every = invoke(wd, "--dry", "train-all", "--model-type", "cnn_dropout", "--epochs", "2")
    assert one.returncode == every.returncode == 0, one.stderr + every.stderr
    assert one.stdout == every.stdout
    assert "--model-type cnn_dropout --profile quick --log-every 5 --epochs 2" in one.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["deploy", "--min-accuracy", "86"], "(did you mean 0.86?)"),
        (["loadtest", "--concurrency", "0"], "--concurrency must be at least 1, got 0"),
        (["train-all", "--model-type", "vgg"], "unknown model type 'vgg'"),
        (["up", "--serving-mode", "mesh"], "--serving-mode must be one of knative, standard"),
    ],
)
def test_bad_values_exit_2_before_a_runtime_is_chosen(wd, args, message):
    r = invoke(wd, *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "runtime:" not in r.stdout  # refused before anything was looked at


@pytest.mark.parametrize("old", ["INVOKE_CLUSTER", "INVOKE_NAMESPACE", "INVOKE_INGRESS_PORT"])
def test_the_old_cluster_setting_names_are_refused_with_the_new_ones(wd, old):
    r = invoke(wd, "render", "--out", str(wd / "m"), **{old: "x"})
    assert r.returncode == 2
    assert f"{old} (now INVOKE_CLUSTER_" in r.stderr


@pytest.mark.parametrize("task", ["deploy", "render"])
def test_a_service_name_that_is_no_dns_label_is_refused_before_anything_runs(wd, task):
    # It names a directory under the volume: ../../../x would serve from outside it.
    args = ["--out", str(wd / "m")] if task == "render" else []
    r = invoke(wd, "--dry", task, "--runtime", "local", *args, INVOKE_SERVICE="../../../x")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "service name '../../../x' is not valid" in r.stderr
    assert "INVOKE_SERVICE" in r.stderr and "would run" not in r.stdout


def test_cluster_settings_live_under_one_namespace(wd):
    r = invoke(
        wd,
        "--dry",
        "up",
        "--runtime",
        "k3d",
        INVOKE_CLUSTER_NAME="it",
        INVOKE_CLUSTER_INGRESS_PORT="18080",
    )
    assert r.returncode == 0, r.stderr
    assert "k3d cluster create it " in r.stdout
    assert "-p '18080:80@loadbalancer'" in r.stdout


@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry run"])
def test_a_workflow_on_the_local_runtime_is_refused_with_exit_2(wd, dry):
    r = invoke(wd, *(["--dry"] if dry else []), "workflow", "--runtime", "local", "--watch")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "error: workflows need a cluster" in r.stderr
    assert "`invoke up --runtime k3d --with-argo`" in r.stderr
    assert "`invoke train-all deploy`" in r.stderr
    assert "would run" not in r.stdout  # nothing pretended


def test_workflow_flags_are_checked_before_a_runtime_is_chosen(wd):
    r = invoke(wd, "workflow", "--model-type", "vgg")
    assert r.returncode == 2
    assert "unknown model type 'vgg'" in r.stderr
    assert "runtime:" not in r.stdout


def test_dry_workflow_on_a_cluster_prints_its_objects_and_touches_nothing(tmp_path):
    wd = tmp_path / "wd"
    r = invoke(wd, "--dry", "workflow", "--runtime", "k3d", "--model-type", "cnn")
    assert r.returncode == 0, r.stderr
    kinds = [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Workflow",
    ]
    applied = [line.split()[2] for line in r.stdout.splitlines() if line.startswith("would apply")]
    assert applied == kinds
    assert "  - name: train-cnn\n" in r.stdout and "train-cnn-dropout" not in r.stdout
    assert not wd.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cache-max-age", "soon"], "--cache-max-age must be a duration such as 720h"),
        (["--min-accuracy", "90"], "(did you mean 0.9?)"),
        (["--watch", "--stop"], "use one"),
    ],
)
def test_workflow_values_are_checked_before_a_runtime_is_chosen(wd, args, message):
    r = invoke(wd, "workflow", *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "runtime:" not in r.stdout
