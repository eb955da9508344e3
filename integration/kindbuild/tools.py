"""Host and node tools built from Go modules: the ``kind`` CLI and ``crictl``."""

from __future__ import annotations

from pathlib import Path

from integration.kindbuild import cache, gomodule, pins


def _module_binary(module: str, version: str, package: str, name: str, ldflags: str):
    def build(out: Path) -> None:
        work = out / "module"
        gomodule.write_module(work, {module: version})
        gomodule.build(work, package, out / "bin" / name, ldflags)

    return build


def kind() -> cache.Result:
    """``<cache>/kind-<version>/bin/kind``."""
    ldflags = "-s -w -buildid="
    build = _module_binary("sigs.k8s.io/kind", pins.KIND, "sigs.k8s.io/kind", "kind", ldflags)
    return cache.cached("kind", pins.KIND, build)


def crictl() -> cache.Result:
    """``<cache>/crictl-<version>/bin/crictl``, for the node image."""
    ldflags = f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={pins.CRICTL}"
    build = _module_binary(
        pins.CRICTL_MODULE, pins.CRICTL, f"{pins.CRICTL_MODULE}/cmd/crictl", "crictl", ldflags
    )
    return cache.cached("crictl", pins.CRICTL, build)
