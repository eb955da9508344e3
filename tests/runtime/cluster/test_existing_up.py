"""runtime/cluster/existing_up.py: `invoke up` on a cluster distml did not create. It
reaches the cluster through its context (recorded), leaves an existing namespace as it
is, picks the volume's class and access mode from the cluster, checks the pull secret and
the registry, and pushes the image instead of importing it; plus `up` end to end."""

from __future__ import annotations

import json
import re

import pytest
from invoke import Result

from k8s.client.kube import KubeError
from k8s.install.operator_check import PROBES, MissingOperators
from k8s.install.operators import components
from k8s.install.preflight import Preflight
from k8s.manifests.names import COMMON_LABELS, INSTANCE_LABEL
from runtime.cluster import ClusterError, ClusterRuntime, existing_up
from runtime.requests import UpRequest
from tests.support.cluster_kit import OK, REPO, TAG, available, commands, make_ctx

CTX = "team-ctx"
KC = f"kubectl --context {CTX} "
PUSHED = f"localhost:5001/{TAG}"
NS = "ml-team"  # the tests' namespace: never the training operator's (kubeflow) here


def results(contexts: str = f"{CTX}\nother-ctx\n") -> dict:
    return {
        "kubectl config get-contexts -o name": Result(contexts),
        KC + "version -o json": Result(json.dumps({"serverVersion": {"gitVersion": "v1.33.1"}})),
        re.compile(r"^(kubectl|docker) .*"): OK,
    }


def existing(c, wd, fake, lines, registry="localhost:5001", **kw) -> ClusterRuntime:
    kw.setdefault("namespace", NS)
    return ClusterRuntime(
        c,
        "existing",
        wd,
        REPO,
        kube_context=CTX,
        registry=registry,
        out=lines.append,
        kube=fake,
        clock=fake.clock,
        preflight=lambda *a, **k: Preflight(problems=[], versions={"kubectl": "1.33.1"}),
        port_free=lambda port: True,
        **kw,
    )


def kube_system(fake):
    meta = {"name": "kube-system", "uid": "ks-uid"}
    fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})


def node(fake, name):
    fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def storage_class(fake, name, provisioner, default=False):
    ann = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    meta = {"name": name, "annotations": ann}
    fake.put({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta})
    fake.obj("storage.k8s.io/v1", "StorageClass", name)["provisioner"] = provisioner


@pytest.fixture
def lines():
    return []


@pytest.fixture
def cx(wd, fake, lines):
    wd.create()
    return existing(make_ctx(fake, results()), wd, fake, lines).cx


def test_reach_names_the_nodes_and_the_cluster_but_records_nothing(cx, wd, fake, lines):
    node(fake, "node-a")
    node(fake, "node-b")
    kube_system(fake)
    found = existing_up.reach(cx)
    assert (found.server, found.uid) == (fake.server_url, "ks-uid")
    assert wd.state().context is None  # recorded by `claim`, after the ownership checks
    assert "cluster: Kubernetes v1.33.1, 2 node(s): node-a, node-b" in lines
    assert any(f"context {CTX}" in line and "never created" in line for line in lines)


def test_claim_records_the_context_and_the_cluster_behind_it(cx, wd, fake):
    kube_system(fake)
    existing_up.claim(cx, cx.settings(), existing_up.reach(cx))
    state = wd.state()
    assert (state.context, state.runtime) == (CTX, "existing")
    assert (state.cluster_server, state.cluster_uid) == (fake.server_url, "ks-uid")


def test_reach_degrades_when_nodes_and_kube_system_are_forbidden(cx, fake, lines, monkeypatch):
    def forbidden(*a, **k):
        raise KubeError(
            "nodes is forbidden: User cannot list resource nodes at the cluster scope", status=403
        )

    monkeypatch.setattr(fake, "list", forbidden)
    monkeypatch.setattr(fake, "get", forbidden)
    found = existing_up.reach(cx)
    assert (found.server, found.uid) == (fake.server_url, "")
    assert any("its nodes cannot be listed" in line for line in lines)
    assert any("known by its URL" in line for line in lines)


def test_reach_an_unknown_context_names_get_contexts(wd, fake, lines):
    wd.create()
    cx = existing(make_ctx(fake, results("other-ctx\n")), wd, fake, lines).cx
    with pytest.raises(ClusterError, match=r"`kubectl config get-contexts`"):
        existing_up.reach(cx)
    assert wd.state().context is None


