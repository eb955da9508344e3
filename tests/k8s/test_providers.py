"""k8s.providers: the exact commands each provider (k3d, kind, minikube) runs, recorded
with invoke.MockContext."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from invoke import Config, MockContext, Result

from k8s.providers import provider

OK = Result(exited=0)


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
            "minikube start -p dist-ml --driver docker --kubernetes-version v1.33.1 "
            "--cpus max --memory max",
            "minikube delete -p dist-ml",
            "dist-ml",
        ),
    ],
)
def test_create_delete_and_context(tmp_path: Path, name, create, delete, context):
    p = provider(name)
    c = ctx({create.format(wd=tmp_path): OK, delete: OK})
    p.create(c, tmp_path)
    p.delete(c)
    assert ran(c) == [create.format(wd=tmp_path), delete]
    assert p.context == context
    assert p.kubectl("get pods") == f"kubectl --context {context} get pods"


@pytest.mark.parametrize(
    ("name", "query", "answer", "exists"),
    [
        ("k3d", "k3d cluster list -o json", json.dumps([{"name": "dist-ml"}]), True),
        ("k3d", "k3d cluster list -o json", json.dumps([{"name": "other"}]), False),
        ("kind", "kind get clusters", "kind\ndist-ml\n", True),
        ("kind", "kind get clusters", "No kind clusters found.\n", False),
        ("minikube", "minikube profile list -o json", '{"valid": [{"Name": "dist-ml"}]}', True),
        ("minikube", "minikube profile list -o json", "not json", False),
    ],
)
def test_exists_reads_the_cli_and_runs_even_under_dry(name, query, answer, exists):
    c = ctx({query: Result(answer)}, dry=True)
    assert provider(name).exists(c) is exists
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
        ("minikube", ["minikube -p dist-ml image load distml:abc"]),
    ],
)
def test_image_import_goes_through_a_tar_where_the_containerd_store_needs_it(
    tmp_path: Path, name, commands
):
    tar = tmp_path / "build" / "distml-image.tar"
    expected = [cmd.format(tar=tar) for cmd in commands]
    c = ctx(dict.fromkeys(expected, OK))
    provider(name).import_image(c, "distml:abc", tmp_path)
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


def test_unknown_provider_is_named():
    with pytest.raises(ValueError, match="unknown cluster provider 'k8s'; valid: k3d, kind"):
        provider("k8s")


def test_minikube_is_reached_on_its_ip_and_the_node_port():
    c = ctx({"minikube -p dist-ml ip": Result("192.168.49.2\n")})
    assert provider("minikube").ingress_url(c) == "http://192.168.49.2:31080"
    assert provider("k3d", ingress_port=18080).ingress_url(c) == "http://localhost:18080"


@pytest.mark.parametrize(("name", "flag"), [("kind", "--image"), ("k3d", "--image")])
def test_a_node_image_of_the_users_replaces_the_pinned_one(tmp_path: Path, name, flag):
    # An offline machine builds its own (integration.kindbuild): cluster.node_image names it.
    c = MockContext(config=Config(overrides={"run": {"dry": False}}), run=OK, repeat=True)
    provider(name, node_image="distml-kind/node:v1.33.1").create(c, tmp_path)
    (command,) = ran(c)
    assert f"{flag} distml-kind/node:v1.33.1 " in command
    assert "kindest/node" not in command and "rancher/k3s" not in command


def test_minikube_refuses_a_node_image_naming_the_setting():
    with pytest.raises(ValueError, match=r"cluster\.node_image applies to kind and k3d"):
        provider("minikube", node_image="distml-kind/node:v1.33.1")
