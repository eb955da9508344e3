"""runtime/cluster/tensorboard.py: `invoke tensorboard` on a cluster: the pod on the PVC
(read-only), its readiness wait, the event-file check and ``kubectl port-forward`` on
127.0.0.1 (exact commands), the URL once it answers, and the pod deleted however the task
ends."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator

import pytest
from invoke import Result

from common.errors import DistmlError
from k8s import manifests
from k8s.client.ownership import stamp
from runtime.cluster import ClusterError
from runtime.procs import free_ports
from runtime.requests import TensorboardRequest
from runtime.tensorboard import NothingToShow
from tests.support.cluster_kit import KC, commands, k3d_results, make_ctx, runtime, set_up
from tests.support.fakekube import FakeKube

POD = ("v1", "Pod", "kubeflow", "distml-tensorboard")
CHECK = (
    KC + "-n kubeflow exec distml-tensorboard -- python -c 'import sys; from ml import "
    'contract; sys.exit(0 if contract.has_event_files("/trained_model") else 3)\''
)


def forward(port: int) -> str:
    return KC + f"-n kubeflow port-forward --address 127.0.0.1 pod/distml-tensorboard {port}:6006"


class Runner:
    def __init__(self, finished: bool) -> None:
        self.process_is_finished = finished
        self.killed = False

    def kill(self) -> None:
        self.killed = True
        self.process_is_finished = True


class PortForward(Result):
    """What ``c.run(..., asynchronous=True)`` returns: ``join`` gives ``ends`` (a Result)
    or raises it (Ctrl-C); ``runner`` says whether kubectl still runs and can kill it."""

    def __init__(self, ends: Result | BaseException, *, finished: bool = False) -> None:
        super().__init__()
        self.ends, self.runner, self.joins = ends, Runner(finished), 0

    def join(self) -> Result:
        self.joins += 1
        if isinstance(self.ends, BaseException) and self.joins == 1:
            raise self.ends  # kubectl still runs
        self.runner.process_is_finished = True
        return self.ends if isinstance(self.ends, Result) else Result(exited=-9)


@pytest.fixture
def forwarded() -> Iterator[int]:
    """What kubectl port-forward makes of the pod: an HTTP server on a 127.0.0.1 port."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>TensorBoard</html>")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def start(wd, fake: FakeKube, port: int, pf: PortForward, check: Result | None = None):
    set_up(wd, fake)
    results = {CHECK: Result() if check is None else check, forward(port): pf}
    c = make_ctx(fake, {**results, **k3d_results(exists=True, imported=True)})
    lines: list[str] = []
    rt = runtime(c, wd, fake, lines=lines)
    fake.applied.clear()
    return c, rt, lines


def ours(c) -> list[str]:
    return [cmd for cmd in commands(c) if "distml-tensorboard" in cmd]


def test_the_pod_is_port_forwarded_shown_and_deleted_when_kubectl_stops(wd, fake, forwarded):
    pf = PortForward(Result(exited=0))  # Ctrl-C in the terminal reached kubectl first
    c, rt, lines = start(wd, fake, forwarded, pf)
    assert rt.tensorboard(TensorboardRequest(port=forwarded)) == 0
    assert ours(c) == [CHECK, forward(forwarded)]
    assert fake.applied == [stamp(manifests.tensorboard_pod(rt.cx.settings()), rt.cx.instance)]
    assert lines[-3:] == [
        "pod distml-tensorboard: Ready",
        f"TensorBoard ready: http://127.0.0.1:{forwarded}/ (Ctrl-C stops it)",
        "TensorBoard stopped: port-forward ended, pod distml-tensorboard deleted",
    ]
    assert POD in fake.deleted and POD not in fake.objects
    assert not pf.runner.killed  # it had ended by itself


def test_ctrl_c_stops_the_port_forward_and_deletes_the_pod_exit_0(wd, fake, forwarded):
    pf = PortForward(KeyboardInterrupt())
    _, rt, lines = start(wd, fake, forwarded, pf)
    assert rt.tensorboard(TensorboardRequest(port=forwarded)) == 0
    assert pf.runner.killed and pf.joins == 2  # killed, then reaped
    assert POD in fake.deleted and POD not in fake.objects
    assert lines[-1].endswith("pod distml-tensorboard deleted")


