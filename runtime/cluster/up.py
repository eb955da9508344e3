"""`invoke up` on a cluster: preflight, the cluster, the namespace, the operators, the
image, the volume and the dataset, each step skipped when already done."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from k8s import manifests
from k8s.client.objects import JOB_API, is_true
from k8s.client.ownership import new_instance
from k8s.install import versions
from k8s.install.operators import Installer, components
from k8s.monitoring import alertmanager, prometheus, stack
from k8s.providers.lab import Minikube
from k8s.providers.settings import SERVING_MODES, Settings
from k8s.waits.cluster_poll import WaitError
from k8s.waits.workload_waits import wait_deployments_available
from ml.contract import RAW_FILES, serving_metrics
from runtime.cluster import existing_up, lab_owner
from runtime.cluster.apply import apply_reporting, run_job
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.cluster.volume import Volume

INGEST_TIMEOUT_S = 1800
# distml's Prometheus: pulling its image on a slow link, then its readiness probe.
PROMETHEUS_TIMEOUT_S = 300
COPY_IN_TIMEOUT_S = 300


def up(
    cx: ClusterContext,
    *,
    source_dir: str | None,
    serving_mode: str | None,
    base: str | None,
    base_image: str | None,
    preflight: Callable[..., Any] | None,
    port_free: Callable[[int], bool] | None,
    with_argo: bool = False,
    with_monitoring: bool = False,
    install_operators: bool = False,
    storage_class: str | None = None,
) -> int:
    mode = _serving_mode(cx, serving_mode)
    source = _check_source_dir(source_dir)
    state = cx.wd.state()
    # Argo and monitoring, once asked for, stay: a later plain `up` checks them too.
    argo = with_argo or state.argo
    monitoring = with_monitoring or state.monitoring
    _run_preflight(cx, mode, preflight, with_argo=argo, with_monitoring=monitoring)
    if not cx.dry:
        cx.wd.create()
        # Recorded before the install: `down --keep-cluster` removes a half-done one too.
        chosen = {"argo": argo, "monitoring": monitoring}
        cx.wd.update_state(serving_mode=mode, **{k: True for k, on in chosen.items() if on})
        if not cx.wd.state().instance:  # kept for the work dir's life: down selects on it
            cx.wd.update_state(instance=new_instance())
    s = cx.settings(serving_mode=mode, with_argo=argo, with_monitoring=monitoring)
    p = cx.provider
    existing = not s.owns_cluster

    installer: Installer | None = None  # on an existing cluster: surveyed before any write
    if existing:
        found = existing_up.reach(cx)
        existing_up.require_registry(cx, s)
        existing_up.claim(cx, s, found)  # nothing is written before it
        # What is missing or blocked is said before anything is made, the namespace too
        # (the install needs it: the webhooks are probed with dry runs in it).
        installer = _installer(cx, s, install=install_operators)
        installer.survey(components(p.name, s.serving_mode, s.with_argo, s.with_monitoring))
    else:
        _cluster(cx, port_free)
    _namespace(cx, s)
    if not existing:
        _installer(cx, s, install=True).all()
    elif installer is not None and install_operators:
        installer.all(surveyed=True)
    if s.with_monitoring:
        _monitoring(cx, s)
    cx.out(f"== image {s.image}")
    s = replace(s, image=_image(cx, s, base=base, base_image=base_image))
    s = _volume(cx, s, storage_class)
    cx.out("== dataset")
    ingest(cx, s, source)
    if not cx.dry:
        cx.wd.update_state(up=True, runtime=p.name, image=s.image, source_dir=source)
    where = f"context {p.context}" if existing else f"{p.name} cluster {p.cluster}"
    cx.out(f"{where} ready; next: invoke train-all")
    return 0


def _namespace(cx: ClusterContext, s: Settings) -> None:
    cx.out(f"== namespace {s.namespace}")
    cx.check_namespace()
    if s.owns_cluster:
        apply_reporting(cx, manifests.namespace(s))
    else:
        existing_up.namespace(cx, s)
        existing_up.check_pull_secret(cx, s)


def _installer(cx: ClusterContext, s: Settings, *, install: bool) -> Installer:
    argo = ", with Argo Workflows" if s.with_argo else ""
    keda = (
        ", with KEDA"
        if "keda" in components(s.provider, s.serving_mode, False, s.with_monitoring)
        else ""
    )
    cx.out(f"== operators ({s.serving_mode} serving mode{argo}{keda})")
    return Installer(cx.c, cx.kube, cx.provider, s, cx.out, cx.clock, install_missing=install)


def _monitoring(cx: ClusterContext, s: Settings) -> None:
    """distml's own Prometheus in its namespace (k8s.monitoring.stack), Ready; not when
    ``cluster.prometheus`` names the user's."""
    if s.prometheus:
        cx.out(f"== monitoring: your Prometheus {s.prometheus} ({prometheus.SETTING})")
        if s.alert_webhook:
            cx.out(
                f"note: {alertmanager.SETTING} is for distml's own Alertmanager: your "
                "Prometheus's alerts go where its Alertmanager routes them (the rules: "
                "`invoke render --prometheus-operator`, or k8s/monitoring/distml-rules.yaml)"
            )
        return
    cx.out(
        f"== monitoring (Prometheus {versions.PROMETHEUS_VERSION} and Alertmanager "
        f"{versions.ALERTMANAGER_VERSION} in {s.namespace})"
    )
    for obj in stack.prometheus_objects(s):
        apply_reporting(cx, obj)
    if cx.dry:
        return
    try:
        wait_deployments_available(
            cx.kube,
            s.namespace,
            names=[stack.NAME],
            timeout=PROMETHEUS_TIMEOUT_S,
            clock=cx.clock,
            out=cx.out,
            kubectl=cx.provider.kubectl,
        )
    except WaitError as e:
        raise ClusterError(f"distml's Prometheus did not become ready: {e}") from e
    ref = prometheus.ref(s)
    cx.out(
        f"Prometheus: ready at {ref.address if ref else '?'}; it scrapes the predictor pods "
        f"every {serving_metrics.SCRAPE_INTERVAL_S} s (`invoke status` reads it)"
    )
    where = s.alert_webhook or f"nowhere ({alertmanager.SETTING} is not set)"
    cx.out(f"Alertmanager: beside it, on its loopback; alerts are sent to {where}")
    every = alertmanager.WATCHDOG_REPEAT
    cx.out(
        f"watchdog: sent to {s.watchdog_webhook} every {every} while alerting works"
        if s.watchdog_webhook
        else f"watchdog: not sent ({alertmanager.WATCHDOG_SETTING} is not set): nothing "
        "outside the cluster would notice if alerting stopped"
    )


