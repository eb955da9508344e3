"""`invoke --dry` on a cluster runtime prints every command and object and touches nothing;
Ctrl-C says what keeps running.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from invoke import Result

from k8s.preflight import Preflight
from runtime.cluster import ClusterRuntime
from runtime.requests import UpRequest
from tests.support.cluster_kit import (
    K3D_CREATE,
    KNATIVE_INSTALL,
    OK,
    REPO,
    TAG,
    commands,
    make_ctx,
    runtime,
)


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


def test_ctrl_c_on_a_cluster_says_the_jobs_keep_running(wd, fake, capsys):
    from invoke import Exit

    import tasks

    rt = runtime(make_ctx(fake, {}), wd, fake)

    def interrupted_train(*args, **kwargs):
        raise KeyboardInterrupt

    rt.train = interrupted_train.__get__(rt)  # a bound method, as tasks calls it
    with pytest.raises(Exit) as info:
        tasks._call(rt.train, ["cnn"])
    assert info.value.code == 130
    err = capsys.readouterr().err
    assert "jobs already submitted keep running in the cluster" in err
    assert "invoke down --keep-cluster" in err
