"""``cluster.manifest_mirror``: what `up` gives kubectl for each pinned install file, the
release URL or, offline, the verified copy in a mirror directory."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from k8s.install import upstream_files, versions
from k8s.install.operators import Installer
from k8s.providers import provider
from k8s.providers.settings import Settings
from tests.support.cli import invoke

URL = versions.KSERVE_URL
NAME = "kserve-v0.20.0/kserve.yaml"


def installer(mirror: str = "") -> Installer:
    s = Settings(image="distml:abc", provider="kind", manifest_mirror=mirror)
    return Installer(None, None, provider("kind"), s, print, None)


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch):
    """Pin URL to the bytes given, so a test can lay out a mirror of its own."""

    def pin(body: bytes) -> None:
        found = upstream_files.Pin(
            name=NAME,
            url=URL,
            sha256=hashlib.sha256(body).hexdigest(),
            size=len(body),
            mirror="manifest",
        )
        monkeypatch.setattr(upstream_files, "by_url", lambda: {URL: found})

    return pin


def test_without_a_mirror_kubectl_gets_the_release_url_and_the_kustomize_ref():
    inst = installer()
    assert inst.source(URL) == f"-f {URL}"
    ref = inst.source(versions.TRAINING_OPERATOR_KUSTOMIZE, kustomize=True)
    assert ref == f"-k '{versions.TRAINING_OPERATOR_KUSTOMIZE}'"


def test_with_a_mirror_kubectl_gets_the_verified_copy_there(tmp_path: Path, pinned):
    pinned(b"kind: List\n")
    (tmp_path / NAME).parent.mkdir(parents=True)
    (tmp_path / NAME).write_bytes(b"kind: List\n")
    assert installer(str(tmp_path)).source(URL) == f"-f {tmp_path / NAME}"


def test_a_copy_with_other_bytes_is_refused_naming_it(tmp_path: Path, pinned):
    pinned(b"kind: List\n")
    (tmp_path / NAME).parent.mkdir(parents=True)
    (tmp_path / NAME).write_bytes(b"kind: Lost\n")
    with pytest.raises(upstream_files.UpstreamError, match="is not the pinned file: sha256"):
        installer(str(tmp_path)).source(URL)


def test_a_file_missing_from_the_mirror_names_the_setting(tmp_path: Path, pinned):
    pinned(b"kind: List\n")
    with pytest.raises(upstream_files.Unavailable, match=r"cluster\.manifest_mirror"):
        installer(str(tmp_path)).source(URL)


def test_the_real_mirror_serves_every_file_up_applies(monkeypatch):
    # The files a standard-mode `up --with-argo` applies on kind, from the local mirror.
    mirror = upstream_files.mirror_dir(upstream_files.by_url()[URL])
    if mirror is None:
        pytest.skip("set DISTML_UPSTREAM_DIR to the upstream files' mirror")
    inst = installer(str(mirror))
    for url in (
        versions.CERT_MANAGER_URL,
        versions.KSERVE_CRDS_URL,
        URL,
        versions.KSERVE_CLUSTER_RESOURCES_URL,
        versions.METRICS_SERVER_URL,
        versions.ARGO_WORKFLOWS_URL,
    ):
        assert inst.source(url).startswith(f"-f {mirror}/")
    kustomized = inst.source(versions.TRAINING_OPERATOR_KUSTOMIZE, kustomize=True)
    assert kustomized.startswith(f"-f {mirror}/") and kustomized.endswith(".yaml")


def test_a_mirror_that_is_no_directory_exits_2_before_anything_runs(tmp_path: Path):
    r = invoke(tmp_path, "--dry", "up", "--runtime", "kind", INVOKE_CLUSTER_MANIFEST_MIRROR="/nope")
    assert r.returncode == 2
    assert (
        "cluster.manifest_mirror (INVOKE_CLUSTER_MANIFEST_MIRROR) '/nope' is not a directory"
        in (r.stderr)
    )
