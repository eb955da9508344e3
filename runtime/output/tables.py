"""Result tables for the terminal: plain aligned columns (readable in CI logs too)."""

from __future__ import annotations

from collections.abc import Sequence


def table(rows: Sequence[Sequence[str]]) -> str:
    """The first row is the header; a dashed rule goes under it; columns are left-aligned."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ms(value: float | None) -> str:
    """Milliseconds for a table cell: whole numbers, ``-`` when unknown."""
    return "-" if value is None else f"{value:.0f}"


def one_line(text: str, limit: int = 300) -> str:
    """``text`` as one table cell: its whitespace runs as single spaces, cut at ``limit``."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
