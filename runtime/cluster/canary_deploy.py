"""``invoke deploy --canary`` and ``invoke canary`` on a cluster.

The selection Job publishes the new version into the service's canary folder; the
canary's own pod serves it (``runtime/canary/cluster_pod.py``), and the predictor pods'
servers forward it its share of each request stream, by weight (``runtime/canary/
cluster.py`` says why that, and not replicas), after a shadow phase of mirrored copies;
the analysis runs here, on the laptop, reading Prometheus, and ends by a Job that promotes
or rejects the version in the volume, and the canary's pod is deleted. Each line the
analysis says is also an Event on the InferenceService. The InferenceService, its
autoscaler and its replicas are never changed: a rollback leaves the stable exactly as it
was.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any

from common.poll import Done, Pending, poll
from k8s import manifests
from k8s.client.kube import KubeError
from k8s.client.objects import ISVC_API, is_true
from k8s.client.ownership import stamp
from k8s.manifests import canary_jobs as jobs
from k8s.manifests.names import RUNTIME_NAME
from k8s.monitoring import prometheus, scrape
from k8s.monitoring.prometheus import PrometheusError, PrometheusRef
from k8s.providers.settings import Settings
from ml import contract
from ml.contract import serving_metrics

# canary_cluster as a module, not its names: it imports runtime.cluster (run_job), whose
# package imports this module, so either may be imported first.
from runtime.canary import cluster as canary_cluster
from runtime.canary import cluster_pod, live
from runtime.canary.analysis import Result, analyse
from runtime.canary.gates import Thresholds
from runtime.canary.policy import Action, Decision, Policy
from runtime.cluster.apply import run_job
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.requests import DeployRequest

SELECTION_TIMEOUT_S = 1200
ACT_TIMEOUT_S = 600.0  # `invoke canary` waits this long for the running deploy to end it
#: DeployRequest fields a canary leaves as the serving deployment has them.
SERVING_FLAGS = {
    "target": "--target", "min_replicas": "--min-replicas", "max_replicas": "--max-replicas",
    "container_concurrency": "--container-concurrency", "scale_metric": "--scale-metric",
}  # fmt: skip


@dataclass(frozen=True)
class Prepared:
    """What a canary is judged with, checked before anything runs."""

    s: Settings
    isvc: dict[str, Any]
    ref: PrometheusRef
    stable: int
    every: float  # Prometheus's scrape interval, seconds
    policy: Policy


def prepare(cx: ClusterContext, request: DeployRequest) -> Prepared:
    """Every check a canary makes before it publishes anything: the flags, the serving
    InferenceService (ours, Ready, our predictor), Prometheus, no canary running, one
    version served by every pod."""
    state = cx.require_up()
    _refuse_flags(request)
    s = cx.settings()
    cx.check_image(state, s)
    isvc = _serving(cx, s)
    ref = _prometheus(s)
    if (pid := live.running_pid(live.facts(cx.wd, s.service))) is not None:
        raise ClusterError(
            f"a canary is running (`invoke deploy --canary`, pid {pid}); let it finish, or "
            "end it with `invoke canary --promote` or `--abort`"
        )
    stable = _stable(cx, s, ref)
    every = _scrape_s(cx, s, ref)
    return Prepared(s, isvc, ref, stable, every, _policy(cx, request, every))


def deploy_canary(cx: ClusterContext, request: DeployRequest) -> int:
    p = prepare(cx, request)
    cx.out("== selection (canary)")
    job = manifests.selection_job(
        p.s, min_accuracy=request.min_accuracy, force=request.force, canary=True
    )
    logs = run_job(cx, job, SELECTION_TIMEOUT_S, "selection")
    for line in logs.splitlines()[-24:]:
        cx.out(f"  select: {line}")
    if cx.dry:
        return 0
    version = published_canary(logs, p.s)
    if version is None:
        cx.out(f"no canary: version {p.stable} keeps serving (the selection said why)")
        return 0
    return judge(cx, p, version)


def none_loaded(p: Prepared) -> str:
    """What :func:`loaded_canary`'s None means, said."""
    return (
        f"no canary: version {p.stable} keeps serving; no predictor pod loaded one within "
        f"{canary_cluster.APPLY_TIMEOUT_S:.0f} s: the select step published none (its log "
        "says why), or the pods could not load it (their logs say why; then `invoke canary "
        "--abort` sets it aside)"
    )


