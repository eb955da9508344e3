"""k8s.waits.tfjobs against tests/support/fakekube.py (fake cluster, fake clock): waiting for
TFJobs, the live rows and state lines it shows, and when a job counts as failed (its
conditions, a crash loop past the budget, a worker that cannot be scheduled or pulled)."""

from __future__ import annotations

import pytest

from k8s.waits.cluster_poll import WaitError
from k8s.waits.diagnose import tfjob_failure_report
from k8s.waits.tfjobs import TFJobRow, wait_tfjobs
from tests.support.fakekube import FakeKube
from tests.support.wait_kit import (
    INSUFFICIENT_CPU,
    KUBECTL,
    NAMED,
    NS,
    TF,
    collect,
    tfjob_status,
    unnamed_commands,
)


def worker(fake: FakeKube, job: str, i: int, **kwargs) -> dict:
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(i),
    }
    return fake.add_pod(NS, f"{job}-worker-{i}", labels, **kwargs)


def two_succeeding_tfjobs(fake: FakeKube) -> None:
    for job in ("cnn", "cnn-dropout"):
        fake.sequence(
            TF,
            "TFJob",
            NS,
            job,
            [
                {},
                tfjob_status("Created"),
                tfjob_status("Created", "Running", active=2),
                tfjob_status("Created", "Running", "Succeeded", succeeded=2),
            ],
        )
        worker(fake, job, 0)
        worker(fake, job, 1, restart_count=1)


def test_tfjobs_all_succeed_with_live_rows_and_no_state_lines(fake: FakeKube) -> None:
    two_succeeding_tfjobs(fake)
    updates: list[list[TFJobRow]] = []
    lines, out = collect()

    result = wait_tfjobs(
        fake,
        NS,
        ["cnn", "cnn-dropout"],
        timeout=600,
        clock=fake.clock,
        out=out,
        on_update=updates.append,
        kubectl=KUBECTL,
    )

    assert result == {"cnn": "Succeeded", "cnn-dropout": "Succeeded"}
    assert fake.clock.now == 6
    assert [[r.state for r in rows] for rows in updates] == [
        ["Pending", "Pending"],
        ["Created", "Created"],
        ["Running", "Running"],
        ["Succeeded", "Succeeded"],
    ]
    assert updates[2][0] == TFJobRow("cnn", "Running", active=2, restarts=1)
    assert updates[-1][1] == TFJobRow("cnn-dropout", "Succeeded", succeeded=2, restarts=1)
    assert lines == []  # the rows show the states: no line repeats them


def test_tfjobs_without_on_update_print_each_state_change(fake: FakeKube) -> None:
    two_succeeding_tfjobs(fake)
    lines, out = collect()

    result = wait_tfjobs(
        fake, NS, ["cnn", "cnn-dropout"], timeout=600, clock=fake.clock, out=out, kubectl=KUBECTL
    )

    assert result == {"cnn": "Succeeded", "cnn-dropout": "Succeeded"}
    assert [line.split(" (")[0] for line in lines] == [
        "TFJob cnn: Created",
        "TFJob cnn-dropout: Created",
        "TFJob cnn: Running",
        "TFJob cnn-dropout: Running",
        "TFJob cnn: Succeeded",
        "TFJob cnn-dropout: Succeeded",
    ]
    assert "TFJob cnn: Running (workers active 2, succeeded 0, failed 0; restarts 1)" in lines


