"""Serving benchmark: ``python -m ml serve`` under ``hey`` beside the in-process limit.

    python benchmarks/bench_serving.py [SOURCE] [--repeats 3] [--duration 10] [--out PATH]
        [--compare LABEL=REPO ...]

SOURCE is a SavedModel directory, a serving directory (integer versions) or a volume (its
``serving/<default service>``); without it a freshly built, randomly initialised ``cnn`` is
exported with ``ml.model.export`` (the figures are about serving, not accuracy: the same graph
as a trained one, different weights). The request is the project's own sample request
(``ml.data.sample``: Fashion-MNIST test image 0 as a base64 PNG, or its drawn stand-in when the
data is not on this machine), one image per request.

Each repeat, side by side in one run: the exported ``serving_default`` signature called in a
loop in this process at batch 1 and batch 32 (the in-process limit, same PNG), then for each
server under test a fresh ``python -m ml serve`` on 127.0.0.1 (argv from ``ml.contract``):
its cold start (process start to readiness 200, polled), and ``hey`` for ``--duration``
seconds at each concurrency (requests/s, p50/p95/p99, errors); and ``python -c "import
tensorflow"`` alone. The summary is the median over repeats; the ratios divide the medians.
``--compare`` adds servers run from other checkouts (e.g. a baseline), alternating with
this one in every repeat. Needs Debian's ``hey`` (``apt-get install hey``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(REPO))

from common.poll import Done, Failed, Pending, poll  # noqa: E402
from ml import contract  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "serving.json"
HEY_MISSING = "hey was not found on PATH; install Debian's hey: apt-get install hey"
CONCURRENCY = (1, 5, 20)
SERVICE = contract.DEFAULT_SERVICE
READY_TIMEOUT = 120.0
THIS = "this"  # the label of the server run from this checkout


class BenchError(Exception):
    """The benchmark cannot run: the message says why and what to do."""


# --------------------------------------------------------------------------- inputs


def hey_binary() -> str:
    found = shutil.which("hey")
    if not found:
        raise BenchError(HEY_MISSING)
    return found


def prepare_model(source: Path | None, work: Path) -> tuple[Path, str]:
    """(a serving directory holding at least one version, what model it is)."""
    from ml.selection.publishing import serving_versions
    from ml.selection.select import publish

    if source is None:
        from ml.model.architectures import build_model
        from ml.model.export import export_model

        exported = work / "export"
        export_model(build_model("cnn", seed=7), exported)
        source, what = exported, "a freshly built cnn (random weights, seed 7), ml.model.export"
    else:
        what = f"the SavedModel from {source}"
    if (source / "saved_model.pb").is_file():
        serving = work / "serving" / SERVICE
        publish(source, serving, {"source": "benchmarks/bench_serving.py"})
        return serving, what
    for candidate in (Path(contract.serving_dir(source, SERVICE)), source):
        if serving_versions(candidate):
            return candidate, f"version {serving_versions(candidate)[-1]} of {candidate}"
    raise BenchError(
        f"{source} is not a SavedModel directory, a serving directory with integer versions "
        f"or a volume with serving/{SERVICE}; pass one of those, or nothing to export a "
        "freshly built model"
    )


def sample_request(work: Path, data_dir: str | None) -> tuple[Path, bytes, str]:
    """The project's sample request (one b64 PNG): its file, the PNG bytes, what it shows."""
    from ml.data.sample import sample_image, write_sample

    pixels, what = sample_image(data_dir, synthetic_ok=True)
    written = write_sample(work / "sample", pixels, what)
    return Path(written["request"]), Path(written["png"]).read_bytes(), what


# --------------------------------------------------------------------------- in-process


def inprocess_limit(version_dir: Path, png: bytes, duration: float) -> dict[str, float]:
    """Calls/s of the exported ``serving_default`` at batch 1 and 32 (input built once)."""
    import tensorflow as tf

    from ml.model.export import BYTES_INPUT, DEFAULT_SIGNATURE, OUTPUT

    fn = tf.saved_model.load(str(version_dir)).signatures[DEFAULT_SIGNATURE]
    result = {}
    for batch in (1, 32):
        tensor = tf.constant([png] * batch, tf.string)
        fn(**{BYTES_INPUT: tensor})  # warm
        calls, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < duration:
            fn(**{BYTES_INPUT: tensor})[OUTPUT].numpy()
            calls += 1
        result[f"b{batch}_calls_per_s"] = calls / elapsed
        result[f"b{batch}_images_per_s"] = calls * batch / elapsed
    return result


