"""Local runtime units: runtime selection, ports, TF_CONFIG, restart policy, validation."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from common.errors import DistmlError
from common.poll import Done, Pending, poll
from ml.contract import PREEMPTED_EXIT, PROGRESS_PREFIX
from runtime import select_runtime
from runtime.display import JobDisplay, job_line
from runtime.image import image_tag
from runtime.local import LocalRuntime, UserError
from runtime.local.jobs import (
    Job,
    JobRunner,
    tf_config,
    threads_per_worker,
)
from runtime.procs import cmdline, free_ports, is_alive, port_is_free, stop_pid
from runtime.requests import (
    DeployRequest,
    DownRequest,
    LoadtestRequest,
    RequestError,
    TensorboardRequest,
    TrainRequest,
    UpRequest,
    WorkflowRequest,
)
from runtime.workdir import Workdir

REPO_ROOT = Path(__file__).resolve().parents[1]

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- runtime selection
@pytest.mark.parametrize(
    ("requested", "k3d", "docker", "ready", "expected", "why"),
    [
        ("auto", "/usr/bin/k3d", True, True, "k3d", "a Docker daemon answers and k3d is on PATH"),
        ("auto", None, True, True, "local", "k3d is not on PATH"),
        ("auto", "/usr/bin/k3d", False, True, "local", "no Docker daemon answers"),
        ("auto", "/usr/bin/k3d", True, False, "local", "not in this version yet"),
        ("local", "/usr/bin/k3d", True, True, "local", "--runtime local was asked for"),
        ("kind", None, False, True, "kind", "--runtime kind was asked for"),
    ],
    ids=[
        "auto with docker and k3d",
        "auto without k3d",
        "auto without docker",
        "auto before cluster runtimes exist",
        "explicit local",
        "explicit kind",
    ],
)
def test_runtime_selection(requested, k3d, docker, ready, expected, why):
    name, reason = select_runtime(
        requested, which=lambda tool: k3d, docker_ok=lambda: docker, cluster_ready=ready
    )
    assert name == expected
    assert why in reason


def test_unknown_runtime_and_unavailable_cluster_runtime_are_explained():
    with pytest.raises(DistmlError, match="valid: auto, local, k3d, kind"):
        select_runtime("minikub")
    with pytest.raises(DistmlError, match="use --runtime local"):
        select_runtime("k3d", cluster_ready=False)


def test_docker_probe_is_only_consulted_when_k3d_exists():
    calls = []
    select_runtime(
        "auto", which=lambda t: None, docker_ok=lambda: calls.append(1) or True, cluster_ready=True
    )
    assert calls == []


# ---------------------------------------------------------------- ports, TF_CONFIG, threads
def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert all(port_is_free(p) for p in ports)


TAG = "distml-procs-test"


def sleeper(tag: str = TAG) -> subprocess.Popen:
    """A detached process (its own group) whose command line carries ``tag`` (Popen returns
    during the exec, before the kernel shows the new command line: wait for it)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", tag], start_new_session=True
    )
    shown = poll(
        lambda: cmdline(proc.pid),
        lambda line: Done() if tag in line else Pending(line),
        timeout=30,
        interval=0.02,
    )
    assert shown == Done(), shown
    return proc


def test_a_pid_is_ours_only_while_its_command_line_has_the_tag():
    proc = sleeper()
    try:
        assert TAG in cmdline(proc.pid)
        assert is_alive(proc.pid, TAG) and is_alive(proc.pid)
        assert not is_alive(proc.pid, "another-tag")  # a recycled pid is someone else's
        assert not is_alive(0) and not is_alive(-1)
    finally:
        proc.kill()
        proc.wait()
    assert not is_alive(proc.pid) and cmdline(proc.pid) == ""


def test_a_zombie_counts_as_dead():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])  # exits; not reaped yet
    try:
        became = poll(
            lambda: psutil.Process(proc.pid).status(),
            lambda status: Done() if status == psutil.STATUS_ZOMBIE else Pending(status),
            timeout=30,
            interval=0.05,
        )
        assert became == Done()
        assert not is_alive(proc.pid) and cmdline(proc.pid) == ""
    finally:
        proc.wait()


