"""integration.kindbuild.docker: which image a ``docker save`` archive holds, so a fixed
tag (``distml-kind/node:v1.33.1``) naming an older build is reloaded from the cache."""

from __future__ import annotations

import io
import json
import tarfile

from integration.kindbuild import docker


def _archive(path, manifest) -> None:
    data = json.dumps(manifest).encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_the_archive_names_each_tag_s_image_in_both_layouts(tmp_path):
    archive = tmp_path / "image.tar"
    _archive(
        archive,
        [
            {"Config": "abc123.json", "RepoTags": ["distml-kind/node:v1.33.1"]},
            {"Config": "blobs/sha256/def456", "RepoTags": ["kindest/kindnetd:v1"]},
        ],
    )
    ids = docker.archive_ids(archive)
    assert ids == {
        "distml-kind/node:v1.33.1": "sha256:abc123",
        "kindest/kindnetd:v1": "sha256:def456",
    }
    # Docker Hub's long names are compared as docker save writes them.
    assert ids[docker.short("docker.io/kindest/kindnetd:v1")] == "sha256:def456"


def test_a_tag_naming_another_build_is_loaded_again(tmp_path, monkeypatch):
    archive = tmp_path / "image.tar"
    _archive(archive, [{"Config": "new.json", "RepoTags": ["distml-kind/node:v1"]}])
    loads = []
    monkeypatch.setattr(docker, "run", lambda argv, **_: loads.append(argv))
    engine = {"distml-kind/node:v1": "sha256:old"}
    monkeypatch.setattr(docker, "image_id", engine.get)
    docker.ensure_loaded(["distml-kind/node:v1"], archive)
    assert len(loads) == 1 and loads[0][1:] == ["load", "-i", str(archive)]
    engine["distml-kind/node:v1"] = "sha256:new"  # what the load did
    docker.ensure_loaded(["distml-kind/node:v1"], archive)
    assert len(loads) == 1  # the right image is there: no second load
