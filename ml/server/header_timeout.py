"""A deadline for each request's line and headers, which uvicorn does not have.

uvicorn (0.54) bounds only the idle time between requests (``timeout_keep_alive``); nothing
bounds how long a request's line and headers take to arrive, so a client that sends them a
byte at a time holds its connection forever, and enough such clients hold all of the
server's connections (Slowloris). :func:`header_timeout_protocol` is uvicorn's httptools
HTTP protocol (the one it picks when httptools is installed, as with KServe) with a timer:
armed when the connection opens and when a request's first byte arrives, cancelled when the
request's headers are complete. When it fires, the connection is closed, after a 408 that
says why if part of a request had arrived (a connection that sent nothing is just closed).

Both answers the protocol gives itself, that 408 and uvicorn's 400 for bytes that are not
HTTP, are reported to ``on_answer(status, seconds)`` (the metrics: no route sees them), and
each request's scope holds when its first byte arrived (:data:`FIRST_BYTE`), from which the
metrics time it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: ``on_answer(status, seconds)``: the protocol answered a request itself.
OnAnswer = Callable[[int, float], None]
#: The ASGI scope key of the ``time.perf_counter()`` at which the request's first byte came.
FIRST_BYTE = "distml.first_byte"


def _ignore(status: int, seconds: float) -> None:
    pass


def header_timeout_protocol(
    seconds: float, on_answer: OnAnswer = _ignore
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a ``seconds`` deadline for request headers, for
    ``uvicorn.Config(http=...)``; ``on_answer`` hears of the 408s and 400s it sends."""

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        header_timeout = seconds
        _timer: asyncio.TimerHandle | None = None
        _partial = False  # part of a request (not all its headers) has arrived
        _began = 0.0  # when the request being read began (time.perf_counter)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._partial = True
            # An ASGI scope is a dict a server may add keys to; uvicorn's HTTPScope
            # TypedDict lists only the specification's.
            scope = cast("dict[str, Any]", self.scope)
            self._began = scope[FIRST_BYTE] = time.perf_counter()
            self._arm()

        def on_headers_complete(self) -> None:
            self._partial = False
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._timer is None:
                self._timer = self.loop.call_later(self.header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _headers_late(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            if self._partial:
                self.transport.write(_response_408(self.header_timeout))
                on_answer(408, time.perf_counter() - self._began)
            self.transport.close()

        def send_400_response(self, msg: str) -> None:
            super().send_400_response(msg)
            on_answer(400, time.perf_counter() - self._began if self._partial else 0.0)

    return HeaderTimeoutProtocol


def _response_408(seconds: float) -> bytes:
    body = json.dumps(
        {
            "error": f"the request line and headers did not all arrive within {seconds:g} s "
            "(--request-header-timeout); send them without pauses"
        }
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body
