"""integration/canary_check.py's judgement of what deploy --canary said (the run itself
needs the kind cluster: nox -s integration -- standard --offline --with-monitoring)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from integration import canary_check as cc
from runtime.canary.gates import Figures, Thresholds, judge

SAID = """\
canary: version 5 beside version 4 in every predictor pod, ...
[1] canary 20%: traffic pass (612 of 50 requests, 20.1% of 3050), errors pass (...) -> hold
[2] canary 20%: traffic pass (600 of 50 requests, 19.9% of 3011), errors pass (...) -> step
[3] canary 50%: traffic pass (1352 of 50 requests, 50.0% of 2705), errors pass (...) -> hold
"""


def test_the_shares_are_read_off_the_interval_lines():
    assert cc.shares(SAID) == [(20, 20.1, 3050), (20, 19.9, 3011), (50, 50.0, 2705)]
    assert cc.share_problems(cc.shares(SAID), (20, 50)) == []


def test_a_step_missing_or_off_its_weight_is_a_problem():
    off = SAID.replace("50.0% of 2705", "53.1% of 2705")
    assert cc.share_problems(cc.shares(off), (20, 50)) == [
        "an interval at 50% measured 53.1% of 2705 requests (tolerance 2 points)"
    ]
    assert cc.share_problems(cc.shares(SAID), (10, 20, 50)) == ["no interval measured at 10%"]


@settings(deadline=None)  # the traffic gate's first look at a share computes what it needs
@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_the_pattern_reads_what_the_traffic_gate_writes(stable, canary):
    (gate, *_) = judge(Figures(stable, 0), Figures(canary, 0), Thresholds())
    line = f"[1] canary 20%: {gate}, errors pass (x) -> hold"
    found = cc.shares(line)
    if stable + canary == 0:
        assert found == []  # no share to read: nothing was answered
    else:
        ((weight, share, total),) = found
        assert weight == 20 and total == stable + canary
        assert abs(share - 100 * canary / total) <= 0.05 + 1e-9  # printed to 0.1 point


def test_the_shadow_pattern_reads_what_the_analysis_writes():
    from runtime.canary.analysis import Interval
    from runtime.canary.policy import Action, Decision

    stable, canary = Figures(900, 0, 0.02), Figures(180, 0, 0.02, agreement=(178, 2))
    gates = judge(stable, canary, Thresholds())
    decision = Decision(Action.HOLD, 0, "1 of 2 passes")
    line = Interval(0, stable, canary, gates, decision, "", 20).line(3)
    assert cc.SHADOW_LINE.search(line), line
    assert not cc.SHADOW_LINE.search(line.replace(", agreement", ", nothing")), "no agreement"
    assert not cc.shares(line), "a shadow's line is no step's share"


def test_the_line_waited_for_is_the_one_workflow_canary_says(monkeypatch):
    from types import SimpleNamespace

    from runtime.cluster import canary_deploy, workflow

    said: list[str] = []
    monkeypatch.setattr(canary_deploy, "loaded_canary", lambda cx, p: None)
    workflow._judge_canary(SimpleNamespace(out=said.append), SimpleNamespace(stable=3))
    assert said[0].startswith(cc.JUDGING)


def test_the_load_starts_when_the_line_comes_not_when_the_command_ends(monkeypatch, tmp_path):
    # The command waits, after the line, for the load to have started: a line held in a
    # buffer until the end would leave it waiting until its own timeout (exit 1).
    started = tmp_path / "started"
    script = (
        "import pathlib, sys, time\n"
        f"print('training'); print({cc.JUDGING!r} + ' it')\n"
        "end = time.monotonic() + 20\n"
        f"while not pathlib.Path({str(started)!r}).exists():\n"
        "    if time.monotonic() > end: sys.exit(1)\n"
        "    time.sleep(0.05)\n"
        "print('promoted')\n"
    )
    loads: list[int] = []

    def start_load(seconds):
        loads.append(seconds)
        started.touch()
        return "load", "log"

    monkeypatch.setattr(cc, "start_load", start_load)
    monkeypatch.setattr(cc, "load_summary", lambda load, log, s: {"requests": 7, "of": load})
    done, summary = cc.follow([sys.executable, "-c", script], 330)
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[-1] == "promoted"
    assert loads == [330] and summary == {"requests": 7, "of": "load"}


def test_a_command_that_never_judges_starts_no_load(monkeypatch):
    monkeypatch.setattr(cc, "start_load", lambda s: pytest.fail("a load started"))
    done, summary = cc.follow([sys.executable, "-c", "print('no canary'); raise SystemExit(0)"], 9)
    assert (done.returncode, summary) == (0, {})


def test_an_unknown_argument_is_refused():
    assert cc.main(["--bogus"]) == 2


class Isvcs:
    """An API server's answers for the InferenceService, one per look (the last repeats)."""

    def __init__(self, *ready: str) -> None:
        self.answers = [
            {"status": {"conditions": [{"type": "Ready", "status": r, "reason": "X"}]}}
            for r in ready
        ]

    def __call__(self, context: str) -> Isvcs:
        return self

    def get(self, api_version, kind, name, namespace):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_the_workflow_check_waits_for_the_service_ready_first(monkeypatch, capsys):
    from k8s.client import kube

    monkeypatch.setattr(cc, "READY_POLL_S", 0.01)
    monkeypatch.setattr(kube, "ApiKube", Isvcs("False", "False", "True"))
    assert cc.wait_ready() == []
    out = capsys.readouterr().out
    assert "isvc: Ready=False (X)" in out and f"{cc.DEFAULT_SERVICE} Ready after" in out


def test_a_service_never_ready_is_a_problem_and_no_canary_is_tried(monkeypatch):
    from k8s.client import kube

    monkeypatch.setattr(cc, "READY_POLL_S", 0.01)
    monkeypatch.setattr(cc, "READY_WAIT_S", 0.05)
    monkeypatch.setattr(kube, "ApiKube", Isvcs("False"))
    monkeypatch.setattr(cc, "good", lambda workflow: pytest.fail("a canary was tried"))
    assert cc.main(["--workflow"]) == 1
