"""What the e2e tests share: running `invoke` on a work dir, finding our processes, and a
JSON POST that returns the status whatever it is."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runtime.procs import free_ports, is_alive
from tests.support import cli

REPO = cli.REPO
SERVICE = "tf-mnist"


LOCAL = {"INVOKE_RUNTIME": "local"}


def invoke(wd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`invoke ARGS` on the local runtime, waited for."""
    return cli.invoke(wd, *args, timeout=timeout, **LOCAL)


def invoke_in_background(wd: Path, *args: str) -> subprocess.Popen:
    """`invoke ARGS` on the local runtime, started, not waited for (text pipes)."""
    return subprocess.Popen(
        cli.invoke_command(*args),
        cwd=REPO,
        env=cli.invoke_env(wd, **LOCAL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line mentions ``text`` (ours, by work dir path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmd and is_alive(int(entry.name)):
                pids.append(int(entry.name))
    return pids


def post(url: str, body: bytes | str, timeout: float = 30) -> tuple[int, dict]:
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@contextmanager
def deployed(wd: Path, data_dir: Path, *train: str) -> Iterator[dict[str, Any]]:
    """``up`` -> ``invoke TRAIN...`` -> ``deploy`` on a free port: a running service for a
    module's tests; then ``down``, which must leave no process of the work dir behind."""
    port = free_ports(1)[0]
    try:
        r = invoke(wd, "up", "--source-dir", str(data_dir))
        assert r.returncode == 0 and "local runtime ready" in r.stdout
        r = invoke(wd, *train)
        assert r.returncode == 0, r.stdout[-3000:]
        r = invoke(wd, "deploy", "--http-port", str(port))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        url = f"http://127.0.0.1:{port}"
        yield {"wd": wd, "port": port, "url": url, "deploy_out": r.stdout}
    finally:
        invoke(wd, "down")
        assert processes_mentioning(str(wd)) == [], "down must stop every process"
