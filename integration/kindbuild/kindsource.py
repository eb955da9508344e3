"""Facts read from the kind module's source at ``pins.KIND``: its base image's files
and the CNI and storage manifests its node-image build writes into ``/kind/manifests``."""

from __future__ import annotations

import re
from pathlib import Path

from integration.kindbuild import gomodule, pins


def module_dir() -> Path:
    return Path(gomodule.download("sigs.k8s.io/kind", pins.KIND)["Dir"])


def base_files() -> Path:
    """``images/base/files``: entrypoint, containerd config, systemd units, /kind/bin."""
    return module_dir() / "images/base/files"


def go_string(source: str, name: str) -> str:
    """The value of a Go string constant made of raw strings, quoted strings and other
    such constants joined by ``+`` (how kind writes its manifests)."""
    consts = dict(re.findall(r'^\s*(?:const\s+)?(\w+)\s*=\s*"([^"]*)"', source, re.M))
    m = re.search(rf"^(?:const|var)\s+{name}\s*=\s*", source, re.M)
    if m is None:
        raise ValueError(f"no constant {name}")
    pos, parts = m.end(), []
    token = re.compile(r'\s*(`[^`]*`|"[^"]*"|\w+)\s*(\+)?', re.S)
    while True:
        t = token.match(source, pos)
        if t is None:
            raise ValueError(f"cannot read {name} at offset {pos}")
        text = t.group(1)
        parts.append(text[1:-1] if text[0] in '`"' else consts[text])
        pos = t.end()
        if not t.group(2):
            return "".join(parts)


def manifests() -> dict[str, str]:
    """``/kind/manifests/<file>`` -> contents, as kind's node-image build writes them."""
    build = module_dir() / "pkg/build/nodeimage"
    cni = go_string((build / "const_cni.go").read_text(), "defaultCNIManifest")
    storage = go_string((build / "const_storage.go").read_text(), "defaultStorageManifest")
    return {"default-cni.yaml": cni, "default-storage.yaml": storage}


def sandbox_image() -> str:
    """The pause image kind's containerd config names (``sandbox_image``)."""
    config = (base_files() / "etc/containerd/config.toml").read_text()
    found = re.search(r'sandbox_image\s*=\s*"([^"]+)"', config)
    if found is None:
        raise ValueError(f"kind's containerd config names no sandbox_image:\n{config}")
    return found.group(1)
