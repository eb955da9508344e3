"""Write ``k8s/install/upstream.lock.json`` from the reference mirrors: the install manifests'
``INDEX.json`` and the CRDs' README (upstream repository, tag and path of each file).

    python -m tools.upstream_lock --upstream ../shared/k8s-upstream \\
        --crds ../shared/k8s-schemas/crds --write

Each file's size and sha256 are those of the mirror's copy; the README's and INDEX.json's
checksums must agree with them (else this fails). The pins the mirrors do not hold, files
rebuilt from source (``made``: KEDA's install file, which ``python -m
integration.kindbuild keda-manifest`` makes and checks against its pin), are carried over
from the committed lock as they are: to re-pin one, edit its entry (the kind build's
mismatch message gives the new size and sha256). ``tests/tools/test_upstream_lock.py``
holds the committed lock against the mirrors when they are there.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from k8s.install.upstream_files import (
    LOCK_FILE,
    Pin,
    UpstreamError,
    dump_lock,
    parse_lock,
    sha256_of,
)

ABOUT = (
    "The upstream files the cluster path pins, by release URL (kustomize: a ref that "
    "`kubectl kustomize` builds) and sha256; k8s/install/upstream_files.py gets and verifies them. "
    "Written by tools/upstream_lock.py from ../shared/k8s-upstream/INDEX.json and "
    "../shared/k8s-schemas/README.md."
)
# | `file` | Kind / group ... | served | bytes | owner/repo @ tag (...) | `path` | blob |
_CRD_ROW = re.compile(
    r"^\| `(?P<file>[^`]+)` \| (?P<kind>\w+) / (?P<group>[\w.]+)[^|]*\|[^|]*\|[^|]*\| "
    r"(?P<repo>[\w.-]+/[\w.-]+) @ (?P<tag>\S+)[^|]*\| `(?P<path>[^`]+)` \|"
)
_SHA_LINE = re.compile(r"^([0-9a-f]{64})  (\S+)$")


def _checked(pin: Pin, path: Path, stated: str) -> Pin:
    if not path.is_file():
        raise SystemExit(f"{path}: missing from the mirror")
    actual = sha256_of(path)
    if stated != actual:
        raise SystemExit(f"{path}: sha256 {actual}, but its index says {stated}")
    return pin


def manifest_pins(upstream: Path) -> list[Pin]:
    """One pin per INDEX.json entry (its url_alias's first word is an alias)."""
    found = []
    for e in json.loads((upstream / "INDEX.json").read_text())["entries"]:
        file = upstream / e["file"]
        pin = Pin(
            name=e["file"],
            url=e["url"],
            sha256=e["sha256"],
            size=file.stat().st_size if file.is_file() else -1,
            mirror="manifest",
            aliases=tuple(e["url_alias"].split()[:1]) if e.get("url_alias") else (),
            kustomize=not e["url"].startswith("https://"),
        )
        found.append(_checked(pin, file, e["sha256"]))
    return found


def crd_pins(crds: Path, readme: Path) -> list[Pin]:
    """One pin per CRD in the README's table, downloaded from raw.githubusercontent.com."""
    text = readme.read_text()
    shas = {m[2]: m[1] for line in text.splitlines() if (m := _SHA_LINE.match(line.strip()))}
    found = []
    for line in text.splitlines():
        if not (m := _CRD_ROW.match(line)):
            continue
        file = crds / m["file"]
        pin = Pin(
            name=m["file"],
            url=f"https://raw.githubusercontent.com/{m['repo']}/{m['tag']}/{m['path']}",
            sha256=shas[m["file"]],
            size=file.stat().st_size if file.is_file() else -1,
            mirror="crd",
            group=m["group"],
            kind=m["kind"],
        )
        found.append(_checked(pin, file, shas[m["file"]]))
    if sorted(p.name for p in found) != sorted(shas):
        raise SystemExit(f"{readme}: the table and the checksums list different files")
    return found


def made_pins(lock: Path = LOCK_FILE) -> list[Pin]:
    """The pins of rebuilt files in the committed lock (the mirrors cannot speak for them)."""
    try:
        found = parse_lock(lock.read_text())
    except UpstreamError as e:  # e.g. emptied by `> k8s/install/upstream.lock.json` before this ran
        raise SystemExit(f"{lock}: {e}; restore it (git) and use --write, not >") from e
    return [p for p in found if p.made]


def lock_text(upstream: Path, crds: Path) -> str:
    """The lock file's text for the mirrors (the CRD README is beside ``crds``) and the
    committed lock's rebuilt files."""
    found = manifest_pins(upstream) + made_pins() + crd_pins(crds, crds.parent / "README.md")
    return dump_lock(found, ABOUT)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", type=Path, required=True, help="holds INDEX.json")
    p.add_argument("--crds", type=Path, required=True, help="the CRDs; README.md beside it")
    p.add_argument("--write", action="store_true", help=f"write {LOCK_FILE}, not stdout")
    args = p.parse_args(argv)
    text = lock_text(args.upstream, args.crds)
    if args.write:
        LOCK_FILE.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
