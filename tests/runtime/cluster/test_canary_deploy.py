"""runtime/cluster/canary_deploy.py: ``deploy --canary`` and ``invoke canary`` on a cluster,
with everything real but the Kubernetes API (tests/support/jobs_run_here.py): the selection,
weight, sample and end Jobs run here on a local volume; the model server forwards the
canary's share as a predictor pod does, to the canary's own server, started here when its
Pod is applied; a real Prometheus scrapes the predictor under load. A good canary is promoted
with an Event per decision on the InferenceService; an abort rolls it back, the stable
untouched; what would change the serving deployment, or judge without Prometheus, is
refused before anything runs."""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
from invoke import Config, MockContext

from k8s import manifests
from k8s.manifests import canary_pods
from k8s.monitoring.prometheus import OWN_SERVICE, PORT, PrometheusRef
from k8s.providers.settings import Settings
from ml import contract
from ml.contract import serving_metrics
from ml.data.raw import FILES
from ml.selection import canary_publish
from ml.selection.publishing import serving_versions
from runtime.canary import live
from runtime.cluster import ClusterRuntime, canary_deploy
from runtime.cluster.canary_deploy import published_canary
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.requests import DeployRequest
from runtime.workdir import Workdir
from tests.support.fakekube import conditions_status
from tests.support.jobs_run_here import REPO, JobsRunHere
from tests.support.loopback_prometheus import loopback_prometheus
from tests.support.served_model import SVC, send, served_canary, served_model

NS = "kubeflow"
REF = PrometheusRef(NS, OWN_SERVICE, PORT)  # distml's own, as `up --with-monitoring` makes


@dataclass
class Rig:
    root: Path
    url: str
    prom: object


@pytest.fixture(scope="module")
def rig(tmp_path_factory, shared_data_dir) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("volume")
    raw = Path(contract.raw_data_dir(root))
    raw.mkdir(parents=True)
    for name in FILES:
        (raw / name).symlink_to(shared_data_dir / name)
    with served_model(root, canary=True) as url:
        shutil.copytree(root / "export", Path(contract.candidate_dir(root, "cnn")))
        targets = {"p1": urlparse(url).netloc}
        workdir = tmp_path_factory.mktemp("prom")  # its own: a TSDB holds the last server's series
        with loopback_prometheus(workdir, targets, NS, SVC, interval="1s") as prom:
            prom.wait_scraped(1)
            yield Rig(root, url, prom)


def own_server(rig: Rig, pod: dict, monkeypatch, stack: ExitStack) -> None:
    """The canary's pod, run here: its own server, which the weight Job's URL names."""
    assert pod["metadata"]["name"] == canary_pods.name(Settings(image="x", service=SVC))
    url = stack.enter_context(served_canary(rig.root))
    monkeypatch.setattr(canary_pods, "url", lambda s: url)


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def cluster(
    rig: Rig, tmp_path: Path, monkeypatch, lines: list[str], stack: ExitStack
) -> tuple[ClusterRuntime, JobsRunHere]:
    """A kind cluster `up --with-monitoring` made, serving our predictor (Ready at the
    server's URL), whose pods mount the volume at ``rig.root``."""
    kube = JobsRunHere()
    rig.prom.serve_on(kube, REF)
    kube.run_pod = lambda pod: own_server(rig, pod, monkeypatch, stack)
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    wd.update_state(up=True, runtime="kind", serving_mode="standard", monitoring=True)
    c = MockContext(config=Config(overrides={"run": {"dry": False}}))
    rt = ClusterRuntime(c, "kind", wd, REPO, kube=kube, clock=time, out=lines.append)
    real = ClusterContext.settings
    monkeypatch.setattr(
        ClusterContext,
        "settings",
        lambda self, **ch: real(self, **{"mount_path": str(rig.root), **ch}),
    )
    s = rt.cx.settings()
    kube.put(manifests.serving_runtime(s))
    isvc = kube.put(manifests.inference_service(s))
    ready = conditions_status(("Ready", "True"), url="http://tf-mnist.example.com")
    kube.set_status(*kube.key_of(isvc), {**ready, "address": {"url": rig.url}})
    return rt, kube


