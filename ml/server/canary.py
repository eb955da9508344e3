"""The canary beside the served version: which requests it answers, and which version it is.

A canary release publishes the new version into its own directory (``--canary-dir``,
``V/serving/S/canary``; ``ml.contract``), not the serving one, with a weight file beside it
(``weight.json``: ``{"weight": W}``, the percent of requests the canary answers). The
server loads the newest version there exactly as it loads a served version (completely,
warmed up, then one reference assignment) and sends it ``W`` % of the requests; the rest
go to the served version, the stable. With no version in that directory, or weight 0,
every request goes to the stable, as without a canary. The weight file is re-read at
every poll, so the release's steps need no restart and no write route.

The split is exact, not random: of any run of requests, the canary answers the whole
number nearest below ``W`` % of them (a smooth weighted round robin of one pair), so the
per-version counts on ``/metrics`` match the weight asked to within one request.
"""

from __future__ import annotations

import json
import logging
import threading
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ml import contract
from ml.selection.publishing import serving_versions

log = logging.getLogger("ml.server.serve")

WEIGHT_FILE = contract.CANARY_WEIGHT_FILE

#: The version a request's URL names (``/v2/models/<name>/versions/<N>/infer``), set by
#: that route's handler (``ml/server/routes.py``) for the model to honour; None elsewhere.
_REQUESTED: ContextVar[int | None] = ContextVar("distml_requested_version", default=None)


def requested_version() -> int | None:
    return _REQUESTED.get()


def request_version(version: int) -> None:
    """Ask for ``version`` for the request being handled (its task's context only)."""
    _REQUESTED.set(version)


class WeightError(ValueError):
    """The weight file is not ``{"weight": <integer 0-100>}``."""


def parse_weight(data: bytes) -> int:
    """The weight in a weight file's bytes.

    Raises:
        WeightError: anything but a JSON object whose ``weight`` is an integer in 0-100.
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise WeightError(f"not JSON ({e})") from None
    weight = doc.get("weight") if isinstance(doc, dict) else None
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
        raise WeightError(f'expected {{"weight": <integer 0-100>}}, got {str(doc)[:80]}')
    return weight


class Split:
    """Which of a run of requests the canary answers: exactly ``weight`` % of them, spread
    evenly (request k goes to the canary when floor(k·W/100) moves). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._weight = 0
        self._seen = 0

    @property
    def weight(self) -> int:
        return self._weight

    def set(self, weight: int) -> None:
        with self._lock:
            if weight != self._weight:
                self._weight, self._seen = weight, 0

    def to_canary(self) -> bool:
        with self._lock:
            before = self._seen * self._weight // 100
            self._seen += 1
            return self._seen * self._weight // 100 > before


class CanaryDir:
    """The canary's directory: its newest loadable version (``current``) and its weight,
    refreshed by :meth:`poll` (the served version's watcher calls it at each poll).

    ``loader(version, path)`` is the watcher's (``ml/server/watcher.py``)."""

    def __init__(self, path: Path, loader: Any) -> None:
        self.path = path
        self.current: Any = None
        self.split = Split()
        self._loader = loader
        self._failed: set[int] = set()
        self._weight_said = ""

    def poll(self) -> None:
        versions = serving_versions(self.path)
        if not versions:
            if self.current is not None:
                log.info("canary version %d left %s", self.current.version, self.path)
                self.current = None
            self.split.set(0)
            return
        newest = versions[-1]
        if self.current is None or self.current.version != newest:
            self._load(newest)
        self.split.set(self._read_weight() if self.current is not None else 0)

    def _load(self, version: int) -> None:
        if version in self._failed:
            return
        path = self.path / str(version)
        log.info("loading canary version %d from %s", version, path)
        try:
            self.current = self._loader(version, path)
        except Exception as e:  # a canary that does not load answers nothing
            self._failed.add(version)
            log.error("canary version %d failed to load (%s: %s)", version, type(e).__name__, e)

    def _read_weight(self) -> int:
        path = self.path / WEIGHT_FILE
        try:
            weight, said = parse_weight(path.read_bytes()), ""
        except FileNotFoundError:
            weight, said = 0, f"no {path}: the canary answers nothing"
        except (OSError, WeightError) as e:
            weight, said = 0, f"{path} unreadable ({e}): the canary answers nothing"
        if said and said != self._weight_said:
            log.warning("%s", said)
        self._weight_said = said
        return weight

    def choose(self) -> Any:
        """The canary's loaded version for the next request, or None: the stable's turn."""
        current = self.current
        return current if current is not None and self.split.to_canary() else None
