"""The offline node: kind's node image plus everything ``up`` would otherwise pull.

On a machine with no registry, ``up --serving-mode standard`` (and ``--with-argo``)
applies the release manifests unchanged, and their pods name images by tag. This image is
:mod:`integration.kindbuild.nodeimage`'s node with every controller image built here
(:mod:`integration.kindbuild.controllers`: the standard-mode stack, Argo and the monitoring
stack) imported into containerd and pinned, and the ones a manifest pulls ``Always`` also
in a registry mirror inside the node (:mod:`integration.kindbuild.mirror`). A cluster made
from it (``cluster.node_image``) needs no load step and leaves nothing behind when deleted.

One more unit is for these machines' network: their egress answers *any* outbound TCP
443, even to a Service's ClusterIP. A connection the API server opens to a Service
before kube-proxy has programmed it (metrics-server's APIService, installed with its
Service in one apply) leaves the node and is answered 404 by that proxy, and the API
server keeps the HTTP/2 connection: the metrics API stays ``FailedDiscoveryCheck`` and
the HPA never scales. ``distml-service-guard`` rejects (TCP reset) what is still addressed
to the Service range after kube-proxy's DNAT, as a network without that proxy would
refuse it, so the API server retries and reaches the Service once it is programmed.
"""

from __future__ import annotations

from pathlib import Path

from integration.kindbuild import cache, controllers, docker, mirror, nodeimage, pins
from integration.kindbuild.run import run

TAG = f"{nodeimage.TAG}-stack"
# kind v0.29's default serviceSubnet (pkg/apis/config/v1alpha4/default.go); distml's kind
# config keeps it.
SERVICE_SUBNET = "10.96.0.0/16"
GUARD_NAME = "distml-service-guard.service"


def guard_unit(subnet: str) -> str:
    """The unit that resets TCP connections still addressed to ``subnet`` after DNAT."""
    reject = f"-d {subnet} -p tcp -j REJECT --reject-with tcp-reset"
    return f"""[Unit]
Description=distml: refuse connections to unprogrammed Service IPs (see stacknode.py)
Before=containerd.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/iptables -A OUTPUT {reject}
ExecStart=/usr/sbin/iptables -A FORWARD {reject}

[Install]
WantedBy=multi-user.target
"""


def install_guard(container: str, subnet: str = SERVICE_SUBNET) -> None:
    """The guard unit for ``subnet`` into builder ``container``, enabled."""
    path = f"/etc/systemd/system/{GUARD_NAME}"
    unit = guard_unit(subnet).encode()
    run([docker.DOCKER, "exec", "-i", container, "tee", path], stdin=unit, capture=True)
    wants = "/etc/systemd/system/multi-user.target.wants"
    nodeimage.exec_in(container, f"ln -sf ../{GUARD_NAME} {wants}/{GUARD_NAME}")


def _fill(container: str, archives: list[Path], always: list[str]) -> None:
    nodeimage.start_containerd(container)
    nodeimage.import_archives(container, archives)
    mirror.bake(container, nodeimage.exec_in, always)
    nodeimage.stop_containerd(container)
    install_guard(container)


def ensure() -> cache.Result:
    """``distml-kind/node:<kubernetes version>-stack`` in the engine (and cached)."""
    node = nodeimage.ensure()
    specs = controllers.controllers()
    archives = [controllers.ensure(s).path / "image.tar" for s in specs]
    always = sorted(s.image for s in specs if s.pull_always)
    registry = mirror.binary()
    stamps = [node.path / "image.tar", registry.path / "docker-registry", *archives]
    # Which images the mirror holds is an input too (a recipe key leaves pull policy out).
    key = nodeimage.inputs_key(
        f"{nodeimage.TAG} always={','.join(always)}",
        stamps,
        Path(__file__),
        Path(mirror.__file__),
    )

    def build(out: Path) -> None:
        docker.ensure_loaded([nodeimage.TAG], node.path / "image.tar")
        nodeimage.build_from(nodeimage.TAG, TAG, out, lambda c: _fill(c, archives, always))

    result = cache.cached("node-stack", f"{pins.KUBERNETES}-{key}", build)
    docker.ensure_loaded([TAG], result.path / "image.tar")
    return result
