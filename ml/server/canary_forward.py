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

The shadow phase: of the requests the stable answers, the mirrored share (``"shadow"`` in
the weight file) is also sent to the canary's server once the stable's answer is on its
way; the canary's answer is discarded, and counted (``ServerMetrics.shadowed``): its code,
its time, and for each image whether its class agrees with the stable's answer. Copies
waiting for the canary are never more than the users' requests this server is answering
at that moment (nor than ``MIRRORS_IN_FLIGHT``); a copy over that is not sent. So the
canary meets the copies as it would meet the users, no more at once than they send, and
its latency is measured as they would see it (sent as fast as the stable answers, copies
came in bursts that queued in the canary's server and inflated its p99 several times
over, failing identical versions under load), and a slow canary cannot pile up memory here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from ml.contract.serving_metrics import INFER_ROUTE, PREDICT_ROUTE
from ml.server.canary import Remote
from ml.server.fast_predict import read_body
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
#: Mirrored copies waiting for the canary's answer at most, however many users' requests are
#: in flight; the rest are not sent.
MIRRORS_IN_FLIGHT = 32


class CanaryForward:
    """Forwards the canary's share of the model's predict and infer requests (module doc).
    ``canary()`` is the watcher's canary directory (None without ``--canary-dir``)."""

    def __init__(
        self, app: Any, model_name: str, canary: Callable[[], Any], metrics: Any = None
    ) -> None:
        self.app = app
        self.canary = canary
        self.metrics = metrics  # ServerMetrics: where the shadow's answers are counted
        self._mirrors: set[asyncio.Task] = set()
        self._live = 0
        name = re.escape(model_name)
        self.split_paths = {f"/v1/models/{model_name}:predict", f"/v2/models/{model_name}/infer"}
        self.versioned = re.compile(rf"/v2/models/{name}/versions/(\d+)/infer")
        self._session: Any = None

    def target(self, scope: dict) -> tuple[Remote | None, Remote | None]:
        """(the canary's server to answer this request, or None: this server answers it;
        the canary's server to answer a copy too, or None)."""
        directory = self.canary()
        if scope["type"] != "http" or scope["method"] != "POST" or directory is None:
            return None, None
        current = directory.current
        if not isinstance(current, Remote):
            return None, None
        path = scope["path"]
        if path in self.split_paths:
            chosen = directory.choose_remote()
            return chosen, None if chosen else directory.mirror_remote()
        named = self.versioned.fullmatch(path)
        return (current if named and int(named[1]) == current.version else None), None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        live = scope["type"] == "http" and scope.get("path") in self.split_paths
        self._live += live  # the users' requests being answered now (module doc)
        try:
            await self._route(scope, receive, send)
        finally:
            self._live -= live

    async def _route(self, scope: dict, receive: Callable, send: Callable) -> None:
        remote, mirror = self.target(scope)
        if mirror is not None and self.metrics is not None:
            await self._answer_and_mirror(mirror, scope, receive, send)
            return
        if remote is None:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return  # the client went away
        answered_by(remote.version)
        status, headers, content = await self._forward(remote, scope, body)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    async def _answer_and_mirror(
        self, remote: Remote, scope: dict, receive: Callable, send: Callable
    ) -> None:
        """The stable answers as usual; then a copy goes to the canary (module doc)."""
        body = await read_body(receive)
        if body is None:
            return
        answer: dict[str, Any] = {"status": 0, "body": []}

        async def replay() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        async def keep(message: dict) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body":
                answer["body"].append(message.get("body", b""))
            await send(message)

        await self.app(scope, replay, keep)
        if len(self._mirrors) >= min(MIRRORS_IN_FLIGHT, self._live):
            return  # as many copies wait as users' requests are answered: not this one
        stable = (answer["status"], b"".join(answer["body"]))
        task = asyncio.get_running_loop().create_task(self._mirror(remote, scope, body, stable))
        self._mirrors.add(task)
        task.add_done_callback(self._mirrors.discard)

    async def _mirror(
        self, remote: Remote, scope: dict, body: bytes, stable: tuple[int, bytes]
    ) -> None:
        started = time.perf_counter()
        status, _, content = await self._forward(remote, scope, body)
        seconds = time.perf_counter() - started
        agreed = (0, 0)
        if status == stable[0] == 200:
            agreed = agreement(top_classes(stable[1]), top_classes(content))
        route = INFER_ROUTE if scope["path"].endswith("/infer") else PREDICT_ROUTE
        self.metrics.shadowed(route, status, str(remote.version), seconds, agreed)

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


def top_classes(answer: bytes) -> list[int] | None:
    """Each image's class in a V1 (``predictions`` or ``outputs``) or V2 (``outputs``
    named probabilities) JSON answer; None for anything else (binary V2, not JSON)."""
    try:
        doc = json.loads(answer)
        rows = doc.get("predictions", doc.get("outputs"))
        if rows and isinstance(rows[0], dict):  # V2: one output, flat data and its shape
            (output,) = [o for o in rows if o.get("name") == "probabilities"]
            n, k = output["shape"]
            flat = output["data"]
            rows = [flat[i * k : (i + 1) * k] for i in range(n)]
        return [max(range(len(row)), key=row.__getitem__) for row in rows]
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        return None


def agreement(stable: list[int] | None, canary: list[int] | None) -> tuple[int, int]:
    """(images whose classes agree, images whose classes differ); (0, 0) when either
    answer could not be read or they differ in length."""
    if stable is None or canary is None or len(stable) != len(canary):
        return 0, 0
    same = sum(a == b for a, b in zip(stable, canary, strict=True))
    return same, len(stable) - same


def _length(content: bytes) -> tuple[bytes, bytes]:
    return b"content-length", str(len(content)).encode()
