"""ml/contract_train_metrics.py: every training query is PromQL that Debian's real Prometheus
2.42 accepts, and selects one namespace's workers by the labels the workers write (never
by ``job``: that is the scrape job's)."""

from __future__ import annotations

import json

from ml import contract_train_metrics as tmx
from tests.support.loopback_prometheus import loopback_prometheus

NS = "team-a"
QUERIES = {
    "throughput": tmx.throughput(NS, "2m"),
    "step_time_quantile": tmx.step_time_quantile(NS, 0.99, "2m"),
    "loss": tmx.loss(NS),
    "stalled": tmx.stalled(NS, "10m"),
}


def test_every_query_is_promql_prometheus_accepts(tmp_path):
    with loopback_prometheus(tmp_path, {}, NS, "none") as prom:
        for name, query in QUERIES.items():
            answer = json.loads(prom.get("api/v1/query", {"query": query}))
            assert answer["status"] == "success", (name, answer)


def test_the_queries_read_one_namespace_by_the_workers_labels():
    for name, query in QUERIES.items():
        assert f'namespace="{NS}"' in query, name
        assert "job=" not in query
        assert f"by ({tmx.JOB_LABEL}" in query or name == "stalled"
    assert tmx.selector(NS, "train-cnn") == f'namespace="{NS}",{tmx.JOB_LABEL}="train-cnn"'
    assert tmx.LABELS == (tmx.JOB_LABEL, "model", "replica")
