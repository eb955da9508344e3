"""The base of every error a user can fix. A leaf: it imports nothing of ours."""

from __future__ import annotations


class DistmlError(RuntimeError):
    """A problem a user can fix; the message says what is wrong and how to fix it.

    ``tasks/`` prints it as ``error: <message>`` and exits non-zero.
    """
