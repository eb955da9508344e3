"""runtime/cluster/render.py: `invoke render` writes every object as valid YAML, in apply order,
and the install script."""

from __future__ import annotations

import pytest

from k8s import manifests
from ml.contract import MODEL_TYPES
from runtime.cluster import ClusterRuntime
from runtime.workdir import Workdir
from tests.support.cluster_kit import REPO, make_ctx
from tests.support.k8s_schemas import validate


@pytest.mark.parametrize("provider", ["k3d", "kind", "minikube"])
@pytest.mark.parametrize("mode", ["knative", "standard"])
def test_render_writes_every_object_in_apply_order_and_each_is_valid(
    tmp_path, provider, mode, fake
):
    wd = Workdir.at(tmp_path / "wd")
    rt = ClusterRuntime(make_ctx(fake, {}), provider, wd, REPO, out=lambda _: None)
    written = rt.render(tmp_path / "out", serving_mode=mode)
    if provider == "kind":  # the cluster config the script's `kind create cluster` uses
        assert written[-1].name == "kind-config.yaml"
        assert "--config kind-config.yaml" in written[0].read_text()
        assert "hostPort: 8080" in written[-1].read_text()
        written = written[:-1]
    files = [p for p in written if p.parent.name != "workflow"]
    flow = [p for p in written if p.parent.name == "workflow"]
    names = [p.name for p in files]
    assert names[0] == "00-operators.sh"
    assert names[1:] == sorted(names[1:])
    assert [p.name for p in flow] == sorted(p.name for p in flow)
    kinds = [n.split("-")[2] if n.split("-")[1] != "train" else n for n in names[1:]]
    assert kinds[0] == "namespace"
    import yaml

    objects = [yaml.safe_load(p.read_text()) for p in files[1:]]
    assert [o["kind"] for o in objects][:2] == ["Namespace", "PersistentVolumeClaim"]
    assert [o["kind"] for o in objects].count("TFJob") == 3
    # In workflow/, what `invoke workflow` applies instead of train-all + deploy, as it
    # applies it (the same builder, the same key), numbered from 01: never a sequel.
    s = rt.cx.settings(serving_mode=mode)
    expected = manifests.workflow_objects(
        s, models=MODEL_TYPES, cache_key=manifests.data_cache_key(s)
    )
    assert [yaml.safe_load(p.read_text()) for p in flow] == expected
    assert flow[0].name.startswith("01-workflow-") and "workflow" not in "".join(names)
    assert flow[-1].name.startswith(f"{len(expected):02d}-workflow-workflow-")
    for obj in objects:
        assert validate(obj) == [], obj["metadata"]["name"]
    script = files[0].read_text()
    assert ("knative" in script) == (mode == "knative")
    assert not wd.root.exists()  # render touches no cluster and no work dir


def test_render_with_monitoring_writes_distml_s_prometheus_where_up_applies_it(tmp_path, fake):
    import yaml

    from k8s.monitoring import stack

    wd = Workdir.at(tmp_path / "wd")
    rt = ClusterRuntime(make_ctx(fake, {}), "kind", wd, REPO, out=lambda _: None)
    written = rt.render(tmp_path / "out", serving_mode="standard", with_monitoring=True)
    files = [p for p in written if p.suffix == ".yaml" and p.parent.name == "out"]
    objects = [yaml.safe_load(p.read_text()) for p in files if p.name[0].isdigit()]
    s = rt.cx.settings(serving_mode="standard", with_monitoring=True)
    ours = stack.prometheus_objects(s)
    # After the namespace and before the volume, in `up`'s order (k8s.monitoring.stack).
    assert objects[1 : 1 + len(ours)] == ours
    assert objects[0]["kind"] == "Namespace"
    assert objects[1 + len(ours)]["kind"] == "PersistentVolumeClaim"
    without = rt.render(tmp_path / "plain", serving_mode="standard")
    assert len(without) == len(written) - len(ours)


def test_render_prometheus_operator_writes_its_objects_in_a_folder_of_their_own(tmp_path, fake):
    import yaml

    from k8s.monitoring import prometheus_operator

    wd = Workdir.at(tmp_path / "wd")
    rt = ClusterRuntime(make_ctx(fake, {}), "kind", wd, REPO, out=lambda _: None)
    out = tmp_path / "out"
    plain = rt.render(out, serving_mode="standard")
    written = rt.render(out, serving_mode="standard", prometheus_operator=True)
    folder = [p for p in written if p.parent.name == "prometheus-operator"]
    assert [p for p in written if p not in folder] == plain  # the rest as without it
    # kind: distml's namespace is the training operator's, kubeflow; KEDA's is keda.
    assert [p.name for p in folder] == [
        "01-prometheus-operator-role-distml-prometheus-discovery.yaml",
        "02-prometheus-operator-rolebinding-distml-prometheus-discovery.yaml",
        "03-prometheus-operator-role-distml-prometheus-discovery.yaml",
        "04-prometheus-operator-rolebinding-distml-prometheus-discovery.yaml",
        "05-prometheus-operator-podmonitor-distml-predictor.yaml",
        "06-prometheus-operator-podmonitor-distml-training.yaml",
        "07-prometheus-operator-servicemonitor-distml-training-operator.yaml",
        "08-prometheus-operator-servicemonitor-distml-keda-operator.yaml",
        "09-prometheus-operator-prometheusrule-distml-rules.yaml",
    ]
    s = rt.cx.settings(serving_mode="standard")
    expected = prometheus_operator.operator_objects(s)
    assert [yaml.safe_load(p.read_text()) for p in folder] == expected
    assert expected[0]["metadata"]["namespace"] == s.namespace
    options = prometheus_operator.OperatorOptions(namespace_only=True, release="kps")
    narrow = rt.render(out, serving_mode="standard", prometheus_operator=True,
                       operator_options=options)  # fmt: skip
    folder = [p for p in narrow if p.parent.name == "prometheus-operator"]
    assert [yaml.safe_load(p.read_text()) for p in folder] == (
        prometheus_operator.operator_objects(s, options)
    )
    assert len(list((out / "prometheus-operator").glob("*.yaml"))) == len(folder) == 5
    rt.render(out, serving_mode="standard")  # without it again: none left behind
    assert list((out / "prometheus-operator").glob("*.yaml")) == []
    assert not (tmp_path / "never").exists()
    rt.render(tmp_path / "never", serving_mode="standard")
    assert not (tmp_path / "never" / "prometheus-operator").exists()
