"""ml.server.batcher: concurrent requests share model calls; each caller gets its own rows, in its
own order; an error reaches only the request that caused it; a lone request goes at once."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from ml.server.batcher import Batcher


class Model:
    """A model whose row for an input is that input, made visible: ``row(x) = [x, x*10]``.

    ``gate`` holds the first call until the test lets it go, so requests pile up behind it
    deterministically (no timing).
    """

    def __init__(self, fail_on: object = None) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.inputs: list[list] = []
        self.targets: list[object] = []
        self.fail_on = fail_on

    def __call__(self, signature_name: str, inputs, target=None):
        self.inputs.append(list(inputs))
        self.targets.append(target)
        self.entered.set()
        self.gate.wait(timeout=30)
        if self.fail_on is not None and self.fail_on in list(inputs):
            raise ValueError(f"cannot decode {self.fail_on!r}")
        values = np.array([float(x) for x in inputs])
        return 7, np.stack([values, values * 10], axis=1)


class Calls(list):
    """``Batcher.on_call``, kept: (requests, images) of each model call."""

    def __call__(self, requests: int, images: int) -> None:
        self.append((requests, images))


def batcher_of(model: Model, max_instances: int = 256, max_pixels: int = 10**9) -> Batcher:
    return Batcher(model, max_instances=max_instances, max_pixels=max_pixels, on_call=Calls())


async def _entered(model: Model) -> None:
    await asyncio.get_running_loop().run_in_executor(None, model.entered.wait, 30)


def test_a_lone_request_is_called_at_once_alone() -> None:
    model = Model()
    model.gate.set()
    batcher = batcher_of(model)

    version, rows = asyncio.run(batcher.predict("s", [3, 4], pixels=2))
    assert version == 7 and rows.tolist() == [[3, 30], [4, 40]]
    assert batcher.on_call == [(1, 2)] and model.inputs == [[3, 4]]


def test_concurrent_callers_get_their_own_rows_in_order() -> None:
    model = Model()
    batcher = batcher_of(model)
    requests = [[100 * r + i for i in range(r % 3 + 1)] for r in range(20)]

    async def main() -> list:
        first = asyncio.ensure_future(batcher.predict("s", requests[0], pixels=1))
        await _entered(model)  # the first call is running: the others wait behind it
        rest = [asyncio.ensure_future(batcher.predict("s", r, pixels=1)) for r in requests[1:]]
        await asyncio.sleep(0)  # let every request join the queue (one loop turn, no timing)
        model.gate.set()
        return await asyncio.gather(first, *rest)

    answers = asyncio.run(main())
    for request, (version, rows) in zip(requests, answers, strict=True):
        assert version == 7
        assert rows[:, 0].tolist() == request and rows[:, 1].tolist() == [x * 10 for x in request]
    waited = sum(len(r) for r in requests[1:])
    assert batcher.on_call == [(1, 1), (19, waited)]  # the first alone, the 19 that waited


@pytest.mark.parametrize("max_instances, max_pixels", [(4, 10**9), (256, 4)])
def test_a_joint_call_stays_within_one_requests_limits(max_instances, max_pixels) -> None:
    model = Model()
    batcher = batcher_of(model, max_instances, max_pixels)

    async def main() -> list:
        first = asyncio.ensure_future(batcher.predict("s", [0], pixels=1))
        await _entered(model)
        rest = [asyncio.ensure_future(batcher.predict("s", [i, i], pixels=2)) for i in (1, 2, 3)]
        await asyncio.sleep(0)
        model.gate.set()
        return await asyncio.gather(first, *rest)

    answers = asyncio.run(main())
    assert [rows[:, 0].tolist() for _, rows in answers] == [[0], [1, 1], [2, 2], [3, 3]]
    assert all(len(inputs) <= max_instances for inputs in model.inputs)
    assert batcher.on_call == [(1, 1), (2, 4), (1, 2)]  # 4 images (or 4 pixels) per call at most


def test_other_signatures_wait_for_their_own_call_in_order() -> None:
    model = Model()
    batcher = batcher_of(model)

    async def main() -> list:
        first = asyncio.ensure_future(batcher.predict("a", [0], pixels=1))
        await _entered(model)
        rest = [
            asyncio.ensure_future(batcher.predict(sig, [x], pixels=1))
            for sig, x in (("b", 1), ("a", 2), ("b", 3), ("a", 4))
        ]
        await asyncio.sleep(0)
        model.gate.set()
        return await asyncio.gather(first, *rest)

    answers = asyncio.run(main())
    assert [rows[0, 0] for _, rows in answers] == [0, 1, 2, 3, 4]
    assert model.inputs == [[0], [1, 3], [2, 4]]


def test_requests_for_another_version_never_share_a_call() -> None:
    # The canary's requests go to the canary's model, the stable's to the stable's.
    model = Model()
    batcher = batcher_of(model)
    stable, canary = object(), object()

    async def main() -> list:
        first = asyncio.ensure_future(batcher.predict("a", [0], pixels=1, target=stable))
        await _entered(model)
        rest = [
            asyncio.ensure_future(batcher.predict("a", [x], pixels=1, target=to))
            for to, x in ((canary, 1), (stable, 2), (canary, 3), (stable, 4))
        ]
        await asyncio.sleep(0)
        model.gate.set()
        return await asyncio.gather(first, *rest)

    answers = asyncio.run(main())
    assert [rows[0, 0] for _, rows in answers] == [0, 1, 2, 3, 4]
    assert model.inputs == [[0], [1, 3], [2, 4]]
    assert model.targets == [stable, canary, stable]


def test_an_error_reaches_only_the_request_that_caused_it() -> None:
    model = Model(fail_on=2)
    batcher = batcher_of(model)

    async def main() -> list:
        first = asyncio.ensure_future(batcher.predict("s", [0], pixels=1))
        await _entered(model)
        rest = [asyncio.ensure_future(batcher.predict("s", [x], pixels=1)) for x in (1, 2, 3)]
        await asyncio.sleep(0)
        model.gate.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    answers = asyncio.run(main())
    assert [a[1][0, 0] for a in (answers[0], answers[1], answers[3])] == [0, 1, 3]
    assert isinstance(answers[2], ValueError) and "cannot decode 2" in str(answers[2])
    assert model.inputs == [[0], [1, 2, 3], [1], [2], [3]]  # the joint call, then each alone
    assert batcher.on_call == [(1, 1), (3, 3), (1, 1), (1, 1), (1, 1)]  # every call made
