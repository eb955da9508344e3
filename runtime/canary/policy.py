"""The canary's decisions: from each interval's measurement to hold, step, promote or roll back.

The semantics are Argo Rollouts' canary steps and analysis, in one state machine:

- ``steps`` are the canary's traffic weights in percent (``setWeight``), in order; after
  the last, promotion puts all traffic on the new version.
- At each step ``count`` passing measurements, one per ``interval_s``, move to the next
  step (a step's analysis with ``count`` and ``interval``).
- A failed measurement counts against ``failure_limit`` over the whole canary; one more
  than it allows rolls back (Argo's ``failureLimit``: 0 means the first failure).
- A measurement that could not be taken (Prometheus unreachable, the server not
  answering) is an error; more than ``consecutive_error_limit`` in a row rolls back
  (Argo's ``consecutiveErrorLimit``, default 4). A measurement that works resets it.
- A shadow phase first, when ``shadow_interval_s`` is set: the canary answers no user
  (weight 0) while a mirrored copy of the first step's share of the requests goes to it;
  ``count`` passing measurements, one per ``shadow_interval_s``, move to the first step.
  Its failures and errors count as any step's.
- Inconclusive (too few requests) neither passes nor fails. Argo pauses the rollout for a
  person there; a canary run by one command has no one to wait for, so more than
  ``inconclusive_limit`` in a row rolls back: the version serving now is the safe state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from runtime.canary.gates import Outcome

DEFAULT_STEPS = (10, 25, 50)


class Action(Enum):
    HOLD = "hold"  # measure again at the same weight
    STEP = "step"  # the next weight
    PROMOTE = "promote"  # all traffic on the new version, the canary's objects gone
    ROLLBACK = "rollback"  # the canary gone, the stable untouched


@dataclass(frozen=True)
class Policy:
    steps: tuple[int, ...] = DEFAULT_STEPS
    interval_s: float = 30.0
    count: int = 2
    failure_limit: int = 0
    consecutive_error_limit: int = 4
    inconclusive_limit: int = 3
    shadow_interval_s: float | None = None  # None: no shadow phase

    def __post_init__(self) -> None:
        if not self.steps or any(not 0 < w < 100 for w in self.steps):
            raise ValueError(f"canary steps must be weights between 1 and 99, not {self.steps}")
        if list(self.steps) != sorted(set(self.steps)):
            raise ValueError(f"canary steps must rise, each once: {self.steps}")
        if self.interval_s <= 0 or self.count < 1:
            raise ValueError("the analysis interval must be > 0 s and its count at least 1")
        if self.shadow_interval_s is not None and self.shadow_interval_s <= 0:
            raise ValueError("the shadow interval must be > 0 s")
        if min(self.failure_limit, self.consecutive_error_limit, self.inconclusive_limit) < 0:
            raise ValueError("the failure, error and inconclusive limits cannot be negative")

    @property
    def intervals_at_least(self) -> int:
        """The fewest measurements a promotion takes."""
        return (len(self.steps) + (self.shadow_interval_s is not None)) * self.count


@dataclass(frozen=True)
class Decision:
    action: Action
    weight: int  # the canary's weight after the decision (100 promoted, 0 rolled back)
    reason: str


@dataclass
class Canary:
    """Where a canary stands; ``record`` takes one measurement's outcome (None: the
    measurement could not be taken) and returns the decision."""

    policy: Policy
    step: int = 0
    shadowing: bool = False  # set from the policy: the shadow phase comes first
    passes: int = 0
    failures: int = 0
    errors_in_a_row: int = 0
    inconclusive_in_a_row: int = 0
    decisions: list[Decision] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.shadowing = self.policy.shadow_interval_s is not None

    @property
    def weight(self) -> int:
        """The share of users the canary answers now (0 in the shadow phase)."""
        return 0 if self.shadowing else self.policy.steps[self.step]

    @property
    def shadow(self) -> int:
        """The share of requests mirrored to the canary now (the first step's, in the
        shadow phase; else 0)."""
        return self.policy.steps[0] if self.shadowing else 0

    @property
    def interval_s(self) -> float:
        shadow = self.policy.shadow_interval_s
        return shadow if self.shadowing and shadow is not None else self.policy.interval_s

    def record(self, outcome: Outcome | None) -> Decision:
        decision = self._decide(outcome)
        self.decisions.append(decision)
        return decision

    def _decide(self, outcome: Outcome | None) -> Decision:
        p = self.policy
        if outcome is None:
            self.errors_in_a_row += 1
            if self.errors_in_a_row > p.consecutive_error_limit:
                return Decision(Action.ROLLBACK, 0, f"{self.errors_in_a_row} errors in a row")
            return self._hold(f"measurement error {self.errors_in_a_row}")
        self.errors_in_a_row = 0
        if outcome is Outcome.INCONCLUSIVE:
            self.inconclusive_in_a_row += 1
            if self.inconclusive_in_a_row > p.inconclusive_limit:
                n = self.inconclusive_in_a_row
                return Decision(Action.ROLLBACK, 0, f"inconclusive {n} times in a row")
            return self._hold(f"inconclusive {self.inconclusive_in_a_row}")
        self.inconclusive_in_a_row = 0
        if outcome is Outcome.FAIL:
            self.failures += 1
            if self.failures > p.failure_limit:
                return Decision(Action.ROLLBACK, 0, f"{self.failures} failed measurement(s)")
            return self._hold(f"failure {self.failures} of {p.failure_limit} allowed")
        self.passes += 1
        if self.passes < p.count:
            return self._hold(f"pass {self.passes} of {p.count}")
        if self.shadowing:
            self.shadowing, self.passes = False, 0
            return Decision(Action.STEP, self.weight, "shadow passed: the first step")
        if self.step + 1 == len(p.steps):
            return Decision(Action.PROMOTE, 100, f"passed every step ({len(p.steps)})")
        self.step, self.passes = self.step + 1, 0
        return Decision(Action.STEP, self.weight, f"step {self.step + 1} of {len(p.steps)}")

    def _hold(self, reason: str) -> Decision:
        return Decision(Action.HOLD, self.weight, reason)
