"""``python -m integration.canary_faults``: a slow and an erroring version on the run's
cluster, under load, after ``integration.canary_check``.

Each is the serving version itself, wrapped as tests/support/faulty_versions.py wraps a
model (a bad version built in the tests, never a switch in the product), so that its
answers are the stable's and only its fault tells them apart:

- ``slow``: ``slow_sometimes``, a few hundred ms of CPU on 5% of its calls;
- ``erroring``: ``rejects_image``, its graph refuses the load test's image (a 4xx of the
  version's own making, where a server once blamed the client).

Built here from the serving SavedModel copied off the volume, put in as candidate ``cnn``
(its params kept), and released by ``invoke deploy --canary --force`` while Locust runs.
Each must be rolled back (exit 1) on its own gate in the shadow phase, so that the load test
has no failed request; its pod gone; a ``CanaryRolledBack`` Event. And the stable must not
pay: its p99 over each of the analysis' intervals (recorded with the rejected version, read
from Prometheus) within :data:`STABLE_P99_TOLERANCE` of its baseline, the same measure over
the same load just before the deploy (:data:`BASELINE_REQUESTS`).

Run by ``nox -s integration -- ... --with-monitoring`` (it needs Prometheus).
"""

from __future__ import annotations

import base64
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from invoke import Exit

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from integration.canary_check import canary_pod_left, events, invoke, load_summary, start_load
from integration.kind_run import workdir
from ml import contract

#: The stable's p99 during the canary, as a share of its baseline: the issue's bound.
STABLE_P99_TOLERANCE = 0.20
#: The baseline: the stable's p99 over this many requests of the load, just before.
BASELINE_REQUESTS = 3000
BASELINE_TIMEOUT_S = 240.0
# The baseline, then the selection, the canary's pod, the labelled sample and a shadow
# phase of 30 s passes until a gate fails (rolled back there), with a margin.
LOAD_S = 420
DEPLOY = ["deploy", "--canary", "--force", "--canary-steps", "20", "--canary-interval", "30"]
COPY_TIMEOUT_S = 300.0
ROLLED_BACK = re.compile(r"version (\d+) was rolled back")


def faults() -> dict[str, tuple[str, Callable[[Any, Any, Path], Path]]]:
    """fault -> (the gate it must fail, how to build it from (model, image, path))."""
    from tests.support import faulty_versions as fv

    return {
        "slow": ("latency", lambda model, image, path: fv.slow_sometimes(model, path)),
        "erroring": ("errors", fv.rejects_image),
    }


def cluster() -> tuple[Any, Any]:
    """The run's cluster as the tasks see it (its settings from INVOKE_*): (context, settings)."""
    from invoke import Config, Context

    from tasks import ns
    from tasks.chooser import runtime

    config = Config()
    config.load_collection(ns.configuration())
    config.load_shell_env()
    cx = runtime(Context(config), "auto").cx
    return cx, cx.settings()


def sample_image() -> Any:
    """The load test's image ([28, 28, 1] in [0, 1]), from the request `up` wrote."""
    from ml.data.preprocess import decode_image

    body = json.loads((workdir() / contract.SAMPLE_REQUEST).read_text())
    return decode_image(base64.b64decode(body["instances"][0]["b64"])).numpy()


def build(fault: str, here: Path, cx: Any, s: Any) -> int:
    """Candidate ``cnn`` on the volume replaced by ``fault`` of the serving version; that
    version's number."""
    import tensorflow as tf

    from runtime.cluster.volume import Volume

    mount, vol = s.mount_path, Volume(cx, s)
    served, params = here / "serving", here / "params.yaml"
    if not served.exists():
        vol.copy_out(
            [(contract.serving_dir(mount, s.service), served),
             (f"{contract.candidate_dir(mount, 'cnn')}/{contract.PARAMS_FILE}", params)],
            timeout=COPY_TIMEOUT_S,
        )  # fmt: skip
    stable = max(int(p.name) for p in served.iterdir() if p.name.isdigit())
    model = tf.saved_model.load(str(served / str(stable))).model  # as it sees standardized input
    out = here / fault / "cnn"
    faults()[fault][1](model, sample_image(), out)
    (out / contract.PARAMS_FILE).write_text(params.read_text())
    vol.copy_in([out], contract.candidates_dir(mount), timeout=COPY_TIMEOUT_S, replace=True)
    return stable


def readings(cx: Any, s: Any) -> Any:
    """What the predictor pods counted so far, by (pod, version), as the analysis reads it."""
    from k8s.monitoring import prometheus
    from ml.contract import serving_metrics as cm
    from runtime.canary.cluster import totals

    ref = prometheus.ref(s)
    if ref is None:
        raise DistmlError("no Prometheus to read the stable's latency from (--with-monitoring)")

    def query(promql: str) -> Any:
        return prometheus.instant(cx.kube, ref, promql, kubectl=cx.provider.kubectl)

    return totals(
        query(cm.version_requests(s.namespace, s.service)),
        query(cm.version_latency_buckets(s.namespace, s.service)),
    )


