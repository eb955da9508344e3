"""The Kubernetes binaries (kubeadm, kubelet, kubectl and the control plane) at
``pins.KUBERNETES``, built from k8s.io/kubernetes inside a module of our own."""

from __future__ import annotations

import json
import time
from pathlib import Path

from integration.kindbuild import cache, gomodule, pins

COMPONENT = "kubernetes"


def version_ldflags(version: str, commit: str, date: str) -> str:
    """The -X flags hack/lib/version.sh sets, so every binary reports ``version``."""
    major, minor = version.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": commit,
        "gitTreeState": "clean",
        "buildDate": date,
    }
    flags = [
        f"-X '{pkg}.{key}={val}'"
        for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version")
        for key, val in values.items()
    ]
    return " ".join(["-s", "-w", *flags])


def _build(out: Path) -> None:
    info = gomodule.download("k8s.io/kubernetes", pins.KUBERNETES)
    work = out / "module"
    gomodule.write_module(
        work,
        {"k8s.io/kubernetes": pins.KUBERNETES},
        gomodule.staging_replaces(Path(info["GoMod"]), pins.STAGING),
    )
    # Our go.mod repeats the godebug line k8s.io/kubernetes builds with.
    with (work / "go.mod").open("a") as f:
        f.write("\ngodebug default=go1.24\n")
    commit = info.get("Origin", {}).get("Hash", "")
    ldflags = version_ldflags(pins.KUBERNETES, commit, info["Time"][:19] + "Z")
    times = {}
    for name in pins.KUBERNETES_BINARIES:
        start = time.monotonic()
        gomodule.build(work, f"k8s.io/kubernetes/cmd/{name}", out / "bin" / name, ldflags)
        times[name] = round(time.monotonic() - start, 1)
        print(f"  {name}: {times[name]:.0f}s", flush=True)
    (out / "times.json").write_text(json.dumps(times, indent=2) + "\n")
    (out / "version").write_text(pins.KUBERNETES + "\n")


def ensure() -> cache.Result:
    """``<cache>/kubernetes-<version>/bin/{kubeadm,kubelet,...}``."""
    return cache.cached(COMPONENT, pins.KUBERNETES, _build)
