"""runtime/cluster/identity.py: a cluster is its API server's URL and its kube-system
Namespace's uid; a context that now names another one is refused before any call."""

from __future__ import annotations

import pytest

from k8s.client.kube import KubeError
from runtime.cluster import ClusterError
from runtime.cluster.identity import Identity, check_recorded, read
from runtime.state import State
from tests.support.fakekube import FakeKube

URL = "https://127.0.0.1:6443"


@pytest.mark.parametrize(
    "was, now, same",
    [
        (Identity(URL, "a"), Identity(URL, "a"), True),
        (Identity(URL, "a"), Identity(URL, "b"), False),  # same URL, another cluster
        (Identity(URL, "a"), Identity("https://10.0.0.9:6443", "a"), False),
        (Identity(URL, ""), Identity(URL, "b"), True),  # uid unreadable then: URL alone
        (Identity(URL, "a"), Identity(URL, ""), True),  # unreadable now
    ],
)
def test_same(was, now, same):
    assert was.same(now) is same


def test_read_takes_kube_systems_uid_and_degrades_without_rights(monkeypatch):
    kube = FakeKube()
    kube.put(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "uid": "ks"}}
    )
    assert read(kube) == (Identity(kube.server_url, "ks"), "")

    def forbidden(*a, **k):
        raise KubeError('namespaces "kube-system" is forbidden')

    monkeypatch.setattr(kube, "get", forbidden)
    found, note = read(kube)
    assert found == Identity(kube.server_url, "") and "known by its URL" in note


def test_check_recorded_passes_with_nothing_recorded_and_refuses_another_cluster():
    kube = FakeKube()
    check_recorded(kube, State(), "ctx")  # the first `up`
    state = State(cluster_server="https://elsewhere:6443", cluster_uid="")
    with pytest.raises(ClusterError, match="'ctx' now points at another cluster"):
        check_recorded(kube, state, "ctx")


def test_a_recorded_uid_that_cannot_be_read_now_is_refused(monkeypatch):
    # 127.0.0.1:6443 is every local cluster's URL: without the uid it proves nothing.
    kube = FakeKube()

    def forbidden(*a, **k):
        raise KubeError('namespaces "kube-system" is forbidden')

    monkeypatch.setattr(kube, "get", forbidden)
    state = State(cluster_server=kube.server_url, cluster_uid="ks")
    with pytest.raises(ClusterError, match="cannot be told to be the cluster"):
        check_recorded(kube, state, "ctx")
