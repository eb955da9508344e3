"""e2e tier: the whole lifecycle on the local runtime, real processes, TF, server, Locust.

Offline; data from DISTML_DATA_DIR (the shared Fashion-MNIST files). Run: nox -s e2e
"""

from __future__ import annotations

import base64
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib
from pathlib import Path

import pytest
import yaml

from ml import contract
from ml.contract import RAW_SHA256
from ml.contract.records import LINEAGE_FIELDS
from ml.contract.serving_metrics import PREDICT_ROUTE, REQUESTS_TOTAL
from runtime.image import image_tag
from tests.ml.server.scrape import Scrape
from tests.support.e2e_kit import REPO, SERVICE, deployed, invoke, post, processes_mentioning


@pytest.fixture(scope="module")
def data_dir(required_data_dir: Path) -> Path:
    return required_data_dir


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory, data_dir):
    """up -> train-all -> deploy, shared by the tests that need a running service."""
    wd = tmp_path_factory.mktemp("e2e") / "wd"
    with deployed(wd, data_dir, "train-all", "--epochs", "2", "--steps-per-epoch", "15") as s:
        yield s


def test_up_twice_is_a_no_op(lifecycle):
    r = invoke(lifecycle["wd"], "up")
    assert r.returncode == 0
    assert "already ready; nothing changed" in r.stdout
    assert "runtime: local" in r.stdout


def test_train_all_left_one_candidate_per_model_and_curves(lifecycle):
    volume = lifecycle["wd"] / "volume"
    for model in ("cnn", "cnn_dropout", "cnn_batchnorm"):
        cand = volume / "candidates" / model
        assert (cand / "saved_model.pb").is_file()
        metrics = json.loads((cand / "metrics.json").read_text())
        assert metrics["workers"] == 2 and len(metrics["history"]) == 2
        assert (lifecycle["wd"] / "logs" / "train" / model / "worker-1.log").is_file()
    assert sorted(volume.rglob("saved_model.pb")) == sorted(
        [
            volume / "candidates" / m / "saved_model.pb"
            for m in ("cnn", "cnn_dropout", "cnn_batchnorm")
        ]
        + list((volume / "serving").rglob("saved_model.pb"))
    )
    assert (lifecycle["wd"] / "reports" / "training-curves.png").stat().st_size > 10_000


def test_deploy_serves_and_prints_a_working_curl(lifecycle):
    out = lifecycle["deploy_out"]
    assert f"serving {SERVICE} version 1 at {lifecycle['url']}" in out
    assert "curl -s -H 'Content-Type: application/json' -d @" in out
    sample = lifecycle["wd"] / "sample-request.json"
    status, body = post(f"{lifecycle['url']}/v1/models/{SERVICE}:predict", sample.read_bytes())
    assert status == 200
    assert len(body["predictions"][0]) == 10
    assert abs(sum(body["predictions"][0]) - 1) < 1e-4
    selection = json.loads((lifecycle["wd"] / "volume/reports/selection.json").read_text())
    assert selection["published"] and selection["version"] == 1
    assert selection["selected_on"] == "validation"
    assert "validation accuracy" in out and "(reported only)" in out  # both splits named


def test_publish_json_holds_the_lineage_of_the_real_run(lifecycle):
    """Every lineage field filled from the real training and selection of this run."""
    volume = lifecycle["wd"] / "volume"
    record = json.loads((volume / "serving" / SERVICE / "1" / "publish.json").read_text())
    missing = [f for f in LINEAGE_FIELDS if record.get(f) in (None, "", {}, [])]
    assert not missing, f"publish.json lacks {missing}"
    selection = json.loads((volume / "reports/selection.json").read_text())
    winner = next(c for c in selection["candidates"] if c["model_type"] == selection["winner"])
    assert record["model_type"] == selection["winner"]
    assert (record["val_accuracy"], record["test_accuracy"]) == (
        winner["val_accuracy"],
        winner["test_accuracy"],
    )
    assert record["reason"] == selection["reason"] and record["selected_on"] == "validation"
    assert record["code_version"] == image_tag(REPO)
    params = yaml.safe_load(
        (volume / "candidates" / record["model_type"] / "params.yaml").read_text()
    )
    assert record["params"] == params and params["extra"]["workers"] >= 1
    assert list(record["dataset"]["sha256"].values()) == list(RAW_SHA256)


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height, with 100 bytes of image data behind it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(bytes(100))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat)


BIG_PNG = {"b64": base64.b64encode(png_claiming(4096, 4096)).decode()}

