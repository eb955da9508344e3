"""minikube from its Go module: the CLI and its storage-provisioner image.

k8s.io/minikube's go.mod has ``replace`` lines (its docker-machine fork and others), which
apply only when it is the main module: so the build copies the module's source out of
Go's module cache and builds inside it, as ``make`` does in a checkout. The ``-X`` flags
are the Makefile's (``MINIKUBE_LDFLAGS``, ``PROVISIONER_LDFLAGS``): without them
``minikube version`` reads ``v0.0.0-unset`` and the storage-provisioner image it runs has
no tag.

storage-provisioner is built from the same module's ``cmd/storage-provisioner``, but
against an older client-go, as its published ``v5`` image (2021) was: with the module's own
(v0.33) it exits at once, ``endpoints lock is removed, migrate to leases``. Its provisioner
library (sig-storage-lib-external-provisioner v6.3.0) asks for an Endpoints leader lock,
which client-go refuses from v0.24 on (v0.26.15 and v0.25.16 were tried: both refuse it).
So its module of ours replaces client-go, api and apimachinery with v0.23.17 and
kube-openapi with the one that release names.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from integration.kindbuild import cache, gomodule, images, pins
from integration.kindbuild.run import go, go_env, run

PKG = "k8s.io/minikube/pkg"


def ldflags(commit: str) -> str:
    """The Makefile's MINIKUBE_LDFLAGS at ``pins.MINIKUBE`` (ISO_VERSION is the release's)."""
    values = {
        "version": pins.MINIKUBE,
        "isoVersion": pins.MINIKUBE,
        "gitCommitID": commit,
        "storageProvisionerVersion": pins.STORAGE_PROVISIONER_TAG,
    }
    return " ".join(["-s", "-w", *(f"-X {PKG}/version.{k}={v}" for k, v in values.items())])


def _source(out: Path) -> tuple[Path, str]:
    """A writable copy of the module's source in ``out/src``, and its commit."""
    info = gomodule.download(pins.MINIKUBE_MODULE, pins.MINIKUBE)
    src = out / "src"
    shutil.copytree(info["Dir"], src)
    run(["chmod", "-R", "u+w", str(src)])
    return src, info.get("Origin", {}).get("Hash", "")


def _build(out: Path) -> None:
    src, commit = _source(out)
    binary = str(out / "bin/minikube")
    go("build", "-ldflags", ldflags(commit), "-o", binary, "./cmd/minikube", cwd=src, env=go_env())
    run(["rm", "-rf", str(src)], heavy=True)


# The newest client-go that still makes an Endpoints lock, and what that release requires.
PROVISIONER_CLIENT = "v0.23.17"
PROVISIONER_REPLACES = {
    **{
        f"k8s.io/{m}": f"k8s.io/{m} {PROVISIONER_CLIENT}"
        for m in ("client-go", "api", "apimachinery")
    },
    "k8s.io/kube-openapi": "k8s.io/kube-openapi v0.0.0-20211115234752-e816edb12b65",
}


def _build_provisioner(out: Path) -> Path:
    info = gomodule.download(pins.MINIKUBE_MODULE, pins.MINIKUBE)
    gomod = Path(info["GoMod"])
    replaces = {**gomodule.inherited_replaces(gomod), **PROVISIONER_REPLACES}
    work = out / "module"
    requires = {pins.MINIKUBE_MODULE: pins.MINIKUBE}
    gomodule.write_module(work, requires, replaces, gomodule.go_directive(gomod))
    binary = out / "bin/storage-provisioner"
    flags = f"-s -w -X {PKG}/storage.version={pins.STORAGE_PROVISIONER_TAG}"
    gomodule.build(work, f"{pins.MINIKUBE_MODULE}/cmd/storage-provisioner", binary, flags)
    return binary


def ensure() -> cache.Result:
    """``<cache>/minikube-<version>/bin/minikube``."""
    return cache.cached("minikube", pins.MINIKUBE, _build)


def storage_provisioner() -> cache.Result:
    """``gcr.io/k8s-minikube/storage-provisioner:<tag>``: the binary on scratch, as the
    module's deploy/storage-provisioner/Dockerfile makes it."""

    def build(out: Path) -> None:
        binary = _build_provisioner(out)
        dockerfile = (
            "FROM scratch\nCOPY storage-provisioner /storage-provisioner\n"
            'CMD ["/storage-provisioner"]\n'
        )
        images.build_image(
            out, pins.STORAGE_PROVISIONER_IMAGE, dockerfile, {"storage-provisioner": binary}
        )

    version = f"{pins.STORAGE_PROVISIONER_TAG}-{pins.MINIKUBE}-client-go-{PROVISIONER_CLIENT}"
    return cache.cached("storage-provisioner", version, build)
