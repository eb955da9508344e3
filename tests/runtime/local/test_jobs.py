"""runtime/local/jobs.py: each worker's TF_CONFIG and threads, and the JobRunner's restart
policy with real processes (no TensorFlow): whole-job restarts, usage errors, saves on
SIGTERM, Ctrl-C, signals, the deadline and the parallel limit."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from ml.contract import PREEMPTED_EXIT, PROGRESS_PREFIX
from runtime.local.jobs import Job, JobRunner, tf_config, threads_per_worker
from runtime.procs import is_alive


def test_tf_config_is_what_the_operator_gives_each_worker():
    cfg = json.loads(tf_config([4001, 4002], 1))
    assert cfg == {
        "cluster": {"worker": ["127.0.0.1:4001", "127.0.0.1:4002"]},
        "task": {"type": "worker", "index": 1},
    }
    from ml.training.tf_config import parse_tf_config

    assert parse_tf_config(tf_config([4001, 4002], 0)).is_chief


@pytest.mark.parametrize(
    ("workers", "cores", "expected"), [(1, 2, 2), (2, 2, 1), (6, 2, 1), (2, 8, 4), (3, 8, 2)]
)
def test_threads_are_cores_divided_by_concurrent_workers(workers, cores, expected):
    assert threads_per_worker(workers, cores) == expected


def fake_worker(script: str) -> list[str]:
    """A worker stand-in: real processes, real exit codes, no TensorFlow."""
    return [sys.executable, "-c", script]


def marker_script(tmp: Path, fail_times: int, code: int = 1) -> str:
    """Exit ``code`` on the first ``fail_times`` attempts of worker 1, then succeed."""
    return (
        "import json, os, pathlib, sys\n"
        f"p = pathlib.Path({str(tmp)!r}) / 'attempts'\n"
        "idx = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        "print('" + PROGRESS_PREFIX + "' + json.dumps({'event': 'step', 'epoch': 0, "
        "'epochs': 1, 'step': 1, 'steps': 1, 'loss': 0.5}), flush=True)\n"
        "if idx == 1:\n"
        "    n = int(p.read_text()) if p.exists() else 0\n"
        "    p.write_text(str(n + 1))\n"
        f"    sys.exit({code} if n < {fail_times} else 0)\n"
        "import time; time.sleep(0.2)\n"
    )


def run_jobs(tmp_path, script, *, max_restarts, workers=2, jobs=1, deadline=60.0):
    js = [Job(name=f"job{i}", command=fake_worker(script)) for i in range(jobs)]
    seen_pids = []
    runner = JobRunner(
        js,
        workers=workers,
        parallel=jobs,
        max_restarts=max_restarts,
        log_dir=tmp_path / "logs",
        deadline_s=deadline,
        on_pids=lambda pids: seen_pids.extend(pids),
    )
    return runner.run(), seen_pids


def test_a_job_whose_workers_all_succeed_succeeds(tmp_path):
    (job,), _ = run_jobs(tmp_path, marker_script(tmp_path, 0), max_restarts=0)
    assert (job.state, job.attempt, job.restarts) == ("succeeded", 1, 0)
    assert job.progress["loss"] == 0.5
    assert "===== attempt 1, worker 1" in (tmp_path / "logs" / "job0" / "worker-1.log").read_text()


def test_a_dying_worker_restarts_the_whole_job_and_it_can_recover(tmp_path):
    (job,), pids = run_jobs(tmp_path, marker_script(tmp_path, 2), max_restarts=2)
    assert (job.state, job.attempt, job.restarts) == ("succeeded", 3, 2)
    assert "worker-1 exited with code 1" in job.failure
    # Every start launched both workers afresh: each worker's log has all three attempts.
    # (Not counted by pid: a worker that exits at once may be gone before the runner
    # reports the live pids, as happened on a loaded machine.)
    logs = tmp_path / "logs" / "job0"
    for worker in (0, 1):
        text = (logs / f"worker-{worker}.log").read_text()
        assert all(f"===== attempt {a}, worker {worker}" in text for a in (1, 2, 3))
    assert all(not is_alive(pid) for pid in set(pids))


def test_a_usage_or_data_error_fails_the_job_at_once_without_spending_restarts(tmp_path):
    # ml.training.train exits 2 for a bad flag, a missing dataset or no C compiler for its loopback
    # shim: a restart would fail the same way.
    (job,), pids = run_jobs(tmp_path, marker_script(tmp_path, 99, code=2), max_restarts=2)
    assert (job.state, job.attempt, job.restarts) == ("failed", 1, 0)
    assert "worker-1 exited with code 2: a usage, configuration or data error" in job.failure
    assert job.failed_log == tmp_path / "logs" / "job0" / "worker-1.log"
    assert all(not is_alive(pid) for pid in set(pids))


def test_a_job_that_keeps_failing_stops_after_max_restarts(tmp_path):
    (job,), pids = run_jobs(tmp_path, marker_script(tmp_path, 99, code=3), max_restarts=1)
    assert (job.state, job.attempt) == ("failed", 2)
    assert "worker-1 exited with code 3 (after 1 restart(s); --max-restarts 1)" in job.failure
    assert job.failed_log == tmp_path / "logs" / "job0" / "worker-1.log"
    assert all(not is_alive(pid) for pid in set(pids))


def test_workers_that_saved_on_sigterm_resume_without_spending_a_restart(tmp_path):
    script = (
        "import json, os, pathlib, sys\n"
        f"p = pathlib.Path({str(tmp_path)!r}) / ('w' + os.environ['TF_CONFIG'][-3:-2])\n"
        "n = int(p.read_text()) if p.exists() else 0\n"
        # Atomically: the runner's SIGTERM to a peer can land mid-write, and a truncated
        # count would read as '' next time (seen once in CI as a failed job).
        "tmp = p.with_suffix('.tmp')\n"
        "tmp.write_text(str(n + 1))\n"
        "os.replace(tmp, p)\n"
        f"sys.exit({PREEMPTED_EXIT} if n < 2 else 0)\n"  # both workers, twice
    )
    (job,), _ = run_jobs(tmp_path, script, max_restarts=0)
    # max_restarts=0, yet it ran again after each save (a worker stopped while the other
    # exited may add one more round: the count is at least the two saves).
    assert (job.state, job.restarts) == ("succeeded", 0)
    assert job.preemptions >= 2 and job.attempt == job.preemptions + 1


def test_ctrl_c_stops_every_worker_at_once_on_one_deadline(tmp_path, monkeypatch):
    """Workers that ignore SIGTERM get SIGKILL after one shared grace period, not one each."""
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    monkeypatch.setattr("runtime.local.jobs.STOP_GRACE_S", 1.0)
    jobs = [Job(name=f"job{i}", command=fake_worker(script)) for i in range(3)]
    lines: list[str] = []
    pids: list[int] = []

    def interrupt(js) -> None:  # Ctrl-C once all six workers run
        if sum(j.running_workers() for j in js) == 6:
            raise KeyboardInterrupt

    runner = JobRunner(
        jobs, workers=2, parallel=3, max_restarts=0, log_dir=tmp_path / "logs",
        on_change=interrupt, on_pids=pids.extend, log=lines.append,
    )  # fmt: skip
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    took = time.monotonic() - started
    assert lines == ["stopping 6 worker(s)…"]
    assert took < 3.0, f"{took:.1f} s: the workers were stopped one after another"
    assert pids and all(not is_alive(pid) for pid in set(pids))


def test_a_killed_worker_is_reported_with_its_signal(tmp_path):
    script = (
        "import json, os, signal\n"
        "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 0:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "import time; time.sleep(30)\n"
    )
    (job,), pids = run_jobs(tmp_path, script, max_restarts=0)
    assert job.state == "failed" and "worker-0 killed by signal 9" in job.failure
    # The surviving worker (which would hang in its collectives) was stopped too.
    assert all(not is_alive(pid) for pid in set(pids))


def test_the_deadline_stops_a_hanging_job(tmp_path):
    (job,), pids = run_jobs(tmp_path, "import time; time.sleep(60)", max_restarts=3, deadline=1.0)
    assert job.state == "failed" and "did not finish within 1 s" in job.failure
    assert all(not is_alive(pid) for pid in set(pids))


def test_parallel_limit_and_invalid_runner_arguments(tmp_path):
    jobs, _ = run_jobs(tmp_path, marker_script(tmp_path, 0), max_restarts=0, jobs=3)
    assert [j.state for j in jobs] == ["succeeded"] * 3
    with pytest.raises(ValueError):
        JobRunner([], workers=0, parallel=1, max_restarts=0, log_dir=tmp_path)


def test_each_worker_gets_its_own_metrics_address_and_the_runner_reports_them(tmp_path):
    # The worker stand-in prints what it was given; the runner reports (job, index, URL)
    # of the running workers, each URL on its own port, none a TF port.
    script = (
        "import json, os, time\n"
        "print(os.environ['DISTML_METRICS_ADDRESS'], os.environ['DISTML_JOB'],"
        " os.environ['TF_CONFIG'], flush=True)\n"
        "time.sleep(0.5)\n"
    )
    reported: list = []
    (job,) = [Job(name="cnn", command=fake_worker(script))]
    runner = JobRunner([job], workers=2, parallel=1, max_restarts=0, log_dir=tmp_path / "logs",
                       deadline_s=60, on_metrics=reported.append)  # fmt: skip
    runner.run()
    assert job.state == "succeeded"
    first = reported[0]
    assert [(j, i) for j, i, _ in first] == [("cnn", 0), ("cnn", 1)]
    ports = {int(url.split(":")[2].split("/")[0]) for _, _, url in first}
    tf_ports = {w.port for w in job.workers}
    assert len(ports) == 2 and not ports & tf_ports
    for w in job.workers:
        said = w.log_path.read_text().splitlines()[-1].split(" ", 2)
        assert said[:2] == [f"127.0.0.1:{w.metrics_port}", "cnn"]
    assert reported[-1] == []  # none running at the end
