"""The real upstream install manifests (pinned in ``k8s/install/upstream.lock.json``, had
through ``k8s.install.upstream_files``: ``$DISTML_UPSTREAM_DIR``, the cache or a download)
and a cluster that
`up`'s install plan runs against: every ``kubectl apply`` reads the file its URL names,
every ``kubectl patch`` changes what was applied, every wait is recorded.

A URL that the lock does not pin fails loudly: nothing about that version can be checked. A
pinned file that cannot be had here skips the test, saying what to set.
"""

from __future__ import annotations

import copy
import json
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from invoke import Config, Result

from k8s.install import upstream_files, versions
from tests.support.fakekube import FakeKube, conditions_status, matches

NODE_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
PATCH_KINDS = {
    "deployment": "Deployment",
    "configmap": "ConfigMap",
    "service": "Service",
    "hpa": "HorizontalPodAutoscaler",
}


def index() -> dict[str, upstream_files.Pin]:
    """Every URL (and URL alias, and kustomize ref) the lock pins for the manifests."""
    return {url: pin for url, pin in upstream_files.by_url().items() if pin.mirror == "manifest"}


@cache
def _had(pin: upstream_files.Pin) -> Path | str:
    """The pin's verified local file, or why it cannot be had (asked once per process)."""
    try:
        return upstream_files.path(pin)
    except upstream_files.Unavailable as e:
        why = str(e)
    if pin.url in versions.PROMETHEUS_OPERATOR_CRDS.values():
        return _made(pin, why)
    return why


def _made(pin: upstream_files.Pin, why: str) -> Path | str:
    """The Prometheus Operator's CRDs, which cannot be downloaded here: made from the
    operator's Go module where Go is (about a minute once, then cached; a process, so
    ``--fast`` skips the test there), else why not. A file made that is not the pinned
    one fails the test."""
    from integration.kindbuild import operatorcrds
    from integration.kindbuild.run import GO, BuildError

    if not Path(GO).is_file():
        return f"{why} (with Go installed, the test makes it: {GO} not found)"
    try:
        operatorcrds.ensure()
    except operatorcrds.NotThePin as e:
        raise AssertionError(str(e)) from e
    except BuildError as e:
        return f"{why} (making it failed: {e})"
    return upstream_files.path(pin)


def have(pin: upstream_files.Pin) -> Path:
    """The pin's local file; skips the test (one line: what to set) when it cannot be had."""
    found = _had(pin)
    if isinstance(found, str):
        pytest.skip(found)
    return found


def file_of(url: str) -> Path:
    try:
        pin = index()[url]
    except KeyError:
        raise AssertionError(
            f"{url} is not pinned in {upstream_files.LOCK_FILE.name}: nothing about this "
            "version can be checked; add it (tools/upstream_lock.py) or pin a version there is"
        ) from None
    return have(pin)


@cache
def _objects(path: Path) -> tuple[dict[str, Any], ...]:
    with path.open() as f:
        return tuple(d for d in yaml.load_all(f, Loader=yaml.CSafeLoader) if d)


def objects(url: str) -> list[dict[str, Any]]:
    """The objects the file behind ``url`` holds (deep copies)."""
    return copy.deepcopy(list(_objects(file_of(url))))


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions) against labels; None: all."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    kind = obj["kind"]
    if kind == "Pod":
        return obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return obj["spec"]["template"].get("spec") or {}
    return None


@dataclass
class Step:
    """One thing the plan did: ``apply`` (a URL or one of our objects), ``patch``, ``wait``."""

    what: str
    command: str = ""
    url: str = ""
    selector: str | None = None
    objects: list[dict[str, Any]] = field(default_factory=list)
    namespace: str | None = None
    names: list[str] | None = None
    target: dict[str, Any] | None = None  # a patch's object as it was before the patch


