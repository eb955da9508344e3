"""Cluster providers: k3d (the lab, default), kind (integration tests), minikube.

Each provider knows its CLI commands; every command goes through ``c.run`` so
``invoke --dry`` prints it and tests check it as an exact string. Read-only queries
(does the cluster exist, is the image on the node) run even under ``--dry``: they touch
nothing, and they make the dry run print what a real run would do.

All three make a single-node cluster on purpose: the PVC is ReadWriteOnce on a
node-local StorageClass (local-path / standard), so every pod that mounts it (workers,
selection, predictors) must land on the node of its first consumer. A multi-node cluster
needs RWX storage instead (docs/cluster.md: "One node, on purpose").
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from k8s.install import versions
from k8s.providers.base import Provider, query


def _node_has_image(c: Any, docker: str, node: str, image: str) -> bool:
    ok, out = query(c, f"{docker} exec {node} crictl images -o json")
    if not ok:
        return False
    try:
        images = json.loads(out).get("images", [])
    except ValueError:
        return False
    # The node lists an imported `distml:<hash>` as `docker.io/library/distml:<hash>`.
    tags = (t for i in images for t in i.get("repoTags") or [])
    return any(t == image or t.endswith(f"/{image}") for t in tags)


class K3d(Provider):
    default_node_image = versions.K3S_IMAGE

    @property
    def context(self) -> str:
        return f"k3d-{self.cluster}"

    @property
    def node(self) -> str:
        return f"k3d-{self.cluster}-server-0"

    @property
    def install_hint(self) -> str:
        return "install k3d: https://k3d.io/#installation"

    def exists(self, c: Any) -> bool:
        ok, out = query(c, "k3d cluster list -o json")
        try:
            return ok and any(x.get("name") == self.cluster for x in json.loads(out or "[]"))
        except ValueError:
            return False

    def create(self, c: Any, workdir: Path) -> None:
        # Traefik off: Istio's gateway (knative mode) or our LoadBalancer Service (standard
        # mode) takes port 80 through k3s's ServiceLB, mapped to the host's ingress port.
        c.run(
            f"k3d cluster create {self.cluster} --image {shlex.quote(self.nodes_run)} "
            "--servers 1 --agents 0 "
            "--k3s-arg '--disable=traefik@server:*' "
            f"-p '{self.ingress_port}:80@loadbalancer' --wait --timeout 300s"
        )

    @property
    def delete_command(self) -> str:
        return f"k3d cluster delete {self.cluster}"

    def has_image(self, c: Any, image: str) -> bool:
        return _node_has_image(c, self.docker, self.node, image)

    def import_image(self, c: Any, image: str, workdir: Path) -> None:
        tar = self._save(c, image, workdir)
        c.run(f"k3d image import {tar} -c {self.cluster}")
        c.run(f"rm -f {tar}")


class Kind(Provider):
    default_node_image = versions.KIND_NODE_IMAGE

    @property
    def context(self) -> str:
        return f"kind-{self.cluster}"

    @property
    def node(self) -> str:
        return f"{self.cluster}-control-plane"

    @property
    def install_hint(self) -> str:
        return "install kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"

    def exists(self, c: Any) -> bool:
        ok, out = query(c, "kind get clusters")
        return ok and self.cluster in out.split()

    def config_yaml(self) -> str:
        # kind has no LoadBalancer: the ingress (Istio gateway or our Service) is a
        # NodePort, mapped to the host port here; mappings can only be set at creation.
        return (
            "kind: Cluster\n"
            "apiVersion: kind.x-k8s.io/v1alpha4\n"
            "nodes:\n"
            "  - role: control-plane\n"
            "    extraPortMappings:\n"
            f"      - containerPort: {self.ingress_node_port}\n"
            f"        hostPort: {self.ingress_port}\n"
            "        protocol: TCP\n"
        )

    def create(self, c: Any, workdir: Path) -> None:
        config = workdir / "kind-config.yaml"
        if not c.config.run.dry:
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(self.config_yaml())
        c.run(
            f"kind create cluster --name {self.cluster} --image {shlex.quote(self.nodes_run)} "
            f"--config {shlex.quote(str(config))} --wait 300s"
        )

    @property
    def delete_command(self) -> str:
        return f"kind delete cluster --name {self.cluster}"

    def has_image(self, c: Any, image: str) -> bool:
        return _node_has_image(c, self.docker, self.node, image)

    def import_image(self, c: Any, image: str, workdir: Path) -> None:
        tar = self._save(c, image, workdir)
        c.run(f"kind load image-archive {tar} --name {self.cluster}")
        c.run(f"rm -f {tar}")


class Minikube(Provider):
    """minikube's docker driver, as the second design document runs it, with containerd
    in the node (``--container-runtime containerd --cni bridge``: one runtime and one CNI
    on every machine, and kubelet's images are containerd's, as on kind and k3d).

    Its state (profiles, certificates, downloads) lives in the work dir's own
    ``MINIKUBE_HOME`` (:attr:`home`), never in the user's ``~/.minikube``: ``down`` deletes
    this profile there and nothing of the user's other minikube clusters. ``minikube``
    by hand needs the same variable (docs/cluster.md, "minikube")."""

    # minikube's own kicbase, which its release pins; ``cluster.node_image`` names another
    # (``--base-image``), such as the offline one integration/kindbuild makes.
    default_node_image = ""

    @property
    def context(self) -> str:
        return self.cluster

    @property
    def home(self) -> Path:
        if self.workdir is None:
            raise ValueError("minikube's home is in the work dir: give the provider one")
        return Path(self.workdir).resolve() / "minikube"

    @property
    def cli(self) -> str:
        """``minikube`` with this work dir's home: every command below starts with it."""
        return f"MINIKUBE_HOME={shlex.quote(str(self.home))} minikube"

    @property
    def install_hint(self) -> str:
        return "install minikube: https://minikube.sigs.k8s.io/docs/start/"

    def exists(self, c: Any) -> bool:
        ok, out = query(c, f"{self.cli} profile list -o json")
        try:
            valid = json.loads(out or "{}").get("valid") or []
        except ValueError:
            return False
        return ok and any(p.get("Name") == self.cluster for p in valid)

    def create(self, c: Any, workdir: Path) -> None:
        # "max": what the Docker engine offers. A fixed "--memory 8g" is refused when the
        # engine reports less, and an 8 GB engine reports about 7.7 GiB.
        node = ""
        if self.node_image:
            # A node image of one's own holds its images (the offline one does): no preload
            # tarball (kicbase's, unpacked with lz4) and no image cache on the host.
            node = (
                f" --base-image {shlex.quote(self.node_image)} --preload=false --cache-images=false"
            )
        # As root (CI containers, these VMs) minikube refuses its docker driver unless forced.
        force = " --force" if os.geteuid() == 0 else ""
        c.run(
            f"{self.cli} start -p {self.cluster} --driver docker "
            "--container-runtime containerd --cni bridge "
            f"--kubernetes-version {versions.MINIKUBE_KUBERNETES_VERSION} "
            f"--cpus max --memory max{node}{force}"
        )

    @property
    def delete_command(self) -> str:
        return f"{self.cli} delete -p {self.cluster}"

    def has_image(self, c: Any, image: str) -> bool:
        ok, out = query(c, f"{self.cli} -p {self.cluster} image ls")
        return ok and any(line == image or line.endswith(f"/{image}") for line in out.split())

    def import_image(self, c: Any, image: str, workdir: Path) -> None:
        # From a tar: minikube loads a file straight into the node, where it would read an
        # image from the engine into memory whole (4.4 GiB for distml's 2 GB) and keep a
        # compressed copy in its home's cache.
        tar = self._save(c, image, workdir)
        c.run(f"{self.cli} -p {self.cluster} image load {tar}")
        c.run(f"rm -f {tar}")

    def ingress_url(self, c: Any) -> str:
        ok, out = query(c, f"{self.cli} -p {self.cluster} ip")
        host = out.strip() if ok and out.strip() else "MINIKUBE_IP"
        return f"http://{host}:{self.ingress_node_port}"
