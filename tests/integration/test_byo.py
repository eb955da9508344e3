"""The bring-your-own-cluster run's plan (integration/byo.py): its steps and settings, the
kind cluster and containerd config it makes, and its checks on canned kubectl output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from integration import byo

NODE_A = {"spec": {"nodeName": "distml-byo-worker"}}
NODE_B = {"spec": {"nodeName": "distml-byo-worker2"}}


def name_of(step: list[str]) -> str:
    step = byo.split_env(step)[1]
    if step[0] == "invoke":
        return step[1]
    if step[2] == "integration.workflow_race":
        return step[2]
    return step[7] if step[3] == "expect-refusal" else step[3]


def test_the_other_tenants_come_first_and_this_work_dir_is_refused_their_namespace():
    plan = byo.steps(None)
    assert [name_of(s) for s in plan][:4] == ["build", "up", "other-team", "up"]
    assert plan[0] == ["invoke", "build", "--base", "local", "--push", "localhost:5001"]
    second, up = byo.split_env(plan[1])
    assert second["INVOKE_CLUSTER_NAMESPACE"] == byo.NAMESPACE
    assert second["INVOKE_WORKDIR"] != byo.env(None, None)["INVOKE_WORKDIR"]
    assert up[-1] == "--install-operators"
    own, refused = byo.split_env(plan[3])
    assert own == {"INVOKE_CLUSTER_NAMESPACE": byo.NAMESPACE}
    assert refused[3:5] == ["expect-refusal", "up refused before any write"]


def test_then_a_namespace_only_user_is_refused_then_granted_what_distml_printed():
    plan = byo.steps(None)
    assert [name_of(s) for s in plan][4:12] == [
        "add",
        "up",
        "check-nothing-written",
        "access-role",
        "apply-role",
        "up",
        "up",
        "repoint",
    ]
    user_up = ["invoke", "up", "--runtime", "existing", "--context", "alice@byo"]
    assert plan[5][3:5] == ["expect-refusal", "lacks the rights distml needs in namespace"]
    assert plan[5][6:] == plan[9] == plan[10]
    assert plan[9][: len(user_up)] == user_up and "--install-operators" not in plan[9]
    role = plan[7][plan[7].index("--out") + 1]
    assert plan[8][-1] == plan[11][-1] == role


def test_then_it_runs_the_chain_as_that_user_and_checks_the_others_after():
    plan = byo.steps(None)
    assert [name_of(s) for s in plan][12:23] == [
        "train-all",
        "check-placement",
        "copied-workdir",
        "deploy",
        "loadtest",
        "status",
        "down-keeps-impostor",
        "check-kept",
        "check-untouched",
        "down",
        "check-second-gone",
    ]
    assert "--expect-scale-out" in plan[16]
    own, down = byo.split_env(plan[21])
    assert own["INVOKE_WORKDIR"].endswith("second") and down == ["invoke", "down"]
    assert not any("--source-dir" in s for s in plan)


def test_then_a_readwritemany_class_spreads_a_jobs_workers_and_down_keeps_the_rest():
    plan = byo.steps(None)
    assert [name_of(s) for s in plan][23:] == [
        "up",
        "integration.workflow_race",
        "train",
        "check-spread",
        "down",
        "check-kept",
    ]
    own, up = byo.split_env(plan[23])
    assert own == {"INVOKE_CLUSTER_VOLUME_ACCESS": "ReadWriteMany"}
    assert up[5] == byo.CONTEXT  # the admin's again: alice's down cleared her record
    assert up[-4:] == ["--storage-class", byo.SHARED_CLASS, "--install-operators", "--with-argo"]
    assert plan[24][-1] == byo.CONTEXT  # the race's other team: the admin
    assert byo.LOCAL_PATH_CONFIG["storageClassConfigs"][byo.SHARED_CLASS] == {
        "sharedFileSystemPath": byo.SHARED_PATH
    }
    # kind's own class keeps its node-local config (per-class configs replace the top one).
    assert "standard" in byo.LOCAL_PATH_CONFIG["storageClassConfigs"]


def test_split_env_takes_only_leading_settings():
    assert byo.split_env(["A_B=1", "invoke", "X=2"]) == ({"A_B": "1"}, ["invoke", "X=2"])
    assert byo.split_env(["invoke", "up"]) == ({}, ["invoke", "up"])
    assert byo.split_env(["lower=1", "invoke"]) == ({}, ["lower=1", "invoke"])


def test_with_a_data_dir_every_up_copies_it_in():
    plan = byo.steps("/data")
    ups = [s for s in plan if name_of(s) == "up"]
    assert len(ups) == 6
    for up in ups:
        i = up.index("--source-dir")
        assert up[i + 1] == "/data"
    assert not any("--source-dir" in s for s in plan if name_of(s) != "up")


def test_env_runs_on_the_existing_runtime_in_the_teams_namespace():
    out = byo.env(None, None)
    assert out["INVOKE_RUNTIME"] == "existing"
    assert out["INVOKE_CLUSTER_NAMESPACE"] == byo.OWN_NAMESPACE not in ("kubeflow", byo.NAMESPACE)
    assert out["INVOKE_CLUSTER_WORKER_CPU"] == out["INVOKE_CLUSTER_PREDICTOR_CPU"] == "100m"
    assert "INVOKE_CLUSTER_MANIFEST_MIRROR" not in out
    assert "DISTML_DATA_DIR" not in out
    given = byo.env("/data", "/mirror")
    assert given["INVOKE_CLUSTER_MANIFEST_MIRROR"] == "/mirror"
    assert given["DISTML_DATA_DIR"] == "/data"


def test_the_kind_cluster_has_one_control_plane_and_two_workers():
    config = yaml.safe_load(byo.kind_config(Path("/host/shared")))
    assert config["kind"] == "Cluster"
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
    for node in config["nodes"]:  # the same directory in each: the shared class's path
        assert node["extraMounts"] == [
            {"hostPath": "/host/shared", "containerPath": byo.SHARED_PATH}
        ]


def test_hosts_toml_sends_the_nodes_to_the_registry_through_the_gateway():
    text = byo.hosts_toml("172.18.0.1")
    assert 'server = "http://172.18.0.1:5001"' in text
    assert '[host."http://172.18.0.1:5001"]' in text
    assert 'capabilities = ["pull", "resolve"]' in text


# ------------------------------------------------------------------ the checks
def canned(monkeypatch, answers: dict[str, object]) -> list[tuple[str, ...]]:
    """byo.kubectl answers JSON (or text) by the first matching word of its arguments."""
    asked: list[tuple[str, ...]] = []

    def kubectl(*args: str) -> str:
        asked.append(args)
        for word, answer in answers.items():
            if word in args:
                return answer if isinstance(answer, str) else json.dumps(answer)
        raise AssertionError(f"unexpected kubectl {args}")

    monkeypatch.setattr(byo, "kubectl", kubectl)
    return asked


def test_placement_passes_when_every_pod_is_on_one_node(monkeypatch, capsys):
    asked = canned(monkeypatch, {"pods": {"items": [NODE_A, NODE_A, NODE_A]}})
    byo.check_placement()
    assert "placement: ok" in capsys.readouterr().out
    assert asked == [("-n", byo.OWN_NAMESPACE, "get", "pods", "-l", "distml/volume", "-o", "json")]


@pytest.mark.parametrize(
    "pods",
    [[NODE_A, NODE_B], [], [{"spec": {}}]],
    ids=["two-nodes", "no-pods", "unscheduled"],
)
def test_placement_fails_on_two_nodes_or_no_pods(monkeypatch, pods):
    canned(monkeypatch, {"pods": {"items": pods}})
    with pytest.raises(SystemExit, match="not on one node"):
        byo.check_placement()


def test_spread_passes_when_the_two_workers_ran_on_two_nodes(monkeypatch, capsys):
    asked = canned(monkeypatch, {"pods": {"items": [NODE_A, NODE_B]}})
    byo.check_spread()
    assert "spread over nodes" in capsys.readouterr().out
    assert "distml/model=cnn" in asked[0][asked[0].index("-l") + 1]


@pytest.mark.parametrize("pods", [[NODE_A, NODE_A], [NODE_A], []], ids=["one-node", "one", "none"])
def test_spread_fails_when_the_workers_shared_a_node(monkeypatch, pods):
    canned(monkeypatch, {"pods": {"items": pods}})
    with pytest.raises(SystemExit, match="did not spread"):
        byo.check_spread()


def deployments(available: dict[str, int]) -> dict[str, object]:
    return {name: {"status": {"availableReplicas": n}} for name, n in available.items()}


KEPT = {name: 1 for _, name in (*byo.OPERATORS, byo.BYSTANDER)}


def test_kept_passes_when_operators_and_bystander_run_and_nothing_is_left(monkeypatch, capsys):
    canned(monkeypatch, {**deployments(KEPT), "all,pvc,tfjobs,inferenceservices": ""})
    byo.check_kept()
    assert "distml's objects gone" in capsys.readouterr().out


def test_kept_fails_when_a_kept_deployment_is_not_available(monkeypatch):
    canned(monkeypatch, {**deployments({**KEPT, "bystander": 0}), "all,pvc": ""})
    with pytest.raises(SystemExit, match="default/bystander is not available"):
        byo.check_kept()


def test_kept_fails_when_distml_objects_are_left(monkeypatch):
    left = "persistentvolumeclaim/strategy-volume\njob.batch/distml-ingest\n"
    canned(monkeypatch, {**deployments(KEPT), "all,pvc,tfjobs,inferenceservices": left})
    with pytest.raises(SystemExit, match="down left distml objects") as err:
        byo.check_kept()
    assert "persistentvolumeclaim/strategy-volume" in str(err.value)


@pytest.mark.parametrize("argv", [[], ["nonsense"], ["check-kept", "extra"], ["setup", "x"]])
def test_main_with_bad_arguments_prints_usage_and_returns_2(argv, capsys):
    assert byo.main(argv) == 2
    assert "usage: python -m integration.byo" in capsys.readouterr().err
