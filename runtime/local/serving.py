"""Local serving: select and publish, one ``ml.server.serve`` process in the background, rollback,
and the Locust load test against it. Functions of the ``LocalRuntime`` they serve."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.poll import Done, Failed, Pending, poll
from common.process_group import stop_group
from ml import contract
from ml.contract import records
from ml.contract.volume_lock import LockHeld, volume_lock
from runtime.image import code_version
from runtime.output.tables import ms, table
from runtime.procs import REPO, is_ours, port_is_free, started_at, tail
from runtime.requests import DeployRequest, LoadtestRequest
from runtime.workdir.state import Server

if TYPE_CHECKING:
    from runtime.local import LocalRuntime

SERVER_TAG = contract.step_mark("serve")
READY_TIMEOUT_S = 180.0
ROLLBACK_TIMEOUT_S = 120.0
CHECK_EVERY_S = 0.25
#: How long a deploy or rollback waits while another one holds the volume's deploy lock.
LOCK_WAIT_S = 900.0


def write_sample(rt: LocalRuntime, source_dir: str | None = None) -> Path:
    from runtime.sample_request import write_sample_request

    source_dir = source_dir or rt.wd.state().source_dir
    return write_sample_request(rt.wd.root, source_dir, rt.out)


def running_server(rt: LocalRuntime) -> Server | None:
    server = rt.wd.state().server
    if server and is_ours(server.pid, SERVER_TAG, server.started):
        return server
    return None


@contextmanager
def deploy_lock(rt: LocalRuntime, what: str) -> Iterator[None]:
    """Hold the volume's deploy lock for a whole deploy or rollback (none on a dry run):
    two at once take turns instead of publishing, starting servers and reading the
    selection report over each other."""
    if rt.ex.dry:
        yield
        return
    path = contract.lock_path(rt.wd.volume, rt.service, contract.DEPLOY_LOCK)

    def waiting(holder: str) -> None:
        rt.out(f"waiting for {holder} to finish first (it holds {path}; Ctrl-C to stop)")

    try:
        with volume_lock(path, what, wait_s=LOCK_WAIT_S, on_wait=waiting):
            yield
    except LockHeld as e:
        raise rt.error(
            f"{e.holder} still holds {e.path} after {e.waited:.0f} s; let it finish, "
            "or stop it, then run this again"
        ) from e


def _version_dirs(path: Path) -> list[int]:
    """The integer version directories under ``path``, ascending (none if it is missing)."""
    if not path.is_dir():
        return []
    return sorted(int(p.name) for p in path.iterdir() if p.name.isascii() and p.name.isdigit())


def in_progress(rt: LocalRuntime) -> int | None:
    """The version of a canary release in the volume, if one is (``deploy --canary``)."""
    found = _version_dirs(Path(contract.canary_dir(rt.wd.volume, rt.service)))
    return found[-1] if found else None


def refuse_during_canary(rt: LocalRuntime, verb: str) -> None:
    """A deploy or rollback while a canary is in the volume would act beside it: refused."""
    running = in_progress(rt)
    if running is not None and not rt.ex.dry:
        raise rt.error(
            f"a canary of version {running} is in progress "
            f"({contract.canary_dir(rt.wd.volume, rt.service)}); `{verb}` waits for it to "
            "end: let its `invoke deploy --canary` finish, stop it with Ctrl-C (that rolls "
            "it back), or end it now: `invoke canary --promote` or `--abort`"
        )


def check_port(rt: LocalRuntime, http_port: int) -> None:
    """Refuse a port something listens on, before anything is published."""
    if not rt.ex.dry and not port_is_free(http_port):
        raise rt.error(
            f"port {http_port} on 127.0.0.1 is in use; pass --http-port PORT "
            "or stop what listens there"
        )


def versions(rt: LocalRuntime) -> list[int]:
    return _version_dirs(rt.serving_dir)


def _predict(url: str, service: str, body: bytes, timeout: float = 10) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{url}/v1/models/{service}:predict",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(json.loads(resp.read()).get("ready"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_server(rt: LocalRuntime, http_port: int, ready_timeout: float) -> Server | None:
    """Start ``ml.server.serve`` on 127.0.0.1:``http_port``; return once it answers ready (None
    on a dry run). A server that never gets ready, or a Ctrl-C meanwhile, is stopped."""
    check_port(rt, http_port)
    cmd = contract.serve(
        rt.serving_dir,
        rt.service,
        host="127.0.0.1",
        http_port=http_port,
        canary_dir=contract.canary_dir(rt.wd.volume, rt.service),  # `deploy --canary`
        canary_elsewhere=True,  # in a server of its own (runtime/local/canary_deploy.py)
        python=rt.python,
    )
    return launch(rt, "model server", cmd, http_port, "serve.log", "server", ready_timeout)


def launch(
    rt: LocalRuntime, what: str, cmd: list[str], port: int, log: str, key: str, timeout: float
) -> Server | None:
    """Start the server ``cmd`` (listening on 127.0.0.1:``port``) in the background, record
    it in the state under ``key`` and return it once it answers ready (None on a dry run).
    One that exits or never gets ready, or a Ctrl-C meanwhile, is stopped and unrecorded."""
    log_path = rt.wd.logs / log
    proc = rt.ex.background(what, cmd, log_path)
    if proc is None:
        return None
    url = f"http://127.0.0.1:{port}"
    # Its start time tells our server from a process that got its pid later.
    server = Server(proc.pid, url, str(log_path), started=started_at(proc.pid))
    rt.wd.update_state(**{key: server})
    ready_url = f"{url}/v1/models/{rt.service}"

    def judge(ready: bool) -> Any:
        if ready:
            return Done(server)
        if proc.poll() is not None:
            return Failed(f"the {what} exited with code {proc.returncode}")
        return Pending()

    try:
        verdict = poll(lambda: _ready(ready_url), judge, timeout=timeout, interval=CHECK_EVERY_S)
        if isinstance(verdict, Done):
            return server
        reason = (
            verdict.reason
            if isinstance(verdict, Failed)
            else f"the {what} did not become ready within {timeout:.0f} s (stopped it)"
        )
        raise rt.error(f"{reason}; last lines of {log_path}:\n{tail(log_path, 25)}")
    except BaseException:
        # A server that never became ready (or a Ctrl-C while waiting) is not left behind.
        stop_group(proc, grace=5.0)
        rt.wd.update_state(**{key: None})
        raise


def wait_for_version(
    rt: LocalRuntime, server: Server, version: int, timeout: float
) -> dict[str, Any]:
    """Send the sample until the server answers with ``version`` or a newer one (another
    publish may land before the server's next poll: it then goes straight to the newest);
    return that answer."""
    body = write_sample(rt).read_bytes()

    def observe() -> Any:
        try:
            return _predict(server.url, rt.service, body)
        except (urllib.error.URLError, OSError, ValueError) as e:
            return e

    def judge(answer: Any) -> Any:
        served = answer.get("model_version") if isinstance(answer, dict) else None
        if isinstance(served, int) and served >= version:
            return Done(answer)
        return Pending(str(answer))  # not printed (no on_change): the timeout message

    verdict = poll(observe, judge, timeout=timeout, interval=CHECK_EVERY_S)
    if isinstance(verdict, Done):
        return verdict.value
    last = verdict.status if isinstance(verdict, Pending) else verdict.reason
    raise rt.error(
        f"the server did not switch to version {version} (or newer) within {timeout:.0f} s "
        f"(last answer: {last}); see {server.log}"
    )


def select_step(rt: LocalRuntime, request: DeployRequest, canary: bool = False) -> int | None:
    """Run the selection step; the version to serve (None on a dry run). ``canary``: it
    is published into the canary directory (``runtime/local/canary.py``)."""
    cmd = contract.select(
        rt.wd.volume,
        rt.service,
        min_accuracy=request.min_accuracy,
        force=request.force,
        canary=canary,
        code_version=code_version(REPO),  # the code the steps run here: this repository's
        python=rt.python,
    )
    started = time.time()
    code, _ = rt.ex.step("selection", cmd, rt.wd.logs / "select.log")
    if rt.ex.dry:
        return None
    report_path = Path(contract.selection_report(rt.wd.volume))
    report = records.read_selection(report_path)
    if report_path.is_file() and report_path.stat().st_mtime < started:
        report = {}  # the report of an earlier selection: this one failed before writing one
    if code != 0:
        serving = versions(rt)
        keep = f"; version {serving[-1]} keeps serving" if serving else ""
        raise rt.error(
            f"selection failed: {report.get('reason', f'exit {code}, see above')}{keep} "
            f"(report: {report_path})"
        )
    published = versions(rt)
    version = report.get("version") or (published[-1] if published else None)
    if version is None:
        raise rt.error("nothing is published to serve; run `invoke train-all` first")
    return version


def deploy(rt: LocalRuntime, request: DeployRequest) -> int:
    refuse_during_canary(rt, "deploy")
    with deploy_lock(rt, "invoke deploy"):
        server = running_server(rt)
        if server is None:
            check_port(rt, request.http_port)  # before anything is published
        version = select_step(rt, request)
        if server is None:
            server = start_server(rt, request.http_port, READY_TIMEOUT_S)
        elif rt.ex.act("leave the running model server: it picks up the new version by itself"):
            rt.out(
                f"model server already running (pid {server.pid}); it picks up new "
                "versions by itself"
            )
        if server is None or version is None:
            return 0  # a dry run
        answer = wait_for_version(rt, server, version, READY_TIMEOUT_S)
        served = answer["model_version"]
    newer = f" (newer than version {version}: another publish landed)" if served > version else ""
    sample = rt.wd.root / contract.SAMPLE_REQUEST
    rt.out(
        f"serving {rt.service} version {served}{newer} at {server.url}"
        f" (sample answer: {answer.get('class_names', ['?'])[0]})"
    )
    rt.out(
        f"try it:\n  curl -s -H 'Content-Type: application/json' -d @{sample} "
        f"{server.url}/v1/models/{rt.service}:predict"
    )
    return 0


def rollback(rt: LocalRuntime) -> int:
    refuse_during_canary(rt, "rollback")
    with deploy_lock(rt, "invoke rollback"):
        cmd = contract.select(rt.wd.volume, rt.service, rollback=True, python=rt.python)
        code, _ = rt.ex.step("rollback", cmd, rt.wd.logs / "select.log")
        if code != 0:
            raise rt.error("rollback failed (see above)")
        if rt.ex.dry:
            return 0
        version = versions(rt)[-1]
        server = running_server(rt)
        if server:
            version = wait_for_version(rt, server, version, ROLLBACK_TIMEOUT_S)["model_version"]
            rt.out(f"the server now serves version {version}")
    return 0


def loadtest(rt: LocalRuntime, request: LoadtestRequest) -> int:
    server = running_server(rt)
    out_dir = rt.wd.reports / "loadtest"
    url = server.url if server else "http://127.0.0.1:<http-port>"
    if not rt.ex.act(
        f"run Locust headless in its own process: {request.concurrency} user(s), no wait "
        f"time, for {request.duration}, against {url}/v1/models/{rt.service}:predict; "
        f"results in {out_dir}"
    ):
        return 0
    if server is None:
        raise rt.error("no model server is running; run `invoke deploy` first")
    rt.out(
        "scale-out is checked only on a cluster: the local runtime runs one server "
        "process, so this measures throughput and latency only"
    )
    from loadtest.runner import run_loadtest
    from loadtest.server_view import MetricsEndpoint
    from loadtest.summary import check

    summary = run_loadtest(
        server.url,
        rt.service,
        write_sample(rt),
        out_dir,
        concurrency=request.concurrency,
        duration=request.duration,
        spawn_rate=request.spawn_rate,
        log=rt.out,
        server_view=MetricsEndpoint(server.url, rt.service),  # what the server counted
    )
    rt.out(summary_table(summary))
    rt.out(f"results: {out_dir} (summary.json, chart.png, Locust CSVs)")
    rt.wd.update_state(last_loadtest=str(out_dir / "summary.json"))
    problems = check(summary, max_failure_ratio=request.max_failure_ratio, expect_scale_out=False)
    for p in problems:
        rt.out(f"error: {p}")
    return 1 if problems else 0


def summary_table(summary: dict[str, Any]) -> str:
    """Locust's figures and, beside them, what the server counted (its ``/metrics``)."""
    rows = [
        ("seen by", "requests", "failures", "req/s", "p50 ms", "p95 ms", "p99 ms"),
        (
            "Locust",
            str(summary["requests"]),
            str(summary["failures"]),
            f"{summary['rps'] or 0:.1f}",
            *(ms(summary.get(k)) for k in ("p50_ms", "p95_ms", "p99_ms")),
        ),
    ]
    server = summary.get("server") or {}
    if "requests" in server:
        not_ok = sum(n for code, n in server["by_code"].items() if code != "200")
        rows.append(
            (
                "server",
                str(server["requests"]),
                f"{not_ok} not 200",
                "-",
                *(ms(server.get(k)) for k in ("p50_ms", "p95_ms", "p99_ms")),
            )
        )
    return table(rows)
