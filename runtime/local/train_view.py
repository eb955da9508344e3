"""`invoke status` on the local runtime while training runs: each job's live figures, read
from its workers' ``/metrics`` (``ml/training/train_metrics.py``; the URLs the job runner records
in the state). A page is outside input: parsed with prometheus-client's own parser, and a
page that cannot be read or parsed is said in its row, never a crash.

Per job: examples per second (the workers' recent throughput, summed: each processes its
share of every global batch), steps done (the workers agree; the least is shown), the
epoch and the loss as last read.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field

from ml.contract import training_metrics as tmx

Row = tuple[str, str]
TIMEOUT_S = 2.0


@dataclass
class WorkerPage:
    """One worker's figures (None: not on its page)."""

    examples_per_second: float | None = None
    steps: float | None = None
    epoch: float | None = None
    loss: float | None = None


@dataclass
class JobView:
    pages: list[WorkerPage] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)


WANTED = {
    tmx.EXAMPLES_PER_SECOND: "examples_per_second",
    tmx.STEPS_TOTAL: "steps",
    tmx.EPOCH: "epoch",
    tmx.LOSS: "loss",
}


def parse_page(text: str) -> WorkerPage:
    """A worker's ``/metrics`` text; ValueError when it is not Prometheus's text format."""
    from prometheus_client.parser import text_string_to_metric_families

    page = WorkerPage()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            attr = WANTED.get(sample.name)
            if attr is not None:
                setattr(page, attr, float(sample.value))
    return page


def _fetch(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=TIMEOUT_S) as resp:
        return str(resp.read(1 << 20).decode("utf-8", errors="replace"))


def read(workers: Sequence[Sequence[object]]) -> dict[str, JobView]:
    """job -> its workers' pages, from (job, index, URL) as the state records them."""
    jobs: dict[str, JobView] = {}
    for job, index, url in workers:
        view = jobs.setdefault(str(job), JobView())
        try:
            view.pages.append(parse_page(_fetch(str(url))))
        except (OSError, urllib.error.URLError) as e:
            view.unread.append(f"worker {index}: {getattr(e, 'reason', e)}")
        except ValueError as e:
            view.unread.append(f"worker {index}: not a metrics page ({str(e)[:80]})")
    return jobs


def _describe(view: JobView) -> str:
    rates = [p.examples_per_second for p in view.pages if p.examples_per_second is not None]
    steps = [p.steps for p in view.pages if p.steps is not None]
    epochs = [p.epoch for p in view.pages if p.epoch is not None]
    losses = [p.loss for p in view.pages if p.loss is not None]
    parts = [f"{len(view.pages)} worker(s) read"]
    if rates:
        parts.append(f"{sum(rates):.0f} examples/s")
    if steps:
        parts.append(f"step {min(steps):.0f}")
    if epochs:
        parts.append(f"epoch {max(epochs):.0f}")
    if losses:
        parts.append(f"loss {losses[0]:.4f}")
    parts += view.unread
    return ", ".join(parts)


def rows(workers: Sequence[Sequence[object]]) -> list[Row]:
    """One row per training job that runs now (none when nothing trains)."""
    return [(f"training {job}", _describe(view)) for job, view in sorted(read(workers).items())]
