"""A load test's arguments, checked before anything starts, and the Locust command and
environment they make."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from loadtest.summary import CSV_PREFIX

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
# At the end of the run each user finishes the request it has in flight (Locust's default
# drops it): then the server has answered exactly the requests Locust counted, which the
# server-side view compares. One still unanswered after this long is dropped, as by default.
STOP_TIMEOUT_S = 10

_DURATION_RE = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str | int) -> int:
    """Seconds in ``"30s"``, ``"2m"``, ``"1h"``, ``"1m30s"`` or a plain ``"90"``; must be > 0."""
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}")
    s = str(text).strip().lower()
    if s.isascii() and s.isdigit():
        seconds = int(s)
    else:
        m = _DURATION_RE.fullmatch(s)
        if not s or m is None:
            raise ValueError(
                f"invalid duration {text!r}: use seconds ('90') or a number with a unit "
                "h/m/s ('30s', '2m', '1m30s')"
            )
        h, mins, secs = (int(g or 0) for g in m.groups())
        seconds = h * 3600 + mins * 60 + secs
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be at least 1 second")
    return seconds


def check_flags(concurrency: int, duration: str | int, max_failure_ratio: float) -> None:
    """The load test's flags, checked before anything starts: ValueError naming the flag."""
    if concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
    if not 0.0 <= max_failure_ratio <= 1.0:
        raise ValueError(f"--max-failure-ratio is between 0 and 1, got {max_failure_ratio}")
    try:
        parse_duration(duration)
    except ValueError as e:
        raise ValueError(f"--duration: {e}") from e


def check_payload(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"payload file not found: {path}")
    try:
        instances = json.loads(path.read_bytes())["instances"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a KServe V1 request body with 'instances' ({e})") from e
    if not isinstance(instances, list) or not instances:
        raise ValueError(f"{path}: 'instances' must be a non-empty list")


@dataclass(frozen=True)
class Plan:
    """One load test's checked arguments, and the Locust run they make."""

    url: str
    model: str
    payload: Path
    out: Path
    concurrency: int
    seconds: int
    rate: float
    host_header: str | None

    @property
    def endpoint(self) -> str:
        return f"{self.url}/v1/models/{self.model}:predict"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "locust",
            "-f", str(LOCUSTFILE),
            "--headless",
            "--users", str(self.concurrency),
            "--spawn-rate", f"{self.rate:g}",
            "--run-time", f"{self.seconds}s",
            "--stop-timeout", str(STOP_TIMEOUT_S),
            "--host", self.url,
            "--csv", str(self.out / CSV_PREFIX),
            "--csv-full-history",  # history percentiles over a rolling window, not cumulative
            "--only-summary",
            "--exit-code-on-error", "0",  # request failures are judged by check(), not here
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
        env.update(
            DISTML_LOADTEST_PAYLOAD=str(self.payload),
            DISTML_LOADTEST_MODEL=self.model,
            PYTHONUNBUFFERED="1",
        )
        env.pop("DISTML_LOADTEST_HOST_HEADER", None)
        if self.host_header:
            env["DISTML_LOADTEST_HOST_HEADER"] = self.host_header
        return env


def plan_run(
    url: str,
    model_name: str,
    payload_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    concurrency: int,
    duration: str | int,
    spawn_rate: float | None,
    host_header: str | None,
) -> Plan:
    """The arguments checked (ValueError / FileNotFoundError), in this order."""
    seconds = parse_duration(duration)
    if isinstance(concurrency, bool) or int(concurrency) != concurrency or concurrency < 1:
        raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
    rate = float(concurrency if spawn_rate is None else spawn_rate)
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"spawn_rate must be > 0, got {spawn_rate!r}")
    url = url.strip().rstrip("/")
    if not re.match(r"https?://[^/]", url):
        raise ValueError(f"url must start with http:// or https://, got {url!r}")
    if not model_name or "/" in model_name:
        raise ValueError(f"invalid model name {model_name!r}")
    payload = Path(payload_path).resolve()
    check_payload(payload)
    out = Path(out_dir).resolve()
    return Plan(url, model_name, payload, out, int(concurrency), seconds, rate, host_header)
