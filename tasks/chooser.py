"""Which runtime a task runs on (one line says which and why), and the work dir it uses:
what every task shares before it builds its request."""

from __future__ import annotations

from pathlib import Path

from invoke import Exit

from common.errors import DistmlError
from k8s.providers.settings import (
    CLUSTER_RUNTIMES,
    CPU_REQUEST_SETTINGS,
    EXISTING,
    MIRROR_SETTING,
    Settings,
    default_namespace,
    with_cpu_requests,
)
from ml import contract
from runtime.cli import cluster_config as _cluster_config
from runtime.cli import service_name as _service

ROOT = Path(__file__).resolve().parents[1]
MODEL_HELP = ", ".join(contract.MODEL_TYPES)
RUNTIME_HELP = (
    "auto (default: k3d when Docker + k3d are there, else local), local, k3d, kind, "
    "minikube, existing (a cluster distml did not create: a kubeconfig context)"
)


def workdir(c):
    from runtime.workdir import Workdir

    path = Path(str(c.config.workdir)).expanduser()
    return Workdir.at(path if path.is_absolute() else ROOT / path)


def runtime(c, requested, *, for_up=False, for_down=False, context=None):
    """Pick the runtime (one line says which and why) and return its implementation."""
    from runtime import select_runtime

    wd = workdir(c)
    _where(c, wd, for_up)
    requested = requested or str(c.config.runtime)
    state = wd.state()
    try:
        if requested == "auto" and state.runtime:
            # Never a silent switch: a plain `up` keeps the runtime the last one set up.
            name, why = state.runtime, "the runtime `invoke up` prepared"
        else:
            name, why = select_runtime(requested)
    except DistmlError as e:
        raise Exit(f"error: {e}", code=2) from e
    _no_switch(state, name, for_up)
    print(f"runtime: {name} ({why})", flush=True)
    if name in CLUSTER_RUNTIMES:
        return cluster_runtime(c, name, wd, for_up=for_up, for_down=for_down, context=context)
    from runtime.local import LocalRuntime

    return LocalRuntime(wd, service=_service(c), out=out, dry=bool(c.config.run.dry))


def _where(c, wd, for_up):
    """A copied work dir is refused (its record is another's); a copy's `up` makes it a
    new work dir; `up` records where a work dir lives (runtime.workdir.origin)."""
    from runtime.workdir import origin as identity

    if for_up and not c.config.run.dry:
        identity.renew(wd, out)
        identity.stamp(wd)
        return
    try:
        identity.check(wd)
    except DistmlError as e:
        raise Exit(f"error: {e}", code=1) from e


def _no_switch(state, name, for_up):
    """`up` on another runtime than the one a work dir is set up on would orphan the
    record of the first (its cluster, its objects): `down` there first."""
    if not (for_up and state.runtime and state.runtime != name):
        return
    if state.runtime not in CLUSTER_RUNTIMES or not (state.up or state.context):
        return
    where = f"context {state.context}" if state.context else f"its {state.runtime} cluster"
    raise Exit(
        f"error: this work dir is set up on the {state.runtime} runtime ({where}); `invoke "
        f"up --runtime {name}` would leave that record behind. Run `invoke down` first (or "
        "`invoke down --forget` if that cluster is gone), or use another work dir "
        "(INVOKE_WORKDIR)",
        code=2,
    )


def cluster_runtime(c, name, wd, *, for_up=False, for_down=False, context=None):
    from runtime.cluster import ClusterRuntime

    cluster = _cluster_config(c)
    kube_context = _kube_context(c, name, wd, cluster, (for_up, for_down), context)
    try:
        return ClusterRuntime(
            c,
            name,
            wd,
            ROOT,
            service=_service(c),
            namespace=_namespace(name, wd, cluster, for_up),
            cluster=str(cluster.name),
            ingress_port=int(cluster.ingress_port),
            docker=str(c.config.docker),
            cpu_requests=_cpu_requests(cluster),
            node_image=str(cluster.get("node_image") or ""),
            manifest_mirror=_manifest_mirror(cluster),
            kube_context=kube_context,
            registry=_registry(cluster),
            storage_class=str(cluster.get("storage_class") or ""),
            volume_access=str(cluster.get("volume_access") or ""),
            image_pull_secret=str(cluster.get("image_pull_secret") or ""),
            istio_gateway_type=str(cluster.get("istio_gateway_type") or ""),
            prometheus=_prometheus(cluster),
            alert_webhook=_webhook(cluster, "alert_webhook"),
            watchdog_webhook=_webhook(cluster, "watchdog_webhook"),
            out=out,
        )
    except ValueError as e:  # a setting this provider cannot honour
        raise Exit(f"error: {e}", code=2) from e