def _volume(cx: ClusterContext, s: Settings, storage_class: str | None) -> Settings:
    """The PVC (its class and access mode chosen first on an existing cluster)."""
    if not s.owns_cluster:
        cx.out(f"== volume {s.volume}")
        s = existing_up.storage(cx, s, storage_class)
    else:
        if storage_class:
            s = replace(s, storage_class_name=storage_class)
            if not cx.dry:
                cx.wd.update_state(storage_class=storage_class)
        cx.out(f"== volume {s.volume} ({s.storage_class})")
    apply_reporting(
        cx, manifests.pvc(s), note="it binds when its first pod mounts it: WaitForFirstConsumer"
    )
    claim = None if cx.dry else cx.get("v1", "PersistentVolumeClaim", s.volume)
    if claim is not None:  # `down` deletes this claim and no other of the name
        cx.wd.update_state(volume_uid=claim["metadata"].get("uid"))
    return s


def _serving_mode(cx: ClusterContext, requested: str | None) -> str:
    """The mode asked for (else the one set up, else knative); a set-up cluster keeps its."""
    state = cx.wd.state()
    mode = requested or state.serving_mode or "knative"
    if mode not in SERVING_MODES:
        raise ClusterError(f"--serving-mode must be one of {', '.join(SERVING_MODES)}")
    if state.up and state.serving_mode not in (None, mode) and not cx.dry:
        raise ClusterError(
            f"this cluster was set up in {state.serving_mode} mode; switching modes "
            "needs a fresh cluster: `invoke down`, then `invoke up --serving-mode "
            f"{mode}`"
        )
    return mode


def _cluster(cx: ClusterContext, port_free: Callable[[int], bool] | None) -> None:
    p = cx.provider
    cx.out(f"== cluster {p.cluster} ({p.name}, context {p.context})")
    if p.exists(cx.c):
        lab_owner.check_reuse(cx)  # another work dir's (or nobody's) is refused
        cx.out(f"cluster {p.cluster}: already exists, reused")
        return
    _check_ingress_port(cx, port_free)
    cx.out(f"cluster {p.cluster}: creating (one node; the PVC is ReadWriteOnce)")
    p.create(cx.c, cx.wd.root)
    lab_owner.write(cx)  # this work dir made it: only its `down` deletes it


