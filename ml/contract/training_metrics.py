"""The training workers' Prometheus metrics, and the PromQL that reads them: part of the pod
contract, as ``ml/contract/serving_metrics.py`` is for the model server. Every training worker
(``python -m ml train``) serves ``GET /metrics`` on :data:`METRICS_PORT` while it runs; the
names and labels here are what it writes (``ml/training/train_metrics.py``) and what `status`, the
dashboard's training row and the alerts read.

Every series carries ``job`` (the TFJob, ``train-<model>`` on a cluster; the local job's
name locally) as the label :data:`JOB_LABEL` (``tfjob``: Prometheus keeps ``job`` for its
scrape job), ``model`` (the model type) and ``replica`` (the worker's index). The
training operator's own counters (Kubeflow training-operator v1.9.0,
``pkg/common/metrics.go``) are read beside them. Stdlib only.
"""

from __future__ import annotations

#: The port a training worker serves ``/metrics`` on (pod IP on a cluster, loopback locally).
METRICS_PORT = 9464
#: Where a worker serves them, ``HOST:PORT`` (unset: nowhere).
ADDRESS_ENV = "DISTML_METRICS_ADDRESS"
#: The job's name on its series (the TFJob's on a cluster).
JOB_ENV = "DISTML_JOB"
#: Seconds a worker keeps serving after its last step (a SIGTERM ends them).
LINGER_ENV = "DISTML_METRICS_LINGER_S"
#: The container port's name on a TFJob's pods (the scrape job keeps the ports of that name).
PORT_NAME = "metrics"
#: The TFJob's label on every series (``job`` is Prometheus's own).
JOB_LABEL = "tfjob"
LABELS = (JOB_LABEL, "model", "replica")

#: Counter: training steps this worker completed (``rate`` is steps per second).
STEPS = "distml_train_steps"
STEPS_TOTAL = f"{STEPS}_total"
#: Histogram: seconds per training step (a call of several steps counts each alike).
STEP_SECONDS = "distml_train_step_seconds"
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Counter: training examples this worker processed (its share of the global batch).
EXAMPLES = "distml_train_examples"
EXAMPLES_TOTAL = f"{EXAMPLES}_total"
#: Gauge: examples per second over this worker's last :data:`RECENT_CALLS` step calls (a
#: point read's live throughput: `invoke status` on the local runtime reads it).
EXAMPLES_PER_SECOND = "distml_train_examples_per_second"
RECENT_CALLS = 20
#: Gauge: the training loss as last read (every few steps, on every worker alike).
LOSS = "distml_train_loss"
#: Gauge: the epoch being trained (1-based).
EPOCH = "distml_train_epoch"
#: Gauge: the step this run resumed from (0: a fresh start; >0: restored from a backup).
RESUMED_STEP = "distml_train_resumed_step"
#: Gauge: 1 while this worker is training (0 once its training ended, before it exits).
TRAINING = "distml_train_running"

#: The training operator's counters (labels ``job_namespace``, ``framework``).
OPERATOR_JOBS_CREATED = "training_operator_jobs_created_total"
OPERATOR_JOBS_SUCCESSFUL = "training_operator_jobs_successful_total"
OPERATOR_JOBS_FAILED = "training_operator_jobs_failed_total"
OPERATOR_JOBS_RESTARTED = "training_operator_jobs_restarted_total"
OPERATOR_FRAMEWORK = "tensorflow"


def selector(namespace: str, tfjob: str | None = None) -> str:
    """The label matchers of one namespace's training workers (of one TFJob if named)."""
    where = f'namespace="{namespace}"'
    return where if tfjob is None else f'{where},{JOB_LABEL}="{tfjob}"'


def throughput(namespace: str, window: str) -> str:
    """Examples per second over ``window``, by TFJob (and its model), all its workers."""
    return (
        f"sum by ({JOB_LABEL}, model) (rate({EXAMPLES_TOTAL}{{{selector(namespace)}}}[{window}]))"
    )


def workers(namespace: str) -> str:
    """Each TFJob's workers (every worker serves the running gauge, 1 or 0)."""
    return f"count by ({JOB_LABEL}) ({TRAINING}{{{selector(namespace)}}})"


def per_worker_throughput(namespace: str, window: str) -> str:
    """Examples per second per worker, by TFJob and model."""
    return f"{throughput(namespace, window)} / on ({JOB_LABEL}) group_left {workers(namespace)}"


def workers_seen(namespace: str, over: str) -> str:
    """Each TFJob's workers seen within ``over``: one that exited first is still counted
    (a 2-worker job whose worker 1 ended is not a one-worker job)."""
    return f"count by ({JOB_LABEL}) (last_over_time({TRAINING}{{{selector(namespace)}}}[{over}]))"


def scaling_efficiency(namespace: str, window: str, over: str) -> str:
    """throughput(N) / (N x throughput(1)), by TFJob: each job's per-worker throughput over
    the mean throughput a one-worker job of the same model had while it trained within
    ``over`` (none: no answer, the baseline must have run). A job is a one-worker job when
    no other worker of it was seen within ``over``. The mean is of its worker's own live
    figure (:data:`EXAMPLES_PER_SECOND`) while it said it trained: a ``rate()`` of its
    counter would start low for a window's length and pull the mean down. 1.0 is perfect
    scaling; a one-worker job is about its own 1.0."""
    sel = selector(namespace)
    training = (
        f"({EXAMPLES_PER_SECOND}{{{sel}}} and on ({JOB_LABEL}, replica) ({TRAINING}{{{sel}}} == 1))"
    )
    one_worker = f"{training} and on ({JOB_LABEL}) ({workers_seen(namespace, over)} == 1)"
    baseline = f"avg by (model) (avg_over_time(({one_worker})[{over}:]))"
    return f"({per_worker_throughput(namespace, window)}) / on (model) group_left {baseline}"


def step_time_quantile(namespace: str, q: float, window: str) -> str:
    """The ``q`` quantile of seconds per step over ``window``, by TFJob."""
    buckets = f"{STEP_SECONDS}_bucket{{{selector(namespace)}}}"
    return f"histogram_quantile({q}, sum by ({JOB_LABEL}, le) (rate({buckets}[{window}])))"


def loss(namespace: str) -> str:
    """The loss as last read, by TFJob (the workers agree: one collective read)."""
    return f"max by ({JOB_LABEL}) ({LOSS}{{{selector(namespace)}}})"


def restarts(namespace: str, over: str) -> str:
    """TFJob restarts the training operator counted in the namespace within ``over``."""
    sel = f'job_namespace="{namespace}",framework="{OPERATOR_FRAMEWORK}"'
    return f"sum(increase({OPERATOR_JOBS_RESTARTED}{{{sel}}}[{over}]))"


def stalled(namespace: str, window: str) -> str:
    """Workers still training whose step count did not move over ``window``."""
    sel = selector(namespace)
    still = f"on ({JOB_LABEL}, replica) ({TRAINING}{{{sel}}} == 1)"
    return f"(increase({STEPS_TOTAL}{{{sel}}}[{window}]) == 0) and {still}"
