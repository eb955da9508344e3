"""The replica watcher of a load test: samples the number of ready replicas once a second
in a thread of its own while Locust runs (and, with ``settle_s``, after it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

SAMPLE_EVERY_S = 1.0


class ReplicaWatcher:
    """Calls ``sampler()`` once a second in a thread, recording (seconds since t0, ready)."""

    def __init__(self, sampler: Callable[[], int], t0: float, log: Callable[[str], Any]):
        self._sampler = sampler
        self._t0 = t0
        self._log = log
        self._stop = threading.Event()
        self._lock = threading.Condition()
        self._samples: list[dict[str, float | int]] = []
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="replica-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def samples(self) -> list[dict[str, float | int]]:
        with self._lock:
            return list(self._samples)

    def wait_for_scale_out(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a sample above the first; True when one came."""

        def risen() -> bool:
            ready = [x["ready"] for x in self._samples]
            return bool(ready) and max(ready) > ready[0]

        with self._lock:
            return self._lock.wait_for(risen, timeout=timeout)

    def _run(self) -> None:
        while True:
            t = time.time() - self._t0
            try:
                ready = int(self._sampler())
            except Exception as e:  # a flaky API call must not end the load test
                if not self._warned:
                    self._log(f"loadtest: replica sampler failed: {e!r} (not reported again)")
                    self._warned = True
            else:
                with self._lock:
                    self._samples.append({"t_s": round(t, 2), "ready": ready})
                    self._lock.notify_all()
            if self._stop.wait(SAMPLE_EVERY_S):
                return
