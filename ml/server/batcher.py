"""Batching of concurrent requests: one model call for the requests that wait together.

No timer and no wait: a request that finds the model idle is called at once, alone (no
latency added at one client). Requests that arrive while a call runs wait for it, then go
together in the next call, as one batch, up to the same limits one request has (images and
decoded pixels), so one call never does more work than the largest allowed request. Each
caller gets its own rows of the answer, in its own order. When a joint call fails (an
undecodable image in one request), each of its requests is called again alone, so an error
reaches only the request that caused it, with its own instance numbers.

Pure asyncio and numpy (no TensorFlow): ``call`` is the model, run in the loop's default
executor so the event loop keeps reading requests while it runs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

#: ``call(signature_name, inputs, target) -> (version, rows)``, rows in the order of
#: ``inputs``; ``target`` is the model version the requests were routed to (opaque here:
#: requests for different targets never share a call).
ModelCall = Callable[[str, Any, Any], tuple[int, np.ndarray]]
#: ``on_call(requests, images)``: told of each model call made (the batch-size metric).
OnCall = Callable[[int, int], None]


def _ignore(requests: int, images: int) -> None:
    pass


class _Waiting(NamedTuple):
    signature_name: str
    inputs: Any  # list[bytes] or np.ndarray [N, ...]
    pixels: int
    answer: asyncio.Future
    target: Any = None


class Batcher:
    """Calls ``call`` once per group of requests waiting together (see the module doc)."""

    def __init__(
        self, call: ModelCall, *, max_instances: int, max_pixels: int, on_call: OnCall = _ignore
    ) -> None:
        self.call = call
        self.max_instances = max_instances
        self.max_pixels = max_pixels
        #: Told of each call made: (requests, images) in it.
        self.on_call = on_call
        self._waiting: deque[_Waiting] = deque()
        self._running = False

    async def predict(
        self, signature_name: str, inputs: Any, pixels: int, target: Any = None
    ) -> tuple[int, Any]:
        """This request's (version, rows), called alone or with others waiting with it
        for the same ``target``.

        Raises:
            Exception: whatever ``call`` raised for this request alone.
        """
        answer = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(signature_name, inputs, pixels, answer, target))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await answer

    async def _drain(self) -> None:
        try:
            while self._waiting:
                await self._run(self._next_batch())
        finally:
            self._running = False

    def _next_batch(self) -> list[_Waiting]:
        """The oldest request and those after it of the same signature and target, within
        the limits."""
        first = self._waiting.popleft()
        batch, instances, pixels = [first], len(first.inputs), first.pixels
        kept: deque[_Waiting] = deque()
        while self._waiting:
            item = self._waiting.popleft()
            more = instances + len(item.inputs)
            if (
                item.signature_name == first.signature_name
                and item.target is first.target
                and more <= self.max_instances
                and pixels + item.pixels <= self.max_pixels
            ):
                batch.append(item)
                instances, pixels = more, pixels + item.pixels
            else:
                kept.append(item)
        self._waiting.extendleft(reversed(kept))
        return batch

    async def _run(self, batch: Sequence[_Waiting]) -> None:
        loop = asyncio.get_running_loop()
        self.on_call(len(batch), sum(len(item.inputs) for item in batch))
        try:
            version, rows = await loop.run_in_executor(
                None, self.call, batch[0].signature_name, _joined(batch), batch[0].target
            )
        except Exception as e:
            if len(batch) == 1:
                _settle(batch[0].answer, error=e)
                return
            for item in batch:  # find whose request failed: each alone, its own error
                await self._run([item])
            return
        start = 0
        for item in batch:
            end = start + len(item.inputs)
            _settle(item.answer, result=(version, rows[start:end]))
            start = end


def _joined(batch: Sequence[_Waiting]) -> Any:
    if len(batch) == 1:
        return batch[0].inputs
    if isinstance(batch[0].inputs, np.ndarray):
        return np.concatenate([item.inputs for item in batch])
    return [image for item in batch for image in item.inputs]


def _settle(answer: asyncio.Future, *, result: Any = None, error: Exception | None = None) -> None:
    if answer.done():  # the caller went away (its request was cancelled)
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result)
