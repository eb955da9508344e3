"""runtime/cluster/volume.py: the loader pod that must run before files are copied into the
volume: a failed one stops at once with its events, one that never runs times out at its
deadline (on common.poll: a fake clock, no sleeping); either way it is deleted."""

from __future__ import annotations

import pytest

from ml.contract import RAW_FILES
from runtime.cluster import ClusterError
from runtime.requests import UpRequest
from tests.support.cluster_kit import k3d_results, make_ctx, runtime, set_up

LOADER = ("v1", "Pod", "kubeflow", "distml-data-loader")


def _source(tmp_path):
    src = tmp_path / "data"
    src.mkdir()
    for name in RAW_FILES:
        (src / name).write_bytes(b"x")
    return src


def _loader_stays(fake, phase: str) -> None:
    """The loader pod reaches ``phase`` and stays there (before the controller runs it)."""

    def hook(_t: float) -> None:
        if LOADER in fake.objects and not fake.objects[LOADER].get("status"):
            fake.set_status(*LOADER, {"phase": phase})

    fake.clock.hooks.insert(0, hook)


def _offline_up_again(wd, fake, tmp_path):
    """`up --source-dir` on a set-up cluster whose dataset is gone: the loader pod is next."""
    set_up(wd, fake)
    fake.remove("batch/v1", "Job", "distml-ingest", "kubeflow")
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    return c, runtime(c, wd, fake).up, _source(tmp_path)


def test_a_failed_loader_pod_stops_at_once_with_its_events_and_is_deleted(wd, fake, tmp_path):
    c, up, src = _offline_up_again(wd, fake, tmp_path)
    _loader_stays(fake, "Failed")
    fake.add_event("kubeflow", "distml-data-loader", "FailedMount", "volume is not bound")
    started = fake.clock.now
    with pytest.raises(ClusterError) as info:
        up(UpRequest(source_dir=str(src)))
    assert str(info.value) == (
        "pod distml-data-loader is Failed (it will not run) (events: FailedMount: volume is not "
        "bound); check `kubectl --context k3d-dist-ml -n kubeflow describe pod "
        "distml-data-loader`"
    )
    assert fake.clock.now - started <= 2  # one poll, not the 300 s deadline
    assert LOADER in fake.deleted  # the pod is removed on the way out
    assert not [cmd for cmd in c.run.call_args_list if " cp " in cmd.args[0]]


def test_a_loader_pod_that_never_runs_times_out_at_its_deadline(wd, fake, tmp_path):
    _, up, src = _offline_up_again(wd, fake, tmp_path)
    _loader_stays(fake, "Pending")
    started = fake.clock.now
    with pytest.raises(ClusterError, match=r"^pod distml-data-loader is Pending after 300 s; "):
        up(UpRequest(source_dir=str(src)))
    assert LOADER in fake.deleted
    assert fake.clock.now - started == 300  # the loader's deadline; nothing else waited
    assert fake.clock.sleeps[-150:] == [2] * 150  # polled every 2 s