def out(line):
    print(line, flush=True)


def _cpu_requests(cluster):
    """The CPU request settings, checked before anything runs: a bad one exits 2."""
    requests = {key: str(cluster.get(key) or "") for key in CPU_REQUEST_SETTINGS}
    try:
        with_cpu_requests(Settings(image=""), requests)
    except ValueError as e:
        raise Exit(f"error: {e}", code=2) from e
    return requests


def _manifest_mirror(cluster):
    """``cluster.manifest_mirror`` as an absolute directory ("" when unset); exit 2 when it
    names no directory."""
    value = str(cluster.get("manifest_mirror") or "")
    if not value:
        return ""
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise Exit(f"error: {MIRROR_SETTING} {value!r} is not a directory", code=2)
    return str(path)


def _kube_context(c, name, wd, cluster, task, asked):
    """The existing runtime's kubeconfig context (one line says which and why)."""
    if name != EXISTING:
        if asked:
            raise Exit("error: --context applies to --runtime existing", code=2)
        return ""
    from k8s.providers.existing import ExistingClusterError, choose_context

    asked = asked or str(cluster.get("context") or "")
    try:
        for_up, for_down = task
        context, why = choose_context(
            c, asked=asked, recorded=wd.state().context, for_up=for_up, for_down=for_down
        )
    except ExistingClusterError as e:
        raise Exit(f"error: {e}", code=2) from e
    print(f"context: {context or '(none)'} ({why})", flush=True)
    return context


def _namespace(name, wd, cluster, for_up):
    """The namespace: on an existing cluster, the one `up` claimed for this work dir (its
    objects and its volume are there; another is refused, as another context is)."""
    asked = str(cluster.namespace)
    recorded = wd.state().namespace if name == EXISTING else None
    if not recorded:
        return asked or default_namespace(name)
    if asked and asked != recorded:
        if for_up:
            raise Exit(
                f"error: this work dir was set up in namespace {recorded!r}, not {asked!r}: "
                "run `invoke down` first, or use another work dir (INVOKE_WORKDIR)",
                code=2,
            )
        print(
            f"namespace: {recorded} (the one `invoke up` set up; {asked!r} applies after "
            "`invoke down`)",
            flush=True,
        )
    return recorded


def _prometheus(cluster):
    """``cluster.prometheus`` ("NAMESPACE/SERVICE:PORT"), checked ("" when unset)."""
    from k8s.monitoring.prometheus import parse_ref

    value = str(cluster.get("prometheus") or "").strip()
    if not value:
        return ""
    try:
        return str(parse_ref(value))
    except ValueError as e:
        raise Exit(f"error: {e}", code=2) from e


def _webhook(cluster, name):
    """``cluster.<name>``, ``alert_webhook`` or ``watchdog_webhook`` (an http(s) URL),
    checked ("" when unset)."""
    from k8s.monitoring.alertmanager import parse_webhook

    setting = f"cluster.{name} (INVOKE_CLUSTER_{name.upper()})"
    try:
        return parse_webhook(str(cluster.get(name) or ""), setting)
    except ValueError as e:
        raise Exit(f"error: {e}", code=2) from e


def _registry(cluster):
    """``cluster.registry``, checked ("" when unset)."""
    from runtime.registry import REGISTRY_SETTING, check_registry

    value = str(cluster.get("registry") or "")
    if not value:
        return ""
    try:
        return check_registry(value)
    except ValueError as e:
        raise Exit(f"error: {REGISTRY_SETTING}: {e}", code=2) from e
