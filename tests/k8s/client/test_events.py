"""k8s.client.events: Events oldest first, by whichever time stamp each one has."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from k8s.client.events import sort_events


def test_each_event_is_placed_by_the_first_stamp_it_has() -> None:
    events = [
        {"lastTimestamp": "2026-01-01T00:00:09Z", "metadata": {"name": "c"}},
        {"eventTime": "2026-01-01T00:00:05.123456Z", "metadata": {"name": "b"}},
        {"metadata": {"name": "d", "creationTimestamp": "2026-01-01T00:00:10Z"}},
        {"firstTimestamp": datetime(2026, 1, 1, 0, 0, 1), "metadata": {"name": "a"}},
        {"lastTimestamp": "not a time", "metadata": {"name": "first"}},  # no time: first
    ]
    assert [e["metadata"]["name"] for e in sort_events(events)] == ["first", "a", "b", "c", "d"]


@given(st.lists(st.one_of(st.none(), st.text(max_size=30), st.datetimes(timezones=st.just(UTC)))))
def test_any_stamps_sort_without_failing(stamps) -> None:
    events = [{"lastTimestamp": s, "metadata": {}} for s in stamps]
    assert len(sort_events(events)) == len(events)
