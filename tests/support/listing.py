"""What a directory holds, by name: for tests that check a step left nothing else behind."""

from __future__ import annotations

from pathlib import Path


def leftovers(directory: Path) -> list[str]:
    """The sorted names directly in ``directory``; ``[]`` when it does not exist."""
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []
