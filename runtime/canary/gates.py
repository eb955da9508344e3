"""The canary's gates: one interval's figures for both versions, judged.

Each interval the analysis reads, for the stable version and the canary apart, the
predict/infer requests they answered (never probes), how many failed (any answer but a
2xx: the versions answer random shares of the same traffic, so the clients' own mistakes
weigh on both alike, and anything more is the version's), their p99 latency, and their
accuracy on the same labelled sample. The counts are the step's so far (``Figures.then``):
each look at a step judges every request since the step began. Four gates judge them:

- ``traffic``: the canary answered enough requests for the error test to have caught a
  canary failing ``error_detect`` more often than the stable with probability
  ``error_power`` (``runtime/canary/stats.py``), and at least ``min_requests``; fewer is
  Inconclusive (Argo Rollouts' word: not a failure, not a pass), and so are the two gates
  below that need it.
- ``errors``: Fisher's exact test, one-sided: the canary fails when the chance that a
  version as good as the stable fails at least as often is at most ``error_alpha`` (per
  look; the whole canary's false-rollback rate is measured in tests/runtime/canary). A
  canary that fails that plainly is failed at once, however few requests it answered.
- ``latency``: the canary's p99 is within the latency objective, or at most
  ``latency_factor`` times the stable's (Flagger's request-duration check, with the
  stable as its reference).
- ``accuracy``: the model gate no peer has, on the labelled sample both versions answered
  (``runtime/canary/paired.py``): the canary fails when McNemar's exact test finds it
  worse than the stable on the same images (p at most ``model_alpha``), or any class's
  recall drops more than ``class_margin`` and the test finds it worse within that class.
  Without the image-by-image answers (an older sample step), the canary's accuracy may be
  at most ``accuracy_margin`` below the stable's.

A canary whose own server went down during the step (on a cluster: its pod restarted, was
OOM-killed or is gone; ``runtime/canary/cluster_pod.py``) fails a fifth gate, ``server``,
shown only then: users would have seen its errors or its stalls however few were counted.

A failed gate fails the measurement even when another is Inconclusive: a canary that
answers every request it got with an error is not waited for.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ml.contract.serving_metrics import LATENCY_OBJECTIVE_S
from runtime.canary.paired import Paired, worse_p
from runtime.canary.stats import fisher_greater, requests_needed


class Outcome(Enum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Figures:
    """One version over one interval. ``p99_s`` is None with no request; ``accuracy`` is
    None when the labelled sample could not be scored."""

    requests: int
    errors: int
    p99_s: float | None = None
    accuracy: float | None = None
    #: The canary's answers on the sample against the stable's (the canary's figures only).
    paired: Paired | None = None
    #: In a shadow phase, (images whose class agreed with the stable's answer, images not).
    agreement: tuple[int, int] | None = None
    #: What happened to the canary's own server (a pod restarted, OOM-killed, gone), if
    #: anything: it fails the canary whatever its requests said.
    down: str | None = None

    @property
    def error_ratio(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def then(self, later: Figures) -> Figures:
        """These figures and a later interval's together: the counts summed, the later
        latency (a p99 is per interval; the earlier one when the later interval had no
        request), the later accuracy if it has one."""
        return Figures(
            self.requests + later.requests,
            self.errors + later.errors,
            later.p99_s if later.p99_s is not None else self.p99_s,
            later.accuracy if later.accuracy is not None else self.accuracy,
            later.paired if later.paired is not None else self.paired,
            _sum(self.agreement, later.agreement),
            self.down or later.down,
        )

    def agreement_text(self) -> str:
        """``, agreement 97.1% of 812 images`` (a shadow phase's), else ''."""
        if not self.agreement or not sum(self.agreement):
            return ""
        same, total = self.agreement[0], sum(self.agreement)
        return f", agreement {_pct(same / total)} of {total} images"


def _sum(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    if a is None or b is None:
        return a or b
    return a[0] + b[0], a[1] + b[1]


@dataclass(frozen=True)
class Thresholds:
    """What the gates allow. With the defaults a step needs about 105 canary requests at a
    10 % share and 260 at 50 % while the stable fails none (more as the stable fails more):
    a canary at 10 % of 5 users' load answers a few hundred per 30 s interval."""

    min_requests: int = 50
    error_alpha: float = 0.002
    error_detect: float = 0.05
    error_power: float = 0.9
    latency_objective_s: float = LATENCY_OBJECTIVE_S
    latency_factor: float = 1.5
    accuracy_margin: float = 0.02
    model_alpha: float = 0.002
    class_margin: float = 0.10

    def __post_init__(self) -> None:
        if self.min_requests < 1:
            raise ValueError(f"min_requests must be at least 1, not {self.min_requests}")
        for name in (
            "error_alpha", "error_detect", "error_power", "accuracy_margin", "model_alpha",
            "class_margin",
        ):  # fmt: skip
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must be within (0, 1), not {getattr(self, name)}")
        if self.latency_objective_s <= 0 or self.latency_factor < 1:
            raise ValueError("the latency objective must be > 0 and the factor at least 1")


@dataclass(frozen=True)
class Gate:
    """One gate's outcome, and the figures behind it as one short phrase."""

    name: str
    outcome: Outcome
    detail: str

    def __str__(self) -> str:
        return f"{self.name} {self.outcome.value} ({self.detail})"


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:.0f} ms"


def needed(stable: Figures, canary: Figures, t: Thresholds) -> int:
    """The canary requests this step needs (see ``traffic``), from the measured share."""
    total = stable.requests + canary.requests
    share = min(max(canary.requests / total if total else 0.5, 0.01), 0.99)
    # Rounded, so a handful of answers are cached; a stable failing more than half its
    # requests is taken as failing half (a higher rate leaves no room to be worse).
    rate = min(round(stable.error_ratio, 3), 0.5)
    found = requests_needed(round(share, 2), rate, t.error_detect, t.error_alpha, t.error_power)
    return max(t.min_requests, found)


def traffic(stable: Figures, canary: Figures, t: Thresholds) -> Gate:
    """The canary answered enough requests; its detail also says its measured share of all
    the requests both versions answered (what the step's weight asked for)."""
    want = needed(stable, canary, t)
    outcome = Outcome.PASS if canary.requests >= want else Outcome.INCONCLUSIVE
    total = stable.requests + canary.requests
    share = f", {_pct(canary.requests / total)} of {total}" if total else ""
    return Gate("traffic", outcome, f"{canary.requests} of {want} requests{share}")


def errors(stable: Figures, canary: Figures, t: Thresholds, enough: bool) -> Gate:
    p = fisher_greater(canary.errors, canary.requests, stable.errors, stable.requests)
    detail = f"{_pct(canary.error_ratio)} vs {_pct(stable.error_ratio)}, p={p:.2g}"
    if p <= t.error_alpha:  # an exact test: as valid at a few requests as at many
        return Gate("errors", Outcome.FAIL, detail)
    return Gate("errors", Outcome.PASS if enough else Outcome.INCONCLUSIVE, detail)


def latency(stable: Figures, canary: Figures, t: Thresholds, enough: bool) -> Gate:
    p99, ref = canary.p99_s, stable.p99_s
    bound = max(t.latency_objective_s, t.latency_factor * ref if ref is not None else 0.0)
    detail = f"p99 {_ms(p99)}, at most {_ms(bound)}"
    if not enough or p99 is None:
        return Gate("latency", Outcome.INCONCLUSIVE, detail)
    return Gate("latency", Outcome.PASS if p99 <= bound else Outcome.FAIL, detail)


def accuracy(stable: Figures, canary: Figures, t: Thresholds) -> Gate:
    if stable.accuracy is None or canary.accuracy is None:
        return Gate("accuracy", Outcome.INCONCLUSIVE, "sample not scored")
    p = canary.paired
    if p is None:
        detail = f"{_pct(canary.accuracy)} vs {_pct(stable.accuracy)} - {_pct(t.accuracy_margin)}"
        ok = canary.accuracy >= stable.accuracy - t.accuracy_margin
        return Gate("accuracy", Outcome.PASS if ok else Outcome.FAIL, detail)
    total = worse_p(p.stable_only, p.canary_only)
    detail = (
        f"{_pct(canary.accuracy)} vs {_pct(stable.accuracy)} on {p.images}: "
        f"{p.stable_only} lost, {p.canary_only} gained, p={total:.2g}"
    )
    worst = max(range(len(p.per_class)), key=p.class_drop)
    if p.class_drop(worst) > 0:
        detail += f"; class {worst} recall -{p.class_drop(worst) * 100:.1f} pts"
    if total <= t.model_alpha:
        return Gate("accuracy", Outcome.FAIL, detail)
    for k, (_, lost, gained) in enumerate(p.per_class):
        if p.class_drop(k) > t.class_margin and worse_p(lost, gained) <= t.model_alpha:
            return Gate("accuracy", Outcome.FAIL, detail)
    return Gate("accuracy", Outcome.PASS, detail)


def judge(stable: Figures, canary: Figures, t: Thresholds) -> tuple[Gate, ...]:
    """Every gate, in the order they are printed."""
    count = traffic(stable, canary, t)
    enough = count.outcome is Outcome.PASS
    gates = (
        count,
        errors(stable, canary, t, enough),
        latency(stable, canary, t, enough),
        accuracy(stable, canary, t),
    )
    return gates + ((Gate("server", Outcome.FAIL, canary.down),) if canary.down else ())


def overall(gates: tuple[Gate, ...]) -> Outcome:
    """Fail if any gate fails, else Inconclusive if any is, else Pass."""
    outcomes = {g.outcome for g in gates}
    for worst in (Outcome.FAIL, Outcome.INCONCLUSIVE):
        if worst in outcomes:
            return worst
    return Outcome.PASS
