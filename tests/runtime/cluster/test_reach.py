"""runtime/cluster/reach.py: how requests reach the model on an existing cluster: `--url`
as given, else the InferenceService's URL when it answers, else a `kubectl port-forward`
(exact command, a one-line note, stopped after the block however it ends) that must be
listening before the block runs; and the Host header knative mode needs."""

from __future__ import annotations

import socket
import time

import pytest
from invoke import Config, Result

from runtime.cluster import ClusterError, ClusterRuntime, reach
from tests.support.cluster_kit import REPO
from tests.support.fakekube import FakeKube, no_real_time

CTX = "team-ctx"
NS = "ml-team"
ISVC_URL = "http://fmnist-ml-team.example.com"


class Runner:
    def __init__(self, finished: bool) -> None:
        self.process_is_finished = finished
        self.killed = False

    def kill(self) -> None:
        self.killed = True
        self.process_is_finished = True


class Forward:
    """What ``c.run(..., asynchronous=True)`` returns for `kubectl port-forward`: while it
    runs, a real listener on the requested port stands in for kubectl."""

    def __init__(self, port: int, *, listen: bool, exited: int = 0, stderr: str = "") -> None:
        self.listener: socket.socket | None = None
        if listen:
            self.listener = socket.socket()
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind(("127.0.0.1", port))
            self.listener.listen()
        self.runner = Runner(finished=not listen and exited != 0)
        self.exited, self.stderr, self.joins = exited, stderr, 0

    def join(self) -> Result:
        self.joins += 1
        if self.listener is not None:
            self.listener.close()
        self.runner.process_is_finished = True
        return Result(exited=self.exited, stderr=self.stderr)


class FakeC:
    def __init__(self, *, listen: bool = True, exited: int = 0, stderr: str = "") -> None:
        self.config = Config(overrides={"run": {"dry": False}})
        self.ran: list[tuple[str, dict]] = []
        self.forwards: list[Forward] = []
        self.how = {"listen": listen, "exited": exited, "stderr": stderr}

    def run(self, command: str, **kwargs) -> Forward:
        self.ran.append((command, kwargs))
        port = int(command.split()[-1].split(":")[0])
        self.forwards.append(Forward(port, **self.how))
        return self.forwards[-1]


def context(c: FakeC, lines: list[str], tmp_path):
    from runtime.workdir import Workdir

    fake = FakeKube()
    rt = ClusterRuntime(
        c,
        "existing",
        Workdir.at(tmp_path / "wd"),
        REPO,
        namespace=NS,
        kube_context=CTX,
        out=lines.append,
        kube=fake,
        clock=fake.clock,
    )
    return rt.cx


@pytest.fixture
def silent(monkeypatch):
    """The InferenceService's URL does not answer from here."""
    monkeypatch.setattr(reach, "model_answers", lambda base, service: False)


def test_a_given_url_is_used_as_it_is(tmp_path):
    c, lines = FakeC(), []
    cx = context(c, lines, tmp_path)
    with reach.way_in(cx, "knative", "fmnist", ISVC_URL, "http://lb.example.com:8080/") as way:
        assert way == reach.Way("http://lb.example.com:8080", "fmnist-ml-team.example.com", "--url")
    assert c.ran == [] and lines == []


