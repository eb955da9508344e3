"""runtime/canary/cluster.py with everything real but the Kubernetes API: the real model
server forwarding a canary's share to the canary's own server (as every predictor pod does
to the canary's pod), a real Prometheus scraping the predictor, and the canary's Jobs run
here for real on a local volume (tests/support/jobs_run_here.py). What it holds: the weight
a Job writes is what every pod shows before an interval starts; each version's requests
are counted exactly, split as asked; in the shadow phase, the mirrored copies and their
agreement are the canary's figures; the labelled sample is scored per version; a canary
pod that restarted fails the measurement; a promotion and a rollback end with the pods
serving what the volume says, and the record kept there."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
from hypothesis import given
from hypothesis import strategies as st
from invoke import Config, MockContext

from k8s.manifests import canary_pods
from k8s.monitoring.prometheus import PrometheusError, PrometheusRef
from k8s.providers.settings import Settings
from loadtest.metrics_text import Counts, parse_page
from loadtest.server_view import METRICS_PATH, fetch
from ml import contract
from ml.contract import records
from ml.data.raw import FILES
from ml.selection import canary_publish
from ml.selection.publishing import serving_versions
from runtime.canary import cluster_pod
from runtime.canary.analysis import MeasurementError, Result
from runtime.canary.cluster import ClusterCanary, Pods, counted_since
from runtime.canary.gates import Figures, Outcome, Thresholds, judge, overall
from runtime.canary.policy import Action, Decision
from runtime.cluster import ClusterRuntime
from runtime.cluster.context import ClusterError
from runtime.workdir import Workdir
from tests.support.jobs_run_here import REPO, JobsRunHere
from tests.support.loopback_prometheus import LoopbackPrometheus, loopback_prometheus
from tests.support.predict_server import wait_for
from tests.support.served_model import SVC, send, served_canary, served_model

NS = "kubeflow"
REF = PrometheusRef("monitoring", "distml-prometheus", 9090)


@dataclass
class Rig:
    root: Path  # the volume
    url: str
    prom: LoopbackPrometheus


@pytest.fixture(scope="module")
def rig(tmp_path_factory, shared_data_dir) -> Rig:
    root = tmp_path_factory.mktemp("volume")
    raw = Path(contract.raw_data_dir(root))  # where `up --source-dir` puts them on a cluster
    raw.mkdir(parents=True)
    for name in FILES:
        (raw / name).symlink_to(shared_data_dir / name)
    with served_model(root, canary=True) as url:
        targets = {"p1": urlparse(url).netloc}
        workdir = tmp_path_factory.mktemp("prom")  # its own: a TSDB holds the last server's series
        with loopback_prometheus(workdir, targets, NS, SVC, interval="1s") as prom:
            prom.wait_scraped(1)
            yield Rig(root, url, prom)


@pytest.fixture
def own(monkeypatch) -> Iterator[Callable[[Path], str]]:
    """Starts the canary's own server (the cluster's canary pod) for one test, and points
    the weight Job's URL at it."""
    with ExitStack() as stack:

        def start(root: Path) -> str:
            url = stack.enter_context(served_canary(root))
            monkeypatch.setattr(canary_pods, "url", lambda s: url)
            return url

        yield start


def canary_of(
    rig: Rig, tmp_path: Path, lines: list[str], own: Callable[[Path], str]
) -> tuple[ClusterCanary, JobsRunHere]:
    """A canary of a new version (published as ``ml select --canary`` does) beside the one
    serving, in a server of its own, judged through a FakeKube whose Jobs run here."""
    stable = serving_versions(Path(contract.serving_dir(rig.root, SVC)))[-1]
    version = canary_publish.publish_canary(rig.root / "export", rig.root, SVC, {"source": "t"})
    own(rig.root)
    kube = JobsRunHere()
    rig.prom.serve_on(kube, REF)
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    c = MockContext(config=Config(overrides={"run": {"dry": False}}))
    cx = ClusterRuntime(c, "kind", wd, REPO, kube=kube, clock=time, out=lines.append).cx
    s = Settings(image="x", namespace=NS, service=SVC, mount_path=str(rig.root))
    canary = ClusterCanary(
        cx, s, ref=REF, stable=stable, version=version, address=rig.url, note=lines.append,
    )  # fmt: skip
    return canary, kube


