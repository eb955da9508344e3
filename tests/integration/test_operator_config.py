"""integration/operator_config.py: the Operator's scrape job for a PodMonitor endpoint, whole
(its relabellings are run on discovered pods in tests/k8s/monitoring/test_prometheus_operator.py,
a ServiceMonitor's in test_prometheus_operator_services.py), and accepted by the real promtool
as part of a config."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from integration import operator_config
from k8s.monitoring import prometheus_operator
from k8s.providers.settings import Settings
from tests.support.relabel import relabel, sd_target

PROMTOOL = "/usr/bin/promtool"
S = Settings(image="-", namespace="team-a")


def monitors() -> list[dict]:
    return [o for o in prometheus_operator.operator_objects(S) if o["kind"] == "PodMonitor"]


def test_one_job_per_endpoint_named_as_the_operator_names_it_in_the_monitors_namespace():
    jobs = [operator_config.scrape_config(m) for m in monitors()]
    assert [j["job_name"] for j in jobs] == [
        "podMonitor/team-a/distml-predictor/0",
        "podMonitor/team-a/distml-training/0",
    ]
    for job in jobs:
        assert job["kubernetes_sd_configs"] == [
            {"role": "pod", "namespaces": {"names": ["team-a"]}}
        ]
        assert job["metrics_path"] == "/metrics" and "scrape_interval" not in job


def test_its_job_label_is_namespace_slash_podmonitor_not_the_job_name():
    job = operator_config.scrape_config(monitors()[0])
    pod = sd_target(
        "tf-mnist-predictor-1",
        port="8080",
        labels={"serving.kserve.io/inferenceservice": "tf-mnist"},
    )
    kept = relabel(job["relabel_configs"], pod)
    assert kept is not None and kept["job"] == "team-a/distml-predictor"


def test_an_unmodelled_field_fails_rather_than_guessing():
    monitor = monitors()[0]
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "10s"
    with pytest.raises(AssertionError, match="not modelled"):
        operator_config.scrape_config(monitor)


def test_a_service_monitor_s_unmodelled_field_fails_too():
    s = Settings(image="-", namespace="team-a", serving_mode="standard")
    (keda,) = [o for o in prometheus_operator.operator_objects(s)
               if o["metadata"]["name"] == prometheus_operator.KEDA]  # fmt: skip
    assert operator_config.honor_labels(keda) is True
    keda["spec"]["endpoints"][0]["metricRelabelings"] = []
    with pytest.raises(AssertionError, match="not modelled"):
        operator_config.service_monitor_relabelings(keda)


def test_promtool_accepts_the_jobs(tmp_path: Path):
    if not Path(PROMTOOL).is_file():
        pytest.skip(f"no promtool at {PROMTOOL}: apt-get install prometheus")
    jobs = [operator_config.scrape_config(m) for m in monitors()]
    for job in jobs:  # Debian's build has no Kubernetes discovery: a static target instead
        del job["kubernetes_sd_configs"]
        job["static_configs"] = [{"targets": ["10.0.0.7:8080"]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps({"scrape_configs": jobs}))
    run = subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
