"""A ``GET /metrics`` answer read with prometheus-client's own parser, for the metrics tests
(test_metrics.py in process, test_metrics_http.py against the real server)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


class Scrape:
    """The samples of one exposition in the Prometheus text format."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[Sample] = [
            sample for family in text_string_to_metric_families(text) for sample in family.samples
        ]

    def matching(self, name: str, **labels: str) -> list[Sample]:
        """The samples of ``name`` whose labels include ``labels``."""
        return [s for s in self.samples if s.name == name and _has(s.labels, labels)]

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels`` (0: none)."""
        return sum(s.value for s in self.matching(name, **labels))

    def label_values(self, name: str, label: str) -> set[str]:
        return {s.labels[label] for s in self.samples if s.name == name}

    def counts(self, name: str, *labels: str) -> dict[tuple[str, ...], float]:
        """``name``'s values by the values of ``labels`` (summed over the others)."""
        found: dict[tuple[str, ...], float] = {}
        for s in self.matching(name):
            key = tuple(s.labels[label] for label in labels)
            found[key] = found.get(key, 0.0) + s.value
        return found


def _has(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def increase(
    before: dict[tuple[str, ...], float], after: dict[tuple[str, ...], float]
) -> dict[tuple[str, ...], float]:
    """What grew from ``before`` to ``after`` (of :meth:`Scrape.counts`), by key."""
    grown = {key: value - before.get(key, 0.0) for key, value in after.items()}
    return {key: value for key, value in grown.items() if value}
