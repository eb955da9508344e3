"""runtime/local/serving.py: a load test needs a running server, and a server that does not come
up is stopped and not left behind."""

from __future__ import annotations

import sys

import psutil
import pytest

from runtime.local import UserError
from runtime.procs import cmdline, free_ports, is_alive, port_is_free
from runtime.requests import LoadtestRequest


def test_loadtest_needs_a_running_server(local_rt):
    with pytest.raises(UserError, match="run `invoke deploy` first"):
        local_rt.loadtest(LoadtestRequest())


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


def test_the_load_test_table_puts_the_server_s_count_beside_locust_s():
    from runtime.local.serving import summary_table

    summary = {"requests": 1000, "failures": 2, "rps": 33.3, "p50_ms": 4.2, "p95_ms": 9.0}
    server = {"requests": 1000, "by_code": {"200": 998, "500": 2}, "p50_ms": 3.1}
    assert summary_table({**summary, "p99_ms": 12.0, "server": server}).splitlines() == [
        "seen by  requests  failures   req/s  p50 ms  p95 ms  p99 ms",
        "-------  --------  ---------  -----  ------  ------  ------",
        "Locust   1000      2          33.3   4       9       12",
        "server   1000      2 not 200  -      3       -       -",
    ]
    absent = {"absent": "no /metrics"}
    assert len(summary_table({**summary, "server": absent}).splitlines()) == 3
