"""tasks/chooser.py through the real ``invoke`` CLI: the settings the chosen runtime is made
with: cluster settings under one namespace, the old names refused with the new ones, a
service name that is no DNS label refused."""

from __future__ import annotations

import pytest
import yaml

from tests.support.cli import invoke


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


def test_the_cpu_request_settings_reach_every_pod_they_name(wd):
    # A 2-CPU machine: the integration run asks for little CPU (docs/cluster.md).
    out = wd / "m"
    r = invoke(
        wd,
        "render",
        "--runtime",
        "kind",
        "--out",
        str(out),
        INVOKE_CLUSTER_WORKER_CPU="100m",
        INVOKE_CLUSTER_PREDICTOR_CPU="50m",
    )
    assert r.returncode == 0, r.stderr
    docs = [d for p in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    workers = [
        c["resources"]["requests"]["cpu"]
        for d in docs
        if d["kind"] == "TFJob"
        for c in d["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    ]
    assert workers and set(workers) == {"100m"}
    runtimes = [d for d in docs if d["kind"] == "ServingRuntime"]
    assert runtimes[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "50m"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", "cluster.worker_cpu (INVOKE_CLUSTER_WORKER_CPU) 'lots' is not a CPU quantity"),
        ("3", "'3' must be above 0 and at most the pod's CPU limit (1)"),
        ("0m", "'0m' must be above 0"),
    ],
)
def test_a_cpu_request_no_cluster_would_accept_exits_2_naming_the_setting(wd, value, message):
    r = invoke(wd, "render", "--out", str(wd / "m"), INVOKE_CLUSTER_WORKER_CPU=value)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    assert not (wd / "m").exists()  # refused before anything was written


def test_the_node_image_setting_reaches_kind_create_and_minikube_start(wd):
    image = {"INVOKE_CLUSTER_NODE_IMAGE": "distml-kind/node:v1.33.1"}
    kind = invoke(wd, "--dry", "up", "--runtime", "kind", **image)
    assert "kind create cluster --name dist-ml --image distml-kind/node:v1.33.1 " in kind.stdout
    minikube = invoke(wd, "--dry", "up", "--runtime", "minikube", **image)
    assert minikube.returncode == 0, minikube.stderr
    home = (wd / "minikube").resolve()  # the work dir's own
    assert f"MINIKUBE_HOME={home} minikube start -p dist-ml " in minikube.stdout
    assert "--base-image distml-kind/node:v1.33.1 --preload=false" in minikube.stdout
