"""The canary on the local runtime: the stable's server splits, the canary's own answers.

``ml select --canary`` publishes the new version into ``V/serving/S/canary``; a server of its
own serves it (``runtime/local/canary_deploy.py``, ``endpoint``), and the stable's server
(started with ``--canary-dir --canary-elsewhere``) forwards it the share of requests its
``weight.json`` gives and counts them under its version (``ml/server/canary.py``,
``canary_forward.py``). This module is the analysis' ``Split`` and ``measure`` for it:

- ``set_weight`` writes the weight file with the canary's URL (a rename: the server never
  reads half of it) and returns once the server's ``distml_canary_weight`` gauge shows it;
- ``measure`` reads ``/metrics`` and takes, per version, what was counted since the last
  reading on the predict and infer routes (never probes; in the shadow phase, the canary's
  answers to the mirrored copies and their agreement with the stable's), and each
  version's answers on the held-out labelled sample (``ml sample_accuracy``, sent to each
  version's own V2 URL, paired image by image: ``runtime/canary/paired.py``);
- ``promote`` and ``rollback`` run ``ml canary_publish`` (the canary becomes the served
  version, or is set aside with the record), then wait until the server shows it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from loadtest.metrics_text import Counts, MetricsTextError, Page, parse_page
from loadtest.server_view import METRICS_PATH, MetricsUnavailable, fetch
from ml import contract
from ml.contract import canary_commands
from runtime.canary import live
from runtime.canary.analysis import MeasurementError, Result, record_of
from runtime.canary.gates import Figures
from runtime.canary.paired import Paired, SampleError, read_report
from runtime.procs import python_env

#: How long the server may take to apply a weight or drop the canary (it polls every 2 s).
APPLY_TIMEOUT_S = 60.0
SAMPLE_TIMEOUT_S = 120.0


def figures(counts: Counts, accuracy: float | None, paired: Paired | None = None) -> Figures:
    """One version's figures over an interval, from what ``/metrics`` counted: every answer
    but a 2xx is a failure (runtime/canary/gates.py says why the clients' share is fair)."""
    errors = sum(n for code, n in counts.by_code.items() if not code.startswith("2"))
    return Figures(int(counts.total), int(errors), counts.quantile(0.99), accuracy, paired)


def write_weight(path: Path, weight: int, endpoint: str | None = None, shadow: int = 0) -> None:
    """The weight file, replaced in one rename; ``endpoint``: the canary's own server,
    ``shadow``: the share mirrored to it."""
    staging = path.with_name(f".{path.name}.tmp")
    doc = {"weight": weight, **({"url": endpoint} if endpoint else {})}
    doc |= {"shadow": shadow} if shadow else {}
    staging.write_text(json.dumps(doc) + "\n")
    os.replace(staging, path)


def _run_step(argv: list[str]) -> subprocess.CompletedProcess:
    """``ml.selection.sample_accuracy`` as a process (it needs numpy and the data: the pod side)."""
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=SAMPLE_TIMEOUT_S,
        env=python_env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip


class LocalCanary:
    """The analysis' Split and measure for a canary of ``version`` beside ``stable``."""

    def __init__(
        self,
        *,
        url: str,
        service: str,
        volume: Path,
        stable: int,
        version: int,
        step: Callable[[str, list[str]], int],
        python: str,
        source_dir: str | None = None,
        note: Callable[[str], None] = print,
        score: Callable[[list[str]], subprocess.CompletedProcess] | None = None,
    ) -> None:
        self.url, self.service, self.volume = url.rstrip("/"), service, volume
        self.stable, self.version = stable, version
        self.step, self.python, self.source_dir = step, python, source_dir
        self._unscored = live.Unscored(note)
        self._last: Page | None = None
        self._accuracy: dict[str, float] | None = None
        self._paired: Paired | None = None
        self._score = score or _run_step
        #: The canary's own server (runtime/local/canary_deploy.py), named in the weight
        #: file so the stable's server forwards the canary's share there; None: in-process.
        self.endpoint: str | None = None
        self._shadow = 0  # the share mirrored now (the shadow phase), else 0

    # --- Split -------------------------------------------------------------------------

    def set_weight(self, weight: int, shadow: int = 0) -> None:
        if shadow and not self.endpoint:
            raise DistmlError("a shadow phase needs the canary in a server of its own")
        path = Path(contract.canary_weight_path(self.volume, self.service))
        write_weight(path, weight, self.endpoint, shadow)
        applied = {str(self.version): weight}
        mirrored = {str(self.version): shadow} if shadow else {}
        what = f"mirror {shadow}% of requests to" if shadow else f"send {weight}% of requests to"
        self._wait(
            lambda page: (
                page.canary_weight(self.service) == applied
                and page.canary_shadow(self.service) == mirrored
            ),
            f"the server to {what} version {self.version}",
        )
        self._shadow = shadow
        # The labelled sample, before the first interval starts: its 5,000 images on both
        # versions' servers must not be counted in the latency users are judged by.
        self._accuracies()
        self._last = self._page()  # the next interval counts from here

    def promote(self, result: Result) -> None:
        self._end(result, promote=True)
        self._wait(
            lambda page: (
                page.version(self.service) == str(self.version)
                and not page.canary_weight(self.service)
            ),
            f"the server to serve version {self.version} to every request",
        )

    def rollback(self, result: Result) -> None:
        self._end(result, promote=False)
        self._wait(
            lambda page: not page.canary_weight(self.service),
            f"the server to drop canary version {self.version}",
        )

    def _end(self, result: Result, *, promote: bool) -> None:
        record = Path(contract.canary_dir(self.volume, self.service)).parent / (
            f".record-{self.service}-{self.version}.json"
        )
        record.write_text(json.dumps(record_of(result), indent=2) + "\n")
        argv = canary_commands.canary_end(
            self.volume, self.service, promote=promote, record=record, python=self.python
        )
        code = self.step("promote" if promote else "roll back", argv)
        record.unlink(missing_ok=True)
        if code != 0:
            raise DistmlError(f"ending the canary failed (exit {code}, see above)")

    # --- measure -----------------------------------------------------------------------

    def measure(self, seconds: float) -> tuple[Figures, Figures]:
        try:
            page = self._page()
        except (MetricsUnavailable, MetricsTextError) as e:
            raise MeasurementError(f"the server's /metrics: {e}") from e
        last, self._last = self._last or page, page
        accuracy = self._accuracies()

        def of(version: int, paired: Paired | None = None) -> Figures:
            counted = page.served(self.service, str(version))
            since = counted.since(last.served(self.service, str(version)))
            return figures(since, accuracy.get(str(version)), paired)

        if not self._shadow:
            return of(self.stable), of(self.version, self._paired)
        v = str(self.version)  # the shadow phase: the canary's answers to the mirrored copies
        mirrored = page.shadowed(self.service, v).since(last.shadowed(self.service, v))
        (same, differ), (same0, differ0) = (p.agreement(self.service, v) for p in (page, last))
        canary = figures(mirrored, accuracy.get(v), self._paired)
        agreed = (int(max(same - same0, 0)), int(max(differ - differ0, 0)))
        canary = replace(canary, agreement=agreed)
        return of(self.stable), canary

    def _accuracies(self) -> dict[str, float]:
        """Each version's accuracy on the labelled sample: measured once, as the first share
        is set and before its interval starts (a version answers the same images the same
        way), retried at the next interval if it failed."""
        if self._accuracy is None:
            # The canary's half straight to its own server, if it has one: the stable's
            # would only pass it on, at the cost of its own event loop while users wait.
            canary_url = self.endpoint or self.url
            endpoints = {
                str(v): f"{url}/v2/models/{self.service}/versions/{v}/infer"
                for v, url in ((self.stable, self.url), (self.version, canary_url))
            }
            argv = canary_commands.sample_accuracy(endpoints, self.source_dir, python=self.python)
            try:
                done = self._score(argv)
            except subprocess.TimeoutExpired:
                return self._unscored(f"no answer within {SAMPLE_TIMEOUT_S:.0f} s")
            if done.returncode != 0:
                lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
                return self._unscored(lines[-1])
            try:
                found = read_report(last_json(done.stdout), self.stable, self.version)
            except SampleError as e:
                return self._unscored(str(e))
            self._accuracy, self._paired = found
        return self._accuracy

    def _page(self) -> Page:
        return parse_page(fetch(self.url + METRICS_PATH))

    def _wait(self, ok: Callable[[Page], bool], what: str) -> None:
        def judge(page: Page) -> Any:
            return Done(page) if ok(page) else Pending(what)

        verdict = poll(
            self._page, judge, timeout=APPLY_TIMEOUT_S, interval=0.2,
            retry_on=(MetricsUnavailable, MetricsTextError), retry_for=10.0,
        )  # fmt: skip
        if not isinstance(verdict, Done):
            raise DistmlError(
                f"timed out after {APPLY_TIMEOUT_S:.0f} s waiting for {what}: the server's log "
                "(logs/serve.log in the work dir) says why (a canary it could not load; a server "
                "started by an older distml has no canary support: `invoke down`, then deploy)"
            )


def last_json(text: str) -> dict[str, Any]:
    """The last line of ``text`` that is a JSON object ({} when none is): what
    ``ml.selection.sample_accuracy`` prints last."""
    for line in reversed(text.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {}
