"""k8s.install.apply_conflicts, and the Installer's applies through it: on a cluster distml did
not create nothing is forced (no ``--force-conflicts``, ``kube.apply(force=False)``) and a
conflict stops `up` at once, naming the object or file, the other field manager and what to
do; on a cluster distml made (kind) the training operator and the Namespaces are forced, as
an interrupted install's re-run needs."""

from __future__ import annotations

from typing import Any

import pytest
from invoke import Result

from k8s.client.kube import KubeError
from k8s.client.kubectl_errors import PermanentError
from k8s.install import operators
from k8s.install.apply_conflicts import (
    apply_unforced,
    conflicts,
    force_flag,
    is_conflict,
    kubectl_conflict_message,
)
from tests.k8s.install.test_operators_existing import installer

# kubectl's own words (kubectl apply --server-side, k8s.io/kubectl apply.go), for one object
# of a multi-object file whose replicas another manager (Helm) set.
KUBECTL_CONFLICT = "\n".join(
    [
        'error: Apply failed with 2 conflicts: conflict with "helm" using apps/v1: .spec.replicas',
        'conflict with "kubectl-edit" with subresource "scale" using apps/v1: '
        '.spec.template.spec.containers[name="training-operator"].image',
        "Please review the fields above--they currently have other managers. Here",
        "are the ways you can resolve this warning:",
        "* If you intend to manage all of these fields, please re-run the apply",
        "  command with the `--force-conflicts` flag.",
    ]
)
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kserve"}}


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operators, "wait_deployments_available", lambda *a, **k: None)


def test_force_only_where_distml_made_the_cluster() -> None:
    assert force_flag(True) == " --force-conflicts" and force_flag(False) == ""


def test_each_conflict_names_its_manager_field_and_api() -> None:
    assert is_conflict(KUBECTL_CONFLICT) and not is_conflict("connection refused")
    assert conflicts(KUBECTL_CONFLICT) == [
        '"helm" owns .spec.replicas (apps/v1)',
        '"kubectl-edit" owns .spec.template.spec.containers[name="training-operator"].image '
        "(apps/v1)",
    ]


def test_a_kubectl_conflict_says_who_owns_what_how_to_see_it_and_what_to_do() -> None:
    args = "apply --server-side -k 'github.com/kubeflow/training-operator.git/x?ref=v1.9.0'"
    text = kubectl_conflict_message("training operator", args, KUBECTL_CONFLICT)
    assert text.startswith("training operator: server-side apply conflicts")
    assert '"helm" owns .spec.replicas (apps/v1)' in text
    assert "kubectl diff --server-side --force-conflicts -k 'github.com/kubeflow" in text
    assert "does not force" in text and "Ask the cluster's admin" in text
    assert "install it by hand" in text and "invoke up" in text


class Stub:
    """A kube whose apply answers as told, recording each ``force``."""

    def __init__(self, error: KubeError | None = None) -> None:
        self.error, self.forced = error, []  # type: ignore[var-annotated]

    def apply(self, obj: dict[str, Any], *, force: bool = True, **_: Any) -> dict[str, Any]:
        self.forced.append(force)
        if self.error:
            raise self.error
        return obj


def test_a_namespace_conflict_names_the_object_and_the_other_manager() -> None:
    conflict = KubeError(
        'apply Namespace kserve failed: Apply failed with 1 conflict: conflict with "helm" '
        "using v1: .metadata.labels.app.kubernetes.io/part-of",
        status=409,
    )
    kube = Stub(conflict)
    with pytest.raises(PermanentError) as refused:
        apply_unforced(kube, NAMESPACE, owns_cluster=False, what="KServe")  # type: ignore[arg-type]
    text = str(refused.value)
    assert kube.forced == [False]
    assert text.startswith("KServe: Namespace kserve has fields another field manager owns")
    assert '"helm" owns .metadata.labels.app.kubernetes.io/part-of (v1)' in text
    assert "Ask the cluster's admin" in text


def test_other_failures_and_a_cluster_distml_made_keep_their_own_errors() -> None:
    forbidden = KubeError("apply Namespace kserve failed: forbidden", status=403)
    with pytest.raises(KubeError) as e:
        apply_unforced(Stub(forbidden), NAMESPACE, owns_cluster=False, what="KServe")  # type: ignore[arg-type]
    assert e.value is forbidden
    kube = Stub()
    apply_unforced(kube, NAMESPACE, owns_cluster=True, what="KServe")  # type: ignore[arg-type]
    assert kube.forced == [True]


@pytest.mark.parametrize("provider, forced", [("existing", False), ("kind", True)])
def test_the_training_operator_is_forced_only_on_a_cluster_distml_made(provider, forced) -> None:
    inst, _, ran, _ = installer(provider=provider, install_missing=True)
    inst.training_operator()
    (apply,) = [c for c in ran if " apply " in c]
    assert ("--force-conflicts" in apply) is forced
    assert "apply --server-side " in apply


@pytest.mark.parametrize("provider, forced", [("existing", False), ("kind", True)])
def test_the_kserve_and_argo_namespaces_are_forced_only_on_a_cluster_distml_made(
    provider, forced
) -> None:
    inst, fake, _, _ = installer(provider=provider, install_missing=True)
    inst.kserve()
    inst.argo()
    namespaces = [
        f for o, f in zip(fake.applied, fake.forced, strict=True) if o["kind"] == "Namespace"
    ]
    assert namespaces == [forced, forced]


def test_a_conflict_on_a_cluster_distml_did_not_create_stops_at_once() -> None:
    inst, _, ran, _ = installer(provider="existing", install_missing=True)

    def conflicting(command: str, **_: Any) -> Result:
        ran.append(command)
        return Result(command=command, stderr=KUBECTL_CONFLICT, exited=1)

    inst.c.run = conflicting  # type: ignore[method-assign]
    with pytest.raises(PermanentError) as refused:
        inst.training_operator()
    assert len(ran) == 1, "a conflict is not retried until the deadline"
    assert '"helm" owns .spec.replicas' in str(refused.value)
    assert "--force-conflicts" not in ran[0]
