"""Every burn-rate window told apart, by ``promtool test rules``: one spike of errors in a
steady stream, and the times each window lets it go. A steady burn gives every window the
same ratio, so it cannot show a window that is too short or too long; a spike can:

- each recorded ratio (raw up to an hour, from the recorded 5-minute rates beyond) holds
  the spike until its window has passed it, and not a scrape longer;
- each alert resolves when its own short window is clean (the page 1h/5m first, the ticket
  3d/6h last), though its long window still holds the spike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from k8s.monitoring import rules
from tests.k8s.monitoring.test_rules_promtool import (
    PER_MINUTE,
    SERVICE,
    json_labels,
    minutes,
    promtool,
    slo_input,
)

AVAILABILITY = rules.SLOS[0]
START_M, LENGTH_M = 60, 10  # every request failing from minute 60 to minute 69
#: A recorded 5-minute rate holds a request for 5 minutes after it, and a raw window's
#: rate() its last sample: a spike has left window W at END + W (+5 min when recorded).
END_M = START_M + LENGTH_M
MARGIN_M = 5


def _stream(total_m: int) -> list[dict[str, str]]:
    shape = [(START_M - 1, 0.0), (LENGTH_M - 1, 1.0), (total_m - END_M, 0.0)]
    return slo_input(AVAILABILITY, shape)


def _left_at(window: str) -> int:
    """The minute from which window ``window`` no longer holds the spike."""
    recorded = rules.hours(window) > rules.hours(rules.LONG_FROM_RECORDED)
    return END_M + minutes(window) + (5 if recorded else 0)


def _holds(window: str, at_m: int, held: bool) -> dict[str, Any]:
    expr = f"{AVAILABILITY.record(window)} > bool 0"
    return {"expr": expr, "eval_time": f"{at_m}m",
            "exp_samples": [{"labels": json_labels(SERVICE), "value": int(held)}]}  # fmt: skip


def test_each_recorded_window_holds_a_spike_exactly_as_long_as_it_is(tmp_path: Path) -> None:
    checks = [
        check
        for w in rules.WINDOWS
        for check in (
            _holds(w, _left_at(w) - MARGIN_M, True),
            _holds(w, _left_at(w) + MARGIN_M, False),
        )
    ]
    total = max(_left_at(w) for w in rules.WINDOWS) + 2 * MARGIN_M
    promtool(tmp_path, [{"interval": "1m", "input_series": _stream(total),
                         "promql_expr_test": checks}])  # fmt: skip


def test_each_alert_resolves_with_its_own_short_window_the_long_one_still_burning(
    tmp_path: Path,
) -> None:
    """10 minutes of errors at PER_MINUTE requests a minute: 100,000 bad requests, over
    every threshold; each alert's long window still holds them when its short one is clean."""
    name = f"Distml{AVAILABILITY.name.title()}BudgetBurn"
    burns = {b.long: b for b in rules.BURNS}
    checks = []
    for long, burn in burns.items():
        clean = _left_at(burn.short)
        fired = START_M + minutes(burn.for_) + 2  # its condition held from the spike's start
        still = max(clean - MARGIN_M, fired)
        for at_m, held in ((still, True), (clean + MARGIN_M, False)):
            firing = f'ALERTS{{alertname="{name}",alertstate="firing",long="{long}"}}'
            expr = f"count({firing}) or vector(0)"
            checks.append({"expr": expr, "eval_time": f"{at_m}m",
                           "exp_samples": [{"labels": "{}", "value": int(held)}]})  # fmt: skip
    assert PER_MINUTE * LENGTH_M >= rules.PAGE_MIN_BAD
    total = max(_left_at(b.short) for b in rules.BURNS) + 2 * MARGIN_M
    promtool(tmp_path, [{"interval": "1m", "input_series": _stream(total),
                         "promql_expr_test": checks}])  # fmt: skip
