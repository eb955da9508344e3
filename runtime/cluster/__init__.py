"""The cluster runtimes (k3d, kind, minikube): the pod contract as Kubernetes objects.

The same lifecycle as ``runtime.local``, with the same commands in the pods: ingest as a
Job on the PVC, one TFJob per model (the Kubeflow training operator gives each worker
its TF_CONFIG), selection as a Job, serving as a KServe InferenceService that
autoscales. Objects come from the pure builders in ``k8s.manifests``; every read and
write goes through the ``k8s.kube`` seam; every CLI (k3d, kind, kubectl, docker) through
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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from k8s.kube import Kube
from k8s.providers import provider
from k8s.settings import MODEL_TYPES
from runtime.cluster import down as _down
from runtime.cluster import render as _render
from runtime.cluster import serve as _serve
from runtime.cluster import status as _status
from runtime.cluster import train as _train
from runtime.cluster import up as _up
from runtime.cluster.context import ClusterContext, ClusterError, Out
from runtime.cluster.serve import expected_replicas
from runtime.workdir import Workdir

__all__ = ["ClusterError", "ClusterRuntime", "expected_replicas"]


class ClusterRuntime:
    """One distml deployment on one local cluster."""

    is_cluster = True

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
        service: str = "tf-mnist",
        namespace: str = "kubeflow",
        cluster: str = "dist-ml",
        ingress_port: int = 8080,
        docker: str = "",
        out: Out = print,
        kube: Kube | None = None,
        clock: Any = time,
        preflight: Callable[..., Any] | None = None,
        port_free: Callable[[int], bool] | None = None,
    ) -> None:
        docker = docker or "docker"
        self.cx = ClusterContext(
            c=c,
            wd=workdir,
            root=root,
            provider=provider(
                provider_name, cluster=cluster, ingress_port=ingress_port, docker=docker
            ),
            namespace=namespace,
            service=service,
            docker=docker,
            out=out,
            clock=clock,
            image=lambda: self.image,
            given_kube=kube,
        )
        self._preflight = preflight
        self._port_free = port_free

    @cached_property
    def image(self) -> str:
        """The project image's tag: a hash of the build context, computed once per task."""
        from runtime.image import image_tag

        return image_tag(self.cx.root)

    def up(
        self,
        *,
        source_dir: str | None = None,
        serving_mode: str | None = None,
        base: str | None = None,
        base_image: str | None = None,
    ) -> int:
        return _up.up(
            self.cx,
            source_dir=source_dir,
            serving_mode=serving_mode,
            base=base,
            base_image=base_image,
            preflight=self._preflight,
            port_free=self._port_free,
        )

    def train(
        self,
        models: Sequence[str],
        *,
        workers: int = 2,
        profile: str = "quick",
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        max_restarts: int = 2,
        gpus_per_worker: int = 0,
        deadline_s: int = 3600,
        parallel: int | None = None,
    ) -> int:
        request = _train.TrainRequest(
            models=models,
            workers=workers,
            profile=profile,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            max_restarts=max_restarts,
            gpus_per_worker=gpus_per_worker,
            deadline_s=deadline_s,
            parallel=parallel,
        )
        return _train.train(self.cx, request)

    def deploy(
        self,
        *,
        predictor: str = "kserve",
        min_accuracy: float = 0.0,
        force: bool = False,
        target: int | None = None,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
        container_concurrency: int | None = None,
        request_logger: bool = False,
        timeout: float = 600,
    ) -> int:
        request = _serve.DeployRequest(
            predictor=predictor,
            min_accuracy=min_accuracy,
            force=force,
            target=target,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            container_concurrency=container_concurrency,
            request_logger=request_logger,
            timeout=timeout,
        )
        return _serve.deploy(self.cx, request)

    def rollback(self) -> int:
        return _serve.rollback(self.cx)

    def loadtest(
        self,
        *,
        concurrency: int = 5,
        duration: str = "30s",
        spawn_rate: float | None = None,
        max_failure_ratio: float = 0.0,
        expect_scale_out: bool | None = None,
    ) -> int:
        request = _serve.LoadRequest(
            concurrency=concurrency,
            duration=duration,
            spawn_rate=spawn_rate,
            max_failure_ratio=max_failure_ratio,
            expect_scale_out=expect_scale_out,
        )
        return _serve.loadtest(self.cx, request)

    def status(self) -> int:
        return _status.status(self.cx)

    def down(self, *, purge: bool = False, keep_cluster: bool = False) -> int:
        return _down.down(self.cx, purge=purge, keep_cluster=keep_cluster)

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
