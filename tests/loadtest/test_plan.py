"""loadtest/plan.py: duration parsing."""

from __future__ import annotations

import pytest

from loadtest import plan


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("2m", 120), ("90", 90), (" 1m30s ", 90), ("1h", 3600), ("5S", 5), (7, 7)],
)
def test_parse_duration(text, seconds):
    assert plan.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "30x", "1.5m", "-5", "0", "0s", "s", "m30", True])
def test_parse_duration_rejects_junk(text):
    with pytest.raises(ValueError, match="invalid duration"):
        plan.parse_duration(text)
