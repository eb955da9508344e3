"""tools.upstream_lock: regenerated from the local mirrors (``DISTML_UPSTREAM_DIR`` and
``DISTML_CRD_DIR``, every file checked against its sha256), the lock is byte for byte the
committed ``k8s/install/upstream.lock.json``; skipped when the mirrors are not there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from k8s.install import upstream_files as uf
from tools import upstream_lock

# Heavy: hashes every file of the local mirrors (tests/support/tiers.py).
pytestmark = pytest.mark.heavy
#: The mirrors named when the tests started.
MIRRORS = {env: os.environ.get(env) for env in uf.MIRROR_ENV.values()}


def test_the_lock_is_what_the_mirrors_hold():
    """Regenerated from the mirrors (their every file checked against its sha256), the lock
    is byte for byte the committed one."""
    upstream, crds = MIRRORS.values()
    if not (upstream and crds):
        pytest.skip(f"no local mirrors to compare the lock with: set {' and '.join(MIRRORS)}")
    assert upstream_lock.lock_text(Path(upstream), Path(crds)) == uf.LOCK_FILE.read_text()
