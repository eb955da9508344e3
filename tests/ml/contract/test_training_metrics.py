"""ml/contract/training_metrics.py: every training query is PromQL that Debian's real Prometheus
2.42 accepts, and selects one namespace's workers by the labels the workers write (never
by ``job``: that is the scrape job's)."""

from __future__ import annotations

import json

import pytest

from ml.contract import training_metrics as tmx
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


# ------------------------------------------------------------------ what they answer
def promtool_test(tmp_path, series: list[tuple[str, str]], cases: list[dict]) -> None:
    """``promtool test rules`` (Debian's prometheus package) of the queries ``cases`` over
    ``series`` (name{labels}, values) sampled every minute; the test fails with its output."""
    import shutil
    import subprocess

    import yaml

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("no promtool: apt-get install prometheus")
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "promql_expr_test": cases,
            }
        ],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(test))
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def worker(job: str, model: str, replica: int, metric: str) -> str:
    return f'{metric}{{namespace="{NS}",tfjob="{job}",model="{model}",replica="{replica}"}}'


def test_throughput_and_scaling_efficiency_against_a_one_worker_baseline(tmp_path):
    # train-solo: one worker at 100 examples/s; train-pair: two workers at 90 each, so
    # 180 / (2 x 100) = 0.9 of perfect scaling. Another model has no baseline: no answer.
    series = [
        (worker("train-solo", "cnn", 0, tmx.EXAMPLES_TOTAL), "0+6000x20"),
        (worker("train-solo", "cnn", 0, tmx.EXAMPLES_PER_SECOND), "100x20"),
        (worker("train-solo", "cnn", 0, tmx.TRAINING), "1x20"),
        *((worker("train-pair", "cnn", r, tmx.EXAMPLES_TOTAL), "0+5400x20") for r in (0, 1)),
        *((worker("train-pair", "cnn", r, tmx.TRAINING), "1x20") for r in (0, 1)),
        *((worker("train-bn", "cnn_batchnorm", r, tmx.EXAMPLES_TOTAL), "0+600x20") for r in (0, 1)),
        *((worker("train-bn", "cnn_batchnorm", r, tmx.TRAINING), "1x20") for r in (0, 1)),
    ]  # fmt: skip
    at = {"eval_time": "10m"}
    promtool_test(tmp_path, series, [
        {"expr": tmx.throughput(NS, "5m"), **at, "exp_samples": [
            {"labels": '{tfjob="train-solo",model="cnn"}', "value": 100},
            {"labels": '{tfjob="train-pair",model="cnn"}', "value": 180},
            {"labels": '{tfjob="train-bn",model="cnn_batchnorm"}', "value": 20},
        ]},
        {"expr": tmx.scaling_efficiency(NS, "5m", "30m"), **at, "exp_samples": [
            {"labels": '{tfjob="train-solo",model="cnn"}', "value": 1},
            {"labels": '{tfjob="train-pair",model="cnn"}', "value": 0.9},
        ]},
    ])  # fmt: skip


def test_a_worker_still_training_whose_steps_stopped_is_stalled(tmp_path):
    series = [
        (worker("train-a", "cnn", 0, tmx.STEPS_TOTAL), "0+10x5 50x15"),  # stuck from 5m
        (worker("train-a", "cnn", 0, tmx.TRAINING), "1x20"),
        (worker("train-b", "cnn", 0, tmx.STEPS_TOTAL), "0+10x5 50x15"),  # done, not stuck
        (worker("train-b", "cnn", 0, tmx.TRAINING), "1x5 0x15"),
        (worker("train-c", "cnn", 0, tmx.STEPS_TOTAL), "0+10x20"),  # moving
        (worker("train-c", "cnn", 0, tmx.TRAINING), "1x20"),
    ]
    promtool_test(tmp_path, series, [
        {"expr": tmx.stalled(NS, "10m"), "eval_time": "16m", "exp_samples": [
            {"labels": f'{{namespace="{NS}",tfjob="train-a",model="cnn",replica="0"}}',
             "value": 0},
        ]},
    ])  # fmt: skip


def test_the_baseline_is_a_one_worker_jobs_mean_and_never_a_pair_whose_worker_ended(tmp_path):
    # train-solo: one worker at 100 examples/s for its first 11 readings, then 140 for 10
    # (mean 2500 / 21 = 119.05; peak 140). train-pair: two workers at 90 each; its worker 1
    # ended at 10m, worker 0 goes on alone at 90: an instant count of 1 took it for a
    # baseline of 90 (and a peak, 140 for the solo job).
    series = [
        (worker("train-solo", "cnn", 0, tmx.EXAMPLES_TOTAL), "0+6000x10 60000+8400x10"),
        (worker("train-solo", "cnn", 0, tmx.EXAMPLES_PER_SECOND), "100x10 140x10"),
        (worker("train-solo", "cnn", 0, tmx.TRAINING), "1x20"),
        (worker("train-pair", "cnn", 0, tmx.EXAMPLES_TOTAL), "0+5400x25"),
        (worker("train-pair", "cnn", 0, tmx.EXAMPLES_PER_SECOND), "90x25"),
        (worker("train-pair", "cnn", 0, tmx.TRAINING), "1x25"),
        (worker("train-pair", "cnn", 1, tmx.EXAMPLES_TOTAL), "0+5400x10 stale"),
        (worker("train-pair", "cnn", 1, tmx.EXAMPLES_PER_SECOND), "90x10 stale"),
        (worker("train-pair", "cnn", 1, tmx.TRAINING), "1x9 0 stale"),
    ]
    at = {"eval_time": "20m"}
    # Now: the solo job at 140 over its mean, 1.18; the pair's one reporting worker at 90
    # over the same mean, 0.76.
    promtool_test(tmp_path, series, [
        {"expr": f"round({tmx.scaling_efficiency(NS, '5m', '30m')}, 0.01)", **at,
         "exp_samples": [
            {"labels": '{tfjob="train-solo",model="cnn"}', "value": 1.18},
            {"labels": '{tfjob="train-pair",model="cnn"}', "value": 0.76},
        ]},
    ])  # fmt: skip
