"""The integration run's plan (integration/kind_run.py): its settings and its steps."""

from __future__ import annotations

import pytest

from integration import kind_run
from k8s.install import capacity
from k8s.providers.settings import Settings, with_cpu_requests
from ml.contract import MODEL_TYPES


def test_the_run_asks_for_small_cpu_requests_and_passes_local_copies_on(monkeypatch):
    monkeypatch.delenv("DISTML_KIND_NODE_IMAGE", raising=False)
    monkeypatch.delenv("DISTML_UPSTREAM_DIR", raising=False)
    online = kind_run.env(None)
    assert online["INVOKE_CLUSTER_WORKER_CPU"] == online["INVOKE_CLUSTER_PREDICTOR_CPU"] == "100m"
    assert "INVOKE_CLUSTER_NODE_IMAGE" not in online
    assert "INVOKE_CLUSTER_MANIFEST_MIRROR" not in online
    monkeypatch.setenv("DISTML_KIND_NODE_IMAGE", "distml-kind/node:v1.33.1")
    monkeypatch.setenv("DISTML_UPSTREAM_DIR", "/mirror")
    offline = kind_run.env("/data")
    assert offline["INVOKE_CLUSTER_NODE_IMAGE"] == "distml-kind/node:v1.33.1"
    assert offline["INVOKE_CLUSTER_MANIFEST_MIRROR"] == "/mirror"
    assert offline["DISTML_DATA_DIR"] == "/data"
    # --offline's own node image wins over the variable.
    built = kind_run.env(None, "distml-kind/node:v1.33.1-stack")
    assert built["INVOKE_CLUSTER_NODE_IMAGE"] == "distml-kind/node:v1.33.1-stack"


@pytest.mark.parametrize("monitoring", [False, True])
def test_the_runs_requests_fit_this_machines_two_cpus_with_or_without_monitoring(monitoring):
    # What `up`'s preflight asks of a one-node kind cluster on 2 CPUs (the CI machine):
    # the stack, monitoring's pods and one job beside a predictor, at the run's requests.
    settings = with_cpu_requests(
        Settings(
            image="distml:x", provider="kind", serving_mode="standard", with_monitoring=monitoring
        ),
        {"worker_cpu": kind_run.CPU_REQUEST, "predictor_cpu": kind_run.CPU_REQUEST},
    )
    assert capacity.requirement(settings, 1).fits(capacity.Need(2000, 23 * 1024))


def test_the_chain_trains_serves_loads_recovers_and_rolls_back_in_that_order():
    plan = kind_run.steps("standard", "/data")
    names = [s[1] if s[0] == "invoke" else s[2].rsplit(".", 1)[1] for s in plan]
    assert names == [
        "up",
        "train-all",
        "deploy",
        "foreign_down",  # a fresh work dir's `down` keeps the cluster and the service
        "loadtest",
        "recovery",
        "recovery",
        "deploy",
        "rollback",
        "status",
    ]
    assert plan[0][-2:] == ["--source-dir", "/data"]
    assert "--expect-scale-out" in plan[4]
    faults = {tuple(s[3:]) for s in plan if s[:3] == ["python", "-m", "integration.recovery"]}
    assert {f for f, _ in faults} == {"delete-pod", "sigterm"}
    assert {m for _, m in faults} <= set(MODEL_TYPES)  # models the image knows
    assert len({m for _, m in faults}) == 2  # one job per fault: neither sees the other's


def test_the_argo_run_is_one_workflow_between_up_and_the_load():
    plan = kind_run.steps("standard", None, argo=True)
    assert [s[1] for s in plan] == ["up", "workflow", "loadtest"]
    assert "--with-argo" in plan[0] and "--watch" in plan[1]


@pytest.mark.parametrize("argo", [False, True])
def test_offline_up_builds_a_missing_project_image_from_the_local_base(argo):
    online = kind_run.steps("standard", "/data", argo=argo)
    offline = kind_run.steps("standard", "/data", argo=argo, offline=True)
    (up,) = [s for s in offline if s[1] == "up"]
    assert up[up.index("--base") + 1] == "local"  # never FROM python:... on Docker Hub
    assert [a for a in up if a not in kind_run.LOCAL_BASE] == online[0]
    assert all("--base" not in s for s in online)  # online: the image's own base, pulled
    assert offline[1:] == online[1:]


def _names(plan: list[list[str]]) -> list[str]:
    """Each step's task, or module (with its first flag)."""
    return [s[1] if s[0] == "invoke" else " ".join([s[2].rsplit(".", 1)[1], *s[3:4]]) for s in plan]


