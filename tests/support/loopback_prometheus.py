"""A real Prometheus (Debian's ``prometheus`` 2.42, ``/usr/bin/prometheus``) on a loopback
port, scraping the loopback servers a test names, with the labels distml's scrape job
attaches (``namespace``, ``isvc``, ``pod``; job ``distml-predictor``, or another as a
Prometheus Operator's PodMonitor names it); and the bridge that
makes it answer ``FakeKube.proxy_get`` as the API server's service proxy would, so that
``k8s.monitoring.prometheus`` (and everything above it) reads a real Prometheus.

Tests skip with one line when the binary is missing (``apt-get install prometheus``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.poll import Done, Pending, poll
from k8s.client.kube import ProxyError
from ml.contract import serving_metrics as sm
from runtime.procs import free_ports

BINARY = "/usr/bin/prometheus"
START_TIMEOUT_S = 60.0


def _config(
    targets: dict[str, str], namespace: str, service: str, interval: str, job: str, probe: bool
) -> str:
    """pod -> host:port, scraped as distml's job scrapes a predictor pod; ``probe``: the
    first one also as the predictor Service's probe scrapes it (``namespace`` and ``isvc``,
    no ``pod``, every sample dropped: k8s.monitoring.stack.service_probe_config)."""
    from k8s.monitoring import stack

    static = [
        {"targets": [address], "labels": {"namespace": namespace, "isvc": service, "pod": pod}}
        for pod, address in targets.items()
    ]
    jobs = [{"job_name": job, "static_configs": static}]
    if probe:
        dropped = stack.service_probe_config(stack_settings(namespace))["metric_relabel_configs"]
        jobs.append({
            "job_name": stack.SERVICE_PROBE_JOB,
            "static_configs": [{"targets": [next(iter(targets.values()))],
                                "labels": {"namespace": namespace, "isvc": service}}],
            "metric_relabel_configs": dropped,
        })  # fmt: skip
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": jobs,
    }
    return json.dumps(config)  # JSON is YAML


def stack_settings(namespace: str) -> Any:
    from k8s.providers.settings import Settings

    return Settings(image="-", namespace=namespace, serving_mode="standard")


class LoopbackPrometheus:
    """A Prometheus process on 127.0.0.1 (the module doc)."""

    def __init__(
        self,
        workdir: Path,
        targets: dict[str, str],
        namespace: str,
        service: str,
        interval: str = "1s",
        job: str = sm.SCRAPE_JOB,
        probe: bool = False,
    ) -> None:
        if not Path(BINARY).is_file() and not shutil.which("prometheus"):
            pytest.skip(f"no Prometheus at {BINARY}: apt-get install prometheus")
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(
            _config(targets, namespace, service, interval, job, probe)
        )
        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        command = [
            BINARY if Path(BINARY).is_file() else "prometheus",
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def get(self, path: str, params: dict[str, str] | None = None) -> bytes:
        """GET ``path`` (no leading slash); an error answer raises ProxyError as the API
        server's proxy passes it on (status and body)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.url}/{path}{query}", timeout=10) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            body = e.read()
            raise ProxyError(f"GET {path}: HTTP {e.code}", status=e.code, body=body) from None

    def query(self, promql: str) -> list[dict[str, Any]]:
        return json.loads(self.get("api/v1/query", {"query": promql}))["data"]["result"]

    def wait_for(self, what: str, condition: Any, timeout: float = START_TIMEOUT_S) -> Any:
        """Poll ``condition()`` (errors count as not yet) until truthy, with a deadline."""

        def observe() -> Any:
            assert self.proc.poll() is None, f"Prometheus exited:\n{self.log.read_text()[-2000:]}"
            try:
                return condition()
            except (OSError, ProxyError, ValueError, KeyError):
                return None

        verdict = poll(
            observe, lambda v: Done(v) if v else Pending(), timeout=timeout, interval=0.2
        )
        assert isinstance(verdict, Done), f"Prometheus: timed out waiting for {what}"
        return verdict.value

    def wait_scraped(self, pods: int) -> None:
        """Until ``pods`` predictor targets are up."""
        self.wait_for(f"{pods} target(s) up", lambda: len(self.query("up == 1")) == pods)

    def serve_on(self, kube: Any, ref: Any) -> None:
        """Answer ``kube.proxy_get`` for ``ref``'s Service (a FakeKube)."""
        kube.serve_proxy(ref.namespace, ref.service, ref.port, self.get)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@contextlib.contextmanager
def loopback_prometheus(*args: Any, **kwargs: Any) -> Iterator[LoopbackPrometheus]:
    """A started, ready :class:`LoopbackPrometheus` (its arguments: the targets, pod ->
    host:port, scraped every ``interval`` as job ``job``); stopped after."""
    prom = LoopbackPrometheus(*args, **kwargs)
    try:
        prom.wait_for("readiness", lambda: prom.get("-/ready"))
        yield prom
    finally:
        prom.stop()