BAD_INPUTS = [
    ("not json", "{", 400, "json"),
    ("no instances", "{}", 400, "instances"),
    ("empty instances", '{"instances": []}', 400, "empty"),
    ("pixels 0-255", json.dumps({"instances": [[[255.0] * 28] * 28]}), 400, "255"),
    ("wrong shape", json.dumps({"instances": [[[0.5] * 27] * 28]}), 400, "28"),
    ("bad base64", '{"instances": [{"b64": "***"}]}', 400, "base64"),
    (
        "not an image",
        json.dumps({"instances": [{"b64": base64.b64encode(b"hello").decode()}]}),
        400,
        "image",
    ),
    (
        "unknown signature",
        json.dumps({"signature_name": "nope", "instances": [[[0.5] * 28] * 28]}),
        400,
        "serving_pixels",
    ),
    (
        "256 images of 4096x4096",
        json.dumps({"instances": [BIG_PNG] * 256}),
        413,
        "--max-request-pixels",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "text"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_inputs_get_a_4xx_that_explains(lifecycle, case, body, status, text):
    got, answer = post(f"{lifecycle['url']}/v1/models/{SERVICE}:predict", body)
    assert got == status, answer
    assert text.lower() in json.dumps(answer).lower()
    ok, _ = post(
        f"{lifecycle['url']}/v1/models/{SERVICE}:predict",
        (lifecycle["wd"] / "sample-request.json").read_bytes(),
    )
    assert ok == 200, "the server keeps serving after a bad request"


def test_unknown_model_is_404(lifecycle):
    got, _ = post(f"{lifecycle['url']}/v1/models/nope:predict", '{"instances": []}')
    assert got == 404


def _predicts_counted(url: str) -> float:
    """The server's own count of predict requests answered, read from its /metrics with
    prometheus-client's parser (tests/ml/server/scrape.py, not the load test's reader)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        page = Scrape(resp.read().decode())
    return page.total(REQUESTS_TOTAL, model=SERVICE, route=PREDICT_ROUTE)


def test_loadtest_concurrency_5_writes_reports_with_zero_failures(lifecycle):
    before = _predicts_counted(lifecycle["url"])
    r = invoke(lifecycle["wd"], "loadtest", "--concurrency", "5", "--duration", "10s")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    after = _predicts_counted(lifecycle["url"])
    assert "scale-out is checked only on a cluster" in r.stdout
    out = lifecycle["wd"] / "reports" / "loadtest"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] > 20 and summary["failures"] == 0
    assert summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"]
    assert (out / "chart.png").stat().st_size > 10_000
    assert list(out.glob("*stats*.csv"))
    # The server answered exactly the requests Locust sent, and the report says so.
    assert after - before == summary["requests"]
    server = summary["server"]
    assert server["requests"] == summary["requests"] and server["difference"] == 0
    assert server["by_code"] == {"200": summary["requests"]}
    assert 0 < server["p50_ms"] <= server["p95_ms"] <= server["p99_ms"]
    assert max(row["in_flight"] for row in server["series"]) >= 1
    assert f"the server counted {summary['requests']} predict requests (200: " in r.stdout


def test_redeploy_under_load_drops_no_request_and_rollback_restores(lifecycle):
    url = f"{lifecycle['url']}/v1/models/{SERVICE}:predict"
    body = (lifecycle["wd"] / "sample-request.json").read_bytes()
    stop = threading.Event()
    results: list[tuple[int, int | None]] = []

    def client():
        while not stop.is_set():
            try:
                status, answer = post(url, body, timeout=30)
                results.append((status, answer.get("model_version")))
            except Exception as e:
                results.append((-1, repr(e)))

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        r = invoke(lifecycle["wd"], "deploy")
        assert r.returncode == 0, r.stdout[-3000:]
        assert "already running" in r.stdout and "version 2" in r.stdout
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    failed = [x for x in results if x[0] != 200]
    assert results and not failed, failed[:5]
    assert {v for _, v in results} >= {2}

    r = invoke(lifecycle["wd"], "rollback")
    assert r.returncode == 0 and "now serves version 3" in r.stdout
    publish = json.loads(
        (lifecycle["wd"] / "volume/serving" / SERVICE / "3/publish.json").read_text()
    )
    assert publish["source"] == "rollback to version 1"
    # What it rolled back to, shown by the rollback itself: version 1's model card.
    v1 = json.loads((lifecycle["wd"] / "volume/serving" / SERVICE / "1/publish.json").read_text())
    assert "model: version 3: " in r.stdout
    assert f"accuracy: validation {v1['val_accuracy']:.4f} (chosen on)" in r.stdout
    assert f"code: {v1['code_version']}" in r.stdout


def test_status_shows_everything(lifecycle):
    r = invoke(lifecycle["wd"], "status")
    assert r.returncode == 0
    for text in (
        "candidate cnn",
        "candidate cnn_batchnorm",
        "serving versions",
        "serving accuracy",
        "(chosen on), test",
        "serving code",
        "pid",
        lifecycle["url"],
        "last load test",
        "training curves:",
        "server requests",  # the running server's own figures, from its /metrics
        "server latency",
        "server in flight",
    ):
        assert text in r.stdout
    assert "server metrics" not in r.stdout  # the row that says they are not available


def test_a_killed_worker_restarts_the_job_which_resumes(tmp_path, data_dir):
    wd = tmp_path / "wd"
    assert invoke(wd, "up", "--source-dir", str(data_dir)).returncode == 0
    env = dict(os.environ, INVOKE_WORKDIR=str(wd), INVOKE_RUNTIME="local")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "invoke",
            "train",
            "--model-type",
            "cnn",
            "--epochs",
            "4",
            "--steps-per-epoch",
            "25",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log0 = wd / "logs" / "train" / "cnn" / "worker-0.log"
    try:
        deadline = time.monotonic() + 300
        while '"event": "epoch", "epoch": 2' not in (log0.read_text() if log0.exists() else ""):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "training never reached epoch 2"
            time.sleep(0.2)
        pids = json.loads((wd / "state.json").read_text())["train_pids"]
        train = "\0".join(contract.step_argv("", "train")[1:]) + "\0"  # -m ml train
        victim = [p for p in pids if train in Path(f"/proc/{p}/cmdline").read_text()][-1]
        os.kill(victim, signal.SIGKILL)
        out, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
    print(out)
    assert proc.returncode == 0, out[-3000:]
    assert "killed by signal 9; restarting all workers" in out
    metrics = json.loads((wd / "volume/candidates/cnn/metrics.json").read_text())
    assert metrics["resumed_from_epoch"] >= 2, "the restarted job must not start from epoch 0"
    assert metrics["history"][0]["epoch"] >= 3
    assert processes_mentioning(str(wd)) == []


def test_ctrl_c_during_train_all_leaves_no_process_behind(tmp_path, data_dir):
    wd = tmp_path / "wd"
    assert invoke(wd, "up", "--source-dir", str(data_dir)).returncode == 0
    env = dict(os.environ, INVOKE_WORKDIR=str(wd), INVOKE_RUNTIME="local")
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "train-all", "--epochs", "50"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        logs = wd / "logs" / "train"
        while (
            len([p for p in logs.glob("*/worker-0.log") if '"event": "step"' in p.read_text()]) < 3
        ):
            assert proc.poll() is None and time.monotonic() < deadline  # all 3 jobs training
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        sent = time.monotonic()
        out, _ = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    print(out, f"\nCtrl-C to exit: {took:.1f} s")
    assert proc.returncode == 130
    assert "stopping 6 worker(s)…" in out and "interrupted" in out
    assert took < 10, f"Ctrl-C took {took:.1f} s"
    assert processes_mentioning(str(wd)) == []


def test_status_during_train_all_shows_each_job_s_live_figures(tmp_path, data_dir):
    # `status` in another terminal while train-all runs: one row per job, read from its
    # workers' /metrics (their recent examples/s, steps, epoch, loss); none once done.
    from tests.support import cli
    from tests.support.e2e_kit import LOCAL

    wd = tmp_path / "wd"
    assert invoke(wd, "up", "--source-dir", str(data_dir)).returncode == 0
    log = tmp_path / "train-all.log"  # a file, not a pipe nobody reads while it trains
    with log.open("w") as sink:
        train = subprocess.Popen(
            cli.invoke_command("train-all", "--epochs", "2", "--steps-per-epoch", "40"),
            cwd=REPO, env=cli.invoke_env(wd, **LOCAL), stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    rows: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 300
        while len(rows) < 3:
            assert train.poll() is None, "train-all ended before status saw every job"
            assert time.monotonic() < deadline, f"status never showed every job: {rows}"
            out = invoke(wd, "status").stdout
            for line in out.splitlines():
                if line.startswith("training ") and "examples/s" in line:
                    rows[line.split()[1]] = line
        train.wait(timeout=900)
    finally:
        train.kill()
    print("\n".join(rows.values()))
    assert train.returncode == 0, log.read_text()[-3000:]
    assert sorted(rows) == ["cnn", "cnn_batchnorm", "cnn_dropout"]
    for line in rows.values():
        assert "2 worker(s) read" in line and " loss " in line and " step " in line, line
    after = invoke(wd, "status").stdout
    assert not [line for line in after.splitlines() if "worker(s) read" in line]
