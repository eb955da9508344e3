"""integration.byo_user, on canned kubectl and kind: the user's context goes through the
proxy; `repoint` passes only on distml's refusal, writes nothing on the other cluster, and
always puts the proxy and the credentials back."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from integration import byo_cluster, byo_user

CA1, CA2 = base64.b64encode(b"ca-one").decode(), base64.b64encode(b"ca-two").decode()


def kubeconfig(context: str, server: str, ca: str) -> str:
    return json.dumps(
        {
            "contexts": [
                {"name": "other", "context": {"cluster": "x"}},
                {"name": context, "context": {"cluster": "c"}},
            ],
            "clusters": [
                {
                    "name": "x",
                    "cluster": {"server": "https://x", "certificate-authority-data": "eA=="},
                },
                {"name": "c", "cluster": {"server": server, "certificate-authority-data": ca}},
            ],
        }
    )


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Every command the module runs, recorded; kubectl and kind answer as the test says."""
    calls: list[list[str]] = []
    said = {"refusal": "error: context 'alice@byo' now points at another cluster (...)", "rc": 1}
    left = {"objects": ""}

    def run(cmd, stdin=None, shown=None):
        calls.append(cmd)
        if cmd[-4:] == ["view", "--raw", "-o", "json"]:
            second = "--kubeconfig" in cmd
            return kubeconfig(
                f"kind-{byo_user.SECOND_CLUSTER}" if second else byo_cluster.CONTEXT,
                "https://127.0.0.1:2222" if second else "https://127.0.0.1:1111",
                CA2 if second else CA1,
            )
        if "token" in cmd:
            return "token-two\n"
        if "-l" in cmd:
            return left["objects"]
        return ""

    def sub_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, said["rc"], said["refusal"], "")

    monkeypatch.setattr(byo_cluster, "workdir", lambda: tmp_path)
    monkeypatch.setattr(byo_user, "run", run)
    monkeypatch.setattr(byo_user.subprocess, "run", sub_run)
    (tmp_path / "node-image").write_text("node:1\n")
    (tmp_path / "user-token").write_text("token-one")
    (tmp_path / "proxy-target").write_text("127.0.0.1:1111\n")
    return {"calls": calls, "said": said, "left": left, "dir": tmp_path}


def _credentials(calls):
    return [c for c in calls if c[:3] == ["kubectl", "config", "set-credentials"]]


def test_host_port_and_the_contexts_own_cluster(fake) -> None:
    assert byo_user.host_port("https://127.0.0.1:39191/") == "127.0.0.1:39191"
    assert byo_user.cluster_entry(byo_cluster.CONTEXT) == ("https://127.0.0.1:1111", CA1)


def test_repoint_passes_on_the_refusal_and_puts_everything_back(fake, capsys) -> None:
    byo_user.repoint("role.yaml")
    calls = _credentials(fake["calls"])
    assert [c[-1] for c in calls] == ["--token=token-two", "--token=token-one"]
    assert (fake["dir"] / "proxy-target").read_text() == "127.0.0.1:1111\n"
    assert (fake["dir"] / "user-ca.crt").read_bytes() == b"ca-one"
    assert any(c[:3] == ["kind", "delete", "cluster"] for c in fake["calls"])
    invoked = next(c for c in fake["calls"] if "train-all" in c)
    assert invoked[1:4] == ["-m", "invoke", "train-all"]
    assert "nothing written there" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("rc", "refusal", "objects"),
    [
        (0, "trained", ""),  # it ran on the other cluster
        (1, "error: something else", ""),  # refused, but not for the cluster
        (1, "now points at another cluster", "pod/ingest"),  # refused after a write
    ],
)
def test_repoint_fails_otherwise_and_still_puts_everything_back(fake, rc, refusal, objects):
    fake["said"].update(rc=rc, refusal=refusal)
    fake["left"]["objects"] = objects
    with pytest.raises(SystemExit):
        byo_user.repoint("role.yaml")
    assert _credentials(fake["calls"])[-1][-1] == "--token=token-one"
    assert (fake["dir"] / "proxy-target").read_text() == "127.0.0.1:1111\n"
    assert any(c[:3] == ["kind", "delete", "cluster"] for c in fake["calls"])


def test_nothing_written_fails_on_any_distml_object(fake) -> None:
    byo_user.check_nothing_written()
    fake["left"]["objects"] = "persistentvolumeclaim/strategy-volume"
    with pytest.raises(SystemExit, match="a refused up wrote"):
        byo_user.check_nothing_written()


def test_the_access_role_the_admin_applied_is_not_counted(fake) -> None:
    fake["left"]["objects"] = (
        "role.rbac.authorization.k8s.io/distml-user-alice-2bd806c9\n"
        "rolebinding.rbac.authorization.k8s.io/distml-user-alice-2bd806c9"
    )
    byo_user.check_nothing_written()


def test_the_label_is_distmls() -> None:
    from k8s.client.access import ROLE_NAME
    from k8s.manifests.names import COMMON_LABELS

    assert byo_user.ACCESS_ROLE == ROLE_NAME

    assert byo_user.PART_OF.split("=") == [
        "app.kubernetes.io/part-of",
        COMMON_LABELS["app.kubernetes.io/part-of"],
    ]


def test_main_with_bad_arguments_prints_usage_and_returns_2(capsys) -> None:
    assert byo_user.main(["nope"]) == 2
    assert "usage" in capsys.readouterr().err