def tf_import_seconds() -> float:
    """Wall seconds of ``python -c "import tensorflow"`` alone."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import tensorflow"], check=True, env=_env(REPO), cwd=REPO
    )
    return time.perf_counter() - started


# --------------------------------------------------------------------------- the server


def _env(repo: Path) -> dict[str, str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    return env


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None  # not listening yet


class Server:
    """``python -m ml serve`` from ``repo`` on a free 127.0.0.1 port; ``cold_start`` is the
    seconds from process start to the first readiness 200."""

    def __init__(self, repo: Path, serving: Path, log_path: Path) -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.predict_url = f"{self.url}/v1/models/{SERVICE}:predict"
        argv = contract.serve(
            serving, SERVICE, host="127.0.0.1", http_port=port, python=sys.executable
        )
        self.log_path = log_path
        with open(log_path, "wb") as log:
            started = time.monotonic()
            self.proc = subprocess.Popen(
                argv, cwd=repo, env=_env(repo), stdout=log, stderr=subprocess.STDOUT
            )
        verdict = poll(
            lambda: _status(f"{self.url}/v1/models/{SERVICE}"),
            self._judge,
            timeout=READY_TIMEOUT,
            interval=0.01,
        )
        self.cold_start = time.monotonic() - started
        if not isinstance(verdict, Done):
            self.stop()
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            reason = verdict.reason if isinstance(verdict, Failed) else "timed out"
            raise BenchError(f"the server did not become ready ({reason}); its log:\n{tail}")

    def _judge(self, status: int | None) -> Any:
        if status == 200:
            return Done()
        if self.proc.poll() is not None:
            return Failed(f"it exited with {self.proc.returncode}")
        return Pending(f"readiness: {status}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --------------------------------------------------------------------------- hey


def run_hey(url: str, body: Path, concurrency: int, duration: float) -> dict[str, float]:
    argv = [hey_binary(), "-z", f"{duration:g}s", "-c", str(concurrency), "-m", "POST"]
    argv += ["-T", "application/json", "-D", str(body), url]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"hey failed ({done.returncode}): {done.stderr.strip()}")
    return parse_hey(done.stdout)


def parse_hey(text: str) -> dict[str, float]:
    """requests/s, p50/p95/p99 in ms, and errors (non-200 answers plus transport errors)."""
    rps = re.search(r"Requests/sec:\s*([\d.]+)", text)
    if not rps:
        raise BenchError(f"hey printed no Requests/sec line:\n{text}")
    result: dict[str, float] = {"requests_per_s": float(rps[1])}
    for pct in (50, 95, 99):
        found = re.search(rf"^\s*{pct}%+ in ([\d.]+) secs", text, re.M)
        result[f"p{pct}_ms"] = float(found[1]) * 1000 if found else float("nan")
    codes = dict(re.findall(r"^\s*\[(\d+)\]\s+(\d+) responses", text, re.M))
    ok = int(codes.pop("200", 0))
    errors = sum(int(n) for n in codes.values())
    section = text.split("Error distribution:", 1)
    if len(section) == 2:
        errors += sum(int(n) for n in re.findall(r"^\s*\[(\d+)\]", section[1], re.M))
    result.update(ok=ok, errors=errors)
    return result


# --------------------------------------------------------------------------- a run


def measure_server(
    repo: Path, serving: Path, body: Path, duration: float, log_path: Path
) -> dict[str, Any]:
    server = Server(repo, serving, log_path)
    try:
        figures: dict[str, Any] = {"cold_start_s": server.cold_start}
        for c in CONCURRENCY:
            figures[f"c{c}"] = run_hey(server.predict_url, body, c, duration)
    finally:
        server.stop()
    return figures


def one_repeat(
    repos: dict[str, Path], serving: Path, body: Path, png: bytes, duration: float, log_dir: Path
) -> dict[str, Any]:
    version_dir = serving / str(max(int(p.name) for p in serving.iterdir() if p.name.isdigit()))
    figures: dict[str, Any] = {
        "inprocess": inprocess_limit(version_dir, png, min(duration, 5.0)),
        "tf_import_s": tf_import_seconds(),
    }
    for label, repo in repos.items():
        figures[label] = measure_server(repo, serving, body, duration, log_dir / f"{label}.log")
    return figures


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _median_tree(samples: Sequence[Any]) -> Any:
    """The element-wise median of equally shaped dicts of numbers."""
    if isinstance(samples[0], dict):
        return {k: _median_tree([s[k] for s in samples]) for k in samples[0]}
    return _median(samples)


def summarise(repeats: list[dict[str, Any]], labels: Sequence[str]) -> dict[str, Any]:
    median = _median_tree(repeats)
    b1 = median["inprocess"]["b1_calls_per_s"]
    for label in labels:
        server = median[label]
        server["ratio_c1_to_inprocess_b1"] = server["c1"]["requests_per_s"] / b1
        server["ratio_c5_to_inprocess_b1"] = server["c5"]["requests_per_s"] / b1
        server["cold_start_minus_tf_import_s"] = server["cold_start_s"] - median["tf_import_s"]
        for c in CONCURRENCY:
            row = server[f"c{c}"]
            row["p99_over_p50"] = row["p99_ms"] / row["p50_ms"]
    return median


def run(
    volume_or_model_dir: str | Path | None = None,
    repeats: int = 3,
    duration: float = 10.0,
    compare: dict[str, Path] | None = None,
    data_dir: str | None = None,
) -> dict[str, Any]:
    """The whole benchmark (see the module doc); a JSON-able dict."""
    hey_binary()
    repos = {THIS: REPO, **(compare or {})}
    source = Path(volume_or_model_dir) if volume_or_model_dir else None
    with tempfile.TemporaryDirectory(prefix="distml-bench-serving-") as tmp:
        work = Path(tmp)
        serving, model = prepare_model(source, work)
        body, png, image = sample_request(work, data_dir)
        samples = []
        for i in range(repeats):
            print(f"repeat {i + 1}/{repeats}", file=sys.stderr, flush=True)
            samples.append(one_repeat(repos, serving, body, png, duration, work))
    return {
        "model": model,
        "request": f"one base64 PNG per request ({image}), {len(png)} bytes of PNG",
        "repeats": repeats,
        "duration_s": duration,
        "concurrency": list(CONCURRENCY),
        "servers": {label: str(path) for label, path in repos.items()},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "median": summarise(samples, list(repos)),
        "samples": samples,
    }


def table(result: dict[str, Any]) -> str:
    """The medians as a Markdown table, one row per server and concurrency."""
    median = result["median"]
    limit = median["inprocess"]
    lines = [
        f"In-process `serving_default`: batch 1 {limit['b1_calls_per_s']:,.0f} calls/s; "
        f"batch 32 {limit['b32_calls_per_s']:,.0f} calls/s "
        f"({limit['b32_images_per_s']:,.0f} images/s). "
        f"`import tensorflow` alone: {median['tf_import_s']:.2f} s.",
        "",
        "| server | c | req/s | ÷ in-process b1 | p50 ms | p95 ms | p99 ms | p99/p50 | errors "
        "| cold start s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label in result["servers"]:
        server = median[label]
        for c in CONCURRENCY:
            row = server[f"c{c}"]
            lines.append(
                f"| {label} | {c} | {row['requests_per_s']:,.0f} | "
                f"{row['requests_per_s'] / limit['b1_calls_per_s']:.2f} | {row['p50_ms']:.2f} | "
                f"{row['p95_ms']:.2f} | {row['p99_ms']:.2f} | {row['p99_over_p50']:.1f} | "
                f"{row['errors']:g} | {server['cold_start_s']:.2f} |"
            )
    return "\n".join(lines)


def _repo_pair(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not label or not (Path(path) / "ml" / "serve.py").is_file():
        raise argparse.ArgumentTypeError(
            f"expected LABEL=DIR with DIR a distml checkout (DIR/ml/server/serve.py), got {text!r}"
        )
    return label, Path(path).resolve()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/bench_serving.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("source", nargs="?", help="SavedModel, serving directory or volume")
    p.add_argument("--repeats", type=int, default=3, help="repeats (the median is reported)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of hey per level")
    p.add_argument("--data-dir", help="directory of the Fashion-MNIST files (the sample image)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    p.add_argument(
        "--compare", type=_repo_pair, action="append", default=[], help="LABEL=DIR: also "
        "benchmark the server of another checkout, alternating with this one",
    )  # fmt: skip
    args = p.parse_args(argv)
    try:
        result = run(args.source, args.repeats, args.duration, dict(args.compare), args.data_dir)
    except BenchError as e:
        print(f"benchmarks/bench_serving.py: {e}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
