"""KEDA's install file (``k8s/install/versions.py``'s ``KEDA_URL``), which this machine cannot
download, made from KEDA's Go module the way its Makefile's ``release`` target makes the
release asset: ``kustomize edit set image`` of its three images to the release tag in
``config/{manager,metrics-server,webhooks}``, the version label set by the same ``sed``,
then ``kustomize build config/default``, with the kustomize its go.mod pins. (The target
also runs controller-gen first; KEDA's CI holds the committed CRDs and RBAC to its output,
so the module's are those.)

The file is checked against its pin in ``k8s/install/upstream.lock.json`` (whose ``made`` says
this) and copied into the pinned files' cache (``k8s/install/upstream_files.py``), where ``up``
finds it when the mirror it is given (``DISTML_UPSTREAM_DIR``, read-only here) lacks it.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from integration.kindbuild import cache, gomodule, pins
from integration.kindbuild.run import BuildError, run
from k8s.install import upstream_files, versions

# config/<dir> whose kustomization sets each image, as the release target edits them.
IMAGE_DIRS = {
    "manager": "keda",
    "metrics-server": "keda-metrics-apiserver",
    "webhooks": "keda-admission-webhooks",
}
# The release target's sed, on these transformers: 's@version:[ ].*@version: $(VERSION)@g'.
LABEL_FILES = ("default", "minimal")
VERSION_LINE = re.compile(r"version:[ ].*")


def pin() -> upstream_files.Pin:
    found = upstream_files.by_url().get(versions.KEDA_URL)
    if found is None:
        raise BuildError(f"{versions.KEDA_URL} is not pinned in {upstream_files.LOCK_FILE}")
    return found


def kustomize() -> cache.Result:
    """``<cache>/kustomize-<version>/bin/kustomize``, the one KEDA's release target runs."""

    def build(out: Path) -> None:
        work = out / "module"
        gomodule.write_module(work, {pins.KUSTOMIZE_MODULE: pins.KUSTOMIZE})
        gomodule.build(work, pins.KUSTOMIZE_MODULE, out / "bin" / "kustomize")

    return cache.cached("kustomize", pins.KUSTOMIZE, build)


def release_edits(config: Path, tool: Path) -> None:
    """What the release target changes in a writable copy of ``config/`` before it builds."""
    for directory, name in IMAGE_DIRS.items():
        image = f"ghcr.io/kedacore/{name}"
        tagged = pins.KEDA_IMAGES[name]
        run([str(tool), "edit", "set", "image", f"{image}={tagged}"], cwd=config / directory)
    for overlay in LABEL_FILES:
        path = config / overlay / "kustomize-config" / "metadataLabelTransformer.yaml"
        path.write_text(VERSION_LINE.sub(f"version: {pins.KEDA_TAG}", path.read_text()))


def mismatch(p: upstream_files.Pin, path: Path) -> str | None:
    """Why ``path`` is not ``p``'s file (size, sha256, and the values to re-pin with)."""
    size, digest = path.stat().st_size, upstream_files.sha256_of(path)
    if (size, digest) == (p.size, p.sha256):
        return None
    return (
        f"{path} ({size} bytes, sha256 {digest}) is not the pinned {p.name} ({p.size} bytes, "
        f"sha256 {p.sha256}); if KEDA's config or the recipe changed on purpose, put the new "
        f"size and sha256 in {upstream_files.LOCK_FILE.name}"
    )


def _render(out: Path, tool: Path, p: upstream_files.Pin) -> None:
    source = Path(gomodule.download(pins.KEDA_MODULE, pins.KEDA)["Dir"])
    work = out / "keda"
    shutil.copytree(source / "config", work / "config")
    run(["chmod", "-R", "u+w", str(work)])
    release_edits(work / "config", tool)
    target = out / p.name
    target.parent.mkdir(parents=True)
    target.write_text(run([str(tool), "build", "config/default"], cwd=work, capture=True))
    shutil.rmtree(work)
    if why := mismatch(p, target):
        raise BuildError(why)


def ensure() -> cache.Result:
    """``<cache>/keda-manifest-<version>-<recipe>/<pinned name>``, also in the pinned files'
    cache; a file that is not the pinned one fails the step, saying both checksums."""
    p = pin()
    tool = kustomize().path / "bin" / "kustomize"
    recipe = hashlib.sha256(Path(__file__).read_bytes() + p.sha256.encode()).hexdigest()[:8]
    result = cache.cached(
        "keda-manifest", f"{pins.KEDA}-{recipe}", lambda out: _render(out, tool, p)
    )
    made = result.path / p.name
    if why := mismatch(p, made):  # changed since it was built
        raise BuildError(why)
    print(f"= {p.name}: in the pinned files' cache, {upstream_files.store(p, made)}", flush=True)
    return result
