"""A full disk, for the tests of what a task does when a write fails with ENOSPC."""

from __future__ import annotations

import errno


def raise_disk_full(*_):
    """Stands in for any write: fails as a full disk does."""
    raise OSError(errno.ENOSPC, "No space left on device")
