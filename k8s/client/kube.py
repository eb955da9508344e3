"""The one client seam: every read and write the cluster path makes goes through ``Kube``.

- ``ApiKube``: the real thing, the ``kubernetes`` Python client, kubeconfig loaded lazily
  for one named context (never the user's current context by accident).
- ``DryKube`` (``k8s.client.drykube``): ``invoke --dry``: prints each object it would
  apply, touches nothing.
- tests use ``tests/support/fakekube.py``: an in-memory cluster whose objects tests script.

Objects are plain dicts (what the builders in ``k8s.manifests`` return).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from common.errors import DistmlError
from k8s.client.events import sort_events

# Objects as the API lists them. A name of its own: inside the classes below, ``list``
# is their method, not the builtin.
Objects = list[dict[str, Any]]


class KubeError(DistmlError):
    """A cluster call failed; the message says which call and why (a task prints it as
    ``error: ...`` and exits non-zero, like every other user-fixable failure). ``status``:
    the API server's HTTP status when it answered (403: not allowed, 409: a conflict or a
    failed precondition); None when it did not (unreachable, a timeout)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def forbidden(self) -> bool:
        """The API server answered, and said this user may not (HTTP 403)."""
        return self.status == 403


class ProxyError(KubeError):
    """A request through the API server's service proxy was answered with an HTTP error:
    by the API server (no such Service, no ready endpoint, not allowed) or by the service
    behind it (its own error body, e.g. Prometheus's JSON)."""

    def __init__(self, message: str, *, status: int, body: bytes = b"") -> None:
        super().__init__(message, status=status)
        self.body = body