def test_stop_pid_stops_only_a_process_that_is_ours():
    proc = sleeper()
    try:
        assert stop_pid(proc.pid, "another-tag", grace=1.0) is False
        assert proc.poll() is None  # not ours: left alone
        assert stop_pid(proc.pid, TAG, grace=5.0) is True
        assert not is_alive(proc.pid)  # gone (and reaped) before stop_pid returned
    finally:
        proc.kill()
        proc.wait()


def test_tf_config_is_what_the_operator_gives_each_worker():
    cfg = json.loads(tf_config([4001, 4002], 1))
    assert cfg == {
        "cluster": {"worker": ["127.0.0.1:4001", "127.0.0.1:4002"]},
        "task": {"type": "worker", "index": 1},
    }
    from ml.tf_config import parse_tf_config

    assert parse_tf_config(tf_config([4001, 4002], 0)).is_chief


@pytest.mark.parametrize(
    ("workers", "cores", "expected"), [(1, 2, 2), (2, 2, 1), (6, 2, 1), (2, 8, 4), (3, 8, 2)]
)
def test_threads_are_cores_divided_by_concurrent_workers(workers, cores, expected):
    assert threads_per_worker(workers, cores) == expected


# ---------------------------------------------------------------- restart policy
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
    # Every start launched both workers afresh (4 + 2 distinct processes over 3 attempts).
    assert len(set(pids)) >= 6
    assert all(not is_alive(pid) for pid in set(pids))


def test_a_usage_or_data_error_fails_the_job_at_once_without_spending_restarts(tmp_path):
    # ml.train exits 2 for a bad flag, a missing dataset or no C compiler for its loopback
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


# ---------------------------------------------------------------- local runtime validation
@pytest.fixture
def local_rt(tmp_path):
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    wd.update_state(up=True, runtime="local")
    return LocalRuntime(wd, out=lambda line: None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"models": ("vgg",)}, "unknown model type 'vgg'; valid: cnn, cnn_dropout, cnn_batchnorm"),
        ({"workers": 0}, "--workers must be at least 1, got 0"),
        ({"parallel": 0}, "--parallel must be at least 1"),
        ({"max_restarts": -1}, "--max-restarts must be at least 0"),
        ({"epochs": 0}, "--epochs must be at least 1"),
        ({"profile": "huge"}, "unknown profile 'huge'; valid: quick, full"),
        ({"models": ()}, "no model to train"),
    ],
    ids=[
        "unknown model",
        "zero workers",
        "zero parallel",
        "negative restarts",
        "zero epochs",
        "unknown profile",
        "no model",
    ],
)
def test_train_arguments_are_validated_before_anything_starts(kwargs, message):
    with pytest.raises(RequestError) as err:
        TrainRequest(**kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (
            DeployRequest,
            {"min_accuracy": 86},
            "fraction between 0 and 1, got 86 (did you mean 0.86?)",
        ),
        (DeployRequest, {"predictor": "onnx"}, "--predictor must be one of kserve, tfserving"),
        (DeployRequest, {"http_port": 70000}, "--http-port must be a TCP port between 1 and"),
        (TensorboardRequest, {"port": 0}, "--port must be a TCP port between 1 and 65535, got 0"),
        (DeployRequest, {"min_replicas": -1}, "--min-replicas must be at least 0"),
        (LoadtestRequest, {"concurrency": 0}, "--concurrency must be at least 1"),
        (LoadtestRequest, {"duration": "soon"}, "--duration"),
        (LoadtestRequest, {"spawn_rate": 0}, "--spawn-rate must be above 0"),
        (UpRequest, {"serving_mode": "mesh"}, "--serving-mode must be one of knative, standard"),
        (WorkflowRequest, {"models": ("vgg",)}, "unknown model type 'vgg'"),
        (WorkflowRequest, {"profile": "huge"}, "unknown profile 'huge'; valid: quick, full"),
        (WorkflowRequest, {"steps_per_epoch": 0}, "--steps-per-epoch must be at least 1"),
        (WorkflowRequest, {"stop": True, "watch": True}, "--stop deletes the running workflows"),
    ],
    ids=[
        "percentage",
        "predictor",
        "port",
        "tensorboard port",
        "replicas",
        "concurrency",
        "duration",
        "spawn",
        "serving mode",
        "workflow model",
        "workflow profile",
        "workflow steps",
        "stop and watch",
    ],
)
def test_every_request_is_checked_once_with_the_flag_named(cls, kwargs, message):
    with pytest.raises(RequestError, match=re.escape(message)):
        cls(**kwargs)


