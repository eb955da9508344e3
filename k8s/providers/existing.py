"""A cluster distml did not create (``--runtime existing``): a kubeconfig context.

distml never creates or deletes it and changes nothing cluster-wide on it: the image comes
from a registry (``invoke build --push``), not side-loaded into nodes; the operators are
found, or installed only when asked (``up --install-operators``); ``down`` deletes only
distml's labelled objects. The context is named for the first ``up`` (the flag or the
setting, never kubectl's current context by default) and recorded in the work dir with the
cluster behind it (``runtime.cluster.identity``), so that switching kubectl's current
context, or a context of the same name in another kubeconfig, cannot point a task at
another cluster.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import DistmlError
from k8s.providers.base import Provider, query
from k8s.providers.settings import EXISTING

CONTEXT_SETTING = "cluster.context (INVOKE_CLUSTER_CONTEXT)"


class ExistingClusterError(DistmlError):
    """Something the existing-cluster runtime cannot do, and what to do instead."""


def current_context(c: Any) -> str:
    """kubectl's current context ("" when there is none)."""
    ok, out = query(c, "kubectl config current-context")
    return out.strip() if ok else ""


def known_contexts(c: Any) -> list[str]:
    ok, out = query(c, "kubectl config get-contexts -o name")
    return out.split() if ok else []


def choose_context(
    c: Any, *, asked: str, recorded: str | None, for_up: bool, for_down: bool = False
) -> tuple[str, str]:
    """(context, why): the one `up` recorded for this work dir; else, for `up` only, the
    one asked for (never kubectl's current one by default). `up` on another context than
    the recorded one is refused (the work dir's objects live there); the other tasks use
    the recorded one and say that the setting is ignored. No other task acts on a cluster
    this work dir has nothing on: `down` then has nothing to delete there (""), the rest
    are refused."""
    if recorded:
        if asked and asked != recorded:
            if for_up:
                raise ExistingClusterError(
                    f"this work dir was set up on context {recorded!r}, not {asked!r}: run "
                    "`invoke down` first, or use another work dir (INVOKE_WORKDIR)"
                )
            return recorded, (
                f"the context `invoke up` set up; {CONTEXT_SETTING} {asked!r} applies "
                "after `invoke down`"
            )
        return recorded, "the context `invoke up` set up"
    if not for_up:
        if for_down:
            return "", "none is set up for this work dir"
        raise ExistingClusterError(
            "no existing cluster is set up for this work dir: run `invoke up --runtime "
            "existing [--context NAME]` first"
        )
    if asked:
        return asked, "asked for"
    # Never kubectl's current context by default: it changes under the user's feet, and
    # `up` may install operators cluster-wide. Named once; recorded for the later tasks.
    current = current_context(c)
    raise ExistingClusterError(
        "name the cluster's context for the first `invoke up` on an existing cluster: "
        f"`invoke up --runtime existing --context NAME` (or {CONTEXT_SETTING})"
        + (f"; kubectl's current one is {current!r}" if current else "")
        + "; `kubectl config get-contexts` lists them"
    )


@dataclass
class Existing(Provider):
    """The cluster behind a kubeconfig context."""

    kube_context: str = ""
    takes_node_image = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.cluster = self.kube_context or "(no context)"

    @property
    def context(self) -> str:
        return self.kube_context

    @property
    def install_hint(self) -> str:
        return f"name a kubeconfig context: `invoke up --runtime {EXISTING} --context NAME`"

    def reach(self, c: Any) -> str:
        """The API server's version; ExistingClusterError with kubectl's words if the
        context does not answer."""
        if self.kube_context not in known_contexts(c):
            raise ExistingClusterError(
                f"kubectl has no context {self.kube_context!r}; "
                "`kubectl config get-contexts` lists the ones it has"
            )
        ok, out = query(c, self.kubectl("version -o json"))
        try:
            server = json.loads(out).get("serverVersion") or {}
        except ValueError:
            server = {}
        if not ok or not server:
            raise ExistingClusterError(
                f"the cluster of context {self.kube_context!r} does not answer: "
                f"`{self.kubectl('cluster-info')}` shows why"
            )
        return str(server.get("gitVersion") or "?")

    def exists(self, c: Any) -> bool:
        try:
            self.reach(c)
        except ExistingClusterError:
            return False
        return True

    def create(self, c: Any, workdir: Path) -> None:
        raise ExistingClusterError(
            f"distml does not create clusters on the {EXISTING} runtime; "
            f"context {self.kube_context!r} must answer"
        )

    def delete(self, c: Any) -> None:
        raise ExistingClusterError("distml never deletes a cluster it did not create")

    def has_image(self, c: Any, image: str) -> bool:
        return False  # pods pull it from the registry (runtime.registry)

    def import_image(self, c: Any, image: str, workdir: Path) -> None:
        raise ExistingClusterError(
            "an existing cluster pulls the image from a registry: "
            "`invoke build --push REGISTRY[/REPO]` (docs/cluster.md)"
        )

    def ingress_url(self, c: Any) -> str:
        return ""  # no host port mapped: the InferenceService's URL, or a port-forward

    def kubectl(self, args: str) -> str:
        if not self.kube_context:  # `--context ''` is kubectl's current context
            raise ExistingClusterError("no kubeconfig context named: " + self.install_hint)
        return f"kubectl --context {shlex.quote(self.kube_context)} {args}"
