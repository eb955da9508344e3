"""The CPU request settings (``cluster.worker_cpu``, ``cluster.predictor_cpu``): what they
change in the settings and in capacity planning, and what they refuse."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from k8s.install import capacity
from k8s.providers.settings import CPU_REQUEST_SETTINGS, Settings, quantity, with_cpu_requests

BASE = Settings(image="distml:abc", provider="kind", serving_mode="standard")


def test_an_empty_setting_keeps_the_built_in_request():
    assert with_cpu_requests(BASE, dict.fromkeys(CPU_REQUEST_SETTINGS, "")) == BASE


def test_each_setting_changes_only_its_pods_cpu_request():
    s = with_cpu_requests(BASE, {"worker_cpu": "100m"})
    assert s.worker_resources.cpu_request == "100m"
    assert s.worker_resources.cpu_limit == BASE.worker_resources.cpu_limit
    assert s.worker_resources.memory_request == BASE.worker_resources.memory_request
    assert s.predictor_resources == BASE.predictor_resources


def test_smaller_requests_let_more_jobs_run_at_once_on_a_small_node():
    # What the scheduler counts is what k8s.install.capacity counts: a 2-CPU node.
    node = capacity.Need(cpu_m=2000, memory_mi=23 * 1024)
    small = with_cpu_requests(BASE, {"worker_cpu": "50m", "predictor_cpu": "50m"})
    assert capacity.jobs_at_once(node, small) > capacity.jobs_at_once(node, BASE)


def test_an_unknown_setting_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown setting cluster\.gpu_cpu; valid: worker_cpu"):
        with_cpu_requests(BASE, {"gpu_cpu": "1"})


@given(st.text(max_size=12))
def test_any_text_is_a_request_or_a_clear_refusal(value):
    try:
        s = with_cpu_requests(BASE, {"predictor_cpu": value})
    except ValueError as e:
        assert "cluster.predictor_cpu (INVOKE_CLUSTER_PREDICTOR_CPU)" in str(e)
    else:
        given = value.strip() or BASE.predictor_resources.cpu_request
        assert s.predictor_resources.cpu_request == given


@given(st.text(alphabet="0123456789.eE+-mKMGTi ", max_size=10))
@example("1E1000000")  # found by this test on a fresh machine: decimal.Overflow
def test_a_quantity_is_a_number_or_a_value_error(text):
    try:
        assert quantity(text) >= 0
    except ValueError as e:
        assert "not a Kubernetes quantity" in str(e)
