"""The documentation holds together: every relative link and ``#anchor`` in the README,
CONTRIBUTING, ``docs/`` and ``benchmarks/README.md`` resolves, the README stays a front
door (at most ``README_MAX_LINES``) and links every page in ``docs/``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
README_MAX_LINES = 170
PAGES = sorted(
    [README, REPO / "CONTRIBUTING.md", REPO / "benchmarks" / "README.md", *DOCS.glob("*.md")]
)

_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...


def _outside_fences(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` for every line outside fenced code blocks."""
    lines, fence = [], ""
    for number, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if marker and (not fence or marker.group(1)[0] == fence[0]):
            fence = "" if fence else marker.group(1)
        elif not fence:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: the rendered text lowercased, every character
    but letters, digits, ``-``, ``_`` and spaces dropped, spaces turned into ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in ``path``; a repeated slug gets ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _outside_fences(path.read_text()):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """Every link and image target in ``path``'s prose, with its line number."""
    prose = [(n, _CODE_SPAN.sub("", line)) for n, line in _outside_fences(path.read_text())]
    return [(n, m.group(1)) for n, line in prose for m in _LINK.finditer(line)]


def broken(path: Path, root: Path = REPO) -> list[str]:
    """What in ``path`` does not resolve: a missing file, or an anchor with no heading."""
    problems = []
    for number, target in links(path):
        if _EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not resolved.exists():
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading with that anchor in {resolved.name}")
        elif anchor and resolved.suffix != ".md":
            problems.append(f"{where}: an anchor into a file that is not Markdown")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_and_anchor_resolves(page: Path) -> None:
    assert page.is_file(), f"{page.relative_to(REPO)} is missing"
    assert broken(page) == []


def test_the_readme_is_a_front_door() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move the detail to docs/"


def test_the_readme_links_every_page() -> None:
    linked = {
        (README.parent / target.partition("#")[0]).resolve()
        for _, target in links(README)
        if not _EXTERNAL.match(target)
    }
    unlinked = [p.relative_to(REPO) for p in PAGES if p != README and p.resolve() not in linked]
    assert unlinked == []


def test_slugs_follow_githubs_rules(tmp_path: Path) -> None:
    assert slug("TensorBoard (`invoke tensorboard`)") == "tensorboard-invoke-tensorboard"
    assert slug("The cluster path (k3d, kind, minikube)") == "the-cluster-path-k3d-kind-minikube"
    assert slug("Stopping, killing, preemption") == "stopping-killing-preemption"
    assert slug("snake_case and dash-case: kept") == "snake_case-and-dash-case-kept"
    page = tmp_path / "page.md"
    page.write_text("# A\n\n```\n# not a heading\n```\n\n## A\n\n### A\n\n## B & C\n")
    assert anchors(page) == {"a", "a-1", "a-2", "b--c"}


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#other-heading) [ok](#page) [web](https://example.com)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) [self](#nope)\n"
        "`[in code](missing.md)`\n\n```\n[in a fence](missing.md)\n```\n"
    )
    assert [p.split(": ", 1)[1] for p in broken(page, tmp_path)] == [
        "missing.md: no such file",
        "other.md#nope: no heading with that anchor in other.md",
        "#nope: no heading with that anchor in page.md",
    ]


MAPS = {"README.md": "## Architecture", "docs/architecture.md": "## Map"}


def _map_paths(page: str = "README.md") -> list[str]:
    """Every path an architecture map (the first code block under its heading, ``MAPS``)
    names at the start of a line, braces expanded (``ml/{a,b}.py`` -> ``ml/a.py``,
    ``ml/b.py``)."""
    text = (REPO / page).read_text()
    block = text.split(MAPS[page], 1)[1].split("```", 2)[1]
    paths = []
    for line in block.splitlines():
        first = line.split(maxsplit=1)[0].rstrip(",") if line[:1].strip() else ""
        m = re.fullmatch(r"([\w/.]*?)\{([\w,]+)\}([\w.]*)", first)
        paths += [m[1] + part + m[3] for part in m[2].split(",")] if m else [first]
    return [p for p in paths if p]


@pytest.mark.parametrize("page", MAPS)
def test_every_path_in_the_architecture_map_exists(page: str) -> None:
    missing = [p for p in _map_paths(page) if not (REPO / p).exists()]
    assert missing == [], f"{page}'s map names paths that do not exist: {missing}"


def test_the_architecture_map_names_every_package() -> None:
    named = {p.split("/")[0] for p in _map_paths()}
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests"}
    assert packages - named == set(), "add the package to the README's architecture map"


def test_the_full_map_names_every_room() -> None:
    """Every package one level down (``ml/data/``, ``runtime/workdir/``) has its line in
    docs/architecture.md's map, as a path or inside its parent's braces."""
    named = {p.rstrip("/") for p in _map_paths("docs/architecture.md")}
    named |= {str(Path(p).parent) for p in named}
    rooms = {
        str(p.parent.relative_to(REPO))
        for p in REPO.glob("*/*/__init__.py")
        if p.parts[-3] != "tests"
    }
    assert rooms - named == set(), "add the room to docs/architecture.md's map"
