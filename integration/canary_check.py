"""``python -m integration.canary_check``: canary releases on the run's cluster, under load.

After the lifecycle (version N serves), as a user would:

1. **A good version.** A Locust load test runs while ``invoke deploy --canary --force
   --canary-steps 20,50 --canary-interval 30`` releases the best candidate, in a pod of its
   own, after a shadow phase: it must be promoted; the shadow phase's figures shown (its
   mirrored copies and their agreement with the stable); every interval's measured share
   (each version's requests, counted by Prometheus) within :data:`SHARE_TOLERANCE` of its
   step's weight; the load test with no failed request; a ``CanaryPromoted`` Event on the
   InferenceService; ``status`` showing it; the canary's pod gone.
2. **A bad version.** Every model trained for one step (``train-all --epochs 1
   --steps-per-epoch 1 --workers 1``), let past the selection's floor with ``--force``:
   under load, the accuracy gate must fail and the canary be rolled back by itself (exit
   1); the load test with no failed request (the stable answered throughout; the canary's
   answers are wrong, not errors); a ``CanaryRolledBack`` Event.

``--workflow`` (the run with Argo): instead of both, a version trained longer than the
serving one, by ``invoke workflow --watch --canary``: once the Workflow has published it
(its output says so), the load starts, and the canary must be promoted as the good one is.

Run by ``nox -s integration -- ... --with-monitoring`` (it needs Prometheus).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from integration.kind_run import NAMESPACE, context, workdir
from k8s.client.kube import KubeError
from k8s.client.objects import ISVC_API, condition, format_condition, is_true
from ml.contract import DEFAULT_SERVICE

ROOT = Path(__file__).resolve().parents[1]
#: How far an interval's measured share may be from its step's weight, in points. Each pod
#: splits its own requests exactly (every fifth one at 20%); what is left is a request per
#: pod in flight at an interval's edge, well under a point at hundreds of requests.
SHARE_TOLERANCE = 2.0
GOOD = ["deploy", "--canary", "--force", "--canary-steps", "20,50", "--canary-interval", "30"]
# The canary's pod (Ready once its TensorFlow and version loaded), a shadow phase and two
# steps of two 30 s passes each, the selection and the Jobs between.
GOOD_LOAD_S = 480
# One worker each: right after the good version's load, KEDA holds the predictor's peak
# replicas for its cooldown (5 min), and a 2-worker job's second worker found no CPU on 2
# CPUs (train-all gave up after 300 s, as it says it does). The version is as bad either way.
TRAIN_BAD = ["train-all", "--epochs", "1", "--steps-per-epoch", "1", "--workers", "1"]
BAD = ["deploy", "--canary", "--force", "--canary-steps", "20", "--canary-interval", "30"]
BAD_LOAD_S = 300  # rolled back in its shadow phase, after its pod started
# Four times the serving version's training steps (kind_run.BUDGET), so that the selection
# publishes it without --force, which the Workflow's select step does not take.
WORKFLOW = [
    "workflow", "--watch", "--canary", "--epochs", "1", "--steps-per-epoch", "20",
    "--canary-steps", "20,50", "--canary-interval", "30",
]  # fmt: skip
#: What ``invoke workflow --canary`` says once the Workflow succeeded, before it judges.
JUDGING = "== canary: the Workflow's selection step published it"
# Before it: the InferenceService Ready. A Workflow serves with the HPA on CPU, up to 8
# replicas; after the alert fault, it scaled to 8 on 2 CPUs (5 Pending, so the Deployment
# lacked minimum availability) and comes back once its 5 min CPU initialization and 5 min
# stabilization windows have passed. A canary is refused until then, as it should be.
READY_WAIT_S = 1200
READY_POLL_S = 5.0
# From that line: the canary's pod, a shadow phase and four intervals, the weight, sample
# and end Jobs, with a margin (an interval left without load would be Inconclusive).
WORKFLOW_LOAD_S = 540
#: A shadow phase's line: its mirrored copies judged, and their agreement with the stable.
SHADOW_LINE = re.compile(
    r"^\[\d+\] shadow \d+%: traffic \w+ \(\d+ of \d+ requests.*agreement [0-9.]+% of "
    r"\d+ images",
    re.MULTILINE,
)
LINE = re.compile(
    r"^\[\d+\] canary (?P<weight>\d+)%: traffic \w+ \((?P<canary>\d+) of \d+ requests, "
    r"(?P<share>[0-9.]+)% of (?P<total>\d+)\)",
    re.MULTILINE,
)


def invoke(*args: str) -> subprocess.CompletedProcess:
    print(f"== canary check: invoke {' '.join(args)}", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    print(done.stdout, flush=True)
    return done


def shares(output: str) -> list[tuple[int, float, int]]:
    """Every interval's (weight asked, share measured, requests) in deploy's output."""
    return [(int(m["weight"]), float(m["share"]), int(m["total"])) for m in LINE.finditer(output)]


def share_problems(found: list[tuple[int, float, int]], weights: Sequence[int]) -> list[str]:
    """What is wrong with the measured shares: a step never measured, or one off its weight."""
    problems = [f"no interval measured at {w}%" for w in weights if w not in {f[0] for f in found}]
    problems += [
        f"an interval at {w}% measured {share}% of {total} requests (tolerance "
        f"{SHARE_TOLERANCE:g} points)"
        for w, share, total in found
        if abs(share - w) > SHARE_TOLERANCE
    ]
    return problems


def start_load(seconds: int) -> tuple[subprocess.Popen, Path]:
    """A Locust load test of ``seconds`` started: (its process, its log)."""
    log = workdir() / f"canary-load-{int(time.time())}.log"
    with open(log, "w") as out:
        load = subprocess.Popen(
            [sys.executable, "-m", "invoke", "loadtest", "--concurrency", "5",
             "--duration", f"{seconds}s"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    return load, log


def load_summary(load: subprocess.Popen, log: Path, seconds: int) -> dict:
    """The load test's summary once it has ended (printing its log's tail)."""
    load.wait(timeout=seconds + 300)
    print(f"-- the load test meanwhile (exit {load.returncode}):\n{log.read_text()[-1500:]}")
    return json.loads((workdir() / "reports" / "loadtest" / "summary.json").read_text())


def under_load(seconds: int, *task: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``invoke *task`` while a Locust load test runs; (its result, the load's summary)."""
    load, log = start_load(seconds)
    try:
        done = invoke(*task)
    finally:
        summary = load_summary(load, log, seconds)
    return done, summary


