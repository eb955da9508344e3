"""Series sampled beside a load test, once a second in a thread of their own while Locust
runs (and, with ``settle_s``, after it): the ready replicas (:class:`ReplicaWatcher`) and the
server's own figures (:class:`Sampler` of a ``loadtest.server_view`` view)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

SAMPLE_EVERY_S = 1.0

Row = dict[str, Any]


class Sampler:
    """Calls ``sample()`` once a second in a thread, recording ``{"t_s": seconds since t0,
    **sample()}``. A failing call is said once (``what``) and skipped: a flaky API call must
    not end the load test."""

    def __init__(
        self,
        sample: Callable[[], Row],
        t0: float,
        log: Callable[[str], Any],
        what: str = "sampler",
    ) -> None:
        self._sample = sample
        self._t0 = t0
        self._log = log
        self._what = what
        self._stop = threading.Event()
        self._lock = threading.Condition()
        self._samples: list[Row] = []
        self._warned = False
        self._thread = threading.Thread(target=self._run, name=what, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def samples(self) -> list[Row]:
        with self._lock:
            return list(self._samples)

    def wait_for(self, condition: Callable[[list[Row]], bool], timeout: float) -> bool:
        """Wait up to ``timeout`` s until ``condition(samples)``; True when it held."""
        with self._lock:
            return self._lock.wait_for(lambda: condition(self._samples), timeout=timeout)

    def _run(self) -> None:
        while True:
            t = time.time() - self._t0
            try:
                row = self._sample()
            except Exception as e:  # a flaky API call must not end the load test
                if not self._warned:
                    self._log(f"loadtest: {self._what} failed: {e!r} (not reported again)")
                    self._warned = True
            else:
                with self._lock:
                    self._samples.append({"t_s": round(t, 2), **row})
                    self._lock.notify_all()
            if self._stop.wait(SAMPLE_EVERY_S):
                return


class ReplicaWatcher(Sampler):
    """Samples ``sampler()``, the number of ready replicas, as ``{"t_s", "ready"}`` rows."""

    def __init__(self, sampler: Callable[[], int], t0: float, log: Callable[[str], Any]):
        super().__init__(lambda: {"ready": int(sampler())}, t0, log, "replica sampler")

    def wait_for_scale_out(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a sample above the first; True when one came."""

        def risen(samples: list[Row]) -> bool:
            ready = [x["ready"] for x in samples]
            return bool(ready) and max(ready) > ready[0]

        return self.wait_for(risen, timeout)
