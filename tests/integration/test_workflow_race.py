"""integration/workflow_race.py: the bring-your-own run's check that `invoke workflow`'s
serve step refuses an InferenceService of the served name made after submit. Its names
and the refusal it waits for are the product's; the object it makes is another team's;
and its verdict fails on a workflow that served anyway or a touched object (kubectl and
the `invoke workflow` process faked)."""

from __future__ import annotations

import copy
import inspect
import json
import sys
from typing import Any

import pytest

from integration import workflow_race as wr
from k8s.manifests import argo_workflow as wfm
from k8s.manifests.guarded import NOT_APPLIED, kubectl_resource
from k8s.manifests.inference import inference_service
from k8s.manifests.names import INSTANCE_LABEL, WORKFLOW_NAME, tfjob_name
from k8s.providers.settings import Settings
from ml import contract
from runtime.cluster.workflow import refusals
from tasks.extras import workflow as workflow_task
from tests.support.k8s_schemas import validate
from tests.support.workflow_kit import IMAGE, build

NS, SVC, ME = "ml-team-a", "tf-mnist", "abcd1234"
REFUSED = f"main (exit code 1): no more retries The request is invalid: {NOT_APPLIED}"


def test_its_names_are_the_products():
    s = Settings(image=IMAGE, namespace=NS)
    assert wr.WORKFLOW == WORKFLOW_NAME
    assert wr.DEFAULT_SERVICE == contract.DEFAULT_SERVICE == s.service
    assert kubectl_resource(inference_service(s)) == wr.ISVC_RESOURCE
    assert wr.MODEL in contract.MODEL_TYPES and tfjob_name(wr.MODEL) == wr.TRAIN_STEP
    assert (wfm.create_step(wfm.STEP_SERVE), wfm.STEP_SERVE) == wr.SERVE_STEPS


def test_the_refusal_it_waits_for_is_what_the_watch_prints():
    s = Settings(image=IMAGE, namespace=NS)
    wf = build(s, instance=ME)
    serve = {"id": "r", "displayName": "serve", "type": "Retry", "phase": "Failed"}
    serve.update(message=REFUSED, children=[], finishedAt="2026-01-01T00:00:00Z")
    (line,) = refusals({**wf, "status": {"phase": "Failed", "nodes": {"r": serve}}}, NS, ME)
    assert wr.refusal(NS, SVC) in line


def test_the_command_is_a_watched_one_model_workflow_with_flags_the_task_takes():
    cmd = wr.command()
    assert cmd[:5] == [sys.executable, "-m", "invoke", "workflow", "--watch"]
    assert cmd[5:] == ["--model-type", "cnn", "--epochs", "1", "--steps-per-epoch", "5"]
    params = inspect.signature(workflow_task.body).parameters
    flags = [a.removeprefix("--").replace("-", "_") for a in cmd[4:] if a.startswith("--")]
    assert [f for f in flags if f not in params] == []


def test_the_foreign_object_is_another_teams_valid_isvc_of_the_served_name():
    isvc = wr.foreign_isvc(NS, "my-svc")
    assert validate(isvc) == []
    assert (isvc["metadata"]["name"], isvc["metadata"]["namespace"]) == ("my-svc", NS)
    assert isvc["metadata"]["labels"] == {"team": "other"}
    assert INSTANCE_LABEL not in isvc["metadata"]["labels"]


def test_the_namespace_and_service_are_the_users_settings(monkeypatch):
    monkeypatch.delenv("INVOKE_SERVICE", raising=False)
    monkeypatch.setenv("INVOKE_CLUSTER_NAMESPACE", NS)
    assert wr.where() == (NS, SVC)
    monkeypatch.setenv("INVOKE_SERVICE", "other-svc")
    assert wr.where() == (NS, "other-svc")
    monkeypatch.delenv("INVOKE_CLUSTER_NAMESPACE")
    with pytest.raises(SystemExit, match="INVOKE_CLUSTER_NAMESPACE"):
        wr.where()


def workflow(uid: str = "wf-new", phase: str = "Running", *steps: str) -> dict[str, Any]:
    nodes = {f"n{i}": {"displayName": name} for i, name in enumerate(steps)}
    return {"metadata": {"uid": uid}, "status": {"phase": phase, "nodes": nodes}}


