"""ASGI middleware: the V1 predict route of one model answered directly, in front of the app.

``POST /v1/models/<name>:predict`` with a JSON body (or none declared) and no CloudEvents
headers goes straight to ``answer(body) -> (status, JSON object)``; everything else (other
routes, other content types, binary CloudEvents) passes to the wrapped app unchanged. The
web framework's routing, dependency and middleware layers cost about as much per request as
the model call itself on a small model (benchmarks/results/serving-attempts.md); this route
skips them. Pure ASGI: no kserve or web framework import.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

JSON = b"application/json"
Answer = Callable[[bytes], Awaitable[tuple[int, Any]]]


class FastPredictRoute:
    """Answers ``POST /v1/models/<model_name>:predict`` with ``answer`` (module doc)."""

    def __init__(self, app: Any, model_name: str, answer: Answer) -> None:
        self.app = app
        self.path = f"/v1/models/{model_name}:predict"
        self.answer = answer

    def _mine(self, scope: dict) -> bool:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            return False
        for name, value in scope["headers"]:
            if name.startswith(b"ce-"):
                return False  # a binary CloudEvent: KServe's own path
            if name == b"content-type" and value.split(b";")[0].strip() != JSON:
                return False
        return True

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if not self._mine(scope):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return  # the client went away
        status, content = await self.answer(body)
        body = json.dumps(content, separators=(",", ":")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", JSON),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def read_body(receive: Callable) -> bytes | None:
    """A request's whole body from its ASGI messages; None when the client went away."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