class PlanCluster:
    """A cluster for `up`'s install plan: a FakeKube plus the context that runs kubectl."""

    def __init__(self, provider: str, baseline: list[dict[str, Any]]) -> None:
        self.kube = PlanKube(self)
        self.steps: list[Step] = []
        self.provider = provider
        self.mode = ""  # set by whoever runs the plan
        self.with_argo = False  # likewise
        for obj in baseline:
            self.store(obj)

    # ------------------------------------------------------------------ the store
    def store(self, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if obj["kind"] in ("Deployment", "StatefulSet"):
            obj["status"] = conditions_status(("Available", "True"))
        if meta.get("namespace") is None and self._namespaced(obj):
            meta["namespace"] = "default"
        self.kube.put(obj)

    @staticmethod
    def _namespaced(obj: dict[str, Any]) -> bool:
        cluster_scoped = {
            "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
            "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass",
            "APIService", "StorageClass", "ClusterIssuer", "ClusterServingRuntime",
            "ClusterStorageContainer", "Node",
        }  # fmt: skip
        return obj["kind"] not in cluster_scoped

    def find(self, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        for (_, k, ns, n), obj in self.kube.objects.items():
            if k == kind and n == name and ns == namespace:
                return obj
        return None

    def all(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [o for (_, k, _, _), o in self.kube.objects.items() if kind in (None, k)]

    # ------------------------------------------------------------------ c.run
    def run(self, command: str, **_: Any) -> Result:
        words = shlex.split(command)
        assert words[0] == "kubectl", f"unexpected command in the install plan: {command}"
        args = words[3:] if words[1] == "--context" else words[1:]
        if "apply" in args:
            return self._apply(command, args)
        if "patch" in args:
            return self._patch(command, args)
        raise AssertionError(f"unexpected kubectl command in the install plan: {command}")

    def _apply(self, command: str, args: list[str]) -> Result:
        url = args[args.index("-f") + 1] if "-f" in args else args[args.index("-k") + 1]
        selector = args[args.index("-l") + 1] if "-l" in args else None
        objs = objects(url)
        if selector:
            objs = [o for o in objs if matches(o["metadata"].get("labels") or {}, selector)]
        if "-n" in args:  # kubectl -n: the namespace of the file's namespaced objects
            namespace = args[args.index("-n") + 1]
            for obj in objs:
                if not self._namespaced(obj):
                    continue
                have = obj["metadata"].setdefault("namespace", namespace)
                if have != namespace:  # kubectl refuses the whole apply
                    raise AssertionError(
                        f"`{command}`: {obj['kind']} {obj['metadata']['name']} names namespace "
                        f"{have}, not {namespace}"
                    )
        self.steps.append(Step("apply", command, url=url, selector=selector, objects=objs))
        if not objs:  # what kubectl says, and exits 1
            return Result(command=command, exited=1, stderr="error: no objects passed to apply")
        for obj in objs:
            self.store(obj)
        return Result(command=command, exited=0)

    def _patch(self, command: str, args: list[str]) -> Result:
        namespace = args[args.index("-n") + 1]
        at = args.index("patch")
        kind, name = PATCH_KINDS[args[at + 1]], args[at + 2]
        body = json.loads(args[args.index("-p") + 1])
        patch_type = args[args.index("--type") + 1] if "--type" in args else "strategic"
        target = self.find(kind, name, namespace)
        self.steps.append(Step("patch", command, namespace=namespace, names=[name], target=target))
        if target is None:
            raise AssertionError(
                f"`{command}` patches {kind} {namespace}/{name}, which nothing applied"
            )
        patched = apply_patch(target, body, patch_type)
        self.kube.put(patched)
        self.steps[-1].objects = [patched]
        return Result(command=command, exited=0)

    # ------------------------------------------------------------------ waits
    def wait(self, kube: Any, namespace: str, names: list[str] | None = None, **_: Any) -> None:
        self.steps.append(Step("wait", namespace=namespace, names=names))

    def ours(self, objs: list[dict[str, Any]], what: str = "ours") -> None:
        """Objects the plan creates itself (through the client, or later tasks)."""
        self.steps.append(Step(what, objects=copy.deepcopy(objs)))
        for obj in objs:
            self.store(obj)


class PlanKube(FakeKube):
    """The client seam: ``apply`` records one of our objects as a plan step."""

    def __init__(self, cluster: PlanCluster) -> None:
        super().__init__()
        self._cluster = cluster

    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = True
    ) -> dict[str, Any]:
        if not dry_run:
            self._cluster.ours([obj], "client apply")
        else:
            self._cluster.steps.append(Step("client dry-run", objects=[copy.deepcopy(obj)]))
        return copy.deepcopy(obj)


def plan_context(cluster: PlanCluster) -> Any:
    """An invoke Context whose ``run`` is the plan cluster's."""

    class Ctx:
        config = Config(overrides={"run": {"dry": False}})

        def run(self, command: str, **kwargs: Any) -> Result:
            return cluster.run(command, **kwargs)

    return Ctx()


def apply_patch(obj: dict[str, Any], patch: Any, patch_type: str) -> dict[str, Any]:
    """kubectl patch: ``merge`` (RFC 7386), ``json`` (add/replace) or ``strategic``
    (lists of named items, such as containers, merged by name)."""
    obj = copy.deepcopy(obj)
    if patch_type == "json":
        for op in patch:
            assert op["op"] in ("add", "replace"), op
            *parents, last = op["path"].strip("/").split("/")
            node: Any = obj
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if last == "-":
                node.append(op["value"])
            elif isinstance(node, list):
                node[int(last)] = op["value"]
            else:
                node[last] = op["value"]
        return obj
    return _merge(obj, patch, strategic=patch_type == "strategic")


def _merge(base: Any, patch: Any, *, strategic: bool) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = _merge(base.get(k), v, strategic=strategic)
        return out
    named = isinstance(patch, list) and all(isinstance(x, dict) and "name" in x for x in patch)
    if strategic and isinstance(base, list) and named:
        out = [dict(x) for x in base]
        for item in patch:
            i = next((i for i, x in enumerate(out) if x.get("name") == item["name"]), None)
            if i is None:
                out.append(item)
            else:
                out[i] = _merge(out[i], item, strategic=True)
        return out
    return copy.deepcopy(patch)


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def baseline(provider: str) -> list[dict[str, Any]]:
    """The namespaces every new cluster has (what each provider runs in them is in
    k8s.install.capacity.PROVIDER_PODS)."""
    return [_namespace("default"), _namespace("kube-system")]