def test_monitoring_scales_on_concurrency_and_checks_targets_the_count_and_the_dashboard():
    plan = kind_run.steps("standard", "/data", offline=True, monitoring=True)
    assert _names(plan) == [
        "up",
        "train-all",
        "deploy",
        "foreign_down",
        "dashboard_check --targets",  # every predictor scraped, before the load
        "loadtest",
        # every panel has data, right after the load; the training row and the workers'
        # targets too (train-all ran before it)
        "dashboard_check --training",
        "alert_fault",  # every predictor stopped: its alert fires, then clears
        "recovery delete-pod",
        "recovery sigterm",
        "deploy",
        "rollback",
        "status",
        # canary releases under load: a good version promoted, a bad one rolled back
        "canary_check",
        # deploy, loadtest and status again, against an Operator-style Prometheus
        "operator_prometheus",
        # a slow and an erroring version rolled back, the stable's p99 unmoved
        "canary_faults",
    ]
    assert plan[0][-1] == "--with-monitoring" and "--base" in plan[0]
    deploys = [s for s in plan if s[:2] == ["invoke", "deploy"]]
    assert all(s[-2:] == ["--scale-metric", "concurrency"] for s in deploys)
    load = plan[5]
    # The load test's own check: 5 users, scale-out expected; with Prometheus on the
    # cluster it also fails when the server's count is more than 1% from Locust's.
    assert load[load.index("--concurrency") + 1] == "5" and "--expect-scale-out" in load


def test_without_monitoring_the_plan_is_as_before():
    watched = kind_run.steps("standard", "/data", monitoring=True)
    plain = kind_run.steps("standard", "/data")
    unwatched = [
        [a for a in s if a not in (*kind_run.MONITORING_UP, *kind_run.MONITORING_DEPLOY)]
        for s in watched
        if s[:3]
        not in (
            kind_run.DASHBOARD_CHECK[:3],
            kind_run.ALERT_FAULT,
            kind_run.CANARY_CHECK,
            kind_run.CANARY_FAULTS,
            kind_run.OPERATOR_LIFECYCLE,
        )
    ]
    assert unwatched == plain
    assert not any("monitoring" in " ".join(s) or "dashboard" in " ".join(s) for s in plain)


def test_the_argo_run_with_monitoring_checks_around_the_same_load_then_ends_in_a_canary():
    plan = kind_run.steps("standard", None, argo=True, monitoring=True)
    assert _names(plan) == ["up", "workflow", "dashboard_check --targets", "loadtest",
                            "dashboard_check --training", "alert_fault",
                            "canary_check --workflow"]  # fmt: skip
    assert {"--with-argo", "--with-monitoring"} <= set(plan[0])


def test_the_monitoring_steps_name_modules_and_a_service_that_exist():
    import importlib.util

    from k8s.monitoring import prometheus

    steps = (kind_run.TARGETS_CHECK, kind_run.DASHBOARD_CHECK, kind_run.ALERT_FAULT,
             kind_run.CANARY_CHECK, kind_run.WORKFLOW_CANARY_CHECK,
             kind_run.CANARY_FAULTS, kind_run.OPERATOR_LIFECYCLE)  # fmt: skip
    for step in steps:
        assert importlib.util.find_spec(step[2]) is not None, step
    own = f"services/{prometheus.OWN_SERVICE}:{prometheus.PORT}/proxy/{prometheus.TARGETS_PATH}"
    assert kind_run.PROMETHEUS_TARGETS.endswith(own)
    assert f"/namespaces/{kind_run.NAMESPACE}/" in kind_run.PROMETHEUS_TARGETS
    command, _ = kind_run.diagnostics("invoke", kind_run.workdir())["prometheus-targets"]
    assert command[-2:] == ["--raw", kind_run.PROMETHEUS_TARGETS]


def test_a_fresh_work_dirs_down_comes_after_the_first_deploy_and_before_the_load():
    plan = kind_run.steps("standard", "/data")
    at = plan.index(kind_run.FOREIGN_DOWN)
    assert plan[at - 1][:2] == ["invoke", "deploy"] and plan[at + 1][1] == "loadtest"
    assert plan.count(kind_run.FOREIGN_DOWN) == 1
    assert plan.index(plan[at - 1]) == at - 1  # the first deploy: the service is running
    import importlib.util

    assert importlib.util.find_spec(kind_run.FOREIGN_DOWN[2]) is not None