def test_an_existing_namespace_is_left_as_it_is(cx, fake, lines):
    ns = {"apiVersion": "v1", "kind": "Namespace"}
    fake.put({**ns, "metadata": {"name": NS, "labels": {"team": "ml"}}})
    existing_up.namespace(cx, cx.settings())
    assert fake.applied == []
    assert fake.obj("v1", "Namespace", NS)["metadata"]["labels"] == {"team": "ml"}
    assert f"namespace {NS}: exists, used as it is" in lines


def test_a_missing_namespace_is_made_with_distmls_labels(cx, fake):
    existing_up.namespace(cx, cx.settings())
    assert fake.kinds_applied() == [f"Namespace/{NS}"]
    labels = fake.obj("v1", "Namespace", NS)["metadata"]["labels"]
    assert COMMON_LABELS.items() <= labels.items()


def test_storage_takes_the_default_class_and_says_pod_affinity_once(cx, wd, fake, lines):
    storage_class(fake, "fast", "ebs.csi.aws.com")
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    s = existing_up.storage(cx, cx.settings(), None)
    assert (s.storage_class, s.volume_access) == ("local-path", "ReadWriteOnce")
    assert len([line for line in lines if "pod affinity" in line]) == 1
    assert wd.state().storage_class == "local-path"
    assert wd.state().volume_access == "ReadWriteOnce"


def test_storage_keeps_an_existing_claims_class_and_access_mode(cx, wd, fake, lines):
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    spec = {"storageClassName": "nfs", "accessModes": ["ReadWriteMany"]}
    meta = {"name": "strategy-volume", "namespace": NS}
    fake.put({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta})
    fake.obj("v1", "PersistentVolumeClaim", "strategy-volume", NS)["spec"] = spec
    wd.update_state(runtime="existing", volume_access="ReadWriteMany", instance="abcd1234")
    fake.obj("v1", "PersistentVolumeClaim", "strategy-volume", NS)["metadata"]["labels"] = {
        **COMMON_LABELS,
        INSTANCE_LABEL: "abcd1234",
    }
    s = existing_up.storage(cx, cx.settings(), None)
    assert (s.storage_class, s.volume_access) == ("nfs", "ReadWriteMany")
    assert "volume strategy-volume: exists (nfs, ReadWriteMany)" in lines
    assert (wd.state().storage_class, wd.state().volume_access) == ("nfs", "ReadWriteMany")


def test_storage_classes_a_user_may_not_list_give_the_default_class_and_one_node(
    cx, wd, fake, lines
):
    fake.fail("list", KubeError("storageclasses is forbidden", status=403))
    s = existing_up.storage(cx, cx.settings(), None)
    assert (s.storage_class_name, s.volume_access) == ("", "ReadWriteOnce")
    assert any("StorageClasses cannot be listed" in line for line in lines)
    assert any("class the cluster's default" in line and "pod affinity" in line for line in lines)
    fake.fail("list", KubeError("storageclasses is forbidden", status=403))
    s = existing_up.storage(cx, cx.settings(), "nfs")  # named: taken on the user's word
    assert s.storage_class_name == "nfs"


def test_storage_classes_unreadable_for_another_reason_fail_the_task(cx, fake):
    fake.fail("list", KubeError("the server is currently unable to handle the request", status=503))
    with pytest.raises(ClusterError, match="unable to handle"):
        existing_up.storage(cx, cx.settings(), None)


def test_storage_without_a_default_class_is_an_error(cx, fake):
    storage_class(fake, "fast", "ebs.csi.aws.com")
    with pytest.raises(ClusterError, match="no default StorageClass"):
        existing_up.storage(cx, cx.settings(), None)


def test_a_missing_pull_secret_says_how_to_create_it(cx, fake):
    s = cx.settings(image_pull_secret="regcred")
    with pytest.raises(ClusterError) as err:
        existing_up.check_pull_secret(cx, s)
    assert f"`{KC}-n {NS} create secret docker-registry regcred" in str(err.value)
    meta = {"name": "regcred", "namespace": NS}
    fake.put({"apiVersion": "v1", "kind": "Secret", "metadata": meta})
    existing_up.check_pull_secret(cx, s)  # present: silent
    existing_up.check_pull_secret(cx, cx.settings())  # unset: nothing to check