def test_a_port_forward_that_breaks_is_an_error_and_the_pod_is_deleted(wd, fake, forwarded):
    lost = Result(exited=1, stderr="error: lost connection to pod\n")
    _, rt, _ = start(wd, fake, forwarded, PortForward(lost))
    with pytest.raises(ClusterError, match="exited with code 1: error: lost connection to pod"):
        rt.tensorboard(TensorboardRequest(port=forwarded))
    assert POD in fake.deleted and POD not in fake.objects


def test_a_port_forward_that_never_listens_is_an_error(wd, fake):
    busy = Result(exited=1, stderr="Unable to listen on port: address already in use")
    pf = PortForward(busy, finished=True)
    (port,) = free_ports(1)  # nothing answers there
    _, rt, lines = start(wd, fake, port, pf)
    with pytest.raises(DistmlError, match="TensorBoard did not come up: kubectl port-forward"):
        rt.tensorboard(TensorboardRequest(port=port))
    assert not any(line.startswith("TensorBoard ready") for line in lines)
    assert POD in fake.deleted and POD not in fake.objects


def test_nothing_to_show_says_train_first_and_deletes_the_pod(wd, fake, forwarded):
    c, rt, _ = start(wd, fake, forwarded, PortForward(Result()), check=Result(exited=3))
    with pytest.raises(NothingToShow, match=r"under /trained_model/tensorboard in PVC "):
        rt.tensorboard(TensorboardRequest(port=forwarded))
    assert ours(c) == [CHECK]  # no port-forward
    assert POD in fake.deleted and POD not in fake.objects


def test_a_pod_that_fails_stops_the_task_and_is_deleted(wd, fake, forwarded):
    c, rt, _ = start(wd, fake, forwarded, PortForward(Result()))
    fake.clock.hooks.insert(
        0, lambda _t: POD in fake.objects and fake.set_status(*POD, {"phase": "Failed"})
    )
    with pytest.raises(ClusterError, match=r"^pod distml-tensorboard is Failed \(it will not run"):
        rt.tensorboard(TensorboardRequest(port=forwarded))
    assert ours(c) == []
    assert POD in fake.deleted and POD not in fake.objects


def test_ctrl_c_before_it_is_ready_exits_130_and_deletes_the_pod(wd, fake, forwarded):
    _, rt, lines = start(wd, fake, forwarded, PortForward(Result()))

    def interrupt(_t: float) -> None:
        raise KeyboardInterrupt

    fake.clock.hooks.insert(0, interrupt)  # during the wait for the pod
    assert rt.tensorboard(TensorboardRequest(port=forwarded)) == 130
    assert "interrupted before TensorBoard was ready" in lines
    assert POD in fake.deleted and POD not in fake.objects


def test_a_busy_local_port_stops_before_anything_is_made(wd, fake):
    set_up(wd, fake)
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    rt = runtime(c, wd, fake)
    rt._port_free = lambda port: False
    fake.applied.clear()
    with pytest.raises(DistmlError, match=r"port 6006 on 127\.0\.0\.1 is in use; pass --port PORT"):
        rt.tensorboard(TensorboardRequest())
    assert fake.applied == [] and ours(c) == []


def test_dry_prints_the_pod_and_the_commands_and_makes_nothing(wd, fake):
    set_up(wd, fake)
    fake.applied.clear()
    c = make_ctx(fake, {re.compile(".*"): Result()}, dry=True)
    lines: list[str] = []
    rt = runtime(c, wd, fake, lines=lines)
    rt.cx.given_kube = None  # under --dry the seam is a DryKube
    assert rt.tensorboard(TensorboardRequest(port=6007)) == 0
    assert ours(c) == [CHECK, forward(6007)]
    text = "\n".join(lines)
    assert "would apply Pod kubeflow/distml-tensorboard" in text
    assert "readOnly: true" in text
    assert lines[-3:] == [
        "would wait for http://127.0.0.1:6007/ to answer, print it and serve until Ctrl-C",
        "on Ctrl-C it would stop the port-forward and delete the pod:",
        "would delete Pod kubeflow/distml-tensorboard",
    ]
    assert fake.applied == []