def test_flags_a_runtime_cannot_honour_are_named_from_its_capabilities():
    from runtime.api import Capabilities
    from runtime.requests import unsupported

    local = LocalRuntime.capabilities
    deploy = DeployRequest(target=2, request_logger=True, http_port=9000)
    assert unsupported(deploy, local) == ["--target", "--request-logger"]
    assert unsupported(deploy, Capabilities(cluster=True, scales_out=True)) == ["--http-port"]
    assert unsupported(TrainRequest(gpus_per_worker=1), local) == ["--gpus-per-worker"]
    assert unsupported(DownRequest(keep_cluster=True), local) == ["--keep-cluster"]
    assert unsupported(DeployRequest(), local) == []  # defaults are never "set"


def test_tasks_need_up_first(tmp_path):
    rt = LocalRuntime(Workdir.at(tmp_path / "nothing"), out=lambda line: None)
    for call in (
        lambda: rt.train(TrainRequest(models=("cnn",))),
        lambda: rt.deploy(DeployRequest()),
        lambda: rt.loadtest(LoadtestRequest()),
        rt.rollback,
    ):
        with pytest.raises(UserError, match="run `invoke up`"):
            call()


def test_loadtest_needs_a_running_server(local_rt):
    with pytest.raises(UserError, match="run `invoke deploy` first"):
        local_rt.loadtest(LoadtestRequest())


def test_down_purge_removes_only_a_distml_workdir(tmp_path):
    foreign = tmp_path / "important"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    rt = LocalRuntime(Workdir.at(foreign), out=lambda line: None)
    with pytest.raises(UserError, match="not made by distml"):
        rt.down(DownRequest(purge=True))
    assert (foreign / "keep.txt").read_text() == "mine"
    ours = Workdir.at(tmp_path / "ours")
    ours.create()
    LocalRuntime(ours, out=lambda line: None).down(DownRequest(purge=True))
    assert not ours.root.exists()


# ---------------------------------------------------------------- the CLI surface
def invoke(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_invoke_list_is_fast_and_lists_the_lifecycle():
    result = invoke("--list")
    assert result.returncode == 0
    for name in ("up", "train-all", "train", "deploy", "rollback", "loadtest", "status", "down"):
        assert f"  {name} " in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train-all", "--workers", "two"], "--workers must be a whole number, got 'two'"),
        (["train"], "--model-type is required"),
        (["up", "--runtime", "k8s"], "unknown runtime 'k8s'"),
        (["deploy", "--predictor", "onnx"], "--predictor must be one of kserve, tfserving"),
    ],
    ids=["non-numeric workers", "train without a model", "unknown runtime", "unknown predictor"],
)
def test_bad_flags_exit_non_zero_with_a_message(tmp_path, args, message):
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    wd.update_state(up=True, runtime="local")
    result = invoke(*args, env_extra={"INVOKE_WORKDIR": str(wd.root)})
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("import time; time.sleep(60)", "did not become ready within 1 s (stopped it)"),
        ("import sys; print('boom'); sys.exit(3)", "exited with code 3"),
    ],
    ids=["never ready", "crashes at start"],
)
def test_a_server_that_does_not_come_up_is_not_left_behind(local_rt, monkeypatch, script, message):
    from ml import contract
    from runtime.local.serving import start_server

    monkeypatch.setattr(contract, "serve", lambda *a, **k: [sys.executable, "-c", script])
    port = free_ports(1)[0]
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        start_server(local_rt, port, ready_timeout=1.0)
    assert local_rt.wd.state().server is None
    assert port_is_free(port)
    ours = psutil.Process().children(recursive=True)  # not other test runs' processes
    assert [p.pid for p in ours if script in cmdline(p.pid) and is_alive(p.pid)] == []


