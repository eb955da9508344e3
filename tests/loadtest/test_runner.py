"""loadtest/runner.py: importing it is cheap (no Locust, matplotlib or TensorFlow), Locust failing
to start is an error, and a real headless run on loopback gives the summary and reaches the
endpoint with the Host header."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest import plan
from loadtest import runner as lt
from loadtest import summary as ls
from tests.support.predict_server import MODEL, write_payload

ROOT = Path(__file__).resolve().parents[2]


def test_importing_loadtest_is_cheap():
    code = (
        "import sys, loadtest, loadtest.__main__, loadtest.runner, loadtest.locust_process, "
        "loadtest.replica_watch, loadtest.summary, loadtest.chart, loadtest.plan, "
        "loadtest.server_view, loadtest.metrics_text, loadtest.prometheus_view\n"
        "heavy = [m for m in ('locust', 'gevent', 'matplotlib', 'tensorflow', "
        "'prometheus_client', 'kubernetes')"
        " if m in sys.modules]\n"
        "heavy += [m for m in sys.modules if m.split('.')[0] == 'ml' and m not in "
        "('ml', 'ml.contract', 'ml.contract.serving_metrics')]\n"  # the pod contract only
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=30)


def test_locust_failing_to_start_is_an_error(tmp_path, monkeypatch):
    broken = tmp_path / "broken_locustfile.py"
    broken.write_text("raise RuntimeError('this locustfile is broken')\n")
    monkeypatch.setattr(plan, "LOCUSTFILE", broken)
    with pytest.raises(RuntimeError, match="Locust failed") as exc:
        lt.run_loadtest(
            "http://127.0.0.1:9",  # never contacted
            MODEL,
            write_payload(tmp_path / "body.json"),
            tmp_path / "out",
            duration="5s",
            log=lambda _: None,
        )
    assert "this locustfile is broken" in str(exc.value)
    assert not (tmp_path / "out" / "summary.json").exists()


def test_real_run_summary(ok_run):
    summary, out, _hosts, _lines = ok_run
    assert summary["requests"] > 0
    assert summary["failures"] == 0
    assert summary["failure_ratio"] == 0.0
    assert summary["rps"] > 0
    for key in ("p50_ms", "p95_ms", "p99_ms"):
        assert isinstance(summary[key], float), key
    assert summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"]
    assert summary["duration_s"] == 3
    assert summary["concurrency"] == 5
    assert summary["spawn_rate"] == 5.0  # default: all users at once
    assert summary["model"] == MODEL
    assert summary["url"].startswith("http://127.0.0.1:")
    assert summary["started_at"].endswith("+00:00")
    assert summary["replicas"] == [] and summary["replicas_peak"] is None
    assert json.loads((out / "summary.json").read_text()) == summary
    assert ls.check(summary) == []


def test_real_run_reaches_the_endpoint_with_host_header(ok_run):
    _summary, _out, hosts, lines = ok_run
    assert hosts == {"fashion.default.example.com"}
    assert lines[0].startswith("loadtest: 5 users")
    assert "requests" in lines[-1]
