"""The work dir: everything the local runtime makes lives under it (``.distml/`` default)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

    def load_state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}

    def update_state(self, **changes: Any) -> dict[str, Any]:
        """Merge ``changes`` into state.json (``None`` deletes a key); atomic write."""
        state = self.load_state()
        for key, value in changes.items():
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state.", dir=self.root)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(state, f, indent=2)
            os.replace(tmp, self.state_path)
        except BaseException:  # a full disk, a Ctrl-C: the old state stays, no temp file
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return state