@pytest.mark.parametrize(
    ("wf", "stage"),
    [
        (None, "not submitted"),
        (workflow("wf-old", "Succeeded", "train-cnn", "serve"), "not submitted"),
        ({"metadata": {"uid": "wf-new"}}, "starting"),
        (workflow("wf-new", "Running", "distml-pipeline", "ingest"), "starting"),
        (workflow("wf-new", "Running", "ingest", "train", "train-cnn"), "training"),
        (workflow("wf-new", "Running", "train-cnn", "select", "serve-create"), "serving"),
        (workflow("wf-new", "Running", "train-cnn", "serve(0)"), "serving"),
        (workflow("wf-new", "Failed", "ingest"), "over"),
    ],
    ids=[
        "absent",
        "the finished one it replaces",
        "no status yet",
        "ingesting",
        "training: the moment",
        "serve-create started: too late",
        "a serve attempt: too late",
        "failed before training",
    ],
)
def test_the_workflows_stage(wf, stage):
    assert wr.stage(wf, "wf-old") == stage


def stored(**meta: Any) -> dict[str, Any]:
    """The foreign InferenceService as the API server holds it."""
    obj = copy.deepcopy(wr.foreign_isvc(NS, SVC))
    obj["metadata"].update(uid="isvc-1", generation=1, resourceVersion="7")
    obj["metadata"]["managedFields"] = [{"manager": "kubectl-create"}]
    obj["metadata"].update(meta)
    return obj


def test_a_refusal_with_the_object_as_made_passes():
    now = stored(resourceVersion="99", managedFields=[{"manager": "kubectl-create"}, {}])
    now["status"] = {"observedGeneration": 1}
    line = wr.judge(1, "...\n" + wr.refusal(NS, SVC) + ": it does not carry ...", stored(), now, NS)
    assert line.startswith("workflow race: step serve refused InferenceService ml-team-a/tf-mnist")
    assert "uid isvc-1 generation 1 kept" in line


@pytest.mark.parametrize(
    ("code", "said", "now", "why"),
    [
        (0, "Workflow distml-pipeline: Succeeded", stored(), "served over another team"),
        (1, "step select Failed", stored(), "without saying 'step serve refused"),
        (1, wr.refusal(NS, SVC), stored(uid="isvc-2"), r"changed: \['uid'\]"),
        (1, wr.refusal(NS, SVC), stored(generation=2), r"changed: \['generation'\]"),
        (1, wr.refusal(NS, SVC), stored(labels={"team": "other", INSTANCE_LABEL: ME}), "labels"),
        (1, wr.refusal(NS, SVC), None, "is gone"),
        (1, wr.refusal(NS, SVC), stored(managedFields=[{"manager": "distml-abcd"}]), "written"),
        (1, wr.refusal(NS, SVC), stored(managedFields=[{"manager": "kubectl-patch"}]), "written"),
    ],
    ids=[
        "the workflow served anyway",
        "it failed elsewhere",
        "a new uid: deleted and made again",
        "a new generation: its spec written",
        "this work dir's label added",
        "deleted",
        "distml's field manager wrote it",
        "a kubectl patch wrote it",
    ],
)
def test_the_verdict_fails_on_anything_but_a_refusal_that_left_the_object(code, said, now, why):
    with pytest.raises(SystemExit, match=why):
        wr.judge(code, said, stored(), now, NS)


class Cluster:
    """kubectl's answers (as the admin), and the commands asked, in order."""

    def __init__(self, stages: list[dict[str, Any] | None], after: Any = "as made") -> None:
        self.stages, self.after = stages, after
        self.ran: list[list[str]] = []
        self.made: dict[str, Any] | None = None

    def __call__(self, cmd: list[str], stdin: str | None = None, echo: bool = True) -> str:
        self.ran.append(cmd)
        verb, kind = cmd[5], cmd[6]
        if verb == "create":
            assert stdin is not None and json.loads(stdin)["metadata"]["labels"] == {
                "team": "other"
            }
            self.made = stored()
            return json.dumps(self.made)
        if verb == "get" and kind == "workflow":
            wf = self.stages.pop(0) if len(self.stages) > 1 else self.stages[0]
            return json.dumps(wf) if wf else ""
        if verb == "get":  # the InferenceService: absent until made
            now = self.made if self.after == "as made" else self.after
            return json.dumps(now) if self.made and now else ""
        return ""  # delete