@pytest.fixture
def load(rig) -> Iterator[None]:
    """Predict requests, two at a time, until the test ends (a canary needs 50 a step)."""
    stop = threading.Event()

    def user() -> None:
        while not stop.is_set():
            send(rig.url, 5, 0)

    users = [threading.Thread(target=user, daemon=True) for _ in range(2)]
    for u in users:
        u.start()
    yield
    stop.set()
    for u in users:
        u.join(timeout=30)


def events(kube: JobsRunHere) -> list[tuple[str, str, str]]:
    return [
        (o["reason"], o["type"], o["involvedObject"]["name"])
        for (_, kind, _, _), o in kube.objects.items()
        if kind == "Event"
    ]


def test_a_good_canary_is_promoted_with_an_event_per_decision(
    rig, tmp_path, monkeypatch, load, stack
):
    lines: list[str] = []
    rt, kube = cluster(rig, tmp_path, monkeypatch, lines, stack)
    before = serving_versions(Path(contract.serving_dir(rig.root, SVC)))[-1]
    request = DeployRequest(force=True, canary=True, canary_steps=(50,), canary_interval=1.0)
    assert rt.deploy(request) == 0, "\n".join(lines)
    text = "\n".join(lines)
    assert "judging every 4 s" in text, "four of Prometheus's 1 s scrapes at least"
    version = before + 1
    assert f"promoted: version {version} serves every request" in text
    assert serving_versions(Path(contract.serving_dir(rig.root, SVC)))[-1] == version
    reasons = [r for r, _, name in events(kube) if name == SVC]
    assert reasons[0] == "CanaryAnalysis" and reasons[-1] == "CanaryPromoted"
    assert all(t == "Normal" for _, t, _ in events(kube))
    found = live.facts(rt.cx.wd, SVC)
    assert found["running"] is False and found["version"] == version
    assert rt.cx.wd.state().object_uids, "every Job it made is recorded as its own"


def test_an_abort_rolls_the_canary_back_and_leaves_the_stable(
    rig, tmp_path, monkeypatch, load, stack
):
    lines: list[str] = []
    rt, kube = cluster(rig, tmp_path, monkeypatch, lines, stack)
    stable = serving_versions(Path(contract.serving_dir(rig.root, SVC)))[-1]
    live.control_path(rt.cx.wd).parent.mkdir(parents=True, exist_ok=True)
    said = lines.append

    def and_abort(line: str) -> None:  # `invoke canary --abort` as the canary starts
        said(line)
        if line.startswith("canary: version"):
            live.control_path(rt.cx.wd).write_text("abort\n")

    rt.cx.out = and_abort
    request = DeployRequest(force=True, canary=True, canary_steps=(50,), canary_interval=1.0)
    assert rt.deploy(request) == 1
    text = "\n".join(lines)
    assert "rolled back (aborted by hand)" in text and f"version {stable} serves every" in text
    assert serving_versions(Path(contract.serving_dir(rig.root, SVC)))[-1] == stable
    assert serving_versions(Path(contract.rejected_dir(rig.root, SVC)))
    assert ("CanaryRolledBack", "Warning", SVC) in events(kube)


def test_what_a_canary_cannot_do_is_refused_before_anything_runs(rig, tmp_path, monkeypatch, stack):
    rt, kube = cluster(rig, tmp_path, monkeypatch, [], stack)
    with pytest.raises(ClusterError, match="--max-replicas changes the serving deployment"):
        rt.deploy(DeployRequest(canary=True, max_replicas=3))
    rt.cx.wd.update_state(monitoring=False)
    with pytest.raises(ClusterError, match="judged from Prometheus, and there is none"):
        rt.deploy(DeployRequest(canary=True))
    rt.cx.wd.update_state(monitoring=True)
    isvc = kube.obj("serving.kserve.io/v1beta1", "InferenceService", SVC, NS)
    isvc["spec"]["predictor"]["model"]["runtime"] = "kserve-tensorflow-serving"
    with pytest.raises(ClusterError, match="runs TF Serving"):
        rt.deploy(DeployRequest(canary=True))
    assert kube.ran == [], "no Job ran"


