"""tasks/extras.py through the real ``invoke`` CLI: `invoke workflow` is refused on the local
runtime, checks its flags before a runtime is chosen, and under --dry prints its objects
and touches nothing; `invoke render --prometheus-operator` writes the Operator's objects."""

from __future__ import annotations

import pytest

from tests.support.cli import invoke


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
        (["--watch", "--canary-steps", "20,50"], "--canary-steps tunes a canary release"),
        (["--watch", "--canary", "--canary-steps", "50,20"], "canary steps must rise"),
        (["--watch", "--canary", "--canary-interval", "soon"], "--canary-interval"),
    ],
)
def test_workflow_values_are_checked_before_a_runtime_is_chosen(wd, args, message):
    r = invoke(wd, "workflow", *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "runtime:" not in r.stdout


def test_render_prometheus_operator_writes_and_names_the_operator_s_objects(wd):
    out = wd / "m"
    r = invoke(wd, "render", "--runtime", "kind", "--out", str(out), "--prometheus-operator")
    assert r.returncode == 0, r.stderr
    folder = out / "prometheus-operator"
    names = sorted(p.name for p in folder.glob("*.yaml"))
    assert [n.split("-", 3)[3] for n in names] == [
        "role-distml-prometheus-discovery.yaml",
        "rolebinding-distml-prometheus-discovery.yaml",
        "podmonitor-distml-predictor.yaml",
        "podmonitor-distml-training.yaml",
        "servicemonitor-distml-training-operator.yaml",
        "prometheusrule-distml-rules.yaml",
    ]  # knative mode (the default): no KEDA; kind's namespace is the training operator's
    assert all(str(folder / n) in r.stdout for n in names)
    assert "prometheus-operator/ what you apply where the Prometheus Operator runs" in r.stdout
    helped = invoke(wd, "--help", "render")
    assert "--prometheus-operator" in helped.stdout and "PodMonitors" in helped.stdout
    for flag in ("--prometheus-sa", "--release", "--namespace-only"):
        assert flag in helped.stdout


def test_render_s_operator_flags_shape_what_it_writes(wd):
    import yaml

    out = wd / "m"
    flags = ["--prometheus-sa", "observability/prom", "--release", "kps", "--namespace-only"]
    r = invoke(wd, "render", "--runtime", "kind", "--out", str(out), "--prometheus-operator",
               "--serving-mode", "standard", *flags)  # fmt: skip
    assert r.returncode == 0, r.stderr
    found = [yaml.safe_load(p.read_text()) for p in sorted(out.glob("prometheus-operator/*"))]
    assert [o["kind"] for o in found] == [
        "Role", "RoleBinding", "PodMonitor", "PodMonitor", "PrometheusRule",
    ]  # fmt: skip
    assert found[1]["subjects"][0] | {"kind": "-"} == {
        "kind": "-", "name": "prom", "namespace": "observability",
    }  # fmt: skip
    assert all(o["metadata"]["labels"]["release"] == "kps" for o in found[2:])
    alerts = {r.get("alert") for g in found[-1]["spec"]["groups"] for r in g["rules"]}
    assert "DistmlTFJobFailed" not in alerts and "DistmlTrainingStalled" in alerts


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--release", "kps"], "error: --release needs --prometheus-operator"),
        (["--namespace-only", "--prometheus-sa", "a/b"],
         "error: --prometheus-sa, --namespace-only need --prometheus-operator"),
        (["--prometheus-operator", "--prometheus-sa", "prometheus-k8s"],
         "error: --prometheus-sa must be NAMESPACE/NAME, e.g. monitoring/prometheus-k8s"),
        (["--prometheus-operator", "--release", "My_Release"],
         "error: --release must be a Helm release's name"),
    ],
    ids=["a flag without the operator's", "two of them", "an account without its namespace",
         "a release Helm would refuse"],
)  # fmt: skip
def test_render_s_operator_flags_are_checked_before_anything_is_written(wd, args, message):
    r = invoke(wd, "render", "--runtime", "kind", "--out", str(wd / "m"), *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    assert not (wd / "m").exists()