class Watched:
    """`invoke workflow --watch`: what it said and its exit, once finished (``early``: it
    had already ended at the first poll)."""

    def __init__(self, code: int, said: str, early: bool = False) -> None:
        self.code, self.said, self.early, self.stopped = code, said, early, False
        self.proc = self

    def poll(self) -> int | None:
        return self.code if self.early else None

    def finish(self, timeout_s: float) -> int:
        return self.code

    def text(self) -> str:
        return self.said

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def user(monkeypatch):
    monkeypatch.setenv("INVOKE_CLUSTER_NAMESPACE", NS)
    monkeypatch.delenv("INVOKE_SERVICE", raising=False)
    monkeypatch.setattr(wr, "POLL_S", 0.0)

    def play(cluster: Cluster, watched: Watched) -> Cluster:
        monkeypatch.setattr(wr, "run", cluster)
        monkeypatch.setattr(wr, "Streamed", lambda cmd: watched)
        return cluster

    return play


def deletes(cluster: Cluster) -> list[str]:
    return [" ".join(c[5:]) for c in cluster.ran if c[5] == "delete"]


TRAINING = [
    None,
    workflow("wf-new", "Running", "ingest"),
    workflow("wf-new", "Running", "train-cnn"),
]


def test_the_race_made_the_object_while_training_and_cleans_up(user):
    cluster = user(Cluster([None, *TRAINING]), Watched(1, wr.refusal(NS, SVC)))
    line = wr.race("kind-admin")
    assert "step serve refused" in line
    assert all(c[:5] == ["kubectl", "--context", "kind-admin", "-n", NS] for c in cluster.ran)
    creates = [i for i, c in enumerate(cluster.ran) if c[5] == "create"]
    polls = [i for i, c in enumerate(cluster.ran) if c[5:7] == ["get", "workflow"]]
    assert len(creates) == 1 and len(polls) == 4 and polls[-1] < creates[0]
    assert deletes(cluster) == [
        "delete --timeout=300s inferenceservice tf-mnist",
        "delete --timeout=300s --ignore-not-found --cascade=foreground workflow distml-pipeline",
    ]


def test_a_workflow_that_served_anyway_fails_and_still_cleans_up(user):
    watched = Watched(0, "Workflow distml-pipeline: Succeeded")
    cluster = user(Cluster([None, *TRAINING], after=stored(generation=2)), watched)
    with pytest.raises(SystemExit, match="served over another team"):
        wr.race("kind-admin")
    assert watched.stopped and len(deletes(cluster)) == 2


def test_a_workflow_command_that_ends_before_training_fails_without_making_anything(user):
    cluster = user(
        Cluster([None]), Watched(1, "error: Argo Workflows is not installed", early=True)
    )
    with pytest.raises(SystemExit, match="exited 1 before step train-cnn ran"):
        wr.race("kind-admin")
    assert cluster.made is None
    assert deletes(cluster) == [
        "delete --timeout=300s --ignore-not-found --cascade=foreground workflow distml-pipeline"
    ]


def test_a_workflow_already_serving_when_first_seen_is_not_judged(user):
    serving = workflow("wf-new", "Running", "train-cnn", "serve-create")
    cluster = user(Cluster([None, serving]), Watched(1, ""))
    with pytest.raises(SystemExit, match="nothing was judged"):
        wr.race("kind-admin")
    assert cluster.made is None


def test_an_isvc_of_the_served_name_before_the_race_is_refused(user):
    cluster = user(Cluster([None], after=stored()), Watched(1, ""))
    cluster.made = stored()
    with pytest.raises(SystemExit, match="before the user's `invoke deploy`"):
        wr.race("kind-admin")
    assert [c[5] for c in cluster.ran] == ["get"]


def test_the_wait_for_training_has_a_deadline(user):
    user(Cluster([workflow("wf-new", "Running", "ingest")]), Watched(1, ""))
    with pytest.raises(SystemExit, match=r"did not start in 0 s \(Workflow distml-pipeline: start"):
        wr.wait_training(["kubectl", "--context", "a", "-n", NS], Watched(1, ""), None, 0)


def test_streamed_prints_and_keeps_the_output(capsys):
    said = wr.Streamed([sys.executable, "-c", "print('one'); import sys; sys.exit(3)"])
    assert said.finish(60) == 3 and said.text() == "one\n"
    said.stop()
    assert "one" in capsys.readouterr().out


def test_main_without_one_context_prints_usage_and_returns_2(capsys):
    assert wr.main([]) == 2 and wr.main(["--help"]) == 2
    assert "usage" in capsys.readouterr().err
