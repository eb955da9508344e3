"""The local runtime: the pod contract run as processes on 127.0.0.1, no cluster.

A "TFJob" is N ``python -m ml.train`` processes with the TF_CONFIG the operator would
give them; the volume is ``<workdir>/volume``; serving is ``python -m ml.serve`` in the
background. It never claims to autoscale: one server process serves every request.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common.errors import DistmlError
from runtime.jobs import Job, JobRunner, failure_report, python_command
from runtime.procs import is_alive, port_is_free, stop_group, stop_pid, stop_pids, tail
from runtime.tables import ms, table
from runtime.workdir import MARKER, Workdir

MODEL_TYPES = ("cnn", "cnn_dropout", "cnn_batchnorm")  # == ml.config.MODEL_TYPES (tested)
PROFILES = ("quick", "full")
REQUIRED_MODULES = {
    "tensorflow": "tensorflow",
    "tf_keras": "tf-keras",
    "tensorflow_datasets": "tensorflow-datasets",
    "kserve": "kserve",
    "locust": "locust",
    "matplotlib": "matplotlib",
}
MIN_FREE_BYTES = 2 * 1024**3
SERVER_TAG = "ml.serve"
TRAIN_TAG = "ml.train"

Out = Callable[[str], None]


class UserError(DistmlError):
    """Something the user can fix; the message says what and how."""


def _run_step(cmd: Sequence[str], out: Out, log_path: Path | None = None) -> tuple[int, str]:
    """Run a pod-contract step in the foreground, echoing its output; (exit code, output)."""
    lines: list[str] = []
    log = log_path.open("a") if log_path else None
    try:
        with subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=_child_env(),
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if log:
                    log.write(line)
                if _interesting(line):
                    out("  " + line.rstrip())
                lines.append(line)
            code = proc.wait()
    finally:
        if log:
            log.close()
    return code, "".join(lines)


def _interesting(line: str) -> bool:
    """Drop TensorFlow's C++ start-up noise from what the user sees (logs keep it)."""
    noise = (
        "I0000",
        "W0000",
        "E0000",
        "WARNING: All log messages",
        "To enable the following",
        "oneDNN custom operations",
        "rebuild TensorFlow",
        "cuda_",
        "Unable to register",
    )
    return bool(line.strip()) and not any(n in line for n in noise)


