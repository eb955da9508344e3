"""Kubernetes Events in the order they happened: the API lists them in no useful order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def _event_time(event: dict[str, Any]) -> datetime:
    meta = event.get("metadata") or {}
    for stamp in (
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        meta.get("creationTimestamp"),
    ):
        if not stamp:
            continue
        if isinstance(stamp, datetime):
            when = stamp
        else:
            try:
                when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
            except ValueError:
                continue
        return when if when.tzinfo else when.replace(tzinfo=UTC)
    return datetime.min.replace(tzinfo=UTC)


def sort_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Oldest first, by lastTimestamp / eventTime / firstTimestamp / creationTimestamp."""
    return sorted(events, key=_event_time)