def test_tfjob_failed_reports_conditions_events_and_tensorflow_log(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "good", tfjob_status("Created", "Running", active=2))
    fake.at(4, lambda: fake.set_status(TF, "TFJob", NS, "good", tfjob_status("Succeeded")))
    fake.set_status(TF, "TFJob", NS, "bad", tfjob_status("Created", "Running", active=2))
    worker(fake, "bad", 0)
    worker(fake, "bad", 1)

    def fail() -> None:
        fake.set_status(
            TF,
            "TFJob",
            NS,
            "bad",
            tfjob_status(
                "Created",
                "Running",
                "Failed",
                failed=1,
                active=1,
                message="TFJob kubeflow/bad has failed because 1 Worker replica(s) failed.",
            ),
        )
        fake.remove("v1", "Pod", "bad-worker-1")
        worker(fake, "bad", 1, phase="Failed", ready=False, exit_code=1)
        fake.add_event(NS, "bad-worker-1", "BackOff", "Back-off restarting failed container")
        fake.add_event(NS, "bad", "TFJobFailed", "1 Worker replica(s) failed", kind="TFJob")
        fake.set_log(
            "bad-worker-1",
            "Traceback (most recent call last):\nValueError: Collective ops must be configured "
            "at program startup",
            container="tensorflow",
        )
        fake.set_log("bad-worker-1", "sidecar noise", container="istio-proxy")

    fake.at(2, fail)
    lines, out = collect()

    result = wait_tfjobs(
        fake, NS, ["good", "bad"], timeout=600, clock=fake.clock, out=out, kubectl=KUBECTL
    )

    assert result == {"good": "Succeeded", "bad": "Failed"}
    report = "\n".join(lines)
    assert "TFJob bad failed: Failed=True (TFJobFailed: TFJob kubeflow/bad has failed" in report
    assert "TFJob kubeflow/bad: Failed" in report
    assert "Running=False" in report
    assert "Worker: active 1, succeeded 0, failed 1" in report
    assert "pod bad-worker-1: Failed; tensorflow: terminated (Error, exit code 1)" in report
    assert "Warning BackOff: Back-off restarting failed container" in report
    assert "TFJob events:" in report and "TFJobFailed: 1 Worker replica(s) failed" in report
    assert "log tail (tensorflow):" in report
    assert "ValueError: Collective ops must be configured at program startup" in report
    assert "sidecar noise" not in report
    assert ("bad-worker-1", NS, "tensorflow", 40) in fake.log_requests
    # The healthy worker is one summary line, no log fetched.
    assert "pod bad-worker-0: Running" in report
    assert not any(r[0] == "bad-worker-0" for r in fake.log_requests)

    # The report function on its own says the same.
    assert "ValueError: Collective ops" in tfjob_failure_report(
        fake, NS, "bad", tail=5, kubectl=KUBECTL
    )


