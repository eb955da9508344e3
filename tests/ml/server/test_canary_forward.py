"""A canary in its own process (ml/server/canary_forward.py): the stable's server forwards
exactly the canary's share, as it came, to the canary's server and counts it under the
canary's version; the accuracy sample's versioned URL reaches it; a canary whose process
dies is a 503 counted against it while the stable's requests go on answering; and a
weight file's ``url`` is loopback, or the one host the server was told (``--canary-host``:
the canary pods' Service on a cluster), or refused (any value tried)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml.contract.serving_metrics import REQUESTS_TOTAL
from ml.selection.select import publish
from ml.server.canary import (
    LOOPBACK,
    WEIGHT_FILE,
    Remote,
    WeightError,
    parse_endpoint,
    parse_weight,
)
from tests.ml.server.serve_process import Server, http_json, wait_for
from tests.support.serve_requests import MODEL

ZEROS = {"instances": [[[[0.0]] * 28] * 28]}
PREDICT = "/v1/models/{model_name}:predict"


@given(st.one_of(st.none(), st.text(max_size=60), st.integers(), st.lists(st.integers())))
def test_any_url_is_refused_or_loopback_http(url) -> None:
    data = json.dumps({"weight": 10, "url": url}).encode()
    assert parse_weight(data) == 10
    try:
        found = parse_endpoint(data)
    except WeightError:
        return
    assert found is None or (found.split("://")[0] == "http" and url is not None)


@given(st.text(max_size=60), st.sampled_from(["fm-canary", "x"]))
def test_with_a_canary_host_any_url_is_refused_or_names_loopback_or_that_host(url, host) -> None:
    data = json.dumps({"weight": 10, "url": url}).encode()
    hosts = LOOPBACK | {host}
    try:
        found = parse_endpoint(data, hosts)
    except WeightError as e:
        assert f"http://{host}:<port>" in str(e)
        return
    assert found is not None and urlsplit(found).hostname in hosts


@pytest.mark.parametrize(
    ("url", "found"),
    [
        ("http://fm-canary:8080", "http://fm-canary:8080"),
        ("http://fm-canary.kubeflow.svc:8080", None),  # only the very host told
        ("http://other-canary:8080", None),
        ("http://fm-canary", None),  # no port
        ("http://127.0.0.1:9001", "http://127.0.0.1:9001"),
    ],
)
def test_the_canary_host_is_the_one_other_host_allowed(url, found) -> None:
    data = json.dumps({"weight": 10, "url": url}).encode()
    if found is None:
        with pytest.raises(WeightError, match="http://fm-canary:<port>"):
            parse_endpoint(data, LOOPBACK | {"fm-canary"})
    else:
        assert parse_endpoint(data, LOOPBACK | {"fm-canary"}) == found


@pytest.mark.parametrize(
    ("url", "found"),
    [
        ("http://127.0.0.1:9001", "http://127.0.0.1:9001"),
        ("http://localhost:9001/", "http://localhost:9001"),
        ("http://[::1]:9001", "http://[::1]:9001"),
        ("http://10.0.0.1:9001", None),  # another machine
        ("https://127.0.0.1:9001", None),
        ("http://127.0.0.1", None),  # no port
        ("http://127.0.0.1:9001/v1/models", None),
        ("http://user@127.0.0.1:9001", None),
        ("http://127.0.0.1:99999", None),
    ],
)
def test_only_a_loopback_http_server_may_take_the_canarys_share(url, found) -> None:
    data = json.dumps({"weight": 10, "url": url}).encode()
    if found is None:
        with pytest.raises(WeightError, match=r"must be http://127\.0\.0\.1:<port>"):
            parse_endpoint(data)
    else:
        assert parse_endpoint(data) == found


@pytest.fixture(scope="module")
def pair(exported: Path, start_server, tmp_path_factory) -> tuple[Server, Server, Path]:
    """The stable's server (version 1) and the canary's own (version 2, its directory)."""
    root = tmp_path_factory.mktemp("volume")
    publish(exported, root / "serving", {"source": "test"})
    canary = root / "canary"
    shutil.copytree(exported, canary / "2")
    stable = start_server(root / "serving", "--canary-dir", str(canary))
    own = start_server(canary)
    stable.wait_ready()
    own.wait_ready()
    return stable, own, canary


def point(stable: Server, canary: Path, weight: int, url: str, shadow: int = 0) -> None:
    (canary / WEIGHT_FILE).write_text(json.dumps({"weight": weight, "url": url, "shadow": shadow}))
    wait_for(
        lambda: stable.scrape().counts("distml_canary_weight", "version") == {("2",): weight},
        30, f"the canary at {weight}%", stable.log_tail,
    )  # fmt: skip


def infer_version_2(server: Server) -> tuple[int, dict]:
    """A V2 infer naming version 2 (the accuracy sample's route), one blank image."""
    body = {"inputs": [{"name": "pixels", "shape": [1, 28, 28, 1], "datatype": "FP32",
                        "data": [0.0] * 784}]}  # fmt: skip
    return http_json(
        "POST", f"{server.url}/v2/models/{MODEL}/versions/2/infer", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip


def counted(server: Server) -> dict[tuple[str, str], float]:
    return server.scrape().counts(REQUESTS_TOTAL, "code", "version")


def test_the_canarys_share_is_forwarded_and_counted_under_its_version(pair) -> None:
    stable, own, canary = pair
    point(stable, canary, 30, own.url)
    before, own_before = counted(stable), counted(own)
    for _ in range(50):
        status, answer = stable.predict(ZEROS)
        assert status == 200, answer
    after, own_after = counted(stable), counted(own)
    assert after[("200", "2")] - before.get(("200", "2"), 0) == 15
    assert after[("200", "1")] - before.get(("200", "1"), 0) == 35
    assert own_after[("200", "2")] - own_before.get(("200", "2"), 0) == 15  # it answered
    status, answer = infer_version_2(stable)
    assert status == 200 and answer["model_version"] == "2", answer


def test_the_shadow_phase_mirrors_its_share_answering_every_user_from_the_stable(pair) -> None:
    stable, own, canary = pair
    point(stable, canary, 0, own.url, shadow=50)
    before, own_before = counted(stable), counted(own)

    def mirrored() -> float:
        return stable.scrape().total("distml_shadow_requests_total", code="200", version="2")

    start = mirrored()
    for k in range(1, 21):  # one user: each copy answered before the next request
        status, answer = stable.predict({"instances": [[[[0.0]] * 28] * 28] * 3})
        assert status == 200 and answer["model_version"] == 1, answer  # the stable's answer
        wait_for(lambda k=k: mirrored() - start == k // 2, 30, f"copy {k // 2}", stable.log_tail)
    after = counted(stable)
    assert after[("200", "1")] - before.get(("200", "1"), 0) == 20
    assert after.get(("200", "2"), 0) == before.get(("200", "2"), 0)  # no user got version 2
    assert counted(own)[("200", "2")] - own_before.get(("200", "2"), 0) == 10
    scrape = stable.scrape()
    assert scrape.total("distml_shadow_agreement_total", agree="true", version="2") >= 30
    assert scrape.total("distml_shadow_duration_seconds_count", version="2") >= 10
    assert scrape.counts("distml_canary_shadow", "version") == {("2",): 50}
    point(stable, canary, 10, own.url)
    assert stable.scrape().counts("distml_canary_shadow", "version") == {}  # the phase ended


class _Directory:
    """The canary's directory as the forwarder sees it: a canary in its own server, every
    request's copy mirrored."""

    current = Remote(2, "http://127.0.0.1:1")

    def choose_remote(self) -> None:
        return None

    def mirror_remote(self) -> Remote:
        return self.current


def test_copies_in_flight_never_outnumber_the_users_requests() -> None:
    """One user, the canary not answering yet: one copy waits, the next nine are not sent
    (at most 32 used to be sent at once, which queued in the canary and inflated its p99)."""
    import asyncio

    from ml.server.canary_forward import CanaryForward

    async def stable_app(scope, receive, send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"predictions": [[1.0]]}'})

    async def run() -> tuple[int, int]:
        forward = CanaryForward(stable_app, MODEL, _Directory, metrics=object())
        held, sent = asyncio.Event(), []

        async def mirror(remote, scope, body, stable) -> None:
            sent.append(body)
            await held.wait()  # the canary has not answered yet

        forward._mirror = mirror  # type: ignore[method-assign]
        scope = {"type": "http", "method": "POST", "path": f"/v1/models/{MODEL}:predict",
                 "headers": [], "query_string": b""}  # fmt: skip
        for _ in range(10):  # one user: each request after the last one's answer
            body = [{"type": "http.request", "body": b"{}", "more_body": False}]

            async def receive(body=body) -> dict:
                return body.pop(0) if body else {"type": "http.disconnect"}

            async def send(message) -> None:
                pass

            await forward(scope, receive, send)
            await asyncio.sleep(0)  # let a copy's task start
        waiting = len(forward._mirrors)
        held.set()
        await asyncio.gather(*forward._mirrors)
        return len(sent), waiting

    assert asyncio.run(run()) == (1, 1)


def test_a_canary_for_its_own_server_waits_at_weight_0_until_one_is_named(
    exported: Path, start_server, tmp_path
) -> None:
    """--canary-elsewhere (the cluster's predictor): a canary found in the folder is shown
    at weight 0 (how `invoke workflow` finds it), and never loaded or answered here."""
    publish(exported, tmp_path / "serving", {"source": "test"})
    canary = tmp_path / "canary"
    shutil.copytree(exported, canary / "2")
    stable = start_server(
        tmp_path / "serving", "--canary-dir", str(canary), "--canary-elsewhere",
        "--canary-host", "fm-canary",
    )  # fmt: skip
    stable.wait_ready()
    wait_for(
        lambda: stable.scrape().counts("distml_canary_weight", "version") == {("2",): 0},
        30, "the waiting canary at 0%", stable.log_tail,
    )  # fmt: skip
    answers = [stable.predict(ZEROS) for _ in range(10)]
    assert all(s == 200 and a["model_version"] == 1 for s, a in answers), answers
    status, answer = infer_version_2(stable)
    assert status == 404 and "served: 1 (stable)" in answer["error"], answer
    (canary / WEIGHT_FILE).write_text(json.dumps({"weight": 10, "url": "http://elsewhere:1"}))
    wait_for(
        lambda: "unreadable" in stable.log_tail() and "fm-canary" in stable.log_tail(),
        30, "a url to a host not told refused, saying which is allowed", stable.log_tail,
    )  # fmt: skip


def test_a_canary_that_died_is_a_503_against_it_and_the_stable_answers_on(pair) -> None:
    stable, own, canary = pair
    point(stable, canary, 50, own.url)
    own.stop()
    before = counted(stable)
    statuses = [stable.predict(ZEROS) for _ in range(20)]
    failed = [answer for status, answer in statuses if status != 200]
    assert len(failed) == 10 and all(
        "canary version 2 did not answer" in a["error"] for a in failed
    )
    after = counted(stable)
    assert after[("503", "2")] - before.get(("503", "2"), 0) == 10
    assert after[("200", "1")] - before.get(("200", "1"), 0) == 10
