"""`invoke train` / `train-all` on a cluster: one TFJob per model, submitted in waves that
fit the node, watched with a live line per job, then each candidate's metrics copied off
the volume for the accuracy table and the training-curves chart."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.errors import DistmlError
from k8s import manifests
from k8s.monitoring import prometheus, scrape
from k8s.providers.settings import Settings
from k8s.waits.cluster_poll import WaitError
from k8s.waits.tfjobs import TFJobRow, wait_tfjobs
from ml.contract import metrics_path
from ml.contract.records import read_metrics
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.cluster.submit import jobs_that_fit, replace_tfjob
from runtime.cluster.up import ingest
from runtime.cluster.volume import Volume
from runtime.output.display import ChangedRows
from runtime.output.tables import one_line, table
from runtime.requests import TrainRequest

WAIT_GRACE_S = 120  # beyond the jobs' own deadline, for the operator to mark them
COPY_OUT_TIMEOUT_S = 180
#: Resubmissions of one job after the operator failed it for a deleted worker pod (not
#: counted against --max-restarts; bounded, as something may keep deleting its pods).
MAX_RESUBMITS = 3


def job_row_line(r: TFJobRow) -> str:
    """A TFJob's live line: its state, its workers' counts and restarts."""
    return (
        f"{r.name:<22} {r.state:<10} workers: active {r.active}, "
        f"succeeded {r.succeeded}, failed {r.failed}; restarts {r.restarts}"
    )


def train(cx: ClusterContext, request: TrainRequest, deadline_s: int) -> int:
    state = cx.require_up()
    s = cx.settings(
        workers=request.workers,
        profile=request.profile,
        epochs=request.epochs,
        steps_per_epoch=request.steps_per_epoch,
        max_restarts=request.max_restarts,
        gpus_per_worker=request.gpus_per_worker,
        train_deadline_s=deadline_s,
    )
    s = scraped_every(cx, s)
    cx.check_image(state, s)
    cx.out("== dataset")
    ingest(cx, s, state.source_dir)
    jobs = [manifests.tfjob(s, m) for m in request.models]
    cx.out(f"== training {len(jobs)} TFJob(s) x {s.workers} worker(s), profile {request.profile}")
    for job in jobs:
        replace_tfjob(cx, job["metadata"]["name"])
    waves = _waves(cx, s, jobs, request.parallel)
    lines = ChangedRows(cx.out, cx.clock, job_row_line)
    results = _run_waves(cx, waves, s, lines)
    if cx.dry:
        return 0
    cx.out(f"training finished in {lines.elapsed():.0f} s")
    return _finish(cx, s, request.models, results)


def scraped_every(cx: ClusterContext, s: Settings) -> Settings:
    """``s`` with how often a user's Prometheus scrapes (``k8s.monitoring.scrape``): the
    workers keep their final figures up for three of its scrapes
    (``k8s.manifests.pods.metrics_linger_s``). distml's own: as it is."""
    ref = prometheus.ref(s)
    if ref is None or ref.own or cx.dry:
        return s
    try:
        found = scrape.interval(cx.kube, ref, s.namespace, s.service, kubectl=cx.provider.kubectl)
    except prometheus.PrometheusError as e:
        every = scrape.PROMETHEUS_DEFAULT_S
        cx.out(
            f"note: how often Prometheus {ref} scrapes could not be read ({one_line(str(e))}); "
            f"the workers keep their final figures up for three scrapes of {every:g} s"
        )
        return replace(s, scrape_interval_s=every)
    return replace(s, scrape_interval_s=found.seconds)


def _waves(
    cx: ClusterContext, s: Settings, jobs: list[dict[str, Any]], parallel: int | None
) -> list[list[dict[str, Any]]]:
    """The jobs in groups of ``parallel`` (default: as many as the node holds)."""
    if parallel is None:
        parallel = jobs_that_fit(cx, s, len(jobs))
    waves = [jobs[i : i + parallel] for i in range(0, len(jobs), parallel)]
    if len(waves) > 1:
        cx.out(f"{parallel} job(s) at a time, {len(waves)} waves")
    return waves


