"""ml.training.loopback (--bind-loopback): a training worker that listens on loopback only.

TensorFlow's gRPC server binds every interface whatever TF_CONFIG says (ml/training/loopback.py says
why); with the flag a worker runs with a bind() shim instead, and the local runtime sets
it (tests/runtime/local/test_training_loopback.py).
tests/runtime/local/test_training_sockets.py lists the sockets of a real local training run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from ml import contract
from ml.training import loopback, train
from ml.training.tf_config import parse_tf_config


@pytest.fixture(autouse=True)
def shim_cache(tmp_path, monkeypatch):
    """The shim is built under the test's own cache dir, never the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def tf_config(*addresses: str) -> str:
    return json.dumps(
        {"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": 0}}
    )


# ---------------------------------------------------------------- the contract and the peers
def test_the_train_command_asks_for_loopback_only_when_told():
    told = train.build_parser().parse_args(contract.train("/v", "cnn", bind_loopback=True)[4:])
    assert told.bind_loopback
    assert "--bind-loopback" not in contract.train("/v", "cnn")  # the default: the TFJob pods


@pytest.mark.parametrize(
    ("address", "local"),
    [("127.0.0.1:2222", True), ("127.0.0.5:1", True), ("localhost:1", True),
     ("10.0.0.5:2222", False), ("worker-1.svc:2222", False), ("0.0.0.0:2222", False)],
)  # fmt: skip
def test_every_peer_must_be_on_this_machine(address, local):
    spec = parse_tf_config(tf_config("127.0.0.1:1", address))
    if local:
        loopback.check_peers(spec)
    else:
        with pytest.raises(loopback.LoopbackError, match=f"TF_CONFIG names {address}"):
            loopback.check_peers(spec)


def test_a_far_peer_stops_the_worker_before_tensorflow(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", tf_config("127.0.0.1:1", "10.0.0.5:2222"))
    argv = ["--volume", str(tmp_path), "--model-type", "cnn", "--bind-loopback"]
    assert train.main(argv) == 2
    assert "leave the flag off for workers on other hosts" in capsys.readouterr().err


# ---------------------------------------------------------------- the shim
BIND_PROBE = """
import json, socket
def bound(family, kind, host, v6only=None):
    s = socket.socket(family, kind)
    if v6only is not None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
    s.bind((host, 0))
    return s.getsockname()[0]
print(json.dumps([
    bound(socket.AF_INET, socket.SOCK_STREAM, "0.0.0.0"),
    bound(socket.AF_INET6, socket.SOCK_STREAM, "::", v6only=0),
    bound(socket.AF_INET6, socket.SOCK_STREAM, "::", v6only=1),
    bound(socket.AF_INET, socket.SOCK_DGRAM, "0.0.0.0"),
    bound(socket.AF_INET, socket.SOCK_STREAM, "127.0.0.1"),
]))
"""


def probe(env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", BIND_PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_shim_moves_wildcard_tcp_binds_to_loopback_and_leaves_the_rest():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    assert probe(env) == ["0.0.0.0", "::", "::", "0.0.0.0", "127.0.0.1"]  # without it
    preloaded = probe({**env, "LD_PRELOAD": str(loopback.library())})
    assert preloaded == ["127.0.0.1", "::ffff:127.0.0.1", "::1", "0.0.0.0", "127.0.0.1"]


def test_a_listener_beyond_loopback_fails_the_check():
    with socket.socket() as wide:
        wide.bind(("0.0.0.0", 0))
        wide.listen()
        port = wide.getsockname()[1]
        with pytest.raises(loopback.LoopbackError, match=f"still listens on 0.0.0.0:{port}"):
            loopback.check_listening()
    with socket.socket() as narrow:
        narrow.bind(("127.0.0.1", 0))
        narrow.listen()
        loopback.check_listening()
