"""The work dir: everything the local runtime makes lives under it (``.distml/`` default)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.workdir.state import State, read_state, update_state

MARKER = ".distml-workdir"


@dataclass(frozen=True)
class Workdir:
    root: Path

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> Workdir:
        return cls(Path(path).expanduser().resolve())

    @property
    def volume(self) -> Path:
        return self.root / "volume"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def state_path(self) -> Path:
        return self.root / "state.json"

    def create(self) -> bool:
        """Create the work dir (marked as ours); True if anything was created."""
        created = not (self.root / MARKER).is_file()
        for d in (self.root, self.volume, self.logs, self.reports):
            d.mkdir(parents=True, exist_ok=True)
        if created:
            (self.root / MARKER).write_text("made by distml; `invoke down --purge` removes it\n")
        return created

    def exists(self) -> bool:
        return (self.root / MARKER).is_file()

    def state(self) -> State:
        """What state.json records (``runtime.workdir.state``: never fails, an empty State
        at worst)."""
        return read_state(self.state_path)

    def update_state(self, **changes: Any) -> State:
        """Change fields of state.json (``None`` resets one); an atomic write."""
        return update_state(self.state_path, **changes)