def wait_counted(rig: Rig, canary: ClusterCanary, n: int) -> None:
    """Until Prometheus has scraped ``n`` more predict requests than at the canary's mark."""

    def counted() -> float:
        now = canary._readings()[0]
        return sum(
            counted_since(canary._counted, now, v).total for v in (canary.stable, canary.version)
        )

    rig.prom.wait_for(f"{n} requests scraped", lambda: counted() >= n, timeout=30)


def test_a_canary_takes_its_share_exactly_and_is_promoted(rig, tmp_path, own):
    lines: list[str] = []
    canary, kube = canary_of(rig, tmp_path, lines, own)
    canary.set_weight(25)
    assert canary.pods() == Pods(frozenset({"p1"}), {"p1": {str(canary.version): 25.0}},
                                 {"p1": str(canary.stable)}, {})  # fmt: skip
    send(rig.url, 40, 0)
    wait_counted(rig, canary, 40)
    stable, new = canary.measure(30)
    assert (stable.requests, new.requests) == (30, 10), "25% of 40, counted apart"
    assert stable.errors == new.errors == 0 and new.p99_s is not None and new.p99_s > 0
    assert stable.accuracy is not None and stable.accuracy == new.accuracy, lines
    canary.promote(Result(Decision(Action.PROMOTE, 100, "every gate passed")))
    assert canary.pods().stable == {"p1": str(canary.version)} and not canary.pods().weights
    record = records.read_publish(
        Path(contract.serving_dir(rig.root, SVC)) / str(canary.version) / contract.PUBLISH_FILE
    )
    assert record["canary"]["reason"] == "every gate passed"
    assert [name for name, _, code in kube.ran] == [
        "distml-canary-weight", "distml-canary-sample", "distml-canary-end",
    ] and all(code == 0 for _, _, code in kube.ran)  # fmt: skip


def measured_after_ten(rig: Rig, canary: ClusterCanary) -> tuple[Figures, Figures]:
    """Ten predict requests sent, counted by Prometheus, then one interval measured."""
    send(rig.url, 10, 0)
    wait_counted(rig, canary, 10)
    return canary.measure(30)


def test_a_rolled_back_canary_is_set_aside_and_the_stable_serves_on(rig, tmp_path, own):
    lines: list[str] = []
    canary, _ = canary_of(rig, tmp_path, lines, own)
    canary.set_weight(50)
    stable, new = measured_after_ten(rig, canary)
    assert (stable.requests, new.requests) == (5, 5)
    canary.rollback(Result(Decision(Action.ROLLBACK, 0, "errors: 5 of 5")))
    pods = canary.pods()
    assert pods.stable == {"p1": str(canary.stable)} and not pods.weights
    kept = Path(contract.rejected_dir(rig.root, SVC)) / str(canary.version)
    assert records.read_publish(kept / contract.PUBLISH_FILE)["rejected"]["reason"] == (
        "errors: 5 of 5"
    )


