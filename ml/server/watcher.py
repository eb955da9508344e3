"""The model-version watcher: serves the newest loadable version under a model directory.

The directory is polled; the newest integer version directory is served (TF Serving's rule;
hidden directories are publishes in progress and are ignored). A new version is loaded and
warmed up completely before one reference assignment swaps it in, so no request fails or
sees half a model; a version that fails to load is logged and skipped (retried only when its
directory changes). TensorFlow is imported only when a version is loaded or called.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ml.model.export import DEFAULT_SIGNATURE, OUTPUT
from ml.model.servable import NotServable, check_probabilities, load_servable
from ml.model.tf_errors import tf_detail
from ml.selection.publishing import serving_versions
from ml.server.canary import LOOPBACK, CanaryDir
from ml.server.client_error import ClientError
from ml.server.instances import SIGNATURE_INPUTS
from ml.server.model_error import ModelError

log = logging.getLogger("ml.server.serve")


class LoadedVersion(NamedTuple):
    """One fully loaded, warmed-up version. Immutable: swapping versions swaps the object."""

    version: int
    path: Path
    signatures: Mapping[str, Callable[..., Any]]
    #: The loaded SavedModel object: its variables live as long as it does.
    saved_model: Any


def load_version(version: int, path: Path) -> LoadedVersion:
    """Load a SavedModel and check it against the export contract, warming it up
    (``ml.model.servable.load_servable``: what the selection checks too).

    Raises:
        Exception: whatever loading raises, or NotServable when the contract is not met.
    """
    servable = load_servable(path)
    return LoadedVersion(version, path, servable.signatures, servable.saved_model)


def _fingerprint(path: Path) -> tuple[int, ...] | None:
    """Changes when a version directory is rewritten, so a failed version is retried then."""
    try:
        stats = [path.stat()]
        pb = path / "saved_model.pb"
        if pb.exists():
            stats.append(pb.stat())
    except OSError:
        return None
    return tuple(v for s in stats for v in (s.st_mtime_ns, s.st_size))


class VersionWatcher:
    """Serves the newest loadable integer version under ``model_dir``; polls for new ones.

    ``current`` is swapped by one reference assignment after the new version is fully
    loaded; readers take ``current`` once per request and use only that object. With a
    ``canary_dir``, a canary version is loaded from there beside it and answers its share
    of the requests (``ml/server/canary.py``): :meth:`route` says which answers a request.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        loader: Callable[[int, Path], Any] = load_version,
        canary_dir: str | os.PathLike[str] | None = None,
        canary_here: bool = True,
        canary_hosts: frozenset[str] = LOOPBACK,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.current: LoadedVersion | None = None
        canary_loader = loader if canary_here else None  # None: only ever forwarded
        self.canary = (
            CanaryDir(Path(canary_dir), canary_loader, canary_hosts) if canary_dir else None
        )
        self._loader = loader
        self._failed: dict[int, tuple[int, ...] | None] = {}
        self._said_empty = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> bool:
        """Check the directory once; load and switch to a newer version. True if switched.
        Then the canary's directory, if any."""
        switched = self._poll_served()
        if self.canary is not None:
            self.canary.poll()
        return switched

    def _poll_served(self) -> bool:
        versions = serving_versions(self.model_dir)
        current = self.current
        if not versions:
            self._say_empty(current)
            return False
        self._said_empty = False
        for version in reversed(versions):
            if current is not None and version == current.version:
                return False
            if self._try(version, current):
                return True
        return False

    def _say_empty(self, current: LoadedVersion | None) -> None:
        """Log once per empty spell that there is no version directory."""
        if self._said_empty:
            return
        if current is None:
            log.warning(
                "waiting for a model: no version directory in %s yet (expecting "
                "%s/<integer version>/saved_model.pb); not ready until one loads",
                self.model_dir,
                self.model_dir,
            )
        else:
            log.warning(
                "no version directory left in %s; still serving version %d",
                self.model_dir,
                current.version,
            )
        self._said_empty = True

    def _try(self, version: int, current: LoadedVersion | None) -> bool:
        """Load ``version`` and switch to it; False (logged) when it fails to load."""
        path = self.model_dir / str(version)
        fingerprint = _fingerprint(path)
        if version in self._failed and self._failed[version] == fingerprint:
            return False  # already failed in this state; retried if the directory changes
        log.info("loading version %d from %s", version, path)
        try:
            loaded = self._loader(version, path)
        except Exception as e:  # any failure must leave the serving version in place
            self._failed[version] = fingerprint
            still = (
                f"still serving version {current.version}"
                if current is not None
                else "no version is being served yet"
            )
            log.error(
                "version %d in %s failed to load and is skipped (%s: %s); %s",
                version,
                path,
                type(e).__name__,
                str(e).splitlines()[0] if str(e) else "",
                still,
            )
            return False
        self.current = loaded  # the switch: one reference assignment
        self._failed.pop(version, None)
        was = f" (was version {current.version})" if current is not None else ""
        log.info("serving version %d from %s%s", version, path, was)
        return True

    def _poll_safely(self) -> None:
        try:
            self.poll()
        except Exception:  # e.g. the directory became unreadable: keep serving, keep polling
            log.exception("polling %s failed; will try again", self.model_dir)

    def start(self, interval: float) -> None:
        """Poll now and then every ``interval`` seconds in a daemon thread."""

        def run() -> None:
            self._poll_safely()
            while not self._stop.wait(interval):
                self._poll_safely()

        self._thread = threading.Thread(target=run, name="model-version-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def versions(self) -> dict[int, str]:
        """The versions loaded now, by number: ``{N: "stable"}``, and the canary's."""
        loaded = {self.current.version: "stable"} if self.current is not None else {}
        canary = self.canary.current if self.canary and not self.canary.waiting else None
        return {**loaded, canary.version: "canary"} if canary is not None else loaded

    def route(self, version: int | None = None) -> LoadedVersion | None:
        """Which loaded version answers a request: the one it names (``version``), else
        the canary for its share of requests, else the stable (None before one loads).

        Raises:
            ClientError: 404, ``version`` is not loaded here (saying which are).
        """
        if version is None:
            chosen = self.canary.choose() if self.canary is not None else None
            return chosen if chosen is not None else self.current
        here = (self.current, self.canary and self.canary.current)
        loaded = [v for v in here if isinstance(v, LoadedVersion)]  # not a canary's process
        for candidate in loaded:
            if candidate.version == version:
                return candidate
        served = ", ".join(f"{n} ({role})" for n, role in self.versions().items()) or "none yet"
        raise ClientError(404, f"version {version} is not served here; served: {served}")

    def predict(
        self, signature_name: str, inputs: Any, loaded: LoadedVersion | None = None
    ) -> tuple[int, np.ndarray]:
        """Run one signature on ``loaded`` (default: the version serving now); returns
        (version, probabilities), checked (``ml/server/model_error.py``).

        Raises:
            ClientError: an image that does not decode (the client's; the same for every
                version, as they share the decoder).
            ModelError: the version's graph rejected checked inputs, or answered something
                that is not probabilities (the version's failure: 500).
        """
        import tensorflow as tf

        current = loaded if loaded is not None else self.current
        if current is None:
            raise RuntimeError(f"no model version loaded from {self.model_dir} yet")
        dtype = tf.string if signature_name == DEFAULT_SIGNATURE else tf.float32
        tensor = tf.constant(inputs, dtype)
        try:
            out = current.signatures[signature_name](**{SIGNATURE_INPUTS[signature_name]: tensor})
        except tf.errors.InvalidArgumentError as e:
            if signature_name == DEFAULT_SIGNATURE and (found := _find_undecodable(inputs)):
                where, detail = found
                raise ClientError(
                    400,
                    f"{where} could not be decoded ({detail}); send complete, valid PNG or "
                    "JPEG files",
                ) from e
            raise ModelError(
                f"version {current.version}'s {signature_name} graph rejected input the server "
                f"had checked ({tf_detail(e)}): the version is faulty, not the request"
            ) from e
        try:
            rows = check_probabilities(out[OUTPUT].numpy(), len(inputs))
        except NotServable as e:
            raise ModelError(f"version {current.version}: {e}; the answer was withheld") from e
        return current.version, rows


def _find_undecodable(images: Sequence[bytes]) -> tuple[str, str] | None:
    """After a batch failed: the first image that does not decode, and why; None when all
    decode (then the graph failed, not the images). Decodes one image at a time with the
    signature's own decoder (ml.data.preprocess); the error path only."""
    import tensorflow as tf

    from ml.data.preprocess import decode_image

    for i, data in enumerate(images):
        try:
            decode_image(tf.constant(data))
        except tf.errors.InvalidArgumentError as e:
            return f"instance {i}", tf_detail(e)
    return None