def _check_ingress_port(cx: ClusterContext, port_free: Callable[[int], bool] | None) -> None:
    """The new cluster maps a host port to its ingress: it must be free (k3d/kind fail
    late and obscurely with "port is already allocated")."""
    if cx.provider.name == "minikube":
        return  # reached on `minikube ip`, no host port
    from runtime.procs import port_is_free

    port = cx.provider.ingress_port
    free = port_free or (lambda p: port_is_free(p, "0.0.0.0"))
    if not free(port):
        message = (
            f"host port {port} is in use, and the new cluster's ingress needs it: stop "
            "what holds it (`invoke down` for a local model server), or pick another "
            "port with INVOKE_CLUSTER_INGRESS_PORT=18080 (or cluster.ingress_port in invoke.yaml)"
        )
        if not cx.dry:
            raise ClusterError(message)
        cx.out(f"note (a real run would stop here): {message}")


def _check_source_dir(source_dir: str | None) -> str | None:
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


def _run_preflight(
    cx: ClusterContext, mode: str, preflight: Callable[..., Any] | None, **extras: bool
) -> None:
    if preflight is None:
        from k8s.install.preflight import preflight as run_preflight
    else:
        run_preflight = preflight
    # minikube's own home, not ~/.minikube, even for `minikube version` (k8s.providers).
    p = cx.provider
    home = {"minikube_home": str(p.home)} if isinstance(p, Minikube) else {}
    kwargs: dict[str, Any] = {"docker": cx.docker, "cpu_requests": cx.cpu_requests, **home}
    kwargs.update(extras)  # what `up` adds to the stack, counted in its capacity check
    result = run_preflight(cx.provider.name, mode, **kwargs)
    for name, version in sorted(getattr(result, "versions", {}).items()):
        cx.out(f"found {name} {version}")
    for note in getattr(result, "notes", []):
        cx.out(f"note: {note}")
    problems = list(getattr(result, "problems", []))
    if problems and not cx.dry:
        raise ClusterError("preflight failed, nothing was created:\n  - " + "\n  - ".join(problems))
    for problem in problems:
        cx.out(f"preflight (a real run would stop here): {problem}")


def _image(cx: ClusterContext, s: Settings, *, base: str | None, base_image: str | None) -> str:
    """Build the project image unless Docker has it; import it unless the node has it (an
    existing cluster: push it to the registry its pods pull from). Return the name the
    pods run."""
    # distml:<hash>, as built (s.image may be pushed, and pinned to a digest)
    image = s.image.split("@", 1)[0].rsplit("/", 1)[-1]
    built = cx.c.run(
        f"{cx.docker} image inspect --format '{{{{.Id}}}}' {image}",
        hide=True,
        warn=True,
        dry=False,
    ).ok
    if built:
        cx.out(f"image {image}: already built")
    else:
        _build(cx, image, base=base, base_image=base_image)
    if not s.owns_cluster:
        return existing_up.push_image(cx, s, image)
    if cx.provider.has_image(cx.c, image):
        cx.out(f"image {image}: already imported into the cluster")
    else:
        cx.out(f"image {image}: importing into the cluster's node")
        cx.provider.import_image(cx.c, image, cx.wd.root)
    return s.image


def _build(cx: ClusterContext, image: str, *, base: str | None, base_image: str | None) -> None:
    from runtime.image import ImageError, build

    try:
        build(
            cx.c,
            cx.root,
            cx.wd.root / "build",
            base=base,
            base_image=base_image,
            docker="" if cx.docker == "docker" else cx.docker,
            out=cx.out,
        )
    except ImageError as e:
        raise ClusterError(str(e)) from e
    if not cx.dry:
        cx.wd.update_state(built_images=[image])


def ingest(cx: ClusterContext, s: Settings, source: str | None) -> None:
    """The dataset on the volume: the ingest Job, unless it already completed; with a
    ``source`` folder (offline clusters) its files are copied in first."""
    job = cx.get(JOB_API, "Job", manifests.INGEST_JOB)
    if is_true(job, "Complete"):
        cx.out(f"dataset: already prepared on {s.volume} (Job {manifests.INGEST_JOB} completed)")
        return
    in_volume = None
    if source:
        in_volume = manifests.raw_data_dir(s)
        cx.out(
            f"dataset: copying {source} into {s.volume}:{manifests.RAW_DATA_SUBDIR} "
            "through a loader pod"
        )
        files = [Path(source) / name for name in RAW_FILES]
        Volume(cx, s).copy_in(files, in_volume, timeout=COPY_IN_TIMEOUT_S)
    else:
        cx.out(
            "dataset: the ingest Job downloads Fashion-MNIST (the cluster needs internet; "
            "offline: `invoke up --source-dir DIR`)"
        )
    logs = run_job(cx, manifests.ingest_job(s, in_volume), INGEST_TIMEOUT_S, "ingest")
    if cx.dry:
        return
    for line in logs.splitlines()[-5:]:
        cx.out(f"  ingest: {line}")
    cx.out(f"dataset: prepared on {s.volume}")