def _child_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    repo = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def encode_png_gray(pixels: Any) -> bytes:
    """A minimal 8-bit grayscale PNG encoder (keeps TensorFlow out of this process)."""
    height, width = pixels.shape
    raw = b"".join(b"\x00" + bytes(pixels[row].tolist()) for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


class LocalRuntime:
    """``invoke`` tasks on the local runtime. Methods return an exit code or raise UserError."""

    name = "local"

    def __init__(self, workdir: Workdir, service: str = "tf-mnist", out: Out = print) -> None:
        self.wd = workdir
        self.service = service
        self.out = out

    # ------------------------------------------------------------------ helpers
    @property
    def serving_dir(self) -> Path:
        return self.wd.volume / "serving" / self.service

    # ------------------------------------------------------------------ the pod contract
    def ingest_command(self, source_dir: str | None = None) -> list[str]:
        cmd = python_command("ml.ingest", "--volume", str(self.wd.volume))
        if source_dir:
            cmd += ["--source-dir", str(Path(source_dir).expanduser().resolve())]
        return cmd

    def train_command(
        self, model: str, profile: str, epochs: int | None, steps_per_epoch: int | None
    ) -> list[str]:
        cmd = python_command(
            "ml.train",
            "--volume",
            str(self.wd.volume),
            "--model-type",
            model,
            "--profile",
            profile,
            "--log-every",
            "5",
        )
        if epochs is not None:
            cmd += ["--epochs", str(epochs)]
        if steps_per_epoch is not None:
            cmd += ["--steps-per-epoch", str(steps_per_epoch)]
        return cmd

    def select_command(
        self, min_accuracy: float = 0.0, force: bool = False, rollback: bool = False
    ) -> list[str]:
        cmd = python_command(
            "ml.select", "--volume", str(self.wd.volume), "--service", self.service
        )
        if rollback:
            return [*cmd, "--rollback"]
        return [*cmd, "--min-accuracy", str(min_accuracy), *(["--force"] if force else [])]

    def serve_command(self, http_port: int) -> list[str]:
        return python_command(
            "ml.serve",
            "--model-dir",
            str(self.serving_dir),
            "--model-name",
            self.service,
            "--host",
            "127.0.0.1",
            "--http-port",
            str(http_port),
        )

    def _require_up(self) -> None:
        if not self.wd.exists() or not self.wd.load_state().get("up"):
            raise UserError(f"the local runtime is not set up in {self.wd.root}; run `invoke up`")

    def _server(self) -> dict[str, Any] | None:
        server = self.wd.load_state().get("server")
        if server and is_alive(server.get("pid", 0), SERVER_TAG):
            return server
        return None

    # ------------------------------------------------------------------ up
    def preflight(self) -> list[str]:
        problems = []
        missing = [
            pkg for mod, pkg in REQUIRED_MODULES.items() if importlib.util.find_spec(mod) is None
        ]
        if missing:
            problems.append(
                f"missing Python packages: {', '.join(missing)}; install the project with "
                "`pip install -e .` in this environment"
            )
        probe = self.wd.root if self.wd.root.exists() else self.wd.root.parent
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < MIN_FREE_BYTES and not self.wd.exists():
            problems.append(
                f"only {free / 1024**3:.1f} GiB free under {probe}; the local runtime needs "
                f"about {MIN_FREE_BYTES / 1024**3:.0f} GiB (free space or set INVOKE_WORKDIR)"
            )
        return problems

    def up(self, source_dir: str | None = None) -> int:
        problems = self.preflight()
        if problems:
            raise UserError("preflight failed:\n  - " + "\n  - ".join(problems))
        created = self.wd.create()
        self.out(f"work dir {self.wd.root} ({'created' if created else 'exists'})")
        cmd = self.ingest_command(source_dir)
        self.out("ingest: python " + " ".join(cmd[1:]))
        code, output = _run_step(cmd, self.out, self.wd.logs / "ingest.log")
        if code != 0:
            raise UserError(f"ingest failed (exit {code}); full log: {self.wd.logs / 'ingest.log'}")
        already = "already prepared" in output
        state = self.wd.load_state()
        sample_existed = (self.wd.root / "sample-request.json").is_file()
        self._write_sample(source_dir)
        if already and not created and state.get("up") and sample_existed:
            self.out("local runtime already ready; nothing changed")
        else:
            source = str(Path(source_dir).expanduser().resolve()) if source_dir else None
            self.wd.update_state(up=True, runtime="local", source_dir=source)
            self.out(f"local runtime ready: volume {self.wd.volume}")
        return 0

    # ------------------------------------------------------------------ train
    def train(
        self,
        models: Sequence[str],
        *,
        workers: int = 2,
        parallel: int | None = None,
        profile: str = "quick",
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        max_restarts: int = 2,
        deadline_s: float = 6 * 3600,
        display: Any = None,
    ) -> int:
        self._require_up()
        unknown = [m for m in models if m not in MODEL_TYPES]
        if unknown:
            raise UserError(f"unknown model type {unknown[0]!r}; valid: {', '.join(MODEL_TYPES)}")
        if profile not in PROFILES:
            raise UserError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
        for flag, value, low in (
            ("--workers", workers, 1),
            ("--parallel", parallel, 1),
            ("--epochs", epochs, 1),
            ("--steps-per-epoch", steps_per_epoch, 1),
            ("--max-restarts", max_restarts, 0),
        ):
            if value is not None and value < low:
                raise UserError(f"{flag} must be at least {low}, got {value}")
        parallel = parallel or len(models)
        jobs = []
        for model in models:
            cmd = self.train_command(model, profile, epochs, steps_per_epoch)
            jobs.append(Job(name=model, command=cmd))
        from runtime.display import JobDisplay

        display = display or JobDisplay(self.out)
        runner = JobRunner(
            jobs,
            workers=workers,
            parallel=parallel,
            max_restarts=max_restarts,
            log_dir=self.wd.logs / "train",
            env=_child_env(),
            deadline_s=deadline_s,
            on_change=display.update,
            on_pids=lambda pids: self.wd.update_state(train_pids=pids),
            log=self.out,
        )
        self.out(
            f"training {len(jobs)} job(s) x {workers} worker(s), {parallel} at a time, "
            f"profile {profile}, {runner.threads} TF thread(s) per worker; "
            f"logs in {self.wd.logs / 'train'}"
        )
        started = time.monotonic()
        try:
            runner.run()
        finally:
            display.close()
            self.wd.update_state(train_pids=None)
        self.out(f"training finished in {time.monotonic() - started:.0f} s")
        self._print_train_summary(jobs)
        from runtime.charts import training_curves

        chart = training_curves(self.wd.volume, self.wd.reports / "training-curves.png")
        if chart:
            self.out(f"training curves: {chart}")
        failed = [j for j in jobs if j.state != "succeeded"]
        for job in failed:
            self.out(failure_report(job))
        if failed:
            self.out(
                "next: fix the cause above, then rerun `invoke train --model-type "
                f"{failed[0].name}` (it resumes from its last saved step)"
            )
            return 1
        return 0

    def _print_train_summary(self, jobs: Sequence[Job]) -> None:
        rows = [("model", "state", "restarts", "resumed at", "test acc (last epoch)", "time")]
        for job in jobs:
            acc = "-"
            metrics = self.wd.volume / "candidates" / job.name / "metrics.json"
            if job.state == "succeeded" and metrics.is_file():
                final = json.loads(metrics.read_text()).get("final", {})
                if "val_accuracy" in final:
                    acc = f"{final['val_accuracy']:.4f}"
            resumed = (
                "-"
                if job.resumed_from is None
                else f"epoch {job.resumed_from[0] + 1}, step {job.resumed_from[1]}"
            )
            took = f"{job.finished - job.started:.0f} s" if job.finished else "-"
            rows.append((job.name, job.state, str(job.restarts), resumed, acc, took))
        self.out(table(rows))

    # ------------------------------------------------------------------ serve
    def _write_sample(self, source_dir: str | None = None) -> Path:
        source_dir = source_dir or self.wd.load_state().get("source_dir")
        return write_sample_request(self.wd.root, source_dir, self.out)

    def _start_server(self, http_port: int, ready_timeout: float) -> dict[str, Any]:
        if not port_is_free(http_port):
            raise UserError(
                f"port {http_port} on 127.0.0.1 is in use; pass --http-port PORT "
                "or stop what listens there"
            )
        log_path = self.wd.logs / "serve.log"
        cmd = self.serve_command(http_port)
        with log_path.open("a") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_child_env(),
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{http_port}"
        server = {"pid": proc.pid, "port": http_port, "url": url, "log": str(log_path)}
        self.wd.update_state(server=server)
        self.out(f"model server starting (pid {proc.pid}): python {' '.join(cmd[1:])}")
        deadline = time.monotonic() + ready_timeout
        ready_url = f"{url}/v1/models/{self.service}"
        try:
            while True:
                if proc.poll() is not None:
                    raise UserError(
                        f"the model server exited with code {proc.returncode}; last "
                        f"lines of {log_path}:\n{tail(log_path, 25)}"
                    )
                try:
                    with urllib.request.urlopen(ready_url, timeout=2) as resp:
                        if json.loads(resp.read()).get("ready"):
                            return server
                except (urllib.error.URLError, OSError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise UserError(
                        f"the model server did not become ready within {ready_timeout:.0f} s "
                        f"(stopped it); last lines of {log_path}:\n{tail(log_path, 25)}"
                    )
                time.sleep(0.25)
        except (UserError, KeyboardInterrupt):
            # A server that never became ready (or a Ctrl-C while waiting) is not left behind.
            stop_group(proc, grace=5.0)
            self.wd.update_state(server=None)
            raise

    def _predict(self, url: str, body: bytes, timeout: float = 10) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{url}/v1/models/{self.service}:predict",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def _wait_for_version(self, server: dict[str, Any], version: int, timeout: float) -> dict:
        body = self._write_sample().read_bytes()
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self._predict(server["url"], body)
                if last.get("model_version") == version:
                    return last
            except (urllib.error.URLError, OSError, ValueError) as e:
                last = e
            time.sleep(0.25)
        raise UserError(
            f"the server did not switch to version {version} within {timeout:.0f} s "
            f"(last answer: {last}); see {server['log']}"
        )

    def deploy(
        self,
        *,
        min_accuracy: float = 0.0,
        force: bool = False,
        http_port: int = 8080,
        ready_timeout: float = 180.0,
    ) -> int:
        self._require_up()
        if not 0.0 <= min_accuracy <= 1.0:
            raise UserError(f"--min-accuracy is a fraction between 0 and 1, got {min_accuracy}")
        cmd = self.select_command(min_accuracy, force)
        self.out("select: python " + " ".join(cmd[1:]))
        code, _ = _run_step(cmd, self.out, self.wd.logs / "select.log")
        report_path = self.wd.volume / "reports" / "selection.json"
        report = json.loads(report_path.read_text()) if report_path.is_file() else {}
        if code != 0:
            serving = self._versions()
            keep = f"; version {serving[-1]} keeps serving" if serving else ""
            raise UserError(
                f"selection failed: {report.get('reason', f'exit {code}')}{keep} "
                f"(report: {report_path})"
            )
        version = report.get("version") or (self._versions() or [None])[-1]
        if version is None:
            raise UserError("nothing is published to serve; run `invoke train-all` first")
        server = self._server()
        if server is None:
            server = self._start_server(http_port, ready_timeout)
        else:
            self.out(
                f"model server already running (pid {server['pid']}); it picks up new "
                "versions by itself"
            )
        answer = self._wait_for_version(server, version, ready_timeout)
        self.wd.update_state(deployed_version=version)
        sample = self.wd.root / "sample-request.json"
        self.out(
            f"serving {self.service} version {version} at {server['url']}"
            f" (sample answer: {answer.get('class_names', ['?'])[0]})"
        )
        self.out(
            f"try it:\n  curl -s -H 'Content-Type: application/json' -d @{sample} "
            f"{server['url']}/v1/models/{self.service}:predict"
        )
        return 0

    def _versions(self) -> list[int]:
        if not self.serving_dir.is_dir():
            return []
        return sorted(int(p.name) for p in self.serving_dir.iterdir() if p.name.isdigit())

    def rollback(self, ready_timeout: float = 120.0) -> int:
        self._require_up()
        cmd = self.select_command(rollback=True)
        code, _ = _run_step(cmd, self.out, self.wd.logs / "select.log")
        if code != 0:
            raise UserError("rollback failed (see above)")
        version = self._versions()[-1]
        server = self._server()
        if server:
            self._wait_for_version(server, version, ready_timeout)
            self.out(f"the server now serves version {version}")
        self.wd.update_state(deployed_version=version)
        return 0

    # ------------------------------------------------------------------ loadtest
    def loadtest(
        self,
        *,
        concurrency: int = 5,
        duration: str = "30s",
        spawn_rate: float | None = None,
        max_failure_ratio: float = 0.0,
        expect_scale_out: bool | None = None,
    ) -> int:
        self._require_up()
        if expect_scale_out:
            raise UserError(
                "--expect-scale-out needs a cluster: the local runtime runs one "
                "server process and never scales out; drop the flag or use a "
                "cluster runtime"
            )
        from loadtest.plan import check_flags
        from loadtest.run import run_loadtest
        from loadtest.summary import check

        try:
            check_flags(concurrency, duration, max_failure_ratio)
        except ValueError as e:
            raise UserError(str(e)) from e
        server = self._server()
        if server is None:
            raise UserError("no model server is running; run `invoke deploy` first")
        self.out(
            "scale-out is checked only on a cluster: the local runtime runs one server "
            "process, so this measures throughput and latency only"
        )
        out_dir = self.wd.reports / "loadtest"
        summary = run_loadtest(
            server["url"],
            self.service,
            self._write_sample(),
            out_dir,
            concurrency=concurrency,
            duration=duration,
            spawn_rate=spawn_rate,
            log=self.out,
        )
        self.out(
            table(
                [
                    ("requests", "failures", "req/s", "p50 ms", "p95 ms", "p99 ms"),
                    (
                        str(summary["requests"]),
                        str(summary["failures"]),
                        f"{summary['rps'] or 0:.1f}",
                        *(ms(summary.get(k)) for k in ("p50_ms", "p95_ms", "p99_ms")),
                    ),
                ]
            )
        )
        self.out(f"results: {out_dir} (summary.json, chart.png, Locust CSVs)")
        self.wd.update_state(last_loadtest=str(out_dir / "summary.json"))
        problems = check(summary, max_failure_ratio=max_failure_ratio, expect_scale_out=False)
        for p in problems:
            self.out(f"error: {p}")
        return 1 if problems else 0

    # ------------------------------------------------------------------ status / down
    def status(self) -> int:
        state = self.wd.load_state()
        rows = [("item", "state")]
        rows.append(
            (
                "runtime",
                f"local, work dir {self.wd.root}"
                + ("" if state.get("up") else " (not set up: run `invoke up`)"),
            )
        )
        datasets = self.wd.volume / "datasets" / "fashion_mnist"
        rows.append(("dataset", f"prepared in {datasets}" if datasets.is_dir() else "not prepared"))
        selection = self.wd.volume / "reports" / "selection.json"
        scores = {}
        if selection.is_file():
            report = json.loads(selection.read_text())
            scores = {c["model_type"]: c for c in report.get("candidates", [])}
        for model in sorted(
            p.name
            for p in (self.wd.volume / "candidates").glob("*")
            if p.is_dir() and not p.name.startswith(".")
        ):
            metrics_path = self.wd.volume / "candidates" / model / "metrics.json"
            detail = "exported"
            if metrics_path.is_file():
                final = json.loads(metrics_path.read_text()).get("final", {})
                if "val_accuracy" in final:
                    detail = f"last-epoch test acc {final['val_accuracy']:.4f}"
            if model in scores and scores[model].get("status") == "ok":
                detail += f", selection test acc {scores[model]['accuracy']:.4f}"
            rows.append((f"candidate {model}", detail))
        versions = self._versions()
        rows.append(("serving versions", ", ".join(map(str, versions)) if versions else "none"))
        server = self._server()
        rows.append(
            ("model server", f"pid {server['pid']}, {server['url']}" if server else "not running")
        )
        last = state.get("last_loadtest")
        if last and Path(last).is_file():
            s = json.loads(Path(last).read_text())
            rows.append(
                (
                    "last load test",
                    f"{s['requests']} requests, {s['failures']} failed, "
                    f"{s['rps'] or 0:.1f} req/s, p95 {ms(s.get('p95_ms'))} ms "
                    f"({Path(last).parent})",
                )
            )
        else:
            rows.append(("last load test", "none"))
        self.out(table(rows))
        from runtime.charts import training_curves

        chart = training_curves(self.wd.volume, self.wd.reports / "training-curves.png")
        if chart:
            self.out(f"training curves: {chart}")
        return 0

    def down(self, purge: bool = False) -> int:
        state = self.wd.load_state()
        server = state.get("server")
        if server and stop_pid(server.get("pid", 0), SERVER_TAG):
            self.out(f"stopped the model server (pid {server['pid']})")
        stopped = [p for p in state.get("train_pids") or [] if is_alive(p, TRAIN_TAG)]
        if stopped:
            self.out(f"stopping {len(stopped)} leftover training worker(s)…")
            stop_pids(stopped, TRAIN_TAG)
        if self.wd.exists():
            self.wd.update_state(server=None, train_pids=None)
        if purge:
            if self.wd.exists():
                shutil.rmtree(self.wd.root)
                self.out(f"removed {self.wd.root}")
            elif self.wd.root.exists():
                raise UserError(
                    f"{self.wd.root} has no {MARKER} marker, so it was not made by "
                    "distml; not deleting it"
                )
        if not (server or stopped or purge):
            self.out("nothing was running")
        return 0


def write_sample_request(
    root: Path, source_dir: str | None, out: Out, *, synthetic_ok: bool = False
) -> Path:
    """A real test image as PNG and as a ready-to-send request body (no TensorFlow).

    With ``synthetic_ok`` (a cluster that downloaded the data itself, none on this
    machine), a drawn 28x28 image stands in: the load test needs a valid request, not a
    particular answer.
    """
    request = root / "sample-request.json"
    if request.is_file():
        return request
    from ml.data import CLASS_NAMES, DataError, locate_raw_files, read_idx

    try:
        raw = locate_raw_files(source_dir, log=lambda m: None)
    except DataError as e:
        if not synthetic_ok:
            raise UserError(f"cannot write the sample request: {e}") from e
        import numpy as np

        pixels = np.zeros((28, 28), np.uint8)
        pixels[6:22, 4:24] = 255
        png, what = encode_png_gray(pixels), "a drawn stand-in: no Fashion-MNIST files here"
    else:
        images = read_idx(raw / "t10k-images-idx3-ubyte.gz")
        labels = read_idx(raw / "t10k-labels-idx1-ubyte.gz")
        png = encode_png_gray(images[0])
        what = f"test image 0, class {CLASS_NAMES[int(labels[0])]}"
    root.mkdir(parents=True, exist_ok=True)
    (root / "sample.png").write_bytes(png)
    body = {"instances": [{"b64": base64.b64encode(png).decode()}], "return_class_names": True}
    request.write_text(json.dumps(body) + "\n")
    out(f"sample input: {root / 'sample.png'} ({what})")
    return request


class DryLocalRuntime(LocalRuntime):
    """``invoke --dry`` on the local runtime: prints the commands each task would run, in
    order, and touches nothing (no work dir, no process). ``status`` only reads, so it
    runs as usual."""

    def _say(self, what: str, cmd: Sequence[str], env: str = "") -> None:
        self.out(f"would run ({what}): {env}python " + " ".join(cmd[1:]))

    def up(self, source_dir: str | None = None) -> int:
        self.out(f"would create the work dir {self.wd.root} (volume {self.wd.volume})")
        self._say("ingest", self.ingest_command(source_dir))
        return 0

    def train(
        self,
        models: Sequence[str],
        *,
        workers: int = 2,
        parallel: int | None = None,
        profile: str = "quick",
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        max_restarts: int = 2,
        **_: Any,
    ) -> int:
        workers_at = [f"127.0.0.1:<port{i}>" for i in range(workers)]
        self.out(
            f"would run {len(models)} job(s) x {workers} worker(s), {parallel or len(models)} at "
            f"a time, restarting a job's workers together up to {max_restarts} time(s); each "
            "worker gets free 127.0.0.1 ports:"
        )
        for model in models:
            cmd = self.train_command(model, profile, epochs, steps_per_epoch)
            for i in range(workers):
                config = json.dumps(
                    {"cluster": {"worker": workers_at}, "task": {"type": "worker", "index": i}}
                )
                self._say(f"{model} worker {i}", cmd, env=f"TF_CONFIG='{config}' ")
        return 0

    def deploy(
        self, *, min_accuracy: float = 0.0, force: bool = False, http_port: int = 8080, **_: Any
    ) -> int:
        self._say("selection", self.select_command(min_accuracy, force))
        if self._server() is None:
            self._say("model server, in the background", self.serve_command(http_port))
        else:
            self.out("the running model server would pick up the new version by itself")
        return 0

    def rollback(self, **_: Any) -> int:
        self._say("rollback", self.select_command(rollback=True))
        return 0

    def loadtest(self, *, concurrency: int = 5, duration: str = "30s", **_: Any) -> int:
        server = self._server()
        url = server["url"] if server else "http://127.0.0.1:<http-port>"
        self.out(
            f"would run Locust headless in its own process: {concurrency} user(s), no wait "
            f"time, for {duration}, against {url}/v1/models/{self.service}:predict; results "
            f"in {self.wd.reports / 'loadtest'}"
        )
        return 0

    def down(self, purge: bool = False) -> int:
        state = self.wd.load_state()
        server = state.get("server")
        if server:
            self.out(f"would stop the model server (pid {server.get('pid')})")
        for pid in state.get("train_pids") or []:
            self.out(f"would stop training worker pid {pid}")
        if purge and self.wd.exists():
            self.out(f"would remove {self.wd.root}")
        elif not (server or state.get("train_pids")):
            self.out("nothing is running" + (" and there is no work dir" if purge else ""))
        return 0
