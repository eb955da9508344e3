"""Building Go programs inside a throwaway module of our own.

``go install mod@version`` refuses a module whose go.mod has ``replace`` lines
(k8s.io/kubernetes points its staging modules at ./staging). A module of ours that
requires it, repeats those lines against the published versions and builds its
packages gets the same result. The go.mod and go.sum used are kept in the cache entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from integration.kindbuild.run import GO, go, go_env, run


def download(module: str, version: str) -> dict:
    """One module, downloaded: ``go mod download -json`` (Dir, GoMod) merged with
    ``go list -m -json`` (Time, Origin: the commit)."""
    info = {}
    for cmd in (["mod", "download"], ["list", "-m"]):
        out = run(
            [GO, *cmd, "-json", f"{module}@{version}"],
            env=go_env(GOFLAGS="-mod=mod"),
            capture=True,
            cwd=Path("/"),
        )
        info.update(json.loads(out))
    return info


def staging_replaces(gomod: Path, version: str) -> dict[str, str]:
    """Every ``k8s.io/x => ./staging/...`` line of ``gomod``, pointed at ``x@version``."""
    found = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", gomod.read_text(), re.M)
    return {name: f"{name} {version}" for name in found}


def inherited_replaces(gomod: Path) -> dict[str, str]:
    """The ``replace`` lines of a dependency's go.mod that point at other modules (not at
    directories): Go ignores them outside the main module, so ours repeats them."""
    text = gomod.read_text()
    blocks = re.findall(r"^replace\s*\((.*?)^\)", text, re.M | re.S)
    lines = [ln for block in blocks for ln in block.splitlines()]
    lines += re.findall(r"^replace\s+([^(\n].*)$", text, re.M)
    found = {}
    for line in lines:
        m = re.match(r"\s*(\S+)(?:\s+\S+)?\s*=>\s*(\S+)\s+(v\S+)", line.split("//")[0])
        if m and not m.group(2).startswith("."):
            found[m.group(1)] = f"{m.group(2)} {m.group(3)}"
    return found


def go_directive(gomod: Path, floor: str = "1.24.0") -> str:
    """The ``go`` line a module of ours needs to require ``gomod``'s module: its own
    ``go`` version, or ``floor`` if that is newer."""
    m = re.search(r"^go\s+(\S+)", gomod.read_text(), re.M)
    found = m.group(1) if m else floor

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", version)[:3])

    return max(found, floor, key=key)


def write_module(
    workdir: Path,
    requires: Mapping[str, str],
    replaces: Mapping[str, str] | None = None,
    go_version: str = "1.24.0",
    path: str | None = None,
) -> None:
    """A go.mod in ``workdir`` that requires and replaces exactly what is given, named
    ``path`` (default ``distml.local/kindbuild/<dir>``)."""
    path = path or f"distml.local/kindbuild/{workdir.name}"
    lines = [f"module {path}", "", f"go {go_version}", ""]
    lines += [f"require {mod} {ver}" for mod, ver in requires.items()]
    if replaces:
        lines += ["", "replace ("]
        lines += [f"\t{mod} => {target}" for mod, target in sorted(replaces.items())]
        lines += [")"]
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text("\n".join(lines) + "\n")


def build(
    workdir: Path, package: str, output: Path, ldflags: str = "-s -w", tags: str = ""
) -> None:
    """``go build`` one package of a required module into ``output`` (static, trimmed),
    with the build ``tags`` given."""
    flags = ["-tags", tags] if tags else []
    go("build", *flags, "-ldflags", ldflags, "-o", str(output), package, cwd=workdir)
