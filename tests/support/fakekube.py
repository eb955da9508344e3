"""An in-memory cluster for tests: implements the ``k8s.client.kube.Kube`` Protocol, plus a
fake clock.

- Objects are stored by ``(apiVersion, kind, namespace, name)``; ``apply`` stores a deep copy
  (keeping the stored ``status`` when the applied object has none, like a real status
  subresource), ``get``/``list`` return deep copies.
- ``.applied`` (objects, in order), ``.dry_runs`` (dry-run applies), ``.deleted`` (keys, in
  order) and ``.calls`` (every Protocol call) record what the code under test did.
- Time: ``fake.clock`` is a ``FakeClock``; ``clock.sleep(s)`` advances the fake time and runs
  the hooks registered with ``fake.script(hook)`` (``hook(t)``), ``fake.at(t, fn)`` (once, when
  the time reaches ``t``) and ``fake.sequence(...)`` (one status per poll).
- Failures: ``fake.fail("apply", KubeError("..."), times=2)`` makes the next calls raise.

Pods, events and logs have helpers: ``add_pod``, ``add_event``, ``set_log``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from k8s.client.kube import KubeError, ProxyError

Key = tuple[str, str, str | None, str]
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# How reviews are answered unless a test scripts them (``answer_create``): a user who may
# do everything (a cluster distml made, a cluster-admin's context).
ALL_RULES = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
DEFAULT_REVIEWS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "SelfSubjectRulesReview": lambda _: {"resourceRules": ALL_RULES, "incomplete": False},
    "SelfSubjectAccessReview": lambda _: {"allowed": True},
    "SelfSubjectReview": lambda _: {"userInfo": {"username": "kubernetes-admin"}},
}


class FakeClock:
    """``monotonic()`` and ``sleep()`` on fake time; sleeping runs the hooks."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.hooks: list[Callable[[float], Any]] = []
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, f"negative sleep {seconds}"
        self.sleeps.append(seconds)
        self.now += seconds
        for hook in list(self.hooks):
            hook(self.now)

    def advance(self, seconds: float) -> None:
        self.sleep(seconds)

    def timestamp(self) -> str:
        """The fake time as an RFC 3339 timestamp (for events and metadata)."""
        return (EPOCH + timedelta(seconds=self.now)).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_selector(selector: str | None) -> list[tuple[str, str, str | None]]:
    """``a=b,c!=d,e,!f`` → ``[(op, key, value)]`` (ops: =, !=, exists, !exists)."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in (selector or "").split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append(("!=", key.strip(), value.strip()))
        elif "=" in term:
            key, value = term.split("=", 1)
            terms.append(("=", key.strip(), value.strip().lstrip("=").strip()))
        elif term.startswith("!"):
            terms.append(("!exists", term[1:].strip(), None))
        else:
            terms.append(("exists", term, None))
    return terms


def matches(labels: dict[str, str], selector: str | None) -> bool:
    for op, key, value in parse_selector(selector):
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True


class FakeKube:
    """The ``Kube`` Protocol over a dict; see the module docstring."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.objects: dict[Key, dict[str, Any]] = {}
        self.applied: list[dict[str, Any]] = []
        self.dry_runs: list[dict[str, Any]] = []
        self.deleted: list[Key] = []
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.event_list: list[dict[str, Any]] = []
        self.log_texts: dict[tuple[str, str | None, bool], str] = {}
        self.log_requests: list[tuple[str, str, str | None, int]] = []
        self._failures: dict[str, list[BaseException]] = {}
        self.server_url = "https://127.0.0.1:6443"  # what ``server()`` answers
        self.ca_pem = ""  # what ``ca()`` answers: the kubeconfig's CA
        self.forced: list[bool] = []  # each apply's ``force``, in order
        # ``serve_proxy``: what answers a service behind the API server's proxy.
        self.proxies: dict[tuple[str, str, int], Callable[[str, dict[str, str]], bytes]] = {}
        # ``answer_create``: how a kind that can only be created (a review) is answered.
        self.create_answers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self.created: list[dict[str, Any]] = []  # every create, dry runs included
        # ``serve_kind``: what API discovery answers as served, beside every kind stored.
        self.served_kinds: set[tuple[str, str]] = set()
        self._uids = 0

    # -- scripting

    def script(self, hook: Callable[[float], Any]) -> Callable[[float], Any]:
        """Run ``hook(t)`` after every ``clock.sleep`` (usable as a decorator)."""
        self.clock.hooks.append(hook)
        return hook

    def at(self, t: float, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` once, on the first sleep that reaches fake time ``t``."""
        done = False

        def hook(now: float) -> None:
            nonlocal done
            if not done and now >= t:
                done = True
                fn()

        self.script(hook)

    def sequence(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        statuses: Sequence[dict[str, Any]],
    ) -> None:
        """Set the status to ``statuses[0]`` now and to ``statuses[i]`` after the i-th sleep
        (the last one stays)."""
        statuses = list(statuses)
        step = 0
        self.set_status(api_version, kind, namespace, name, statuses[0])

        def hook(_: float) -> None:
            nonlocal step
            step = min(step + 1, len(statuses) - 1)
            self.set_status(api_version, kind, namespace, name, statuses[step])

        self.script(hook)

    def fail(self, method: str, error: BaseException, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` raise ``error``."""
        self._failures.setdefault(method, []).extend([error] * times)

    def _call(self, method: str, *args: Any) -> None:
        self.calls.append((method, args))
        pending = self._failures.get(method)
        if pending:
            raise pending.pop(0)

    # -- direct store access

    @staticmethod
    def key_of(obj: dict[str, Any]) -> Key:
        meta = obj.get("metadata") or {}
        return (obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as is (status included); not recorded as applied."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("creationTimestamp", self.clock.timestamp())
        if "uid" not in meta:  # never reused, as the API server's are
            self._uids += 1
            meta["uid"] = f"uid-{self._uids}"
        self.objects[self.key_of(obj)] = obj
        return obj

    def obj(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The stored object itself (not a copy), for tests to mutate."""
        return self.objects.get((api_version, kind, namespace, name))

    def set_status(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        status: dict[str, Any],
    ) -> dict[str, Any]:
        """Replace an object's status, creating a bare object when it does not exist."""
        key = (api_version, kind, namespace, name)
        if key not in self.objects:
            meta: dict[str, Any] = {"name": name}
            if namespace is not None:
                meta["namespace"] = namespace
            self.put({"apiVersion": api_version, "kind": kind, "metadata": meta})
        self.objects[key]["status"] = copy.deepcopy(status)
        return self.objects[key]

    def add_pod(
        self,
        namespace: str,
        name: str,
        labels: dict[str, str],
        phase: str = "Running",
        ready: bool = True,
        waiting_reason: str | None = None,
        restart_count: int = 0,
        *,
        container: str = "tensorflow",
        waiting_message: str = "",
        unschedulable: str | None = None,
        exit_code: int | None = None,
        deleting: bool = False,
        owner_kind: str | None = None,
    ) -> dict[str, Any]:
        """A pod with one container. ``waiting_reason`` (e.g. ImagePullBackOff) puts the
        container in ``state.waiting``; ``exit_code`` in ``state.terminated``;
        ``unschedulable`` sets PodScheduled=False with that message."""
        if waiting_reason:
            state: dict[str, Any] = {
                "waiting": {"reason": waiting_reason, "message": waiting_message}
            }
        elif exit_code is not None:
            state = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                }
            }
        elif phase == "Running":
            state = {"running": {"startedAt": self.clock.timestamp()}}
        else:
            state = {"waiting": {"reason": "ContainerCreating"}} if phase == "Pending" else {}
        scheduled: dict[str, Any] = {"type": "PodScheduled", "status": "True"}
        if unschedulable is not None:
            scheduled = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable,
            }
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": [
                scheduled,
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        }
        if unschedulable is None:
            status["containerStatuses"] = [
                {
                    "name": container,
                    "ready": ready and phase == "Running",
                    "restartCount": restart_count,
                    "state": state,
                }
            ]
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
        if deleting:
            meta["deletionTimestamp"] = self.clock.timestamp()
        if owner_kind:
            meta["ownerReferences"] = [{"kind": owner_kind, "name": name.rsplit("-", 1)[0]}]
        return self.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": {"containers": [{"name": container}]},
                "status": status,
            }
        )

    def remove(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Drop an object without recording a delete (the cluster did it, not the code)."""
        self.objects.pop((api_version, kind, namespace, name), None)

    def add_event(
        self,
        namespace: str,
        involved_name: str,
        reason: str,
        message: str,
        *,
        type: str = "Warning",
        kind: str = "Pod",
        count: int = 1,
    ) -> dict[str, Any]:
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved_name}.{len(self.event_list)}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": involved_name, "namespace": namespace},
            "reason": reason,
            "message": message,
            "type": type,
            "count": count,
            "lastTimestamp": self.clock.timestamp(),
        }
        self.event_list.append(event)
        return event

    def set_log(
        self, pod: str, text: str, container: str | None = None, *, previous: bool = False
    ) -> None:
        """The log of ``pod`` (of one container, or of any container when None);
        ``previous``: of the container's last terminated run."""
        self.log_texts[(pod, container, previous)] = text

    def serve_proxy(
        self,
        namespace: str,
        service: str,
        port: int,
        handler: Callable[[str, dict[str, str]], bytes],
    ) -> None:
        """``handler(path, params)`` answers ``proxy_get`` to ``service:port`` (it may raise
        ``ProxyError``, as an error answer would); unregistered services answer 404."""
        self.proxies[(namespace, service, port)] = handler

    # -- the Kube Protocol

    def server(self) -> str:
        self._call("server")
        return self.server_url

    def ca(self) -> str:
        self._call("ca")
        return self.ca_pem

    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = True
    ) -> dict[str, Any]:
        self._call("apply", obj, dry_run)
        obj = copy.deepcopy(obj)
        if dry_run:
            self.dry_runs.append(obj)
            return copy.deepcopy(obj)
        key = self.key_of(obj)
        old = self.objects.get(key)
        self.forced.append(force)
        fields = (old or {}).get("metadata", {}).get("managedFields") or []
        others = {m.get("manager") for m in fields}
        if old is not None and not force and others - {"distml"}:
            # The API server's answer to a server-side apply over another manager's fields.
            raise KubeError(f"apply {key}: Apply failed with conflicts with {sorted(others)}")
        if old is not None and "status" not in obj and "status" in old:
            obj["status"] = old["status"]
        if old is not None:
            meta = obj.setdefault("metadata", {})
            for field in ("creationTimestamp", "uid"):
                if field in old.get("metadata", {}):
                    meta.setdefault(field, old["metadata"][field])
        self.applied.append(copy.deepcopy(obj))
        return copy.deepcopy(self.put(obj))

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        self._call("get", api_version, kind, name, namespace)
        found = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        self._call("list", api_version, kind, namespace, label_selector)
        return [
            copy.deepcopy(obj)
            for (av, k, ns, _), obj in self.objects.items()
            if av == api_version
            and k == kind
            and (namespace is None or ns == namespace)
            and matches((obj.get("metadata") or {}).get("labels") or {}, label_selector)
        ]

    def answer_create(self, kind: str, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """``answer(obj)`` is the ``status`` the API server gives a created ``kind`` (a
        review: SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview)."""
        self.create_answers[kind] = answer

    def serve_kind(self, api_version: str, kind: str) -> None:
        """API discovery answers ``kind`` at ``api_version`` as served (its CRD is there)."""
        self.served_kinds.add((api_version, kind))

    def served(self, api_version: str, kind: str) -> bool:
        self._call("served", api_version, kind)
        return (api_version, kind) in self.served_kinds or any(
            (av, k) == (api_version, kind) for av, k, _, _ in self.objects
        )

    def create(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        self._call("create", obj, dry_run)
        obj = copy.deepcopy(obj)
        self.created.append(obj)
        answer = self.create_answers.get(obj["kind"], DEFAULT_REVIEWS.get(obj["kind"]))
        if answer is not None:  # a review: answered, never stored
            return {**obj, "status": answer(obj)}
        key = self.key_of(obj)
        if key in self.objects:
            raise KubeError(f"create {key}: already exists", status=409)
        if dry_run:
            self.dry_runs.append(obj)
            return obj
        self.applied.append(copy.deepcopy(obj))
        return copy.deepcopy(self.put(obj))

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
    ) -> bool:
        self._call("delete", api_version, kind, name, namespace)
        key = (api_version, kind, namespace, name)
        if key not in self.objects:
            return False
        have = self.objects[key].get("metadata", {}).get("uid")
        if uid and have != uid:  # the API server's answer to a failed precondition
            raise KubeError(
                f"delete {kind} {namespace}/{name} failed: Precondition failed: UID in "
                f"precondition: {uid}, UID in object meta: {have}",
                status=409,
            )
        del self.objects[key]
        self.deleted.append(key)
        return True

    def logs(
        self,
        pod: str,
        namespace: str,
        container: str | None = None,
        tail: int = 40,
        *,
        previous: bool = False,
    ) -> str:
        self._call("logs", pod, namespace, container, tail)
        self.log_requests.append((pod, namespace, container, tail))
        texts = self.log_texts
        text = texts.get((pod, container, previous), texts.get((pod, None, previous), ""))
        lines = text.splitlines()[-tail:] if tail else text.splitlines()
        return "\n".join(lines) + ("\n" if lines else "")

    def events(self, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
        self._call("events", namespace, name)
        return [
            copy.deepcopy(e)
            for e in self.event_list
            if e["metadata"]["namespace"] == namespace
            and (name is None or e["involvedObject"]["name"] == name)
        ]

    def proxy_get(
        self, namespace: str, service: str, port: int, path: str, params: dict[str, str]
    ) -> bytes:
        self._call("proxy_get", namespace, service, port, path, dict(params))
        handler = self.proxies.get((namespace, service, port))
        if handler is None:  # what the API server answers for a Service that is not there
            message = f'services "{service}" not found'
            raise ProxyError(
                f"GET {path} on Service {namespace}/{service}:{port}: HTTP 404: {message}",
                status=404,
                body=json.dumps({"kind": "Status", "message": message, "code": 404}).encode(),
            )
        return handler(path, dict(params))

    # -- conveniences for assertions

    def kinds_applied(self) -> list[str]:
        return [f"{o['kind']}/{o['metadata']['name']}" for o in self.applied]

    def names(self, kind: str) -> list[str]:
        return [name for (_, k, _, name) in self.objects if k == kind]


def no_real_time(started: float, limit: float = 2.0) -> bool:
    """True when less than ``limit`` real seconds passed since ``started`` (time.monotonic)."""
    return time.monotonic() - started < limit


def conditions_status(*conds: tuple[str, str], **extra: Any) -> dict[str, Any]:
    """``conditions_status(("Ready", "True"), url=...)`` →
    ``{"conditions": [{"type": "Ready", "status": "True"}], "url": ...}``."""
    return {"conditions": [{"type": t, "status": s} for t, s in conds], **extra}
