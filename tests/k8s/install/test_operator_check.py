"""k8s.install.operator_check: the version a Deployment runs (its version label, else its image
tag), the line `up` says about it, the message listing what an existing cluster lacks (its
commands naming the context), what the survey finds of a step (found, blocked, missing)
against the fake cluster, and PROBES and CLUSTER_WIDE held against the pinned upstream
install files: each probe's Deployment is in the files its own install commands apply and
runs the version the probe pins, and CLUSTER_WIDE is everything those files make
cluster-wide that another install could own."""

from __future__ import annotations

import os
import shlex
from typing import Any

import pytest

from k8s.install.operator_check import (
    CLUSTER_WIDE,
    CLUSTER_WIDE_KINDS,
    PROBES,
    VERSION_LABEL,
    blocked_message,
    cluster_wide,
    found_version,
    missing_message,
    survey,
    version_note,
)
from k8s.providers import provider
from tests.support.fakekube import FakeKube, conditions_status
from tests.support.upstream import index, objects
from tests.support.wait_kit import KUBECTL, NAMED, unnamed_commands

UPSTREAM_ENV = "DISTML_UPSTREAM_DIR"
DIGEST = "sha256:" + "ab" * 32


def deployment(image: str | None = None, version: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "d", "namespace": "ns"}
    if version is not None:
        meta["labels"] = {VERSION_LABEL: version, "app": "x"}
    containers = [{"name": "main", "image": image}] if image is not None else []
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {"template": {"spec": {"containers": containers}}},
    }


# ------------------------------------------------------------------ found_version
def test_the_version_label_wins_over_the_image_tag():
    assert found_version(deployment("quay.io/jetstack/webhook:v9.9.9", "v1.17.2")) == "v1.17.2"


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("docker.io/istio/pilot:1.28.4", "1.28.4"),
        ("kubeflow/training-operator:v1-5170a36", "v1-5170a36"),
        ("localhost:5000/team/controller:v2", "v2"),  # a registry port is not a tag
        (f"gcr.io/knative/controller:v1.21.1@{DIGEST}", "v1.21.1"),
        (f"gcr.io/knative-releases/controller@{DIGEST}", ""),  # a digest alone is no version
        ("registry.k8s.io/metrics-server/metrics-server", ""),
        ("localhost:5000/controller", ""),
    ],
)
def test_without_a_label_the_first_image_tag_is_the_version(image, version):
    assert found_version(deployment(image)) == version