def loaded_when_judged(seconds: int, *task: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``invoke *task`` (``workflow --canary``), its output followed: a load test of
    ``seconds`` starts when it says it judges the canary; (its result, the load's summary,
    empty when it never said so)."""
    print(f"== canary check: invoke {' '.join(task)}", flush=True)
    return follow([sys.executable, "-m", "invoke", *task], seconds)


def follow(argv: list[str], seconds: int) -> tuple[subprocess.CompletedProcess, dict]:
    """:func:`loaded_when_judged` of any command."""
    proc = subprocess.Popen(  # unbuffered: the line must come when it is said
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    lines, load = [], None
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
        if load is None and line.startswith(JUDGING):
            load = start_load(seconds)
    done = subprocess.CompletedProcess(proc.args, proc.wait(), "".join(lines))
    return done, load_summary(*load, seconds) if load else {}


def wait_ready() -> list[str]:
    """Wait for the InferenceService to be Ready (saying so); the problem, if it is not."""
    from k8s.client.kube import ApiKube

    kube, started = ApiKube(context()), time.monotonic()

    def judge(isvc: dict | None) -> Done | Pending:
        return Done(isvc) if is_true(isvc, "Ready") else Pending(ready_says(isvc))

    verdict = poll(
        lambda: kube.get(ISVC_API, "InferenceService", DEFAULT_SERVICE, NAMESPACE), judge,
        timeout=READY_WAIT_S, interval=READY_POLL_S, retry_on=(KubeError,),
        on_change=lambda line: print(f"  isvc: {line}", flush=True), what="the InferenceService",
    )  # fmt: skip
    waited = time.monotonic() - started
    if isinstance(verdict, Done):
        print(f"canary check: InferenceService {DEFAULT_SERVICE} Ready after {waited:.0f} s")
        return []
    return [f"InferenceService {DEFAULT_SERVICE} not Ready after {waited:.0f} s: {verdict}"]


def ready_says(isvc: dict | None) -> str:
    """Why an InferenceService is not Ready, as its Ready condition says."""
    cond = condition(isvc, "Ready") if isvc else None
    return format_condition(cond) if cond else "no Ready condition yet"


def events(reason: str) -> list[str]:
    from k8s.client.kube import ApiKube

    found = ApiKube(context()).events(NAMESPACE, DEFAULT_SERVICE)
    return [str(e.get("message")) for e in found if e.get("reason") == reason]


def good(workflow: bool = False) -> list[str]:
    task = WORKFLOW if workflow else GOOD
    if workflow:
        done, summary = loaded_when_judged(WORKFLOW_LOAD_S, *task)
    else:
        done, summary = under_load(GOOD_LOAD_S, *task)
    problems = [] if done.returncode == 0 else [f"{task[0]} --canary exited {done.returncode}"]
    if not summary:
        problems.append("the canary was never judged: no load test ran")
    if not re.search(r"^promoted: version \d+ serves every request", done.stdout, re.MULTILINE):
        problems.append("no promotion said")
    measured = shares(done.stdout)
    problems += share_problems(measured, (20, 50))
    if not workflow and not SHADOW_LINE.search(done.stdout):
        problems.append("no shadow phase's figures shown (mirrored copies, agreement)")
    problems += canary_pod_left()
    if summary.get("failures"):
        problems.append(f"the load test had {summary['failures']} failed requests")
    if not events("CanaryPromoted"):
        problems.append("no CanaryPromoted Event on the InferenceService")
    if "last canary" not in invoke("status").stdout:
        problems.append("status shows no canary")
    print(f"canary check: good: shares {measured}, load {summary.get('requests')} requests")
    return problems


def canary_pod_left() -> list[str]:
    """The canary's own pod, if it outlived its canary."""
    from k8s.client.kube import ApiKube

    name = f"{DEFAULT_SERVICE}-canary"
    left = ApiKube(context()).get("v1", "Pod", name, NAMESPACE)
    return [f"pod {name} is left after the canary ended"] if left else []


def bad() -> list[str]:
    trained = invoke(*TRAIN_BAD)
    if trained.returncode != 0:
        return [f"train-all for one step exited {trained.returncode}"]
    done, summary = under_load(BAD_LOAD_S, *BAD)
    problems = [] if done.returncode == 1 else [f"deploy --canary exited {done.returncode}"]
    if "accuracy fail" not in done.stdout or "was rolled back" not in done.stdout:
        problems.append("no rollback on the accuracy gate said")
    if summary.get("failures"):
        problems.append(f"the load test had {summary['failures']} failed requests")
    if not events("CanaryRolledBack"):
        problems.append("no CanaryRolledBack Event on the InferenceService")
    problems += canary_pod_left()
    print(f"canary check: bad: load {summary.get('requests')} requests")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["--workflow"]):
        print("usage: python -m integration.canary_check [--workflow]", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        if args:
            problems = wait_ready() or good(workflow=True)
        else:
            problems = good()
            problems += [f"bad version: {p}" for p in bad()]
    except (DistmlError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        problems = [str(e)]
    if problems:
        for p in problems:
            print(f"canary check: FAILED: {p}", file=sys.stderr)
        return 1
    print(f"canary check: passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
