"""ASGI middleware: a canary's share of requests forwarded to the canary's own server.

When the canary runs in a process of its own (``ml/server/canary.py``: the weight file
names its URL), this server answers the stable's share itself and forwards the canary's
as it came: the method, path, query, headers (hop-by-hop ones dropped) and body, to the
same path on the canary's server, and its answer back unchanged. The route and the
decision are this server's: ``POST /v1/models/<name>:predict`` and
``POST /v2/models/<name>/infer`` take the split's turn; a V2 infer naming the canary's
version (``/v2/models/<name>/versions/<N>/infer``, the accuracy sample) always goes there.
The request is counted here, under the canary's version, with the latency a client saw.

A canary that does not answer (its process gone, or nothing within ``FORWARD_TIMEOUT_S``)
is answered 503 naming it, and counted against it: the error gate sees a crashed canary
at once, and the stable's own requests never wait on it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from ml.server.canary import Remote
from ml.server.metrics import answered_by

log = logging.getLogger("ml.server.serve")

#: How long a forwarded request may take before it is answered 503.
FORWARD_TIMEOUT_S = 30.0
#: Headers that belong to one connection, not to the request (RFC 9110 §7.6.1), and the
#: ones the client library sets again.
_NOT_FORWARDED = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
     b"transfer-encoding", b"upgrade", b"host", b"content-length"}
)  # fmt: skip
_ANSWER_HEADERS = ("content-type",)


class CanaryForward:
    """Forwards the canary's share of the model's predict and infer requests (module doc).
    ``canary()`` is the watcher's canary directory (None without ``--canary-dir``)."""

    def __init__(self, app: Any, model_name: str, canary: Callable[[], Any]) -> None:
        self.app = app
        self.canary = canary
        name = re.escape(model_name)
        self.split_paths = {f"/v1/models/{model_name}:predict", f"/v2/models/{model_name}/infer"}
        self.versioned = re.compile(rf"/v2/models/{name}/versions/(\d+)/infer")
        self._session: Any = None

    def target(self, scope: dict) -> Remote | None:
        """The canary's server for this request, or None: this server answers it."""
        directory = self.canary()
        if scope["type"] != "http" or scope["method"] != "POST" or directory is None:
            return None
        current = directory.current
        if not isinstance(current, Remote):
            return None
        path = scope["path"]
        if path in self.split_paths:
            return directory.choose_remote()
        named = self.versioned.fullmatch(path)
        return current if named and int(named[1]) == current.version else None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        remote = self.target(scope)
        if remote is None:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away
        answered_by(remote.version)
        status, headers, content = await self._forward(remote, scope, body)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    async def _forward(self, remote: Remote, scope: dict, body: bytes) -> tuple[int, list, bytes]:
        import aiohttp

        query = scope.get("query_string", b"").decode("latin-1")
        url = remote.url + scope["path"] + (f"?{query}" if query else "")
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.lower() not in _NOT_FORWARDED
        ]
        try:
            session = self._client()
            timeout = aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)
            async with session.post(url, data=body, headers=headers, timeout=timeout) as answer:
                content = await answer.read()
                kept = [
                    (k.encode(), answer.headers[k].encode())
                    for k in _ANSWER_HEADERS
                    if k in answer.headers
                ]
                return answer.status, [*kept, _length(content)], content
        except (TimeoutError, aiohttp.ClientError) as e:
            why = f"{type(e).__name__}: {e}".rstrip(": ")
            log.warning("canary version %d at %s did not answer (%s)", remote.version, url, why)
            error = {"error": f"canary version {remote.version} did not answer ({why})"}
            content = json.dumps(error).encode()
            return 503, [(b"content-type", b"application/json"), _length(content)], content

    def _client(self) -> Any:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        return self._session


def _length(content: bytes) -> tuple[bytes, bytes]:
    return b"content-length", str(len(content)).encode()


async def _read_body(receive: Callable) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
