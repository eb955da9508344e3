"""The canary beside the served version: which requests it answers, and which version it is.

A canary release publishes the new version into its own directory (``--canary-dir``,
``V/serving/S/canary``; ``ml.contract``), not the serving one, with a weight file beside it
(``weight.json``: ``{"weight": W}``, the percent of requests the canary answers). The
server loads the newest version there exactly as it loads a served version (completely,
warmed up, then one reference assignment) and sends it ``W`` % of the requests; the rest
go to the served version, the stable. With no version in that directory, or weight 0,
every request goes to the stable, as without a canary. The weight file is re-read at
every poll, so the release's steps need no restart and no write route.

A canary may run in a server process of its own (the local runtime's and the cluster's
choice: its own TensorFlow threads, memory and batcher, so a slow, leaking or crashing
canary cannot slow or take down the stable). The weight file then names it, ``{"weight":
W, "url": "http://127.0.0.1:<port>"}``, and this server loads nothing: its share of the
requests is forwarded there as they came (``ml/server/canary_forward.py``) and counted
here under the canary's version. The URL's host is loopback or the one host this server
was told to forward to (``--canary-host``, the canary pods' Service, set by the
predictor's manifest): whoever can write the volume cannot send requests anywhere else.
Without ``url`` the canary is loaded in this process, or with ``--canary-elsewhere`` it
waits, answering nothing, and shows its version at weight 0 until a weight file names
its server.
With ``"shadow": S`` as well, ``S`` % of the requests the stable answers are also mirrored
to the canary's server, whose answers are only measured: a shadow phase before any user
gets the canary's answers (weight 0).

The split is exact, not random: of any run of requests, the canary answers the whole
number nearest below ``W`` % of them (a smooth weighted round robin of one pair), so the
per-version counts on ``/metrics`` match the weight asked to within one request.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from contextvars import ContextVar
from pathlib import Path
from typing import Any, NamedTuple

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


#: Where a canary's own server may listen: forwarded requests stay on this machine.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def parse_endpoint(data: bytes, hosts: frozenset[str] = LOOPBACK) -> str | None:
    """The canary's own server in a weight file's bytes (its ``url``), or None: the canary
    is loaded in this process. The bytes passed :func:`parse_weight`.

    Raises:
        WeightError: a ``url`` that is not ``http://<one of hosts>:<port>``.
    """
    url = json.loads(data).get("url")
    if url is None:
        return None
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    try:
        port = parts.port if parts else None
    except ValueError:
        port = None
    if (
        parts is None
        or parts.scheme != "http"
        or parts.hostname not in hosts
        or port is None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        allowed = " or ".join(f"http://{h}:<port>" for h in sorted(hosts - {"localhost", "::1"}))
        raise WeightError(f'"url" must be {allowed}, got {str(url)[:80]}')
    return f"http://{parts.netloc}"


def parse_shadow(data: bytes) -> int:
    """The percent of the stable's requests mirrored to the canary's own server (its
    answers discarded: the shadow phase), ``"shadow"`` in a weight file's bytes; 0 when
    absent. The bytes passed :func:`parse_weight`.

    Raises:
        WeightError: anything but an integer in 0-100.
    """
    shadow = json.loads(data).get("shadow", 0)
    if isinstance(shadow, bool) or not isinstance(shadow, int) or not 0 <= shadow <= 100:
        raise WeightError(f'"shadow" must be an integer 0-100, got {str(shadow)[:40]}')
    return shadow


class Remote(NamedTuple):
    """A canary version served by its own process at ``url``."""

    version: int
    url: str


class Waiting(NamedTuple):
    """A canary version for a server of its own that no weight file names yet
    (``--canary-elsewhere``): it answers nothing, and shows at weight 0."""

    version: int


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

    ``loader(version, path)`` is the watcher's (``ml/server/watcher.py``); None when the
    canary is never loaded here (``ml serve --canary-elsewhere``): without a ``url`` in
    its weight file it then answers nothing. ``hosts``: where a ``url`` may point."""

    def __init__(self, path: Path, loader: Any, hosts: frozenset[str] = LOOPBACK) -> None:
        self.path, self.hosts = path, hosts
        self.current: Any = None
        self.split = Split()
        #: Which of the stable's requests are mirrored to a canary in its own process.
        self.mirror = Split()
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
            self.mirror.set(0)
            return
        newest = versions[-1]
        weight, url, shadow = self._read_weight()
        if url is not None:  # its own process serves it: nothing to load here
            if self.current != Remote(newest, url):
                log.info("canary version %d answers at %s", newest, url)
            self.current = Remote(newest, url)
        elif self._loader is None:
            if self.current != Waiting(newest):
                log.info("canary version %d waits for its own server", newest)
            self.current = Waiting(newest)
        elif self.current is None or isinstance(self.current, Remote | Waiting):
            self.current = None
            self._load(newest)
        elif self.current.version != newest:
            self._load(newest)
        self.split.set(weight if self.current is not None and not self.waiting else 0)
        self.mirror.set(shadow if isinstance(self.current, Remote) else 0)

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

    def _read_weight(self) -> tuple[int, str | None, int]:
        """(weight, the canary's own server or None, the shadow's percent); (0, None, 0)
        when unreadable."""
        path = self.path / WEIGHT_FILE
        weight, url, shadow, said = 0, None, 0, ""
        try:
            data = path.read_bytes()
            weight, shadow = parse_weight(data), parse_shadow(data)
            url = parse_endpoint(data, self.hosts)
        except FileNotFoundError:
            said = f"no {path}: the canary answers nothing"
        except (OSError, WeightError) as e:
            weight, url, shadow = 0, None, 0
            said = f"{path} unreadable ({e}): the canary answers nothing"
        if said and said != self._weight_said:
            log.warning("%s", said)
        self._weight_said = said
        return weight, url, shadow

    @property
    def waiting(self) -> bool:
        """A canary for a server of its own that no weight file names yet."""
        return isinstance(self.current, Waiting)

    def choose(self) -> Any:
        """The canary's version loaded here for the next request, or None: the stable's
        turn (or a canary in its own process, whose turns the forwarding takes)."""
        current = self.current
        if current is None or isinstance(current, Remote | Waiting):
            return None
        return current if self.split.to_canary() else None

    def choose_remote(self) -> Remote | None:
        """The canary's own server for the next request, or None: this process answers."""
        current = self.current
        if not isinstance(current, Remote):
            return None
        return current if self.split.to_canary() else None

    def mirror_remote(self) -> Remote | None:
        """The canary's own server, to answer a copy of a request the stable answers (its
        answer discarded), or None: no copy of this one."""
        current = self.current
        if not isinstance(current, Remote):
            return None
        return current if self.mirror.to_canary() else None
