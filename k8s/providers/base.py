"""What every cluster provider is (``Provider``: the lab's k3d, kind and minikube in
``k8s.providers.lab``, a cluster distml did not create in ``k8s.providers.existing``), and
the one way they ask the host a read-only question (``query``)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

CLUSTER_NAME = "dist-ml"


def query(c: Any, cmd: str) -> tuple[bool, str]:
    """Run a read-only command (also under --dry); (ok, stdout)."""
    result = c.run(cmd, hide=True, warn=True, dry=False)
    return bool(result.ok), result.stdout or ""


@dataclass
class Provider:
    """What differs between k3d, kind and minikube."""

    name: str
    cluster: str = CLUSTER_NAME
    ingress_port: int = 8080  # host port the cluster's ingress (gateway / LB) answers on
    ingress_node_port: int = 31080
    docker: str = "docker"
    # ``cluster.node_image`` (INVOKE_CLUSTER_NODE_IMAGE): a node image of the user's, e.g.
    # one built locally for an offline machine (docs/cluster.md); "" is the pinned one.
    node_image: str = ""
    # The work dir (state.json's): where a provider keeps files of its own (minikube's home).
    workdir: Path | None = None
    default_node_image: ClassVar[str] = ""
    takes_node_image: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.node_image and not self.takes_node_image:
            raise ValueError(
                f"cluster.node_image applies to the clusters distml creates, not {self.name}: "
                "unset INVOKE_CLUSTER_NODE_IMAGE (or node_image in invoke.yaml)"
            )

    @property
    def nodes_run(self) -> str:
        """The image the cluster's nodes run: the user's, else the pinned one."""
        return self.node_image or self.default_node_image

    @property
    def context(self) -> str:
        raise NotImplementedError

    @property
    def install_hint(self) -> str:
        raise NotImplementedError

    def exists(self, c: Any) -> bool:
        raise NotImplementedError

    def create(self, c: Any, workdir: Path) -> None:
        raise NotImplementedError

    @property
    def delete_command(self) -> str:
        """The command that deletes the cluster: what `down` runs, and what it tells a user
        to run by hand for a cluster it will not delete (one another work dir made)."""
        raise NotImplementedError

    def delete(self, c: Any) -> None:
        c.run(self.delete_command)

    def has_image(self, c: Any, image: str) -> bool:
        raise NotImplementedError

    def import_image(self, c: Any, image: str, workdir: Path) -> None:
        raise NotImplementedError

    def ingress_url(self, c: Any) -> str:
        """Where the cluster's ingress answers from the host."""
        return f"http://localhost:{self.ingress_port}"

    def kubectl(self, args: str) -> str:
        return f"kubectl --context {self.context} {args}"

    def _save(self, c: Any, image: str, workdir: Path) -> str:
        """Save the image to a tar: importing a tar works with Docker's containerd image
        store too, where a direct import fails with `content digest ... not found`."""
        tar = workdir / "build" / "distml-image.tar"
        if not c.config.run.dry:
            tar.parent.mkdir(parents=True, exist_ok=True)
        c.run(f"{self.docker} save -o {shlex.quote(str(tar))} {image}")
        return shlex.quote(str(tar))