def test_the_shadow_phase_judges_the_mirrored_copies_and_no_user_gets_them(rig, tmp_path, own):
    canary, _ = canary_of(rig, tmp_path, [], own)
    canary.set_weight(0, shadow=50)
    v = str(canary.version)
    assert canary.pods().shadows == {"p1": {v: 50.0}} and canary.pods().weights == {"p1": {v: 0}}
    start = copies(rig.url, v)
    for k in range(1, 11):  # one user: each copy answered before the next request
        send(rig.url, 1, 0)
        wait_for(lambda k=k: copies(rig.url, v) - start >= k // 2, 30, f"copy {k // 2} answered")

    def mirrored() -> float:
        return counted_since(canary._mirrored, canary._readings()[1], canary.version).total

    rig.prom.wait_for("5 mirrored copies scraped", lambda: mirrored() >= 5, timeout=30)
    wait_counted(rig, canary, 10)
    stable, new = canary.measure(30)
    assert (stable.requests, new.requests) == (10, 5), "every user answered by the stable"
    assert new.agreement == (5, 0), "an identical version agrees on every mirrored image"
    canary.set_weight(10)
    assert canary.pods().shadows == {}, "the phase ended in every pod"
    canary.rollback(Result(Decision(Action.ROLLBACK, 0, "test over")))


def copies(url: str, version: str) -> float:
    """The mirrored copies the predictor's server has had answered so far."""
    return parse_page(fetch(url + METRICS_PATH)).shadowed(SVC, version).total


def test_a_canary_pod_that_restarted_fails_the_measurement(rig, tmp_path, own):
    canary, kube = canary_of(rig, tmp_path, [], own)
    pod = kube.put(canary_pods.canary_pod(canary.s))
    canary.seen = cluster_pod.Seen(pod["metadata"]["uid"], 0)
    canary.set_weight(50)
    stable, new = measured_after_ten(rig, canary)
    assert new.down is None, "a pod as it was Ready"
    pod = kube.obj("v1", "Pod", canary_pods.name(canary.s), NS)
    pod["status"] = {"containerStatuses": [{"restartCount": 1, "lastState": {
        "terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}  # fmt: skip
    stable, new = measured_after_ten(rig, canary)
    assert new.down == "its pod restarted 1 time(s) (OOMKilled, exit 137)"
    gates = judge(stable, new, Thresholds())
    assert gates[-1].name == "server" and overall(gates) is Outcome.FAIL
    kube.remove("v1", "Pod", canary_pods.name(canary.s), NS)
    assert measured_after_ten(rig, canary)[1].down == "its pod is gone (deleted or evicted)"
    canary.rollback(Result(Decision(Action.ROLLBACK, 0, "test over")))


def test_an_unread_interval_start_is_a_measurement_error_not_a_stop(
    rig, tmp_path, monkeypatch, own
):
    # Prometheus fails the reading right after a step: that interval is an error (the
    # policy's consecutive-error limit applies), the next one counts from its own start.
    canary, _ = canary_of(rig, tmp_path, [], own)
    real, calls = ClusterCanary._readings, []

    def flaky(self):
        calls.append(1)
        if len(calls) == 1:
            raise PrometheusError("HTTP 503 from the proxy")
        return real(self)

    monkeypatch.setattr(ClusterCanary, "_readings", flaky)
    canary.set_weight(50)
    with pytest.raises(MeasurementError, match="interval's start could not be read: HTTP 503"):
        canary.measure(30)
    stable, new = measured_after_ten(rig, canary)
    assert (stable.requests, new.requests) == (5, 5)
    canary.rollback(Result(Decision(Action.ROLLBACK, 0, "test over")))


def test_a_failed_job_is_a_clear_error(rig, tmp_path, own):
    canary, _ = canary_of(rig, tmp_path, [], own)
    canary.rollback(Result(Decision(Action.ROLLBACK, 0, "cleared")))  # no canary left
    with pytest.raises(ClusterError, match="setting the canary's share to 10% failed"):
        canary.set_weight(10)


COUNTS = st.lists(st.integers(0, 50), min_size=1, max_size=8)
SOME = st.lists(st.integers(1, 50), min_size=1, max_size=8)  # a reset shows as a drop


@given(SOME, COUNTS)
def test_counted_between_readings_takes_new_and_restarted_pods_from_zero(a, b):
    def reading(**by_pod: float) -> dict:
        return {(pod, "2"): Counts({"200": n}, {0.1: n, math.inf: n}) for pod, n in by_pod.items()}

    before = reading(p1=sum(a))
    after = reading(p1=sum(a) + sum(b), p2=sum(b))  # p2: scaled out since
    assert counted_since(before, after, 2).total == 2 * sum(b)
    assert counted_since(before, after, 1).total == 0, "another version's counts are not taken"
    restarted = reading(p1=sum(b))  # p1 restarted: its counter began again at 0
    assert counted_since(after, restarted, 2).total == sum(b)


@pytest.mark.parametrize("module", ["runtime.canary.cluster", "runtime.cluster.canary_deploy"])
def test_either_side_of_the_import_cycle_imports_first(module):
    # runtime.canary.cluster imports runtime.cluster, whose package imports canary_deploy,
    # which imports runtime.canary.cluster: a fresh interpreter, each one first.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-600:]
