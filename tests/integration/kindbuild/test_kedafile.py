"""integration.kindbuild.kedafile: KEDA's install file as its release target makes it, held
against KEDA's module (its Makefile, its kustomizations) and against the images the kind
build tags. Pure: nothing is run (``python -m integration.kindbuild keda-manifest`` makes
the file and fails unless it is the pinned one)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from integration.kindbuild import controllers, kedafile, pins
from k8s.install import versions
from tests.support import upstream
from tests.support.gomod import module_source


def keda_source() -> Path:
    return module_source(pins.KEDA_MODULE, pins.KEDA)


def test_the_pin_is_the_release_file_of_the_pinned_version_and_says_how_it_was_made():
    pin = kedafile.pin()
    assert pin.url == versions.KEDA_URL
    assert pin.name == controllers.by_name()["keda-operator"].manifest
    assert f"{pins.KEDA_MODULE}@{pins.KEDA}" in pin.made
    assert f"kustomize {pins.KUSTOMIZE}" in pin.made and "keda-manifest" in pin.made


def test_the_edits_are_the_release_targets():
    """The Makefile's release target: one `kustomize edit set image` per kustomization,
    the same sed on both label transformers, then `kustomize build config/default`."""
    makefile = (keda_source() / "Makefile").read_text()
    target = makefile.split("\nrelease:", 1)[1].split("\n\n", 1)[0]
    for directory, name in kedafile.IMAGE_DIRS.items():
        assert f"cd config/{directory} && \\" in target
        variable = re.search(rf"^(IMAGE_\w+)\s*=.*/{name}\$\(SUFFIX\):", makefile, re.M)
        assert f"edit set image ghcr.io/kedacore/{name}=${{{variable.group(1)}}}" in target
    assert "-e 's@version:[ ].*@version: $(VERSION)@g'" in target
    for overlay in kedafile.LABEL_FILES:
        assert f"config/{overlay}/kustomize-config/metadataLabelTransformer.yaml" in target
    assert "$(KUSTOMIZE) build config/default > keda-$(VERSION).yaml" in target
    gomod = (keda_source() / "go.mod").read_text()
    assert f"{pins.KUSTOMIZE_MODULE} {pins.KUSTOMIZE}" in gomod  # the kustomize it builds with


def test_each_kustomization_sets_the_image_the_edit_names():
    for directory, name in kedafile.IMAGE_DIRS.items():
        text = (keda_source() / "config" / directory / "kustomization.yaml").read_text()
        (image,) = yaml.safe_load(text)["images"]
        assert image["name"] == f"ghcr.io/kedacore/{name}", directory


def test_the_label_edit_is_the_seds():
    text = "labels:\n  app.kubernetes.io/version: main\n  app.kubernetes.io/part-of: keda\n"
    edited = kedafile.VERSION_LINE.sub(f"version: {pins.KEDA_TAG}", text)
    assert edited == text.replace("version: main", f"version: {versions.KEDA_VERSION}")


def test_the_images_the_install_file_runs_are_the_ones_the_kind_build_tags():
    text = upstream.file_of(versions.KEDA_URL).read_text()
    named = set(re.findall(r"^\s+image: (ghcr\.io/kedacore/\S+)$", text, re.M))
    built = {c.image for c in controllers.group("monitoring") if c.module == pins.KEDA_MODULE}
    assert named == built == set(pins.KEDA_IMAGES.values())
    assert all(image.endswith(f":{versions.KEDA_VERSION}") for image in named)


def test_a_file_that_is_not_the_pinned_one_is_refused_naming_both_checksums(tmp_path):
    pin = kedafile.pin()
    made = tmp_path / "keda.yaml"
    made.write_text("kind: Namespace\n")
    why = kedafile.mismatch(pin, made)
    assert why and pin.sha256 in why and str(made.stat().st_size) in why
    assert "upstream.lock.json" in why and "\n" not in why
