"""runtime/output/display.py: a job's line shows its progress and restarts, and the display prints
changes, not repeats."""

from __future__ import annotations

from runtime.local.jobs import Job
from runtime.output.display import JobDisplay, job_line


def test_job_line_shows_progress_and_restarts():
    job = Job(name="cnn", command=[], state="pending")
    assert "pending" in job_line(job, 2)
    job.state, job.attempt, job.failure = "failed", 3, "worker-1 exited with code 1"
    assert "(2 restarts: worker-1 exited with code 1)" in job_line(job, 2)


def test_display_prints_changes_not_repeats(capsys):
    lines = []
    display = JobDisplay(out=lines.append, stream=open("/dev/null", "w"))  # noqa: SIM115
    job = Job(name="cnn", command=[], state="pending")
    display.update([job])
    display.update([job])
    assert len(lines) == 1
