"""The model server's one error: a request it refuses, answered with a 4xx that says why.

:class:`ClientError` is what every part of the server raises for a client's mistake (the
protocol parsers, the body limit, the model's rejection of an undecodable image), and what
its error handlers turn into ``{"error": message}`` with ``status``. It is not a
``common.errors.DistmlError``: ``ml/`` is all the image holds and imports nothing from the
orchestration side (``tests/test_layout.py``), so the server's errors are a family of their
own. (``runtime.requests.RequestError``, the orchestration side's refusal of a task's
flags, is an unrelated class.)
"""

from __future__ import annotations


class ClientError(Exception):
    """A client mistake (HTTP's 4xx class): ``status`` is the HTTP status (400, 413 ...),
    ``message`` says what is wrong and how to fix it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
