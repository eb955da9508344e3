"""A version's own failure: what the server answers with 500, never with 200 or a 4xx.

A request the server has checked (pixels of the right shape, finite and in range; images
that decode) and that a version's graph still rejects, or answers with something that is
not probabilities (``ml.model.servable.check_probabilities``), failed because of the
version, not the client. The server answers it as a server error naming the version, so it
counts against that version in ``distml_requests_total`` (its ``version`` label) and a
canary's gates see it: the stable would not have given that answer.
"""

from __future__ import annotations


class ModelError(Exception):
    """A version failed on a request the server had checked (HTTP 500, counted by version)."""
