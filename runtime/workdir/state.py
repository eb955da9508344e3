"""The work dir's state (``<workdir>/state.json``): what `invoke up` and the steps after
it record for the next task, as one typed, versioned record with one reader
(:func:`read_state`) and one writer (:func:`update_state`).

Every field has a reader: a value nothing reads is not recorded. The reader never fails:
a missing, unreadable or corrupt file is an empty ``State``; a key it does not know (one
an older distml wrote) is ignored; a value of the wrong type reads as its field's
default. The writer takes only known fields (any other is a bug: TypeError), writes the
fields that differ from their defaults, and replaces the file atomically: a full disk or
a Ctrl-C midway leaves the old file and no temp file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeGuard

from common.errors import DistmlError

#: The state format this distml reads and writes. Files from before it had a version are
#: version 1 too (the same keys, minus the ones nothing read).
VERSION = 1


class StateError(DistmlError):
    """The state file is one this distml must not overwrite."""


@dataclass(frozen=True)
class Server:
    """The local model server `invoke deploy` started in the background."""

    pid: int
    url: str  # http://127.0.0.1:<port>
    log: str
    started: float | None = None  # its start time: tells our server from a recycled pid


@dataclass(frozen=True)
class State:
    version: int = VERSION
    # -- every runtime
    up: bool = False  # `invoke up` finished (a cluster `down` sets it back)
    runtime: str | None = None  # the runtime `invoke up` prepared: local, k3d, kind, minikube
    source_dir: str | None = None  # `up --source-dir`: the raw Fashion-MNIST files
    last_loadtest: str | None = None  # the last load test's summary.json
    # -- local
    server: Server | None = None  # the model server, while one runs
    canary_server: Server | None = None  # a canary's own model server, while it is judged
    train_pids: tuple[int, ...] = ()  # the training workers, while they run
    # (job, worker index, /metrics URL) of each running training worker (`status` reads them)
    train_metrics: tuple[tuple[str, int, str], ...] = ()
    # -- cluster
    serving_mode: str | None = None  # knative or standard: a set-up cluster keeps its mode
    argo: bool = False  # `up --with-argo` installed Argo Workflows
    # `up --with-monitoring` installed distml's Prometheus (and KEDA in standard mode)
    monitoring: bool = False
    image: str | None = None  # the project image `up` imported into the cluster
    built_images: tuple[str, ...] = ()  # what `down --purge` removes from Docker
    deployed: bool = False  # `deploy` made the InferenceService Ready
    target: int | None = None  # `deploy`'s autoscaling target, for the load test's plan
    max_replicas: int | None = None  # `deploy`'s replica cap, for the load test's plan
    # What drives the predictor's scaling as `deploy` applied it: knative mode's concurrency
    # autoscaler ("concurrency"); standard mode's HPA on CPU ("cpu"), or KEDA on requests in
    # flight ("concurrency") or per second ("rps"). For `status` and the load test's plan.
    scale_metric: str | None = None
    # How often Prometheus scraped the predictor when `deploy` wrote KEDA's query (its
    # window is four of these): `status` checks it against the targets' interval now.
    scrape_interval_s: float | None = None
    instance: str | None = None  # this work dir's id: the label on every object it writes
    # Where this work dir lives, as `up` found it: a copy (another path or host) is told
    # apart at its first task (runtime.workdir.origin), and a secret only it holds.
    workdir_path: str | None = None
    workdir_host: str | None = None
    workdir_secret: str | None = None
    # The uid of every object this work dir wrote ("Kind namespace/name" -> uid): deletes
    # and replaces carry it as a precondition, so a same-name object is never touched.
    object_uids: tuple[tuple[str, str], ...] = ()
    volume_uid: str | None = None  # the PVC `up` made: `down` deletes that claim and no other
    # `up` created the lab cluster (k3d, kind, minikube) and recorded this work dir on it
    # (runtime.cluster.lab_owner): `down` deletes a lab cluster only then.
    made_cluster: bool = False
    # -- an existing cluster (`--runtime existing`)
    context: str | None = None  # the kubeconfig context `up` set up: later tasks use it
    namespace: str | None = None  # the namespace `up` claimed there: later tasks use it
    # The cluster behind it, as `up` found it: every later task refuses another one.
    cluster_server: str | None = None  # the API server's URL
    cluster_uid: str | None = None  # the kube-system Namespace's uid ("" when unreadable)
    cluster_ca: str | None = None  # the SHA-256 of the cluster's CA certificate
    registry: str | None = None  # `build --push REGISTRY[/REPO]`: where pods pull the image
    pushed: str | None = None  # what `up` pushed, as REGISTRY/distml:<hash>@sha256:<digest>
    storage_class: str | None = None  # the volume's class, as `up` found it
    volume_access: str | None = None  # ReadWriteOnce or ReadWriteMany, as `up` decided


_BAD = object()  # a value of the wrong type


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _bool(v: Any) -> Any:
    return v if isinstance(v, bool) else _BAD


def _str(v: Any) -> Any:
    return v if isinstance(v, str) else _BAD


def _int(v: Any) -> Any:
    return v if _is_int(v) else _BAD


def _worker_url(v: Any) -> bool:
    """(job, worker index, URL on loopback): a training worker's /metrics."""
    if not (isinstance(v, list | tuple) and len(v) == 3):
        return False
    job, index, url = v
    return (
        isinstance(job, str) and _is_int(index) and isinstance(url, str)
        and url.startswith("http://127.0.0.1:")
    )  # fmt: skip


