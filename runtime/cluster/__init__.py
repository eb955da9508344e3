"""The cluster runtimes (k3d, kind, minikube): the pod contract as Kubernetes objects.

The same lifecycle as ``runtime.local``, with the same commands in the pods: ingest as a
Job on the PVC, one TFJob per model (the Kubeflow training operator gives each worker
its TF_CONFIG), selection as a Job, serving as a KServe InferenceService that
autoscales. Objects come from the pure builders in ``k8s.manifests``; every read and
write goes through the ``k8s.client.kube`` seam; every CLI (k3d, kind, kubectl, docker) through
``c.run``. Under ``invoke --dry`` the seam is a ``DryKube`` and ``c.run`` only prints:
the dry run shows every command and object in order and touches nothing.

``ClusterRuntime`` is the facade the tasks call; each step lives in its own module:

    context.py  the seams, settings and checks every step shares (``ClusterContext``)
    objects.py  apply and report, delete and wait until gone, run a batch Job
    volume.py   the loader pod: copies into and out of the PVC
    up.py       preflight, cluster, operators, image, volume, dataset
    train.py    TFJobs in waves, live job lines, the candidates' metrics
    serve.py    deploy, rollback, load test (with the replicas the autoscaler should reach)
    status.py   the status table
    down.py     delete the cluster or what distml applied; --purge
    render.py   the objects as YAML and the operator install script
    workflow.py the pipeline as one Argo Workflow: submit, watch, stop
    tensorboard.py  TensorBoard as a pod on the PVC (read-only), port-forwarded
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from k8s.client.kube import Kube
from k8s.providers import provider
from k8s.providers.settings import EXISTING
from ml import contract
from ml.contract import MODEL_TYPES
from runtime.api import Capabilities
from runtime.cluster import down as _down
from runtime.cluster import render as _render
from runtime.cluster import serving as _serve
from runtime.cluster import status as _status
from runtime.cluster import tensorboard as _tensorboard
from runtime.cluster import training as _train
from runtime.cluster import up as _up
from runtime.cluster import workflow as _workflow
from runtime.cluster.context import ClusterContext, ClusterError, Out
from runtime.cluster.serving import expected_replicas
from runtime.requests import (
    DeployRequest,
    DownRequest,
    LoadtestRequest,
    TensorboardRequest,
    TrainRequest,
    UpRequest,
    WorkflowRequest,
)
from runtime.workdir import Workdir

__all__ = ["ClusterError", "ClusterRuntime", "expected_replicas"]


class ClusterRuntime:
    """One distml deployment on one cluster: one distml made, or an existing one."""

    capabilities = Capabilities(
        cluster=True,
        scales_out=True,
        gpus=True,
        predictors=True,
        local_port=False,
        workflows=True,
        canary=True,
    )
    train_deadline_s = 3600  # a TFJob's runPolicy.activeDeadlineSeconds
    deploy_timeout_s = 600.0  # for the InferenceService to become Ready
    interrupt_note = (
        "jobs already submitted keep running in the cluster: `invoke status` shows them, "
        "`invoke down --keep-cluster` removes them"
    )

    def __init__(
        self,
        c: Any,
        provider_name: str,
        workdir: Workdir,
        root: Path,
        *,
        service: str = contract.DEFAULT_SERVICE,
        namespace: str = "kubeflow",
        cluster: str = "dist-ml",
        ingress_port: int = 8080,
        docker: str = "",
        cpu_requests: Mapping[str, str] | None = None,
        node_image: str = "",
        manifest_mirror: str = "",
        kube_context: str = "",
        registry: str = "",
        out: Out = print,
        kube: Kube | None = None,
        clock: Any = time,
        preflight: Callable[..., Any] | None = None,
        port_free: Callable[[int], bool] | None = None,
        **cluster_settings: str,
    ) -> None:
        """``cluster_settings``: the ``cluster.*`` strings ClusterContext keeps by name
        (storage_class, volume_access, image_pull_secret, istio_gateway_type, prometheus,
        alert_webhook, watchdog_webhook)."""
        docker = docker or "docker"  # the engine's CLI; the cluster.* settings pass on
        self.cx = ClusterContext(
            c=c,
            wd=workdir,
            root=root,
            provider=provider(
                provider_name,
                cluster=cluster,
                ingress_port=ingress_port,
                docker=docker,
                node_image=node_image,
                kube_context=kube_context,
                workdir=workdir.root,
            ),
            namespace=namespace,
            service=service,
            docker=docker,
            out=out,
            clock=clock,
            image=lambda: self.image,
            given_kube=kube,
            cpu_requests=dict(cpu_requests or {}),
            manifest_mirror=manifest_mirror,
            **cluster_settings,
        )
        self.name, self.registry = provider_name, registry
        self._preflight, self._port_free = preflight, port_free

    @cached_property
    def image(self) -> str:
        """The project image's tag: a hash of the build context, computed once per task;
        with a registry (``build --push``, ``cluster.registry``), the name pushed there."""
        from runtime.image import image_tag
        from runtime.registry import pushed_name

        tag = image_tag(self.cx.root)
        if self.name != EXISTING:
            return tag  # side-loaded into the nodes distml made
        state = self.cx.wd.state()
        registry = self.registry or state.registry or ""
        if not registry:
            return tag
        name = pushed_name(registry, tag)
        # Pinned to the digest `up` pushed, while the code is the same.
        pushed = state.pushed or ""
        return pushed if pushed.startswith(name + "@") else name

    def up(self, request: UpRequest) -> int:
        return _up.up(
            self.cx,
            source_dir=request.source_dir,
            serving_mode=request.serving_mode,
            base=request.base,
            base_image=request.base_image,
            with_argo=request.with_argo,
            with_monitoring=request.with_monitoring,
            install_operators=request.install_operators,
            storage_class=request.storage_class,
            preflight=self._preflight,
            port_free=self._port_free,
        )

    def train(self, request: TrainRequest) -> int:
        return _train.train(self.cx, request, deadline_s=self.train_deadline_s)

    def deploy(self, request: DeployRequest) -> int:
        if request.canary:
            from runtime.cluster.canary_deploy import deploy_canary

            return deploy_canary(self.cx, request)
        return _serve.deploy(self.cx, request, timeout=self.deploy_timeout_s)

    def rollback(self) -> int:
        return _serve.rollback(self.cx)

    def loadtest(self, request: LoadtestRequest) -> int:
        return _serve.loadtest(self.cx, request)

    def status(self) -> int:
        return _status.status(self.cx)

    def down(self, request: DownRequest) -> int:
        return _down.down(self.cx, purge=request.purge, keep_cluster=request.keep_cluster)

    def workflow(self, request: WorkflowRequest) -> int:
        return _workflow.workflow(self.cx, request)

    def canary(self, word: str) -> int:
        """End the canary release by hand: ``promote`` or ``abort``."""
        from runtime.cluster.canary_deploy import control

        return control(self.cx, word)

    def tensorboard(self, request: TensorboardRequest) -> int:
        from runtime.procs import port_is_free

        free = self._port_free or (lambda port: port_is_free(port, "127.0.0.1"))
        return _tensorboard.tensorboard(self.cx, request, free)

    def render(
        self,
        out_dir: Path,
        *,
        models: Sequence[str] = MODEL_TYPES,
        serving_mode: str = "knative",
        predictor: str = "kserve",
        source_dir: bool = False,
        **changes: Any,
    ) -> list[Path]:
        """Write every object up/train-all/deploy apply, as YAML, in apply order."""
        return _render.render(
            self.cx,
            out_dir,
            models=models,
            serving_mode=serving_mode,
            predictor=predictor,
            source_dir=source_dir,
            **changes,
        )