def loaded_canary(cx: ClusterContext, p: Prepared) -> int | None:
    """The canary version every predictor pod has loaded (at weight 0: its server finds it
    in the folder by itself), or None when no pod shows one within APPLY_TIMEOUT_S (none
    was published, or no pod could load it). For a canary published by something else than
    this process: a Workflow's selection step. ClusterError when some pods hold it and
    others do not: it takes their share of the requests unjudged."""
    probe = canary_cluster.ClusterCanary(
        cx, p.s, ref=p.ref, stable=p.stable, version=0, address="", note=cx.out
    )
    holding: dict[str, set[str]] = {}  # pod -> canary versions, at the last look

    def judge_pods(pods: canary_cluster.Pods) -> Any:
        holding.clear()
        holding.update({pod: set(pods.weights.get(pod) or {}) for pod in pods.up})
        seen = set().union(*holding.values())
        everywhere = bool(pods.up) and all(holding.values())
        return Done(seen) if everywhere and len(seen) == 1 else Pending(f"canary {seen}")

    verdict = poll(
        probe.pods, judge_pods, timeout=canary_cluster.APPLY_TIMEOUT_S, interval=2.0,
        clock=cx.clock, retry_on=(PrometheusError,), retry_for=30.0,
    )  # fmt: skip
    if isinstance(verdict, Done):
        return int(next(iter(verdict.value)))
    if any(holding.values()):
        held = "; ".join(
            f"{pod}: {', '.join(sorted(v)) or 'none'}" for pod, v in sorted(holding.items())
        )
        raise ClusterError(
            f"the predictor pods do not all hold one canary after "
            f"{canary_cluster.APPLY_TIMEOUT_S:.0f} s ({held}): the others could not load it "
            "(their logs say why); `invoke canary --abort` sets it aside"
        )
    return None


def judge(cx: ClusterContext, p: Prepared, version: int) -> int:
    """Run the analysis of canary ``version`` to its end; 0 promoted, 1 rolled back."""
    s, isvc, ref, policy, stable = p.s, p.isvc, p.ref, p.policy, p.stable
    address = ((isvc.get("status") or {}).get("address") or {}).get("url") or (
        f"http://{s.service}-predictor.{s.namespace}.svc.cluster.local"
    )
    events = Events(cx, s, isvc)
    canary = canary_cluster.ClusterCanary(
        cx, s, ref=ref, stable=stable, version=version, address=address,
        note=cx.out,
    )  # fmt: skip
    live.control_path(cx.wd).unlink(missing_ok=True)  # a word left for an earlier canary
    report = live.Live(
        live.report_path(cx.wd, s.service), version=version, stable=stable, pid=os.getpid()
    )

    def say(line: str) -> None:
        report.say(cx.out, line)
        events.record(line)

    shadow = (
        f"a shadow phase of {policy.shadow_interval_s:g} s, then "
        if policy.shadow_interval_s else ""
    )  # fmt: skip
    say(
        f"canary: version {version} beside version {stable}, in a pod of its own, "
        f"{shadow}steps {', '.join(f'{w}%' for w in policy.steps)}, judged every "
        f"{policy.interval_s:g} s from Prometheus {ref} ({policy.count} passes a step); "
        "Ctrl-C rolls it back"
    )
    try:
        with _own_pod(cx, s, canary) as canary.seen:
            result = analyse(
                policy, Thresholds(), canary, canary.measure, lambda: live.take_word(cx.wd),
                cx.clock, say,
            )  # fmt: skip
        where = f"{contract.rejected_dir(s.mount_path, s.service)}/{version}"
        return live.outcome(
            result, version, stable, f"{where}/{contract.PUBLISH_FILE} in the volume", say
        )
    finally:
        report.end()


@contextmanager
def _own_pod(
    cx: ClusterContext, s: Settings, canary: canary_cluster.ClusterCanary
) -> Iterator[cluster_pod.Seen]:
    """The canary's own pod for the time of the analysis; one that never gets Ready rolls
    the canary back, with the reason in its record."""
    with ExitStack() as stack:
        try:
            seen = stack.enter_context(cluster_pod.running(cx, s))
        except ClusterError as e:
            canary.rollback(Result(Decision(Action.ROLLBACK, 0, f"its pod did not start: {e}")))
            raise
        yield seen


