"""Upstream Go modules' source, where the kind build has downloaded it: tests hold the
build's pins to it, and skip (saying how to get it) where it is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def module_source(module: str, version: str) -> Path:
    """``module@version`` in Go's module cache, or a skip naming the path."""
    cache = os.environ.get("GOMODCACHE") or str(Path.home() / "go/pkg/mod")
    found = Path(cache, f"{module}@{version}")
    if not found.is_dir():
        pytest.skip(f"{module}@{version} is not in the Go module cache ({found}): build it first")
    return found