def test_an_isvc_url_that_answers_is_used(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(reach, "model_answers", lambda base, s: asked.append((base, s)) or True)
    c, lines = FakeC(), []
    with reach.way_in(context(c, lines, tmp_path), "knative", "fmnist", ISVC_URL + "/", None) as w:
        assert w.base == ISVC_URL and w.host is None
        assert "InferenceService" in w.how
    assert asked == [(ISVC_URL + "/", "fmnist")]
    assert c.ran == []


def test_standard_mode_port_forwards_to_the_predictor_and_stops_after(tmp_path, silent):
    c, lines = FakeC(), []
    with reach.way_in(context(c, lines, tmp_path), "standard", "fmnist", ISVC_URL, None) as way:
        ((command, kwargs),) = c.ran
        port = int(command.split()[-1].split(":")[0])
        assert command == (
            f"kubectl --context {CTX} -n {NS} port-forward --address 127.0.0.1 "
            f"svc/fmnist-predictor {port}:80"
        )
        assert kwargs["asynchronous"] is True
        assert way.base == f"http://127.0.0.1:{port}" and way.host is None
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # it listens while the block runs
        assert not c.forwards[0].runner.killed
    assert c.forwards[0].runner.killed and c.forwards[0].joins == 1
    (note,) = lines
    assert "\n" not in note and "port-forward" in note and ISVC_URL in note


def test_knative_mode_forwards_to_the_gateway_with_the_isvc_host(tmp_path, silent):
    c, lines = FakeC(), []
    with reach.way_in(context(c, lines, tmp_path), "knative", "fmnist", ISVC_URL, None) as way:
        ((command, _),) = c.ran
        port = int(command.split()[-1].split(":")[0])
        assert command == (
            f"kubectl --context {CTX} -n istio-system port-forward --address 127.0.0.1 "
            f"svc/istio-ingressgateway {port}:80"
        )
        assert way.base == f"http://127.0.0.1:{port}"
        assert way.host == "fmnist-ml-team.example.com"
    assert c.forwards[0].runner.killed
    assert len(lines) == 1 and "port-forward" in lines[0]


def test_the_forward_is_stopped_when_the_block_raises(tmp_path, silent):
    c = FakeC()
    cx = context(c, [], tmp_path)
    with (
        pytest.raises(RuntimeError, match="load test blew up"),
        reach.way_in(cx, "standard", "fmnist", None, None),
    ):
        raise RuntimeError("load test blew up")
    assert c.forwards[0].runner.killed and c.forwards[0].joins == 1


def test_a_forward_that_exits_at_once_fails_with_kubectls_words(tmp_path, silent):
    c = FakeC(listen=False, exited=1, stderr='error: services "fmnist-predictor" not found\n')
    started = time.monotonic()
    cx = context(c, [], tmp_path)
    with (
        pytest.raises(ClusterError) as err,
        reach.way_in(cx, "standard", "fmnist", ISVC_URL, None),
    ):
        pytest.fail("the block must not run")
    message = str(err.value)
    assert "the port-forward did not start" in message
    assert 'services "fmnist-predictor" not found' in message and "exited with code 1" in message
    assert "port-forward --address 127.0.0.1 svc/fmnist-predictor" in message
    assert no_real_time(started)


def test_a_forward_that_never_listens_times_out_on_the_fake_clock(tmp_path, silent):
    c = FakeC(listen=False, exited=0)  # runs, but never listens
    cx = context(c, [], tmp_path)
    started = time.monotonic()
    with (
        pytest.raises(ClusterError, match="not listening after 30 s"),
        reach.way_in(cx, "standard", "fmnist", None, None),
    ):
        pytest.fail("the block must not run")
    assert cx.clock.monotonic() >= reach.FORWARD_READY_S
    assert c.forwards[0].runner.killed
    assert no_real_time(started, limit=10)


def test_ingress_host_is_the_isvc_host_in_knative_mode_only():
    assert reach.ingress_host("knative", ISVC_URL) == "fmnist-ml-team.example.com"
    assert reach.ingress_host("knative", None) is None
    assert reach.ingress_host("standard", ISVC_URL) is None


def test_a_forward_that_ends_during_the_load_is_said(tmp_path, silent):
    # The one pod behind it was replaced: every request after that failed; say why.
    c, lines = FakeC(stderr="error: lost connection to pod"), []
    with reach.way_in(context(c, lines, tmp_path), "standard", "fmnist", ISVC_URL, None):
        c.forwards[0].exited = 1
        c.forwards[0].join()  # kubectl exits mid-block
    assert any(
        "port-forward ended during the run" in line and "lost connection to pod" in line
        for line in lines
    )