class Kube(Protocol):
    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = True
    ) -> dict[str, Any]:
        """Server-side apply (field manager ``distml``); return the result.

        ``force``: take over fields another manager set (only on a cluster distml made;
        elsewhere a conflict is the API server's 409, said as it is).
        ``dry_run=True`` asks the API server to validate and admit it without persisting
        (``dryRun=All``): how the webhook readiness probe works.
        """

    def server(self) -> str:
        """The API server's URL, as the kubeconfig names it ("" when none is known)."""

    def ca(self) -> str:
        """The CA certificates (PEM) the kubeconfig trusts for this API server ("" when it
        names none)."""

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Objects:
        """Objects of a kind (empty when none, or when the kind is not installed)."""

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
    ) -> bool:
        """Delete with foreground propagation; False when it did not exist. ``uid``: only
        the object of that uid (``DeleteOptions.preconditions``): another one of the same
        name is the API server's 409, a KubeError with ``status`` 409."""

    def create(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """POST ``obj`` (create, never update); return the server's answer. For what can
        only be created (``SelfSubjectAccessReview`` and the other reviews: the answer is
        in its ``status``), and for a dry-run create (``dry_run``: admitted by every
        webhook, not persisted). An object of that name already there is a 409."""

    def served(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves ``kind`` at ``api_version`` (API discovery, which
        every user may read: how an operator is found when its namespace cannot be)."""

    def logs(
        self,
        pod: str,
        namespace: str,
        container: str | None = None,
        tail: int = 40,
        *,
        previous: bool = False,
    ) -> str:
        """The last ``tail`` lines of a container's log ('' when there is none yet);
        ``previous``: of its last terminated run (before a restart)."""

    def events(self, namespace: str, name: str | None = None) -> Objects:
        """Events in a namespace, optionally only those whose involvedObject is ``name``;
        oldest first."""

    def proxy_get(
        self, namespace: str, service: str, port: int, path: str, params: dict[str, str]
    ) -> bytes:
        """``GET path?params`` on ``service:port`` in ``namespace`` through the API server's
        service proxy (no port-forward): the body of a 2xx answer. An HTTP error is a
        ``ProxyError`` (its status and body kept); an unreachable API server a KubeError."""


# --------------------------------------------------------------------------- helpers


def describe(kind: str, name: str | None, namespace: str | None = None) -> str:
    """``Kind ns/name`` (or ``Kind name`` for cluster-scoped objects)."""
    where = f"{namespace}/{name}" if namespace else (name or "")
    return f"{kind} {where}".rstrip()


def meta_of(obj: dict[str, Any]) -> tuple[str, str, str, str | None]:
    meta = obj.get("metadata") or {}
    return (
        obj.get("apiVersion", ""),
        obj.get("kind", ""),
        meta.get("name", ""),
        meta.get("namespace"),
    )


def _body_message(body: str | bytes) -> str:
    """An error answer's message: a ``Status`` body's ``message``, else the body's start."""
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        data = None
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    return str(body).strip()[:500]


def _api_message(exc: BaseException) -> str:
    """The API server's own message (the ``Status`` body's ``message``), else the reason."""
    body = getattr(exc, "body", None)
    if body:
        return _body_message(body)
    status, reason = getattr(exc, "status", None), getattr(exc, "reason", None)
    if status is not None or reason:
        return f"HTTP {status} {reason or ''}".strip()
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# --------------------------------------------------------------------------- ApiKube


FIELD_MANAGER = "distml"
# Seconds for a request through the service proxy (connect and read): a reader, never a wait.
PROXY_TIMEOUT_S = 10.0


class ApiKube:
    """The real cluster, through the ``kubernetes`` client, for one kubeconfig context.

    Lazy: constructing it imports and loads nothing; the first call loads the kubeconfig
    (``$KUBECONFIG`` or ``~/.kube/config``) for ``context`` and discovers the API.
    """

    def __init__(
        self, context: str, out: Callable[[str], Any] = print, manager: str = FIELD_MANAGER
    ) -> None:
        if not context:
            # The client would take "" as the kubeconfig's current context: never by accident.
            raise KubeError("no kubeconfig context named: distml never uses the current one")
        self.context = context
        self.manager = manager  # server-side apply's field manager
        self.out = out
        self._dyn: Any = None  # kubernetes.dynamic.DynamicClient
        self._core: Any = None  # kubernetes.client.CoreV1Api
        self._api_client: Any = None

    def __repr__(self) -> str:
        return f"ApiKube(context={self.context!r})"

    # -- plumbing

    def _connect(self) -> None:
        if self._dyn is not None:
            return
        try:
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException
            from kubernetes.dynamic import DynamicClient
        except ImportError as exc:  # pragma: no cover - kubernetes is a dependency
            raise KubeError(
                f"the kubernetes Python client is not installed ({exc}); run `pip install -e .`"
            ) from exc
        config_file = os.environ.get("KUBECONFIG") or "~/.kube/config"
        try:
            api_client = config.new_client_from_config(
                config_file=config_file, context=self.context
            )
        except (ConfigException, OSError, ValueError, TypeError) as exc:
            raise KubeError(
                f"no kubeconfig context {self.context}; run `invoke up` first "
                f"(kubeconfig {config_file}: {exc})"
            ) from exc
        try:
            dyn = DynamicClient(api_client)
        except Exception as exc:  # discovery: ApiException, urllib3 errors, OSError
            raise KubeError(
                f"cannot reach the API server of kubeconfig context {self.context}: "
                f"{_api_message(exc)}; is the cluster running? (`invoke up`)"
            ) from exc
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._dyn = dyn

    def _resource(self, call: str, api_version: str, kind: str, what: str) -> Any:
        """The dynamic resource for apiVersion/kind, or None when the kind is not installed."""
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        self._connect()
        try:
            return self._dyn.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            return None
        except Exception as exc:
            raise KubeError(f"{call} {what}: API discovery failed: {_api_message(exc)}") from exc

    def _fail(self, call: str, what: str, exc: BaseException) -> KubeError:
        return KubeError(f"{call} {what} failed: {_api_message(exc)}", status=self._status(exc))

    @staticmethod
    def _status(exc: BaseException) -> int | None:
        return getattr(exc, "status", None)

    @staticmethod
    def _errors() -> tuple[type[BaseException], ...]:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        return (ApiException, urllib3.exceptions.HTTPError, OSError)

    # -- the Protocol

    def server(self) -> str:
        self._connect()
        return str(self._api_client.configuration.host or "")

    def ca(self) -> str:
        self._connect()
        path = self._api_client.configuration.ssl_ca_cert  # the client writes the data out
        try:
            return Path(path).read_text() if path else ""
        except OSError:
            return ""

    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = True
    ) -> dict[str, Any]:
        api_version, kind, name, namespace = meta_of(obj)
        what = describe(kind, name, namespace)
        call = "apply (dry run)" if dry_run else "apply"
        resource = self._resource(call, api_version, kind, what)
        if resource is None:
            raise KubeError(
                f"{call} {what} failed: the kind {kind} ({api_version}) is not installed in "
                f"context {self.context}; run `invoke up` first"
            )
        try:
            result = self._dyn.server_side_apply(
                resource,
                body=obj,
                name=name,
                namespace=namespace if resource.namespaced else None,
                field_manager=self.manager,
                force_conflicts=force,
                dry_run="All" if dry_run else None,
            )
        except self._errors() as exc:
            raise self._fail(call, what, exc) from exc
        return result.to_dict() if hasattr(result, "to_dict") else dict(result or {})

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        what = describe(kind, name, namespace)
        resource = self._resource("get", api_version, kind, what)
        if resource is None:
            return None
        try:
            result = self._dyn.get(
                resource, name=name, namespace=namespace if resource.namespaced else None
            )
        except self._errors() as exc:
            if self._status(exc) == 404:
                return None
            raise self._fail("get", what, exc) from exc
        return result.to_dict()

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Objects:
        what = f"{kind} in {namespace or 'all namespaces'}"
        if label_selector:
            what += f" ({label_selector})"
        resource = self._resource("list", api_version, kind, what)
        if resource is None:
            return []
        try:
            result = self._dyn.get(
                resource,
                namespace=namespace if resource.namespaced else None,
                label_selector=label_selector,
            )
        except self._errors() as exc:
            if self._status(exc) == 404:
                return []
            raise self._fail("list", what, exc) from exc
        # The API server's list items carry no kind or apiVersion (the List has them):
        # filled in, as kubectl does, so that every object names its own kind.
        items = list(result.to_dict().get("items") or [])
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
    ) -> bool:
        what = describe(kind, name, namespace)
        resource = self._resource("delete", api_version, kind, what)
        if resource is None:
            return False
        try:
            self._dyn.delete(
                resource,
                name=name,
                namespace=namespace if resource.namespaced else None,
                # One DeleteOptions body: with a body the API server reads no query
                # parameter (delete.go), and a propagationPolicy left in the query was
                # dropped: a Job's pods were orphaned and kept the volume (the byo run).
                body={"propagationPolicy": "Foreground"}
                | ({"preconditions": {"uid": uid}} if uid else {}),
            )
        except self._errors() as exc:
            if self._status(exc) == 404:
                return False
            raise self._fail("delete", what, exc) from exc
        return True

    def create(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        api_version, kind, name, namespace = meta_of(obj)
        what = describe(kind, name or None, namespace)
        call = "create (dry run)" if dry_run else "create"
        resource = self._resource(call, api_version, kind, what)
        if resource is None:
            raise KubeError(
                f"{call} {what} failed: the kind {kind} ({api_version}) is not served in "
                f"context {self.context}",
                status=404,
            )
        try:
            result = self._dyn.create(
                resource,
                body=obj,
                namespace=namespace if resource.namespaced else None,
                dry_run="All" if dry_run else None,
            )
        except self._errors() as exc:
            raise self._fail(call, what, exc) from exc
        return result.to_dict() if hasattr(result, "to_dict") else dict(result or {})

    def served(self, api_version: str, kind: str) -> bool:
        return self._resource("discover", api_version, kind, f"{kind} ({api_version})") is not None

    def logs(
        self,
        pod: str,
        namespace: str,
        container: str | None = None,
        tail: int = 40,
        *,
        previous: bool = False,
    ) -> str:
        what = describe("Pod", pod, namespace) + (f" container {container}" if container else "")
        self._connect()
        try:
            text = self._core.read_namespaced_pod_log(
                name=pod,
                namespace=namespace,
                container=container,
                tail_lines=tail,
                **({"previous": True} if previous else {}),
            )
        except self._errors() as exc:
            if self._status(exc) in (400, 404):  # not started yet, or gone
                return ""
            raise self._fail("logs", what, exc) from exc
        return text if isinstance(text, str) else (text or b"").decode("utf-8", "replace")

    def events(self, namespace: str, name: str | None = None) -> Objects:
        what = f"events in {namespace}" + (f" for {name}" if name else "")
        self._connect()
        try:
            result = self._core.list_namespaced_event(
                namespace=namespace,
                field_selector=f"involvedObject.name={name}" if name else None,
            )
        except self._errors() as exc:
            raise self._fail("list", what, exc) from exc
        items = self._api_client.sanitize_for_serialization(result).get("items") or []
        return sort_events(items)

    def proxy_get(
        self, namespace: str, service: str, port: int, path: str, params: dict[str, str]
    ) -> bytes:
        from urllib.parse import quote

        what = f"GET {path} on Service {namespace}/{service}:{port} (the API server's proxy)"
        self._connect()
        resource = (
            f"/api/v1/namespaces/{quote(namespace, safe='')}/services/"
            f"{quote(service, safe='')}:{int(port)}/proxy/{quote(path.lstrip('/'))}"
        )
        api = self._api_client
        method, url, headers, _, _ = api.param_serialize(
            "GET",
            resource,
            query_params=list(params.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            response = api.call_api(
                method, url, header_params=headers, _request_timeout=PROXY_TIMEOUT_S
            )
            body = response.read() or b""
        except self._errors() as exc:
            raise self._fail("proxy", what, exc) from exc
        if not 200 <= response.status < 300:
            raise ProxyError(
                f"{what}: HTTP {response.status}: {_body_message(body) or 'no message'}",
                status=response.status,
                body=body,
            )
        return bytes(body)
