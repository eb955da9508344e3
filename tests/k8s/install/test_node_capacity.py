"""k8s.install.node_capacity: what each schedulable node of an existing cluster has left, and how
many TFJobs fit in it at once (colocated on the volume's node for ReadWriteOnce, each
worker where it fits for ReadWriteMany; the sum over nodes is never enough)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8s.install.capacity import Need
from k8s.install.node_capacity import free_by_node, jobs_that_fit, schedulable

CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


def node(name: str, cpu: str = "4", memory: str = "8Gi", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def pod(on: str | None, cpu: str, memory: str, phase: str = "Running", containers: int = 1):
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            for i in range(containers)
        ]
    }
    if on:
        spec["nodeName"] = on
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec, "status": {"phase": phase}}


# ------------------------------------------------------------------ free_by_node
def test_the_requests_of_the_pods_on_each_node_are_subtracted():
    nodes = [node("a"), node("b", cpu="2", memory="4Gi")]
    pods = [pod("a", "500m", "1Gi"), pod("a", "250m", "512Mi", containers=2), pod("b", "1", "1Gi")]
    assert free_by_node(nodes, pods) == {
        "a": Need(4000 - 500 - 500, 8192 - 1024 - 1024),
        "b": Need(1000, 3072),
    }


@pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown"])
def test_a_pod_not_finished_holds_its_requests(phase):
    assert free_by_node([node("a")], [pod("a", "1", "1Gi", phase)]) == {"a": Need(3000, 7168)}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_holds_nothing(phase):
    assert free_by_node([node("a")], [pod("a", "1", "1Gi", phase)]) == {"a": Need(4000, 8192)}


def test_an_unscheduled_pod_holds_nothing_on_any_node():
    assert free_by_node([node("a")], [pod(None, "3", "6Gi", "Pending")]) == {"a": Need(4000, 8192)}


def test_a_pod_without_requests_holds_nothing():
    bare = {"spec": {"nodeName": "a", "containers": [{"name": "x"}]}, "status": {}}
    assert free_by_node([node("a")], [bare]) == {"a": Need(4000, 8192)}


@pytest.mark.parametrize(
    "spec",
    [
        {"taints": [CONTROL_PLANE_TAINT]},  # kind's control-plane node
        {"taints": [{"key": "x", "value": "y", "effect": "NoExecute"}]},
        {"unschedulable": True},  # cordoned
    ],
)
def test_a_node_our_pods_cannot_go_to_is_skipped(spec):
    nodes = [node("control-plane", **spec), node("worker")]
    assert not schedulable(nodes[0])
    assert free_by_node(nodes, []) == {"worker": Need(4000, 8192)}


def test_a_prefer_no_schedule_taint_does_not_skip_a_node():
    soft = node("a", taints=[{"key": "x", "effect": "PreferNoSchedule"}])
    assert schedulable(soft)
    assert free_by_node([soft], []) == {"a": Need(4000, 8192)}


def test_a_node_without_allocatable_figures_is_skipped():
    blank = node("a")
    blank["status"] = {}
    assert free_by_node([blank, node("b")], []) == {"b": Need(4000, 8192)}


def test_an_init_container_request_counts_as_the_scheduler_counts_it():
    p = pod("a", "0", "0")
    p["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}
    ]
    assert free_by_node([node("a")], [p]) == {"a": Need(2000, 6144)}


# ------------------------------------------------------------------ jobs_that_fit
WORKER = Need(1000, 1024)


def test_colocated_counts_whole_jobs_on_the_roomiest_node_only():
    free = {"big": Need(4500, 10_000), "small": Need(2000, 10_000)}
    # big holds 4 workers (2 jobs of 2), small 2 (1 job): colocated uses big alone.
    assert jobs_that_fit(free, WORKER, 2, jobs=5, colocated=True) == 2
    assert jobs_that_fit(free, WORKER, 2, jobs=5, colocated=False) == 3


def test_a_job_whose_workers_fit_only_split_across_nodes():
    free = {"a": Need(1500, 4096), "b": Need(1500, 4096)}
    assert jobs_that_fit(free, WORKER, 2, jobs=1, colocated=True) == 0
    assert jobs_that_fit(free, WORKER, 2, jobs=1, colocated=False) == 1


def test_the_sum_over_nodes_is_not_enough():
    free = {"a": Need(1500, 1500), "b": Need(1500, 1500)}  # 3 CPU / ~3 GiB in all
    assert Need(3000, 3000).fits(Need(3000, 3072))  # the sum would hold 3 workers
    assert jobs_that_fit(free, WORKER, 3, jobs=1, colocated=False) == 0
    assert jobs_that_fit(free, WORKER, 3, jobs=1, colocated=True) == 0


def test_memory_limits_a_node_as_well_as_cpu():
    free = {"a": Need(8000, 1500)}  # room for 8 workers by CPU, 1 by memory
    assert jobs_that_fit(free, WORKER, 1, jobs=4, colocated=True) == 1
    assert jobs_that_fit(free, WORKER, 1, jobs=4, colocated=False) == 1


def test_spread_counts_only_whole_jobs():
    free = {"a": Need(3000, 8192), "b": Need(2000, 8192)}  # 5 workers in all
    assert jobs_that_fit(free, WORKER, 2, jobs=9, colocated=False) == 2


def test_never_more_than_the_jobs_asked_for():
    free = {"a": Need(64_000, 256_000)}
    assert jobs_that_fit(free, WORKER, 2, jobs=3, colocated=True) == 3
    assert jobs_that_fit(free, WORKER, 2, jobs=3, colocated=False) == 3


def test_no_schedulable_node_fits_nothing():
    assert jobs_that_fit({}, WORKER, 1, jobs=2, colocated=True) == 0
    assert jobs_that_fit({}, WORKER, 1, jobs=2, colocated=False) == 0


def test_an_overcommitted_node_fits_nothing():
    free = {"a": Need(-500, 4096)}
    assert jobs_that_fit(free, WORKER, 1, jobs=2, colocated=False) == 0


# ------------------------------------------------------------------ properties
needs = st.builds(Need, st.integers(0, 8000), st.integers(0, 16_384))
frees = st.dictionaries(
    st.sampled_from(["n1", "n2", "n3", "n4", "n5"]),
    st.builds(Need, st.integers(-1000, 16_000), st.integers(-1000, 32_768)),
    max_size=5,
)


@given(
    free=frees,
    worker=needs,
    grow=st.builds(Need, st.integers(0, 4000), st.integers(0, 8192)),
    workers=st.integers(1, 4),
    jobs=st.integers(0, 6),
)
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
def test_fitting_is_bounded_monotone_and_colocated_never_beats_spread(
    free, worker, grow, workers, jobs
):
    bigger = worker + grow
    for colocated in (True, False):
        n = jobs_that_fit(free, worker, workers, jobs, colocated=colocated)
        assert 0 <= n <= jobs
        assert jobs_that_fit(free, bigger, workers, jobs, colocated=colocated) <= n
    together = jobs_that_fit(free, worker, workers, jobs, colocated=True)
    assert together <= jobs_that_fit(free, worker, workers, jobs, colocated=False)
