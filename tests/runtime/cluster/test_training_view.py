"""runtime/cluster/training_view.py: `invoke status` on a cluster shows each TFJob that trains
now, read through the API server's proxy from a real Prometheus (Debian's 2.42) scraping
real workers' pages (``ml.training.train_metrics`` on loopback): a job whose workers finished shows
no row; a Prometheus that cannot be read is one row saying why."""

from __future__ import annotations

import threading

from k8s.monitoring import prometheus
from k8s.monitoring.prometheus import PrometheusRef
from ml.training.train_metrics import TrainMetrics
from runtime.procs import free_ports
from tests.runtime.cluster.test_monitoring import NS, up
from tests.support.cluster_kit import k3d_results, make_ctx, runtime
from tests.support.loopback_prometheus import loopback_prometheus

REF = PrometheusRef(NS, prometheus.OWN_SERVICE, prometheus.PORT)


def status_lines(wd, fake) -> list[str]:
    lines: list[str] = []
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake, lines=lines).status() == 0
    # (not "training operator": the operator's row)
    return [line for line in lines if line.startswith(("training train-", "training figures"))]


def test_a_job_that_trains_now_has_a_row_one_that_finished_has_none(
    wd, fake, tmp_path, monkeypatch
):
    up(wd, fake)
    ports = free_ports(3)
    workers = []
    for (job, replica), port in zip([("train-cnn", 0), ("train-cnn", 1), ("train-bn", 0)],
                                    ports, strict=True):  # fmt: skip
        monkeypatch.setenv("DISTML_METRICS_ADDRESS", f"127.0.0.1:{port}")
        tm = TrainMetrics("cnn", replica, job=job)
        tm.serve()
        tm.started()
        tm.read_loss(0.42)
        workers.append(tm)
    workers[2].finished()  # train-bn is done: its worker lingers, not training
    stop = threading.Event()

    def step() -> None:  # 64 examples every 50 ms on each worker of train-cnn
        while not stop.wait(0.05):
            for tm in workers[:2]:
                tm.steps_done(1, 0.05, 64)

    stepper = threading.Thread(target=step, daemon=True)
    stepper.start()
    pods = {f"w{i}": f"127.0.0.1:{p}" for i, p in enumerate(ports)}
    try:
        with loopback_prometheus(tmp_path / "prom", pods, NS, "tf-mnist") as prom:
            prom.serve_on(fake, REF)
            prom.wait_for("six scrapes of every worker", lambda: len(
                prom.query('count_over_time(distml_train_steps_total{tfjob="train-cnn"}[1m]) >= 6'
                           )) == 2)  # fmt: skip
            lines = status_lines(wd, fake)
    finally:
        stop.set()
        for tm in workers:
            tm.close()
    (row,) = lines
    assert row.startswith("training train-cnn") and row.endswith("2 worker(s) training")
    rate = float(row.split()[2])
    # About 2 x 64 / 0.05 = 2560 examples/s, over the last four of the 1 s scrapes.
    assert 1500 < rate < 3500 and "(last 4s)" in row, row
    assert "loss 0.4200" in row


def test_a_prometheus_that_cannot_be_read_is_one_row(wd, fake):
    up(wd, fake)  # no Service answers behind the proxy
    (row,) = status_lines(wd, fake)
    assert row.startswith("training figures") and "is not there" in row
