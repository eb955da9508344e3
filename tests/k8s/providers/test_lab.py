"""k8s.providers.lab: the exact commands each provider (k3d, kind, minikube) runs, recorded
with invoke.MockContext."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from invoke import Config, MockContext, Result

from k8s.providers import provider

OK = Result(exited=0)
# minikube with the work dir's own home ({wd}: the test's work dir).
MK = "MINIKUBE_HOME={wd}/minikube minikube"


def ctx(results: dict, dry: bool = False) -> MockContext:
    return MockContext(config=Config(overrides={"run": {"dry": dry}}), run=results, repeat=True)


def ran(c: MockContext) -> list[str]:
    return [call.args[0] for call in c.run.call_args_list]


@pytest.mark.parametrize(
    ("name", "create", "delete", "context"),
    [
        (
            "k3d",
            "k3d cluster create dist-ml --image rancher/k3s:v1.33.4-k3s1 --servers 1 "
            "--agents 0 --k3s-arg '--disable=traefik@server:*' -p '8080:80@loadbalancer' "
            "--wait --timeout 300s",
            "k3d cluster delete dist-ml",
            "k3d-dist-ml",
        ),
        (
            "kind",
            "kind create cluster --name dist-ml --image kindest/node:v1.33.1 "
            "--config {wd}/kind-config.yaml --wait 300s",
            "kind delete cluster --name dist-ml",
            "kind-dist-ml",
        ),
        (
            "minikube",
            "MINIKUBE_HOME={wd}/minikube minikube start -p dist-ml --driver docker "
            "--container-runtime containerd --cni bridge --kubernetes-version v1.33.1 "
            "--cpus max --memory max",
            "MINIKUBE_HOME={wd}/minikube minikube delete -p dist-ml",
            "dist-ml",
        ),
    ],
)
def test_create_delete_and_context(tmp_path: Path, monkeypatch, name, create, delete, context):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    p = provider(name, workdir=tmp_path)
    create, delete = create.format(wd=tmp_path), delete.format(wd=tmp_path)
    c = ctx({create: OK, delete: OK})
    p.create(c, tmp_path)
    p.delete(c)
    assert ran(c) == [create, delete]
    assert p.context == context
    assert p.kubectl("get pods") == f"kubectl --context {context} get pods"


@pytest.mark.parametrize(
    ("name", "query", "answer", "exists"),
    [
        ("k3d", "k3d cluster list -o json", json.dumps([{"name": "dist-ml"}]), True),
        ("k3d", "k3d cluster list -o json", json.dumps([{"name": "other"}]), False),
        ("kind", "kind get clusters", "kind\ndist-ml\n", True),
        ("kind", "kind get clusters", "No kind clusters found.\n", False),
        ("minikube", MK + " profile list -o json", '{"valid": [{"Name": "dist-ml"}]}', True),
        ("minikube", MK + " profile list -o json", '{"valid": [{"Name": "other"}]}', False),
        ("minikube", MK + " profile list -o json", "not json", False),
    ],
)
def test_exists_reads_the_cli_and_runs_even_under_dry(tmp_path: Path, name, query, answer, exists):
    query = query.format(wd=tmp_path)
    c = ctx({query: Result(answer)}, dry=True)
    assert provider(name, workdir=tmp_path).exists(c) is exists
    assert ran(c) == [query]


@pytest.mark.parametrize(
    ("name", "commands"),
    [
        (
            "k3d",
            [
                "docker save -o {tar} distml:abc",
                "k3d image import {tar} -c dist-ml",
                "rm -f {tar}",
            ],
        ),
        (
            "kind",
            [
                "docker save -o {tar} distml:abc",
                "kind load image-archive {tar} --name dist-ml",
                "rm -f {tar}",
            ],
        ),
        (
            "minikube",
            [
                "docker save -o {tar} distml:abc",
                MK + " -p dist-ml image load {tar}",
                "rm -f {tar}",
            ],
        ),
    ],
)
def test_image_import_goes_through_a_tar_where_the_containerd_store_needs_it(
    tmp_path: Path, name, commands
):
    tar = tmp_path / "build" / "distml-image.tar"
    expected = [cmd.format(tar=tar, wd=tmp_path) for cmd in commands]
    c = ctx(dict.fromkeys(expected, OK))
    provider(name, workdir=tmp_path).import_image(c, "distml:abc", tmp_path)
    assert ran(c) == expected


@pytest.mark.parametrize(
    ("tags", "present"),
    [
        (["docker.io/library/distml:abc"], True),
        (["distml:abc"], True),
        (["docker.io/library/distml:old"], False),
        ([], False),
    ],
)
def test_the_node_is_asked_whether_it_has_the_image(tags, present):
    query = "docker exec k3d-dist-ml-server-0 crictl images -o json"
    c = ctx({query: Result(json.dumps({"images": [{"repoTags": tags}]}))})
    assert provider("k3d").has_image(c, "distml:abc") is present


def test_minikube_is_reached_on_its_ip_and_the_node_port(tmp_path: Path):
    c = ctx({MK.format(wd=tmp_path) + " -p dist-ml ip": Result("192.168.49.2\n")})
    assert provider("minikube", workdir=tmp_path).ingress_url(c) == "http://192.168.49.2:31080"
    assert provider("k3d", ingress_port=18080).ingress_url(c) == "http://localhost:18080"


@pytest.mark.parametrize(
    ("name", "flag"), [("kind", "--image"), ("k3d", "--image"), ("minikube", "--base-image")]
)
def test_a_node_image_of_the_users_replaces_the_pinned_one(tmp_path: Path, name, flag):
    # An offline machine builds its own (integration.kindbuild): cluster.node_image names it.
    c = MockContext(config=Config(overrides={"run": {"dry": False}}), run=OK, repeat=True)
    provider(name, node_image="distml/node:v1.33.1", workdir=tmp_path).create(c, tmp_path)
    (command,) = ran(c)
    assert f"{flag} distml/node:v1.33.1 " in command + " "
    assert "kindest/node" not in command and "rancher/k3s" not in command


def test_minikube_is_forced_only_as_root(tmp_path: Path, monkeypatch):
    # minikube refuses its docker driver as root (DRV_AS_ROOT) unless given --force.
    for uid, forced in ((0, True), (1000, False)):
        monkeypatch.setattr("os.geteuid", lambda uid=uid: uid)
        c = MockContext(config=Config(overrides={"run": {"dry": False}}), run=OK, repeat=True)
        provider("minikube", workdir=tmp_path).create(c, tmp_path)
        (command,) = ran(c)
        assert command.endswith(" --force") is forced


def test_minikube_with_a_node_image_of_ones_own_downloads_no_preload_and_caches_no_image(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    c = MockContext(config=Config(overrides={"run": {"dry": False}}), run=OK, repeat=True)
    provider("minikube", node_image="n:1", workdir=tmp_path).create(c, tmp_path)
    (command,) = ran(c)
    assert command.endswith("--base-image n:1 --preload=false --cache-images=false")
    c = MockContext(config=Config(overrides={"run": {"dry": False}}), run=OK, repeat=True)
    provider("minikube", workdir=tmp_path).create(c, tmp_path)
    (command,) = ran(c)
    assert "--base-image" not in command and "--preload" not in command


def test_minikube_keeps_its_home_in_the_work_dir_never_the_users(tmp_path: Path):
    home = provider("minikube", workdir=tmp_path / "wd").home
    assert home == (tmp_path / "wd" / "minikube").resolve()
    with pytest.raises(ValueError, match="work dir"):
        _ = provider("minikube").home


def test_an_existing_cluster_refuses_a_node_image_naming_the_setting():
    with pytest.raises(ValueError, match=r"cluster\.node_image applies to the clusters distml"):
        provider("existing", node_image="distml-kind/node:v1.33.1", kube_context="x")
