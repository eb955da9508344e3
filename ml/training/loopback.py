"""``ml train --bind-loopback``: a worker that listens on loopback only.

For a job whose workers all run on this machine (the local runtime); pods leave it off,
their peers reach them by pod IP. TensorFlow 2.21 offers no way to choose the address its
gRPC server listens on: ``GrpcServer::Init`` binds ``"0.0.0.0:" + port`` whatever TF_CONFIG
names (the ServerDef has a ``port`` field, no host; no environment variable), and gRPC makes
that a dual-stack ``[::]:port``, every IPv4 and IPv6 interface. So the worker runs with a
small ``bind()`` shim preloaded (``loopback_bind.c``, built once with the C compiler into
``~/.cache/distml``): a TCP socket asked for a wildcard address gets the loopback one.
After TensorFlow's server has started, :func:`check_listening` confirms that every socket
the worker listens on is on loopback, and fails the worker if not. (A network namespace of
its own per job would need unprivileged user namespaces, often refused in containers.)
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ml.contract import step_argv
from ml.training.tf_config import ClusterSpec

SOURCE = Path(__file__).with_name("loopback_bind.c")
#: The command re-executed with the shim preloaded: ``-m ml train``.
TRAIN_COMMAND = step_argv("", "train")[1:]


class LoopbackError(Exception):
    """--bind-loopback cannot be honoured: the message says why and what to do."""


def preload(spec: ClusterSpec) -> None:
    """Return once this process runs with the shim loaded; else re-execute this same
    ``python -m ml train`` command (same pid) with it preloaded, which does not return.
    Call it before TensorFlow starts its server."""
    if sys.platform != "linux":
        raise LoopbackError("--bind-loopback works on Linux only (it preloads a bind() shim)")
    check_peers(spec)
    lib = library()
    if _loaded(lib):
        return
    if str(lib) in os.environ.get("LD_PRELOAD", ""):
        raise LoopbackError(f"{lib} is in LD_PRELOAD but the loader did not load it")
    if sys.orig_argv[1 : 1 + len(TRAIN_COMMAND)] != TRAIN_COMMAND:
        command = " ".join(["python", *TRAIN_COMMAND])
        raise LoopbackError(f"--bind-loopback needs `{command}` as the command")
    env = {
        **os.environ,
        "LD_PRELOAD": " ".join(filter(None, [str(lib), os.environ.get("LD_PRELOAD")])),
    }
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def check_peers(spec: ClusterSpec) -> None:
    """Every TF_CONFIG address must be on this machine: a peer elsewhere could not reach a
    worker that listens on loopback only (it would wait for it until its deadline)."""
    far = [a for addresses in spec.cluster.values() for a in addresses if not _local(a)]
    if far:
        raise LoopbackError(
            f"--bind-loopback: TF_CONFIG names {', '.join(far)}, not on this machine's "
            "loopback (127.x.x.x or localhost); leave the flag off for workers on other hosts"
        )


def _local(address: str) -> bool:
    host = address.rpartition(":")[0]
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.version == 4 and ip.is_loopback


def library() -> Path:
    """The shim built from ``loopback_bind.c`` (once per source and machine type; workers
    that build it at once each rename a whole file into place)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "distml"
    lib = cache / f"loopback-bind-{digest}-{platform.machine()}.so"
    if lib.is_file():
        return lib
    cc = shlex.split(os.environ.get("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        raise LoopbackError(
            "--bind-loopback builds a small bind() shim with a C compiler and found none "
            f"({cc[0] if cc else 'CC is empty'}): install one (e.g. apt-get install gcc)"
        )
    cache.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_name(f".{lib.name}.{os.getpid()}.tmp")
    built = subprocess.run(
        [*cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SOURCE), "-ldl"],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise LoopbackError(f"building {SOURCE.name} failed: {built.stderr.strip()[-800:]}")
    os.replace(tmp, lib)
    return lib


def _loaded(lib: Path) -> bool:
    """Whether the loader mapped ``lib`` into this process."""
    try:
        return str(lib.resolve()) in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def listening(pid: int | None = None) -> list[tuple[str, int]]:
    """The (address, port) of every TCP socket process ``pid`` (default: this one) listens on."""
    import psutil

    proc = psutil.Process(pid)
    connections = getattr(proc, "net_connections", None) or proc.connections  # psutil < 6
    return [
        (c.laddr.ip, c.laddr.port)
        for c in connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4-mapped loopback address (``::ffff:127.0.0.1``)."""
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def check_listening() -> None:
    """Fail unless every socket this process listens on is on loopback (once TensorFlow's
    server has started: the shim took, and nothing bound around it)."""
    wide = [f"{ip}:{port}" for ip, port in listening() if not is_loopback(ip)]
    if wide:
        raise LoopbackError(
            f"--bind-loopback: this worker still listens on {', '.join(wide)} (the bind() "
            f"shim did not take; is LD_PRELOAD honoured here?)"
        )
