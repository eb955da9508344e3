"""k8s.install.operators.Installer on a cluster distml did not create (``--runtime existing``): it
finds the operators and says their versions, reports what is missing with the commands
that install it (installing it only with ``--install-operators``) and changes nothing
cluster-wide: no istiod, Knative ConfigMap or metrics-server patch, no KServe cluster
resources. It surveys every step before installing any, and installs nothing when one is
blocked (a broken Deployment, or anything its install makes cluster-wide there without it).
Istio's gateway is made a ClusterIP unless asked otherwise
(tests/k8s/install/test_istio_gateway.py).
A cluster distml made (kind) still gets its tuning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from invoke import Config, MockContext, Result

from k8s.install import operators, upstream_files, versions
from k8s.install.operator_check import (
    CLUSTER_WIDE_KINDS,
    PROBES,
    VERSION_LABEL,
    MissingOperators,
    cluster_wide,
)
from k8s.install.operators import Installer, PermanentError, components
from k8s.install.optional_operators import ARGO_DEPLOYMENTS
from k8s.providers import provider as make_provider
from k8s.providers.settings import Settings
from tests.support.fakekube import FakeKube, conditions_status

CONTEXT = "team-cluster"
KUBECTL = f"kubectl --context {CONTEXT} "
MODES = ("knative", "standard")


def steps(mode: str, with_argo: bool = False) -> tuple[str, ...]:
    return components("existing", mode, with_argo)


def add_deployment(fake: FakeKube, namespace: str, name: str, version: str = "") -> None:
    labels = {VERSION_LABEL: version} if version else {}
    fake.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x/y:z"}]}}},
            "status": conditions_status(("Available", "True")),
        }
    )


def install_probes(fake: FakeKube, wanted: tuple[str, ...], version: str | None = None) -> None:
    for step in (s for s in wanted if s in PROBES):
        probe = PROBES[step]
        add_deployment(fake, probe.namespace, probe.deployment, version or probe.pinned)
        if step == "argo":
            for name in ARGO_DEPLOYMENTS:
                add_deployment(fake, probe.namespace, name, probe.pinned)


def installer(
    provider: str = "existing", mode: str = "knative", install_missing: bool = False, **kw: Any
) -> tuple[Installer, FakeKube, list[str], list[str]]:
    ran: list[str] = []
    said: list[str] = []
    ctx = MockContext(config=Config(overrides={"run": {"dry": False}}))

    def run(command: str, **_: Any) -> Result:
        ran.append(command)
        said.append(f"$ {command}")  # the order of what is said and what runs
        local = Path(command.rsplit(" ", 1)[-1])
        if local.is_absolute() and local.is_file():  # a file distml wrote: kept for the test
            ctx.applied_files[command] = local.read_text()  # type: ignore[attr-defined]
        return Result(command=command)

    ctx.run = run  # type: ignore[method-assign]
    ctx.applied_files = {}  # type: ignore[attr-defined]
    fake = FakeKube()
    settings = Settings(image="registry.example.com/distml:t", provider=provider,
                        serving_mode=mode, **kw)  # fmt: skip
    p = make_provider(provider, kube_context=CONTEXT)
    inst = Installer(ctx, fake, p, settings, said.append, fake.clock)
    inst.install_missing = install_missing
    return inst, fake, ran, said


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Deployments an install waits for are taken as Available at once."""
    monkeypatch.setattr(operators, "wait_deployments_available", lambda *a, **k: None)


GATEWAY_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system"},
    "spec": {"type": "LoadBalancer", "ports": [{"name": "http2", "port": 80}]},
}
ISTIOD = {"apiVersion": "apps/v1", "kind": "Deployment",
          "metadata": {"name": "istiod", "namespace": "istio-system"}}  # fmt: skip


