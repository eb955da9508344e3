"""`up --with-argo` and its removal on a cluster without a cluster: the exact commands of a
first and a second run, what the state records, and `down --keep-cluster` with Argo.
"""

from __future__ import annotations

import re
from unittest.mock import Mock

import pytest
from invoke import Result

from common.errors import DistmlError
from runtime.requests import DownRequest, UpRequest
from tests.support.cluster_kit import (
    ARGO_INSTALL,
    ARGO_REMOVE,
    K3D_CREATE,
    KC,
    KNATIVE_INSTALL,
    OK,
    TAG,
    commands,
    k3d_results,
    make_ctx,
    runtime,
    set_up,
)
from tests.support.fakekube import conditions_status

ARGO_NS = ("v1", "Namespace", None, "argo")
KUBECTL_OK = {re.compile(r"^kubectl .*"): OK}


def up_with_argo(wd, fake, lines=None):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake, lines=lines).up(UpRequest(with_argo=True)) == 0
    return c


def test_up_with_argo_installs_it_after_kserve_and_records_it(wd, fake):
    lines = []
    c = up_with_argo(wd, fake, lines)
    tar = wd.root / "build" / "distml-image.tar"
    assert commands(c) == [
        "k3d cluster list -o json",
        K3D_CREATE,
        *KNATIVE_INSTALL,
        ARGO_INSTALL,
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}",
        "docker exec k3d-dist-ml-server-0 crictl images -o json",
        f"docker save -o {tar} {TAG}",
        f"k3d image import {tar} -c dist-ml",
        f"rm -f {tar}",
    ]
    # install.yaml holds no Namespace: `up` makes it, labelled like everything it owns.
    namespaces = [o for o in fake.applied if o["kind"] == "Namespace"]
    assert [o["metadata"]["name"] for o in namespaces] == ["kubeflow", "kserve", "argo"]
    assert namespaces[-1]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "distml"
    assert "Argo Workflows v4.1.2: installing" in lines
    assert "== operators (knative serving mode, with Argo Workflows)" in lines
    assert wd.state().argo is True


def test_up_waits_for_both_argo_deployments(wd, fake):
    """The controller runs workflows, the server is the UI: `up` returns only when both are
    Available (here argo-server turns Available 30 s after the install)."""
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    inner = c.run

    def slow_server(command, *args, **kwargs):
        result = inner(command, *args, **kwargs)
        if command == ARGO_INSTALL:
            server = fake.obj("apps/v1", "Deployment", "argo-server", "argo")
            server["status"] = conditions_status(("Available", "False"))
            ready = conditions_status(("Available", "True"))
            fake.at(fake.clock.now + 30, lambda: server.update(status=ready))
        return result

    c.run = Mock(wraps=slow_server)
    lines = []
    started = fake.clock.now
    assert runtime(c, wd, fake, lines=lines).up(UpRequest(with_argo=True)) == 0
    assert fake.clock.now - started >= 30
    assert any("waiting for argo-server" in line for line in lines), lines


def test_a_second_plain_up_keeps_argo_and_changes_nothing(wd, fake):
    up_with_argo(wd, fake)
    applied_before = len(fake.applied)
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up(UpRequest()) == 0  # no --with-argo
    assert commands(c) == [
        "k3d cluster list -o json",
        f"docker image inspect --format '{{{{.Id}}}}' {TAG}",
        "docker exec k3d-dist-ml-server-0 crictl images -o json",
    ]
    assert [o["kind"] for o in fake.applied[applied_before:]] == [
        "Namespace",
        "PersistentVolumeClaim",
    ]
    assert "Argo Workflows v4.1.2: already installed" in lines
    assert wd.state().argo is True


def test_an_argo_that_went_missing_is_installed_again_by_a_plain_up(wd, fake):
    up_with_argo(wd, fake)
    fake.remove("apps/v1", "Deployment", "workflow-controller", "argo")
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake).up(UpRequest()) == 0
    assert [x for x in commands(c) if "argoproj" in x] == [ARGO_INSTALL]


def test_an_argo_server_that_is_not_available_is_not_taken_for_installed(wd, fake):
    up_with_argo(wd, fake)
    fake.remove("apps/v1", "Deployment", "argo-server", "argo")  # the controller is fine
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    lines = []
    assert runtime(c, wd, fake, lines=lines).up(UpRequest()) == 0
    assert [x for x in commands(c) if "argoproj" in x] == [ARGO_INSTALL]
    assert "Argo Workflows v4.1.2: already installed" not in lines