def _run_waves(
    cx: ClusterContext,
    waves: list[list[dict[str, Any]]],
    s: Settings,
    lines: ChangedRows,
) -> dict[str, str]:
    """Submit each wave's jobs together (they run in parallel) and wait for them;
    the final state of each job by name."""
    results: dict[str, str] = {}
    resubmit = _resubmitter(cx, {j["metadata"]["name"]: j for wave in waves for j in wave})
    for wave in waves:
        for job in wave:
            cx.apply(job)
            cx.out(f"TFJob {job['metadata']['name']}: submitted")
        if cx.dry:
            continue
        try:
            results |= wait_tfjobs(
                cx.kube,
                cx.namespace,
                [j["metadata"]["name"] for j in wave],
                timeout=s.train_deadline_s + WAIT_GRACE_S,
                max_restarts=s.max_restarts,
                clock=cx.clock,
                out=cx.out,
                on_update=lines,
                on_deleted_pod=resubmit,
                kubectl=cx.provider.kubectl,
            )
        except WaitError as e:
            raise ClusterError(f"training did not finish: {e}") from e
    return results


def _resubmitter(cx: ClusterContext, jobs: dict[str, dict[str, Any]]) -> Callable[[str], bool]:
    """What to do when the operator fails a job for a deleted worker pod (training-operator
    v1.9 counts a Running pod being deleted as a failed replica and fails the whole job):
    delete it and submit it again, up to ``MAX_RESUBMITS`` times; it resumes from its last
    saved step (BackupAndRestore on the volume)."""
    done: Counter[str] = Counter()

    def resubmit(name: str) -> bool:
        if done[name] >= MAX_RESUBMITS:
            cx.out(
                f"TFJob {name}: a worker pod was deleted again; resubmitted {MAX_RESUBMITS} "
                "times already, so it stays failed (is a node being drained?)"
            )
            return False
        done[name] += 1
        cx.out(
            f"TFJob {name}: a running worker pod was deleted (a drain, an eviction, "
            "`kubectl delete pod`) and the training operator failed the whole job for it; "
            f"resubmitting it ({done[name]}/{MAX_RESUBMITS}): it resumes from its last "
            "saved step"
        )
        replace_tfjob(cx, name)
        cx.apply(jobs[name])
        return True

    return resubmit


def _finish(
    cx: ClusterContext,
    s: Settings,
    models: Sequence[str],
    results: dict[str, str],
) -> int:
    """Show the results, say what to run next."""
    # wait_tfjobs printed each failed job's report (conditions, events, log tails).
    done = [m for m in models if results.get(manifests.tfjob_name(m)) == "Succeeded"]
    failed = [m for m in models if m not in done]
    if done:
        fetch_training_results(cx, s, done)
    if failed:
        cx.out(
            f"next: fix the cause above, then `invoke train --model-type {failed[0]}` "
            "(it resumes from its last saved step)"
        )
        return 1
    cx.out("next: invoke deploy")
    return 0


def fetch_training_results(cx: ClusterContext, s: Settings, models: Sequence[str]) -> None:
    """Copy each candidate's metrics.json off the PVC (through the loader pod) for the
    accuracy table and the training-curves chart. Best effort: training succeeded."""
    local = cx.wd.root / "cluster-volume"
    copies = [(metrics_path(s.mount_path, m), Path(metrics_path(local, m))) for m in models]
    try:
        Volume(cx, s).copy_out(copies, timeout=COPY_OUT_TIMEOUT_S)
    except (DistmlError, OSError) as e:
        cx.out(f"note: could not copy the training metrics off the volume ({e})")
        return
    rows = [("model", "val acc (last epoch)", "epochs")]
    for model in models:
        metrics = read_metrics(metrics_path(local, model))
        if metrics is not None:
            acc = metrics.val_accuracy
            rows.append((model, "-" if acc is None else f"{acc:.4f}", str(metrics.epochs)))
    for line in table(rows).splitlines():
        cx.out(line)
    from runtime.output.charts import training_curves

    chart = training_curves(local, cx.wd.reports / "training-curves.png")
    if chart:
        cx.out(f"training curves: {chart}")
