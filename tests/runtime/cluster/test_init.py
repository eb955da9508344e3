"""runtime/cluster/__init__.py (ClusterRuntime): Ctrl-C on a cluster says what keeps running."""

from __future__ import annotations

import pytest

from tests.support.cluster_kit import make_ctx, runtime


def test_ctrl_c_on_a_cluster_says_the_jobs_keep_running(wd, fake, capsys):
    from invoke import Exit

    import tasks

    rt = runtime(make_ctx(fake, {}), wd, fake)

    def interrupted_train(*args, **kwargs):
        raise KeyboardInterrupt

    rt.train = interrupted_train.__get__(rt)  # a bound method, as tasks calls it
    with pytest.raises(Exit) as info:
        tasks._call(rt.train, ["cnn"])
    assert info.value.code == 130
    err = capsys.readouterr().err
    assert "jobs already submitted keep running in the cluster" in err
    assert "invoke down --keep-cluster" in err