# ---------------------------------------------------------------- --dry on the local runtime
def test_dry_local_runtime_prints_each_command_in_order_and_touches_nothing(tmp_path):
    wd = Workdir.at(tmp_path / "wd")
    lines: list[str] = []
    rt = LocalRuntime(wd, out=lines.append, dry=True)
    assert rt.up(UpRequest(source_dir=str(tmp_path))) == 0
    assert rt.train(TrainRequest(models=("cnn", "cnn_dropout"), workers=2, epochs=1)) == 0
    assert rt.deploy(DeployRequest(min_accuracy=0.5, force=True, http_port=8181)) == 0
    assert rt.loadtest(LoadtestRequest(concurrency=3)) == 0
    assert rt.down(DownRequest(purge=True)) == 0
    assert not wd.root.exists()
    runs = [line for line in lines if line.startswith("would run (")]
    assert [r.split(")")[0] for r in runs] == [
        "would run (ingest",
        "would run (cnn worker 0",
        "would run (cnn worker 1",
        "would run (cnn_dropout worker 0",
        "would run (cnn_dropout worker 1",
        "would run (selection",
        "would run (model server, in the background",
    ]
    assert runs[0].endswith(f"python -m ml.ingest --volume {wd.volume} --source-dir {tmp_path}")
    assert '"task": {"type": "worker", "index": 1}' in runs[2]
    assert runs[2].endswith(
        "--model-type cnn --profile quick --log-every 5 --epochs 1 --bind-loopback"
    )
    assert runs[5].endswith("--min-accuracy 0.5 --force --code-version " + image_tag(REPO_ROOT))
    assert runs[6].endswith("--host 127.0.0.1 --http-port 8181")
    assert any("3 user(s), no wait time" in line for line in lines)
    assert not wd.root.exists()  # nothing was created, nothing started


def test_local_status_names_the_split_of_every_figure_and_shows_the_model_card(local_rt):
    from ml import contract
    from runtime.local.status import status_rows

    volume, svc = local_rt.wd.volume, local_rt.service
    metrics = Path(contract.metrics_path(volume, "cnn"))
    metrics.parent.mkdir(parents=True)
    metrics.write_text(
        json.dumps({"history": [{"val_accuracy": 0.81}], "final": {"val_accuracy": 0.81}})
    )
    candidate = {
        "model_type": "cnn",
        "status": "ok",
        "val_accuracy": 0.8712,
        "test_accuracy": 0.8655,
    }
    report = Path(contract.selection_report(volume))
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"candidates": [candidate]}))
    record = {
        "version": 1,
        "source": "candidate cnn",
        "model_type": "cnn",
        "val_accuracy": 0.8712,
        "test_accuracy": 0.8655,
        "code_version": "distml:0123456789ab",
        "reason": "cnn has the highest validation accuracy (0.8712)",
        "params": {"profile": "quick", "epochs": 3, "extra": {"steps_per_epoch_resolved": 70}},
        "published_at": "2025-01-02T03:04:05Z",
    }
    version_dir = Path(contract.serving_dir(volume, svc)) / "1"
    version_dir.mkdir(parents=True)
    # Only the version's own publish.json (a volume from before the serving copy existed).
    (version_dir / contract.PUBLISH_FILE).write_text(json.dumps(record))
    rows = dict(status_rows(local_rt))
    assert rows["candidate cnn"] == (
        "last-epoch val acc 0.8100, selection: val acc 0.8712, test acc 0.8655"
    )
    assert rows["serving model"] == "version 1: cnn (candidate cnn), published 2025-01-02T03:04:05Z"
    assert rows["serving accuracy"] == "validation 0.8712 (chosen on), test 0.8655 (reported only)"
    assert rows["serving code"] == "distml:0123456789ab"
    assert rows["serving training"].startswith("profile quick, 3 epoch(s) x 70 steps")
    # The serving copy ml.select keeps wins when it is of the serving version.
    Path(contract.serving_record(volume, svc)).write_text(
        json.dumps({**record, "code_version": "x"})
    )
    assert dict(status_rows(local_rt))["serving code"] == "x"
