"""`invoke down` on a cluster distml did not create: distml's labelled objects and its own
volume only. A claim without distml's labels stays; Argo's namespace is touched only when
this work dir used Argo; with no context recorded there is nothing to delete on a cluster.
And `train-all` on such a cluster when listing every namespace's pods is forbidden."""

from __future__ import annotations

import pytest

from k8s.kube import KubeError
from k8s.manifests.names import COMMON_LABELS, is_ours
from runtime.cluster.submit import jobs_that_fit
from runtime.requests import DownRequest
from tests.runtime.cluster.test_existing_up import CTX, existing, results
from tests.support.cluster_kit import make_ctx

PVC = ("v1", "PersistentVolumeClaim", "strategy-volume", "kubeflow")


def claim(fake, labels):
    meta = {"name": "strategy-volume", "namespace": "kubeflow", "labels": labels}
    fake.put({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta})


@pytest.fixture
def rt(wd, fake):
    wd.create()
    wd.update_state(up=True, runtime="existing", context=CTX, volume_access="ReadWriteOnce")
    lines: list[str] = []
    runtime = existing(make_ctx(fake, results()), wd, fake, lines)
    runtime.lines = lines
    return runtime


def test_down_keeps_a_claim_without_distmls_labels(rt, fake):
    claim(fake, {"team": "ml"})
    assert rt.down(DownRequest()) == 0
    assert fake.obj(*PVC) is not None
    assert any("not distml's (no distml labels), kept" in line for line in rt.lines)


def test_down_deletes_distmls_own_claim_and_clears_the_context(rt, fake, wd):
    claim(fake, dict(COMMON_LABELS))
    rt.down(DownRequest())
    assert fake.obj(*PVC) is None
    state = wd.state()
    assert (state.context, state.up, state.runtime) == (None, False, "existing")


def test_down_leaves_argos_namespace_alone_unless_this_work_dir_used_argo(rt, fake, monkeypatch):
    touched = []
    real = fake.delete

    def delete(api, kind, name, namespace=None):
        touched.append(namespace)
        return real(api, kind, name, namespace)

    monkeypatch.setattr(fake, "delete", delete)
    rt.down(DownRequest())
    assert "argo" not in touched  # a user whose rights end at their namespace can run it


def test_a_second_down_has_nothing_to_delete_on_a_cluster(wd, fake):
    wd.create()
    wd.update_state(runtime="existing")  # a first down cleared the context
    lines: list[str] = []
    rt = existing(make_ctx(fake, results()), wd, fake, lines)
    rt.cx.provider.kube_context = ""  # what tasks.chooser gives `down` with none recorded
    assert rt.down(DownRequest()) == 0
    assert "nothing to delete there" in " ".join(lines)


def test_capacity_unknown_when_pods_cannot_be_listed_submits_every_job(rt, fake, monkeypatch):
    fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}})
    fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}})
    real = fake.list

    def listing(api, kind, namespace=None, label_selector=None):
        if kind == "Pod" and namespace is None:
            raise KubeError("pods is forbidden: cannot list resource pods at the cluster scope")
        return real(api, kind, namespace, label_selector=label_selector)

    monkeypatch.setattr(fake, "list", listing)
    assert jobs_that_fit(rt.cx, rt.cx.settings(), 3) == 3
    assert any("room is unknown" in line for line in rt.lines)


def test_is_ours_needs_every_common_label():
    assert is_ours({"metadata": {"labels": dict(COMMON_LABELS)}})
    assert not is_ours({"metadata": {"labels": {"app.kubernetes.io/part-of": "distml"}}})
    assert not is_ours({"metadata": {}})
