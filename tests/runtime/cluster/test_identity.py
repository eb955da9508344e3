"""runtime/cluster/identity.py: a cluster is its API server's URL, its kube-system
Namespace's uid and its CA; a context that now names another one is refused before any
call. Only a 403 lowers the check."""

from __future__ import annotations

import base64
import hashlib

import pytest

from k8s.client.kube import KubeError
from runtime.cluster import ClusterError
from runtime.cluster.identity import Identity, check_recorded, fingerprint, read
from runtime.workdir.state import State
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
        raise KubeError('namespaces "kube-system" is forbidden', status=403)

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
        raise KubeError('namespaces "kube-system" is forbidden', status=403)

    monkeypatch.setattr(kube, "get", forbidden)
    state = State(cluster_server=kube.server_url, cluster_uid="ks")
    with pytest.raises(ClusterError, match="cannot be told to be the cluster"):
        check_recorded(kube, state, "ctx")


def pem(der: bytes) -> str:
    body = base64.b64encode(der).decode()
    return f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"


CA_1, CA_2 = pem(b"cluster one's CA"), pem(b"cluster two's CA")


def namespace_only(kube: FakeKube, ca: str, namespace: str = "team-b") -> None:
    """A user whose rights end at ``namespace``: kube-system is a 403; the namespace's
    kube-root-ca.crt holds the cluster's CA."""
    meta = {"name": "kube-root-ca.crt", "namespace": namespace}
    kube.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"ca.crt": ca}})
    real = kube.get

    def get(api, kind, name, ns=None):
        if ns != namespace:
            raise KubeError(f"{kind.lower()}s {name!r} is forbidden", status=403)
        return real(api, kind, name, ns)

    kube.get = get  # type: ignore[method-assign]


def test_a_namespace_only_user_knows_the_cluster_by_its_ca():
    kube = FakeKube()
    namespace_only(kube, CA_1)
    found, note = read(kube, "team-b")
    assert found == Identity(kube.server_url, "", fingerprint(CA_1))
    assert found.ca == hashlib.sha256(b"cluster one's CA").hexdigest()
    assert "known by its CA" in note


def test_the_same_url_with_another_ca_is_another_cluster():
    # A proxy kept at one address, or a cluster made again there: the URL alone misses it.
    state = State(
        cluster_server=FakeKube().server_url, cluster_ca=fingerprint(CA_1), namespace="team-b"
    )
    same = FakeKube()
    namespace_only(same, CA_1)
    check_recorded(same, state, "alice@byo")
    other = FakeKube()
    namespace_only(other, CA_2)
    with pytest.raises(ClusterError, match="'alice@byo' now points at another cluster"):
        check_recorded(other, state, "alice@byo")


def test_without_the_config_map_the_kubeconfigs_ca_tells_the_cluster():
    kube = FakeKube()
    kube.ca_pem = CA_2
    assert read(kube, "not-made-yet")[0].ca == fingerprint(CA_2)


def test_a_ca_recorded_from_the_kubeconfig_is_checked_against_the_kubeconfig():
    # `up` before the namespace had its ConfigMap: the kubeconfig's CA (another certificate
    # than the ConfigMap's, as behind a front proxy) was recorded.
    state = State(
        cluster_server=FakeKube().server_url, cluster_ca=fingerprint(CA_2), namespace="team-b"
    )
    same = FakeKube()
    namespace_only(same, CA_1)
    same.ca_pem = CA_2
    check_recorded(same, state, "alice@byo")
    other = FakeKube()
    namespace_only(other, CA_1)
    other.ca_pem = pem(b"another kubeconfig CA")
    with pytest.raises(ClusterError, match="now points at another cluster"):
        check_recorded(other, state, "alice@byo")


@pytest.mark.parametrize(
    "error",
    [
        KubeError("get Namespace kube-system failed: 503 Service Unavailable", status=503),
        KubeError("get Namespace kube-system failed: timed out"),  # no answer at all
    ],
    ids=["5xx", "timeout"],
)
def test_only_a_403_lowers_the_check(error):
    kube = FakeKube()
    kube.fail("get", error)
    with pytest.raises(ClusterError, match="cannot tell which cluster this is"):
        read(kube, "team-b")


def test_fingerprint_of_garbage_is_empty():
    assert fingerprint("") == "" and fingerprint("not a certificate") == ""
    assert fingerprint("-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----") == ""
