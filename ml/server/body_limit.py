"""ASGI middleware refusing request bodies over a byte limit (413), before they are held.

Pure ASGI (no kserve or web framework import): the size is checked from Content-Length
before anything is read, and counted while reading (chunked transfer).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ml.server.client_error import ClientError


class BodyLimitMiddleware:
    """ASGI middleware: 413 for bodies over ``max_bytes``.

    Checked from Content-Length before anything is read, and while reading (chunked
    transfer), so an oversized body is never held in memory.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self, size: str) -> ClientError:
        return ClientError(
            413,
            f"the request body is {size}, more than this server's limit of "
            f"{self.max_bytes:,} bytes (--max-body-bytes); send fewer or smaller images",
        )

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if (
            declared is not None
            and (declared.isascii() and declared.isdigit())
            and int(declared) > self.max_bytes
        ):
            await _send_error(send, self._too_large(f"{int(declared):,} bytes"))
            return
        received = 0
        started = False

        async def limited_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise self._too_large(f"over {self.max_bytes:,} bytes (chunked)")
            return message

        async def watched_send(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except ClientError as e:  # raised while reading, outside a handler's reach
            if started:
                raise
            await _send_error(send, e)


async def _send_error(send: Callable, error: ClientError) -> None:
    body = json.dumps({"error": error.message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
