"""What every cluster step works with: the seams (``c.run``, the kube client, ``out``, the
clock), the work dir and its state, the deployment's settings, and the two checks every
step after ``up`` makes. One instance per task, built by ``ClusterRuntime``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from k8s import manifests
from k8s.client.drykube import DryKube
from k8s.client.kube import Kube, KubeError
from k8s.client.objects import namespace_refusal
from k8s.client.ownership import (
    label_copy_refusal,
    owned,
    proven,
    refusal,
    stamp,
    uid_key,
    uid_of,
)
from k8s.providers.base import Provider
from k8s.providers.settings import EXISTING, Settings, with_cpu_requests
from runtime.cluster.cluster_error import ClusterError
from runtime.workdir import Workdir
from runtime.workdir.state import State

Out = Callable[[str], None]
_UNREAD = object()  # `apply`'s caller has not read the object it applies
# Kinds whose objects make pods that mount the volume: applied only while the volume is
# the claim `up` made (pods mount it by name).
MOUNTS_VOLUME = frozenset({"Pod", "Job", "TFJob", "InferenceService", "Workflow"})


@dataclass
class ClusterContext:
    """The seams and the deployment one task works on (under ``invoke --dry`` the kube
    seam is a ``DryKube`` and ``c.run`` only prints)."""

    c: Any
    wd: Workdir
    root: Path  # the project: the image's build context
    provider: Provider
    namespace: str
    service: str
    docker: str
    out: Out
    clock: Any
    image: Callable[[], str]  # the project image's tag, computed when first asked for
    given_kube: Kube | None = None
    cpu_requests: Mapping[str, str] = field(default_factory=dict)  # the cluster settings
    manifest_mirror: str = ""  # cluster.manifest_mirror: the install files, offline
    storage_class: str = ""  # cluster.storage_class ("" the provider's, or the default class)
    volume_access: str = (
        ""  # cluster.volume_access ("" decided from the class: k8s.providers.storage)
    )
    image_pull_secret: str = ""  # cluster.image_pull_secret
    istio_gateway_type: str = ""  # cluster.istio_gateway_type ("": ClusterIP)
    prometheus: str = ""  # cluster.prometheus: the user's Prometheus, NAMESPACE/SERVICE:PORT
    alert_webhook: str = ""  # cluster.alert_webhook: where distml's Alertmanager sends alerts
    watchdog_webhook: str = ""  # cluster.watchdog_webhook: where it sends its watchdog
    _kube: Kube | None = field(default=None, init=False, repr=False)
    _volume_checked: bool = field(default=False, init=False, repr=False)

    @property
    def dry(self) -> bool:
        return bool(self.c.config.run.dry)

    @property
    def kube(self) -> Kube:
        """The cluster API: the one given, else built on first use (never under --dry)."""
        if self._kube is None:
            kube: Kube
            if self.given_kube is not None:
                kube = self.given_kube
            elif self.dry:
                kube = DryKube(self.out)
            else:
                from k8s.client.kube import ApiKube

                kube = ApiKube(self.provider.context, out=self.out, manager=self.field_manager)
            if not self.owns_cluster and not self.dry:
                from runtime.cluster.identity import check_recorded

                check_recorded(kube, self.wd.state(), self.provider.context)
            self._kube = kube  # only once the cluster is the one `up` recorded
        return self._kube

    @property
    def field_manager(self) -> str:
        """Server-side apply's field manager: one per work dir on a cluster distml did not
        create, so that two work dirs' writes to one object conflict (never merge)."""
        instance = self.instance
        return f"distml-{instance}" if instance and not self.owns_cluster else "distml"

    @property
    def owns_cluster(self) -> bool:
        """distml made this cluster: every object in its namespace is distml's."""
        return self.provider.name != EXISTING

    @property
    def instance(self) -> str | None:
        """This work dir's id, on every object it writes (`up` chooses it)."""
        return self.wd.state().instance

    def settings(self, **changes: Any) -> Settings:
        """This deployment's settings; ``changes`` that are None keep the default."""
        state = self.wd.state()
        made = state if state.runtime == self.provider.name else None
        base = Settings(
            image=self.image(),
            provider=self.provider.name,
            namespace=self.namespace,
            service=self.service,
            serving_mode=state.serving_mode or "knative",
            with_argo=state.argo,
            with_monitoring=state.monitoring,
            prometheus=self.prometheus,
            alert_webhook=self.alert_webhook,
            watchdog_webhook=self.watchdog_webhook,
            ingress_node_port=self.provider.ingress_node_port,
            manifest_mirror=self.manifest_mirror,
            # What `up` made the volume with wins (a claim's spec cannot change), when it
            # was on this runtime: an existing cluster's class means nothing to kind.
            storage_class_name=(made.storage_class if made else None) or self.storage_class,
            volume_access=(made.volume_access if made else None)
            or self.volume_access
            or "ReadWriteOnce",
            image_pull_secret=self.image_pull_secret,
            istio_gateway_type=self.istio_gateway_type,
        )
        s = replace(base, **{k: v for k, v in changes.items() if v is not None})
        try:
            s = with_cpu_requests(s, self.cpu_requests)
            manifests.check_settings(s)
        except ValueError as e:
            raise ClusterError(str(e)) from e
        return s

    def require_up(self) -> State:
        """The work dir's state, when `invoke up` set this cluster up for it."""
        state = self.wd.state()
        if self.dry:
            return state
        if not (state.up and state.runtime == self.provider.name):
            raise ClusterError(
                f"the {self.provider.name} cluster is not set up for this work dir "
                f"({self.wd.root}); run `invoke up --runtime {self.provider.name}` first"
            )
        if not self.owns_cluster and not (state.instance and state.cluster_server):
            # Set up by a distml that recorded neither: its cluster and objects unknown.
            raise ClusterError(
                "this work dir was set up by an older distml, which recorded neither the "
                "cluster behind its context nor an id for its objects: run `invoke up` "
                "again (or `invoke down --forget` and start over)"
            )
        return state

    def check_namespace(self) -> None:
        """Refuse a namespace KServe will not serve from (``namespace_refusal``)."""
        if self.dry:
            return
        try:
            ns = self.kube.get("v1", "Namespace", self.namespace)
        except KubeError as e:
            if self.owns_cluster:
                raise ClusterError(str(e)) from e
            self.out(f"note: namespace {self.namespace} cannot be read ({e}): not checked")
            return
        problem = namespace_refusal(ns, self.provider.kubectl)
        if problem:
            raise ClusterError(problem)

    def check_image(self, state: State, s: Settings) -> None:
        """Pods run the image `up` imported: refuse to run code the cluster does not have."""
        if state.image and state.image != s.image and not self.dry:
            raise ClusterError(
                f"the code changed since `invoke up` imported {state.image} (now "
                f"{s.image}); run `invoke up` again to build and import it"
            )

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        """An object in this deployment's namespace, or None."""
        return self.kube.get(api_version, kind, name, self.namespace)

    def apply(self, obj: dict[str, Any], *, current: Any = _UNREAD) -> dict[str, Any]:
        """Apply ``obj`` with this work dir's instance label. On a cluster distml did not
        create: refused when an object of that name is someone else's, and never forcing
        a conflict with another writer's fields."""
        obj = stamp(obj, self.instance)
        meta = obj["metadata"]
        if not self.owns_cluster and not self.dry:
            old = current
            if old is _UNREAD:  # the caller did not read it just before
                old = self.kube.get(
                    obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")
                )
            if old is not None:
                self.require_ours(old, f"apply {obj['kind']} {meta['name']}")
        if obj["kind"] in MOUNTS_VOLUME:
            self.check_volume()
        try:
            applied = self.kube.apply(obj, force=self.owns_cluster)
        except KubeError as e:
            raise ClusterError(str(e)) from e
        self.remember(applied)
        return applied

    def delete_ours(self, api_version: str, kind: str, name: str) -> bool:
        """Delete an object of this deployment's namespace if it is this work dir's (one
        that is not is refused, never deleted); False when there was none."""
        if self.dry:
            return self.kube.delete(api_version, kind, name, self.namespace)
        obj = self.get(api_version, kind, name)
        if obj is None:
            return False
        self.require_ours(obj, f"delete {kind} {name}")
        return self.delete_checked(api_version, obj)

    def delete_checked(self, api_version: str, obj: dict[str, Any]) -> bool:
        """Delete ``obj``, the object of that uid and no other (read and checked just
        before: one made again in between is the API server's 409, refused here)."""
        meta = obj["metadata"]
        name, ns = meta["name"], meta.get("namespace")
        try:
            gone = self.kube.delete(api_version, obj["kind"], name, ns, uid=uid_of(obj) or None)
        except KubeError as e:
            if e.status == 409:
                raise ClusterError(
                    f"{obj['kind']} {ns}/{name} was made again by someone else while distml "
                    "was deleting it: left as it is"
                ) from e
            raise ClusterError(str(e)) from e
        self._forget(obj["kind"], name, ns)
        return gone

    def require_ours(self, obj: dict[str, Any], when: str) -> None:
        """Refuse to change or delete ``obj`` unless this work dir wrote it: its instance
        label, and the uid recorded when it wrote it (a copy of the label, on an object
        made again under the name, is not enough). Every object is distml's on a cluster
        distml made."""
        if self.owns_cluster or self.dry:
            return
        if obj.get("kind") == "PersistentVolumeClaim":
            mine = owned(obj, self.instance, self.wd.state().volume_uid)
        else:
            mine = proven(obj, self.instance, self.uids)
        if mine:
            return
        if owned(obj, self.instance):  # this work dir's label, not a uid it recorded
            raise ClusterError(label_copy_refusal(obj, self.namespace, when=when))
        raise ClusterError(refusal([obj], self.namespace, when=when))

    def ours(self, obj: dict[str, Any]) -> bool:
        """``require_ours`` as a question (for reports)."""
        try:
            self.require_ours(obj, "")
        except ClusterError:
            return False
        return True

    @property
    def uids(self) -> dict[str, str]:
        """The uid of every object this work dir wrote and has not deleted since."""
        return dict(self.wd.state().object_uids)

    def remember(self, applied: dict[str, Any]) -> None:
        """Record the uid of an object this work dir wrote (``apply`` does it for every
        object; a Workflow's steps write some later: ``workflow`` records those)."""
        meta = applied.get("metadata") or {}
        if self.dry or not meta.get("uid"):
            return
        key = uid_key(str(applied.get("kind")), meta.get("name", ""), meta.get("namespace"))
        uids = self.uids
        if uids.get(key) != meta["uid"]:
            uids[key] = meta["uid"]
            self.wd.update_state(object_uids=sorted(uids.items()))

    def _forget(self, kind: str, name: str, namespace: str | None) -> None:
        uids = self.uids
        if not self.dry and uids.pop(uid_key(kind, name, namespace), None) is not None:
            self.wd.update_state(object_uids=sorted(uids.items()))

    def check_volume(self) -> None:
        """Pods mount the volume by name: refuse to make one while the claim there is not
        the one `up` made (deleted, or made again by someone else). Once per task."""
        recorded = self.wd.state().volume_uid
        if self._volume_checked or self.dry or not recorded:
            return
        s = self.settings()
        claim = self.get("v1", "PersistentVolumeClaim", s.volume)
        if claim is None or uid_of(claim) != recorded:
            now = "is gone" if claim is None else f"is another one now (uid {uid_of(claim)})"
            raise ClusterError(
                f"the volume {self.namespace}/{s.volume} that `invoke up` made (uid "
                f"{recorded}) {now}: no pod of this work dir mounts it. Its data is not this "
                "work dir's; run `invoke up` to make the volume again (on a cluster shared "
                "with others, in a namespace of this work dir's own)"
            )
        self._volume_checked = True
