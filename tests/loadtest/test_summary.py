"""loadtest/summary.py: the verdict on a summary (failures, no requests, scale-out) and the
failure messages unwrapped from Locust's CSV."""

from __future__ import annotations

import pytest

from loadtest import summary as ls


def _summary(requests=100, failures=0, replicas=None) -> dict:
    samples = [{"t_s": float(i), "ready": r} for i, r in enumerate(replicas or [])]
    return {
        "requests": requests,
        "failures": failures,
        "url": "http://x",
        "errors": [{"error": "HTTP 500: boom"}] if failures else [],
        "replicas": samples,
        "replicas_start": samples[0]["ready"] if samples else None,
        "replicas_peak": max(s["ready"] for s in samples) if samples else None,
    }


@pytest.mark.parametrize(
    ("summary", "kwargs", "expected"),
    [
        (_summary(), {}, []),
        (_summary(failures=1), {}, ["1 of 100 requests failed (failure ratio 0.01 > allowed 0)"]),
        (_summary(failures=1), {"max_failure_ratio": 0.01}, []),
        (_summary(failures=2), {"max_failure_ratio": 0.01}, ["2 of 100 requests failed"]),
        (_summary(requests=0), {}, ["no requests were made"]),
        (_summary(replicas=[1, 1, 3, 2]), {"expect_scale_out": True}, []),
        (_summary(replicas=[2, 2, 2]), {"expect_scale_out": True}, ["peaked at 2 (started at 2)"]),
        (_summary(replicas=[0, 1, 1]), {"expect_scale_out": True}, ["no scale-out"]),
        (_summary(), {"expect_scale_out": True}, ["not sampled"]),
        (_summary(replicas=[1, 1]), {}, []),  # scale-out not asked for
        (
            _summary(requests=0, replicas=[1]),
            {"expect_scale_out": True},
            ["no requests", "no scale-out"],
        ),
    ],
)
def test_check(summary, kwargs, expected):
    """One problem per expected fragment, in order."""
    problems = ls.check(summary, **kwargs)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected, strict=True):
        assert fragment in problem


def test_check_names_the_most_common_error():
    (problem,) = ls.check(_summary(failures=5))
    assert problem.endswith("most common: HTTP 500: boom")


@pytest.mark.parametrize(
    ("csv_error", "message"),
    [
        ("CatchResponseError('HTTP 500: boom')", "HTTP 500: boom"),
        (
            "CatchResponseError('connection error: Pool(host=\\'127.0.0.1\\', port=9)')",
            "connection error: Pool(host='127.0.0.1', port=9)",
        ),
        ("ConnectionRefusedError(111, 'refused')", "ConnectionRefusedError(111, 'refused')"),
        ("CatchResponseError(broken", "CatchResponseError(broken"),
    ],
)
def test_failure_messages_are_unwrapped(csv_error, message):
    assert ls.unwrap_error(csv_error) == message