def _worker_urls(v: Any) -> Any:
    ok = isinstance(v, list | tuple) and all(_worker_url(x) for x in v)
    return tuple(tuple(x) for x in v) if ok else _BAD


def _positive(v: Any) -> Any:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf")
    return float(v) if ok else _BAD


def _label_value(v: Any) -> Any:
    """A Kubernetes label value (the instance id is put on objects as one)."""
    ok = isinstance(v, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", v)
    return v if ok else _BAD


def _version(v: Any) -> Any:
    return v if _is_int(v) and v >= 1 else _BAD


def _tuple_of(check: Callable[[Any], bool]) -> Callable[[Any], Any]:
    def parse(v: Any) -> Any:
        ok = isinstance(v, list | tuple) and all(check(x) for x in v)
        return tuple(v) if ok else _BAD

    return parse


def _pairs(v: Any) -> Any:
    """(str, str) pairs: JSON keeps them as two-item lists."""
    ok = isinstance(v, list | tuple) and all(
        isinstance(x, list | tuple) and len(x) == 2 and all(isinstance(y, str) for y in x)
        for x in v
    )
    return tuple((str(x[0]), str(x[1])) for x in v) if ok else _BAD


def _server(v: Any) -> Any:
    if isinstance(v, Server):
        v = asdict(v)
    if not isinstance(v, dict):
        return _BAD
    pid, url, log, started = (v.get(k) for k in ("pid", "url", "log", "started"))
    if not (_is_int(pid) and isinstance(url, str) and isinstance(log, str)):
        return _BAD
    if started is not None and not (isinstance(started, float) or _is_int(started)):
        return _BAD
    return Server(pid, url, log, None if started is None else float(started))


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "version": _version,
    "up": _bool,
    "runtime": _str,
    "source_dir": _str,
    "last_loadtest": _str,
    "server": _server,
    "canary_server": _server,
    "train_pids": _tuple_of(_is_int),
    "train_metrics": _worker_urls,
    "serving_mode": _str,
    "argo": _bool,
    "monitoring": _bool,
    "image": _str,
    "built_images": _tuple_of(lambda x: isinstance(x, str)),
    "deployed": _bool,
    "target": _int,
    "max_replicas": _int,
    "scale_metric": _str,
    "scrape_interval_s": _positive,
    "instance": _label_value,
    "workdir_path": _str,
    "workdir_host": _str,
    "workdir_secret": _str,
    "object_uids": _pairs,
    "volume_uid": _str,
    "made_cluster": _bool,
    "context": _str,
    "namespace": _str,
    "cluster_server": _str,
    "cluster_uid": _str,
    "cluster_ca": _str,
    "registry": _str,
    "pushed": _str,
    "storage_class": _str,
    "volume_access": _str,
}
_DEFAULTS = {f.name: f.default for f in fields(State) if f.default is not MISSING}


def from_json(raw: Any) -> State:
    """A ``State`` out of whatever ``json.loads`` gave: what it cannot use is left out."""
    if not isinstance(raw, dict):
        return State()
    values: dict[str, Any] = {}  # State's fields, each as its parser gave it
    for name, parse in _PARSERS.items():
        value = parse(raw[name]) if raw.get(name) is not None else _BAD
        if value is not _BAD:
            values[name] = value
    return State(**values)


def to_json(state: State) -> dict[str, Any]:
    """The fields that differ from their defaults (the version always), as JSON values."""
    out: dict[str, Any] = {"version": state.version}
    for name, default in _DEFAULTS.items():
        value = getattr(state, name)
        if name != "version" and value != default:
            out[name] = asdict(value) if isinstance(value, Server) else value
    return out


def read_state(path: Path) -> State:
    """The state in ``path``; an empty ``State`` when there is none to read."""
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):  # missing, not JSON, nested too deep
        return State()
    return from_json(raw)


def update_state(path: Path, **changes: Any) -> State:
    """Apply ``changes`` (``None`` resets a field to its default) to the state in ``path``
    and write it back atomically; return the new state."""
    state = read_state(path)
    if state.version > VERSION:
        raise StateError(
            f"{path} was written by a newer distml (state version {state.version}; this one "
            f"knows up to {VERSION}): run the newer distml, or remove the file to start over"
        )
    state = replace(state, version=VERSION, **{k: _checked(k, v) for k, v in changes.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(to_json(state), f, indent=2)
        os.replace(tmp, path)
    except BaseException:  # a full disk, a Ctrl-C: the old state stays, no temp file
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return state


def _checked(name: str, value: Any) -> Any:
    if name not in _PARSERS or name == "version":
        raise TypeError(f"the work dir's state has no field {name!r}")
    if value is None:
        return _DEFAULTS[name]
    parsed = _PARSERS[name](value)
    if parsed is _BAD:
        raise TypeError(f"state field {name!r} cannot hold {value!r}")
    return parsed
