"""The operators `up` installs only when asked: Argo Workflows (`up --with-argo`) and KEDA
(`up --with-monitoring`, standard mode): their names, KEDA's APIService wait, and their
removal by `down --keep-cluster`. ``OptionalOperators`` is a part of
``k8s.install.operators.Installer``, which gives it ``present``, ``apply``, ``wait``, ``source``,
``kubectl``, ``kube``, ``provider``, ``clock``, ``out``, ``timeout`` and ``dry``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from common.poll import Done, Pending, api_note
from k8s import manifests
from k8s.client.kube import Kube, KubeError
from k8s.client.objects import condition, format_condition, is_true
from k8s.install import versions
from k8s.install.apply_conflicts import apply_unforced
from k8s.install.kserve_keda import (
    KSERVE_CONTROLLER,
    KSERVE_NAMESPACE,
    RESTART,
    advice,
    started_before_keda,
)
from k8s.install.operator_check import CLUSTER_WIDE, PROBES
from k8s.manifests.names import ARGO_NAMESPACE
from k8s.waits.cluster_poll import POLL_S, WaitError, outcome, poll_cluster

# Argo Workflows: its namespace (ARGO_NAMESPACE, from k8s.manifests.names: the Workflow's
# RBAC names it too) and the Deployments `up` waits for (the controller runs workflows;
# the server is the UI and API).
ARGO_DEPLOYMENTS = PROBES["argo"].deployments
# How long `down --keep-cluster` gives kubectl to delete Argo's objects (CRDs included:
# the API server deletes every Workflow first) and the namespace to go.
ARGO_DELETE_TIMEOUT_S = 300
# KEDA (`up --with-monitoring`, standard mode): its namespace and Deployments (the release
# file's names), and the APIService its metrics server serves the HPA through.
KEDA_NAMESPACE = PROBES["keda"].namespace
KEDA_DEPLOYMENTS = PROBES["keda"].deployments
APISERVICE_API = "apiregistration.k8s.io/v1"
KEDA_APISERVICE = "v1beta1.external.metrics.k8s.io"
KEDA_DELETE_TIMEOUT_S = 300


def wait_apiservice_available(
    kube: Kube, name: str, *, timeout: float, clock: Any, out: Callable[[str], None], kubectl: Any
) -> None:
    """Wait until an APIService says Available=True (the aggregated API answers: the HPA
    can read external metrics through it)."""
    what = f"APIService {name} to be Available"

    def judge(api: dict[str, Any] | None) -> Any:
        if is_true(api, "Available"):
            return Done()
        if api is None:
            return Pending(f"APIService {name}: not there")
        cond = condition(api, "Available")
        return Pending(f"APIService {name}: {format_condition(cond) if cond else 'no status yet'}")

    verdict = poll_cluster(
        lambda: kube.get(APISERVICE_API, "APIService", name),
        judge,
        what=what,
        timeout=timeout,
        interval=POLL_S,
        clock=clock,
        out=out,
    )
    logs = kubectl(f"-n {KEDA_NAMESPACE} logs deployment/keda-metrics-apiserver")
    outcome(
        verdict,
        what,
        lambda v: WaitError(
            f"timed out after {timeout:.0f} s waiting for {what} ({v.status}){api_note(v.error)}",
            next_step=f"`{kubectl(f'get apiservice {name} -o yaml')}` says why; the server "
            f"behind it: `{logs}`",
        ),
        kubectl=kubectl,
    )


class OptionalOperators:
    """Installer steps ``argo`` and ``keda``, and their removal (module doc)."""

    kube: Kube
    provider: Any
    clock: Any
    out: Callable[[str], None]
    timeout: float

    if TYPE_CHECKING:  # Installer's own (k8s.install.operators), which these steps call

        @property
        def dry(self) -> bool: ...
        @property
        def owned(self) -> bool: ...
        def present(self, step: str, label: str, namespace: str, *deployments: str) -> bool: ...
        def apply(self, url: str, what: str, flags: str = "") -> None: ...
        def wait(self, namespace: str, names: list[str] | None = None) -> None: ...
        def source(self, url: str, *, kustomize: bool = False) -> str: ...
        def kubectl(self, args: str, **kwargs: Any) -> Any: ...

    def argo(self) -> None:
        label = PROBES["argo"].label
        if self.present("argo", label, ARGO_NAMESPACE, *ARGO_DEPLOYMENTS):
            return
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ARGO_NAMESPACE, "labels": manifests.labels()},
        }
        apply_unforced(self.kube, namespace, owns_cluster=self.owned, what=label)
        self.apply(versions.ARGO_WORKFLOWS_URL, label, f"--server-side -n {ARGO_NAMESPACE}")
        self.wait(ARGO_NAMESPACE, list(ARGO_DEPLOYMENTS))

    def keda(self) -> None:
        label = PROBES["keda"].label
        if self.present("keda", label, KEDA_NAMESPACE, *KEDA_DEPLOYMENTS):
            return
        # The file makes its own Namespace; its scaledjobs CRD (~330 KB) is above client-side
        # apply's 256 KiB annotation: applied --server-side.
        self.apply(versions.KEDA_URL, label, "--server-side")
        self.wait(KEDA_NAMESPACE, list(KEDA_DEPLOYMENTS))
        if not self.dry:
            wait_apiservice_available(
                self.kube,
                KEDA_APISERVICE,
                timeout=self.timeout,
                clock=self.clock,
                out=self.out,
                kubectl=self.provider.kubectl,
            )
            self._kserve_watches_keda()

    def _kserve_watches_keda(self) -> None:
        """KServe's controller, if it ran before KEDA came, restarted (a cluster distml
        made) or named with the restart to ask for (any other; k8s.install.kserve_keda)."""
        early = started_before_keda(self.kube)
        if not early:
            return
        if not self.owned:
            self.out(f"note: {advice(early, self.provider.kubectl(RESTART))}")
            return
        self.kubectl(RESTART)
        self.kubectl(f"-n {KSERVE_NAMESPACE} rollout status deployment/{KSERVE_CONTROLLER} "
                     f"--timeout {int(self.timeout)}s")  # fmt: skip
        self.out("KServe's controller: restarted, so that it watches KEDA's ScaledObjects")

    def remove_argo(self) -> None:
        """Delete what install.yaml made (its CRDs, and with them every Workflow; its
        cluster roles and priority class; kubectl waits until they are gone), then the
        namespace, waited for too: an `up --with-argo` right after must not meet objects
        that are still being deleted."""
        label = PROBES["argo"].label
        args = (
            f"delete -n {ARGO_NAMESPACE} {self.source(versions.ARGO_WORKFLOWS_URL)} "
            f"--ignore-not-found --timeout {ARGO_DELETE_TIMEOUT_S}s"
        )
        self._delete_or_raise(args, label, "argoproj")
        if self.kube.delete("v1", "Namespace", ARGO_NAMESPACE) and not self.dry:
            self._wait_namespace_gone(ARGO_NAMESPACE)
        self.out(f"{label}: removed (its CRDs, cluster roles and namespace {ARGO_NAMESPACE})")

    def _delete_or_raise(self, args: str, label: str, crd_word: str) -> None:
        """``kubectl delete ...``; a failure says what is left and how to go on."""
        result = self.kubectl(args, warn=True)
        if not result.ok:
            err = (result.stderr or result.stdout or "").strip()
            raise KubeError(
                f"removing {label}: kubectl exited {result.exited}: {err[-400:]}\nnext: "
                f"see what is left with `{self.provider.kubectl('get crd')} | grep {crd_word}` "
                "and run `invoke down --keep-cluster` again"
            )

    def remove_keda(self) -> None:
        """Delete KEDA's CRDs first, while its operator still runs to finalize every
        ScaledObject (their finalizer is the operator's: with the operator gone first they
        would hold their CRD forever), then the rest of the release file, its namespace
        with it, waited for."""
        label = PROBES["keda"].label
        crds = " ".join(CLUSTER_WIDE["keda"]["CustomResourceDefinition"])
        wait = f"--ignore-not-found --timeout {KEDA_DELETE_TIMEOUT_S}s"
        for args in (
            f"delete crd {crds} {wait}",
            f"delete {self.source(versions.KEDA_URL)} {wait}",
        ):
            self._delete_or_raise(args, label, "keda")
        if not self.dry:
            self._wait_namespace_gone(KEDA_NAMESPACE, KEDA_DELETE_TIMEOUT_S)
        self.out(f"{label}: removed (its CRDs, APIService, cluster roles and namespace keda)")

    def _wait_namespace_gone(self, name: str, timeout: float = ARGO_DELETE_TIMEOUT_S) -> None:
        what = f"namespace {name} to be deleted"
        verdict = poll_cluster(
            lambda: self.kube.get("v1", "Namespace", name),
            lambda ns: Done() if ns is None else Pending(f"namespace {name}: terminating"),
            what=what,
            timeout=timeout,
            interval=POLL_S,
            clock=self.clock,
            out=self.out,
        )
        outcome(
            verdict,
            what,
            lambda v: WaitError(
                f"timed out after {timeout:.0f} s waiting for {what}{api_note(v.error)}",
                next_step=f"`{self.provider.kubectl(f'get namespace {name} -o yaml')}`: its "
                "status.conditions say which objects or finalizers it waits for",
            ),
            kubectl=self.provider.kubectl,
        )