def test_the_published_version_is_read_off_the_selections_log():
    s = Settings(image="x", service=SVC)
    where = contract.canary_dir(s.mount_path, SVC)
    assert published_canary(f"candidate cnn: ...\npublished cnn as {where}/7\n", s) == 7
    assert (
        published_canary(f"published cnn as {contract.serving_dir(s.mount_path, SVC)}/7", s) is None
    )
    assert published_canary("error: kept version 3", s) is None


def test_a_workflows_canary_is_found_in_the_pods_and_judged_the_same_way(
    rig, tmp_path, monkeypatch, load, stack
):
    # `invoke workflow --canary --watch`: checked before the Workflow is submitted; its
    # select step publishes the canary (here: as ml select --canary does); the predictor
    # pods find it by themselves (at weight 0, never loading it); then the same analysis.
    lines: list[str] = []
    rt, kube = cluster(rig, tmp_path, monkeypatch, lines, stack)
    request = DeployRequest(canary=True, canary_steps=(50,), canary_interval=1.0)
    prepared = canary_deploy.prepare(rt.cx, request)
    version = canary_publish.publish_canary(rig.root / "export", rig.root, SVC, {"source": "wf"})
    assert canary_deploy.loaded_canary(rt.cx, prepared) == version
    assert canary_deploy.judge(rt.cx, prepared, version) == 0, "\n".join(lines)
    assert serving_versions(Path(contract.serving_dir(rig.root, SVC)))[-1] == version
    assert [name for name, _, _ in kube.ran] == [  # the shadow phase's weight, the step's
        "distml-canary-weight", "distml-canary-sample", "distml-canary-weight",
        "distml-canary-end",
    ]  # fmt: skip
    assert not kube.obj("v1", "Pod", canary_pods.name(rt.cx.settings()), NS), "its pod deleted"


@pytest.mark.parametrize(
    ("stable", "weights", "says"),
    [
        ({"a": "4", "b": ""}, {}, None),  # b is loading: it serves nothing, gets no traffic
        ({"a": "4", "b": "3"}, {}, "do not all serve one version yet (a: 4, b: 3"),
        ({"a": "", "b": ""}, {}, "do not all serve one version yet"),
        ({"a": "4"}, {"a": {"5": 0.0}}, "a canary is loaded in the predictor pods"),
    ],
)
def test_the_stable_is_the_one_version_every_loaded_pod_serves(
    monkeypatch, tmp_path, stable, weights, says
):
    from runtime.canary.cluster import ClusterCanary, Pods

    pods = Pods(frozenset(stable), weights, stable)
    monkeypatch.setattr(ClusterCanary, "pods", lambda self: pods)
    c = MockContext(config=Config(overrides={"run": {"dry": False}}))
    wd = Workdir.at(tmp_path / "wd")
    cx = ClusterRuntime(c, "kind", wd, REPO, kube=JobsRunHere(), clock=time).cx
    s = Settings(image="x", service=SVC)
    if says is None:
        assert canary_deploy._stable(cx, s, REF) == 4
    else:
        with pytest.raises(ClusterError, match=re.escape(says)):
            canary_deploy._stable(cx, s, REF)


