"""The fast tier, set in one place: which tests start processes, TensorFlow or servers.

``HEAVY`` names them, as test files (``ml/test_train.py``) or single tests
(``test_layout.py::test_x``), relative to ``tests/``; ``tests/e2e`` and ``tests/image``
are heavy as a whole, and so is every test using one of ``HEAVY_FIXTURES``. Every one
of them gets the ``heavy`` marker. ``pytest --fast`` (``nox -s fast``) leaves them out,
and keeps the list honest: a test it runs that starts a process or imports TensorFlow,
Keras or KServe fails, naming this list. ``nox -s unit`` runs both kinds.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.abc import MetaPathFinder
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
HEAVY_DIRS = ("e2e", "image")
HEAVY: frozenset[str] = frozenset(
    {
        # TensorFlow, Keras or KServe at import, or real training and servers.
        "ml/test_train.py",
        "ml/test_serve_http.py",
        "ml/test_select.py",
        "ml/test_evaluate.py",
        "ml/test_export.py",
        "ml/test_pipeline.py",
        "ml/test_models.py",
        "ml/test_preemption.py",
        "ml/test_data_splits.py",
        "ml/test_contract_volume_lock.py",
        "ml/test_serve.py",
        "ml/server/test_routes.py",
        "ml/server/test_routes_fuzz.py",
        "ml/server/test_v2.py",
        "ml/server/test_v2_fuzz.py",
        "ml/server/test_kserve_adapter.py",
        "benchmarks/test_lifecycle.py",
        "tools/test_lint_shell.py",
        # runs minikube's node kubeadm wrapper (sh) with a stand-in binary
        "integration/kindbuild/test_minikube.py::test_kubeadm_init_skips_only_the_go126_proxy_check_and_passes_everything_on",
        "integration/kindbuild/test_minikube.py::test_init_hides_from_systemd_the_controllers_the_container_was_not_given",
        "support/test_tiers.py",  # a real pytest --fast, in a process of its own
        "runtime/test_sample_request.py",
        "ml/test_data.py::test_prepare_real_files",
        "ml/test_data.py::test_prepare_again_does_nothing",
        "ml/test_data.py::test_load_split_from_prepared_volume",
        "ml/test_data.py::test_load_split_falls_back_to_raw_files",
        "ml/test_ingest.py::test_ingest_cli_on_prepared_volume",
        "ml/test_loopback.py::test_the_shim_moves_wildcard_tcp_binds_to_loopback_and_leaves_the_rest",
        "ml/test_contract.py::test_importing_the_contract_imports_nothing_heavy",
        "ml/test_contract.py::test_serve_parses_the_serve_command",
        "ml/test_contract.py::test_the_event_file_check_runs_as_a_pod_runs_it",
        "ml/server/test_image_header.py::test_header_parser_reads_real_png_and_jpeg",
        "tools/test_upstream_lock.py",  # hashes every file of the local mirrors
        "integration/kindbuild/test_controllers.py::"
        "test_a_module_copy_gets_back_the_symlinks_and_ui_its_zip_dropped",  # runs git
        # Processes: the CLI, workers, Locust, TensorBoard, process groups.
        "common/test_process_group.py",
        "k8s/manifests/test_pods.py::test_commands_parse_with_the_pod_clis",
        "k8s/client/test_kube.py::test_constructing_api_kube_imports_and_loads_nothing",
        "k8s/install/test_preflight.py::test_run_command_never_raises",
        "k8s/install/test_operators_mirror.py::test_a_mirror_that_is_no_directory_exits_2_before_anything_runs",
        "integration/test_tenants.py::"
        "test_expect_refusal_fails_when_the_command_succeeds_or_says_otherwise",
        "loadtest/test_locust_process.py",
        "loadtest/test_main.py::test_failures_are_counted_and_fail_the_cli",
        "loadtest/test_replica_watch.py",
        "loadtest/test_runner.py::test_importing_loadtest_is_cheap",
        "ml/test_contract_metrics.py::test_every_query_is_promql_prometheus_accepts",
        "ml/test_contract_metrics.py::test_prometheus_refuses_a_query_with_a_syntax_error",
        "k8s/monitoring/grafana/test_dashboard_prometheus.py",  # the real server and Prometheus
        # makes the Prometheus Operator's CRDs with Go where the cache lacks them (once)
        "k8s/monitoring/test_prometheus_operator_crds.py",
        "ml/server/test_metrics_http.py",  # real servers
        "ml/server/test_clients.py",
        "loadtest/test_prometheus_view.py::"
        "test_a_real_run_read_from_a_real_prometheus_counts_what_locust_sent",
        "loadtest/test_server_view.py::test_every_code_the_server_answered_is_counted",
        "loadtest/test_server_view.py::test_a_server_that_counts_more_than_locust_sent_fails_the_run",
        "loadtest/test_server_view.py::test_a_server_without_metrics_has_no_view_and_the_run_stands",
        "loadtest/test_runner.py::test_locust_failing_to_start_is_an_error",
        "ml/server/test_instances.py::test_request_pixel_budget_is_summed_from_headers_before_decoding",
        "runtime/cluster/test_serving.py::test_deploy_selects_then_serves_and_prints_url_host_and_curl",
        "runtime/cluster/test_serving.py::test_loadtest_goes_through_the_ingress_and_checks_scale_out",
        "runtime/cluster/test_serving.py::test_tfserving_predictor_and_request_logger",
        "runtime/cluster/test_status.py::test_status_shows_cluster_operators_jobs_isvc_and_replicas",
        "runtime/cluster/test_up.py::test_invoke_dry_end_to_end_prints_and_creates_nothing",
        "runtime/local/test_jobs.py::test_a_dying_worker_restarts_the_whole_job_and_it_can_recover",
        "runtime/local/test_jobs.py::test_a_job_that_keeps_failing_stops_after_max_restarts",
        "runtime/local/test_jobs.py::test_a_job_whose_workers_all_succeed_succeeds",
        "runtime/local/test_jobs.py::test_a_killed_worker_is_reported_with_its_signal",
        "runtime/local/test_jobs.py::test_a_usage_or_data_error_fails_the_job_at_once_without_spending_restarts",
        "runtime/local/test_jobs.py::test_ctrl_c_stops_every_worker_at_once_on_one_deadline",
        "runtime/local/test_jobs.py::test_parallel_limit_and_invalid_runner_arguments",
        "runtime/local/test_jobs.py::test_the_deadline_stops_a_hanging_job",
        "runtime/local/test_jobs.py::test_workers_that_saved_on_sigterm_resume_without_spending_a_restart",
        "runtime/local/test_serving.py::test_a_server_that_does_not_come_up_is_not_left_behind",
        "runtime/local/test_tensorboard.py::test_a_real_tensorboard_shows_the_runs_and_ctrl_c_leaves_nothing",
        "runtime/local/test_tensorboard.py::test_a_tensorboard_that_dies_at_start_shows_its_log",
        "runtime/local/test_tensorboard.py::test_nothing_to_show_says_to_train_first",
        "runtime/local/test_training_sockets.py",
        "runtime/test_procs.py::test_a_recorded_pid_is_ours_only_with_its_start_time",
        "runtime/test_procs_pids.py",
        "tasks/test_chain.py",
        "tasks/test_chooser.py",
        "tasks/test_extras.py",
        "tasks/test_init.py",
        "test_layout.py::test_the_orchestration_side_loads_no_tensorflow_numpy_or_kserve",
        "test_typecheck.py::test_mypy_catches_a_session_calling_a_helper_without_an_argument",
    }
)
# Fixtures that start processes or TensorFlow (or, ``plan``, parse every upstream release
# file for 12 install plans: a minute of CPU): every test using one is heavy too.
HEAVY_FIXTURES = frozenset({"ok_run", "prepared_volume", "saved_models", "tf", "plan"})
BLOCKED_IMPORTS = ("tensorflow", "tf_keras", "keras", "kserve")
FIX = f"list it in HEAVY in {Path(__file__).relative_to(TESTS.parent)}"


def _relative(path: Path) -> str:
    return path.resolve().relative_to(TESTS).as_posix()


def is_heavy(nodeid_in_tests: str) -> bool:
    """``nodeid_in_tests``: ``ml/test_train.py::test_x[param]`` (relative to ``tests/``)."""
    file, _, name = nodeid_in_tests.partition("::")
    test = name.split("[", 1)[0]
    return file.split("/", 1)[0] in HEAVY_DIRS or file in HEAVY or f"{file}::{test}" in HEAVY


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="leave out the tests that start processes, TensorFlow or servers (HEAVY)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fast"):
        _build_font_cache()
        sys.meta_path.insert(0, _Blocker())


def _build_font_cache() -> None:
    """Before any test runs: matplotlib's font cache, which its first import on a machine
    builds by running ``fc-list`` (once, in ``$MPLCONFIGDIR`` or ``~/.cache/matplotlib``).
    That is the library setting itself up, not the code under test starting a process:
    done here, the first ``--fast`` run on a fresh machine passes as every later one does,
    and the guard (``_fast_means_no_processes``) still refuses every process a test
    starts. Warm, it reads one JSON file."""
    import matplotlib.font_manager  # noqa: F401


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``--fast`` heavy files are not even imported (their imports load TF)."""
    if not config.getoption("--fast") or not collection_path.is_relative_to(TESTS):
        return None
    relative = _relative(collection_path)
    return True if relative.split("/", 1)[0] in HEAVY_DIRS or relative in HEAVY else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    heavy = [
        item
        for item in items
        if is_heavy(_nodeid(item)) or HEAVY_FIXTURES & set(getattr(item, "fixturenames", ()))
    ]
    for item in heavy:
        item.add_marker(pytest.mark.heavy)
    if config.getoption("--fast") and heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if item not in heavy]


def _nodeid(item: pytest.Item) -> str:
    return f"{_relative(item.path)}::{item.nodeid.split('::', 1)[1]}"


@pytest.fixture(autouse=True)
def _fast_means_no_processes(request: pytest.FixtureRequest, monkeypatch) -> None:
    if not request.config.getoption("--fast"):
        return

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} starts a process under --fast: {FIX}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


class _Blocker(MetaPathFinder):
    """Under ``--fast``: importing TensorFlow, Keras or KServe fails, naming the fix."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".", 1)[0] in BLOCKED_IMPORTS:
            raise ImportError(f"--fast runs no {name}: the test module imports it; {FIX}")
        return None
