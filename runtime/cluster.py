"""The cluster runtimes (k3d, kind, minikube): the pod contract as Kubernetes objects.

The same lifecycle as ``runtime.local``, with the same commands in the pods: ingest as a
Job on the PVC, one TFJob per model (the Kubeflow training operator gives each worker
its TF_CONFIG), selection as a Job, serving as a KServe InferenceService that
autoscales. Objects come from the pure builders in ``k8s.manifests``; every read and
write goes through the ``k8s.kube`` seam; every CLI (k3d, kind, kubectl, docker) through
``c.run``. Under ``invoke --dry`` the seam is a ``DryKube`` and ``c.run`` only prints:
the dry run shows every command and object in order and touches nothing.
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from common.errors import DistmlError
from k8s import capacity, manifests
from k8s.kube import DryKube, Kube, KubeError
from k8s.objects import TERMINAL, ReplicaCounter, is_true, tfjob_state
from k8s.operators import Installer, deployment_available
from k8s.providers import Provider, provider
from k8s.settings import MODEL_TYPES, PREDICTORS, SERVING_MODES, Settings
from k8s.tfjobs import wait_tfjobs
from k8s.waits import WaitError, wait_isvc_ready, wait_job
from runtime.workdir import MARKER, Workdir

Out = Callable[[str], None]
RAW_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
RAW_DIR = manifests.RAW_DATA_SUBDIR  # under the volume, for --source-dir on offline clusters
INGEST_JOB = manifests.INGEST_JOB
LOADER_POD = manifests.LOADER_POD
KPA_TARGET_UTILISATION = 0.7  # Knative's default container-concurrency-target-percentage
# After the load, how long to keep counting ready predictors when scale-out is expected:
# the autoscaler decides during the load, its new pods turn ready after it.
HPA_SYNC_S = 15  # kube-controller-manager's --horizontal-pod-autoscaler-sync-period default
METRIC_RESOLUTION_S = 15  # metrics-server's --metric-resolution (components.yaml; k3s's too)
PREDICTOR_START_S = 60  # scheduling, TensorFlow import, model load, readiness probe
SETTLE_S = {
    "standard": HPA_SYNC_S + METRIC_RESOLUTION_S + PREDICTOR_START_S,
    "knative": PREDICTOR_START_S,  # the KPA's panic mode reacts within its 6 s window
}


class ClusterError(DistmlError):
    """A cluster step failed; the message says what, its last status and what to run next."""


def expected_replicas(concurrency: int, target: int, max_replicas: int) -> int:
    """What Knative's KPA should reach: ceil(in flight / (target x 70%)), capped."""
    return min(max_replicas, math.ceil(concurrency / (target * KPA_TARGET_UTILISATION)))


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
        self.c = c
        self.wd = workdir
        self.root = root
        self.service = service
        self.namespace = namespace
        self.docker = docker or "docker"
        self.provider: Provider = provider(
            provider_name, cluster=cluster, ingress_port=ingress_port, docker=self.docker
        )
        self.out = out
        self.clock = clock
        self._kube = kube
        self._preflight = preflight
        self._port_free = port_free

    # ------------------------------------------------------------------ plumbing
    @property
    def dry(self) -> bool:
        return bool(self.c.config.run.dry)

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            if self.dry:
                self._kube = DryKube(self.out)
            else:
                from k8s.kube import ApiKube

                self._kube = ApiKube(self.provider.context, out=self.out)
        return self._kube

    @cached_property
    def image(self) -> str:
        """The project image's tag: a hash of the build context, computed once per task."""
        from runtime.image import image_tag

        return image_tag(self.root)

    def settings(self, **changes: Any) -> Settings:
        state = self.wd.load_state()
        base = Settings(
            image=self.image,
            provider=self.provider.name,
            namespace=self.namespace,
            service=self.service,
            serving_mode=state.get("serving_mode", "knative"),
            ingress_node_port=self.provider.ingress_node_port,
        )
        s = replace(base, **{k: v for k, v in changes.items() if v is not None})
        try:
            manifests.check_settings(s)
        except ValueError as e:
            raise ClusterError(str(e)) from e
        return s

    def _require_up(self) -> dict[str, Any]:
        state = self.wd.load_state()
        if self.dry:
            return state
        if not (state.get("up") and state.get("runtime") == self.provider.name):
            raise ClusterError(
                f"the {self.provider.name} cluster is not set up for this work dir "
                f"({self.wd.root}); run `invoke up --runtime {self.provider.name}` first"
            )
        return state

    def _get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.kube.get(api_version, kind, name, self.namespace)

    def _apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.kube.apply(obj)
        except KubeError as e:
            raise ClusterError(str(e)) from e

    def _delete_and_wait(self, api_version: str, kind: str, name: str, timeout: float = 120):
        """Delete an object and wait until it is gone (so a same-name resubmit is clean)."""
        if self._get(api_version, kind, name) is None:
            return
        if not self.kube.delete(api_version, kind, name, self.namespace) or self.dry:
            return
        deadline = self.clock.monotonic() + timeout
        while self._get(api_version, kind, name) is not None:
            if self.clock.monotonic() > deadline:
                raise ClusterError(
                    f"{kind} {name} was not deleted within {timeout:.0f} s; check its "
                    f"finalizers: kubectl --context {self.provider.context} -n "
                    f"{self.namespace} get {kind.lower()} {name} -o yaml"
                )
            self.clock.sleep(1)

    def _run_job(self, job: dict[str, Any], timeout: float, what: str) -> str:
        """Replace a batch Job of the same name, wait for it, return its log tail."""
        name = job["metadata"]["name"]
        self._delete_and_wait("batch/v1", "Job", name)
        self._apply(job)
        if self.dry:
            return ""
        try:
            wait_job(
                self.kube,
                self.namespace,
                name,
                timeout=timeout,
                clock=self.clock,
                out=self.out,
            )
        except WaitError as e:
            raise ClusterError(f"{what} failed: {e}") from e
        return self._job_logs(name)

    def _job_logs(self, name: str, tail: int = 40) -> str:
        pods = self.kube.list("v1", "Pod", self.namespace, label_selector=f"job-name={name}")
        if not pods:
            return ""
        newest = max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
        return self.kube.logs(newest["metadata"]["name"], self.namespace, tail=tail)

    # ------------------------------------------------------------------ up
    def up(
        self,
        *,
        source_dir: str | None = None,
        serving_mode: str | None = None,
        base: str | None = None,
        base_image: str | None = None,
    ) -> int:
        state = self.wd.load_state()
        mode = serving_mode or state.get("serving_mode") or "knative"
        if mode not in SERVING_MODES:
            raise ClusterError(f"--serving-mode must be one of {', '.join(SERVING_MODES)}")
        if state.get("up") and state.get("serving_mode", mode) != mode and not self.dry:
            raise ClusterError(
                f"this cluster was set up in {state['serving_mode']} mode; switching modes "
                "needs a fresh cluster: `invoke down`, then `invoke up --serving-mode "
                f"{mode}`"
            )
        source = self._check_source_dir(source_dir)
        self._run_preflight(mode)
        if not self.dry:
            self.wd.create()
        if not self.dry:
            self.wd.update_state(serving_mode=mode)
        s = self.settings(serving_mode=mode)
        p = self.provider

        self.out(f"== cluster {p.cluster} ({p.name}, context {p.context})")
        if p.exists(self.c):
            self.out(f"cluster {p.cluster}: already exists, reused")
        else:
            self._check_ingress_port()
            self.out(f"cluster {p.cluster}: creating (one node; the PVC is ReadWriteOnce)")
            p.create(self.c, self.wd.root)

        self.out(f"== namespace {s.namespace}")
        self._apply_reporting(manifests.namespace(s))

        self.out(f"== operators ({mode} serving mode)")
        Installer(self.c, self.kube, p, s, self.out, self.clock).all()

        self.out(f"== image {s.image}")
        self._image(s.image, base=base, base_image=base_image)

        self.out(f"== volume {s.volume} ({s.storage_class})")
        self._apply_reporting(
            manifests.pvc(s), note="it binds when its first pod mounts it: WaitForFirstConsumer"
        )

        self.out("== dataset")
        self._ingest(s, source)
        if not self.dry:
            self.wd.update_state(
                up=True,
                runtime=p.name,
                cluster=p.cluster,
                context=p.context,
                namespace=s.namespace,
                image=s.image,
                source_dir=source,
            )
        self.out(f"{p.name} cluster {p.cluster} ready; next: invoke train-all")
        return 0

    def _check_ingress_port(self) -> None:
        """The new cluster maps a host port to its ingress: it must be free (k3d/kind fail
        late and obscurely with "port is already allocated")."""
        if self.provider.name == "minikube":
            return  # reached on `minikube ip`, no host port
        from runtime.procs import port_is_free

        port = self.provider.ingress_port
        free = self._port_free or (lambda p: port_is_free(p, "0.0.0.0"))
        if not free(port):
            message = (
                f"host port {port} is in use, and the new cluster's ingress needs it: stop "
                "what holds it (`invoke down` for a local model server), or pick another "
                "port with INVOKE_INGRESS_PORT=18080 (or ingress_port in invoke.yaml)"
            )
            if not self.dry:
                raise ClusterError(message)
            self.out(f"note (a real run would stop here): {message}")

    def _check_source_dir(self, source_dir: str | None) -> str | None:
        if not source_dir:
            return None
        path = Path(source_dir).expanduser().resolve()
        missing = [f for f in RAW_FILES if not (path / f).is_file()]
        if missing:
            raise ClusterError(
                f"--source-dir {path} lacks {', '.join(missing)}; it must hold the four "
                "Fashion-MNIST .gz files (Debian's dataset-fashion-mnist has them in "
                "/usr/share/datasets/fashion-mnist)"
            )
        return str(path)

    def _run_preflight(self, mode: str) -> None:
        if self._preflight is None:
            from k8s.preflight import preflight as run_preflight
        else:
            run_preflight = self._preflight
        result = run_preflight(self.provider.name, mode, docker=self.docker)
        for name, version in sorted(getattr(result, "versions", {}).items()):
            self.out(f"found {name} {version}")
        for note in getattr(result, "notes", []):
            self.out(f"note: {note}")
        problems = list(getattr(result, "problems", []))
        if problems and not self.dry:
            raise ClusterError(
                "preflight failed, nothing was created:\n  - " + "\n  - ".join(problems)
            )
        for problem in problems:
            self.out(f"preflight (a real run would stop here): {problem}")

    def _apply_reporting(self, obj: dict[str, Any], note: str = "") -> None:
        meta = obj["metadata"]
        existing = self.kube.get(
            obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")
        )
        self._apply(obj)
        what = f"{obj['kind']} {meta['name']}"
        if self.dry:
            return  # DryKube printed it
        if existing is not None:
            self.out(f"{what}: already exists")
        else:
            self.out(f"{what}: created" + (f" ({note})" if note else ""))

    def _image(self, image: str, *, base: str | None, base_image: str | None) -> None:
        built = self.c.run(
            f"{self.docker} image inspect --format '{{{{.Id}}}}' {image}",
            hide=True,
            warn=True,
            dry=False,
        ).ok
        if built:
            self.out(f"image {image}: already built")
        else:
            from runtime.image import ImageError, build

            try:
                build(
                    self.c,
                    self.root,
                    self.wd.root / "build",
                    base=base,
                    base_image=base_image,
                    docker="" if self.docker == "docker" else self.docker,
                    out=self.out,
                )
            except ImageError as e:
                raise ClusterError(str(e)) from e
            if not self.dry:
                self.wd.update_state(built_images=[image])
        if self.provider.has_image(self.c, image):
            self.out(f"image {image}: already imported into the cluster")
        else:
            self.out(f"image {image}: importing into the cluster's node")
            self.provider.import_image(self.c, image, self.wd.root)

    def _ingest(self, s: Settings, source: str | None) -> None:
        job = self._get("batch/v1", "Job", INGEST_JOB)
        if is_true(job, "Complete"):
            self.out(f"dataset: already prepared on {s.volume} (Job {INGEST_JOB} completed)")
            return
        in_volume = None
        if source:
            in_volume = f"{s.mount_path}/{RAW_DIR}"
            self._copy_into_volume(s, source, in_volume)
        else:
            self.out(
                "dataset: the ingest Job downloads Fashion-MNIST (the cluster needs internet; "
                "offline: `invoke up --source-dir DIR`)"
            )
        logs = self._run_job(manifests.ingest_job(s, in_volume), 1800, "ingest")
        if self.dry:
            return
        for line in logs.splitlines()[-5:]:
            self.out(f"  ingest: {line}")
        self.out(f"dataset: prepared on {s.volume}")

    @contextmanager
    def _loader(self, s: Settings, timeout: float) -> Iterator[Callable[[str], str]]:
        """A short-lived pod that mounts the PVC, for `kubectl cp` in or out of it; yields
        ``kubectl -n <ns> ...`` for commands against it, and always deletes it."""
        self._delete_and_wait("v1", "Pod", LOADER_POD)
        try:
            self._apply(manifests.loader_pod(s))
            if not self.dry:
                self._wait_pod_running(LOADER_POD, timeout=timeout)
            ns = shlex.quote(self.namespace)
            yield lambda args: self.provider.kubectl(f"-n {ns} {args}")
        finally:
            self.kube.delete("v1", "Pod", LOADER_POD, self.namespace)

    def _copy_into_volume(self, s: Settings, source: str, target: str) -> None:
        """Offline clusters: a loader pod mounts the PVC; kubectl cp puts the files in."""
        self.out(f"dataset: copying {source} into {s.volume}:{RAW_DIR} through a loader pod")
        with self._loader(s, timeout=300) as k:
            self.c.run(k(f"exec {LOADER_POD} -- mkdir -p {target}"))
            for name in RAW_FILES:
                src = shlex.quote(str(Path(source) / name))
                self.c.run(k(f"cp {src} {LOADER_POD}:{target}/{name}"))

    def _wait_pod_running(self, name: str, timeout: float) -> None:
        deadline = self.clock.monotonic() + timeout
        while True:
            pod = self._get("v1", "Pod", name) or {}
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Running":
                return
            if phase in ("Failed", "Succeeded") or self.clock.monotonic() > deadline:
                events = self.kube.events(self.namespace, name)
                last = "; ".join(f"{e.get('reason')}: {e.get('message')}" for e in events[-5:])
                raise ClusterError(
                    f"pod {name} is {phase or 'not created'} after {timeout:.0f} s"
                    + (f" (events: {last})" if last else "")
                    + f"; check `kubectl --context {self.provider.context} -n {self.namespace} "
                    f"describe pod {name}`"
                )
            self.clock.sleep(2)

    # ------------------------------------------------------------------ train
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
        state = self._require_up()
        unknown = [m for m in models if m not in MODEL_TYPES]
        if unknown:
            raise ClusterError(
                f"unknown model type {unknown[0]!r}; valid: {', '.join(MODEL_TYPES)}"
            )
        if parallel is not None and parallel < 1:
            raise ClusterError(f"--parallel must be at least 1, got {parallel}")
        s = self.settings(
            workers=workers,
            profile=profile,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            max_restarts=max_restarts,
            gpus_per_worker=gpus_per_worker,
            train_deadline_s=deadline_s,
        )
        self._check_image(state, s)
        self.out("== dataset")
        self._ingest(s, state.get("source_dir"))
        jobs = [manifests.tfjob(s, m) for m in models]
        names = [j["metadata"]["name"] for j in jobs]
        self.out(f"== training {len(jobs)} TFJob(s) x {s.workers} worker(s), profile {profile}")
        for job in jobs:
            name = job["metadata"]["name"]
            old = self._get("kubeflow.org/v1", "TFJob", name)
            if old is not None:
                old_state = tfjob_state(old)
                self.out(
                    f"TFJob {name}: replacing the "
                    + (
                        f"{old_state.lower()} job"
                        if old_state in TERMINAL
                        else "running job (its workers save the step they reached; resumed there)"
                    )
                )
                self._delete_and_wait("kubeflow.org/v1", "TFJob", name)
        if parallel is None:
            parallel = self._jobs_that_fit(s, len(jobs))
        waves = [jobs[i : i + parallel] for i in range(0, len(jobs), parallel)]
        if len(waves) > 1:
            self.out(f"{parallel} job(s) at a time, {len(waves)} waves")
        results: dict[str, str] = {}
        started = self._train_started = self.clock.monotonic()
        self._shown: dict[str, Any] = {}
        for wave in waves:
            for job in wave:  # submitted together: they run in parallel
                self._apply(job)
                self.out(f"TFJob {job['metadata']['name']}: submitted")
            if self.dry:
                continue
            try:
                results |= wait_tfjobs(
                    self.kube,
                    self.namespace,
                    [j["metadata"]["name"] for j in wave],
                    timeout=deadline_s + 120,
                    max_restarts=max_restarts,
                    clock=self.clock,
                    out=self.out,
                    on_update=self._show_jobs,
                )
            except WaitError as e:
                raise ClusterError(f"training did not finish: {e}") from e
        if self.dry:
            return 0
        self.out(f"training finished in {self.clock.monotonic() - started:.0f} s")
        # wait_tfjobs printed each failed job's report (conditions, events, log tails).
        failed = [n for n in names if results.get(n) != "Succeeded"]
        self.wd.update_state(trained=sorted(set(models) | set(state.get("trained") or [])))
        done = [m for m, n in zip(models, names, strict=True) if results.get(n) == "Succeeded"]
        if done:
            self._fetch_training_results(s, done)
        if failed:
            model = failed[0].removeprefix("train-").replace("-", "_")
            self.out(
                f"next: fix the cause above, then `invoke train --model-type {model}` "
                "(it resumes from its last saved step)"
            )
            return 1
        self.out("next: invoke deploy")
        return 0

    def _jobs_that_fit(self, s: Settings, jobs: int) -> int:
        """All jobs at once, unless the node's allocatable CPU/memory cannot hold their
        workers next to the stack (k8s.capacity): then as many as fit (at least one)."""
        nodes = self.kube.list("v1", "Node")
        node = capacity.node_allocatable(nodes[0]) if len(nodes) == 1 else None
        if node is None:
            return jobs
        fit = capacity.jobs_at_once(node, s, jobs)
        if fit < jobs:
            self.out(
                f"the node offers pods {node}; {jobs} TFJobs at once need "
                f"{capacity.requirement(s, jobs)} of requests: running {max(fit, 1)} at a time"
                + ("" if fit else " (even one may not fit: its workers may stay Pending)")
            )
        return max(fit, 1)

    def _fetch_training_results(self, s: Settings, models: Sequence[str]) -> None:
        """Copy each candidate's metrics.json off the PVC (through the loader pod) for the
        accuracy table and the training-curves chart. Best effort: training succeeded."""
        local = self.wd.root / "cluster-volume"
        try:
            with self._loader(s, timeout=180) as k:
                for model in models:
                    target = local / "candidates" / model / "metrics.json"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    src = f"{LOADER_POD}:{s.mount_path}/candidates/{model}/metrics.json"
                    self.c.run(k(f"cp {src} {shlex.quote(str(target))}"), hide=True)
        except (DistmlError, OSError) as e:
            self.out(f"note: could not copy the training metrics off the volume ({e})")
            return
        rows = [("model", "test acc (last epoch)", "epochs")]
        for model in models:
            path = local / "candidates" / model / "metrics.json"
            if path.is_file():
                metrics = json.loads(path.read_text())
                acc = (metrics.get("final") or {}).get("val_accuracy")
                rows.append(
                    (
                        model,
                        "-" if acc is None else f"{acc:.4f}",
                        str(len(metrics.get("history") or [])),
                    )
                )
        width = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            self.out("  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)).rstrip())
        from runtime.charts import training_curves

        chart = training_curves(local, self.wd.reports / "training-curves.png")
        if chart:
            self.out(f"training curves: {chart}")

    def _check_image(self, state: dict[str, Any], s: Settings) -> None:
        """Pods run the image `up` imported: refuse to run code the cluster does not have."""
        if state.get("image") and state["image"] != s.image and not self.dry:
            raise ClusterError(
                f"the code changed since `invoke up` imported {state['image']} (now "
                f"{s.image}); run `invoke up` again to build and import it"
            )

    def _show_jobs(self, rows: Sequence[Any]) -> None:
        """Live status: a line for each job whose state or replica counts changed."""
        elapsed = self.clock.monotonic() - self._train_started
        for r in rows:
            if self._shown.get(r.name) == r:
                continue
            self._shown[r.name] = r
            self.out(
                f"[{elapsed:6.0f}s] {r.name:<22} {r.state:<10} workers: active {r.active}, "
                f"succeeded {r.succeeded}, failed {r.failed}; restarts {r.restarts}"
            )

    # ------------------------------------------------------------------ deploy
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
        state = self._require_up()
        if predictor not in PREDICTORS:
            raise ClusterError(f"--predictor must be one of {', '.join(PREDICTORS)}")
        if not 0.0 <= min_accuracy <= 1.0:
            raise ClusterError(f"--min-accuracy is a fraction between 0 and 1, got {min_accuracy}")
        s = self.settings(
            predictor=predictor,
            target=target,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            container_concurrency=container_concurrency,
            request_logger=request_logger,
        )
        self._check_image(state, s)
        self.out("== selection")
        self._select(s, manifests.selection_job(s, min_accuracy=min_accuracy, force=force))
        self.out(f"== serving ({s.serving_mode} mode, {predictor} predictor)")
        if s.request_logger:
            for obj in manifests.message_dumper(s):
                self._apply_reporting(obj)
        if predictor == "kserve":
            self._apply_reporting(manifests.serving_runtime(s))
        isvc = manifests.inference_service(s)
        existed = self._get(isvc["apiVersion"], "InferenceService", s.service) is not None
        self._apply(isvc)
        self.out(
            f"InferenceService {s.service}: "
            + (
                "applied"
                if self.dry
                else "updated in place (the predictor polls /mnt/models and loads the new version "
                "by itself: no new revision)"
                if existed
                else "created"
            )
        )
        if s.serving_mode == "standard":
            self._apply_reporting(manifests.ingress_service(s))
        if self.dry:
            return 0
        try:
            url = wait_isvc_ready(
                self.kube,
                self.namespace,
                s.service,
                timeout=timeout,
                clock=self.clock,
                out=self.out,
            )
        except WaitError as e:
            raise ClusterError(f"the InferenceService did not become Ready: {e}") from e
        self.wd.update_state(
            deployed=True,
            predictor=predictor,
            target=s.target,
            max_replicas=s.max_replicas,
            isvc_url=url,
        )
        self._print_access(s, url)
        return 0

    def _select(self, s: Settings, job: dict[str, Any]) -> None:
        logs = self._run_job(job, 1200, "selection")
        for line in logs.splitlines()[-12:]:
            self.out(f"  select: {line}")

    def _endpoint(self, s: Settings, isvc_url: str | None) -> tuple[str, str | None]:
        """(url to send to, Host header): through the ingress, never a port-forward."""
        base = self.provider.ingress_url(self.c)
        if s.serving_mode == "knative":
            return base, urlparse(isvc_url or "").netloc or None
        return base, None

    def _print_access(self, s: Settings, isvc_url: str) -> None:
        from runtime.local import write_sample_request

        base, host = self._endpoint(s, isvc_url)
        sample = write_sample_request(
            self.wd.root, self.wd.load_state().get("source_dir"), self.out, synthetic_ok=True
        )
        self.out(f"serving {s.service} at {isvc_url}")
        self.out(f"through the ingress: {base}" + (f" with Host: {host}" if host else ""))
        header = f"-H 'Host: {host}' " if host else ""
        self.out(
            "try it:\n  curl -s " + header + f"-H 'Content-Type: application/json' -d @{sample} "
            f"{base}/v1/models/{s.service}:predict"
        )

    def rollback(self) -> int:
        self._require_up()
        s = self.settings()
        self.out("== rollback")
        self._select(s, manifests.selection_job(s, min_accuracy=0.0, force=False, rollback=True))
        self.out("the predictor loads the republished version by itself (it polls /mnt/models)")
        return 0

    # ------------------------------------------------------------------ loadtest
    def loadtest(
        self,
        *,
        concurrency: int = 5,
        duration: str = "30s",
        spawn_rate: float | None = None,
        max_failure_ratio: float = 0.0,
        expect_scale_out: bool | None = None,
    ) -> int:
        state = self._require_up()
        if expect_scale_out is None:
            expect_scale_out = True
        from loadtest.plan import check_flags
        from loadtest.run import run_loadtest
        from loadtest.summary import check

        try:
            check_flags(concurrency, duration, max_failure_ratio)
        except ValueError as e:
            raise ClusterError(str(e)) from e
        s = self.settings(target=state.get("target"), max_replicas=state.get("max_replicas"))
        isvc = self._get("serving.kserve.io/v1beta1", "InferenceService", s.service)
        if isvc is None and not self.dry:
            raise ClusterError(f"no InferenceService {s.service}; run `invoke deploy` first")
        isvc_url = ((isvc or {}).get("status") or {}).get("url")
        base, host = self._endpoint(s, isvc_url)
        expected = (
            expected_replicas(concurrency, s.target, s.max_replicas)
            if s.serving_mode == "knative"
            else None
        )
        self.out(
            f"load: {concurrency} users, no wait time, through {base}"
            + (f" (Host: {host})" if host else "")
            + (
                f"; the autoscaler should reach {expected} ready replicas "
                f"(ceil({concurrency} / ({s.target} x 70%)), max {s.max_replicas})"
                if expected
                else (
                    f"; standard mode scales on CPU (an HPA at {manifests.HPA_CPU_TARGET_PERCENT}% "
                    f"of each predictor's CPU request): it decides {HPA_SYNC_S}-"
                    f"{HPA_SYNC_S + METRIC_RESOLUTION_S} s into the load, and its new pods "
                    "turn ready after that"
                )
            )
        )
        if self.dry:
            return 0
        from runtime.local import write_sample_request

        counter = ReplicaCounter(self.kube, self.namespace, s.service)
        out_dir = self.wd.reports / "loadtest"
        summary = run_loadtest(
            base,
            s.service,
            write_sample_request(
                self.wd.root, state.get("source_dir"), self.out, synthetic_ok=True
            ),
            out_dir,
            concurrency=concurrency,
            duration=duration,
            spawn_rate=spawn_rate,
            host_header=host,
            replica_sampler=counter,
            expected_replicas=expected,
            log=self.out,
            settle_s=SETTLE_S[s.serving_mode] if expect_scale_out else 0.0,
        )
        peak = summary.get("replicas_peak")
        self.out(
            f"{summary['requests']} requests, {summary['failures']} failed, "
            f"{summary['rps'] or 0:.1f} req/s; ready replicas {summary.get('replicas_start')} "
            f"-> peak {peak}" + (f" (expected {expected})" if expected else "")
        )
        pending = counter.pending()
        if pending:
            self.out(
                f"{len(pending)} predictor pod(s) stayed Pending: the cluster ran out of CPU "
                "for more replicas (lower --max-replicas, or give Docker more CPUs):"
            )
            for name, why in pending:
                self.out(f"  {name}: {why or 'Pending'}")
        self.out(f"results: {out_dir} (summary.json, chart.png, Locust CSVs)")
        self.wd.update_state(last_loadtest=str(out_dir / "summary.json"))
        problems = check(
            summary, max_failure_ratio=max_failure_ratio, expect_scale_out=expect_scale_out
        )
        for p in problems:
            self.out(f"error: {p}")
        return 1 if problems else 0

    # ------------------------------------------------------------------ status / down
    def status(self) -> int:
        state = self.wd.load_state()
        p = self.provider
        rows = [("item", "state")]
        exists = p.exists(self.c)
        rows.append(
            (
                "cluster",
                f"{p.cluster} ({p.name}, context {p.context}): "
                + ("running" if exists else "not found (run `invoke up`)"),
            )
        )
        if exists:
            components = [
                ("training operator", "kubeflow", "training-operator"),
                ("cert-manager", "cert-manager", "cert-manager-webhook"),
                ("kserve", "kserve", "kserve-controller-manager"),
            ]
            if state.get("serving_mode", "knative") == "knative":
                components[2:2] = [
                    ("istio", "istio-system", "istiod"),
                    ("knative serving", "knative-serving", "controller"),
                ]
            for label, ns, dep in components:
                try:
                    ok = deployment_available(self.kube, ns, dep)
                except KubeError as e:
                    rows.append(("cluster API", f"not reachable: {e}"))
                    break
                rows.append((label, "available" if ok else "not installed / not available"))
            else:
                for job in self.kube.list("kubeflow.org/v1", "TFJob", self.namespace):
                    workers = ((job.get("status") or {}).get("replicaStatuses") or {}).get(
                        "Worker", {}
                    )
                    rows.append(
                        (
                            f"TFJob {job['metadata']['name']}",
                            f"{tfjob_state(job)}; workers "
                            + ", ".join(f"{k} {v}" for k, v in sorted(workers.items())),
                        )
                    )
                isvc = self._get("serving.kserve.io/v1beta1", "InferenceService", self.service)
                if isvc is None:
                    rows.append(("InferenceService", "not deployed"))
                else:
                    ready = is_true(isvc, "Ready")
                    url = (isvc.get("status") or {}).get("url", "-")
                    replicas = ReplicaCounter(self.kube, self.namespace, self.service)()
                    rows.append(
                        (
                            f"InferenceService {self.service}",
                            f"{'Ready' if ready else 'not ready'}, {url}, "
                            f"{replicas} ready replica(s)",
                        )
                    )
        last = state.get("last_loadtest")
        if last and Path(last).is_file():
            s = json.loads(Path(last).read_text())
            rows.append(
                (
                    "last load test",
                    f"{s['requests']} requests, {s['failures']} failed, {s['rps'] or 0:.1f} "
                    f"req/s, replicas peak {s.get('replicas_peak')}",
                )
            )
        width = max(len(r[0]) for r in rows)
        for item, value in rows:
            self.out(f"{item.ljust(width)}  {value}")
        return 0

    def down(self, *, purge: bool = False, keep_cluster: bool = False) -> int:
        p = self.provider
        state = self.wd.load_state()
        if keep_cluster:
            self._delete_objects()
        elif p.exists(self.c):
            self.out(f"deleting cluster {p.cluster} ({p.name}) and everything in it")
            p.delete(self.c)
        else:
            self.out(f"cluster {p.cluster}: not found, nothing to delete")
        if purge:
            for image in state.get("built_images") or []:
                self.c.run(f"{self.docker} image rm {image}", warn=True)
                self.out(f"removed image {image}")
            if self.wd.exists():
                if not self.dry:
                    shutil.rmtree(self.wd.root)
                self.out(f"removed {self.wd.root}")
            elif self.wd.root.exists():
                raise ClusterError(
                    f"{self.wd.root} has no {MARKER} marker, so it was not made by distml; "
                    "not deleting it"
                )
        elif self.wd.exists() and not self.dry:
            # The volume is gone either way: the next task needs `invoke up` (quick when the
            # cluster and its operators were kept).
            self.wd.update_state(
                up=False,
                deployed=False,
                serving_mode=state.get("serving_mode") if keep_cluster else None,
            )
        return 0

    def _delete_objects(self) -> None:
        """--keep-cluster: delete what distml applied, keep the cluster and operators."""
        s = self.settings()
        ns = self.namespace
        gone = []
        for api, kind in (
            ("serving.kserve.io/v1beta1", "InferenceService"),
            ("serving.kserve.io/v1alpha1", "ServingRuntime"),
            ("kubeflow.org/v1", "TFJob"),
            ("batch/v1", "Job"),
            ("v1", "Pod"),
            ("apps/v1", "Deployment"),
            ("v1", "Service"),
        ):
            for obj in self.kube.list(api, kind, ns, label_selector=manifests.selector()):
                name = obj["metadata"]["name"]
                if self.kube.delete(api, kind, name, ns):
                    gone.append(f"{kind} {name}")
        if self._get("v1", "PersistentVolumeClaim", s.volume) is not None:
            # Waited for: an `up` right after must not re-apply a claim that is going away.
            self._delete_and_wait("v1", "PersistentVolumeClaim", s.volume, timeout=300)
            gone.append(f"PersistentVolumeClaim {s.volume} (its data with it)")
        self.out("deleted: " + (", ".join(gone) if gone else "nothing (none found)"))
        self.out(
            f"kept the cluster {self.provider.cluster} and its operators; `invoke up` makes "
            "the volume and dataset again"
        )

    # ------------------------------------------------------------------ render
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
        import yaml

        s = self.settings(serving_mode=serving_mode, predictor=predictor, **changes)
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.glob("[0-9][0-9]-*.yaml"):
            old.unlink()
        written = []
        objects = manifests.cluster_objects(s, models=list(models), source_dir=source_dir)
        for i, (step, obj) in enumerate(objects, start=1):
            name = f"{i:02d}-{step}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
            path = out_dir / name
            path.write_text(yaml.safe_dump(obj, sort_keys=False))
            written.append(path)
        ops = out_dir / "00-operators.sh"
        script = self._operator_script(s)
        if hasattr(self.provider, "config_yaml"):  # kind: the cluster config the script uses
            config = out_dir / "kind-config.yaml"
            config.write_text(self.provider.config_yaml())
            script = script.replace(
                shlex.quote(str(self.wd.root / "kind-config.yaml")), config.name
            )
            written.append(config)
        ops.write_text(script)
        written.insert(0, ops)
        return written

    def _operator_script(self, s: Settings) -> str:
        """The cluster + operator install commands `invoke up` runs on an empty machine."""
        from invoke import Config, Context

        commands: list[str] = []

        class Recorder(Context):
            def run(self, command: str, **kwargs: Any) -> Any:
                from invoke import Result

                if kwargs.get("hide"):  # read-only queries: an empty machine has nothing
                    return Result(exited=1)
                commands.append(command)
                return Result()

        import yaml

        kubectl = self.provider.kubectl

        class RecordingKube(DryKube):
            """Objects the installer applies itself (the kserve Namespace) become commands."""

            def apply(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
                if not dry_run:
                    body = yaml.safe_dump(obj, sort_keys=False).rstrip()
                    commands.append(f"{kubectl('apply --server-side -f -')} <<'EOF'\n{body}\nEOF")
                return obj

        c = Recorder(Config(overrides={"run": {"dry": True}}))
        self.provider.create(c, self.wd.root)
        quiet = lambda _: None  # noqa: E731
        Installer(c, RecordingKube(quiet), self.provider, s, quiet, self.clock).all()
        header = (
            "#!/bin/sh\n# What `invoke up` runs on an empty machine before applying the "
            f"numbered manifests ({self.provider.name}, {s.serving_mode} mode).\n"
            f"# Versions: k8s/versions.py. Waits between steps are omitted here.\nset -e\n"
        )
        return header + "\n".join(commands) + "\n"