def published_canary(logs: str, s: Settings) -> int | None:
    """The canary version the selection Job published, from its log (None: it published
    none, and said why)."""
    where = re.escape(contract.canary_dir(s.mount_path, s.service))
    found = re.findall(rf"^published \S+ as {where}/([0-9]+)$", logs, re.MULTILINE)
    return int(found[-1]) if found else None


def _refuse_flags(request: DeployRequest) -> None:
    given = [flag for name, flag in SERVING_FLAGS.items() if getattr(request, name) is not None]
    if request.request_logger:
        given.append("--request-logger")
    if given:
        raise ClusterError(
            f"{given[0]} changes the serving deployment, and a canary leaves it as it is "
            "(the stable is never touched): deploy with it first, then with --canary alone"
        )


def _serving(cx: ClusterContext, s: Settings) -> dict[str, Any]:
    """The InferenceService the canary joins: there, this work dir's, Ready, run by our
    server with canary support (a ServingRuntime from before it has no canary folder)."""
    isvc = cx.get(ISVC_API, "InferenceService", s.service)
    if isvc is None:
        if cx.dry:
            return {}
        raise ClusterError(
            f"no InferenceService {s.service}: a canary is judged against the version serving "
            "now; run `invoke deploy` first"
        )
    cx.require_ours(isvc, f"deploy --canary: InferenceService {s.service}")
    model = ((isvc.get("spec") or {}).get("predictor") or {}).get("model") or {}
    if model.get("runtime") != RUNTIME_NAME:
        raise ClusterError(
            "a canary needs distml's own predictor (it splits requests between two versions); "
            f"{s.service} runs TF Serving: `invoke deploy --predictor kserve` first"
        )
    if not cx.dry and not is_true(isvc, "Ready"):
        raise ClusterError(f"InferenceService {s.service} is not Ready: `invoke status` says why")
    runtime = cx.get("serving.kserve.io/v1alpha1", "ServingRuntime", RUNTIME_NAME) or {}
    args = [a for c in (runtime.get("spec") or {}).get("containers", []) for a in c.get("args", [])]
    if not cx.dry and "--canary-elsewhere" not in args:
        raise ClusterError(
            f"the predictor was deployed by an older distml, without a canary's own pods; run "
            f"`invoke deploy` once (it updates ServingRuntime {RUNTIME_NAME}), then --canary"
        )
    return isvc


def _prometheus(s: Settings) -> PrometheusRef:
    ref = prometheus.ref(s)
    if ref is None:
        raise ClusterError(
            "a canary on a cluster is judged from Prometheus, and there is none: `invoke up "
            f"--with-monitoring`, or name yours in {prometheus.SETTING}"
        )
    return ref


def _stable(cx: ClusterContext, s: Settings, ref: PrometheusRef) -> int:
    """The one version every predictor pod serves now (Prometheus's view)."""
    if cx.dry:
        return 0
    probe = canary_cluster.ClusterCanary(
        cx, s, ref=ref, stable=0, version=0, address="", note=cx.out
    )  # only its view of the pods
    try:
        pods: canary_cluster.Pods = probe.pods()
    except PrometheusError as e:
        raise ClusterError(f"the serving version cannot be read: {e}") from e
    # A pod still loading (scaled out just now) serves nothing yet ("") and gets no traffic.
    served = {v for p in pods.up if (v := pods.stable.get(p))}
    if len(served) != 1:
        seen = ", ".join(f"{p}: {pods.stable.get(p, '?')}" for p in sorted(pods.up))
        raise ClusterError(
            f"the predictor pods do not all serve one version yet ({seen or 'none up'}; "
            f"Prometheus {ref}); wait for them, then run this again"
        )
    (only,) = served
    if pods.weights and any(pods.weights.values()):
        raise ClusterError(
            "a canary is loaded in the predictor pods with no `deploy --canary` running here "
            "(one was killed?): end it with `invoke canary --abort` or `--promote` first"
        )
    return int(str(only))


