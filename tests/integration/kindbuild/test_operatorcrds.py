"""integration.kindbuild.operatorcrds: the Prometheus Operator's CRDs made as its Makefile's
generate-crds target makes them, from the pinned module, checked against their pins. Pure:
nothing is run (``python -m integration.kindbuild operator-crds`` makes them; the tests
that validate against them run it where Go is installed)."""

from __future__ import annotations

from integration.kindbuild import operatorcrds, pins
from integration.kindbuild.__main__ import DEFAULT, TEST_STEPS, preflight
from k8s.install import versions

HEAD = """\
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.21.0
  name: podmonitors.monitoring.coreos.com
"""


def test_the_version_annotation_follows_controller_gen_s_as_the_release_script_adds_it():
    made = operatorcrds.annotate(HEAD)
    assert made == HEAD.replace(
        "v0.21.0\n", "v0.21.0\n    operator.prometheus.io/version: 0.93.0\n"
    )
    assert operatorcrds.annotate("kind: X\n") == "kind: X\n"  # no such line: unchanged


def test_the_pins_are_the_published_files_of_the_pinned_release_and_say_how_they_are_made():
    found = operatorcrds.crd_pins()
    assert [p.url for p in found] == list(versions.PROMETHEUS_OPERATOR_CRDS.values())
    for p in found:
        assert p.mirror == "crd" and p.group == "monitoring.coreos.com"
        assert p.url.endswith("/" + p.name)
        assert f"{pins.PROMETHEUS_OPERATOR_APIS_MODULE}@{pins.PROMETHEUS_OPERATOR}" in p.made
        assert f"controller-gen {pins.CONTROLLER_TOOLS}" in p.made
        assert " ".join(operatorcrds.GENERATE) in p.made
        assert "python -m integration.kindbuild operator-crds" in p.made


def test_making_them_needs_go_only_and_is_no_part_of_the_node_build():
    assert "operator-crds" in TEST_STEPS and "operator-crds" not in DEFAULT
    assert preflight(["operator-crds"]) is None  # no Docker, no disk check