@pytest.fixture(autouse=True)
def small_istio_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Istio's pinned install file, as small as it can be: the gateway Service as released
    (a LoadBalancer) and istiod. (The real one: tests/k8s/install/test_istio_gateway.py.)"""
    path = tmp_path / "istio.yaml"
    path.write_text(yaml.safe_dump_all([GATEWAY_SERVICE, ISTIOD]))

    def local_copy(url: str, mirror: str = "", named_by: str = "") -> Path:
        assert url == versions.ISTIO_URL
        return path

    monkeypatch.setattr(upstream_files, "local_copy", local_copy)
    return path


def gateway_type_in(text: str) -> str:
    (service,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Service"]
    return service["spec"]["type"]


# ------------------------------------------------------------------ all there
@pytest.mark.parametrize("mode", MODES)
def test_everything_found_is_said_with_its_version_and_nothing_runs(mode):
    inst, fake, ran, said = installer(mode=mode)
    install_probes(fake, steps(mode))
    inst.all()
    assert ran == []
    assert fake.applied == [] and fake.dry_runs == []
    assert len(said) == len(steps(mode))
    for step, line in zip(steps(mode), said, strict=True):
        probe = PROBES[step]
        assert f"found ({probe.namespace}/{probe.deployment}, {probe.pinned})" in line
        assert "the version distml pins" in line


def test_argo_found_too_when_asked_for():
    inst, fake, ran, said = installer(with_argo=True)
    install_probes(fake, steps("knative", with_argo=True))
    inst.all()
    assert ran == []
    assert any(f"argo/workflow-controller, {versions.ARGO_WORKFLOWS_VERSION})" in s for s in said)


def test_another_version_is_used_as_it_is_and_named():
    inst, fake, ran, said = installer(mode="standard")
    install_probes(fake, steps("standard"), version="v0.0.1")
    inst.all()
    assert ran == []
    assert all("v0.0.1" in line and "distml pins" in line for line in said)
    assert not any("the version distml pins" in line for line in said)


@pytest.mark.parametrize("mode", MODES)
def test_nothing_cluster_wide_is_touched_even_when_it_differs_from_the_lab(mode):
    """istiod with its own requests, Knative without distml's domain, no KServe
    ClusterServingRuntime: all left as the admin made them."""
    inst, fake, ran, _ = installer(mode=mode)
    install_probes(fake, steps(mode))
    admins = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"corp.example": ""}}
    admins["metadata"] = {"name": "config-domain", "namespace": "knative-serving"}
    fake.put(admins)
    inst.all()
    assert ran == []
    assert fake.obj("v1", "ConfigMap", "config-domain", "knative-serving")["data"] == {
        "corp.example": ""
    }
    assert fake.names("ClusterServingRuntime") == []


# ------------------------------------------------------------------ some missing
@pytest.mark.parametrize(
    ("mode", "missing"),
    [
        ("knative", ("istio", "knative")),
        ("knative", ("training_operator",)),
        ("standard", ("metrics_server", "kserve")),
        ("standard", ("cert_manager", "training_operator", "kserve")),
    ],
)
def test_missing_operators_are_reported_exactly_and_not_installed(mode, missing):
    inst, fake, ran, _ = installer(mode=mode)
    install_probes(fake, tuple(s for s in steps(mode) if s not in missing))
    with pytest.raises(MissingOperators) as e:
        inst.all()
    assert ran == []
    assert fake.applied == []
    message = str(e.value)
    assert f"context {CONTEXT!r}" in message
    lacking = [line for line in message.splitlines() if line.startswith("  - ")]
    assert len(lacking) == len(missing)
    for step in steps(mode):
        probe = PROBES[step]
        named = f"{probe.namespace}/{probe.deployment})" in message
        assert named == (step in missing), step
        if step in missing:
            assert all(f"`{KUBECTL}{args}`" in message for args in probe.install)
    assert "--install-operators" in message


@pytest.mark.parametrize("mode", MODES)
def test_install_operators_applies_only_the_missing_ones_and_patches_nothing(mode):
    missing = {"knative": ("istio", "knative"), "standard": ("metrics_server",)}[mode]
    inst, fake, ran, _ = installer(mode=mode, install_missing=True)
    install_probes(fake, tuple(s for s in steps(mode) if s not in missing))
    inst.all()
    assert ran, "nothing was installed"
    assert all(cmd.startswith(f"{KUBECTL}apply ") for cmd in ran), ran
    assert not any(" patch " in cmd for cmd in ran)
    expected = {
        "istio": ["istio.yaml"],  # a copy with its gateway a ClusterIP, not ISTIO_URL
        "knative": [
            versions.KNATIVE_SERVING_CRDS_URL,
            versions.KNATIVE_SERVING_CORE_URL,
            versions.NET_ISTIO_URL,
        ],
        "metrics_server": [versions.METRICS_SERVER_URL],
    }
    urls = [u for step in missing for u in expected[step]]
    applied = [cmd.rsplit(" ", 1)[-1] for cmd in ran]
    assert [a if a.startswith("https://") else Path(a).name for a in applied] == urls
    assert versions.KSERVE_CLUSTER_RESOURCES_URL not in " ".join(ran)
    assert inst.missing == []


def test_install_operators_for_a_missing_kserve_applies_its_files_only():
    inst, fake, ran, _ = installer(mode="standard", install_missing=True)
    install_probes(fake, tuple(s for s in steps("standard") if s != "kserve"))
    inst.all()
    assert all(cmd.startswith(f"{KUBECTL}apply --server-side ") for cmd in ran), ran
    assert versions.KSERVE_CRDS_URL in ran[0] and versions.KSERVE_URL in ran[1]
    assert not any(" patch " in cmd for cmd in ran)


# ------------------------------------------------------------------ contrast: kind
def test_a_cluster_distml_made_still_gets_its_patches():
    inst, fake, ran, said = installer(provider="kind", mode="knative")
    install_probes(fake, components("kind", "knative"))
    inst.all()
    assert any("patch deployment istiod" in cmd for cmd in ran)
    assert any("patch configmap config-domain" in cmd for cmd in ran)
    assert "Istio gateway: exposing port 80 on node port 31080" in said


def test_the_existing_plan_has_no_gateway_node_port():
    assert "gateway_node_port" not in components("existing", "knative")
    assert "gateway_node_port" in components("kind", "knative")
    assert components("existing", "standard") == (
        "training_operator",
        "cert_manager",
        "metrics_server",
        "kserve",
    )


# ------------------------------------------------------------------ never installed over
def test_a_deployment_there_but_not_available_is_never_installed_over():
    # A crashlooping or mid-rollout operator is the admin's: --install-operators or not.
    inst, fake, ran, _ = installer(mode="standard", install_missing=True)
    install_probes(fake, ("cert_manager", "metrics_server", "kserve"))
    probe = PROBES["training_operator"]
    add_deployment(fake, probe.namespace, probe.deployment)
    fake.obj("apps/v1", "Deployment", probe.deployment, probe.namespace)["status"] = {}
    with pytest.raises(MissingOperators) as err:
        inst.all()
    assert "will not install over" in str(err.value)
    assert "training-operator is there but not Available" in str(err.value)
    assert ran == []  # nothing applied


@pytest.mark.parametrize("step", ["metrics_server", "kserve", "cert_manager"])
def test_an_install_made_another_way_is_never_installed_over(step):
    # e.g. a metrics-server under another name serving the metrics API, KServe elsewhere.
    inst, fake, ran, _ = installer(mode="standard", install_missing=True)
    install_probes(fake, tuple(s for s in steps("standard") if s != step))
    api_version, kind, name = cluster_wide(step)[-1]
    fake.put({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}})
    with pytest.raises(MissingOperators, match=f"{kind} {name} is there"):
        inst.all()
    assert ran == []


def test_a_standalone_mpi_operators_crd_is_never_taken_over():
    # mpi-operator v2 runs in its own namespace and owns mpijobs.kubeflow.org (v2beta1); the
    # training operator's bundle holds that CRD too (v1), and only tfjobs was looked at.
    inst, fake, ran, _ = installer(mode="standard", install_missing=True)
    install_probes(fake, tuple(s for s in steps("standard") if s != "training_operator"))
    add_deployment(fake, "mpi-operator", "mpi-operator")
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}
    fake.put({**crd, "metadata": {"name": "mpijobs.kubeflow.org"}})
    with pytest.raises(MissingOperators) as err:
        inst.all()
    assert "CustomResourceDefinition mpijobs.kubeflow.org is there without Deployment " in (
        str(err.value)
    )
    assert f"`{KUBECTL}get crd mpijobs.kubeflow.org -o yaml`" in str(err.value)
    assert ran == [] and fake.applied == [] and fake.dry_runs == []


def test_one_blocked_step_stops_every_install_and_all_are_listed_at_once():
    # Before: the training operator was installed, then `up` stopped at cert-manager.
    inst, fake, ran, said = installer(mode="knative", install_missing=True)
    install_probes(fake, ("istio", "knative"))  # training operator and KServe: installable
    probe = PROBES["cert_manager"]
    add_deployment(fake, probe.namespace, probe.deployment)
    fake.obj("apps/v1", "Deployment", probe.deployment, probe.namespace)["status"] = {}
    webhook = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
    fake.put({"apiVersion": webhook[0], "kind": webhook[1],
              "metadata": {"name": "inferenceservice.serving.kserve.io"}})  # fmt: skip
    fake.put({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
              "metadata": {"name": "tfjobs.kubeflow.org"}})  # fmt: skip
    with pytest.raises(MissingOperators) as err:
        inst.all()
    assert ran == [] and fake.applied == [] and fake.dry_runs == []  # not even a Namespace
    blocked = [line for line in str(err.value).splitlines() if line.startswith("  - ")]
    assert [line.split(":")[0] for line in blocked] == [
        f"  - {PROBES[s].label}" for s in ("training_operator", "cert_manager", "kserve")
    ]
    assert f"`{KUBECTL}-n cert-manager describe deployment cert-manager-webhook`" in blocked[1]
    assert "distml installed nothing" in str(err.value)
    assert not any(line.startswith("$ ") or "installing" in line for line in said)


def test_the_survey_reads_and_writes_nothing_before_it_has_seen_every_step():
    inst, fake, _, _ = installer(mode="standard", install_missing=True, with_argo=True)
    add_deployment(fake, "argo", "workflow-controller")  # argo-server missing: partial
    with pytest.raises(MissingOperators, match="argo/argo-server is missing beside"):
        inst.all()
    assert {c[0] for c in fake.calls} == {"get"}
    read = {c[1][1] for c in fake.calls}
    assert read == {"Deployment", *CLUSTER_WIDE_KINDS}  # each kind looked at, nothing listed


# ------------------------------------------------------------------ Istio's gateway
def test_istio_is_installed_with_its_gateway_a_cluster_ip_and_said_so_first():
    inst, fake, ran, said = installer(mode="knative", install_missing=True)
    install_probes(fake, tuple(s for s in steps("knative") if s != "istio"))
    inst.all()
    (istio,) = [c for c in ran if c.endswith("/istio.yaml")]
    assert istio.startswith(f"{KUBECTL}apply -f /")
    assert versions.ISTIO_URL not in " ".join(ran)
    assert gateway_type_in(inst.c.applied_files[istio]) == "ClusterIP"
    notice = next(i for i, line in enumerate(said) if "ingress gateway" in line)
    assert notice < said.index(f"$ {istio}")
    assert "is made ClusterIP (not a LoadBalancer, as released)" in said[notice]
    assert "cluster.istio_gateway_type" in said[notice]
    assert not Path(istio.rsplit(" ", 1)[-1]).exists()  # the copy is removed after


@pytest.mark.parametrize("kind", ["NodePort", "ClusterIP"])
def test_the_gateway_type_asked_for_is_the_one_made(kind):
    inst, fake, ran, _ = installer(mode="knative", install_missing=True, istio_gateway_type=kind)
    install_probes(fake, tuple(s for s in steps("knative") if s != "istio"))
    inst.all()
    (istio,) = [c for c in ran if c.endswith("/istio.yaml")]
    assert gateway_type_in(inst.c.applied_files[istio]) == kind


def test_a_load_balancer_only_when_asked_and_then_with_a_warning():
    inst, fake, ran, said = installer(
        mode="knative", install_missing=True, istio_gateway_type="LoadBalancer"
    )
    install_probes(fake, tuple(s for s in steps("knative") if s != "istio"))
    inst.all()
    assert ran == [f"{KUBECTL}apply -f {versions.ISTIO_URL}"]  # as released
    warning = next(line for line in said if "ingress gateway" in line)
    assert warning.startswith("warning:") and "billed load balancer" in warning
    assert "no authentication" in warning


def test_an_unknown_gateway_type_stops_up_before_anything_is_installed():
    inst, fake, ran, _ = installer(mode="knative", install_missing=True, istio_gateway_type="lb")
    install_probes(fake, tuple(s for s in steps("knative") if s not in ("istio", "kserve")))
    with pytest.raises(PermanentError, match=r"cluster\.istio_gateway_type .* 'lb' .*LoadBalancer"):
        inst.all()
    assert ran == [] and fake.applied == []


def test_an_istio_already_there_keeps_its_gateway_and_nothing_is_said_of_it():
    inst, fake, ran, said = installer(mode="knative", install_missing=True)
    install_probes(fake, tuple(s for s in steps("knative") if s != "knative"))
    inst.all()
    assert not any("ingress gateway" in line for line in said)
    assert not any(c.endswith(("/istio.yaml", versions.ISTIO_URL)) for c in ran)
    assert ran  # Knative was installed


def test_an_istio_file_that_cannot_be_had_stops_up_before_anything_is_installed(monkeypatch):
    def unavailable(url: str, mirror: str = "", named_by: str = "") -> Path:
        raise upstream_files.Unavailable("set DISTML_UPSTREAM_DIR")

    monkeypatch.setattr(upstream_files, "local_copy", unavailable)
    inst, fake, ran, _ = installer(mode="knative", install_missing=True)
    install_probes(fake, ("cert_manager", "knative", "kserve"))  # training operator: missing
    with pytest.raises(upstream_files.Unavailable):
        inst.all()
    assert ran == [] and fake.applied == []
