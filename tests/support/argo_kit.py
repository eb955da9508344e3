"""`up --with-argo` on the in-memory cluster: the set-up the cluster runtime's up and down
tests with Argo start from."""

from __future__ import annotations

from runtime.requests import UpRequest
from tests.support.cluster_kit import k3d_results, make_ctx, runtime


def up_with_argo(wd, fake, lines=None):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake, lines=lines).up(UpRequest(with_argo=True)) == 0
    return c