def _scrape_s(cx: ClusterContext, s: Settings, ref: PrometheusRef) -> float:
    if cx.dry:
        return float(serving_metrics.SCRAPE_INTERVAL_S)
    try:
        found = scrape.interval(cx.kube, ref, s.namespace, s.service, kubectl=cx.provider.kubectl)
    except PrometheusError as e:
        raise ClusterError(f"how often Prometheus scrapes the predictor cannot be read: {e}") from e
    return found.seconds


def _policy(cx: ClusterContext, request: DeployRequest, every: float) -> Policy:
    """The canary's policy; its interval at least four scrapes (an interval's counts are
    the scrapes' at its two ends: shorter, and one late scrape is much of it), said when
    that lengthens it."""
    policy = request.canary_policy()
    least = 4 * every
    if policy.interval_s < least:
        cx.out(_lengthened("--canary-interval", policy.interval_s, every))
        policy = replace(policy, interval_s=least)
    if policy.shadow_interval_s is not None and policy.shadow_interval_s < least:
        cx.out(_lengthened("--shadow-interval", policy.shadow_interval_s, every))
        policy = replace(policy, shadow_interval_s=least)
    return policy


def _lengthened(flag: str, given: float, every: float) -> str:
    return (
        f"note: {flag} {given:g} is shorter than four of Prometheus's scrapes (every "
        f"{every:g} s): judging every {4 * every:g} s"
    )


class Events:
    """Each line of the analysis, an Event on the InferenceService (a refusal to create
    one is said once; the canary goes on)."""

    def __init__(self, cx: ClusterContext, s: Settings, isvc: dict[str, Any]) -> None:
        self.cx, self.s, self.isvc, self.failed = cx, s, isvc, False

    def record(self, line: str) -> None:
        if self.failed or not self.isvc:
            return
        warning = (
            line.startswith(("error:", "canary stopped", "the promotion", "the rollback"))
            or "-> rollback" in line
        )
        reason = (  # stopped (Ctrl-C, SIGTERM, an error): rolled back, then re-raised
            "CanaryRolledBack"
            if line.startswith(("error:", "canary stopped"))
            else ("CanaryPromoted" if line.startswith("promoted:") else "CanaryAnalysis")
        )
        try:
            event = jobs.event(self.s, self.isvc, reason, line, warning=warning)
            self.cx.kube.create(stamp(event, self.cx.instance))
        except KubeError as e:
            self.failed = True
            self.cx.out(f"note: no Events on InferenceService {self.s.service} ({e})")


# --------------------------------------------------------------------------- invoke canary


def control(cx: ClusterContext, word: str) -> int:
    """``invoke canary --promote|--abort``: tell the running deploy, or with none running
    end the canary in the volume by a Job, a record saying so."""
    cx.require_up()
    s = cx.settings()
    facts = live.facts(cx.wd, s.service)
    pid = live.running_pid(facts)
    if pid is not None:
        return _tell(cx, word, pid, s.service)
    record = json.dumps(live.ended_record(word), separators=(",", ":"))
    cx.out(f"no `deploy --canary` runs here: {word} the canary in the volume by a Job")
    try:
        logs = run_job(cx, jobs.end_job(s, promote=word == "promote", record_json=record),
                       300, f"{word} the canary")  # fmt: skip
    except ClusterError as e:
        raise ClusterError(f"{e}\nthe canary, if there was one, is still in place") from e
    for line in logs.splitlines()[-4:]:
        cx.out(f"  {line}")
    cluster_pod.stop(cx, s)  # the canary's own pod, left by a deploy killed outright
    cx.out("the predictor pods follow at their next poll of the volume (every 2 s)")
    return 0


def _tell(cx: ClusterContext, word: str, pid: int, service: str) -> int:
    live.control_path(cx.wd).write_text(word + "\n")
    cx.out(f"told the running `deploy --canary` (pid {pid}) to {word}; waiting for it")
    verdict = poll(
        lambda: live.facts(cx.wd, service),
        lambda f: Pending() if f.get("running") else Done(f),
        timeout=ACT_TIMEOUT_S, interval=0.5, clock=cx.clock,
    )  # fmt: skip
    if not isinstance(verdict, Done):
        raise ClusterError(
            f"the running `deploy --canary` (pid {pid}) did not end within "
            f"{ACT_TIMEOUT_S:.0f} s; see its output"
        )
    cx.out(str(verdict.value.get("last", "")))
    return 0
