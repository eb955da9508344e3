"""The cluster runtime's one error (a leaf: every room raises it, and it imports none)."""

from __future__ import annotations

from common.errors import DistmlError


class ClusterError(DistmlError):
    """A cluster step failed; the message says what, its last status and what to run next."""