def test_tfjobs_timeout_shows_the_pending_worker(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", active=1))
    worker(fake, "cnn", 0)
    worker(fake, "cnn", 1, phase="Pending", ready=False, unschedulable=INSUFFICIENT_CPU)
    fake.add_event(NS, "cnn-worker-1", "FailedScheduling", INSUFFICIENT_CPU)
    fake.set_log("cnn-worker-0", "Waiting for the cluster, timeout = inf")

    with pytest.raises(WaitError) as info:
        wait_tfjobs(
            fake,
            NS,
            ["cnn"],
            timeout=300,
            clock=fake.clock,
            out=lambda _: None,
            unschedulable_after=10_000,
            kubectl=KUBECTL,
        )

    message = str(info.value)
    assert "timed out after 300s waiting for TFJobs cnn in kubeflow" in message
    assert "unfinished: cnn (Running; workers active 1, succeeded 0)" in message
    assert "pod cnn-worker-1 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu" in (
        info.value.headline
    )
    assert "the others wait for it forever" in info.value.headline
    assert "pod cnn-worker-1: Pending; unschedulable: 0/1 nodes" in info.value.diagnostics
    assert "Warning FailedScheduling: 0/1 nodes are available" in info.value.diagnostics
    assert "lower --workers or give Docker more CPU" in message
    assert info.value.next_step.startswith(f"{NAMED}-n kubeflow describe tfjob cnn; ")
    assert unnamed_commands(message) == []
    assert fake.clock.now == 300


def test_a_worker_the_scheduler_keeps_refusing_fails_its_job_early(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", active=1))
    worker(fake, "cnn", 0)
    worker(fake, "cnn", 1, phase="Pending", ready=False, unschedulable=INSUFFICIENT_CPU)
    fake.add_event(NS, "cnn-worker-1", "FailedScheduling", INSUFFICIENT_CPU)
    lines: list[str] = []
    result = wait_tfjobs(
        fake,
        NS,
        ["cnn"],
        timeout=3600,
        clock=fake.clock,
        out=lines.append,
        unschedulable_after=120,
        kubectl=KUBECTL,
    )
    assert result == {"cnn": "Failed"}
    assert 120 <= fake.clock.now < 130  # not the hour-long deadline
    text = "\n".join(lines)
    assert "pod cnn-worker-1 cannot be scheduled: 0/1 nodes are available" in text
    assert "needs all its workers running at once" in text


def test_tfjob_crashloop_past_max_restarts_counts_as_failed(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", active=2))
    worker(fake, "cnn", 0)
    worker(fake, "cnn", 1, waiting_reason="CrashLoopBackOff", restart_count=2, ready=False)
    fake.at(
        10,
        lambda: (
            fake.remove("v1", "Pod", "cnn-worker-1"),
            worker(fake, "cnn", 1, waiting_reason="CrashLoopBackOff", restart_count=3, ready=False),
        ),
    )
    fake.set_log("cnn-worker-1", "OSError: /trained_model is not writable")
    lines, out = collect()
    updates: list[list[TFJobRow]] = []

    result = wait_tfjobs(
        fake,
        NS,
        ["cnn"],
        timeout=600,
        max_restarts=2,
        clock=fake.clock,
        out=out,
        on_update=updates.append,
        kubectl=KUBECTL,
    )

    assert result == {"cnn": "Failed"}
    assert fake.clock.now == 10
    assert updates[-1] == [TFJobRow("cnn", "Failed", active=2, restarts=3)]
    text = "\n".join(lines)
    assert (
        "TFJob cnn failed: pod cnn-worker-1 container tensorflow is in CrashLoopBackOff after "
        "3 restarts (allowed: 2)"
    ) in text
    assert "OSError: /trained_model is not writable" in text
    assert "a container keeps crashing" in text


def test_tfjob_crashloop_within_the_budget_keeps_waiting(fake: FakeKube) -> None:
    fake.set_status(TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", active=2))
    worker(fake, "cnn", 0)
    worker(fake, "cnn", 1, waiting_reason="CrashLoopBackOff", restart_count=2, ready=False)
    fake.at(
        40,
        lambda: fake.set_status(
            TF, "TFJob", NS, "cnn", tfjob_status("Created", "Running", "Succeeded", succeeded=2)
        ),
    )

    result = wait_tfjobs(
        fake,
        NS,
        ["cnn"],
        timeout=600,
        max_restarts=2,
        clock=fake.clock,
        out=lambda _: None,
        kubectl=KUBECTL,
    )

    assert result == {"cnn": "Succeeded"}
    assert fake.clock.now == 40


def test_tfjob_worker_stuck_pulling_its_image_fails_that_job_only(fake: FakeKube) -> None:
    for job in ("cnn", "cnn-dropout"):
        fake.set_status(TF, "TFJob", NS, job, tfjob_status("Created", "Running", active=1))
        worker(fake, job, 0)
    worker(fake, "cnn", 1, phase="Pending", ready=False, waiting_reason="ErrImagePull")
    fake.at(
        100,
        lambda: fake.set_status(
            TF, "TFJob", NS, "cnn-dropout", tfjob_status("Running", "Succeeded", succeeded=2)
        ),
    )
    lines, out = collect()

    result = wait_tfjobs(
        fake, NS, ["cnn", "cnn-dropout"], timeout=600, clock=fake.clock, out=out, kubectl=KUBECTL
    )

    assert result == {"cnn": "Failed", "cnn-dropout": "Succeeded"}
    assert fake.clock.now == 100
    text = "\n".join(lines)
    assert "TFJob cnn failed: pod cnn-worker-1 container tensorflow has been in ErrImagePull" in (
        text
    )
    assert "re-import it into the cluster" in text
    failed = "TFJob cnn: Failed (workers active 1, succeeded 0, failed 0; restarts 0)"
    succeeded = "TFJob cnn-dropout: Succeeded (workers active 0, succeeded 2, failed 0; restarts 0)"
    assert lines.index(failed) < lines.index(succeeded)


def test_tfjob_that_never_appears_is_an_error(fake: FakeKube) -> None:
    with pytest.raises(WaitError, match="TFJob kubeflow/cnn does not exist") as info:
        wait_tfjobs(
            fake, NS, ["cnn"], timeout=600, clock=fake.clock, out=lambda _: None, kubectl=KUBECTL
        )
    assert info.value.next_step.startswith(f"{NAMED}-n kubeflow get tfjobs; ")
    assert fake.clock.now <= 40
