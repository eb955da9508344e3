"""Pushing the project image to a registry, for clusters that pull it
(``invoke build --push REGISTRY[/REPO]``; the ``existing`` runtime's pods run the pushed
name). The tag stays the content hash: a pushed name says which code it runs."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any

from runtime.image import ImageError

REGISTRY_SETTING = "cluster.registry (INVOKE_CLUSTER_REGISTRY)"
# A registry host (a name or IPv4 address, an optional port) and an optional repository
# path of lower-case components, as the distribution spec's reference grammar allows.
_HOST = (
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = re.compile(rf"^{_HOST}(?::[0-9]{{1,5}})?(?:/{_COMPONENT})*$")
MAX_REFERENCE = 255
# `docker push` ends with ``<tag>: digest: sha256:<64 hex> size: <n>``: what was pushed.
_DIGEST = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")


def check_registry(text: str) -> str:
    """``REGISTRY[/REPO]`` without a scheme, a tag or a trailing slash (ValueError says
    what is wrong)."""
    text = str(text).strip()
    if "://" in text:
        raise ValueError(
            f"registry {text!r}: leave out the scheme (e.g. localhost:5001 or "
            "ghcr.io/team); a plain-HTTP registry is set up in Docker and the cluster "
            "(docs/cluster.md)"
        )
    if not _REGISTRY.match(text) or len(text) > MAX_REFERENCE - 30:
        raise ValueError(
            f"registry {text!r} is not REGISTRY[/REPO]: a host with an optional port, then "
            "lower-case path components (e.g. localhost:5001, registry.example.com/ml)"
        )
    port = re.search(r":([0-9]+)", text.split("/", 1)[0])
    if port and not 0 < int(port[1]) < 65536:
        raise ValueError(f"registry {text!r}: port {port[1]} is not a TCP port")
    return text


def pushed_name(registry: str, local: str) -> str:
    """``local`` (``distml:<hash>``) as the registry names it."""
    return f"{check_registry(registry)}/{local}"


def pushed_digest(output: str) -> str | None:
    """The manifest digest `docker push` printed last (None when it printed none)."""
    found = _DIGEST.findall(output or "")
    return found[-1] if found else None


def pinned(remote: str, digest: str | None) -> str:
    """``remote@digest``: on a shared registry a tag can be pushed over by anyone; the
    digest names exactly what this push sent (the tag stays, for people to read)."""
    return f"{remote}@{digest}" if digest else remote


def push(c: Any, docker: str, local: str, registry: str, out: Callable[[str], None] = print) -> str:
    """Tag ``local`` for ``registry`` and push it (layers the registry has are skipped);
    return the pushed name, pinned to the digest the push reported."""
    remote = pushed_name(registry, local)
    c.run(f"{docker} tag {local} {shlex.quote(remote)}")
    out(f"pushing {remote}")
    result = c.run(f"{docker} push {shlex.quote(remote)}", warn=True)
    if not result.ok:
        raise ImageError(
            f"pushing {remote} failed (exit {result.exited}). A registry on plain HTTP "
            "other than localhost must be in Docker's insecure-registries "
            "(/etc/docker/daemon.json); one that needs a login: `docker login "
            f"{registry.split('/', 1)[0]}` (docs/cluster.md)"
        )
    return pinned(remote, pushed_digest(str(getattr(result, "stdout", "") or "")))