def test_the_first_container_is_the_one_read():
    d = deployment("a/first:v1")
    d["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "b/second:v2"})
    assert found_version(d) == "v1"


@pytest.mark.parametrize(
    ("d", "version"),
    [
        ({}, ""),
        (deployment(), ""),  # no containers
        (deployment("a/b:v1", version=""), "v1"),  # an empty label: the tag
        ({"metadata": {"labels": None}, "spec": {"template": None}}, ""),
    ],
)
def test_a_deployment_that_says_little_gives_what_it_has(d, version):
    assert found_version(d) == version


# ------------------------------------------------------------------ version_note
def test_the_pinned_version_is_said_to_be_the_one_distml_pins():
    probe = PROBES["cert_manager"]
    line = version_note("cert_manager", "cert-manager", deployment(version=probe.pinned))
    assert line.startswith("cert-manager: found (cert-manager/cert-manager-webhook")
    assert f"{probe.pinned}), the version distml pins" in line


def test_another_version_names_both():
    probe = PROBES["kserve"]
    line = version_note("kserve", "KServe", deployment("kserve/kserve-controller:v0.14.1"))
    assert "kserve/kserve-controller-manager, v0.14.1" in line
    assert f"distml pins {probe.pinned}" in line
    assert "the version distml pins" not in line


def test_a_version_that_cannot_be_read_is_said_unknown():
    line = version_note("istio", "Istio", deployment(f"docker.io/istio/pilot@{DIGEST}"))
    assert "version unknown" in line
    assert f"distml pins {PROBES['istio'].pinned}" in line


# ------------------------------------------------------------------ missing_message
def test_the_missing_message_gives_each_missing_step_its_commands():
    kubectl = "kubectl --context 'my ctx'"
    steps = [("istio", "Istio"), ("kserve", "KServe")]
    message = missing_message(steps, "my ctx", provider("existing", kube_context="my ctx").kubectl)
    assert "context 'my ctx'" in message.splitlines()[0]
    for step, label in steps:
        probe = PROBES[step]
        (line,) = [x for x in message.splitlines() if x.startswith(f"  - {label} ")]
        assert f"{probe.namespace}/{probe.deployment}" in line
        for args in probe.install:
            assert f"`{kubectl} {args}`" in line
    assert "cert-manager" not in message
    assert "--install-operators" in message
    assert "invoke up --runtime existing --install-operators" in message


def test_every_probe_installs_with_pinned_files_only():
    for step, probe in PROBES.items():
        assert probe.install, step
        sources = [t for args in probe.install for t in shlex.split(args) if "." in t]
        assert sources, step
        assert all(u in index() for u in sources), (step, sources)


# ------------------------------------------------------------------ against upstream
def _upstream_deployment(step: str) -> dict[str, Any]:
    probe = PROBES[step]
    urls = [t for args in probe.install for t in shlex.split(args) if t in index()]
    found = [
        obj
        for url in urls
        for obj in objects(url)
        if obj.get("kind") == "Deployment"
        and obj["metadata"].get("name") == probe.deployment
        and obj["metadata"].get("namespace") == probe.namespace
    ]
    assert len(found) == 1, (
        f"{step}: {len(found)} Deployment {probe.namespace}/{probe.deployment} in {urls}"
    )
    return found[0]


@pytest.mark.parametrize("step", sorted(PROBES))
def test_each_probe_pins_the_version_its_upstream_files_deploy(step):
    if not os.environ.get(UPSTREAM_ENV):
        pytest.skip(f"{UPSTREAM_ENV} is not set: the pinned upstream install files are needed")
    assert found_version(_upstream_deployment(step)) == PROBES[step].pinned


@pytest.mark.parametrize("step", sorted(PROBES))
def test_cluster_wide_is_everything_the_steps_own_install_files_make_cluster_wide(step):
    # Every CRD, admission webhook configuration and APIService: the training operator's
    # six CRDs (mpijobs.kubeflow.org among them) and its failurePolicy: Fail webhook.
    if not os.environ.get(UPSTREAM_ENV):
        pytest.skip(f"{UPSTREAM_ENV} is not set: the pinned upstream install files are needed")
    probe = PROBES[step]
    urls = [t for args in probe.install for t in shlex.split(args) if t in index()]
    made: dict[str, set[str]] = {}
    for obj in (o for url in urls for o in objects(url)):
        if obj.get("kind") in CLUSTER_WIDE_KINDS:
            assert obj["apiVersion"] == CLUSTER_WIDE_KINDS[obj["kind"]][0], obj["kind"]
            made.setdefault(obj["kind"], set()).add(obj["metadata"]["name"])
    listed = {kind: set(names) for kind, names in CLUSTER_WIDE[step].items()}
    assert listed == made, f"CLUSTER_WIDE[{step!r}] should be {made}"
    assert all(list(names) == sorted(names) for names in CLUSTER_WIDE[step].values())


def test_the_training_operators_every_crd_and_its_webhook_are_listed():
    names = {name for _, _, name in cluster_wide("training_operator")}
    assert {"tfjobs.kubeflow.org", "mpijobs.kubeflow.org", "pytorchjobs.kubeflow.org"} <= names
    assert "validator.training-operator.kubeflow.org" in names
    assert len(names) == 7


# ------------------------------------------------------------------ survey
def deployment_in(fake: FakeKube, step: str, name: str, available: bool = True) -> None:
    status = conditions_status(("Available", "True" if available else "False"))
    meta = {"name": name, "namespace": PROBES[step].namespace}
    fake.put({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "status": status})


@pytest.mark.parametrize("step", sorted(PROBES))
def test_a_step_whose_deployments_are_available_is_found(step):
    fake = FakeKube()
    for name in PROBES[step].deployments:
        deployment_in(fake, step, name)
    finding = survey(fake, step, KUBECTL)
    assert finding.found and not finding.blocked and not finding.missing
    assert finding.deployment["metadata"]["name"] == PROBES[step].deployment


@pytest.mark.parametrize("step", sorted(PROBES))
def test_a_step_with_nothing_of_it_there_is_missing(step):
    finding = survey(FakeKube(), step, KUBECTL)
    assert finding.missing and not finding.found and not finding.blocked


def test_a_deployment_there_but_not_available_blocks_with_a_command_naming_the_context():
    fake = FakeKube()
    deployment_in(fake, "cert_manager", "cert-manager-webhook", available=False)
    finding = survey(fake, "cert_manager", KUBECTL)
    assert "Deployment cert-manager/cert-manager-webhook is there but not Available" in (
        finding.blocked
    )
    assert f"`{NAMED}-n cert-manager describe deployment cert-manager-webhook`" in finding.blocked
    assert unnamed_commands(finding.blocked) == []


def test_a_partial_install_blocks():
    fake = FakeKube()
    deployment_in(fake, "argo", "workflow-controller")  # argo-server is not there
    finding = survey(fake, "argo", KUBECTL)
    assert "Deployment argo/argo-server is missing beside argo/workflow-controller" in (
        finding.blocked
    )


@pytest.mark.parametrize(
    ("step", "kind", "name"),
    [(step, kind, name) for step in sorted(PROBES) for _, kind, name in cluster_wide(step)],
)
def test_any_object_the_install_makes_cluster_wide_blocks_it_when_there_without_it(
    step, kind, name
):
    # e.g. a standalone mpi-operator's mpijobs.kubeflow.org: the training operator's install
    # would take it over. (Before: only tfjobs.kubeflow.org was looked at.)
    fake = FakeKube()
    fake.put({"apiVersion": CLUSTER_WIDE_KINDS[kind][0], "kind": kind, "metadata": {"name": name}})
    finding = survey(fake, step, KUBECTL)
    probe = PROBES[step]
    assert f"{kind} {name} is there without Deployment {probe.namespace}/{probe.deployment}" in (
        finding.blocked
    )
    assert f"`{NAMED}get {CLUSTER_WIDE_KINDS[kind][1]} {name} -o yaml`" in finding.blocked
    assert unnamed_commands(finding.blocked) == []


def test_every_object_taken_is_named_at_once():
    fake = FakeKube()
    for name in ("mpijobs.kubeflow.org", "pytorchjobs.kubeflow.org"):
        fake.put({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                  "metadata": {"name": name}})  # fmt: skip
    finding = survey(fake, "training_operator", KUBECTL)
    assert finding.blocked.startswith(
        "CustomResourceDefinitions mpijobs.kubeflow.org, pytorchjobs.kubeflow.org are there"
    )


def test_the_blocked_message_lists_each_step_and_what_would_be_installed():
    message = blocked_message(
        [("istio", "Istio", "why one"), ("kserve", "KServe", "why two")], "ctx", ["Knative"]
    )
    assert "  - Istio: why one" in message and "  - KServe: why two" in message
    assert "distml installed nothing" in message and "it installs Knative" in message
