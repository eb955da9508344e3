"""runtime/cluster/up.py on a cluster without a cluster: exact CLI commands, objects applied,
idempotence, preflight, --source-dir, ports and installer failures; `up --with-argo` (the
exact commands of a first and a second run, what the state records); and `up` under --dry,
through ClusterRuntime and through the real CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from unittest.mock import Mock

import pytest
from invoke import Result

from common.errors import DistmlError
from k8s.install import operators
from k8s.install.preflight import Preflight
from ml.contract import RAW_FILES
from runtime.cluster import ClusterError, ClusterRuntime
from runtime.requests import DownRequest, UpRequest
from tests.support.argo_kit import up_with_argo
from tests.support.cluster_kit import (
    ARGO_INSTALL,
    K3D_CREATE,
    KC,
    KNATIVE_INSTALL,
    OK,
    REPO,
    TAG,
    available,
    commands,
    k3d_results,
    kind_results,
    make_ctx,
    runtime,
)
from tests.support.fakekube import conditions_status


def test_up_on_an_empty_machine_runs_every_step_in_order(wd, fake):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up(UpRequest()) == 0
    tar = wd.root / "build" / "distml-image.tar"
    assert commands(c) == [
        "k3d cluster list -o json",
        K3D_CREATE,
        *KNATIVE_INSTALL,
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}",
        "docker exec k3d-dist-ml-server-0 crictl images -o json",
        f"docker save -o {tar} {TAG}",
        f"k3d image import {tar} -c dist-ml",
        f"rm -f {tar}",
    ]
    assert [f"{o['kind']}/{o['metadata']['name']}" for o in fake.applied] == [
        "ConfigMap/distml-cluster-owner",  # in kube-system: this work dir made the cluster
        "Namespace/kubeflow",
        "Namespace/kserve",  # kserve.yaml does not carry its own Namespace
        "PersistentVolumeClaim/strategy-volume",
        "Job/distml-ingest",
    ]
    # The training operator's webhook was probed with a server-side dry-run TFJob.
    assert [o["kind"] for o in fake.dry_runs] == ["TFJob"]
    state = wd.state()
    assert state.up and state.runtime == "k3d" and state.image == TAG
    assert state.serving_mode == "knative"
    assert any("ready; next: invoke train-all" in line for line in lines)


def test_a_second_up_reports_every_step_as_already_done_and_changes_nothing(wd, fake):
    runtime(make_ctx(fake, k3d_results(exists=False, imported=False)), wd, fake).up(UpRequest())
    applied_before = len(fake.applied)
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up(UpRequest()) == 0
    # Only read-only queries ran: no create, no install, no import, no new Job.
    assert commands(c) == [
        "k3d cluster list -o json",
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}",
        "docker exec k3d-dist-ml-server-0 crictl images -o json",
    ]
    new = [o["kind"] for o in fake.applied[applied_before:]]
    assert new == ["Namespace", "PersistentVolumeClaim"]  # server-side apply: no-op
    steps = [
        line
        for line in lines
        if ": " in line and not line.startswith(("found", "==")) and "next:" not in line
    ]
    assert steps and all("already" in line for line in steps), steps


def test_an_up_that_stopped_before_kserves_cluster_resources_applies_them_next_time(wd, fake):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake).up(UpRequest()) == 0
    fake.remove(*operators.KSERVE_TF_RUNTIME)  # as if the first `up` had timed out there
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up(UpRequest()) == 0
    assert "KServe v0.20.0: already installed" in lines
    ran = commands(c)
    assert [x for x in ran if "kserve" in x and " apply " in x] == [KNATIVE_INSTALL[-1]]


def test_preflight_problems_stop_up_before_anything_is_created(wd, fake):
    c = make_ctx(fake, {})
    rt = runtime(c, wd, fake, problems=["k3d: not found on PATH: install k3d"])
    with pytest.raises(ClusterError, match=r"preflight failed, nothing was created:\n  - k3d"):
        rt.up(UpRequest())
    assert commands(c) == [] and fake.applied == [] and not wd.root.exists()


def test_source_dir_is_checked_then_copied_into_the_volume(wd, fake, tmp_path):
    with pytest.raises(ClusterError, match=r"lacks train-images-idx3-ubyte\.gz"):
        runtime(make_ctx(fake, {}), wd, fake).up(UpRequest(source_dir=str(tmp_path)))
    src = tmp_path / "data"
    src.mkdir()
    for name in RAW_FILES:
        (src / name).write_bytes(b"x")
    c = make_ctx(fake, k3d_results(exists=False, imported=True))
    assert runtime(c, wd, fake).up(UpRequest(source_dir=str(src))) == 0
    cp = [cmd for cmd in commands(c) if " cp " in cmd]
    assert cp == [
        f"{KC}-n kubeflow cp {src / n} distml-data-loader:/trained_model/raw/fashion-mnist/{n}"
        for n in RAW_FILES
    ]
    ingest = fake.obj("batch/v1", "Job", "distml-ingest", "kubeflow")
    assert ingest["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == [
        "--source-dir",
        "/trained_model/raw/fashion-mnist",
    ]
    assert ("v1", "Pod", "kubeflow", "distml-data-loader") in fake.deleted


def test_raw_file_names_match_the_pod_side():
    from ml.data.dataset import FILES

    assert set(RAW_FILES) == set(FILES)


def test_kind_standard_mode_installs_metrics_server_and_exposes_a_node_port(wd, fake):
    results = {
        "kind get clusters": Result(""),
        re.compile(r"^(kind|kubectl|docker|rm -f) .*"): OK,
        "docker exec dist-ml-control-plane crictl images -o json": Result('{"images": []}'),
    }
    c = make_ctx(fake, results)
    assert runtime(c, wd, fake, provider="kind").up(UpRequest(serving_mode="standard")) == 0
    cmds = commands(c)
    create = next(cmd for cmd in cmds if cmd.startswith("kind create cluster"))
    assert create == (
        f"kind create cluster --name dist-ml --image kindest/node:v1.33.1 "
        f"--config {wd.root / 'kind-config.yaml'} --wait 300s"
    )
    config = (wd.root / "kind-config.yaml").read_text()
    assert "containerPort: 31080" in config and "hostPort: 8080" in config
    assert any("metrics-server" in cmd and "components.yaml" in cmd for cmd in cmds)
    assert any("--kubelet-insecure-tls" in cmd for cmd in cmds)
    assert not any("istio" in cmd or "knative" in cmd for cmd in cmds)
    assert any(cmd.startswith("kind load image-archive") for cmd in cmds)
    # No cluster-wide default-mode patch: the InferenceService names its mode itself.
    assert not any("inferenceservice-config" in cmd for cmd in cmds)


def test_kind_knative_exposes_the_gateway_on_the_mapped_node_port_once(wd, fake):
    c = make_ctx(fake, kind_results())
    assert runtime(c, wd, fake, provider="kind").up(UpRequest()) == 0
    patch = [cmd for cmd in commands(c) if "istio-ingressgateway" in cmd]
    assert patch == [
        "kubectl --context kind-dist-ml -n istio-system patch service istio-ingressgateway -p "
        '\'{"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 31080}]}}\''
    ]
    c2 = make_ctx(fake, kind_results("dist-ml\n"))
    assert runtime(c2, wd, fake, provider="kind").up(UpRequest()) == 0
    assert not any("patch" in cmd for cmd in commands(c2))


def test_switching_serving_mode_on_a_set_up_cluster_is_refused(wd, fake):
    runtime(make_ctx(fake, k3d_results(exists=False, imported=False)), wd, fake).up(UpRequest())
    with pytest.raises(ClusterError, match="needs a fresh cluster: `invoke down`"):
        runtime(make_ctx(fake, {}), wd, fake).up(UpRequest(serving_mode="standard"))


def test_a_busy_ingress_port_stops_up_before_the_cluster_is_created(wd, fake):
    import socket

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        c = make_ctx(fake, k3d_results(exists=False, imported=False))
        rt = ClusterRuntime(
            c,
            "k3d",
            wd,
            REPO,
            ingress_port=port,
            out=lambda _: None,
            kube=fake,
            clock=fake.clock,
            preflight=lambda *a, **k: Preflight(),
        )
        with pytest.raises(ClusterError, match=f"host port {port} is in use"):
            rt.up(UpRequest())
    assert not any("cluster create" in cmd for cmd in commands(c))


def test_a_permanent_kubectl_error_fails_up_at_once_with_kubectls_message(wd, fake):
    bad = (
        "error: unable to read URL "
        '"https://github.com/kserve/kserve/releases/download/v0.20.0/kserve-crds.yaml", '
        "server reported 404 Not Found, status code=404"
    )
    # The specific pattern comes first: MockContext takes the first that matches.
    results = {
        re.compile(r".*kserve-crds\.yaml$"): Result(stderr=bad, exited=1),
        **k3d_results(exists=False, imported=False),
    }
    c = make_ctx(fake, results)
    started = fake.clock.now
    with pytest.raises(DistmlError, match="404 Not Found"):  # the task prints `error: ...`
        runtime(c, wd, fake).up(UpRequest())
    assert fake.clock.now - started < 5  # no 600 s of retries
    assert sum("kserve-crds.yaml" in cmd for cmd in commands(c)) == 1


def test_a_webhook_race_is_retried_until_it_passes(wd, fake):
    refused = Result(
        stderr='Error from server (InternalError): failed calling webhook "webhook.cert-manager'
        '.io": connection refused',
        exited=1,
    )
    attempts = iter([refused, refused, OK])
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    inner = c.run

    def flaky(command, *args, **kwargs):
        if command.endswith("kserve.yaml"):
            result = next(attempts)
            if result.ok:
                available(fake, "kserve", "kserve-controller-manager")
            return result
        return inner(command, *args, **kwargs)

    c.run = Mock(wraps=flaky)
    lines = []
    assert runtime(c, wd, fake, lines=lines).up(UpRequest()) == 0
    assert sum(cmd.endswith("/kserve.yaml") for cmd in commands(c)) == 3
    assert any("not ready yet" in line and "connection refused" in line for line in lines)


def test_up_with_argo_installs_it_after_kserve_and_records_it(wd, fake):
    lines = []
    c = up_with_argo(wd, fake, lines)
    tar = wd.root / "build" / "distml-image.tar"
    assert commands(c) == [
        "k3d cluster list -o json",
        K3D_CREATE,
        *KNATIVE_INSTALL,
        ARGO_INSTALL,
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}",
        "docker exec k3d-dist-ml-server-0 crictl images -o json",
        f"docker save -o {tar} {TAG}",
        f"k3d image import {tar} -c dist-ml",
        f"rm -f {tar}",
    ]
    # install.yaml holds no Namespace: `up` makes it, labelled like everything it owns.
    namespaces = [o for o in fake.applied if o["kind"] == "Namespace"]
    assert [o["metadata"]["name"] for o in namespaces] == ["kubeflow", "kserve", "argo"]
    assert namespaces[-1]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "distml"
    assert "Argo Workflows v4.1.2: installing" in lines
    assert "== operators (knative serving mode, with Argo Workflows)" in lines
    assert wd.state().argo is True


def test_up_waits_for_both_argo_deployments(wd, fake):
    """The controller runs workflows, the server is the UI: `up` returns only when both are
    Available (here argo-server turns Available 30 s after the install)."""
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    inner = c.run

    def slow_server(command, *args, **kwargs):
        result = inner(command, *args, **kwargs)
        if command == ARGO_INSTALL:
            server = fake.obj("apps/v1", "Deployment", "argo-server", "argo")
            server["status"] = conditions_status(("Available", "False"))
            ready = conditions_status(("Available", "True"))
            fake.at(fake.clock.now + 30, lambda: server.update(status=ready))
        return result

    c.run = Mock(wraps=slow_server)
    lines = []
    started = fake.clock.now
    assert runtime(c, wd, fake, lines=lines).up(UpRequest(with_argo=True)) == 0
    assert fake.clock.now - started >= 30
    assert any("waiting for argo-server" in line for line in lines), lines


def test_a_second_plain_up_keeps_argo_and_changes_nothing(wd, fake):
    up_with_argo(wd, fake)
    applied_before = len(fake.applied)
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up(UpRequest()) == 0  # no --with-argo
    assert commands(c) == [
        "k3d cluster list -o json",
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}",
        "docker exec k3d-dist-ml-server-0 crictl images -o json",
    ]
    assert [o["kind"] for o in fake.applied[applied_before:]] == [
        "Namespace",
        "PersistentVolumeClaim",
    ]
    assert "Argo Workflows v4.1.2: already installed" in lines
    assert wd.state().argo is True


def test_an_argo_that_went_missing_is_installed_again_by_a_plain_up(wd, fake):
    up_with_argo(wd, fake)
    fake.remove("apps/v1", "Deployment", "workflow-controller", "argo")
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake).up(UpRequest()) == 0
    assert [x for x in commands(c) if "argoproj" in x] == [ARGO_INSTALL]


def test_an_argo_server_that_is_not_available_is_not_taken_for_installed(wd, fake):
    up_with_argo(wd, fake)
    fake.remove("apps/v1", "Deployment", "argo-server", "argo")  # the controller is fine
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up(UpRequest()) == 0
    assert [x for x in commands(c) if "argoproj" in x] == [ARGO_INSTALL]
    assert "Argo Workflows v4.1.2: already installed" not in lines


def test_up_without_argo_never_touches_it(wd, fake):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake).up(UpRequest()) == 0
    assert not any("argoproj" in x for x in commands(c))
    assert wd.state().argo is False
    c = make_ctx(fake, {})
    assert runtime(c, wd, fake).down(DownRequest(keep_cluster=True)) == 0
    assert commands(c) == []


def test_dry_up_prints_commands_and_objects_in_order_and_touches_nothing(wd, fake):
    results = {
        "k3d cluster list -o json": Result("[]"),
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}": OK,
        "docker exec k3d-dist-ml-server-0 crictl images -o json": Result('{"images": []}'),
        re.compile(".*"): OK,
    }
    c = make_ctx(fake, results, dry=True)
    lines = []
    rt = ClusterRuntime(
        c,
        "k3d",
        wd,
        REPO,
        out=lines.append,
        clock=fake.clock,
        preflight=lambda *a, **k: Preflight(problems=["k3d: not found on PATH"]),
    )
    assert rt.up(UpRequest()) == 0
    assert not wd.root.exists()  # nothing written
    assert fake.applied == []  # the real seam is never built under --dry
    assert commands(c)[1] == K3D_CREATE
    assert commands(c)[2 : 2 + len(KNATIVE_INSTALL)] == KNATIVE_INSTALL
    text = "\n".join(lines)
    assert "preflight (a real run would stop here): k3d: not found" in text
    order = [text.index(f"would apply {k}") for k in ("Namespace", "PersistentVolumeClaim", "Job")]
    assert order == sorted(order)
    assert "kind: PersistentVolumeClaim" in text  # the object itself, as YAML


def test_invoke_dry_end_to_end_prints_and_creates_nothing(tmp_path):
    """The real CLI: `invoke --dry up --runtime kind` on this machine (no cluster here)."""
    env = {**os.environ, "INVOKE_WORKDIR": str(tmp_path / "wd")}
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "--dry", "up", "--runtime", "kind"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "kind create cluster --name dist-ml --image kindest/node:v1.33.1" in out
    assert "would apply Namespace kubeflow" in out
    assert "would apply PersistentVolumeClaim kubeflow/strategy-volume" in out
    assert out.index("kind create cluster") < out.index("would apply Namespace")
    assert out.index("would apply Namespace") < out.index("kserve.yaml")
    assert not (tmp_path / "wd").exists()