def test_a_canary_left_loaded_refuses_a_plain_deploy_and_a_rollback(
    rig, tmp_path, monkeypatch, stack
):
    # The `deploy --canary` that published it was killed: nothing runs here, but the pods
    # hold the canary (Prometheus shows its weight), and a new stable would go beside it.
    lines: list[str] = []
    rt, kube = cluster(rig, tmp_path, monkeypatch, lines, stack)
    promql = serving_metrics.canary_weights(NS, SVC)
    version = canary_publish.publish_canary(rig.root / "export", rig.root, SVC, {"source": "x"})
    try:
        rig.prom.wait_for("the canary loaded", lambda: rig.prom.query(promql))
        for verb, act in (("deploy", lambda: rt.deploy(DeployRequest(force=True))),
                          ("rollback", rt.rollback)):  # fmt: skip
            with pytest.raises(ClusterError) as err:
                act()
            assert f"canary version {version} is loaded in the predictor pods" in str(err.value)
            assert f"`{verb}` would change" in str(err.value)
        assert kube.ran == [], "no Job ran"
    finally:  # the rig is the module's: gone, as Prometheus sees it, for the next test
        canary_publish.reject(rig.root, SVC, {"reason": "test over"})
        rig.prom.wait_for("the canary gone", lambda: not rig.prom.query(promql))


@pytest.mark.parametrize(
    ("weights", "expect"),
    [
        ({"a": {"5": 0.0}, "b": {"5": 0.0}}, 5),
        ({}, None),  # nothing published, or no pod could load it: said by none_loaded
        ({"a": {"5": 0.0}}, "do not all hold one canary after 180 s (a: 5; b: none)"),
    ],
    ids=["every pod", "no pod", "some pods"],
)
def test_a_workflows_canary_counts_once_every_pod_holds_it(monkeypatch, tmp_path, weights, expect):
    from runtime.canary.cluster import ClusterCanary, Pods
    from runtime.canary.policy import Policy
    from tests.support.fakekube import FakeClock

    pods = Pods(frozenset({"a", "b"}), weights, {"a": "4", "b": "4"})
    monkeypatch.setattr(ClusterCanary, "pods", lambda self: pods)
    c = MockContext(config=Config(overrides={"run": {"dry": False}}))
    wd = Workdir.at(tmp_path / "wd")
    cx = ClusterRuntime(c, "kind", wd, REPO, kube=JobsRunHere(), clock=FakeClock()).cx
    p = canary_deploy.Prepared(Settings(image="x", service=SVC), {}, REF, 4, 1.0, Policy())
    if isinstance(expect, str):
        with pytest.raises(ClusterError, match=re.escape(expect)):
            canary_deploy.loaded_canary(cx, p)
    else:
        assert canary_deploy.loaded_canary(cx, p) == expect
    assert "published none (its log says why), or the pods could not load it" in (
        canary_deploy.none_loaded(p)
    )


def test_every_ending_said_is_an_event_of_its_kind(tmp_path):
    # A stop (Ctrl-C, SIGTERM) rolls back before it is re-raised: no `error:` line follows,
    # so its own line is the CanaryRolledBack Event.
    c = MockContext(config=Config(overrides={"run": {"dry": False}}))
    kube = JobsRunHere()
    cx = ClusterRuntime(c, "kind", Workdir.at(tmp_path / "wd"), REPO, kube=kube, clock=time).cx
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "metadata": {"name": SVC, "uid": "u1"}}
    said = canary_deploy.Events(cx, Settings(image="x", namespace=NS, service=SVC), isvc)
    for line in (
        "[1] canary 20%: traffic pass (...) -> hold (pass 1 of 2)",
        "[2] canary 20%: errors fail (...) -> rollback (errors)",
        "canary stopped (stopped: KeyboardInterrupt ): rolling back",
        "the rollback did not finish (DistmlError x): ...",
        "error: version 5 was rolled back (errors); version 4 serves every request",
        "promoted: version 5 serves every request (every step passed)",
    ):
        said.record(line)
    assert [(r, t) for r, t, _ in events(kube)] == [
        ("CanaryAnalysis", "Normal"), ("CanaryAnalysis", "Warning"),
        ("CanaryRolledBack", "Warning"), ("CanaryAnalysis", "Warning"),
        ("CanaryRolledBack", "Warning"), ("CanaryPromoted", "Normal"),
    ]  # fmt: skip