def baseline_p99(cx: Any, s: Any, stable: int) -> float:
    """The stable's p99 over the next :data:`BASELINE_REQUESTS` of the running load."""
    from k8s.monitoring.prometheus import PrometheusError
    from runtime.canary.cluster import counted_since

    start = readings(cx, s)

    def judge(now: Any) -> Done | Pending:
        counted = counted_since(start, now, stable)
        if counted.total >= BASELINE_REQUESTS and counted.quantile(0.99) is not None:
            return Done(counted.quantile(0.99))
        return Pending(f"{int(counted.total)} of {BASELINE_REQUESTS} requests")

    verdict = poll(
        lambda: readings(cx, s), judge, timeout=BASELINE_TIMEOUT_S, interval=5.0,
        retry_on=(PrometheusError,), what="the stable's baseline",
        on_change=lambda line: print(f"  baseline: {line}", flush=True),
    )  # fmt: skip
    if not isinstance(verdict, Done):
        raise DistmlError(f"no baseline for the stable's p99: {verdict}")
    return float(verdict.value)


def rejected_record(cx: Any, s: Any, version: int, here: Path) -> dict:
    """The analysis kept with a rejected version (its publish.json's ``rejected``)."""
    from runtime.cluster.volume import Volume

    remote = f"{contract.rejected_dir(s.mount_path, s.service)}/{version}/{contract.PUBLISH_FILE}"
    local = here / f"rejected-{version}.json"
    Volume(cx, s).copy_out([(remote, local)], timeout=COPY_TIMEOUT_S)
    return json.loads(local.read_text())["rejected"]


def stable_problems(intervals: list[dict], baseline: float) -> list[str]:
    """Each interval whose stable p99 is beyond the tolerance of ``baseline``."""
    bound = baseline * (1 + STABLE_P99_TOLERANCE)
    measured = [i["stable"]["p99_s"] for i in intervals if (i.get("stable") or {}).get("p99_s")]
    if not measured:
        return ["no interval measured the stable's p99"]
    return [
        f"the stable's p99 was {p * 1000:.1f} ms in an interval: more than "
        f"{STABLE_P99_TOLERANCE:.0%} over its baseline of {baseline * 1000:.1f} ms"
        for p in measured
        if p > bound
    ]


def one(fault: str, here: Path, cx: Any, s: Any) -> list[str]:
    """``fault`` released under load: what went wrong (nothing: it passed)."""
    gate = faults()[fault][0]
    stable = build(fault, here, cx, s)
    before = len(events("CanaryRolledBack"))
    load, log = start_load(LOAD_S)
    try:
        baseline = baseline_p99(cx, s, stable)
        print(f"canary faults: {fault}: the stable's baseline p99 {baseline * 1000:.1f} ms")
        done = invoke(*DEPLOY)
    finally:
        summary = load_summary(load, log, LOAD_S)
    problems = [] if done.returncode == 1 else [f"deploy --canary exited {done.returncode}"]
    rolled = ROLLED_BACK.search(done.stdout)
    if f"{gate} fail" not in done.stdout or not rolled:
        return [*problems, f"no rollback on the {gate} gate said"]
    intervals = rejected_record(cx, s, int(rolled[1]), here)["intervals"]
    if not all(i.get("shadow") for i in intervals):
        problems.append("it was judged after users got its answers (not in the shadow phase)")
    if summary.get("failures"):
        problems.append(f"the load test had {summary['failures']} failed requests")
    problems += stable_problems(intervals, baseline)
    if len(events("CanaryRolledBack")) <= before:
        problems.append("no new CanaryRolledBack Event on the InferenceService")
    problems += canary_pod_left()
    stable_p99 = [i["stable"]["p99_s"] for i in intervals if i.get("stable")]
    canary_p99 = [i["canary"]["p99_s"] for i in intervals if i.get("canary")]
    print(f"canary faults: {fault}: stable p99 {stable_p99} s (baseline {baseline:.4f} s), "
          f"canary p99 {canary_p99} s, load {summary.get('requests')} requests")  # fmt: skip
    return [f"{fault} version: {p}" for p in problems]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    asked = args or list(faults())
    if not set(asked) <= set(faults()):
        print(f"usage: python -m integration.canary_faults [{' | '.join(faults())}]...",
              file=sys.stderr)  # fmt: skip
        return 2
    started, problems = time.monotonic(), []
    try:
        cx, s = cluster()
        with tempfile.TemporaryDirectory(prefix="distml-canary-faults-") as tmp:
            for fault in asked:
                problems += one(fault, Path(tmp), cx, s)
    except (DistmlError, Exit, OSError, ValueError, KeyError) as e:
        problems.append(f"{type(e).__name__}: {e}")
    for p in problems:
        print(f"canary faults: FAILED: {p}", file=sys.stderr)
    if not problems:
        print(f"canary faults: passed in {time.monotonic() - started:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
