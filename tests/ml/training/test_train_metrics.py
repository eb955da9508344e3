"""ml/training/train_metrics.py: a training worker's /metrics, parsed with prometheus-client's own
parser. In a real 2-worker job (MultiWorkerMirroredStrategy on 127.0.0.1) the figures move
exactly as the steps run: read while it trains, and after its last step (the page lingers
until SIGTERM). The address from the environment is outside input: parsed strictly, fuzzed."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import urllib.request
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ml.contract import PROGRESS_PREFIX
from ml.contract import training_metrics as tmx
from ml.training.train_metrics import ADDRESS_ENV, JOB_ENV, LINGER_ENV, TrainMetrics, parse_address
from runtime.procs import free_ports
from tests.ml.training.test_train import REPO, train_cmd, worker_env
from tests.support.predict_server import wait_for


def page(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> {sorted labels: value}, as prometheus-client's parser reads the page."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def one(p: dict[str, Any], name: str, **extra: str) -> float:
    """The one sample of ``name`` (with ``extra`` labels, e.g. le) on page ``p``."""
    found = [v for labels, v in p.get(name, {}).items() if extra.items() <= dict(labels).items()]
    assert len(found) == 1, (name, p.get(name))
    return found[0]


# ------------------------------------------------------------------ the address
@pytest.mark.parametrize(
    ("text", "want"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("10.244.1.7:9464", ("10.244.1.7", 9464)),
     ("[::1]:80", ("::1", 80)), ("localhost:1", ("localhost", 1))],
)  # fmt: skip
def test_an_address_is_host_and_port(text: str, want: tuple[str, int]) -> None:
    assert parse_address(text) == want


@pytest.mark.parametrize("text", ["", "9464", ":9464", "host:", "host:0", "host:65536", "h:x1"])
def test_anything_else_is_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(ValueError, match=rf"^{ADDRESS_ENV}=.*expected HOST:PORT"):
        parse_address(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_the_address_parser_gives_a_port_in_range_or_says_why(text: str) -> None:
    try:
        host, port = parse_address(text)
    except ValueError as e:
        assert ADDRESS_ENV in str(e)
    else:
        assert host and 0 < port < 65536


# ------------------------------------------------------------------ one worker's page
def test_updates_show_on_the_page_with_the_job_model_and_replica(monkeypatch):
    (port,) = free_ports(1)
    monkeypatch.setenv(ADDRESS_ENV, f"127.0.0.1:{port}")
    tm = TrainMetrics("cnn", 1, job="train-cnn")
    try:
        assert tm.serve() == f"http://127.0.0.1:{port}/metrics"
        tm.started()
        tm.epoch(2)
        tm.steps_done(3, 0.3, 3 * 64)
        tm.steps_done(1, 0.02, 64)
        tm.read_loss(0.75)
        p = page(f"http://127.0.0.1:{port}/metrics")
    finally:
        tm.close()
    labels = (("model", "cnn"), ("replica", "1"), (tmx.JOB_LABEL, "train-cnn"))
    assert p[tmx.STEPS_TOTAL] == {labels: 4.0}
    assert p[tmx.EXAMPLES_TOTAL] == {labels: 256.0}
    assert one(p, f"{tmx.STEP_SECONDS}_count") == 4
    assert one(p, f"{tmx.STEP_SECONDS}_sum") == pytest.approx(0.32)
    # Cumulative buckets: the one step of 0.02 s, then the call's three at 0.1 s each.
    assert one(p, f"{tmx.STEP_SECONDS}_bucket", le="0.05") == 1
    assert one(p, f"{tmx.STEP_SECONDS}_bucket", le="0.1") == 4
    assert (one(p, tmx.LOSS), one(p, tmx.EPOCH), one(p, tmx.TRAINING)) == (0.75, 2, 1)


def test_without_an_address_nothing_is_served_and_updates_are_harmless(monkeypatch):
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    tm = TrainMetrics("cnn", 0)
    assert tm.serve() is None
    tm.steps_done(2, 0.1, 128)
    tm.linger()  # returns at once: nothing to keep up
    tm.close()


# ------------------------------------------------------------------ a real 2-worker job
EPOCHS, STEPS = 2, 6
PER_WORKER_BATCH = 64  # the quick profile's global batch 128 over 2 workers


class Worker:
    """A worker process whose progress lines are read as they come."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [
            e
            for line in list(self.lines)
            if line.startswith(PROGRESS_PREFIX)
            and (e := json.loads(line[len(PROGRESS_PREFIX) :]))["event"] == kind
        ]


def test_a_real_job_s_figures_move_exactly_as_its_steps_run(tmp_path, shared_data_dir):
    volume = tmp_path / "volume"
    ports = free_ports(4)  # one call: two calls could hand out the same port twice
    tf_ports, metric_ports = ports[:2], ports[2:]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in tf_ports]}
    urls = [f"http://127.0.0.1:{p}/metrics" for p in metric_ports]
    workers = []
    for i in range(2):
        env = worker_env(tmp_path, {"cluster": cluster, "task": {"type": "worker", "index": i}},
                         shared_data_dir)  # fmt: skip
        env.update({ADDRESS_ENV: f"127.0.0.1:{metric_ports[i]}", JOB_ENV: "train-cnn",
                    LINGER_ENV: "120"})  # fmt: skip
        cmd = train_cmd(volume, "cnn", "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS))
        workers.append(Worker(cmd, env))
    seen: list[list[float]] = [[], []]
    try:

        def done() -> bool:
            for i, w in enumerate(workers):
                assert w.proc.poll() is None, "".join(w.lines)[-3000:]
                with contextlib.suppress(OSError):  # not serving yet: TensorFlow starts
                    seen[i].append(one(page(urls[i]), tmx.STEPS_TOTAL))
            return all(w.events("done") for w in workers)

        wait_for(done, 300, "both workers to finish training")
        finals = [page(u) for u in urls]
    finally:
        for w in workers:
            w.proc.send_signal(signal.SIGTERM)  # ends the linger at once
        codes = [w.proc.wait(timeout=60) for w in workers]
    assert codes == [0, 0], "\n\n".join("".join(w.lines)[-3000:] for w in workers)
    total = EPOCHS * STEPS
    for i, p in enumerate(finals):
        labels = dict(next(iter(p[tmx.STEPS_TOTAL])))
        assert labels == {tmx.JOB_LABEL: "train-cnn", "model": "cnn", "replica": str(i)}
        assert one(p, tmx.STEPS_TOTAL) == total
        assert one(p, tmx.EXAMPLES_TOTAL) == total * PER_WORKER_BATCH
        assert one(p, f"{tmx.STEP_SECONDS}_count") == total
        assert one(p, f"{tmx.STEP_SECONDS}_bucket", le="+Inf") == total
        assert (one(p, tmx.EPOCH), one(p, tmx.TRAINING), one(p, tmx.RESUMED_STEP)) == (EPOCHS, 0, 0)
        last_loss = workers[i].events("step")[-1]["loss"]
        assert one(p, tmx.LOSS) == pytest.approx(last_loss)
        # Read while it trained: never down, never past the job's steps.
        assert seen[i] == sorted(seen[i]) and set(seen[i]) <= set(range(total + 1))
    assert any(0 < s < total for s in seen[0] + seen[1]), seen  # a mid-run read was taken