def test_an_image_without_a_registry_is_refused(wd, fake, lines):
    wd.create()
    cx = existing(make_ctx(fake, results()), wd, fake, lines, registry="").cx
    with pytest.raises(ClusterError, match=r"invoke build --push"):
        existing_up.require_registry(cx, cx.settings())
    existing_up.require_registry(cx, cx.settings(image=PUSHED))  # a registry: fine


def test_push_image_tags_and_pushes_the_name_the_pods_run(cx, fake, lines):
    existing_up.push_image(cx, cx.settings(), TAG)
    assert commands(cx.c) == [f"docker tag {TAG} {PUSHED}", f"docker push {PUSHED}"]
    assert f"pushing {PUSHED}" in lines


# ------------------------------------------------------------------ up end to end
def operators_available(fake) -> None:
    for step in components("existing", "knative"):
        available(fake, PROBES[step].namespace, PROBES[step].deployment)


def test_up_on_an_existing_cluster_creates_nothing_and_pushes_the_image(wd, fake, lines):
    node(fake, "node-a")
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    operators_available(fake)
    c = make_ctx(fake, results())
    assert existing(c, wd, fake, lines).up(UpRequest()) == 0
    ran = commands(c)
    assert not [x for x in ran if x.startswith(("kind ", "k3d ")) or " patch " in x]
    assert f"docker tag {TAG} {PUSHED}" in ran and f"docker push {PUSHED}" in ran
    assert not any("import" in x or "docker save" in x for x in ran)
    assert fake.kinds_applied() == [
        f"Namespace/{NS}",
        "PersistentVolumeClaim/strategy-volume",
        "Job/distml-ingest",
    ]
    state = wd.state()
    assert state.up and state.runtime == "existing" and state.context == CTX
    assert state.image == PUSHED
    assert f"context {CTX} ready; next: invoke train-all" in lines


def test_up_with_operators_missing_lists_them_and_makes_no_volume(wd, fake, lines):
    node(fake, "node-a")
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    available(fake, "kubeflow", "training-operator")  # the rest is missing
    c = make_ctx(fake, results())
    with pytest.raises(MissingOperators, match="lacks what distml needs") as err:
        existing(c, wd, fake, lines).up(UpRequest(install_operators=False))
    for step in ("cert_manager", "istio", "knative", "kserve"):
        assert f"{PROBES[step].namespace}/{PROBES[step].deployment}" in str(err.value)
    assert "kubeflow/training-operator" not in str(err.value)
    assert "--install-operators" in str(err.value)
    assert fake.applied == []  # not even the namespace: said before anything is made
    assert not any(" apply " in x for x in commands(c))


def test_pods_run_the_pushed_digest_not_a_tag_others_can_push_over(wd, fake, lines):
    node(fake, "node-a")
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    operators_available(fake)
    digest = "sha256:" + "ab" * 32
    pushed = Result(f"{TAG.split(':')[1]}: digest: {digest} size: 2416\n")
    c = make_ctx(fake, {f"docker push {PUSHED}": pushed, **results()})
    rt = existing(c, wd, fake, lines)
    assert rt.up(UpRequest()) == 0
    job = next(o for o in fake.applied if o["kind"] == "Job")
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == wd.state().pushed == wd.state().image == f"{PUSHED}@{digest}"
    later = existing(make_ctx(fake, results()), wd, fake, [])  # the next task
    assert later.cx.settings().image == f"{PUSHED}@{digest}"


def test_install_operators_makes_the_namespace_before_probing_webhooks_in_it(wd, fake, lines):
    # The webhooks are probed by server-side dry runs of our objects in our namespace: a
    # real API server refuses them (namespace not found) until the namespace exists.
    node(fake, "node-a")
    storage_class(fake, "local-path", "rancher.io/local-path", default=True)
    c = make_ctx(fake, results())
    up = UpRequest(install_operators=True, serving_mode="standard")
    assert existing(c, wd, fake, lines).up(up) == 0
    applies = [(args[0]["kind"], args[1]) for name, args in fake.calls if name == "apply"]
    first_probe = next(i for i, (_, dry) in enumerate(applies) if dry)
    assert ("Namespace", False) in applies[:first_probe]
    surveyed = next(i for i, line in enumerate(lines) if line.startswith("installing "))
    made = next(i for i, line in enumerate(lines) if line.startswith("Namespace "))
    assert surveyed < made  # what it will install is said before anything is made
