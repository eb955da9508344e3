"""k8s.operator_check: the version a Deployment runs (its version label, else its image
tag), the line `up` says about it, the message listing what an existing cluster lacks, and
PROBES held against the pinned upstream install files: each probe's Deployment is in the
files its own install commands apply, and runs the version the probe pins."""

from __future__ import annotations

import os
import shlex
from typing import Any

import pytest

from k8s.operator_check import (
    PROBES,
    VERSION_LABEL,
    found_version,
    missing_message,
    version_note,
)
from k8s.providers import provider
from tests.support.upstream import index, objects

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
def test_each_marker_is_made_by_the_probes_own_install_files(step):
    # The CRD / APIService that says "installed another way" must be one this install makes.
    if not os.environ.get(UPSTREAM_ENV):
        pytest.skip(f"{UPSTREAM_ENV} is not set: the pinned upstream install files are needed")
    probe = PROBES[step]
    api_version, kind, name = probe.marker
    urls = [t for args in probe.install for t in shlex.split(args) if t in index()]
    made = {
        (obj.get("apiVersion"), obj.get("kind"), obj["metadata"].get("name"))
        for url in urls
        for obj in objects(url)
    }
    assert (api_version, kind, name) in made, (step, urls)