def test_up_without_argo_never_touches_it(wd, fake):
    c = make_ctx(fake, k3d_results(exists=False, imported=False))
    assert runtime(c, wd, fake).up(UpRequest()) == 0
    assert not any("argoproj" in x for x in commands(c))
    assert wd.state().argo is False
    c = make_ctx(fake, {})
    assert runtime(c, wd, fake).down(DownRequest(keep_cluster=True)) == 0
    assert commands(c) == []


def test_down_keep_cluster_removes_argo_and_waits_for_its_namespace(wd, fake):
    up_with_argo(wd, fake)
    # The namespace terminates for 20 s (its objects are being deleted) before it goes.
    real_delete = fake.delete

    def terminating(api, kind, name, namespace=None):
        if (kind, name) != ("Namespace", "argo"):
            return real_delete(api, kind, name, namespace)
        fake.deleted.append(ARGO_NS)
        start = fake.clock.now
        fake.at(start + 20, lambda: fake.remove("v1", "Namespace", "argo"))
        return True

    fake.delete = terminating
    c = make_ctx(fake, KUBECTL_OK)
    lines = []
    started = fake.clock.now
    assert runtime(c, wd, fake, lines=lines).down(DownRequest(keep_cluster=True)) == 0
    assert commands(c) == [ARGO_REMOVE]
    assert ARGO_NS in fake.deleted and fake.get("v1", "Namespace", "argo") is None
    assert fake.clock.now - started >= 20
    assert "namespace argo: terminating" in lines
    assert lines[-1] == (
        "Argo Workflows v4.1.2: removed (its CRDs, cluster roles and namespace argo)"
    )
    assert wd.state().argo is False
    # Removed for good: the next plain `up` does not bring it back.
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake).up(UpRequest()) == 0
    assert not any("argoproj" in x for x in commands(c))


def test_a_namespace_that_never_goes_fails_down_with_what_to_look_at(wd, fake):
    up_with_argo(wd, fake)
    real_delete = fake.delete
    fake.delete = lambda api, kind, name, namespace=None: (  # stuck on a finalizer
        kind == "Namespace" or real_delete(api, kind, name, namespace)
    )
    with pytest.raises(DistmlError) as e:
        runtime(make_ctx(fake, KUBECTL_OK), wd, fake).down(DownRequest(keep_cluster=True))
    assert "timed out after 300 s waiting for namespace argo to be deleted" in str(e.value)
    assert f"{KC}get namespace argo -o yaml" in str(e.value)
    assert wd.state().argo is True  # the next `down --keep-cluster` tries again


def test_a_failed_kubectl_delete_says_so_and_keeps_the_state(wd, fake):
    up_with_argo(wd, fake)
    refused = Result(stderr="The connection to the server 127.0.0.1:6443 was refused", exited=1)
    c = make_ctx(fake, {re.compile(r".* delete .*argo.*"): refused})
    with pytest.raises(DistmlError, match=r"removing Argo Workflows v4\.1\.2: kubectl exited 1"):
        runtime(c, wd, fake).down(DownRequest(keep_cluster=True))
    assert ARGO_NS not in fake.deleted
    assert wd.state().argo is True


def test_down_without_keep_cluster_deletes_the_cluster_with_argo_in_it(wd, fake):
    up_with_argo(wd, fake)
    c = make_ctx(fake, {**k3d_results(exists=True, imported=True), re.compile(".*"): OK})
    assert runtime(c, wd, fake).down(DownRequest()) == 0
    assert commands(c) == ["k3d cluster list -o json", "k3d cluster delete dist-ml"]
    assert wd.state().argo is False


def test_dry_down_keep_cluster_prints_the_removal(wd, fake):
    up_with_argo(wd, fake)
    c = make_ctx(fake, KUBECTL_OK, dry=True)
    assert runtime(c, wd, fake).down(DownRequest(keep_cluster=True)) == 0
    assert ARGO_REMOVE in commands(c)
    assert wd.state().argo is True  # --dry touches nothing


def test_status_shows_argo_once_up_installed_it(wd, fake):
    def status_lines():
        lines = []
        c = make_ctx(fake, k3d_results(exists=True, imported=True))
        assert runtime(c, wd, fake, lines=lines).status() == 0
        return "\n".join(lines)

    set_up(wd, fake)
    assert "argo workflows" not in status_lines()
    c = make_ctx(fake, k3d_results(exists=True, imported=True))
    assert runtime(c, wd, fake).up(UpRequest(with_argo=True)) == 0
    assert re.search(r"argo workflows +available", status_lines())
